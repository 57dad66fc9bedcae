"""A user's ``connect ADDR`` dials ADDR, even to a peer the node is already connected to.

py-libp2p's ``host.connect`` returns at once for a connected peer without dialling anything, so
``odf-node connect`` with a wrong address of an already-connected peer used to report success
(and the node remembered the wrong address as the peer's, to redial after a restart). The
node's own connects keep the shortcut (``exact=False``). Real py-libp2p hosts on loopback.
"""

from __future__ import annotations

import asyncio
import socket

import pytest
from netns import require_loopback_only

from p2p.libp2p_host import Libp2pConfig, Libp2pTransport
from p2p.transport import TransportError

pytestmark = pytest.mark.integration


def _closed_port() -> int:
    """A loopback TCP port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_wrong_address_of_a_connected_peer_fails_and_the_right_one_works() -> None:
    require_loopback_only()

    async def scenario() -> None:
        a = Libp2pTransport(Libp2pConfig(node_seed=b"\x51" * 32))
        b = Libp2pTransport(Libp2pConfig(node_seed=b"\x52" * 32))
        try:
            await a.start()
            await b.start()
            right = a.listen_addrs()[0]
            assert await b.connect(right) == a.peer_id
            assert a.peer_id in b.connected_peers()
            wrong = f"/ip4/127.0.0.1/tcp/{_closed_port()}/p2p/{a.peer_id}"
            with pytest.raises(TransportError, match="cannot connect to"):
                await b.connect(wrong, exact=True)
            # The node's own connects (discovery, DHT, redial) leave a connected peer alone.
            assert await b.connect(wrong) == a.peer_id
            # The connection that exists is untouched, and the right address still "connects".
            assert a.peer_id in b.connected_peers()
            assert await b.connect(right) == a.peer_id
        finally:
            for t in (b, a):
                await t.stop()

    asyncio.run(scenario())
