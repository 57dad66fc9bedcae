"""The decisions of a replay made from the chain alone (coordinator.transform.replay_plan)."""

from __future__ import annotations

import dataclasses

import pytest

from coordinator.metadata import model as m
from coordinator.metadata.timestamp import Timestamp
from coordinator.multiformats import Multihash
from coordinator.transform.replay_plan import DATAFUSION_BATCH, ReplayRunPlan, plan_replay_run

T = Timestamp.parse("2024-01-01T00:00:00Z")


def block(n: int, event: m.MetadataEvent) -> tuple[Multihash, m.MetadataBlock]:
    b = m.MetadataBlock(system_time=T, sequence_number=n, event=event)
    return Multihash.sha3_256(str(n).encode()), b


def set_transform(engine: str) -> m.SetTransform:
    return m.SetTransform(inputs=(), transform=m.TransformSql(engine=engine, query="select 1"))


EXECUTE = m.ExecuteTransform(query_inputs=())


def plan(chain: list[tuple[Multihash, m.MetadataBlock]], **kw: object) -> ReplayRunPlan:
    args: dict[str, object] = {
        "reasons": lambda t: ("now()",),
        "pinned_versions": lambda name: ("1.0", "0.9"),
        "can_batch": True,
        "ahead": True,
        "batch": None,
        "batches_ahead": 2,
        **kw,
    }
    return plan_replay_run(chain, **args)  # type: ignore[arg-type]


def test_only_transforms_after_a_set_transform_are_replayed_with_the_current_one() -> None:
    chain = [block(0, EXECUTE), block(1, set_transform("spark")), block(2, EXECUTE)]
    chain += [block(3, set_transform("datafusion")), block(4, EXECUTE)]
    p = plan(chain)
    assert [b.sequence_number for _, b in p.todo] == [2, 4]
    assert p.set_transform == chain[3][1].event
    assert p.engine_name == "datafusion" and p.available == ("1.0", "0.9")
    assert p.nondeterministic_reasons == ("now()",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.depth = 0  # type: ignore[misc]


def test_datafusion_batches_two_ahead_others_one_block_ahead() -> None:
    df = plan([block(0, set_transform("datafusion")), block(1, EXECUTE)])
    assert (df.batch_size, df.depth) == (DATAFUSION_BATCH, 2)
    assert df.slots == 3 * DATAFUSION_BATCH + 1
    spark = plan([block(0, set_transform("spark")), block(1, EXECUTE)])
    assert (spark.batch_size, spark.depth, spark.slots) == (1, 1, 3)
    assert spark.version_sensitive_reasons == ()
    serial = plan([block(0, set_transform("datafusion"))], ahead=False)
    assert (serial.batch_size, serial.depth) == (1, 1)
    no_batch = plan([block(0, set_transform("datafusion"))], can_batch=False)
    assert no_batch.depth == 1


def test_a_chain_without_set_transform_plans_nothing() -> None:
    p = plan([block(0, EXECUTE)])
    assert p.todo == () and p.set_transform is None and p.engine_name == ""
    assert p.available == () and p.nondeterministic_reasons == ()


def test_batches_grow_then_shrink_towards_the_end() -> None:
    chain = [block(0, set_transform("datafusion"))] + [block(i, EXECUTE) for i in range(1, 41)]
    p = plan(chain)
    sizes: list[int] = []
    launched = 0
    while launched < len(p.todo):
        n = p.next_batch(launched, len(sizes))
        sizes.append(n)
        launched += n
    assert sizes[:4] == [1, 2, 4, 8] and max(sizes) == DATAFUSION_BATCH
    assert sizes[-1] == 1 and sum(sizes) == 40
