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
    _fresh_cache(monkeypatch)
    block_reads.clear()
    reads = block_reads
    from_seed = Dataset(ds.layout.root, durable=False).state()
    assert from_seed == incremental and from_seed != a
    assert len(reads) == from_seed.sequence_number + 1  # nothing known: the whole chain


def _fresh_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dataset_mod, "_SHARED_STATES", type(dataset_mod._SHARED_STATES)())
    monkeypatch.setattr(dataset_mod, "_HEADS_BY_DATASET", {})


def test_shared_cache_is_bounded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(dataset_mod, "_SHARED_STATES_MAX", 5)
    _fresh_cache(monkeypatch)
    datasets = [new_dataset(tmp_path / f"ds{i}", seed=b"ds%d" % i) for i in range(4)]
    for ds in datasets:
        add_data(ds, 2, 10, checkpoint_every=0)
    assert dataset_mod.shared_chain_states() == 5
    assert datasets[-1].state().head in dataset_mod._SHARED_STATES
    # The per-dataset index forgets what the LRU dropped (and a dataset left with none).
    index = dataset_mod._HEADS_BY_DATASET
    assert sum(len(heads) for heads in index.values()) == 5
    assert all(index.values())


def test_each_dataset_keeps_only_its_newest_states(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, block_reads: list[object]
) -> None:
    """A dataset updated for months does not leave a state per head it ever had: its newest
    few stay (a pull or an append folds from the current head) and the rest are forgotten."""
    _fresh_cache(monkeypatch)
    ds = new_dataset(tmp_path / "ds")
    for _ in range(3 * dataset_mod._STATES_PER_DATASET):
        add_data(ds, 1, 10, checkpoint_every=0)
    assert dataset_mod.shared_chain_states() == dataset_mod._STATES_PER_DATASET
    head = ds.state().head
    assert head is not None and dataset_mod.known_chain_state(head) == ds.state()
    # A fresh object for the directory (the daemon's per-request one) still folds nothing.
    block_reads.clear()
    assert Dataset(ds.layout.root, durable=False).state() == ds.state()
    assert block_reads == []
