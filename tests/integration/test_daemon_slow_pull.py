"""Two real daemons, and a pull slower than the protocol core's fetch timeout.

The owner announces an HTTP location that is really a proxy in this test process; while the
proxy is slow, every pull of the subscriber outlives the core's fetch timeout, the core abandons
the fetch and the daemon cancels the pull: nothing is committed and nothing is accepted. Once
the proxy is fast again, anti-entropy brings the announcement back, the pull completes and the
head is accepted — a head is never committed but left unaccepted.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession, web
from daemon_harness import NodeProcess
from netns import require_loopback_only

from coordinator.storage.repository import DatasetRepository

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

SNAPSHOT = """\
kind: DatasetSnapshot
version: 1
content:
  name: slow
  kind: Root
  metadata:
    - kind: AddPushSource
      sourceName: default
      read:
        kind: Csv
        header: true
        schema: ["city STRING", "population BIGINT"]
      merge:
        kind: Append
"""
FETCH_TIMEOUT_S = 3.0
DELAY_S = 1.5  # per proxied request: a first pull needs several, so it outlives the timeout


class SlowProxy:
    """A reverse proxy on 127.0.0.1 that can delay every response (in its own thread)."""

    def __init__(self) -> None:
        self.target = ""
        self.delay_s = DELAY_S
        self.requests = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()
        assert self._ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())
        self._loop.run_forever()

    async def _serve(self) -> None:
        self._session = ClientSession()
        app = web.Application()
        app.router.add_get("/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        self._ready.set()

    async def _forward(self, request: web.Request) -> web.Response:
        self.requests += 1
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        async with self._session.get(self.target + request.path_qs) as r:
            body = await r.read()
            return web.Response(status=r.status, body=body)

    def stop(self) -> None:
        async def close() -> None:
            await self._runner.cleanup()
            await self._session.close()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture()
def pair(tmp_path: Path) -> Iterator[tuple[NodeProcess, NodeProcess, SlowProxy]]:
    require_loopback_only()
    proxy = SlowProxy()
    proxy.start()
    owner = NodeProcess(
        tmp_path / "owner",
        "owner",
        config={
            "ipfs": {"mode": "none"},
            "http": {"public_url": f"http://127.0.0.1:{proxy.port}"},
            "p2p": {"anti_entropy_interval_s": 2.0},
        },
    )
    sub = NodeProcess(
        tmp_path / "sub",
        "sub",
        config={
            "ipfs": {"mode": "none"},
            "p2p": {"fetch_timeout_s": FETCH_TIMEOUT_S, "anti_entropy_interval_s": 2.0},
        },
    )
    try:
        for p in (owner, sub):
            p.init()
            p.launch()
        for p in (owner, sub):
            p.wait_ready()
        proxy.target = owner.call("node.status")["http_url"]
        yield owner, sub, proxy
    finally:
        for p in (owner, sub):
            p.stop()
        proxy.stop()


def _local_head(home: Path, did: str) -> str | None:
    from node.home import NodeHome

    repo: DatasetRepository = NodeHome(home).repository()
    if not repo.contains(did):
        return None
    head = repo.open(did).head()
    return str(head) if head else None


def _accepted(sub: NodeProcess, did: str) -> Any:
    rows = [s for s in sub.call("subscriptions.list") if s["did"] == did]
    return rows[0]["accepted_head"] if rows else None


def test_pull_slower_than_fetch_timeout_is_cancelled_then_retried_and_accepted(
    pair: tuple[NodeProcess, NodeProcess, SlowProxy], tmp_path: Path
) -> None:
    owner, sub, proxy = pair
    created = owner.call("dataset.create", snapshot_yaml=SNAPSHOT)
    did = created[0]["id"]
    csv = tmp_path / "a.csv"
    csv.write_text("city,population\nA,1\nB,2\n")
    ingest = owner.call("dataset.ingest", ref="slow", files=[str(csv)])
    head = ingest["new_head"]
    sub.call("peers.connect", multiaddr=owner.call("node.status")["p2p"]["listen_addrs"][0])
    sub.call("subscriptions.add", did=did)

    def abandoned() -> list[Any]:
        return [e for e in sub.call("node.events", kind="pull.abandoned") if e["did"] == did]

    sub.wait_for("an abandoned pull", abandoned, timeout=120)
    # While every pull outlives the timeout: no head is accepted, and none is committed.
    for _ in range(6):
        assert _accepted(sub, did) is None
        assert _local_head(sub.home, did) is None
        time.sleep(0.5)
    assert proxy.requests > 0
    proxy.delay_s = 0
    sub.wait_for("the head accepted", lambda: _accepted(sub, did) == head, timeout=120)
    assert _local_head(sub.home, did) == head
    sub.wait_for(
        "verification",
        lambda: any(s["verification"] == "verified" for s in sub.call("subscriptions.list")),
        timeout=120,
    )
