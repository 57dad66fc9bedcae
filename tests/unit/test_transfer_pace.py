"""Pulls from a source that trickles bytes: every object read has a deadline that grows only with
the bytes received (``deadline_base_s + received / min_rate_bytes_per_s``), so a source sending
one byte now and then is dropped after about ``deadline_base_s`` with :class:`SourceTooSlow`
instead of holding the pull for as long as it likes (a per-read timeout restarts on every byte).

The source is a real HTTP server on 127.0.0.1 in a thread; small settings keep each test ~1 s.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from scripted_http import Behaviour, Trickle, serve_dir

from coordinator.errors import UNAVAILABLE
from coordinator.metadata.timestamp import Timestamp
from coordinator.storage.dataset import Dataset
from coordinator.storage.repository import DatasetRepository
from node.rpc.errors import code_for
from node.transfer.errors import SourceTooSlow, SourceUnavailable
from node.transfer.pull import PullOptions, pull_url
from node.transfer.testing import build_dataset

BASE_S = 0.5
MIN_RATE = 1000.0  # bytes/s
OPTS = PullOptions(
    attempts=3,
    backoff_s=0.01,
    backoff_max_s=0.02,
    durable=False,
    deadline_base_s=BASE_S,
    min_rate_bytes_per_s=MIN_RATE,
)
# Before the deadline existed a trickled object took its full trickle time (tens of seconds):
# the outer bound turns that into a quick failure instead of a slow pass.
OUTER_S = 10.0


def _repo(path: Path) -> DatasetRepository:
    return DatasetRepository(
        path / "datasets",
        path / "keys",
        clock=lambda: Timestamp.parse("2024-06-01T00:00:00Z"),
        durable=False,
    )


@pytest.fixture
def source_ds(tmp_path: Path) -> Dataset:
    return build_dataset(tmp_path / "src", 2, 2000)


def _data_rel(ds: Dataset) -> str:
    return sorted(f"data/{p.name}" for p in (ds.layout.root / "data").iterdir())[0]


async def _timed_pull(repo: DatasetRepository, url: str) -> float:
    t0 = time.monotonic()
    await asyncio.wait_for(pull_url(repo, url, alias="copy", options=OPTS), OUTER_S)
    return time.monotonic() - t0


def test_trickled_data_part_is_cut_after_the_grace(tmp_path: Path, source_ds: Dataset) -> None:
    """A 2000-byte part at 50 B/s would take 40 s; it is dropped after ~0.5 s, not retried."""
    rel = _data_rel(source_ds)
    script = Behaviour(trickle={rel: Trickle(interval_s=0.02)})
    with serve_dir(source_ds.layout.root, script) as (url, b):
        t0 = time.monotonic()
        with pytest.raises(SourceTooSlow) as info:
            asyncio.run(_timed_pull(_repo(tmp_path / "dst"), url))
        elapsed = time.monotonic() - t0
    assert BASE_S <= elapsed < BASE_S + 1.5, elapsed
    assert info.value.object == rel
    assert isinstance(info.value, SourceUnavailable)  # "unknown, retry later", typed
    assert code_for(info.value) == UNAVAILABLE
    assert "minimum rate" in str(info.value)
    assert b.hits[rel] == 1  # a too-slow source is not asked again within the pull
    assert not (tmp_path / "dst" / "datasets").exists() or not any(
        p for p in (tmp_path / "dst" / "datasets").iterdir() if not p.name.startswith(".")
    )


def test_trickled_object_of_unknown_size_is_cut(tmp_path: Path, source_ds: Dataset) -> None:
    """``refs/head`` has no recorded size (only its 1 KiB cap) and no Content-Length here."""
    script = Behaviour(trickle={"refs/head": Trickle(interval_s=0.1, content_length=False)})
    with serve_dir(source_ds.layout.root, script) as (url, _):
        t0 = time.monotonic()
        with pytest.raises(SourceTooSlow) as info:
            asyncio.run(_timed_pull(_repo(tmp_path / "dst"), url))
    assert time.monotonic() - t0 < BASE_S + 1.5
    assert info.value.object == "refs/head"


def test_headers_held_back_count_against_the_deadline(tmp_path: Path, source_ds: Dataset) -> None:
    """The request and headers are inside the deadline too, not only the body."""
    script = Behaviour(header_delay_s={"refs/head": 3.0})
    with serve_dir(source_ds.layout.root, script) as (url, _):
        t0 = time.monotonic()
        with pytest.raises(SourceTooSlow):
            asyncio.run(_timed_pull(_repo(tmp_path / "dst"), url))
    assert time.monotonic() - t0 < BASE_S + 1.5


def test_steady_source_above_the_minimum_rate_completes(tmp_path: Path, source_ds: Dataset) -> None:
    """~10 kB/s in 200-byte chunks (10x the minimum) takes ~0.2 s per part and passes, although
    each part takes longer than a source sending it at once would."""
    rels = sorted(f"data/{p.name}" for p in (source_ds.layout.root / "data").iterdir())
    script = Behaviour(trickle={r: Trickle(interval_s=0.02, chunk=200) for r in rels})
    with serve_dir(source_ds.layout.root, script) as (url, _):
        elapsed = asyncio.run(_timed_pull(_repo(tmp_path / "dst"), url))
    assert elapsed < OUTER_S
    assert _repo(tmp_path / "dst").open("copy").head() == source_ds.head()
