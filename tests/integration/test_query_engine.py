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


def test_a_worker_over_its_resident_memory_bound_is_stopped(
    tables: tuple[QueryTable, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node's watch of a worker's resident memory (``worker_tree_rss``, polled every
    ``MEMORY_POLL_S``) stops it past ``memory_bytes`` + the slack: here the slack is lowered so
    that any worker is past it, and a query that runs for a while is stopped, typed."""
    import node.adapters.query_engine as qe

    engine = DataFusionQueryEngine(warm_workers=1)
    limits = QueryLimits(deadline_s=20.0, memory_bytes=256 << 20, max_rows=1000, max_bytes=8 << 20)
    monkeypatch.setattr(qe, "MEMORY_SLACK_BYTES", 1 - limits.memory_bytes)
    sql = (
        "select sum(a.population * b.population + c.population) as s "
        'from "covid19.canada" a, "covid19.canada" b, "covid19.canada" c'
    )
    try:
        t0 = time.monotonic()
        with pytest.raises(QueryTooLarge, match=r"\(\[query\] memory_bytes\) and was stopped"):
            run(engine, sql, tables, limits=limits)
        assert time.monotonic() - t0 < 10.0  # not its deadline (20 s)
    finally:
        _LOOP.run_until_complete(engine.close())


def test_concurrent_queries_each_get_their_worker(
    engine: DataFusionQueryEngine, tables: tuple[QueryTable, ...]
) -> None:
    async def many() -> list[pa.Table]:
        sql = 'select count(*) as n from "small"'
        return await asyncio.gather(*(engine.query(sql, tables, LIMITS) for _ in range(4)))

    assert [t.to_pylist() for t in _LOOP.run_until_complete(many())] == [[{"n": 3}]] * 4


# ---- streamed answers (Flight SQL's DoGet sends them as the worker computes them)

STREAM_LIMITS = QueryLimits(
    deadline_s=20.0, memory_bytes=256 << 20, max_rows=100_000, max_bytes=64 << 20
)


@pytest.fixture(scope="module")
def streaming() -> Iterator[DataFusionQueryEngine]:
    # Small parts, so a 60,000-row answer comes in many of them.
    e = DataFusionQueryEngine(warm_workers=1, stream_part_bytes=64 << 10)
    yield e
    _LOOP.run_until_complete(e.close())


async def _drain(stream: object) -> list[pa.RecordBatch]:
    out = []
    while (batch := await stream.next_batch()) is not None:  # type: ignore[attr-defined]
        out.append(batch)
    return out


def test_a_streamed_answer_equals_the_whole_answer(
    streaming: DataFusionQueryEngine, tables: tuple[QueryTable, ...]
) -> None:
    sql = 'select "offset", city, population from "covid19.canada" order by "offset"'

    async def both() -> tuple[pa.Table, list[pa.RecordBatch], pa.Schema, int]:
        whole = await streaming.query(sql, tables, STREAM_LIMITS)
        stream = await streaming.query_stream(sql, tables, STREAM_LIMITS)
        try:
            got = await _drain(stream)
        finally:
            await stream.close()
        return whole, got, stream.schema, streaming.started

    whole, got, schema, started = _LOOP.run_until_complete(both())
    assert len(got) > 3  # many parts, each given on as it came
    assert pa.Table.from_batches(got, schema).equals(whole)
    assert whole.num_rows == 60_000
    # The worker answered to its end: it served the next query (no replacement was started).
    again = run(streaming, "select count(*) as n from small", tables)
    assert again.column("n").to_pylist() == [3] and streaming.started == started


def test_an_empty_streamed_answer_has_its_schema(
    streaming: DataFusionQueryEngine, tables: tuple[QueryTable, ...]
) -> None:
    async def go() -> tuple[pa.Schema, list[pa.RecordBatch]]:
        stream = await streaming.query_stream(
            "select k from small where k > 10", tables, STREAM_LIMITS
        )
        try:
            return stream.schema, await _drain(stream)
        finally:
            await stream.close()

    schema, got = _LOOP.run_until_complete(go())
    assert schema.names == ["k"] and sum(b.num_rows for b in got) == 0


def test_a_stream_over_max_rows_fails_after_its_first_parts(
    streaming: DataFusionQueryEngine, tables: tuple[QueryTable, ...]
) -> None:
    limits = QueryLimits(
        deadline_s=20.0, memory_bytes=256 << 20, max_rows=30_000, max_bytes=1 << 30
    )

    async def go() -> int:
        stream = await streaming.query_stream('select * from "covid19.canada"', tables, limits)
        rows = 0
        try:
            with pytest.raises(QueryTooLarge, match=r"max_rows"):
                while (batch := await stream.next_batch()) is not None:
                    rows += batch.num_rows
        finally:
            await stream.close()
        return rows

    rows = _LOOP.run_until_complete(go())
    assert 0 < rows <= 30_000  # what was sent before the bound was found


def test_refusals_come_before_a_stream_starts(
    streaming: DataFusionQueryEngine, tables: tuple[QueryTable, ...]
) -> None:
    with pytest.raises(QueryRejected):
        _LOOP.run_until_complete(
            streaming.query_stream("select * from read_csv('/etc/passwd')", tables, STREAM_LIMITS)
        )


def test_an_abandoned_stream_frees_its_worker(
    streaming: DataFusionQueryEngine, tables: tuple[QueryTable, ...]
) -> None:
    async def go() -> None:
        stream = await streaming.query_stream(
            'select * from "covid19.canada"', tables, STREAM_LIMITS
        )
        assert await stream.next_batch() is not None
        await stream.close()  # the client went away mid-answer
        await stream.close()  # idempotent

    _LOOP.run_until_complete(go())
    # The killed worker was replaced; queries go on.
    assert run(streaming, "select count(*) as n from small", tables).column("n").to_pylist() == [3]


def test_the_deadline_bounds_a_streamed_query_not_its_reader(
    streaming: DataFusionQueryEngine, tables: tuple[QueryTable, ...]
) -> None:
    limits = QueryLimits(
        deadline_s=1.5, memory_bytes=256 << 20, max_rows=100_000, max_bytes=64 << 20
    )
    explode = (
        "select sum(a.population * b.population + c.population) as s "
        'from "covid19.canada" a, "covid19.canada" b, "covid19.canada" c'
    )

    async def go() -> int:
        t0 = time.monotonic()
        with pytest.raises(QueryDeadlineExceeded, match=r"\[query\] deadline_s"):
            stream = await streaming.query_stream(explode, tables, limits)
            await stream.close()
        assert time.monotonic() - t0 < 1.5 + 3.0
        # A quick query read slowly: it finished in time, so its reader gets every row.
        stream = await streaming.query_stream('select * from "covid19.canada"', tables, limits)
        try:
            await asyncio.sleep(2.0)
            return sum(b.num_rows for b in await _drain(stream))
        finally:
            await stream.close()

    assert _LOOP.run_until_complete(go()) == 60_000


def _sessions_made(engine: DataFusionQueryEngine) -> list[str]:
    """The kept sessions' folders of the engine's one idle worker (``s0``, ``s1``...: one per
    session it made, see ``engine/query_worker.py``)."""
    assert len(engine._idle) == 1
    return sorted(p.name for p in (engine._idle[0].dir / "tables").iterdir())


def test_a_worker_keeps_a_session_for_the_same_tables_and_still_refuses_changes(
    tables: tuple[QueryTable, ...],
) -> None:
    engine = DataFusionQueryEngine(warm_workers=1)
    canada, _, small = tables
    both = (canada, small)
    try:
        sql = 'select count(*) as n from "covid19.canada"'
        assert run(engine, sql, both).column("n").to_pylist() == [60_000]
        assert run(engine, 'select sum(k) as s from "small"', both).column("s").to_pylist() == [6]
        assert engine.started == 1
        # The second query on the same tables ran in the first one's session.
        assert _sessions_made(engine) == ["s0"]
        # A reused session still refuses what would change it, when planned...
        for change in (
            "create table x as select 1",
            'create view v as select * from "small"',
            "set datafusion.execution.batch_size = 1",
            'drop table "small"',
        ):
            with pytest.raises(QueryError):
                run(engine, change, both)
        # ...and nothing did: its tables answer as before, still in the one session.
        assert run(engine, sql, both).column("n").to_pylist() == [60_000]
        with pytest.raises(QueryError):
            run(engine, "select * from x", both)
        with pytest.raises(QueryError):
            run(engine, "select * from v", both)
        assert _sessions_made(engine) == ["s0"]
        # A query naming fewer tables does not see a table the kept session registered: it
        # gets a session of its own.
        with pytest.raises(QueryError) as info:
            run(engine, 'select * from "small"', (canada,))
        assert "small" in str(info.value)
        assert run(engine, sql, (canada,)).column("n").to_pylist() == [60_000]
        assert _sessions_made(engine) == ["s0", "s1"]
        # The first set of tables still has its kept session.
        assert run(engine, 'select sum(k) as s from "small"', both).column("s").to_pylist() == [6]
        assert _sessions_made(engine) == ["s0", "s1"]
        # A text whose checked plan the first session keeps is planned afresh on other tables:
        # "small" is not one of them.
        with pytest.raises(QueryError) as info:
            run(engine, 'select sum(k) as s from "small"', (canada,))
        assert "small" in str(info.value)
        assert engine.started == 1
    finally:
        _LOOP.run_until_complete(engine.close())


def test_a_kept_plan_answers_as_a_new_one_and_pages_afresh(
    tables: tuple[QueryTable, ...],
) -> None:
    """The same text on the same tables reuses the session's checked plan
    (``engine/query_worker.py``): its answers, paged differently each time, are the ones a
    fresh worker gives."""
    engine = DataFusionQueryEngine(warm_workers=1)
    fresh = DataFusionQueryEngine(warm_workers=0)
    sql = (
        'select city, count(*) as n, sum(population) as p from "covid19.canada" '
        "group by city order by city"
    )
    try:
        whole = run(engine, sql, tables)
        assert whole.num_rows == 50
        for skip, limit in ((0, None), (10, 5), (0, 50), (45, 10), (0, None)):
            got = run(engine, sql, tables, skip=skip, limit=limit)
            assert got.to_pylist() == whole.slice(skip, limit).to_pylist()
            assert got.to_pylist() == run(fresh, sql, tables, skip=skip, limit=limit).to_pylist()
        assert engine.started == 1
    finally:
        _LOOP.run_until_complete(engine.close())
        _LOOP.run_until_complete(fresh.close())


def test_small_answers_come_inline_large_ones_as_a_file(
    tables: tuple[QueryTable, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An answer within ``INLINE_READ_BYTES`` comes on the worker's stdout after its answer
    line and no answer file is made; a larger one (here: over a lowered bound) is a file, and
    the two read the same rows; an empty answer inline still has its schema."""
    import node.adapters.query_engine as qe

    engine = DataFusionQueryEngine(warm_workers=1)
    sql = 'select "offset", city from "covid19.canada" where "offset" < 400 order by "offset"'
    made: list[int] = []  # the inline answers' sizes
    real_inline = qe.read_inline

    def spy(data: bytes) -> pa.Table:
        made.append(len(data))
        return real_inline(data)

    monkeypatch.setattr(qe, "read_inline", spy)
    try:
        inline = run(engine, sql, tables)
        assert inline.num_rows == 400 and len(made) == 1
        empty = run(engine, sql.replace("< 400", "< 0"), tables)
        assert empty.num_rows == 0 and empty.schema == inline.schema and len(made) == 2
        worker_dir = engine._idle[0].dir
        # No answer directory was made for them (only the worker's log and kept sessions).
        assert sorted(p.name for p in worker_dir.iterdir()) == ["tables", "worker.log"]
        monkeypatch.setattr(qe, "INLINE_READ_BYTES", 1000)
        as_file = run(engine, sql, tables)
        assert len(made) == 2  # not inline
        assert as_file.to_pylist() == inline.to_pylist()
        assert as_file.schema == inline.schema
        # And a worker that answered with a file serves inline answers again.
        monkeypatch.setattr(qe, "INLINE_READ_BYTES", 1 << 20)
        assert run(engine, sql, tables).to_pylist() == inline.to_pylist() and len(made) == 3
        assert engine.started == 1
    finally:
        _LOOP.run_until_complete(engine.close())


@pytest.mark.parametrize("data_format", ["JsonAoS", "JsonAoA", "JsonSoA"])
def test_an_answers_json_text_is_the_encoders(
    engine: DataFusionQueryEngine, tables: tuple[QueryTable, ...], data_format: str
) -> None:
    """The data API writes an answer's rows column by column (``encode_data_json``): the same
    characters as ``json.dumps`` of the row objects, for the types DataFusion answers with."""
    from node.app.query_api import encode_data, encode_data_json, response_json

    sql = """select k, k * 1.5 as f, case when k = 2 then 'nan'::double end as nan,
        case when k = 1 then null else concat('é"%s\\', k) end as s,
        cast(k as decimal(10, 2)) as d, to_timestamp_micros(k * 1000001) as ts,
        cast(k as boolean) as b, [k, k + 1] as l, named_struct('x', k) as st, null as z,
        arrow_cast(concat('v', k), 'Utf8View') as v,
        case when k = 2 then null else -k * 3074457345618258602 end as ni,
        arrow_cast(k, 'UInt64') * arrow_cast(6148914691236517205, 'UInt64') as u,
        arrow_cast(k, 'Int8') as i8,
        k as "%", k as "k2" from "small" order by k"""
    answer = run(engine, sql, tables)
    assert answer.num_rows == 3
    text = encode_data_json(answer, data_format)
    assert text == response_json(encode_data(answer, data_format))
