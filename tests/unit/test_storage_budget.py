"""The disk budget of followed datasets (``[storage]``): a pull over it is refused before any
data is downloaded, and leaves no half-written dataset behind."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from coordinator.errors import DatasetNotFound
from coordinator.metadata.timestamp import Timestamp
from coordinator.storage.repository import DatasetRepository
from coordinator.verify import verify_integrity
from node.adapters.transfer import DiskBudget, TransferAdapter
from node.app.fetch import PullOverBudget
from node.config import load_config
from node.transfer.errors import StorageBudgetExceeded
from node.transfer.pull import PullOptions, pull_url
from node.transfer.testing import add_data, build_dataset, new_dataset

FAST = PullOptions(attempts=2, backoff_s=0.01, backoff_max_s=0.02, durable=False)


def _repo(path: Path) -> DatasetRepository:
    return DatasetRepository(
        path / "datasets",
        path / "keys",
        clock=lambda: Timestamp.parse("2024-06-01T00:00:00Z"),
        durable=False,
    )


def _refuse(asked: list[int]) -> PullOptions:
    def admit(need: int) -> None:
        asked.append(need)
        raise StorageBudgetExceeded("over budget", needed=need, allowed=0)

    return dataclasses.replace(FAST, admit=admit)


def test_new_dataset_over_budget_leaves_nothing(tmp_path: Path) -> None:
    src = build_dataset(tmp_path / "src", 6, 4000)
    repo = _repo(tmp_path / "dst")
    asked: list[int] = []
    with pytest.raises(StorageBudgetExceeded):
        asyncio.run(pull_url(repo, str(src.layout.root), alias="ds", options=_refuse(asked)))
    # Asked once, for at least the six 4,000-byte parts, before downloading any of them.
    assert len(asked) == 1 and asked[0] >= 6 * 4000
    assert list(repo.root.iterdir()) == []  # no dataset, no staging directory
    with pytest.raises(DatasetNotFound):
        repo.resolve("ds")


def test_followed_dataset_over_budget_stays_at_its_head(tmp_path: Path) -> None:
    src = build_dataset(tmp_path / "src", 3, 1000)
    repo = _repo(tmp_path / "dst")
    asyncio.run(pull_url(repo, str(src.layout.root), alias="ds", options=FAST))
    before = repo.open("ds").head()
    add_data(src, 4, 50_000)
    asked: list[int] = []
    with pytest.raises(StorageBudgetExceeded):
        asyncio.run(pull_url(repo, str(src.layout.root), alias="ds", options=_refuse(asked)))
    assert 4 * 50_000 <= asked[0] < 4 * 50_000 + 20_000  # the new parts and blocks only
    ds = repo.open("ds")
    assert ds.head() == before and verify_integrity(ds).ok
    assert not (ds.layout.root / "info" / "pull-cache").exists()
    # Paused, not broken: with room again the same pull completes.
    asyncio.run(pull_url(repo, str(src.layout.root), alias="ds", options=FAST))
    assert repo.open("ds").head() == src.head()


def test_disk_budget_counts_followed_not_owned(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "h")
    repo.root.mkdir(parents=True, exist_ok=True)
    followed = build_dataset(repo.root / "followed", 2, 10_000)
    assert followed.head() is not None
    # An owned dataset (it has a dataset key) is not counted, however big.
    did = new_dataset(tmp_path / "probe").state().dataset_id
    assert did is not None
    owned = repo.create_empty(did, "mine")[0]
    repo.key_path(owned.id).parent.mkdir(parents=True, exist_ok=True)
    repo.key_path(owned.id).write_bytes(b"k")
    (owned.root / "big").write_bytes(b"x" * 200_000)
    budget = DiskBudget(repo, max_bytes=100_000, min_free_bytes=0, clock=lambda: 0.0)
    used = budget.scan()
    assert 20_000 <= used < 100_000
    asyncio.run(budget.refresh())
    assert budget.used == used
    budget.admit(100_000 - used)  # exactly to the budget: admitted, and held while it runs
    with pytest.raises(StorageBudgetExceeded, match=r"\[storage\] max_bytes"):
        budget.admit(1)
    budget.settle(100_000 - used)
    assert budget.used == 100_000
    # The free-space floor applies whatever the budget.
    floor = DiskBudget(repo, max_bytes=0, min_free_bytes=1 << 62)
    with pytest.raises(StorageBudgetExceeded, match="min_free_bytes"):
        floor.admit(1)


def test_transfer_adapter_applies_the_configured_budget(tmp_path: Path) -> None:
    src = build_dataset(tmp_path / "src", 4, 30_000)
    repo = _repo(tmp_path / "dst")
    (tmp_path / "c.toml").write_text("[storage]\nmax_bytes = 50000\nmin_free_bytes = 0\n")
    config = load_config(tmp_path / "c.toml", environ={})
    adapter = TransferAdapter(repo, lambda: None, config=config)
    with pytest.raises(PullOverBudget) as e:
        asyncio.run(adapter.pull(str(src.layout.root), alias="ds"))
    assert e.value.needed >= 4 * 30_000 and e.value.allowed == 50_000
    assert list(repo.root.iterdir()) == []
    assert adapter.budget.used == 0  # nothing held after the refusal
