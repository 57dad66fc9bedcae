"""Pulls over HTTP from honest and hostile sources: verification, caps, retries, resumption."""

from __future__ import annotations

import asyncio
import importlib
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from aiohttp import web

from coordinator.metadata.timestamp import Timestamp
from coordinator.multiformats import Multihash
from coordinator.storage.dataset import Dataset
from coordinator.storage.repository import DatasetRepository
from coordinator.verify import verify_integrity
from node.transfer.errors import (
    DivergedHeads,
    InvalidRemoteHead,
    ObjectHashMismatch,
    ObjectRejected,
    ObjectSizeMismatch,
    ObjectTooLarge,
    SourceUnavailable,
)
from node.transfer.pull import HeadComparison, PullOptions, pull, pull_url
from node.transfer.server import start_server
from node.transfer.sources import HttpSource, default_alias, open_source
from node.transfer.testing import add_data, build_dataset, new_dataset

FAST = PullOptions(attempts=3, backoff_s=0.01, backoff_max_s=0.02, durable=False)


def _clock() -> Timestamp:
    return Timestamp.parse("2024-06-01T00:00:00Z")


def _repo(path: Path) -> DatasetRepository:
    return DatasetRepository(path / "datasets", path / "keys", clock=_clock, durable=False)


class Hostile:
    """An HTTP source serving a dataset directory, with per-path misbehaviour."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.rules: dict[str, Callable[[bytes], bytes] | str] = {}
        self.fail_first: dict[str, int] = {}
        self.hits: Counter[str] = Counter()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        rel = request.match_info["rel"]
        self.hits[rel] += 1
        if self.fail_first.get(rel, 0) > 0:
            self.fail_first[rel] -= 1
            raise web.HTTPInternalServerError()
        rule = self.rules.get(rel)
        if rule == "404":
            raise web.HTTPNotFound()
        if rule == "503":
            raise web.HTTPServiceUnavailable()
        if rule == "slow":
            await asyncio.sleep(5)
        if rule == "endless":
            resp = web.StreamResponse()
            await resp.prepare(request)
            chunk = b"\0" * 65536
            for _ in range(100_000):
                try:
                    await resp.write(chunk)
                except (ConnectionError, RuntimeError):
                    break
            return resp
        path = self.root / rel
        if not path.is_file():
            raise web.HTTPNotFound()
        body = path.read_bytes()
        if callable(rule):
            body = rule(body)
        return web.Response(body=body)


async def _serve(app_handler: Callable[..., object]) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_get("/ds/{rel:.*}", app_handler)  # type: ignore[arg-type]
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}/ds"


@pytest.fixture
def source_ds(tmp_path: Path) -> Dataset:
    return build_dataset(tmp_path / "src", 12, 3000)


async def _pull(repo: DatasetRepository, h: Hostile, **kw: object) -> object:
    runner, url = await _serve(h.handle)
    src = HttpSource(url, timeout_s=kw.pop("timeout_s", 5.0))  # type: ignore[arg-type]
    try:
        return await pull(
            repo,
            src,
            "ds",
            options=kw.pop("options", FAST),
            staging_key="ds",
            **kw,  # type: ignore[arg-type]
        )
    finally:
        await src.close()
        await runner.cleanup()


def _state(repo: DatasetRepository) -> list[tuple[str, str | None]]:
    return [(h.alias, str(repo.open(h.alias).head())) for h in repo.list()]


def test_pull_new_then_incremental(tmp_path: Path, source_ds: Dataset) -> None:
    repo = _repo(tmp_path / "dst")
    h = Hostile(source_ds.layout.root)
    r = asyncio.run(_pull(repo, h))
    assert r.created and r.new_head == source_ds.head()  # type: ignore[attr-defined]
    assert verify_integrity(repo.open("ds")).ok
    first_hits = sum(h.hits.values())
    add_data(source_ds, 3, 500)
    h.hits.clear()
    r = asyncio.run(_pull(repo, h))
    assert r.comparison is HeadComparison.LOCAL_BEHIND and r.new_blocks == 3  # type: ignore[attr-defined]
    assert repo.open("ds").head() == source_ds.head()
    # Only refs/head, 3 blocks and their objects were requested.
    assert sum(h.hits.values()) < first_hits // 3
    assert all(not k.startswith("blocks/") or v == 1 for k, v in h.hits.items())
    r = asyncio.run(_pull(repo, h))
    assert r.comparison is HeadComparison.EQUAL  # type: ignore[attr-defined]
    assert verify_integrity(repo.open("ds")).ok
    # No staging leftovers, no pull cache.
    assert [p.name for p in repo.root.iterdir()] == [repo.resolve("ds").root.name]
    assert not (repo.resolve("ds").root / "info" / "pull-cache").exists()


def test_pull_served_by_node_server_and_local_path(tmp_path: Path) -> None:
    src_repo = _repo(tmp_path / "src")
    from node.transfer.testing import new_dataset as nd

    probe = nd(tmp_path / "probe")
    did = probe.state().dataset_id
    assert did is not None
    handle, _ = src_repo.create_empty(did, "alpha")
    shutil.rmtree(handle.root)
    shutil.copytree(probe.layout.root, handle.root)
    (handle.root / "info" / "alias").write_text("alpha")
    add_data(src_repo.open("alpha"), 4, 2000)

    async def go() -> None:
        runner, port = await start_server(src_repo)
        try:
            r = await pull_url(_repo(tmp_path / "d1"), f"http://127.0.0.1:{port}/alpha")
            assert r.alias == "alpha" and r.created
            r = await pull_url(
                _repo(tmp_path / "d1"), f"http://127.0.0.1:{port}/{did.as_did_str()}", alias="alpha"
            )
            assert r.comparison is HeadComparison.EQUAL
        finally:
            await runner.cleanup()

    asyncio.run(go())
    repo2 = _repo(tmp_path / "d2")
    r = asyncio.run(pull_url(repo2, str(handle.root), alias="copy", options=FAST))
    assert r.new_head == src_repo.open("alpha").head()
    assert verify_integrity(repo2.open("copy")).ok


def _flip(b: bytes) -> bytes:
    return b[:-1] + bytes([b[-1] ^ 1])


def _case_objects(ds: Dataset) -> dict[str, str]:
    head = ds.head()
    assert head is not None
    blocks = list(ds.iter_blocks())
    data = [b.event.new_data for _, b in blocks[:4] if getattr(b.event, "new_data", None)]
    cps = [b.event.new_checkpoint for _, b in blocks if getattr(b.event, "new_checkpoint", None)]
    return {
        "block": f"blocks/{blocks[1][0]}",
        "data": f"data/{data[0].physical_hash}",  # type: ignore[union-attr]
        "checkpoint": f"checkpoints/{cps[0].physical_hash}",  # type: ignore[union-attr]
    }


TAMPER = [
    ("altered block", "block", _flip, ObjectHashMismatch),
    ("altered data part", "data", _flip, ObjectHashMismatch),
    ("altered checkpoint", "checkpoint", _flip, ObjectHashMismatch),
    ("truncated data part", "data", lambda b: b[: len(b) // 2], ObjectSizeMismatch),
    ("longer data part", "data", lambda b: b + b"x", ObjectTooLarge),
    ("endless data part", "data", "endless", ObjectTooLarge),
    ("endless block", "block", "endless", ObjectTooLarge),
    ("endless refs/head", "refs/head", "endless", ObjectTooLarge),
    ("garbage refs/head", "refs/head", lambda b: b"not-a-hash\n", InvalidRemoteHead),
]


@pytest.mark.parametrize(("name", "target", "rule", "error"), TAMPER, ids=[t[0] for t in TAMPER])
def test_hostile_source_rejected_store_unchanged(
    tmp_path: Path, source_ds: Dataset, name: str, target: str, rule: object, error: type
) -> None:
    repo = _repo(tmp_path / "dst")
    h = Hostile(source_ds.layout.root)
    # The local copy is 5 blocks behind; the tampered object is among the new ones.
    asyncio.run(_pull(repo, h))
    before_head = repo.open("ds").head()
    add_data(source_ds, 5, 4000, checkpoint_every=1)
    targets = _case_objects(source_ds)
    rel = targets.get(target, target)
    h.rules[rel] = rule  # type: ignore[assignment]
    with pytest.raises(error) as info:
        asyncio.run(_pull(repo, h))
    assert isinstance(info.value, ObjectRejected)
    assert info.value.object == rel
    assert rel in str(info.value)
    assert repo.open("ds").head() == before_head
    assert verify_integrity(repo.open("ds")).ok
    # Nothing with a wrong name was stored.
    ds = repo.open("ds")
    for objs in (ds.data, ds.checkpoints):
        for oh in objs.iter_hashes():
            assert Multihash.sha3_256(objs.get_bytes(oh)) == oh
    # A new dataset from the same hostile source is not created either.
    repo2 = _repo(tmp_path / "fresh")
    with pytest.raises(ObjectRejected):
        asyncio.run(_pull(repo2, h))
    assert _state(repo2) == []


def test_huge_object_beyond_cap(tmp_path: Path, source_ds: Dataset) -> None:
    repo = _repo(tmp_path / "dst")
    h = Hostile(source_ds.layout.root)
    opts = PullOptions(attempts=2, backoff_s=0.01, durable=False, max_object_size=2000)
    with pytest.raises(ObjectTooLarge, match="exceeds the cap"):
        asyncio.run(_pull(repo, h, options=opts))
    assert not any(k.startswith("data/") for k in h.hits)  # refused before downloading
    assert _state(repo) == []
    opts = PullOptions(attempts=2, backoff_s=0.01, durable=False, max_block_size=100)
    repo2 = _repo(tmp_path / "dst2")
    with pytest.raises(ObjectTooLarge):
        asyncio.run(_pull(repo2, h, options=opts))
    assert _state(repo2) == []


def test_transient_errors_are_retried(tmp_path: Path, source_ds: Dataset) -> None:
    repo = _repo(tmp_path / "dst")
    h = Hostile(source_ds.layout.root)
    targets = _case_objects(source_ds)
    for rel in ("refs/head", targets["block"], targets["data"]):
        h.fail_first[rel] = 2
    r = asyncio.run(_pull(repo, h))
    assert r.new_head == source_ds.head()  # type: ignore[attr-defined]
    assert h.hits[targets["data"]] == 3


@pytest.mark.parametrize("rule", ["404", "503", "slow"])
def test_unavailable_object_is_unknown_not_absent(
    tmp_path: Path, source_ds: Dataset, rule: str
) -> None:
    repo = _repo(tmp_path / "dst")
    h = Hostile(source_ds.layout.root)
    rel = _case_objects(source_ds)["data"]
    h.rules[rel] = rule
    with pytest.raises(SourceUnavailable) as info:
        asyncio.run(_pull(repo, h, timeout_s=0.3))
    assert info.value.object == rel
    assert h.hits[rel] == FAST.attempts
    assert _state(repo) == []


def test_partial_pull_resumes_without_redownloading(tmp_path: Path, source_ds: Dataset) -> None:
    repo = _repo(tmp_path / "dst")
    h = Hostile(source_ds.layout.root)
    rel = _case_objects(source_ds)["data"]
    h.rules[rel] = "503"
    with pytest.raises(SourceUnavailable):
        asyncio.run(_pull(repo, h))
    assert _state(repo) == []
    first = Counter(h.hits)
    del h.rules[rel]
    h.hits.clear()
    r = asyncio.run(_pull(repo, h))
    assert r.new_head == source_ds.head()  # type: ignore[attr-defined]
    # Only refs/head and the missing part are fetched again.
    assert set(h.hits) == {"refs/head", rel}
    assert sum(v for k, v in first.items() if k.startswith("blocks/")) == 14
    assert verify_integrity(repo.open("ds")).ok


def test_compare_heads_ahead_diverged_force(tmp_path: Path) -> None:
    a = build_dataset(tmp_path / "a", 4, 1000, rng_seed=1)
    repo = _repo(tmp_path / "dst")
    h = Hostile(a.layout.root)
    asyncio.run(_pull(repo, h))
    # Local ahead: the local copy gets a block the source does not have.
    local = repo.open("ds")
    add_data(local, 1, 100)
    r = asyncio.run(_pull(repo, h))
    assert r.comparison is HeadComparison.LOCAL_AHEAD and not r.updated  # type: ignore[attr-defined]
    # Diverged: the source gets a different block on the same parent.
    add_data(a, 2, 200, rng=__import__("random").Random(9))
    before = local.head()
    with pytest.raises(DivergedHeads):
        asyncio.run(_pull(repo, h))
    assert repo.open("ds").head() == before
    r = asyncio.run(_pull(repo, h, force=True))
    assert r.forced and r.comparison is HeadComparison.DIVERGED  # type: ignore[attr-defined]
    assert repo.open("ds").head() == a.head()
    assert verify_integrity(repo.open("ds")).ok


def test_other_dataset_under_same_alias_refused(tmp_path: Path) -> None:
    a = build_dataset(tmp_path / "a", 2, 100, seed=b"one")
    b = new_dataset(tmp_path / "b", b"two")
    add_data(b, 2, 100)
    repo = _repo(tmp_path / "dst")
    asyncio.run(_pull(repo, Hostile(a.layout.root)))
    before = repo.open("ds").head()
    from coordinator.errors import DatasetAlreadyExists

    with pytest.raises(DatasetAlreadyExists):
        asyncio.run(_pull(repo, Hostile(b.layout.root), force=True))
    assert repo.open("ds").head() == before


def test_url_parsing() -> None:
    assert default_alias("http://host:8080/x/my-ds") == "my-ds"
    assert default_alias("ipfs://bafyabc/") == "bafyabc"
    assert default_alias("ipfs://bafyabc/datasets/foo") == "foo"
    assert default_alias("/tmp/a/b/") == "b"
    assert open_source("ipfs://bafyabc/p", ipfs_gateway="http://127.0.0.1:1").description == (
        "/ipfs/bafyabc/p"
    )
    with pytest.raises(ValueError):
        open_source("ftp://x/y")


def test_crash_between_staging_commit_and_rename(
    tmp_path: Path, source_ds: Dataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    pull_mod = importlib.import_module("node.transfer.pull")

    repo = _repo(tmp_path / "dst")
    h = Hostile(source_ds.layout.root)

    def boom(*_a: object, **_k: object) -> None:
        raise OSError("simulated crash before the rename")

    monkeypatch.setattr(pull_mod, "atomic_write_bytes", boom)
    with pytest.raises(OSError):
        asyncio.run(_pull(repo, h))
    monkeypatch.undo()
    assert _state(repo) == []
    # Same remote: the staged chain is kept and just renamed into place.
    h.hits.clear()
    r = asyncio.run(_pull(repo, h))
    assert r.created and r.new_head == source_ds.head()  # type: ignore[attr-defined]
    assert set(h.hits) == {"refs/head"}
    # Remote moved on after another staged crash: the staging copy is extended.
    repo2 = _repo(tmp_path / "dst2")
    monkeypatch.setattr(pull_mod, "atomic_write_bytes", boom)
    with pytest.raises(OSError):
        asyncio.run(_pull(repo2, h))
    monkeypatch.undo()
    add_data(source_ds, 2, 700)
    r = asyncio.run(_pull(repo2, h))
    assert r.created and r.new_head == source_ds.head()  # type: ignore[attr-defined]
    assert verify_integrity(repo2.open("ds")).ok
    # A different dataset now behind the same URL: the stale staging copy is discarded.
    repo3 = _repo(tmp_path / "dst3")
    monkeypatch.setattr(pull_mod, "atomic_write_bytes", boom)
    with pytest.raises(OSError):
        asyncio.run(_pull(repo3, h))
    monkeypatch.undo()
    other = build_dataset(tmp_path / "other", 3, 100, seed=b"other")
    r = asyncio.run(_pull(repo3, Hostile(other.layout.root)))
    assert r.created and r.new_head == other.head()  # type: ignore[attr-defined]
    assert verify_integrity(repo3.open("ds")).ok
    assert len(list(repo3.root.iterdir())) == 1


def test_block_files_written_durably_in_one_flush(tmp_path: Path) -> None:
    """Blocks are written under their names and flushed; a torn file under a name is replaced."""
    from coordinator.storage.fs import can_sync_filesystem, sync_filesystem
    from coordinator.storage.objects import FsObjectRepository

    pull_mod = importlib.import_module("node.transfer.pull")
    store = FsObjectRepository(tmp_path / "blocks", durable=True)
    blobs = [f"block {i}".encode() * 20 for i in range(50)]
    hashes = [Multihash.sha3_256(b) for b in blobs]
    store.directory.mkdir(parents=True)
    store.path_of(hashes[0]).write_bytes(b"")  # as a power loss could leave it
    pull_mod._write_blocks(store, hashes, blobs, True)
    for h, b in zip(hashes, blobs, strict=True):
        assert store.get_bytes(h, verify=True) == b
    assert not [p for p in store.directory.iterdir() if p.name.startswith(".")]
    if can_sync_filesystem():
        sync_filesystem(tmp_path)  # callable on any path of the file system


def test_incremental_pull_reads_only_the_blocks_between_the_heads(
    tmp_path: Path, block_reads: list[object]
) -> None:
    """A long local chain is not walked in full to compare heads (ahead / behind / diverged)."""
    src = new_dataset(tmp_path / "src")
    add_data(src, 300, 10, checkpoint_every=0)
    repo = _repo(tmp_path / "dst")
    h = Hostile(src.layout.root)
    asyncio.run(_pull(repo, h))
    reads = block_reads
    add_data(src, 2, 10, checkpoint_every=0)
    reads.clear()
    r = asyncio.run(_pull(repo, h))
    assert r.comparison is HeadComparison.LOCAL_BEHIND and r.new_blocks == 2  # type: ignore[attr-defined]
    # The two heads are one block apart; the chain state is cached by the dataset, so the
    # commit does not re-read the chain either.
    assert len(reads) < 20, len(reads)
    # Local ahead by one block: found by reading a couple of local blocks, not 300.
    add_data(repo.open("ds"), 1, 10, checkpoint_every=0)
    reads.clear()
    r = asyncio.run(_pull(repo, h))
    assert r.comparison is HeadComparison.LOCAL_AHEAD  # type: ignore[attr-defined]
    assert len(reads) < 10, len(reads)


LARGE_TAMPER = [
    ("intact", None, None),
    ("altered last byte", lambda b: b[:-1] + bytes([b[-1] ^ 1]), ObjectHashMismatch),
    ("truncated", lambda b: b[: len(b) - 100_000], ObjectSizeMismatch),
    ("longer", lambda b: b + b"x" * 3_000_000, ObjectTooLarge),
    ("endless", "endless", ObjectTooLarge),
]


@pytest.mark.parametrize(("name", "rule", "error"), LARGE_TAMPER, ids=[t[0] for t in LARGE_TAMPER])
@pytest.mark.parametrize("direct_io", [True, False], ids=["direct", "buffered"])
def test_large_parts_stored_or_refused_without_leftovers(
    tmp_path: Path, name: str, rule: object, error: type | None, direct_io: bool
) -> None:
    """Parts of several MiB cross many batches and go through the direct or the buffered
    writer. An intact part is stored byte for byte; a part altered at its end, cut short, too
    long or endless is refused after several batches, and no file (named or pending) is left
    of it."""
    import random

    src = new_dataset(tmp_path / "src", b"large-parts")
    add_data(src, 2, 3_500_000, rng=random.Random(5), checkpoint_every=0)
    parts = sorted(str(x) for x in src.data.iter_hashes())
    rel = f"data/{parts[0]}"
    h = Hostile(src.layout.root)
    if rule is not None:
        h.rules[rel] = rule  # type: ignore[assignment]
    repo = _repo(tmp_path / "dst")
    opts = PullOptions(attempts=1, backoff_s=0.01, durable=True, direct_io=direct_io)
    if error is None:
        asyncio.run(_pull(repo, h, options=opts))
        ds = repo.open("ds")
        assert verify_integrity(ds).ok
        for p in parts:
            hh = Multihash.from_multibase(p)
            assert ds.data.path_of(hh).read_bytes() == src.data.path_of(hh).read_bytes()
        return
    with pytest.raises(error) as info:
        asyncio.run(_pull(repo, h, options=opts))
    assert isinstance(info.value, ObjectRejected) and info.value.object == rel
    assert _state(repo) == []
    left = [p for p in (tmp_path / "dst").rglob("*") if p.is_file() and parts[0] in p.name]
    pending = [p for p in (tmp_path / "dst").rglob(".pending-*")]
    assert left == [] and pending == []
