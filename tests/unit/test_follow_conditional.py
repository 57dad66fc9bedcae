"""Conditional polls of ``refs/head`` (``docs/follow.md``): the transfer server's ``ETag`` and
``304 Not Modified``, and the poller's conditional probe against real aiohttp servers on
loopback (run inside ``unshare -rn`` like every test that listens).

An idle source must cost one small request per poll: the first probe learns the validator,
every later one sends it back and is answered 304 with no body.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import aiohttp
from aiohttp import web

from coordinator.identity import generate_private_key
from coordinator.metadata import model as m
from coordinator.metadata.snapshot import DatasetSnapshot
from coordinator.metadata.timestamp import Timestamp
from coordinator.multiformats import Multihash
from coordinator.storage.repository import DatasetRepository
from node.adapters.transfer import TransferAdapter
from node.app.follow import SourceFollower, _Source
from node.app.metrics import NodeMetrics
from node.transfer.server import make_app

T0 = Timestamp.parse("2024-01-01T00:00:00Z")
SNAPSHOT = DatasetSnapshot(
    name="alpha", kind=m.DatasetKind.ROOT, metadata=(m.SetInfo(description="d"),)
)

Seen = list[tuple[str, dict[str, str], int]]
"""Requests a server answered: path, the conditional headers sent, status."""


def _repo(tmp_path: Path) -> DatasetRepository:
    repo = DatasetRepository(
        tmp_path / "datasets",
        tmp_path / "keys",
        clock=lambda: T0,
        key_source=lambda: generate_private_key(b"\x01" * 32),
        durable=False,
    )
    repo.create_from_snapshot(SNAPSHOT)
    return repo


def _append(repo: DatasetRepository) -> Multihash:
    """Move ``alpha``'s head one block forward (as its owner's next commit would)."""
    ds = repo.open("alpha")
    st = ds.state()
    return ds.append(
        m.MetadataBlock(
            system_time=T0,
            prev_block_hash=st.head,
            sequence_number=st.sequence_number + 1,
            event=m.SetInfo(description=f"rev {st.sequence_number}"),
        )
    )


def _recording(app: web.Application) -> Seen:
    """Record every request ``app`` answers (its conditional headers and the status)."""
    seen: Seen = []

    async def record(request: web.Request, response: web.StreamResponse) -> None:
        cond = {
            k: v for k, v in request.headers.items() if k in ("If-None-Match", "If-Modified-Since")
        }
        seen.append((request.path, cond, response.status))

    app.on_response_prepare.append(record)
    return seen


@asynccontextmanager
async def _serving(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def _run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


# ---- the transfer server


def test_refs_head_names_the_head_in_its_etag_and_answers_304_to_a_match(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    head = str(repo.open("alpha").head())
    did = repo.resolve("alpha").id.as_did_str()

    async def go() -> None:
        async with _serving(make_app(repo)) as base, aiohttp.ClientSession() as http:

            async def get(path: str, inm: str | None = None) -> tuple[int, bytes, Any]:
                headers = {"If-None-Match": inm} if inm is not None else {}
                async with http.get(f"{base}/{path}", headers=headers) as r:
                    return r.status, await r.read(), r.headers

            status, body, hdrs = await get("alpha/refs/head")
            etag = f'"{head}"'
            assert (status, body.decode().strip()) == (200, head)
            assert hdrs["ETag"] == etag and hdrs["Cache-Control"] == "no-cache"
            assert "Last-Modified" not in hdrs  # the ETag is exact; a 1 s clock is not
            # A match (alone, in a list, or "*"), by alias or by DID: 304, no body, the ETag.
            for path in ("alpha/refs/head", f"{did}/refs/head"):
                for inm in (etag, f'"other", {etag}', "*"):
                    status, body, hdrs = await get(path, inm)
                    assert (status, body, hdrs["ETag"]) == (304, b"", etag), inm
            # Another tag, or a weak form of ours: the full answer.
            for inm in ('"other"', f"W/{etag}", head):
                status, body, _ = await get("alpha/refs/head", inm)
                assert (status, body.decode().strip()) == (200, head), inm
            # The head moves: the old tag no longer matches; the new head has its own tag.
            new = str(_append(repo))
            status, body, hdrs = await get("alpha/refs/head", etag)
            assert (status, body.decode().strip(), hdrs["ETag"]) == (200, new, f'"{new}"')
            assert (await get("alpha/refs/head", f'"{new}"'))[0] == 304

    _run(go)


def test_the_etag_names_the_served_head_not_the_stored_one(tmp_path: Path) -> None:
    """Under a trust policy the server serves the newest trusted head (``docs/trust.md``): the
    tag follows it, so a follower's 304 never hides a head the server starts serving."""
    repo = _repo(tmp_path)
    trusted = str(repo.open("alpha").head())
    newer = str(_append(repo))
    served = {"head": ""}
    app = make_app(repo, served_head=lambda _did: served["head"])

    async def go() -> None:
        async with _serving(app) as base, aiohttp.ClientSession() as http:
            url = f"{base}/alpha/refs/head"
            async with http.get(url) as r:
                assert r.status == 404  # nothing trusted yet
            served["head"] = trusted
            async with http.get(url, headers={"If-None-Match": f'"{newer}"'}) as r:
                assert (r.status, (await r.read()).decode()) == (200, trusted)
                assert r.headers["ETag"] == f'"{trusted}"'
            async with http.get(url, headers={"If-None-Match": f'"{trusted}"'}) as r:
                assert r.status == 304

    _run(go)


# ---- the poller's conditional probe


def test_probe_sends_the_validator_back_and_a_304_costs_no_body(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    head = str(repo.open("alpha").head())
    app = make_app(repo)
    seen = _recording(app)
    adapter = TransferAdapter(repo, lambda: None)

    async def go() -> None:
        async with _serving(app) as base:
            url = f"{base}/alpha"
            first = await adapter.probe_head(url, None, None)
            assert (first.changed, first.head, first.etag) == (True, head, f'"{head}"')
            assert (first.requests, first.bytes) == (1, len(head))
            idle = await adapter.probe_head(url, first.etag, first.last_modified)
            assert (idle.changed, idle.head, idle.etag) == (False, None, first.etag)
            assert (idle.requests, idle.bytes) == (1, 0)
            new = str(_append(repo))
            moved = await adapter.probe_head(url, idle.etag, idle.last_modified)
            assert (moved.changed, moved.head, moved.etag) == (True, new, f'"{new}"')
            await adapter.close()

    _run(go)
    assert seen == [
        ("/alpha/refs/head", {}, 200),
        ("/alpha/refs/head", {"If-None-Match": f'"{head}"'}, 304),
        ("/alpha/refs/head", {"If-None-Match": f'"{head}"'}, 200),
    ]


def test_probe_of_a_source_with_last_modified_only(tmp_path: Path) -> None:
    """A static file server (kamu's repositories on S3 or nginx) sends ``Last-Modified``, not
    our ETag: the probe sends ``If-Modified-Since`` back and keeps the date on a 304."""
    stamp = "Wed, 21 Oct 2026 07:28:00 GMT"
    head = "f1620" + "ab" * 32

    async def ref(request: web.Request) -> web.Response:
        if request.headers.get("If-Modified-Since") == stamp:
            return web.Response(status=304)
        return web.Response(text=head, headers={"Last-Modified": stamp})

    app = web.Application()
    app.router.add_get("/ds/refs/head", ref)
    seen = _recording(app)
    adapter = TransferAdapter(cast(DatasetRepository, None), lambda: None)

    async def go() -> None:
        async with _serving(app) as base:
            first = await adapter.probe_head(f"{base}/ds", None, None)
            assert (first.changed, first.head, first.etag, first.last_modified) == (
                True,
                head,
                None,
                stamp,
            )
            idle = await adapter.probe_head(f"{base}/ds", first.etag, first.last_modified)
            assert (idle.changed, idle.last_modified, idle.bytes) == (False, stamp, 0)

    _run(go)
    assert [(c, s) for _, c, s in seen] == [({}, 200), ({"If-Modified-Since": stamp}, 304)]


def test_idle_polls_of_the_follower_cost_one_conditional_request_each(tmp_path: Path) -> None:
    """The follower's own polls (``SourceFollower.poll``) over the adapter: the first one learns
    the ETag (200), each later idle poll is one request answered 304; nothing else is read."""
    repo = _repo(tmp_path)
    ds_head = repo.open("alpha").head()
    assert ds_head is not None
    did = repo.resolve("alpha").id
    app = make_app(repo)
    seen = _recording(app)
    adapter = TransferAdapter(repo, lambda: None)
    metrics = NodeMetrics()
    none = cast(Any, None)
    follower = SourceFollower(
        repo,
        none,
        none,
        adapter,
        none,
        none,
        metrics,
        none,
        lambda: 0,
        generate_private_key(b"\x02" * 32),
        none,
        rng=lambda: 0.5,
        monotonic=lambda: 1000.0,
    )

    async def go() -> None:
        async with _serving(app) as base:
            src = _Source(did, f"{base}/alpha", "alpha", head=ds_head, sequence=1)
            follower._by_did[did] = src
            for _ in range(4):
                await follower.poll(did)
            await adapter.close()

    _run(go)
    assert [(p, s) for p, _, s in seen] == [("/alpha/refs/head", 200)] + [
        ("/alpha/refs/head", 304)
    ] * 3
    assert all(c == {"If-None-Match": f'"{ds_head}"'} for _, c, _ in seen[1:])
    assert (follower.polls, follower.probe_requests, follower.probe_bytes) == (
        4,
        4,
        len(str(ds_head)),
    )
    assert metrics.source_polls.labels("unchanged")._value.get() == 4
