"""The compiled stream assembly (``native/odf_stream.c``) and the numpy fallback agree byte for
byte on random columns: strings/binaries with and without nulls, int32/int64 offsets, sliced
arrays, fixed-width columns with nulls, lists; and whole-table logical hashes are equal."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from coordinator.data import hashing, logical_hash, native_stream


@pytest.fixture(autouse=True)
def _library_built() -> None:
    """``make setup`` builds the library (native/odf_stream.c, with the machine's C compiler):
    without it these tests fail and say so, rather than pass over what they check."""
    assert native_stream.LIB is not None, (
        "build/native/libodf_stream.so is not built: run `make setup` on a machine with a C "
        "compiler (cc; Debian: gcc)"
    )


def _stream(arr: Any, null: Any) -> bytes:
    pieces = hashing._encode(arr, null, want_offsets=False, column="c").stream
    return bytes(memoryview(np.asarray(pieces, dtype=np.uint8)))


def _both(arr: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[bytes, bytes]:
    null = hashing._own_nulls(arr)
    probe = np.zeros(2, dtype=np.int64)
    assert native_stream.prefixed(None, b"", probe, None) is not None  # the compiled path runs
    native = _stream(arr, null)
    with monkeypatch.context() as m:
        m.setattr(native_stream, "LIB", None)
        numpy_path = _stream(arr, null)
    return native, numpy_path


def _strings(rng: np.random.Generator, n: int, null_rate: float) -> list[str | None]:
    out: list[str | None] = []
    for _ in range(n):
        if rng.random() < null_rate:
            out.append(None)
        else:
            out.append("x" * int(rng.integers(0, 20)) + str(int(rng.integers(0, 1000))))
    return out


@pytest.mark.parametrize("typ", [pa.string(), pa.large_string(), pa.binary(), pa.large_binary()])
@pytest.mark.parametrize("null_rate", [0.0, 0.1, 0.9])
@pytest.mark.parametrize("seed", range(3))
def test_varlen_streams_identical(
    typ: Any, null_rate: float, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(seed)
    values = _strings(rng, 500, null_rate)
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        arr = pa.array([None if v is None else v.encode() for v in values], type=typ)
    else:
        arr = pa.array(values, type=typ)
    for sliced in (arr, arr.slice(37, 301), arr.slice(499, 1)):
        native, numpy_path = _both(sliced, monkeypatch)
        assert native == numpy_path


@pytest.mark.parametrize(
    "typ",
    [
        pa.int8(),
        pa.int16(),
        pa.int32(),
        pa.int64(),
        pa.float64(),
        pa.timestamp("ms"),
        pa.decimal128(25, 2),
    ],
)
@pytest.mark.parametrize("null_rate", [0.05, 0.5, 1.0])
def test_fixed_streams_identical(
    typ: Any, null_rate: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(7)
    raw = rng.integers(0, 100, 1000)
    mask = rng.random(1000) < null_rate
    mask[0] = True  # leading and trailing null runs
    mask[-1] = True
    arr = pa.array(raw, mask=mask).cast(typ)
    for sliced in (arr, arr.slice(3, 700), arr.slice(1, 998)):
        native, numpy_path = _both(sliced, monkeypatch)
        assert native == numpy_path


def test_list_streams_identical(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(11)
    rows: list[list[int | None] | None] = []
    for _ in range(300):
        if rng.random() < 0.1:
            rows.append(None)
        else:
            rows.append(
                [
                    None if rng.random() < 0.2 else int(v)
                    for v in rng.integers(0, 9, rng.integers(0, 5))
                ]
            )
    for typ in (pa.list_(pa.int32()), pa.large_list(pa.string())):
        data = (
            rows
            if typ.value_type == pa.int32()
            else [None if r is None else [None if v is None else str(v) for v in r] for r in rows]
        )
        arr = pa.array(data, type=typ).slice(5, 250)
        native, numpy_path = _both(arr, monkeypatch)
        assert native == numpy_path


def test_table_hash_identical(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    n = 5000
    table = pa.table(
        {
            "i": pa.array(rng.integers(0, 1 << 40, n), mask=rng.random(n) < 0.1),
            "s": pa.array(_strings(rng, n, 0.1)),
            "b": pa.array([None if v is None else v.encode() for v in _strings(rng, n, 0.0)]),
        }
    )
    native = logical_hash(table)
    monkeypatch.setattr(native_stream, "LIB", None)
    assert logical_hash(table) == native
