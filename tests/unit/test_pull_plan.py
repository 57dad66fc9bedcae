"""The decisions of a pull after its walk of the remote chain (node.transfer.pull_plan)."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.errors import DatasetAlreadyExists
from coordinator.identity.dataset_id import DatasetId
from coordinator.multiformats import Multihash
from node.transfer.errors import DivergedHeads
from node.transfer.pull_plan import HeadComparison, PullDecision, decide_pull, staging_extends

A, B, C = (Multihash.sha3_256(x) for x in (b"a", b"b", b"c"))
LOCAL = DatasetId.new_seeded_ed25519(b"local")
OTHER = DatasetId.new_seeded_ed25519(b"other")


def decide(**kw: Any) -> PullDecision:
    args: dict[str, Any] = {
        "existing": True,
        "met_local": True,
        "remote_id": None,
        "local_id": LOCAL,
        "local_head": A,
        "remote_head": C,
        "first_prev": A,
        "force": False,
        "alias": "x",
        "description": "src",
        **kw,
    }
    return decide_pull(**args)


def test_a_remote_extending_the_local_head_is_validated_from_the_local_state() -> None:
    assert decide() == PullDecision(HeadComparison.LOCAL_BEHIND, False, False, True, False)


def test_a_fork_off_local_history_needs_force_and_a_walk_to_the_seed() -> None:
    with pytest.raises(DivergedHeads, match="use --force"):
        decide(first_prev=B)
    assert decide(first_prev=B, force=True) == PullDecision(
        HeadComparison.DIVERGED, True, True, False, False
    )


def test_an_unrelated_chain_of_the_same_dataset_needs_force() -> None:
    with pytest.raises(DivergedHeads):
        decide(met_local=False, remote_id=LOCAL)
    forced = decide(met_local=False, remote_id=LOCAL, force=True)
    assert (forced.comparison, forced.forced, forced.rewalk_to_seed) == (
        HeadComparison.DIVERGED,
        True,
        False,
    )
    assert not forced.base_from_local


def test_another_dataset_under_the_alias_is_refused_even_with_force() -> None:
    with pytest.raises(DatasetAlreadyExists, match="under another name"):
        decide(met_local=False, remote_id=OTHER, force=True)


def test_an_empty_local_dataset_is_filled_without_force() -> None:
    d = decide(met_local=False, remote_id=LOCAL, local_head=None)
    assert d == PullDecision(HeadComparison.LOCAL_BEHIND, False, False, True, False)


def test_a_new_dataset_checks_its_id_is_free() -> None:
    assert decide(existing=False, met_local=False, remote_id=OTHER).check_id_free
    assert decide(existing=False, met_local=True).base_from_local


def test_a_staging_dataset_is_kept_only_if_the_remote_extends_it() -> None:
    kw: dict[str, Any] = {"remote_head": C, "local_head": A}
    assert staging_extends(met_local=True, has_new=True, first_prev=A, **kw)
    assert not staging_extends(met_local=True, has_new=True, first_prev=B, **kw)
    assert not staging_extends(met_local=False, has_new=True, first_prev=A, **kw)
    assert staging_extends(
        met_local=True, has_new=False, first_prev=None, remote_head=A, local_head=A
    )
    assert not staging_extends(met_local=True, has_new=False, first_prev=None, **kw)
