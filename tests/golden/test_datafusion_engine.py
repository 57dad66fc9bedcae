"""kamu-engine-datafusion's own transform tests, ported (its ``tests/`` at eb01a53), on every
pinned DataFusion release, through the real worker process (``python -m engine.worker
--engine datafusion`` in the release's own virtual environment).

The expected tables are kamu's (``test_transform.rs``); cases it does not cover but the
semantics pin are added: several input slices and their order (physical-hash name order, not
offset order), the watermark as the minimum over inputs, nanosecond timestamps normalised to
ms UTC. ``json_*`` queries (kamu's ``test_json_extensions``) are refused here, with a reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from coordinator.identity import DatasetId
from coordinator.ingest.vocab import Vocab
from coordinator.metadata import model as m
from coordinator.metadata.timestamp import Timestamp
from coordinator.transform.engines import DATAFUSION_VERSIONS
from coordinator.transform.model import (
    TransformInvalidQuery,
    TransformRequest,
    TransformRequestInput,
    TransformSuccess,
    Watermark,
)
from node.engine_client import EngineClient
from node.engine_router import datafusion_python

pytestmark = pytest.mark.integration

MS_UTC = pa.timestamp("ms", tz="UTC")
FOO = DatasetId.new_seeded_ed25519(b"foo")
BAR = DatasetId.new_seeded_ed25519(b"bar")
DEFAULT_QUERY = "select event_time, city, population + 100 as population from foo"
CITIES = [("vancouver", 675_000), ("seattle", 733_000), ("kyiv", 2_884_000)]


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def write_input(path: Path, rows: list[tuple[int, int, str, int]], et: str = "2023-01-01") -> Path:
    """kamu's ``write_sample_data``: (offset, op, city, population), all non-null."""
    schema = pa.schema(
        [
            pa.field("offset", pa.int64(), nullable=False),
            pa.field("op", pa.int32(), nullable=False),
            pa.field("system_time", MS_UTC, nullable=False),
            pa.field("event_time", MS_UTC, nullable=False),
            pa.field("city", pa.string(), nullable=False),
            pa.field("population", pa.int64(), nullable=False),
        ]
    )
    n = len(rows)
    table = pa.table(
        [
            pa.array([r[0] for r in rows], pa.int64()),
            pa.array([r[1] for r in rows], pa.int32()),
            pa.array([ts("2023-02-01T00:00:00Z")] * n, MS_UTC),
            pa.array([ts(f"{et}T00:00:00Z")] * n, MS_UTC),
            pa.array([r[2] for r in rows]),
            pa.array([r[3] for r in rows], pa.int64()),
        ],
        schema=schema,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


def default_rows() -> list[tuple[int, int, str, int]]:
    return [(i, 0, c, p) for i, (c, p) in enumerate(CITIES)]


def request(
    tmp: Path,
    *,
    queries: list[tuple[str | None, str]] | None = None,
    rows: list[tuple[int, int, str, int]] | None = None,
    next_offset: int = 0,
    interval: tuple[int, int] | str | None = "auto",
    data: bool = True,
    watermarks: tuple[str, ...] = (),
) -> TransformRequest:
    rows = default_rows() if rows is None else rows
    f = write_input(tmp / "in" / "input", rows)
    if interval == "auto":
        iv = m.OffsetInterval(start=rows[0][0], end=rows[-1][0]) if rows else None
    elif interval is None:
        iv = None
    else:
        assert isinstance(interval, tuple)
        iv = m.OffsetInterval(start=interval[0], end=interval[1])
    return TransformRequest(
        dataset_id=BAR,
        dataset_alias="bar",
        system_time=Timestamp.parse("2023-03-01T00:00:00Z"),
        vocab=Vocab(),
        transform=m.TransformSql(
            engine="datafusion",
            queries=tuple(
                m.SqlQueryStep(alias=a, query=q) for a, q in (queries or [(None, DEFAULT_QUERY)])
            ),
        ),
        query_inputs=(
            TransformRequestInput(
                dataset_id=FOO,
                dataset_alias="foo",
                query_alias="foo",
                vocab=Vocab(),
                offset_interval=iv if data else None,
                data_paths=(f,) if data else (),
                schema_file=f,
                explicit_watermarks=tuple(
                    Watermark(system_time=Timestamp.parse(w), event_time=Timestamp.parse(w))
                    for w in watermarks
                ),
            ),
        ),
        next_offset=next_offset,
        prev_checkpoint_path=None,
        new_checkpoint_path=tmp / "out" / "checkpoint",
        new_data_path=tmp / "out" / "data",
    )


@pytest.fixture(scope="module", params=DATAFUSION_VERSIONS)
def engine(request: Any) -> Iterator[EngineClient]:
    python = datafusion_python(request.param)
    assert python.is_file(), f"{python} missing: run make setup"
    with EngineClient(engine="datafusion", python=str(python), idle_timeout=0) as client:
        yield client


def rows_of(path: Path) -> list[tuple[Any, ...]]:
    return [tuple(r.values()) for r in pq.read_table(path).to_pylist()]


def expected(
    populations: list[int], *, offsets: int = 0, ops: list[int] | None = None
) -> list[tuple[Any, ...]]:
    st, et = ts("2023-03-01T00:00:00Z"), ts("2023-01-01T00:00:00Z")
    return [
        (offsets + i, (ops or [0] * 3)[i], st, et, c, p)
        for i, ((c, _), p) in enumerate(zip(CITIES, populations, strict=True))
    ]


# kamu-engine-datafusion's test_transform.rs: "OPTIONAL INT64 offset" at v0.8.1 (DataFusion 41
# types row_number() as nullable), "REQUIRED" from v0.9.0 (DataFusion 51); the rest alike.
OFFSET_REPETITION = {"41.0.0": "optional", "51.0.0": "required"}
KAMU_SCHEMA = """required group field_id=-1 schema {
  {offset} int64 field_id=-1 offset;
  required int32 field_id=-1 op;
  required int64 field_id=-1 system_time (Timestamp(isAdjustedToUTC=true, timeUnit=milliseconds, is_from_converted_type=false, force_set_converted_type=false));
  required int64 field_id=-1 event_time (Timestamp(isAdjustedToUTC=true, timeUnit=milliseconds, is_from_converted_type=false, force_set_converted_type=false));
  required binary field_id=-1 city (String);
  required int64 field_id=-1 population;
}"""  # noqa: E501


@pytest.fixture
def release(request: pytest.FixtureRequest) -> str:
    """The DataFusion release of the ``engine`` fixture's worker."""
    return str(request.node.callspec.params["engine"])


def test_result_schema_and_rows(tmp_path: Path, engine: EngineClient, release: str) -> None:
    req = request(tmp_path)
    resp = engine.execute_transform(req)
    assert resp == TransformSuccess(new_offset_interval=m.OffsetInterval(start=0, end=2))
    assert rows_of(req.new_data_path) == expected([675_100, 733_100, 2_884_100])
    printed = str(pq.ParquetFile(req.new_data_path).schema).strip()
    assert printed.split("\n", 1)[1] == KAMU_SCHEMA.replace("{offset}", OFFSET_REPETITION[release])
    meta = pq.ParquetFile(req.new_data_path).metadata
    assert meta.num_row_groups == 1
    assert meta.row_group(0).column(0).compression == "SNAPPY"
    assert "RLE_DICTIONARY" in meta.row_group(0).column(1).encodings  # op
    assert not req.new_checkpoint_path.exists()  # no checkpoint, ever


def test_chain_of_queries(tmp_path: Path, engine: EngineClient) -> None:
    req = request(
        tmp_path,
        queries=[
            ("a", "select event_time, city, population + 100 as population from foo"),
            (None, "select event_time, city, population + 50 as population from a"),
        ],
    )
    assert isinstance(engine.execute_transform(req), TransformSuccess)
    assert rows_of(req.new_data_path) == expected([675_150, 733_150, 2_884_150])


def test_propagates_input_watermark(tmp_path: Path, engine: EngineClient) -> None:
    req = request(tmp_path, watermarks=("2023-01-01T00:00:00Z", "2023-02-01T00:00:00Z"))
    resp = engine.execute_transform(req)
    assert isinstance(resp, TransformSuccess)
    assert resp.new_watermark == Timestamp.parse("2023-02-01T00:00:00Z")


def test_empty_result(tmp_path: Path, engine: EngineClient) -> None:
    req = request(
        tmp_path,
        queries=[(None, "select event_time, city, population from foo where city = 'mumbai'")],
    )
    assert engine.execute_transform(req) == TransformSuccess()
    assert not req.new_data_path.exists()


def test_empty_input(tmp_path: Path, engine: EngineClient) -> None:
    req = request(tmp_path, data=False)
    assert engine.execute_transform(req) == TransformSuccess()
    assert not req.new_data_path.exists()


def test_partial_input(tmp_path: Path, engine: EngineClient) -> None:
    req = request(tmp_path, interval=(1, 1))
    resp = engine.execute_transform(req)
    assert resp == TransformSuccess(new_offset_interval=m.OffsetInterval(start=0, end=0))
    st, et = ts("2023-03-01T00:00:00Z"), ts("2023-01-01T00:00:00Z")
    assert rows_of(req.new_data_path) == [(0, 0, st, et, "seattle", 733_100)]


def test_output_offset(tmp_path: Path, engine: EngineClient) -> None:
    req = request(tmp_path, next_offset=10)
    resp = engine.execute_transform(req)
    assert resp == TransformSuccess(new_offset_interval=m.OffsetInterval(start=10, end=12))
    assert rows_of(req.new_data_path) == expected([675_100, 733_100, 2_884_100], offsets=10)


@pytest.mark.parametrize(
    "query",
    [
        "select event_time, city, populllation from foo",  # bad_sql
        "select 123 as event_time, city, population from foo",  # event_time_as_invalid_type
        "select event_time, city, 1 as offset from foo",  # system column in the output
        "select event_time, city, cast(1 as bigint) as op from foo",  # op must be Int32
    ],
)
def test_invalid_queries(tmp_path: Path, engine: EngineClient, query: str) -> None:
    req = request(tmp_path, queries=[(None, query)])
    assert isinstance(engine.execute_transform(req), TransformInvalidQuery)
    assert not req.new_data_path.exists()


def test_event_time_as_date(tmp_path: Path, engine: EngineClient) -> None:
    req = request(
        tmp_path,
        queries=[
            (None, "select cast(event_time as date) as event_time, city, population from foo")
        ],
    )
    assert isinstance(engine.execute_transform(req), TransformSuccess)
    t = pq.read_table(req.new_data_path)
    assert t.schema.field("event_time").type == pa.date32()
    assert [str(d) for d in t.column("event_time").to_pylist()] == ["2023-01-01"] * 3


def test_event_time_coerced_to_millis(tmp_path: Path, engine: EngineClient) -> None:
    query = (
        "select cast(cast(event_time as STRING) as TIMESTAMP) as event_time, "
        "arrow_cast(event_time, 'Timestamp(Nanosecond, None)') as ns, city, population from foo"
    )
    req = request(tmp_path, queries=[(None, query)])
    assert isinstance(engine.execute_transform(req), TransformSuccess)
    t = pq.read_table(req.new_data_path)
    assert t.schema.field("event_time").type == MS_UTC
    assert t.schema.field("ns").type == MS_UTC  # every timestamp column, not just event time
    assert t.column("event_time").to_pylist() == [ts("2023-01-01T00:00:00Z")] * 3


def test_ident_case_sensitivity(tmp_path: Path, engine: EngineClient) -> None:
    req = request(
        tmp_path,
        queries=[(None, "select event_time, city as City, population as Population from foo")],
    )
    assert isinstance(engine.execute_transform(req), TransformSuccess)
    assert pq.read_table(req.new_data_path).schema.names[-2:] == ["City", "Population"]


def test_json_extensions_are_refused_with_a_reason(tmp_path: Path, engine: EngineClient) -> None:
    query = """select event_time, json_get_int('{"foo": 123}', 'foo') as value from foo"""
    resp = engine.execute_transform(request(tmp_path, queries=[(None, query)]))
    assert isinstance(resp, TransformInvalidQuery)
    assert "datafusion-functions-json" in resp.message


def test_propagates_retractions_corrections(tmp_path: Path, engine: EngineClient) -> None:
    rows = [
        (0, 0, "vancouver", 675_000),
        (1, 2, "vancouver", 675_000),
        (2, 3, "vancouver", 676_000),
        (3, 1, "vancouver", 676_000),
    ]
    req = request(
        tmp_path, rows=rows, queries=[(None, "select op, event_time, city, population from foo")]
    )
    assert isinstance(engine.execute_transform(req), TransformSuccess)
    got = [(r[0], r[1], r[5]) for r in rows_of(req.new_data_path)]
    assert got == [(0, 0, 675_000), (1, 2, 675_000), (2, 3, 676_000), (3, 1, 676_000)]


def test_multiple_slices_come_out_in_physical_hash_name_order(
    tmp_path: Path, engine: EngineClient
) -> None:
    # Three slices whose file names sort differently from their offsets: DataFusion (one
    # target partition) reads them in name order and does not sort by offset.
    names = ["f1620c", "f1620a", "f1620b"]
    files = []
    for k, name in enumerate(names):
        files.append(write_input(tmp_path / "store" / name, [(k, 0, f"c{k}", k)]))
    base = request(tmp_path, queries=[(None, "select event_time, city from foo")])
    inp = base.query_inputs[0]
    req = TransformRequest(
        **{
            **{f: getattr(base, f) for f in base.__dataclass_fields__},
            "query_inputs": (
                TransformRequestInput(
                    **{
                        **{f: getattr(inp, f) for f in inp.__dataclass_fields__},
                        "data_paths": tuple(files),
                        "offset_interval": m.OffsetInterval(start=0, end=2),
                    }
                ),
            ),
        }
    )
    assert isinstance(engine.execute_transform(req), TransformSuccess)
    assert [r[4] for r in rows_of(req.new_data_path)] == ["c1", "c2", "c0"]
    assert [r[0] for r in rows_of(req.new_data_path)] == [0, 1, 2]


def test_watermark_is_the_minimum_over_inputs(tmp_path: Path, engine: EngineClient) -> None:
    base = request(tmp_path, watermarks=("2023-02-01T00:00:00Z",))
    inp = base.query_inputs[0]
    other = TransformRequestInput(
        **{
            **{f: getattr(inp, f) for f in inp.__dataclass_fields__},
            "dataset_id": BAR,
            "query_alias": "baz",
            "explicit_watermarks": (
                Watermark(
                    system_time=Timestamp.parse("2023-01-05T00:00:00Z"),
                    event_time=Timestamp.parse("2023-01-05T00:00:00Z"),
                ),
            ),
        }
    )
    none = TransformRequestInput(
        **{
            **{f: getattr(inp, f) for f in inp.__dataclass_fields__},
            "query_alias": "qux",
            "explicit_watermarks": (),
        }
    )
    req = TransformRequest(
        **{
            **{f: getattr(base, f) for f in base.__dataclass_fields__},
            "query_inputs": (inp, other, none),
        }
    )
    resp = engine.execute_transform(req)
    assert isinstance(resp, TransformSuccess)
    assert resp.new_watermark == Timestamp.parse("2023-01-05T00:00:00Z")


def test_extract_type_depends_on_the_release(tmp_path: Path, engine: EngineClient) -> None:
    """Why the version must be pinned: the same query, two output types."""
    query = "select event_time, extract(year from event_time) as y from foo"
    req = request(tmp_path, queries=[(None, query)])
    assert isinstance(engine.execute_transform(req), TransformSuccess)
    t = pq.read_table(req.new_data_path).schema.field("y").type
    python = Path(engine.python)
    assert t == (pa.float64() if "datafusion-41" in str(python) else pa.int32())


@pytest.mark.parametrize(
    "query",
    [
        "WITH x AS (SELECT * FROM foo WHERE population > 700000) SELECT event_time, city FROM x",
        "SELECT a.event_time, a.city, b.population FROM foo a JOIN foo b ON a.city = b.city",
        "SELECT event_time, city FROM foo WHERE city IN (SELECT city FROM foo WHERE offset > 0)",
        "SELECT event_time, city, row_number() OVER (ORDER BY population) AS r FROM foo",
        "SELECT max(event_time) AS event_time, count(*) AS n FROM foo GROUP BY city",
        "SELECT event_time, city FROM foo UNION ALL SELECT event_time, upper(city) FROM foo",
        "SELECT event_time, CASE WHEN population > 700000 THEN 'big' ELSE 'small' END AS s "
        "FROM foo ORDER BY population LIMIT 2",
        'SELECT event_time, \'now()\' AS literal, "city" AS "current_date" FROM foo',
        "SELECT DISTINCT event_time, city FROM foo",
    ],
)
def test_legitimate_queries_are_accepted(tmp_path: Path, engine: EngineClient, query: str) -> None:
    resp = engine.execute_transform(request(tmp_path, queries=[(None, query)]))
    assert isinstance(resp, TransformSuccess), resp
