"""A CLI command typed while the daemon is still starting waits for its RPC.

Tried as a new user: `odf-node run &` then `odf-node dataset create ...` at once answered "the node
home is in use (daemon pid N)": the daemon holds the home's lock from its first instant but opens
its RPC last (after IPFS). The CLI now waits for the cookie of a *daemon* holder.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from node.compose import DaemonUnreachable, daemon_endpoint
from node.home_lock import HomeLock
from node.rpc.cookie import write_cookie


def test_waits_for_a_starting_daemon(tmp_path: Path) -> None:
    lock = HomeLock(tmp_path)
    lock.acquire_daemon()
    try:
        timer = threading.Timer(
            0.5, write_cookie, args=(tmp_path, "http://127.0.0.1:7373/rpc", "tok")
        )
        timer.start()
        t0 = time.monotonic()
        ep = daemon_endpoint(tmp_path)
        assert ep is not None and ep[1] == "tok"
        assert time.monotonic() - t0 >= 0.4
    finally:
        lock.release()


def test_no_daemon_means_offline(tmp_path: Path) -> None:
    assert daemon_endpoint(tmp_path) is None


def test_a_cli_holder_is_not_waited_for(tmp_path: Path) -> None:
    lock = HomeLock(tmp_path)
    lock.acquire_cli()
    try:
        assert daemon_endpoint(tmp_path) is None  # the offline path then reports the lock
    finally:
        lock.release()


def test_a_daemon_that_stops_while_starting_is_reported(tmp_path: Path) -> None:
    lock = HomeLock(tmp_path)
    lock.acquire_daemon()
    threading.Timer(0.3, lock.release).start()
    with pytest.raises(DaemonUnreachable, match="did not open its RPC"):
        daemon_endpoint(tmp_path)
