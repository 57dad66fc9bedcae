"""Golden vectors for the logical (arrow0-sha3-256) and physical (sha3-256) data hashes.

Authoritative: the one logical hash produced by kamu's own Rust code that exists in public
(kamu-cli ``src/adapter/http/tests/tests/test_data_query.rs`` @ 710bc1ff, REST ``/query``
``dataHash`` computed by ``get_batches_logical_hash``; see docs/logical-hash.md, "Authoritative
vector"), and the FIPS 202 SHA3-256 digest of the empty string for the physical hash.

Non-authoritative (``@pytest.mark.nonauthoritative``): values a Python prototype derived, which
agree with the kamu vector and with every relation in arrow-digest's own tests but were never
produced by kamu (docs/logical-hash.md, "Prototype-derived vectors"). They pin our behaviour
against regressions.
"""

from __future__ import annotations

import decimal
import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from coordinator.data import array_digest, logical_hash, physical_hash
from coordinator.multiformats import Multihash

# --------------------------------------------------------------------------------------------
# Authoritative: kamu-cli test_data_query.rs
# --------------------------------------------------------------------------------------------

KAMU_QUERY_HASH = "f9680c001200b3483eecc3d5c6b50ee6b8cba11b51c08f89ea1f53d3a334c743199f5fe656e"


def _kamu_query_table(city_type: pa.DataType | None = None, nullable: bool = False) -> pa.Table:
    """offset: Int64, city: Utf8, population: UInt64; rows (1, "B", 200), (0, "A", 100)."""
    city_type = city_type or pa.string()
    schema = pa.schema(
        [
            pa.field("offset", pa.int64(), nullable=nullable),
            pa.field("city", city_type, nullable=nullable),
            pa.field("population", pa.uint64(), nullable=nullable),
        ]
    )
    return pa.table(
        [
            pa.array([1, 0], pa.int64()),
            pa.array(["B", "A"], city_type),
            pa.array([200, 100], pa.uint64()),
        ],
        schema=schema,
    )


def test_kamu_query_vector_single_batch() -> None:
    table = _kamu_query_table()
    assert logical_hash(table.to_batches()[0]) == KAMU_QUERY_HASH
    assert logical_hash(table) == KAMU_QUERY_HASH


def test_kamu_query_vector_is_a_multihash_with_code_arrow0_sha3_256() -> None:
    mh = Multihash.from_multibase(KAMU_QUERY_HASH)
    assert mh.code == 0x300016
    assert KAMU_QUERY_HASH.startswith("f" + "9680c001" + "20")


def test_kamu_query_vector_split_into_two_batches() -> None:
    batch = _kamu_query_table().to_batches()[0]
    assert logical_hash([batch.slice(0, 1), batch.slice(1, 1)]) == KAMU_QUERY_HASH


@pytest.mark.parametrize("city_type", [pa.large_string(), pa.string_view()])
def test_kamu_query_vector_other_string_layouts(city_type: pa.DataType) -> None:
    # LargeUtf8 / Utf8View share Utf8's type tag and value stream in arrow-digest.
    assert logical_hash(_kamu_query_table(city_type)) == KAMU_QUERY_HASH


def test_kamu_query_vector_nullability_is_not_hashed() -> None:
    assert logical_hash(_kamu_query_table(nullable=True)) == KAMU_QUERY_HASH


def test_kamu_query_vector_through_parquet(tmp_path: Path) -> None:
    # arrow-rs reads pyarrow's INT64 / BYTE_ARRAY(String) / INT(64, unsigned) back as
    # Int64 / Utf8 / UInt64, so kamu would hash this file to the same value.
    path = tmp_path / "query.parquet"
    pq.write_table(_kamu_query_table(), path)
    assert logical_hash(path) == KAMU_QUERY_HASH
    assert logical_hash(str(path)) == KAMU_QUERY_HASH


def test_kamu_query_vector_through_parquet_many_row_groups(tmp_path: Path) -> None:
    path = tmp_path / "query.parquet"
    pq.write_table(_kamu_query_table(nullable=True), path, row_group_size=1)
    assert logical_hash(path) == KAMU_QUERY_HASH


# --------------------------------------------------------------------------------------------
# Authoritative: physical hash = SHA3-256 (FIPS 202) multihash
# --------------------------------------------------------------------------------------------


def test_physical_hash_of_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty"
    path.write_bytes(b"")
    assert physical_hash(path) == (
        "f1620a7ffc6f8bf1ed76651c14756a061d662f580ff4de43b49fa82d80a4b80f8434a"
    )


# --------------------------------------------------------------------------------------------
# Non-authoritative: prototype-derived (docs/logical-hash.md, "Prototype-derived vectors")
# --------------------------------------------------------------------------------------------

_NAN_7FF8 = struct.unpack("<d", bytes.fromhex("000000000000f87f"))[0]

PROTOTYPE_VECTORS: list[tuple[str, pa.Table, str]] = [
    (
        "readme_example",
        pa.table({"a": pa.array([1, 2, 3], pa.int32()), "b": pa.array(["a", "b", "c"])}),
        "5684f7bfdcaf4ff7d1f9bf0fd766c98d8ded335e933fb4eec245054f3206b61a",
    ),
    (
        "empty_int64",
        pa.table({"x": pa.array([], pa.int64())}),
        "3371703cec91f66b3fc9266b18e477363dc822c7674198ad8f7854fdbc6a9304",
    ),
    (
        "nulls_int_string_bool",
        pa.table(
            {
                "n": pa.array([1, None, 3], pa.int64()),
                "s": pa.array([None, "x", ""], pa.string()),
                "b": pa.array([True, None, False], pa.bool_()),
            }
        ),
        "c51e6a866ed2780207e1f2e24effd6c2fd1290d76fe186b348e4d4a347494882",
    ),
    (
        "timestamp_ms_utc",
        pa.table({"ts": pa.array([0, 1], pa.timestamp("ms", "UTC"))}),
        "535dabd7367ee7867d0fecf0050e333685a00f566feaddeb20b0d6942b05bd81",
    ),
    (
        "timestamp_ms_no_tz",
        pa.table({"ts": pa.array([0, 1], pa.timestamp("ms"))}),
        "0567daac8bd764224d61bfc4c19a2d1ac6c442af2a5a0049e2e734e0aeb23b35",
    ),
    (
        "timestamp_ms_plus_00_00",
        pa.table({"ts": pa.array([0, 1], pa.timestamp("ms", "+00:00"))}),
        "7577e80176490d152174cf1596c5eae6735baa94bc8ec91685009b504920fdca",
    ),
    (
        "float64_signed_zero_nan",
        pa.table({"f": pa.array([0.0, -0.0, _NAN_7FF8], pa.float64())}),
        "5beb993a4bba2bd7ac57d12d581b86c808a7cff988d3bf5adfc0921b042a1aa3",
    ),
    (
        "decimal128_5_2",
        pa.table({"d": pa.array([decimal.Decimal("1.23"), None], pa.decimal128(5, 2))}),
        "5ca771208a4c23a0e301a3d1559ab0ad3149f1d7fd387c2b89a837b34b5ea1be",
    ),
    (
        "struct_flattened",
        pa.table(
            {
                "a": pa.array([1, 2, 3], pa.int32()),
                "b": pa.StructArray.from_arrays(
                    [pa.array(["a", "b", "c"]), pa.array([3, 2, 1], pa.int32())],
                    names=["c", "d"],
                ),
            }
        ),
        "fad2f505cc7d67eb2a3c24e137831723ce886e31e34b80bddac5f8757616aa0b",
    ),
    (
        "list_int32",
        pa.table({"l": pa.array([[0, 1, 2], None, [3, None, 4, 5], [6, 7]], pa.list_(pa.int32()))}),
        "9faa6ab94e1081809d9ecc41cff59d4358baede469cb38656dc113755bdf7dce",
    ),
]


@pytest.mark.nonauthoritative
@pytest.mark.parametrize(
    ("table", "digest"),
    [pytest.param(t, d, id=name) for name, t, d in PROTOTYPE_VECTORS],
)
def test_prototype_record_digest(table: pa.Table, digest: str) -> None:
    assert logical_hash(table) == "f9680c00120" + digest


@pytest.mark.nonauthoritative
def test_prototype_array_digest_int32() -> None:
    digest = array_digest(pa.array([1, 2, 3], pa.int32()))
    assert digest.hex() == "95d11399ecaed3721501c76f154c3430744d178831b53896cb8f54fed36fb321"
