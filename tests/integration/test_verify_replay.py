"""Transform + replay verification end to end on a real (in-process, warm) Spark session.

Root datasets are built by push ingest; derivatives are transformed by the Spark engine,
committed, and verified by replay with kamu's comparison rule. A forged ExecuteTransform
(consistent hashes, wrong data) must be caught at its block with expected/actual logical hash.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `engine` is a top-level package next to `coordinator`
    sys.path.insert(0, str(ROOT))

from coordinator.metadata import model as m  # noqa: E402
from coordinator.transform import OutputPaths, TransformSuccess, commit_transform  # noqa: E402
from coordinator.transform.plan import clear_outputs, plan_transform  # noqa: E402
from coordinator.transform.run import InvalidTransformQuery, run_transform  # noqa: E402
from coordinator.transform.testing import (  # noqa: E402
    StepClock,
    inputs_of,
    make_derivative,
    make_root,
    push_csv,
)
from coordinator.transform.verify import ReplayVerdict, replay_transforms, verify_dataset  # noqa: E402

pytestmark = pytest.mark.integration

QUERIES = [
    ("big", "SELECT * FROM cities WHERE population > 100"),
    (None, "SELECT op, event_time, city, population * 2 AS pop2 FROM big"),
]
CSV1 = (
    "event_time,city,population\n"
    "2020-01-01T00:00:00Z,A,1000\n2020-01-02T00:00:00Z,B,2000\n2020-01-03T00:00:00Z,C,30\n"
)
CSV2 = "event_time,city,population\n2020-01-04T00:00:00Z,D,4000\n2020-01-05T00:00:00Z,E,5\n"


@pytest.fixture(scope="module")
def engine() -> Iterator[Any]:
    from engine.spark_engine import SparkEngine, create_spark_session

    spark = create_spark_session("local[2]")
    yield SparkEngine(spark)
    # The session is left running: other Spark test modules in this process reuse it.


def rows(ds: Any, *cols: str) -> list[tuple[Any, ...]]:
    out = []
    for _, b in reversed(list(ds.iter_blocks())):
        e = b.event
        if isinstance(e, m.ExecuteTransform | m.AddData) and e.new_data is not None:
            t = pq.read_table(ds.data.path_of(e.new_data.physical_hash))
            out.extend(tuple(r[c] for c in cols) for r in t.to_pylist())
    return out


def test_transform_then_verify_passes(tmp_path: Path, engine: Any) -> None:
    clock = StepClock()
    root = make_root(tmp_path, "root")
    push_csv(root, tmp_path / "in", CSV1, clock)
    der = make_derivative(tmp_path, "der", [(root, "cities")], QUERIES)
    inputs = inputs_of(root)
    r1 = run_transform(der, inputs, engine, clock=clock)
    assert r1 is not None and r1.event.new_data is not None
    assert run_transform(der, inputs, engine, clock=clock) is None  # up to date
    push_csv(root, tmp_path / "in", CSV2, clock)
    r2 = run_transform(der, inputs, engine, clock=clock)
    assert r2 is not None and r2.event.new_data is not None
    assert r2.event.new_data.offset_interval == m.OffsetInterval(start=2, end=2)
    assert r2.event.prev_checkpoint == r1.event.new_checkpoint.physical_hash  # type: ignore[union-attr]
    assert rows(der, "offset", "op", "city", "pop2") == [
        (0, 0, "A", 2000),
        (1, 0, "B", 4000),
        (2, 0, "D", 8000),
    ]
    schema = pq.read_schema(der.data.path_of(r2.event.new_data.physical_hash))
    assert schema.names == ["offset", "op", "system_time", "event_time", "city", "pop2"]
    assert schema.field("offset").type == pa.int64()
    assert schema.field("op").type == pa.int32()
    assert schema.field("system_time").type == pa.timestamp("ms", tz="UTC")
    assert r2.event.new_watermark is not None
    assert str(r2.event.new_watermark) == "2020-01-05T00:00:00Z"

    progress: list[tuple[str, int, int]] = []
    report = verify_dataset(
        der, inputs, engine, listener=lambda p, d, t: progress.append((p, d, t))
    )
    assert report.ok, report
    assert report.replay is not None
    assert report.replay.blocks_replayed == report.replay.blocks_total == 2
    assert ("replay", 2, 2) in progress


def test_forged_execute_transform_is_caught(tmp_path: Path, engine: Any) -> None:
    clock = StepClock()
    root = make_root(tmp_path, "root")
    push_csv(root, tmp_path / "in", CSV1, clock)
    der = make_derivative(tmp_path, "der", [(root, "cities")], QUERIES)
    inputs = inputs_of(root)
    assert run_transform(der, inputs, engine, clock=clock) is not None
    push_csv(root, tmp_path / "in", CSV2, clock)

    # Forge the second step: run the engine for real, then tamper with the data before commit.
    paths = OutputPaths.under(tmp_path / "forge")
    plan = plan_transform(der, inputs, system_time=clock(), paths=paths)
    assert plan is not None
    clear_outputs(paths)
    resp = engine.execute_transform(plan.request)
    assert isinstance(resp, TransformSuccess)
    t = pq.read_table(paths.new_data_path)
    forged = t.set_column(5, "pop2", pa.array([9999], pa.int64()))
    pq.write_table(forged, paths.new_data_path)
    forged_result = commit_transform(der, plan, resp)
    assert forged_result.new_head is not None

    report = verify_dataset(der, inputs, engine)
    assert report.integrity.ok  # blocks and hashes are all consistent
    replay = report.replay
    assert replay is not None and not report.ok
    assert replay.verdict is ReplayVerdict.MISMATCH
    assert replay.blocks_replayed == 1
    mm = replay.mismatch
    assert mm is not None
    assert mm.block_hash == forged_result.new_head
    assert mm.expected == forged_result.event
    assert mm.expected.new_data is not None and mm.actual.new_data is not None
    assert mm.expected.new_data.logical_hash != mm.actual.new_data.logical_hash
    assert any(d.startswith("new_data.logical_hash: expected") for d in mm.differences)
    assert str(mm.expected.new_data.logical_hash) in mm.describe()


def test_retractions_and_corrections_propagate_in_order(tmp_path: Path, engine: Any) -> None:
    clock = StepClock()
    root = make_root(
        tmp_path,
        "snap",
        ("city STRING", "population BIGINT"),
        m.MergeStrategySnapshot(primary_key=("city",)),
    )
    push_csv(root, tmp_path / "in", "city,population\nA,1000\nB,2000\nC,3000\nZ,7\n", clock)
    der = make_derivative(
        tmp_path,
        "der",
        [(root, "cities")],
        [(None, "SELECT op, event_time, city, population FROM cities WHERE city <> 'Z'")],
    )
    inputs = inputs_of(root)
    assert run_transform(der, inputs, engine, clock=clock) is not None
    # B changes (correction), C disappears (retraction), D appears (append).
    push_csv(root, tmp_path / "in", "city,population\nA,1000\nB,2500\nD,4000\n", clock)
    assert run_transform(der, inputs, engine, clock=clock) is not None
    root_rows = [r for r in rows(root, "op", "city", "population") if r[1] != "Z"]
    der_rows = rows(der, "op", "city", "population")
    assert der_rows == root_rows
    assert {op for op, _, _ in der_rows[3:]} >= {1, 2, 3}  # retract + correct-from/to
    assert [r[0] for r in rows(der, "offset")] == list(range(len(der_rows)))
    assert verify_dataset(der, inputs, engine).ok


def test_dropped_op_becomes_append(tmp_path: Path, engine: Any) -> None:
    clock = StepClock()
    root = make_root(tmp_path, "root")
    push_csv(root, tmp_path / "in", CSV1, clock)
    der = make_derivative(
        tmp_path, "der", [(root, "cities")], [(None, "SELECT event_time, city FROM cities")]
    )
    assert run_transform(der, inputs_of(root), engine, clock=clock) is not None
    assert rows(der, "op", "city") == [(0, "A"), (0, "B"), (0, "C")]


def test_nondeterministic_query_mismatch_is_not_fraud(tmp_path: Path, engine: Any) -> None:
    clock = StepClock()
    root = make_root(tmp_path, "root")
    push_csv(root, tmp_path / "in", CSV1, clock)
    der = make_derivative(
        tmp_path,
        "der",
        [(root, "cities")],
        [(None, "SELECT max(event_time) AS event_time, count(*) AS n FROM cities")],
    )
    paths = OutputPaths.under(tmp_path / "forge")
    plan = plan_transform(der, inputs_of(root), system_time=clock(), paths=paths)
    assert plan is not None
    clear_outputs(paths)
    resp = engine.execute_transform(plan.request)
    assert isinstance(resp, TransformSuccess)
    t = pq.read_table(paths.new_data_path)
    pq.write_table(t.set_column(4, "n", pa.array([42], pa.int64())), paths.new_data_path)
    commit_transform(der, plan, resp)
    report = replay_transforms(der, inputs_of(root), engine)
    assert report.verdict is ReplayVerdict.NOT_REPRODUCIBLE
    assert any("aggregat" in r for r in report.nondeterministic_reasons)


def test_invalid_query_commits_nothing(tmp_path: Path, engine: Any) -> None:
    clock = StepClock()
    root = make_root(tmp_path, "root")
    push_csv(root, tmp_path / "in", CSV1, clock)
    der = make_derivative(
        tmp_path, "der", [(root, "cities")], [(None, "SELECT reflect('java.lang.System', 'exit')")]
    )
    head = der.head()
    with pytest.raises(InvalidTransformQuery, match="reflect"):
        run_transform(der, inputs_of(root), engine, clock=clock)
    assert der.head() == head
    assert not any(der.layout.data_dir.iterdir())


def test_verify_rejects_tampered_offsets(tmp_path: Path, engine: Any) -> None:
    """A forged event whose declared output interval differs from the replay's."""
    clock = StepClock()
    root = make_root(tmp_path, "root")
    push_csv(root, tmp_path / "in", CSV1, clock)
    der = make_derivative(tmp_path, "der", [(root, "cities")], QUERIES)
    paths = OutputPaths.under(tmp_path / "forge")
    plan = plan_transform(der, inputs_of(root), system_time=clock(), paths=paths)
    assert plan is not None
    clear_outputs(paths)
    resp = engine.execute_transform(plan.request)
    assert isinstance(resp, TransformSuccess) and resp.new_offset_interval is not None
    t = pq.read_table(paths.new_data_path).slice(0, 1)  # drop a row, keep offsets consistent
    pq.write_table(t, paths.new_data_path)
    commit_transform(der, plan, replace(resp, new_offset_interval=m.OffsetInterval(start=0, end=0)))
    report = replay_transforms(der, inputs_of(root), engine)
    assert report.verdict is ReplayVerdict.MISMATCH
    assert report.mismatch is not None
    assert any(d.startswith("new_data.offset_interval") for d in report.mismatch.differences)


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("SELECT op, event_time, city FROM cities WHERE population > 1", None),
        ("SELECT 'join' AS s, event_time FROM cities", None),
        ("SELECT city, count(*) AS n FROM cities GROUP BY city", "aggregation"),
        ("SELECT a.city FROM cities a JOIN cities b ON a.city = b.city", "join"),
        ("SELECT DISTINCT city FROM cities", "DISTINCT"),
        ("SELECT city, rand() AS r FROM cities", "random"),
        ("SELECT city, uuid() AS r FROM cities", "random"),
        ("SELECT city, current_timestamp() AS t FROM cities", "current time"),
        ("SELECT city, row_number() OVER (ORDER BY city) AS n FROM cities", "window"),
        ("SELECT city FROM cities UNION SELECT city FROM cities", "set operation"),
    ],
)
def test_engine_classifies_nondeterminism_from_plans(
    engine: Any, query: str, reason: str | None
) -> None:
    t = m.TransformSql(engine="spark", queries=(m.SqlQueryStep(query=query),))
    reasons = engine.nondeterminism(t)
    if reason is None:
        assert reasons == ()
    else:
        assert any(reason in r for r in reasons), reasons
