"""A second node given a gossip port another node listens on is refused, not let in.

py-libp2p's TCP listener sets ``SO_REUSEPORT``, so without the check a second daemon started
with the first one's ``[p2p] port`` listened on it too (seen trying the product as a new user:
two ``127.0.0.1:7375`` listeners in ``ss -ltn``), and the kernel handed each incoming
connection to either node. Opens loopback sockets: run in a loopback-only namespace.
"""

from __future__ import annotations

import socket

import pytest

from p2p.libp2p_host import refuse_port_in_use
from p2p.transport import TransportError


def _listener(reuse_port: bool) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:  # as py-libp2p's listener does
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    return sock


@pytest.mark.parametrize("reuse_port", [True, False])
def test_a_listened_port_is_refused_naming_the_settings(reuse_port: bool) -> None:
    sock = _listener(reuse_port)
    port = sock.getsockname()[1]
    try:
        with pytest.raises(TransportError, match=r"--p2p-port, \[p2p\] port"):
            refuse_port_in_use("127.0.0.1", port)
    finally:
        sock.close()
    refuse_port_in_use("127.0.0.1", port)  # free again: no error


def test_a_port_left_in_time_wait_is_not_refused() -> None:
    """A daemon restarted at once finds its old connections in TIME_WAIT, not a listener."""
    server = _listener(reuse_port=True)
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = server.accept()
    accepted.close()  # the server side closes first: its socket on `port` enters TIME_WAIT
    client.close()
    server.close()
    refuse_port_in_use("127.0.0.1", port)
