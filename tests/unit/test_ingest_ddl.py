"""DDL schema strings -> Arrow, following kamu v0.153 (DataFusion 33 + force_utc_time)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from coordinator.errors import InvalidDdlSchema
from coordinator.ingest.ddl import normalize_schema, parse_ddl


@pytest.mark.parametrize(
    ("ddl", "expected"),
    [
        ("a STRING", pa.string()),
        ("a string", pa.string()),
        ("a TEXT", pa.string()),
        ("a VARCHAR", pa.string()),
        ("a VARCHAR(10)", pa.string()),
        ("a CHAR(2)", pa.string()),
        ("a BIGINT", pa.int64()),
        ("a INT8", pa.int64()),
        ("a INT", pa.int32()),
        ("a INTEGER", pa.int32()),
        ("a INT(11)", pa.int32()),
        ("a SMALLINT", pa.int16()),
        ("a TINYINT", pa.int8()),
        ("a INT UNSIGNED", pa.uint32()),
        ("a BIGINT UNSIGNED", pa.uint64()),
        ("a FLOAT", pa.float32()),  # DataFusion, unlike Spark, maps FLOAT to Float32
        ("a REAL", pa.float32()),
        ("a DOUBLE", pa.float64()),
        ("a DOUBLE PRECISION", pa.float64()),
        ("a BOOLEAN", pa.bool_()),
        ("a bool", pa.bool_()),
        ("a DATE", pa.date32()),
        ("a TIMESTAMP", pa.timestamp("ns", tz="UTC")),
        ("a TIMESTAMP WITHOUT TIME ZONE", pa.timestamp("ns", tz="UTC")),
        ("a TIMESTAMP WITH TIME ZONE", pa.timestamp("ns", tz="+00:00")),
        ("a TIME", pa.time64("ns")),
        ("a DECIMAL(10,2)", pa.decimal128(10, 2)),
        ("a NUMERIC(5)", pa.decimal128(5, 0)),
        ("a DECIMAL", pa.decimal128(38, 10)),
        ("a BYTEA", pa.binary()),
        ("a ARRAY<INT>", pa.list_(pa.field("field", pa.int32()))),
        ("a INT[]", pa.list_(pa.field("field", pa.int32()))),
    ],
)
def test_type_mapping(ddl: str, expected: pa.DataType) -> None:
    schema = parse_ddl(ddl)
    assert schema.names == ["a"]
    assert schema.field("a").type == expected
    assert schema.field("a").nullable


def test_list_of_strings_and_names() -> None:
    schema = parse_ddl(
        ["City STRING", "`Pop Count` BIGINT NOT NULL", '"MiXed" DATE', "ts TIMESTAMP, x DOUBLE"]
    )
    # Unquoted identifiers are lower-cased; quoted ones keep their case.
    assert schema.names == ["city", "Pop Count", "MiXed", "ts", "x"]
    assert not schema.field("Pop Count").nullable
    assert schema.field("MiXed").nullable


def test_escaped_quotes_in_names() -> None:
    assert parse_ddl('"a""b" INT, `c``d` INT').names == ['a"b', "c`d"]


def test_normalize_schema_makes_timestamps_ms_utc() -> None:
    schema = normalize_schema(parse_ddl("t TIMESTAMP, u TIMESTAMP WITH TIME ZONE, d DATE"))
    assert schema.field("t").type == pa.timestamp("ms", tz="UTC")
    assert schema.field("u").type == pa.timestamp("ms", tz="UTC")
    assert schema.field("d").type == pa.date32()


@pytest.mark.parametrize(
    "ddl",
    [
        "",
        "a",
        "a FOO",
        "a INT,",
        "a INT, a STRING",
        "a DECIMAL(40, 2)",
        "a DECIMAL(0)",
        "a DECIMAL(5, 6)",
        "a TIMESTAMP(3)",
        "a TIME WITH TIME ZONE",
        "a INT DEFAULT 1",
        "a INT PRIMARY KEY",
        "a JSON",
        "a DATETIME",
        "a ARRAY",
        "a INT[][]",
        "a INT; DROP TABLE x",
    ],
)
def test_invalid_ddl(ddl: str) -> None:
    with pytest.raises(InvalidDdlSchema):
        parse_ddl(ddl)
