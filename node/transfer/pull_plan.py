"""The decisions of a pull (:func:`node.transfer.pull.pull`) once the remote chain was walked.

:func:`decide_pull` compares the local and remote chains (kamu's ``CompareChainsResult``) and
decides whether the pull may go on, must replace a diverged local chain (``force``), must walk
the remote chain back to its ``Seed`` first, and which chain state the new blocks are
validated against. :func:`staging_extends` decides whether a new dataset's staging directory,
left by an earlier attempt, can be kept. The executor in :mod:`node.transfer.pull` carries out
the I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from coordinator.errors import DatasetAlreadyExists
from coordinator.identity.dataset_id import DatasetId
from coordinator.multiformats import Multihash
from node.transfer.errors import DivergedHeads

__all__ = ["HeadComparison", "PullDecision", "decide_pull", "staging_extends"]


class HeadComparison(enum.Enum):
    """How the local head relates to the remote one (kamu's ``CompareChainsResult``)."""

    EQUAL = "equal"
    LOCAL_AHEAD = "local-ahead"
    LOCAL_BEHIND = "local-behind"
    DIVERGED = "diverged"


@dataclass(frozen=True, slots=True)
class PullDecision:
    """What the pull does with the walked chain.

    ``rewalk_to_seed``: fetch the blocks older than the walked ones, back to the ``Seed``, so
    the whole remote chain is validated from scratch; ``base_from_local``: validate the new
    blocks against the local dataset's chain state (else from an empty chain);
    ``check_id_free``: a new dataset's id must not be stored under another alias.
    """

    comparison: HeadComparison
    forced: bool
    rewalk_to_seed: bool
    base_from_local: bool
    check_id_free: bool


def staging_extends(
    *,
    met_local: bool,
    has_new: bool,
    first_prev: Multihash | None,
    remote_head: Multihash,
    local_head: Multihash | None,
) -> bool:
    """Whether a staging dataset committed by an earlier attempt (head ``local_head``) is
    extended exactly by the remote chain (else it is started afresh)."""
    return met_local and (
        (not has_new and remote_head == local_head) or (has_new and first_prev == local_head)
    )


def decide_pull(
    *,
    existing: bool,
    met_local: bool,
    remote_id: DatasetId | None,
    local_id: DatasetId,
    local_head: Multihash | None,
    remote_head: Multihash,
    first_prev: Multihash | None,
    force: bool,
    alias: str,
    description: str,
) -> PullDecision:
    """The decision for a walk that did (``met_local``) or did not meet a local block;
    ``first_prev`` is the oldest new block's previous block.

    Raises:
        DatasetAlreadyExists: the remote dataset is not the local ``alias``.
        DivergedHeads: the chains diverged and ``force`` is False.
    """
    if not existing:
        return PullDecision(HeadComparison.LOCAL_BEHIND, False, False, met_local, True)
    diverged = (
        f"local {alias!r} (head {local_head}) and {description} (head {remote_head}) have "
        "diverged; use --force to replace the local chain"
    )
    if not met_local:
        if remote_id != local_id:
            raise DatasetAlreadyExists(
                f"{description} is dataset {remote_id}, but local {alias!r} is "
                f"{local_id}; pull it under another name (--as)"
            )
        if local_head is None:
            return PullDecision(HeadComparison.LOCAL_BEHIND, False, False, True, False)
        if not force:
            raise DivergedHeads(diverged)
        return PullDecision(HeadComparison.DIVERGED, True, False, False, False)
    if local_head != first_prev:
        # The walk met an older local block: remote forked off our history.
        if not force:
            raise DivergedHeads(diverged)
        return PullDecision(HeadComparison.DIVERGED, True, True, False, False)
    return PullDecision(HeadComparison.LOCAL_BEHIND, False, False, True, False)
