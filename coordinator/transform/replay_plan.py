"""The decisions of a replay (:func:`coordinator.transform.verify.replay_transforms`), made
from the chain alone before any engine runs.

:func:`plan_replay_run` lists the ``ExecuteTransform`` blocks to replay, the ``SetTransform``
they are replayed with (kamu: the *current* one), the engine and its pinned versions, why the
query may not reproduce, and how far ahead of the block being judged the engine runs
(batch size, batches in flight, output slots). :meth:`ReplayRunPlan.next_batch` sizes each
batch. The executor in :mod:`coordinator.transform.verify` carries the plan out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from coordinator.metadata import model as m
from coordinator.multiformats import Multihash
from coordinator.transform.engines import DATAFUSION, normalize_engine, version_sensitivity

__all__ = ["DATAFUSION_BATCH", "ReplayRunPlan", "plan_replay_run"]

DATAFUSION_BATCH = 8
"""Blocks per engine round trip in a DataFusion replay. A DataFusion block of a few thousand
rows takes the engine a few ms, as much as one gRPC call from Python; 8 makes the call's share
small while a stop at a mismatch discards at most two batches of speculative work."""


@dataclass(frozen=True, slots=True)
class ReplayRunPlan:
    """What a replay will do.

    ``todo``: the ``ExecuteTransform`` blocks after a ``SetTransform``, oldest first;
    ``batch_size``: the largest batch of blocks per engine round trip; ``depth``: batches in
    flight beyond the one being judged; ``slots``: output directories reused round-robin (at
    most ``depth + 1`` batches are unconsumed).
    """

    todo: tuple[tuple[Multihash, m.MetadataBlock], ...]
    set_transform: m.SetTransform | None
    engine_name: str
    available: tuple[str, ...]
    nondeterministic_reasons: tuple[str, ...]
    version_sensitive_reasons: tuple[str, ...]
    batch_size: int
    depth: int
    slots: int

    def next_batch(self, launched: int, batches: int) -> int:
        """The size of the next batch, ``launched`` blocks in ``batches`` batches so far.

        Batches grow 1, 2, 4… up to ``batch_size`` and shrink towards the end (at most half of
        what is left), so the engine starts at once and the parent's hashing of the last
        batch overlaps the engine's work on the ones after it.
        """
        left = len(self.todo) - launched
        return min(self.batch_size, 1 << min(batches, 16), max(1, left // 2))


def plan_replay_run(
    chain: Sequence[tuple[Multihash, m.MetadataBlock]],
    *,
    reasons: Callable[[m.Transform], tuple[str, ...]],
    pinned_versions: Callable[[str], Iterable[str]] | None,
    can_batch: bool,
    ahead: bool,
    batch: int | None,
    batches_ahead: int,
) -> ReplayRunPlan:
    """The plan of replaying ``chain`` (oldest block first).

    ``reasons`` tells why a transform may not reproduce; ``pinned_versions`` lists the engine
    versions available for an engine name; ``can_batch``: the engine runs a batch of requests
    in one call. ``ahead``, ``batch`` and ``batches_ahead`` as for ``replay_transforms``.
    """
    set_transform: m.SetTransform | None = None
    todo: list[tuple[Multihash, m.MetadataBlock]] = []
    for h, b in chain:
        if isinstance(b.event, m.SetTransform):
            set_transform = b.event
        elif isinstance(b.event, m.ExecuteTransform) and set_transform is not None:
            todo.append((h, b))
    # kamu replays with the *current* SetTransform (transform evolution is a TODO there too).
    current = set_transform
    engine_name = normalize_engine(current.transform.engine) if current is not None else ""
    available: tuple[str, ...] = (
        tuple(pinned_versions(engine_name))
        if pinned_versions is not None and current is not None
        else ()
    )
    size = max(
        1, batch if batch is not None else DATAFUSION_BATCH if engine_name == DATAFUSION else 1
    )
    if not ahead:
        size = 1
    depth = max(1, batches_ahead) if size > 1 and can_batch else 1
    return ReplayRunPlan(
        todo=tuple(todo),
        set_transform=current,
        engine_name=engine_name,
        available=available,
        nondeterministic_reasons=reasons(current.transform) if current is not None else (),
        version_sensitive_reasons=(
            version_sensitivity(current.transform)
            if current is not None and engine_name == DATAFUSION
            else ()
        ),
        batch_size=size,
        depth=depth,
        slots=(depth + 1) * size + 1,
    )
