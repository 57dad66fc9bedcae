"""Data downloads started while a new dataset's blocks still stream (``_Speculation``).

The source here is an in-memory twin of the IPFS source's bulk ``blocks/`` export: a local
dataset directory whose blocks are handed over one by one, a little apart, through
``export_blocks(on_block=…)``. It records which objects were opened while the export was
still running, so the tests can tell speculative downloads from ones made after the walk.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from factories import pull_repo

from coordinator.metadata import model as m
from coordinator.multiformats import Multihash
from coordinator.storage.dataset import Dataset
from coordinator.verify import verify_integrity
from node.transfer.errors import InvalidRemoteChain, ObjectHashMismatch
from node.transfer.pull import PullOptions, pull
from node.transfer.sources import LocalSource
from node.transfer.testing import build_dataset

FAST = PullOptions(attempts=2, backoff_s=0.01, backoff_max_s=0.02, durable=False)


class ExportingSource:
    """A dataset directory that can also stream all of ``blocks/`` in one (paced) export."""

    def __init__(self, root: Path, *, data_delay_s: float = 0.0) -> None:
        self.root = root
        self.local = LocalSource(root)
        self.description = f"exporting:{root}"
        self.data_delay_s = data_delay_s
        self.exporting = False
        self.opened: list[str] = []
        self.opened_during_export: list[str] = []
        self.data_open_now = 0
        self.tamper: dict[str, Callable[[bytes], bytes]] = {}

    @asynccontextmanager
    async def open(self, rel: str) -> AsyncIterator[AsyncIterator[bytes]]:
        """Stream a file (optionally slowed down or altered)."""
        self.opened.append(rel)
        if self.exporting:
            self.opened_during_export.append(rel)
        if rel.startswith("data/"):
            self.data_open_now += 1
        try:
            if rel.startswith("data/") and self.data_delay_s:
                await asyncio.sleep(self.data_delay_s)
            rule = self.tamper.get(rel)
            if rule is None:
                async with self.local.open(rel) as chunks:
                    yield chunks
            else:
                body = rule((self.root / rel).read_bytes())

                async def one() -> AsyncIterator[bytes]:
                    yield body

                yield one()
        finally:
            if rel.startswith("data/"):
                self.data_open_now -= 1

    async def list_names(self, rel_dir: str) -> list[str] | None:
        """Directory entries."""
        return await self.local.list_names(rel_dir)

    async def export_blocks(
        self, max_bytes: int, on_block: Callable[[bytes], None] | None = None
    ) -> list[bytes] | None:
        """Every block file, in name order, 10 ms apart (like a slow ``dag/export``)."""
        self.exporting = True
        try:
            out: list[bytes] = []
            for p in sorted((self.root / "blocks").iterdir()):
                data = p.read_bytes()
                out.append(data)
                if on_block is not None:
                    on_block(data)
                await asyncio.sleep(0.01)
            return out
        finally:
            self.exporting = False

    async def close(self) -> None:
        """Nothing to release."""


def _chain_parts(root: Path) -> set[str]:
    """Names of the data parts the dataset's chain references."""
    ds = Dataset(root, durable=False)
    out: set[str] = set()
    for _, b in ds.iter_blocks():
        e = b.event
        if isinstance(e, m.AddData) and e.new_data is not None:
            out.add(str(e.new_data.physical_hash))
    return out


def test_parts_download_while_blocks_stream(tmp_path: Path) -> None:
    src_ds = build_dataset(tmp_path / "src", 12, 3000)
    src = ExportingSource(src_ds.layout.root)
    repo = pull_repo(tmp_path / "dst")
    r = asyncio.run(pull(repo, src, "ds", options=FAST, staging_key="k"))
    assert r.created and r.new_head == src_ds.head()
    during = [x for x in src.opened_during_export if x.startswith("data/")]
    assert during, "no data part was requested before the export ended"
    # Each object was downloaded once: the pull waited for the speculative downloads.
    parts = [x for x in src.opened if x.startswith(("data/", "checkpoints/"))]
    assert len(parts) == len(set(parts))
    assert verify_integrity(repo.open("ds")).ok


def test_speculation_off_and_budget(tmp_path: Path) -> None:
    src_ds = build_dataset(tmp_path / "src", 6, 3000)
    for i, budget in enumerate((0, 2999)):  # off, and below the size of any one part
        src = ExportingSource(src_ds.layout.root)
        repo = pull_repo(tmp_path / f"dst{i}")
        opts = PullOptions(attempts=2, backoff_s=0.01, durable=False, max_speculative_bytes=budget)
        asyncio.run(pull(repo, src, "ds", options=opts, staging_key="k"))
        assert not [x for x in src.opened_during_export if x.startswith("data/")]
        assert repo.open("ds").head() == src_ds.head()


def test_parts_of_blocks_off_the_chain_are_dropped(tmp_path: Path) -> None:
    """Blocks of another chain in ``blocks/``: their parts are fetched, then deleted."""
    src_ds = build_dataset(tmp_path / "src", 5, 3000)
    other = build_dataset(tmp_path / "other", 5, 3100, seed=b"other", rng_seed=9)
    for sub in ("blocks", "data", "checkpoints"):
        for p in (other.layout.root / sub).iterdir():
            shutil.copy(p, src_ds.layout.root / sub / p.name)
    wanted = _chain_parts(src_ds.layout.root)
    foreign = _chain_parts(other.layout.root)
    src = ExportingSource(src_ds.layout.root)
    repo = pull_repo(tmp_path / "dst")
    asyncio.run(pull(repo, src, "ds", options=FAST, staging_key="k"))
    stored = {str(h) for h in repo.open("ds").data.iter_hashes()}
    assert stored == wanted
    assert any(f"data/{h}" in src.opened for h in foreign), "foreign parts were not speculated"
    assert verify_integrity(repo.open("ds")).ok


def test_tampered_part_fails_the_pull_and_stops_the_rest(tmp_path: Path) -> None:
    src_ds = build_dataset(tmp_path / "src", 12, 3000)
    src = ExportingSource(src_ds.layout.root, data_delay_s=0.05)
    bad = f"data/{sorted(_chain_parts(src_ds.layout.root))[0]}"
    src.tamper[bad] = lambda b: b[:-1] + bytes([b[-1] ^ 1])
    repo = pull_repo(tmp_path / "dst")

    async def run() -> None:
        with pytest.raises(ObjectHashMismatch) as info:
            await pull(repo, src, "ds", options=FAST, staging_key="k")
        assert info.value.object == bad
        # No download is left running behind the failed pull.
        assert src.data_open_now == 0
        assert asyncio.all_tasks() == {asyncio.current_task()}

    asyncio.run(run())
    assert repo.list() == []


def test_invalid_chain_cancels_speculative_downloads(tmp_path: Path) -> None:
    src_ds = build_dataset(tmp_path / "src", 12, 3000)
    root = src_ds.layout.root
    # refs/head names a "block" that is in blocks/ (so it is exported) but does not decode.
    junk = b"\x00not a metadata block\xff" * 4
    junk_hash = Multihash.sha3_256(junk)
    (root / "blocks" / str(junk_hash)).write_bytes(junk)
    (root / "refs" / "head").write_text(str(junk_hash))
    src = ExportingSource(root, data_delay_s=30.0)  # downloads would hang if left running
    repo = pull_repo(tmp_path / "dst")

    async def run() -> None:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(InvalidRemoteChain):
            await pull(repo, src, "ds", options=FAST, staging_key="k")
        assert loop.time() - t0 < 10
        assert [x for x in src.opened_during_export if x.startswith("data/")]
        assert src.data_open_now == 0
        assert asyncio.all_tasks() == {asyncio.current_task()}

    asyncio.run(run())
    assert repo.list() == []
