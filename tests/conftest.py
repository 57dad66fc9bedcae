"""Shared pytest configuration: make the test helpers (factories, strategies) importable."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def block_reads(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every block hash ``Dataset.get_block`` reads from now on, in order (clear it to reset)."""
    from coordinator.storage.dataset import Dataset

    reads: list[object] = []
    original = Dataset.get_block

    def counting(self: Dataset, h: object, *, verify: bool = True) -> object:
        reads.append(h)
        return original(self, h, verify=verify)  # type: ignore[arg-type]

    monkeypatch.setattr(Dataset, "get_block", counting)
    return reads
