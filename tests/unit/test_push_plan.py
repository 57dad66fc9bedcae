"""The decisions of a push ingest made before any input is read (coordinator.ingest.push_plan)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pyarrow as pa
import pytest

from coordinator.chain.validation import ChainState
from coordinator.errors import MergeError, UnsupportedReadOption
from coordinator.ingest.push_plan import IngestLimits, IngestPlan, plan_ingest
from coordinator.ingest.vocab import Vocab
from coordinator.metadata import model as m
from coordinator.metadata.timestamp import Timestamp

LIMITS = IngestLimits(1, 2, 3, 4, 5)
T1 = Timestamp.parse("2024-01-01T00:00:00Z")
T2 = Timestamp.parse("2024-06-01T00:00:00Z")
READ = pa.schema([("event_time", pa.timestamp("ms", tz="UTC")), ("k", pa.string())])


def plan(state: ChainState, merge: m.MergeStrategy | None = None, **kw: Any) -> IngestPlan:
    args: dict[str, Any] = {
        "state": state,
        "merge": merge or m.MergeStrategyAppend(),
        "vocab": Vocab(),
        "read": READ,
        "existing": None,
        "now": T2,
        "event_time": None,
        "watermark": None,
        "limits": LIMITS,
        **kw,
    }
    return plan_ingest(**args)


def test_a_new_dataset_starts_the_chain_and_needs_a_schema() -> None:
    p = plan(ChainState())
    assert (p.prev_offset, p.prev_watermark, p.prev_checkpoint) == (None, None, None)
    assert p.need_schema and p.limits is LIMITS
    assert p.system_time == T2 and p.fallback_event_time == T2
    assert "offset" in p.out_schema.names and "k" in p.new.names
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.need_schema = False  # type: ignore[misc]


def test_the_system_time_never_goes_back_and_event_time_is_the_fallback() -> None:
    p = plan(ChainState(system_time=T2), now=T1, event_time=T1, watermark=T1)
    assert p.system_time == T2
    assert p.fallback_event_time == T1 and p.explicit_watermark == T1


def test_link_columns_are_checked_on_the_read_schema() -> None:
    seen: list[pa.Schema] = []
    plan(ChainState(), check_links=seen.append)
    assert seen == [READ]


def test_a_merge_the_schema_cannot_carry_is_refused_before_reading() -> None:
    with pytest.raises(MergeError):
        plan(ChainState(), m.MergeStrategySnapshot(primary_key=("k",), compare_columns=("x",)))
    with pytest.raises(MergeError):
        plan(ChainState(), m.MergeStrategyChangelogStream(primary_key=("k",)))


def test_a_column_parquet_cannot_hold_is_refused() -> None:
    read = READ.append(pa.field("d", pa.duration("s")))
    with pytest.raises(UnsupportedReadOption):
        plan(ChainState(), read=read)
