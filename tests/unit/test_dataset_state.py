"""``Dataset.state`` folds only the blocks after the newest known state."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.storage import dataset as dataset_mod
from coordinator.storage.dataset import Dataset
from node.transfer.testing import add_data, new_dataset


def test_fresh_objects_reuse_known_states(tmp_path: Path, block_reads: list[object]) -> None:
    ds = new_dataset(tmp_path / "ds")
    add_data(ds, 200, 10, checkpoint_every=0)
    full = ds.state()
    block_reads.clear()
    reads = block_reads
    # Another object for the same directory (as the daemon opens one per request).
    assert Dataset(ds.layout.root, durable=False).state() == full
    assert reads == []
    # Blocks appended through a third object: a fresh one folds only those.
    add_data(Dataset(ds.layout.root, durable=False), 3, 10, checkpoint_every=0)
    reads.clear()
    newer = Dataset(ds.layout.root, durable=False).state()
    assert newer.sequence_number == full.sequence_number + 3
    assert len(reads) <= 3


def test_known_state_equals_a_full_fold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block_reads: list[object]
) -> None:
    ds = new_dataset(tmp_path / "ds")
    add_data(ds, 20, 10, checkpoint_every=2)
    a = ds.state()
    add_data(ds, 5, 10, checkpoint_every=2)
    incremental = Dataset(ds.layout.root, durable=False).state()
    monkeypatch.setattr(dataset_mod, "_SHARED_STATES", type(dataset_mod._SHARED_STATES)())
    block_reads.clear()
    reads = block_reads
    from_seed = Dataset(ds.layout.root, durable=False).state()
    assert from_seed == incremental and from_seed != a
    assert len(reads) == from_seed.sequence_number + 1  # nothing known: the whole chain


def test_shared_cache_is_bounded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(dataset_mod, "_SHARED_STATES_MAX", 5)
    monkeypatch.setattr(dataset_mod, "_SHARED_STATES", type(dataset_mod._SHARED_STATES)())
    ds = new_dataset(tmp_path / "ds")
    for _ in range(8):
        add_data(ds, 1, 10, checkpoint_every=0)
    assert len(dataset_mod._SHARED_STATES) == 5
    assert ds.state().head in dataset_mod._SHARED_STATES
