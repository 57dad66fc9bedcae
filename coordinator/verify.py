"""Integrity verification of a local dataset (kamu ``verify --integrity``).

Phases, as kamu runs them: *metadata integrity* (every block re-hashed against its name and the
whole chain re-validated from the Seed), then *data integrity* (every data part and checkpoint
referenced by the chain exists, has the recorded size and the recorded physical hash). Problems
are collected into a typed report instead of stopping at the first one, so a user sees
everything that is wrong in one run. Progress goes to an optional listener.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from coordinator.chain.validation import ChainState, validate_append
from coordinator.errors import OdfNodeError
from coordinator.metadata import model as m
from coordinator.multiformats import Multihash
from coordinator.storage.dataset import Dataset
from coordinator.storage.objects import FsObjectRepository

ProgressListener = Callable[[str, int, int], None]
"""``listener(phase, done, total)`` — called as verification advances."""

_CHUNK = 1 << 20


@dataclass
class IntegrityReport:
    """What was checked and every problem found."""

    head: Multihash | None = None
    blocks_checked: int = 0
    data_files_checked: int = 0
    checkpoints_checked: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True if no problem was found."""
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "ok": self.ok,
            "head": str(self.head) if self.head else None,
            "blocks_checked": self.blocks_checked,
            "data_files_checked": self.data_files_checked,
            "checkpoints_checked": self.checkpoints_checked,
            "problems": list(self.problems),
        }


def _check_object(
    repo: FsObjectRepository, h: Multihash, size: int, what: str, report: IntegrityReport
) -> None:
    path = repo.path_of(h)
    if not path.is_file():
        report.problems.append(f"{what} {h} is missing")
        return
    actual_size = path.stat().st_size
    if actual_size != size:
        report.problems.append(f"{what} {h}: size {actual_size} != recorded {size}")
        return
    hasher = hashlib.sha3_256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            hasher.update(chunk)
    if hasher.digest() != h.digest:
        report.problems.append(f"{what} {h}: physical hash does not match its content")


def verify_integrity(
    dataset: Dataset, *, listener: ProgressListener | None = None
) -> IntegrityReport:
    """Check every block, chain rule, data part and checkpoint of ``dataset``."""
    report = IntegrityReport(head=dataset.head())
    try:
        blocks = list(dataset.iter_blocks())  # re-hashes every block against its name
        # Every chain rule from the Seed, folded here rather than through Dataset.state(),
        # which may start from a state remembered earlier in this process.
        state = ChainState()
        for h, b in reversed(blocks):
            state = validate_append(state, b, h)
    except OdfNodeError as err:
        report.problems.append(f"metadata: {err}")
        return report
    report.blocks_checked = len(blocks)
    if listener:
        listener("metadata", len(blocks), len(blocks))
    slices: list[m.DataSlice] = []
    checkpoints: dict[Multihash, int] = {}
    for _, block in blocks:
        e = block.event
        if isinstance(e, m.AddData | m.ExecuteTransform):
            if e.new_data is not None:
                slices.append(e.new_data)
            if e.new_checkpoint is not None:
                checkpoints[e.new_checkpoint.physical_hash] = e.new_checkpoint.size
    total = len(slices) + len(checkpoints)
    done = 0
    for s in slices:
        _check_object(dataset.data, s.physical_hash, s.size, "data part", report)
        report.data_files_checked += 1
        done += 1
        if listener:
            listener("data", done, total)
    for h, size in checkpoints.items():
        _check_object(dataset.checkpoints, h, size, "checkpoint", report)
        report.checkpoints_checked += 1
        done += 1
        if listener:
            listener("data", done, total)
    return report
