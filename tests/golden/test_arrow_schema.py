"""Golden vectors for the bare Arrow ``Schema`` FlatBuffer of ``SetDataSchema.schema``.

``data/arrow_schemas.json`` holds two kinds of vectors:

* ``kamu-written``: schema bytes kamu itself wrote — the YAML serde test schema, the schemas
  captured from real push-ingest runs in kamu-cli's ``test_push_ingest.rs`` and the schema
  stored in a real kamu-written ``SetDataSchema`` block in the kamu-node repository. Each
  entry's ``source`` names the repository, path and revision.
* ``arrow-rs-generated``: bytes produced by arrow-rs 48.0.1's own
  ``arrow_ipc::convert::schema_to_fb`` (with the Rust ``flatbuffers`` 23.5.26 runtime) for one
  schema per supported type / option, so that every type's builder order is checked against
  the real implementation, not against our reading of it.

For every vector: decoding gives the expected pyarrow schema, and encoding that schema gives
the identical bytes back.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from coordinator.errors import DecodeError
from coordinator.metadata.arrow_schema import decode_arrow_schema, encode_arrow_schema

VECTORS_PATH = Path(__file__).parent / "data" / "arrow_schemas.json"
VECTORS: list[dict[str, Any]] = json.loads(VECTORS_PATH.read_text())

# kamu-data/kamu-cli src/domain/opendatafabric/tests/tests/test_serde_yaml.rs @ v0.153.0 and
# docs/odf-wire-format.md, "Golden vectors" (event d).
GOLDEN_A_B = (
    "DAAAAAgACAAAAAQACAAAAAQAAAACAAAAQAAAAAQAAADY////GAAAAAwAAAAAAAAGEAAAAAAAAAAEAAQABAAAAAEAAABi"
    "AAAAEAAUABAAAAAPAAQAAAAIABAAAAAYAAAAIAAAAAAAAAIcAAAACAAMAAQACwAIAAAAQAAAAAAAAAEAAAAAAQAAAGEA"
    "AAA="
)

UTC_MS = pa.timestamp("ms", tz="UTC")


def _changelog(offset: pa.DataType, op: pa.DataType, *rest: pa.Field) -> pa.Schema:
    return pa.schema(
        [
            pa.field("offset", offset),
            pa.field("op", op, nullable=False),
            pa.field("system_time", UTC_MS, nullable=False),
            pa.field("event_time", UTC_MS),
            *rest,
        ]
    )


CITY_POPULATION = (pa.field("city", pa.string()), pa.field("population", pa.int64()))

KAMU_EXPECTED: dict[str, pa.Schema] = {
    "kamu_yaml_test_a_b": pa.schema(
        [pa.field("a", pa.int64(), nullable=False), pa.field("b", pa.bool_(), nullable=False)]
    ),
    "kamu_push_ingest_v0150": pa.schema(
        [
            pa.field("offset", pa.int64()),
            pa.field("system_time", UTC_MS, nullable=False),
            pa.field("event_time", UTC_MS),
            *CITY_POPULATION,
        ]
    ),
    "kamu_push_ingest_changelog_op_uint8_a": _changelog(pa.int64(), pa.uint8(), *CITY_POPULATION),
    "kamu_push_ingest_changelog_offset_uint64": _changelog(
        pa.uint64(), pa.uint8(), *CITY_POPULATION
    ),
    "kamu_push_ingest_v0153": _changelog(pa.int64(), pa.int32(), *CITY_POPULATION),
    "kamu_node_vessels_gps_block": _changelog(
        pa.int64(),
        pa.int32(),
        pa.field("vessel_name", pa.string()),
        pa.field("latitude", pa.float64()),
        pa.field("longitude", pa.float64()),
        pa.field("course_made_good", pa.float32()),
        pa.field("speed_over_ground", pa.float32()),
    ),
}


def _arrow_rs_expected() -> dict[str, pa.Schema]:
    """The schemas the arrow-rs harness encoded, as pyarrow schemas (names match the JSON)."""
    prims: list[tuple[str, pa.DataType]] = [
        ("null", pa.null()),
        ("bool", pa.bool_()),
        ("int8", pa.int8()),
        ("int16", pa.int16()),
        ("int32", pa.int32()),
        ("int64", pa.int64()),
        ("uint8", pa.uint8()),
        ("uint16", pa.uint16()),
        ("uint32", pa.uint32()),
        ("uint64", pa.uint64()),
        ("float16", pa.float16()),
        ("float32", pa.float32()),
        ("float64", pa.float64()),
        ("utf8", pa.string()),
        ("large_utf8", pa.large_string()),
        ("binary", pa.binary()),
        ("large_binary", pa.large_binary()),
        ("fsb16", pa.binary(16)),
        ("fsb0", pa.binary(0)),
        ("date32", pa.date32()),
        ("date64", pa.date64()),
        ("time32s", pa.time32("s")),
        ("time32ms", pa.time32("ms")),
        ("time64us", pa.time64("us")),
        ("time64ns", pa.time64("ns")),
        ("dur_s", pa.duration("s")),
        ("dur_ms", pa.duration("ms")),
        ("dur_us", pa.duration("us")),
        ("dur_ns", pa.duration("ns")),
        ("interval_mdn", pa.month_day_nano_interval()),
        ("dec128_38_10", pa.decimal128(38, 10)),
        ("dec128_5_0", pa.decimal128(5, 0)),
        ("dec128_10_m2", pa.decimal128(10, -2)),
        ("dec256_76_20", pa.decimal256(76, 20)),
        ("dec256_40_0", pa.decimal256(40, 0)),
    ]
    expected: dict[str, pa.Schema] = {}

    def one(name: str, data_type: pa.DataType, nullable: bool = True) -> None:
        expected[name] = pa.schema([pa.field("col", data_type, nullable=nullable)])

    for name, data_type in prims:
        one(f"{name}_null", data_type)
        if name != "null":  # pyarrow refuses non-nullable Null fields
            one(f"{name}_notnull", data_type, nullable=False)
    for unit in ("s", "ms", "us", "ns"):
        for tz_name, tz in (("none", None), ("utc", "UTC"), ("jnb", "Africa/Johannesburg")):
            one(f"ts_{unit}_{tz_name}", pa.timestamp(unit, tz=tz))
        one(f"ts_{unit}_off", pa.timestamp(unit, tz="+02:00"))
    # The harness's list also had the YearMonth and DayTime intervals right after
    # interval_mdn; it filtered them out of "all_prims" but kept the original indices, which
    # decide the nullability.
    rust_order: list[tuple[str, pa.DataType | None]] = [
        *prims[:30],
        ("interval_ym", None),
        ("interval_dt", None),
        *prims[30:],
    ]
    expected["all_prims"] = pa.schema(
        [
            pa.field(name, data_type, nullable=i % 2 == 0 or name == "null")
            for i, (name, data_type) in enumerate(rust_order)
            if data_type is not None
        ]
    )
    expected["empty"] = pa.schema([])
    one("list_i32", pa.list_(pa.field("item", pa.int32())))
    one("large_list_i32", pa.large_list(pa.field("element", pa.string(), nullable=False)), False)
    one("fsl_3", pa.list_(pa.field("item", pa.int32()), 3))
    struct = pa.struct(
        [
            pa.field("x", pa.float64(), nullable=False),
            pa.field("y", pa.string()),
            pa.field("t", UTC_MS),
        ]
    )
    one("struct", struct)
    one("empty_struct", pa.struct([]), False)
    one("list_struct", pa.list_(pa.field("item", struct, nullable=False)))
    one(
        "list_list",
        pa.list_(pa.field("item", pa.large_list(pa.field("inner", pa.date32())))),
    )
    keys = pa.field("keys", pa.string(), nullable=False)
    values = pa.field("values", pa.int64())
    one("map_unsorted", pa.map_(keys, values))
    one("map_sorted", pa.map_(keys, values, keys_sorted=True), False)
    union_fields = [pa.field("a", pa.int32()), pa.field("b", pa.string())]
    one("union_sparse", pa.sparse_union(union_fields, type_codes=[5, 7]), False)
    one("union_dense", pa.dense_union(union_fields, type_codes=[5, 7]))
    md = {"key": "value"}
    expected["field_md"] = pa.schema(
        [pa.field("a", pa.int64(), nullable=False, metadata=md), pa.field("b", pa.string())]
    )
    expected["schema_md"] = pa.schema([pa.field("a", pa.int64(), nullable=False)], metadata=md)
    expected["nested_md"] = pa.schema(
        [pa.field("s", pa.struct([pa.field("in", pa.int8(), metadata=md)]))]
    )
    expected["kamu_like"] = pa.schema(
        [
            pa.field("offset", pa.int64()),
            pa.field("op", pa.int32(), nullable=False),
            pa.field("system_time", UTC_MS, nullable=False),
            pa.field("event_time", UTC_MS),
            pa.field("name", pa.string()),
            pa.field("emoji \U0001f600 é", pa.float32()),
        ]
    )
    return expected


EXPECTED: dict[str, pa.Schema] = {**KAMU_EXPECTED, **_arrow_rs_expected()}

DECODABLE = [v for v in VECTORS if "expect" not in v]
UNDECODABLE = [v for v in VECTORS if v.get("expect") == "DecodeError"]


def _bytes(vector: dict[str, Any]) -> bytes:
    return base64.b64decode(vector["base64"], validate=True)


def test_golden_a_b_encodes_to_kamu_bytes() -> None:
    schema = pa.schema(
        [pa.field("a", pa.int64(), nullable=False), pa.field("b", pa.bool_(), nullable=False)]
    )
    encoded = encode_arrow_schema(schema)
    assert len(encoded) == 140
    assert encoded == base64.b64decode(GOLDEN_A_B)
    assert decode_arrow_schema(encoded) == schema


def test_vector_file_is_complete() -> None:
    kinds = {v["kind"] for v in VECTORS}
    assert kinds == {"kamu-written", "arrow-rs-generated"}
    kamu = [v for v in VECTORS if v["kind"] == "kamu-written"]
    assert len(kamu) >= 6
    assert all(v["source"] for v in VECTORS)
    names = [v["name"] for v in VECTORS]
    assert len(names) == len(set(names))
    # Every decodable vector has an expected schema and vice versa.
    assert {v["name"] for v in DECODABLE} == set(EXPECTED)


@pytest.mark.parametrize("vector", DECODABLE, ids=lambda v: v["name"])
def test_vector_round_trips_byte_for_byte(vector: dict[str, Any]) -> None:
    data = _bytes(vector)
    schema = decode_arrow_schema(data)
    assert encode_arrow_schema(schema) == data


@pytest.mark.parametrize("vector", DECODABLE, ids=lambda v: v["name"])
def test_vector_decodes_to_expected_schema(vector: dict[str, Any]) -> None:
    expected = EXPECTED[vector["name"]]
    decoded = decode_arrow_schema(_bytes(vector))
    assert decoded.equals(expected, check_metadata=True)
    assert [f.metadata for f in decoded] == [f.metadata for f in expected]
    assert encode_arrow_schema(expected) == _bytes(vector)


@pytest.mark.parametrize("vector", UNDECODABLE, ids=lambda v: v["name"])
def test_unrepresentable_arrow_rs_vectors_raise_decode_error(vector: dict[str, Any]) -> None:
    with pytest.raises(DecodeError):
        decode_arrow_schema(_bytes(vector))


def test_kamu_timestamps_are_utc_milliseconds() -> None:
    """The real kamu schemas use ``Timestamp(Millisecond, "UTC")`` for system/event time."""
    for vector in VECTORS:
        if vector["kind"] != "kamu-written" or vector["name"] == "kamu_yaml_test_a_b":
            continue
        schema = decode_arrow_schema(_bytes(vector))
        assert schema.field("system_time").type == UTC_MS
        assert schema.field("event_time").type == UTC_MS
