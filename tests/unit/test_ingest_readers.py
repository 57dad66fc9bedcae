"""Streaming readers: CSV, NDJSON, JSON documents and Parquet; errors name column and row."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from coordinator.errors import BadInputData, UnsupportedReadOption
from coordinator.ingest.convert import ConversionFailure, parse_timestamps
from coordinator.ingest.readers import read_batches, read_schema
from coordinator.metadata import model as m

UTC = dt.UTC
SCHEMA = ("city STRING", "population BIGINT", "ts TIMESTAMP")


def rows(step: m.ReadStep, path: Path, **kw: int) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for batch in read_batches(step, path, **kw):  # type: ignore[arg-type]
        assert batch.schema == read_schema(step)
        out.extend(batch.to_pylist())
    return out


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# -- CSV ------------------------------------------------------------------------------------


def test_csv_basic(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "a.csv",
        "city,population,ts\nA,1000,2020-01-01\nB,,2020-01-02T10:00:00+02:00\n,3,\n",
    )
    got = rows(m.ReadStepCsv(ddl_schema=SCHEMA, header=True), p)
    assert got == [
        {"city": "A", "population": 1000, "ts": dt.datetime(2020, 1, 1, tzinfo=UTC)},
        {"city": "B", "population": None, "ts": dt.datetime(2020, 1, 2, 8, tzinfo=UTC)},
        # Empty fields are null for every type, strings included (arrow-rs CSV).
        {"city": None, "population": 3, "ts": None},
    ]


def test_csv_columns_are_positional_and_header_defaults_to_false(tmp_path: Path) -> None:
    p = write(tmp_path, "a.csv", "X,1,2020-01-01T00:00:00Z\n")
    got = rows(m.ReadStepCsv(ddl_schema=SCHEMA), p)
    assert got[0]["city"] == "X"
    # With header: true the first line is skipped, not matched by name.
    p2 = write(tmp_path, "b.csv", "whatever,names,here\nY,2,2020-01-01\n")
    assert [r["city"] for r in rows(m.ReadStepCsv(ddl_schema=SCHEMA, header=True), p2)] == ["Y"]


def test_csv_options(tmp_path: Path) -> None:
    p = write(tmp_path, "a.csv", "city;population;ts\n'a;b';NA;2020-01-01 12:00:00\n")
    step = m.ReadStepCsv(ddl_schema=SCHEMA, header=True, separator=";", quote="'", null_value="NA")
    assert rows(step, p) == [
        {"city": "a;b", "population": None, "ts": dt.datetime(2020, 1, 1, 12, tzinfo=UTC)}
    ]


def test_dates_with_a_one_digit_month_or_day(tmp_path: Path) -> None:
    # arrow-rs's parse_date (kamu's CSV and JSON readers) reads YYYY-M-D, YYYY-MM-D and
    # YYYY-M-DD; kamu's EsriShapefile reader writes .dbf dates that way ("2024-3-7").
    step = m.ReadStepNdJson(ddl_schema=("d DATE",))
    days = ["2024-3-7", "2024-12-7", "2024-3-17", "2024-03-07"]
    p = write(tmp_path, "d.json", "".join(json.dumps({"d": d}) + "\n" for d in days))
    assert [r["d"] for r in rows(step, p)] == [
        dt.date(2024, 3, 7),
        dt.date(2024, 12, 7),
        dt.date(2024, 3, 17),
        dt.date(2024, 3, 7),
    ]
    for bad in ("2024-13-1", "2024-3-7T00:00:00", "2024-1-"):
        q = write(tmp_path, "bad.json", '{"d": "2024-1-1"}\n' + json.dumps({"d": bad}) + "\n")
        with pytest.raises(BadInputData, match="cannot convert") as e:
            rows(step, q)
        assert e.value.row == 2 and e.value.column == "d"


def test_csv_custom_timestamp_and_date_formats(tmp_path: Path) -> None:
    p = write(tmp_path, "a.csv", "01/02/2020 10:30,03.04.2021\n")
    step = m.ReadStepCsv(
        ddl_schema=("ts TIMESTAMP", "d DATE"),
        timestamp_format="%d/%m/%Y %H:%M",
        date_format="%d.%m.%Y",
    )
    assert rows(step, p) == [
        {"ts": dt.datetime(2020, 2, 1, 10, 30, tzinfo=UTC), "d": dt.date(2021, 4, 3)}
    ]


def test_csv_quoted_newlines(tmp_path: Path) -> None:
    p = write(tmp_path, "a.csv", 'city,population,ts\n"multi\nline",1,\n')
    assert rows(m.ReadStepCsv(ddl_schema=SCHEMA, header=True), p)[0]["city"] == "multi\nline"


def test_csv_bad_value_names_column_and_row(tmp_path: Path) -> None:
    lines = ["city,population,ts"] + [f"c{i},{i},2020-01-01" for i in range(5000)]
    lines[3001] = "c3000,oops,2020-01-01"  # record 3001 (line 3002)
    p = write(tmp_path, "a.csv", "\n".join(lines) + "\n")
    with pytest.raises(BadInputData) as e:
        rows(m.ReadStepCsv(ddl_schema=SCHEMA, header=True), p, block_bytes=4096)
    assert e.value.column == "population"
    assert e.value.row == 3001
    assert "oops" in str(e.value)


def test_csv_bad_timestamp(tmp_path: Path) -> None:
    p = write(tmp_path, "a.csv", "A,1,2020-01-01\nB,2,yesterday\n")
    with pytest.raises(BadInputData) as e:
        rows(m.ReadStepCsv(ddl_schema=SCHEMA), p)
    assert (e.value.column, e.value.row) == ("ts", 2)


def test_csv_wrong_field_count(tmp_path: Path) -> None:
    p = write(tmp_path, "a.csv", "h\nA,1,2020-01-01\n\nB,2,2020-01-01,extra\n")
    with pytest.raises(BadInputData) as e:
        rows(m.ReadStepCsv(ddl_schema=SCHEMA, header=True), p)
    assert e.value.column is None
    assert e.value.row == 2
    assert e.value.line == 4
    assert "expected 3 fields" in str(e.value)


def test_csv_not_null(tmp_path: Path) -> None:
    p = write(tmp_path, "a.csv", "A,1\nB,\n")
    with pytest.raises(BadInputData) as e:
        rows(m.ReadStepCsv(ddl_schema=("city STRING", "n BIGINT NOT NULL")), p)
    assert (e.value.column, e.value.row) == ("n", 2)


def test_csv_streams_in_bounded_batches(tmp_path: Path) -> None:
    p = write(tmp_path, "a.csv", "".join(f"c{i},{i},2020-01-01\n" for i in range(20_000)))
    batches = list(read_batches(m.ReadStepCsv(ddl_schema=SCHEMA), p, block_bytes=16 * 1024))
    assert len(batches) > 10
    assert sum(b.num_rows for b in batches) == 20_000
    assert max(b.num_rows for b in batches) < 2000


@pytest.mark.parametrize(
    "step",
    [
        m.ReadStepCsv(ddl_schema=SCHEMA, separator=";;"),
        m.ReadStepCsv(ddl_schema=SCHEMA, encoding="latin1"),
        m.ReadStepCsv(ddl_schema=SCHEMA, timestamp_format="yyyy-MM-dd"),
        m.ReadStepCsv(ddl_schema=None),
        m.ReadStepCsv(ddl_schema=("a ARRAY<INT>",)),
    ],
)
def test_unsupported_options(tmp_path: Path, step: m.ReadStep) -> None:
    p = write(tmp_path, "a.csv", "A,1,2020-01-01\n")
    with pytest.raises(UnsupportedReadOption):
        rows(step, p)


def test_empty_file_yields_nothing(tmp_path: Path) -> None:
    p = write(tmp_path, "a.csv", "")
    for step in (
        m.ReadStepCsv(ddl_schema=SCHEMA),
        m.ReadStepNdJson(ddl_schema=SCHEMA),
        m.ReadStepJson(ddl_schema=SCHEMA),
    ):
        assert rows(step, p) == []
    assert (
        rows(m.ReadStepCsv(ddl_schema=SCHEMA, header=True), write(tmp_path, "h.csv", "a,b,c\n"))
        == []
    )


# -- NDJSON / JSON --------------------------------------------------------------------------


def test_ndjson(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "a.ndjson",
        '{"city": "A", "population": 1, "ts": "2020-01-01T00:00:00Z", "extra": [1]}\n'
        "\n"
        '{"city": "B"}\n',
    )
    assert rows(m.ReadStepNdJson(ddl_schema=SCHEMA), p) == [
        {"city": "A", "population": 1, "ts": dt.datetime(2020, 1, 1, tzinfo=UTC)},
        {"city": "B", "population": None, "ts": None},
    ]


def test_ndjson_errors_name_column_row_and_line(tmp_path: Path) -> None:
    text = "".join(json.dumps({"city": f"c{i}", "population": i}) + "\n" for i in range(3000))
    text += "\n" + json.dumps({"city": "x", "population": "many"}) + "\n"
    p = write(tmp_path, "a.ndjson", text)
    with pytest.raises(BadInputData) as e:
        rows(m.ReadStepNdJson(ddl_schema=SCHEMA), p, block_bytes=10_000)
    assert (e.value.column, e.value.row, e.value.line) == ("population", 3001, 3002)

    p2 = write(tmp_path, "b.ndjson", '{"city": "a"}\n{"ts": "soon"}\n')
    with pytest.raises(BadInputData) as e:
        rows(m.ReadStepNdJson(ddl_schema=SCHEMA), p2)
    assert (e.value.column, e.value.row, e.value.line) == ("ts", 2, 2)

    p3 = write(tmp_path, "c.ndjson", '{"city": "a"}\n{not json\n')
    with pytest.raises(BadInputData) as e:
        rows(m.ReadStepNdJson(ddl_schema=SCHEMA), p3)
    assert e.value.line == 2


def test_json_document_with_sub_path(tmp_path: Path) -> None:
    doc = {
        "meta": {"skip": [1, 2, {"nested": "]"}]},
        "data": {"items": [{"city": f"c{i}", "population": i} for i in range(2000)]},
    }
    p = write(tmp_path, "a.json", json.dumps(doc, indent=2))
    step = m.ReadStepJson(ddl_schema=SCHEMA, sub_path="data.items")
    got = rows(step, p, block_bytes=1000)
    assert [r["population"] for r in got] == list(range(2000))


def test_json_document_root_array_and_errors(tmp_path: Path) -> None:
    p = write(tmp_path, "a.json", '[{"city": "A"}, {"city": "B", "population": 2}]')
    assert [r["city"] for r in rows(m.ReadStepJson(ddl_schema=SCHEMA), p)] == ["A", "B"]
    with pytest.raises(BadInputData, match="Sub-path not found: x"):
        rows(m.ReadStepJson(ddl_schema=SCHEMA, sub_path="x"), p)
    p2 = write(tmp_path, "b.json", '{"x": {"y": 1}}')
    with pytest.raises(BadInputData, match="does not specify an array"):
        rows(m.ReadStepJson(ddl_schema=SCHEMA, sub_path="x"), p2)
    p3 = write(tmp_path, "c.json", '[{"city": "A"}, {"population": true}]')
    with pytest.raises(BadInputData) as e:
        rows(m.ReadStepJson(ddl_schema=SCHEMA), p3)
    assert (e.value.column, e.value.row) == ("population", 2)
    p4 = write(tmp_path, "d.json", '[{"city": "A"}, 5]')
    with pytest.raises(BadInputData) as e:
        rows(m.ReadStepJson(ddl_schema=SCHEMA), p4)
    assert e.value.row == 2


# -- Parquet --------------------------------------------------------------------------------


def test_parquet_is_cast_to_the_declared_schema(tmp_path: Path) -> None:
    t = pa.table(
        {
            "ts": pa.array([1_000_000_123], pa.timestamp("us")),
            "population": pa.array([7], pa.int32()),
            "city": ["A"],
            "ignored": [1.5],
        }
    )
    p = tmp_path / "a.parquet"
    pq.write_table(t, p)
    assert rows(m.ReadStepParquet(ddl_schema=SCHEMA), p) == [
        {"city": "A", "population": 7, "ts": dt.datetime(1970, 1, 1, 0, 16, 40, tzinfo=UTC)}
    ]


def test_parquet_missing_column_and_bad_value(tmp_path: Path) -> None:
    p = tmp_path / "a.parquet"
    pq.write_table(pa.table({"city": ["A"], "population": [1]}), p)
    with pytest.raises(BadInputData) as e:
        rows(m.ReadStepParquet(ddl_schema=SCHEMA), p)
    assert e.value.column == "ts"
    p2 = tmp_path / "b.parquet"
    pq.write_table(pa.table({"city": ["A", "B"], "population": ["1", "x"], "ts": [None, None]}), p2)
    with pytest.raises(BadInputData) as e:
        rows(m.ReadStepParquet(ddl_schema=SCHEMA), p2)
    assert (e.value.column, e.value.row) == ("population", 2)


# -- Timestamp parsing ----------------------------------------------------------------------


def test_parse_timestamps_rfc3339_forms() -> None:
    values = [
        "2020-01-01",
        "2020-01-01T123456",
        "2020-01-01 12:34:56",
        "2020-01-01T12:34:56.789123456Z",
        "2020-01-01T12:00:00-05:30",
        "2020-01-01t12:00:00 +0100",
        "2020-01-01T00:00:00.1234567891234+01",
        "1969-12-31T23:59:59.9995Z",
        None,
    ]
    day = 1577836800000
    expected = [
        day,
        day + ((12 * 60 + 34) * 60 + 56) * 1000,
        day + ((12 * 60 + 34) * 60 + 56) * 1000,
        day + ((12 * 60 + 34) * 60 + 56) * 1000 + 789,
        day + (17 * 60 + 30) * 60_000,
        day + 11 * 3_600_000,
        day - 3_600_000 + 123,
        0,  # -0.5 ms truncates towards zero, as arrow-rs's cast does
        None,
    ]
    assert parse_timestamps(pa.array(values)).cast(pa.int64()).to_pylist() == expected
    # Uniform inputs take Arrow's cast fast paths; the results are the same.
    for i, v in enumerate(values):
        got = parse_timestamps(pa.array([v, v], pa.string())).cast(pa.int64()).to_pylist()
        assert got == [expected[i]] * 2, v


@pytest.mark.parametrize(
    "bad",
    [
        "2020-13-01",
        "2020-01-01T25:00:00",
        "2020-01-01T12:00",  # arrow-rs needs seconds
        "2020-01-01T12",
        "2020-01-01Z",
        "1500-01-01",
        "now",
        "",
        # RFC 3339 offsets are hours 00-23 and minutes 00-59, in every zone form.
        "2020-01-01T00:00:00+25:00",
        "2020-01-01T00:00:00-24:00",
        "2020-01-01T00:00:00+23:60",
        "2020-01-01T00:00:00+2500",
        "2020-01-01T00:00:00+99",
        "2020-01-01 00:00:00 +24",
    ],
)
def test_parse_timestamps_rejects(bad: str) -> None:
    for values in (["2020-01-01", bad], ["2020-01-01T00:00:00Z", bad]):
        with pytest.raises(ConversionFailure) as e:
            parse_timestamps(pa.array(values))
        assert e.value.index == 1


def test_csv_bad_boolean_and_decimal(tmp_path: Path) -> None:
    p = write(tmp_path, "a.csv", "1.5,true\n2.25,TRUE\n3,yes\n")
    with pytest.raises(BadInputData) as e:
        rows(m.ReadStepCsv(ddl_schema=("x DECIMAL(10,2)", "b BOOLEAN")), p)
    assert (e.value.column, e.value.row) == ("b", 3)
    p2 = write(tmp_path, "b.csv", "1.5,true\nabc,false\n")
    with pytest.raises(BadInputData) as e:
        rows(m.ReadStepCsv(ddl_schema=("x DECIMAL(10,2)", "b BOOLEAN")), p2)
    assert (e.value.column, e.value.row) == ("x", 2)


def test_parse_timestamps_extreme_valid_offsets() -> None:
    values = ["2020-01-01T00:00:00+23:59", "2020-01-01T00:00:00-2359", "2020-01-01T00:00:00Z"]
    got = parse_timestamps(pa.array(values)).cast(pa.int64()).to_pylist()
    day, span = 1577836800000, (23 * 60 + 59) * 60_000
    assert got == [day - span, day + span, day]


# -- GeoJSON, NdGeoJSON (kamu-cli, src/infra/ingest-datafusion/tests/tests/test_reader_geojson.rs,
# test_reader_ndgeojson.rs: the same inputs and expected rows) -------------------------------

GEO_SCHEMA = ("id INT", "zipcode STRING", "name STRING", "geometry STRING")
FEATURES = [
    '{"type": "Feature", "properties": {"id": 0, "zipcode": "00101", "name": "A"}, "geometry": '
    '{"type": "Polygon", "coordinates": [[[0.0, 0.0],[10.0, 0.0],[10.0, 10.0],[0.0, 10.0],'
    "[0.0, 0.0]]]}}",
    '{"type": "Feature", "properties": {"id": 1, "zipcode": "00202", "name": "B"}, "geometry": '
    '{"type": "Polygon", "coordinates": [[[0.0, 0.0],[20.0, 0.0],[20.0, 20.0],[0.0, 20.0],'
    "[0.0, 0.0]]]}}",
]
KAMU_GEO_ROWS = [
    {
        "id": 0,
        "zipcode": "00101",
        "name": "A",
        "geometry": '{"coordinates":[[[0.0,0.0],[10.0,0.0],[10.0,10.0],[0.0,10.0],[0.0,0.0]]],'
        '"type":"Polygon"}',
    },
    {
        "id": 1,
        "zipcode": "00202",
        "name": "B",
        "geometry": '{"coordinates":[[[0.0,0.0],[20.0,0.0],[20.0,20.0],[0.0,20.0],[0.0,0.0]]],'
        '"type":"Polygon"}',
    },
]


def test_geojson_feature_collection(tmp_path: Path) -> None:
    text = '{"type":"FeatureCollection","features":[\n    ' + ",\n    ".join(FEATURES) + "\n]}\n"
    p = write(tmp_path, "a.geojson", text)
    assert rows(m.ReadStepGeoJson(ddl_schema=GEO_SCHEMA), p) == KAMU_GEO_ROWS


def test_ndgeojson(tmp_path: Path) -> None:
    p = write(tmp_path, "a.ndgeojson", "\n".join(FEATURES) + "\n\n")
    assert rows(m.ReadStepNdGeoJson(ddl_schema=GEO_SCHEMA), p) == KAMU_GEO_ROWS
    # Columns are matched by name, as for NDJSON: a subset and another order.
    assert rows(m.ReadStepNdGeoJson(ddl_schema=("geometry STRING", "name STRING")), p) == [
        {"geometry": r["geometry"], "name": r["name"]} for r in KAMU_GEO_ROWS
    ]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"type": "Point", "coordinates": [1, 2]}', "Expected Feature type but got Point"),
        ('{"type": "Feature", "properties": null, "geometry": {}}', "properties and geometry"),
        ('{"type": "Feature", "properties": {"id": 1}', "invalid GeoJSON feature"),
        ('{"type": "Feature", "properties": {"id": "x"}, "geometry": {}}', "id"),
    ],
)
def test_ndgeojson_bad_features(tmp_path: Path, line: str, message: str) -> None:
    p = write(tmp_path, "a.ndgeojson", FEATURES[0] + "\n" + line + "\n")
    with pytest.raises(BadInputData, match=message) as e:
        rows(m.ReadStepNdGeoJson(ddl_schema=GEO_SCHEMA), p)
    assert e.value.line == 2 or e.value.row == 2
