"""The query engine adapter with real DataFusion worker processes (``engine/query_worker.py``).

Answers over quoted dataset names (dots, ``did:odf``), paging, and the hostile shapes of issue 40:
file reading, table functions, DDL/COPY, disallowed functions, an exploding cross join (killed
at its deadline), oversized answers and SQL — each a typed error naming the setting, in time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from node.adapters.query_engine import DataFusionQueryEngine
from node.app.errors import (
    QueryDeadlineExceeded,
    QueryError,
    QueryRejected,
    QueryTooLarge,
)
from node.app.ports import QueryLimits, QueryTable

DID = "did:odf:fed01a1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4e5f6a1b2"
LIMITS = QueryLimits(deadline_s=20.0, memory_bytes=256 << 20, max_rows=1000, max_bytes=8 << 20)


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> tuple[QueryTable, ...]:
    root: Path = tmp_path_factory.mktemp("parts")
    files = []
    for part in range(3):
        n = 20_000
        start = part * n
        t = pa.table(
            {
                "offset": pa.array(range(start, start + n), pa.int64()),
                "op": pa.array([0] * n, pa.int32()),
                "city": pa.array([f"c{i % 50}" for i in range(n)]),
                "population": pa.array([i % 1000 for i in range(start, start + n)], pa.int64()),
            }
        )
        f = root / f"part{part}.parquet"
        pq.write_table(t, f)
        files.append(str(f))
    small = root / "small.parquet"
    pq.write_table(pa.table({"k": [1, 2, 3]}), small)
    return (
        QueryTable("covid19.canada", DID, "f1620aa", tuple(files)),
        QueryTable(DID, DID, "f1620aa", tuple(files)),
        QueryTable("small", "did:odf:small", "f1620bb", (str(small),)),
    )


_LOOP = asyncio.new_event_loop()
"""One loop for the module: the engine's warm workers are subprocesses of the loop that
started them (as in the daemon, which has one loop)."""


@pytest.fixture(scope="module")
def engine() -> Iterator[DataFusionQueryEngine]:
    e = DataFusionQueryEngine(warm_workers=1)
    yield e
    _LOOP.run_until_complete(e.close())


def run(
    engine: DataFusionQueryEngine, sql: str, tables: tuple[QueryTable, ...], **kw: object
) -> pa.Table:
    limits = kw.pop("limits", LIMITS)
    assert isinstance(limits, QueryLimits)
    return _LOOP.run_until_complete(engine.query(sql, tables, limits, **kw))  # type: ignore[arg-type]


def test_answers_over_quoted_dotted_names_and_dids(
    engine: DataFusionQueryEngine, tables: tuple[QueryTable, ...]
) -> None:
    t = run(engine, 'select count(*) as n, sum(population) as p from "covid19.canada"', tables)
    assert t.to_pylist() == [{"n": 60_000, "p": sum(i % 1000 for i in range(60_000))}]
    t = run(engine, f'select max("offset") as m from "{DID}"', tables)
    assert t.to_pylist() == [{"m": 59_999}]


def test_pages_with_skip_and_limit(
    engine: DataFusionQueryEngine, tables: tuple[QueryTable, ...]
) -> None:
    sql = 'select "offset" from "covid19.canada" order by "offset"'
    t = run(engine, sql, tables, skip=10, limit=5)
    assert t.column("offset").to_pylist() == [10, 11, 12, 13, 14]
    assert t.schema.field("offset").type == pa.int64()


@pytest.mark.parametrize(
    ("sql", "needle"),
    [
        ("select * from read_parquet('/etc/passwd')", "read_parquet"),
        ("select * from '/etc/passwd'", ""),
        ("select * from generate_series(1, 100000000000)", "generate_series"),
        ("select * from range(100000000000)", "range"),
        ("copy (select 1) to '/tmp/out.csv'", "COPY"),
        ("create table x as select 1", "CREATE"),
        ('select random() from "small"', "random"),
        ('select now() from "small"', "now"),
        ("select 1; select 2", "one statement"),
    ],
)
def test_hostile_sql_is_refused(
    engine: DataFusionQueryEngine, tables: tuple[QueryTable, ...], sql: str, needle: str
) -> None:
    t0 = time.monotonic()
    with pytest.raises(QueryError) as info:
        run(engine, sql, tables)
    assert time.monotonic() - t0 < LIMITS.deadline_s
    assert isinstance(info.value, QueryRejected) or "not found" in str(info.value).lower()
    assert needle in str(info.value)


def test_an_exploding_cross_join_is_stopped_at_its_deadline(
    engine: DataFusionQueryEngine, tables: tuple[QueryTable, ...]
) -> None:
    limits = QueryLimits(deadline_s=2.0, memory_bytes=256 << 20, max_rows=1000, max_bytes=8 << 20)
    sql = (
        "select sum(a.population * b.population + c.population) as s "
        'from "covid19.canada" a, "covid19.canada" b, "covid19.canada" c'
    )
    started = engine.started
    t0 = time.monotonic()
    with pytest.raises(QueryDeadlineExceeded, match=r"\[query\] deadline_s"):
        run(engine, sql, tables, limits=limits)
    assert time.monotonic() - t0 < 2.0 + 3.0
    # the killed worker is replaced: the next query gets a fresh worker
    assert run(engine, 'select count(*) as n from "small"', tables).to_pylist() == [{"n": 3}]
    assert engine.started > started


def test_oversized_answers_name_their_setting(
    engine: DataFusionQueryEngine, tables: tuple[QueryTable, ...]
) -> None:
    with pytest.raises(QueryTooLarge, match=r"\[query\] max_rows"):
        run(engine, 'select * from "covid19.canada"', tables)
    small_bytes = QueryLimits(
        deadline_s=20.0, memory_bytes=256 << 20, max_rows=100_000, max_bytes=10_000
    )
    with pytest.raises(QueryTooLarge, match=r"\[query\] max_bytes"):
        run(engine, 'select * from "covid19.canada"', tables, limits=small_bytes)
    with pytest.raises(QueryTooLarge, match=r"\[query\] max_rows"):
        run(engine, 'select * from "small"', tables, limit=5000)


def test_a_memory_hungry_query_is_a_typed_error(
    engine: DataFusionQueryEngine, tables: tuple[QueryTable, ...]
) -> None:
    tight = QueryLimits(deadline_s=20.0, memory_bytes=1 << 20, max_rows=1000, max_bytes=8 << 20)
    sql = 'select city, array_agg(population) as a from "covid19.canada" group by city'
    with pytest.raises(QueryTooLarge, match=r"\[query\] memory_bytes"):
        run(engine, sql, tables, limits=tight)


def test_concurrent_queries_each_get_their_worker(
    engine: DataFusionQueryEngine, tables: tuple[QueryTable, ...]
) -> None:
    async def many() -> list[pa.Table]:
        sql = 'select count(*) as n from "small"'
        return await asyncio.gather(*(engine.query(sql, tables, LIMITS) for _ in range(4)))

    assert [t.to_pylist() for t in _LOOP.run_until_complete(many())] == [[{"n": 3}]] * 4
