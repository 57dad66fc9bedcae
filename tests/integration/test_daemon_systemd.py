"""A real daemon under a test ``NOTIFY_SOCKET`` (a Unix datagram socket bound here) and
``WATCHDOG_USEC``: it reports each service starting, ``READY=1`` once all are up, ``WATCHDOG=1``
at half the watchdog interval from its event loop, and ``STOPPING=1`` on SIGTERM."""

from __future__ import annotations

import itertools
import socket
import tempfile
import time
from pathlib import Path

import pytest
from daemon_harness import NodeProcess

pytestmark = pytest.mark.integration

WATCHDOG_USEC = 600_000  # a ping every 0.3 s


def receive(sock: socket.socket, until: str, timeout: float) -> list[tuple[float, str]]:
    """Datagrams (arrival time, text) up to and including one containing ``until``."""
    got: list[tuple[float, str]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data = sock.recv(4096).decode()
        except TimeoutError:
            break
        got.append((time.monotonic(), data))
        if until in data.split("\n"):
            return got
    raise AssertionError(f"no {until!r} within {timeout} s; received {[m for _, m in got]}")


def test_ready_watchdog_and_stopping(tmp_path: Path) -> None:
    # A short directory: a Unix socket path must fit in 108 bytes.
    with tempfile.TemporaryDirectory(prefix="odf-sd-") as short:
        path = str(Path(short) / "notify")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        n = NodeProcess(
            tmp_path / "home",
            "systemd-node",
            config={"ipfs": {"mode": "none"}, "p2p": {"enabled": False}},
            env={"NOTIFY_SOCKET": path, "WATCHDOG_USEC": str(WATCHDOG_USEC)},
        )
        n.init()
        n.launch()
        try:
            start = receive(sock, "READY=1", 120)
            statuses = [m for _, m in start if m.startswith("STATUS=starting ")]
            assert statuses[0] == "STATUS=starting state" and statuses[-1] == "STATUS=starting rpc"
            ready = start[-1][1].split("\n")
            assert ready[0] == "READY=1" and ready[1].startswith("STATUS=ready: node did:key:")
            n.wait_ready(30)  # READY=1 came once the RPC served: it answers now
            pings = receive(sock, "WATCHDOG=1", 5)
            pings += receive(sock, "WATCHDOG=1", 5)
            pings += receive(sock, "WATCHDOG=1", 5)
            times = [t for t, m in pings if m == "WATCHDOG=1"]
            assert len(times) >= 3
            gaps = [b - a for a, b in itertools.pairwise(times)]
            # Half of WATCHDOG_USEC (0.3 s), give or take a loaded machine.
            assert all(0.15 < g < 2.0 for g in gaps), gaps
            assert n.proc is not None
            n.proc.terminate()
            stopping = receive(sock, "STOPPING=1", 60)
            assert stopping[-1][1] == "STOPPING=1\nSTATUS=stopping"
            assert n.proc.wait(60) == 0
        finally:
            n.stop()
            sock.close()
