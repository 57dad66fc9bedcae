"""Resolving a DID-shaped alias is one directory lookup, hit or miss.

A daemon stores every pulled dataset without a subscription name under its DID's multibase
form; before, each *new* dataset's pull missed the alias index and scanned every dataset's alias
file (twice), so subscribing to N datasets cost O(N^2) file reads on the event loop (68 % of
the loop's samples in a profile of the soak benchmark's ramp-up, 1,000 subscriptions).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.errors import DatasetNotFound, InvalidSnapshot
from coordinator.identity.dataset_id import DatasetId
from coordinator.metadata.timestamp import Timestamp
from coordinator.storage.repository import DatasetRepository, did_shaped

T0 = Timestamp.parse("2026-01-01T00:00:00Z")


def _repo(tmp_path: Path) -> DatasetRepository:
    return DatasetRepository(tmp_path / "datasets", tmp_path / "keys", clock=lambda: T0)


def test_did_shaped_alias_resolves_without_scanning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = _repo(tmp_path)
    dids = [DatasetId.new_seeded_ed25519(bytes([i]) * 32) for i in range(5)]
    for did in dids:
        repo.create_empty(did, did.as_multibase())
    scans = []
    real_list = repo.list
    monkeypatch.setattr(repo, "list", lambda: scans.append(1) or real_list())
    for did in dids:
        assert repo.resolve(did.as_multibase()).id == did
    missing = DatasetId.new_seeded_ed25519(b"\x09" * 32).as_multibase()
    with pytest.raises(DatasetNotFound):
        repo.resolve(missing)
    assert not repo.contains(missing)
    assert scans == []


def test_a_named_alias_still_resolves(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    did = DatasetId.new_seeded_ed25519(b"\x01" * 32)
    repo.create_empty(did, "cities")
    assert repo.resolve("cities").id == did
    with pytest.raises(DatasetNotFound):
        repo.resolve(did.as_multibase())  # its DID is not its alias (use did:odf:... for that)
    assert repo.resolve(did.as_did_str()).id == did


def test_another_datasets_did_cannot_be_an_alias(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    a = DatasetId.new_seeded_ed25519(b"\x01" * 32)
    b = DatasetId.new_seeded_ed25519(b"\x02" * 32)
    with pytest.raises(InvalidSnapshot, match="another dataset's DID"):
        repo.create_empty(a, b.as_multibase())
    repo.create_empty(a, "x")
    with pytest.raises(InvalidSnapshot):
        repo.rename("x", b.as_multibase())
    assert repo.rename("x", a.as_multibase()).alias == a.as_multibase()


def test_did_shaped() -> None:
    did = DatasetId.new_seeded_ed25519(b"\x03" * 32)
    assert did_shaped(did.as_multibase()) == did
    assert did_shaped("cities") is None
    assert did_shaped(did.as_multibase().upper()) is None
