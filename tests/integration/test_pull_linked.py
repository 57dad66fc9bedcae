"""Linked objects (RFC-017) travel with pulls: over HTTP and IPFS, verified, resumable.

The source dataset is made by the real push ingest with an ObjectLink column, so its parts are
real parquet files and its ``AddData.extra`` carries kamu's linked-objects summary. The IPFS
tests need the loopback-only namespace (``unshare -rn``) and ``js/node_modules``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
from pathlib import Path

import pytest
from aiohttp import web
from netns import ipfs_node  # noqa: F401 - pytest fixture

from coordinator.identity.dataset_id import DatasetId
from coordinator.ingest import LinkedObjects
from coordinator.ingest.linked import LinkedObjectsSummary, extra_attributes_json
from coordinator.ingest.push import ingest
from coordinator.metadata import encode_block
from coordinator.metadata import model as m
from coordinator.metadata.timestamp import Timestamp
from coordinator.multiformats import Multihash
from coordinator.storage.dataset import Dataset
from coordinator.storage.repository import DatasetRepository
from coordinator.verify import verify_integrity
from node.ipfs.client import IpfsClient
from node.ipfs.embedded import EmbeddedIpfs
from node.transfer.errors import InvalidRemoteChain, ObjectHashMismatch, SourceUnavailable
from node.transfer.publish import publish_dataset
from node.transfer.pull import PullOptions, pull, pull_url
from node.transfer.server import start_server
from node.transfer.sources import HttpSource

pytestmark = pytest.mark.integration
T1 = Timestamp.parse("2024-06-01T00:00:00Z")
OPTS = PullOptions(attempts=2, backoff_s=0.01, durable=False)


def _repo(path: Path) -> DatasetRepository:
    return DatasetRepository(path / "datasets", path / "keys", clock=lambda: T1, durable=False)


def _linked_dataset(root: Path, tmp: Path) -> tuple[Dataset, list[Multihash]]:
    """A root dataset with two ingests linking three objects (one linked from both)."""
    ds = Dataset.create(root, durable=False)
    source = m.AddPushSource(
        source_name="src",
        read=m.ReadStepCsv(
            ddl_schema=("name STRING", "content STRING", "note STRING"), header=True
        ),
        merge=m.MergeStrategyAppend(),
    )
    for ev in (
        m.Seed(dataset_id=DatasetId.new_seeded_ed25519(b"linked"), dataset_kind=m.DatasetKind.ROOT),
        source,
    ):
        st = ds.state()
        ds.append(
            m.MetadataBlock(
                system_time=T1,
                prev_block_hash=st.head,
                sequence_number=st.sequence_number + 1,
                event=ev,
            )
        )
    objs = []
    for i, body in enumerate((b"x" * 1000, b"y" * 300, b"z" * 4000)):
        p = tmp / f"obj{i}.bin"
        p.write_bytes(body)
        objs.append(p)
    h = [Multihash.sha3_256(p.read_bytes()) for p in objs]
    a = tmp / "a.csv"
    # `note` holds strings that are not multihashes: never taken for a link column.
    a.write_text(f"n,c,note\na,{h[0]},plain\nb,{h[1]},text\nc,{h[0]},\nd,,x\n")
    ingest(ds, [a], clock=lambda: T1, linked_objects=LinkedObjects(("content",), tuple(objs[:2])))
    b = tmp / "b.csv"
    b.write_text(f"n,c,note\ne,{h[2]},y\nf,{h[0]},z\n")
    ingest(ds, [b], clock=lambda: T1, linked_objects=LinkedObjects(("content",), (objs[2],)))
    return ds, h


def _host(tmp: Path) -> tuple[DatasetRepository, Dataset, list[Multihash]]:
    src, hashes = _linked_dataset(tmp / "build" / "ds", tmp)
    repo = _repo(tmp / "owner")
    did = src.state().dataset_id
    assert isinstance(did, DatasetId)
    handle, _ = repo.create_empty(did, "docs")
    shutil.rmtree(handle.root)
    shutil.copytree(src.layout.root, handle.root)
    (handle.root / "info" / "alias").write_text("docs")
    return repo, repo.open("docs"), hashes


def test_linked_objects_pulled_over_http(tmp_path: Path) -> None:
    owner, src, hashes = _host(tmp_path)

    async def go() -> None:
        runner, port = await start_server(owner)
        try:
            dst = _repo(tmp_path / "dst")
            r = await pull_url(dst, f"http://127.0.0.1:{port}/docs", options=OPTS)
            assert r.created and r.new_head == src.head()
            got = dst.open("docs")
            for h in hashes:
                assert got.data.get_bytes(h, verify=True) == src.data.get_bytes(h)
            assert verify_integrity(got).ok
        finally:
            await runner.cleanup()

    asyncio.run(go())


class _Tamper:
    """Serves the owner's dataset directory, altering or withholding chosen objects."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.alter: set[str] = set()
        self.withhold: set[str] = set()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        rel = request.match_info["rel"]
        if rel in self.withhold:
            raise web.HTTPNotFound()
        path = self.root / rel
        if not path.is_file():
            raise web.HTTPNotFound()
        body = path.read_bytes()
        if rel in self.alter:
            body = body[:-1] + bytes([body[-1] ^ 1])
        return web.Response(body=body)


def test_altered_or_missing_linked_object_rejected_then_resumed(tmp_path: Path) -> None:
    _, src, hashes = _host(tmp_path)
    t = _Tamper(src.layout.root)
    rel = f"data/{hashes[2]}"

    async def attempt(dst: DatasetRepository, opts: PullOptions = OPTS) -> object:
        app = web.Application()
        app.router.add_get("/ds/{rel:.*}", t.handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        source = HttpSource(f"http://127.0.0.1:{port}/ds", timeout_s=5)
        try:
            return await pull(dst, source, "docs", options=opts, staging_key="docs")
        finally:
            await source.close()
            await runner.cleanup()

    dst = _repo(tmp_path / "dst")
    t.alter = {rel}
    with pytest.raises(ObjectHashMismatch) as e:
        asyncio.run(attempt(dst))
    assert e.value.object == rel
    assert dst.list() == []  # nothing visible was committed

    # Withheld: "unknown", retried with backoff (long enough for the other objects to land).
    t.alter, t.withhold = set(), {rel}
    with pytest.raises(SourceUnavailable) as e2:
        asyncio.run(attempt(dst, PullOptions(attempts=3, backoff_s=0.2, durable=False)))
    assert e2.value.object == rel
    assert dst.list() == []

    # The source is fixed: the pull resumes; objects verified before are not fetched again.
    t.withhold = {f"data/{hashes[0]}", f"data/{hashes[1]}"}
    r = asyncio.run(attempt(dst))
    assert r.created and r.new_head == src.head()  # type: ignore[attr-defined]
    assert verify_integrity(dst.open("docs")).ok


def _rewrite_head_summary(ds: Dataset, num: int, size: int) -> Multihash:
    """Replace the head AddData's linked-objects summary (a re-hashed, chain-valid block)."""
    head = ds.head()
    assert head is not None
    block = ds.get_block(head)
    assert isinstance(block.event, m.AddData)
    extra = extra_attributes_json(LinkedObjectsSummary(num, size))
    forged = dataclasses.replace(
        block, event=dataclasses.replace(block.event, extra=m.ExtraAttributes(entries=extra))
    )
    data = encode_block(forged)
    h = ds.blocks.insert_bytes(data)
    (ds.layout.refs_dir / "head").write_text(str(h))
    return h


@pytest.mark.parametrize(
    ("delta_num", "delta_size", "reason"),
    [(0, 1, "linked objects total"), (1, 0, "no set of multihash columns")],
)
def test_summary_not_matching_the_part_rejected(
    tmp_path: Path, delta_num: int, delta_size: int, reason: str
) -> None:
    owner, src, _ = _host(tmp_path)
    forged = _rewrite_head_summary(src, 2 + delta_num, 4000 + 1000 + delta_size)

    async def go() -> None:
        runner, port = await start_server(owner)
        try:
            dst = _repo(tmp_path / "dst")
            with pytest.raises(InvalidRemoteChain, match=reason) as e:
                await pull_url(dst, f"http://127.0.0.1:{port}/docs", options=OPTS)
            assert e.value.object == f"blocks/{forged}"
            assert dst.list() == []
        finally:
            await runner.cleanup()

    asyncio.run(go())


def test_linked_objects_published_and_pulled_over_ipfs(
    tmp_path: Path,
    ipfs_node: EmbeddedIpfs,  # noqa: F811
) -> None:
    _, src, hashes = _host(tmp_path)

    async def go() -> None:
        async with IpfsClient(ipfs_node.api_url, timeout_s=30) as c:
            pub = await publish_dataset(c, src)
            listed = {e["Name"] for e in await c.ls(f"/ipfs/{pub.cid}/data")}
        assert {str(h) for h in hashes} <= listed  # publish includes the linked objects
        dst = _repo(tmp_path / "dst")
        r = await pull_url(dst, pub.url, alias="docs", ipfs_api=ipfs_node.api_url, options=OPTS)
        assert r.created and r.new_head == src.head()
        got = dst.open("docs")
        assert all(got.data.contains(h) for h in hashes)
        assert verify_integrity(got).ok

    asyncio.run(go())
