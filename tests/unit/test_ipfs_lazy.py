"""The embedded IPFS node started on first use (node/ipfs/lazy.py, ``[ipfs] start = "lazy"``):
one start whoever asks first and from whichever loop, failures retried after a pause, the
placeholder API URL resolved by the client, and what the port says before and after."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from node.adapters.ipfs import IpfsAdapter, LazyIpfs
from node.app.errors import Unavailable
from node.ipfs.client import IpfsError
from node.ipfs.lazy import NOT_STARTED, LazyStart, register, resolve_api, unregister


def _run(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """A sync test running ``test`` on a fresh loop (the suite has no asyncio plugin)."""

    @functools.wraps(test)
    def run() -> None:
        asyncio.run(test())

    return run


def _counting_start(calls: list[int], gate: asyncio.Event | None = None, fail: int = 0) -> Any:
    async def start() -> str:
        calls.append(1)
        if gate is not None:
            await gate.wait()
        if len(calls) <= fail:
            raise IpfsError("the IPFS node exited during start-up")
        return "http://127.0.0.1:5999"

    return start


@_run
async def test_concurrent_first_uses_wait_on_one_start() -> None:
    calls: list[int] = []
    gate = asyncio.Event()
    lazy = LazyStart(_counting_start(calls, gate), asyncio.get_running_loop())
    assert lazy.state == NOT_STARTED and not lazy.started
    waiters = [asyncio.ensure_future(lazy.ensure()) for _ in range(5)]
    await asyncio.sleep(0.05)
    assert lazy.state == "starting"
    gate.set()
    assert await asyncio.gather(*waiters) == ["http://127.0.0.1:5999"] * 5
    assert calls == [1]
    assert lazy.state == "running"
    assert await lazy.ensure() == "http://127.0.0.1:5999"
    assert calls == [1]


@_run
async def test_a_use_on_another_loop_starts_it_on_the_owning_loop() -> None:
    owner = asyncio.get_running_loop()
    ran_on: list[asyncio.AbstractEventLoop] = []

    async def start() -> str:
        ran_on.append(asyncio.get_running_loop())
        return "http://127.0.0.1:5998"

    lazy = LazyStart(start, owner)
    got: list[str] = []
    # As a pull on the transfer loop's thread does.
    t = threading.Thread(target=lambda: got.append(asyncio.run(lazy.ensure())))
    t.start()
    while t.is_alive():
        await asyncio.sleep(0.01)
    assert got == ["http://127.0.0.1:5998"] and ran_on == [owner]


@_run
async def test_a_cancelled_caller_does_not_cancel_the_start() -> None:
    calls: list[int] = []
    gate = asyncio.Event()
    lazy = LazyStart(_counting_start(calls, gate), asyncio.get_running_loop())
    first = asyncio.ensure_future(lazy.ensure())
    await asyncio.sleep(0.02)
    first.cancel()
    gate.set()
    assert await lazy.ensure() == "http://127.0.0.1:5999"
    assert calls == [1]


@_run
async def test_a_failed_start_is_retried_only_after_the_pause() -> None:
    calls: list[int] = []
    lazy = LazyStart(_counting_start(calls, fail=1), asyncio.get_running_loop(), retry_after_s=0.2)
    with pytest.raises(IpfsError):
        await lazy.ensure()
    with pytest.raises(IpfsError):  # within the pause: the same error, no new start
        await lazy.ensure()
    assert calls == [1]
    await asyncio.sleep(0.25)
    assert await lazy.ensure() == "http://127.0.0.1:5999"
    assert calls == [1, 1]


@_run
async def test_closed_refuses_to_start() -> None:
    calls: list[int] = []
    lazy = LazyStart(_counting_start(calls), asyncio.get_running_loop())
    await lazy.close()
    with pytest.raises(IpfsError, match="stopping"):
        await lazy.ensure()
    assert calls == []


@_run
async def test_the_client_resolves_the_placeholder() -> None:
    calls: list[int] = []
    lazy = LazyStart(_counting_start(calls), asyncio.get_running_loop())
    assert lazy.placeholder.startswith("http://127.0.0.1:0/")
    assert await resolve_api("http://127.0.0.1:5001") == "http://127.0.0.1:5001"
    register(lazy)
    try:
        assert await resolve_api(lazy.placeholder) == "http://127.0.0.1:5999"
    finally:
        unregister(lazy)
    assert await resolve_api(lazy.placeholder) == lazy.placeholder
    assert calls == [1]


@_run
async def test_the_port_starts_the_node_on_use_and_says_so_before() -> None:
    adapter: list[IpfsAdapter] = []

    class Recording(IpfsAdapter):
        async def connect(self, multiaddr: str) -> None:
            self.connected = multiaddr

    async def start() -> str:
        adapter.append(Recording("http://127.0.0.1:5997", {"peer_id": "12D3", "mode": "embedded"}))
        return "http://127.0.0.1:5997"

    lazy = LazyStart(start, asyncio.get_running_loop())
    port = LazyIpfs(lazy, lambda: adapter[0] if adapter else None)
    assert port.api_url == lazy.placeholder  # IPFS is on: pulls and publishes try it
    info = port.info()
    assert info is not None and info["state"] == NOT_STARTED and info["peer_id"] is None
    await port.connect("/ip4/127.0.0.1/tcp/4001/p2p/12D3")
    assert adapter[0].connected == "/ip4/127.0.0.1/tcp/4001/p2p/12D3"  # type: ignore[attr-defined]
    assert port.api_url == "http://127.0.0.1:5997"
    assert port.info() == {"peer_id": "12D3", "mode": "embedded"}
    adapter.clear()  # the daemon stopped it
    with pytest.raises(Unavailable):
        await port.connect("/ip4/127.0.0.1/tcp/4001")
