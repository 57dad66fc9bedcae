"""The compiled stream assembly (``native/odf_stream.c``) and the numpy fallback agree byte for
byte on random columns: strings/binaries with and without nulls, int32/int64 offsets, sliced
arrays, fixed-width columns with nulls, lists; validity bitmaps handed to C as Arrow holds them
(every bit offset, all-null, all-valid, no bitmap, several pieces, chunked arrays, booleans);
and whole-table logical hashes are equal."""

from __future__ import annotations

import hashlib
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


# --- validity bitmaps passed straight to C (a leaf's own nulls) --------------------------------


def _leaf_bytes(arr: Any) -> bytes:
    """The whole stream of a leaf whose nulls are its own, as the record hasher builds it."""
    return b"".join(
        bytes(memoryview(np.asarray(p, dtype=np.uint8)).cast("B"))
        for p in hashing._own_leaf_pieces(arr, "c")
    )


def _leaf_both(arr: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[bytes, bytes]:
    native = _leaf_bytes(arr)
    with monkeypatch.context() as m:
        m.setattr(native_stream, "LIB", None)
        numpy_path = _leaf_bytes(arr)
    return native, numpy_path


def _random_array(typ: Any, n: int, null_rate: float, seed: int) -> Any:
    rng = np.random.default_rng(seed)
    mask = rng.random(n) < null_rate
    if pa.types.is_boolean(typ):
        return pa.array(rng.random(n) < 0.5, mask=mask)
    if pa.types.is_fixed_size_binary(typ):
        raw = rng.integers(0, 256, n * typ.byte_width, dtype=np.uint8).tobytes()
        w = typ.byte_width
        return pa.array([None if mask[i] else raw[i * w : (i + 1) * w] for i in range(n)], type=typ)
    if pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_string_view(typ):
        return pa.array([None if mask[i] else v for i, v in enumerate(_strings(rng, n, 0.0))], typ)
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        values = [None if mask[i] else v.encode() for i, v in enumerate(_strings(rng, n, 0.0))]
        return pa.array(values, typ)
    return pa.array(rng.integers(0, 100, n), mask=mask).cast(typ)


_BITMAP_TYPES = [
    pa.bool_(),
    pa.int8(),
    pa.uint16(),
    pa.int32(),
    pa.float32(),
    pa.int64(),
    pa.float64(),
    pa.timestamp("ms", "UTC"),
    pa.decimal128(25, 2),
    pa.decimal256(50, 2),
    pa.string(),
    pa.large_binary(),
    pa.binary(3),
    pa.string_view(),
]


@pytest.mark.parametrize("typ", _BITMAP_TYPES, ids=str)
@pytest.mark.parametrize("null_rate", [0.0, 0.03, 0.1, 0.5, 1.0])
def test_bitmap_streams_identical(
    typ: Any, null_rate: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sliced arrays put row 0 at every bit position of a bitmap byte (offsets 0..9), lengths
    cover the 64-row words and their tails; all-null and null-free bitmaps included."""
    arr = _random_array(typ, 1000, null_rate, seed=5)
    for start, length in ((0, 1000), (1, 999), (3, 130), (7, 64), (8, 65), (9, 63), (5, 1)):
        part = arr.slice(start, length)
        native, numpy_path = _leaf_both(part, monkeypatch)
        assert native == numpy_path, (start, length)


@pytest.mark.parametrize("typ", [pa.bool_(), pa.int16(), pa.float64(), pa.string()], ids=str)
def test_bitmap_without_buffer_and_all_valid_bitmap(
    typ: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No validity buffer at all, and a bitmap present but all valid: both mean no nulls."""
    arr = _random_array(typ, 300, 0.0, seed=9)
    bufs = arr.buffers()
    assert bufs[0] is None
    ones = pa.py_buffer(np.full(40, 0xFF, dtype=np.uint8).tobytes())
    with_bitmap = pa.Array.from_buffers(arr.type, len(arr), [ones, *bufs[1:]], null_count=-1)
    assert with_bitmap.null_count == 0
    for a in (arr, arr.slice(11, 200), with_bitmap, with_bitmap.slice(13, 250)):
        native, numpy_path = _leaf_both(a, monkeypatch)
        assert native == numpy_path
        assert native == _leaf_bytes(arr.slice(a.offset, len(a)))


@pytest.mark.parametrize("typ", [pa.bool_(), pa.int64(), pa.string()], ids=str)
def test_bitmap_streams_across_pieces(typ: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A column long enough to be cut into several pieces, some of them without nulls."""
    n = 300_000
    arr = _random_array(typ, n, 0.0, seed=2)
    mask = np.zeros(n, dtype=np.bool_)
    mask[np.random.default_rng(4).integers(70_000, n, 5_000)] = True
    arr = pa.array(arr.to_numpy(zero_copy_only=False), type=typ, mask=mask).slice(3)
    native, numpy_path = _leaf_both(arr, monkeypatch)
    assert native == numpy_path


def test_chunked_array_digest_identical(monkeypatch: pytest.MonkeyPatch) -> None:
    """A chunked array hashes as one stream over its chunks, whichever path builds it."""
    whole = _random_array(pa.int32(), 2000, 0.2, seed=6)
    chunked = pa.chunked_array([whole.slice(0, 7), whole.slice(7, 1000), whole.slice(1007)])
    native = hashing.array_digest(chunked)
    assert native == hashing.array_digest(whole)
    with monkeypatch.context() as m:
        m.setattr(native_stream, "LIB", None)
        assert hashing.array_digest(chunked) == native
        assert hashing.array_digest(whole) == native


def test_table_hash_identical_with_bitmaps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whole-table hashes over sliced batches of every bitmap type, native vs numpy."""
    n = 3000
    table = pa.table(
        {f"c{i}": _random_array(t, n, 0.1, seed=i) for i, t in enumerate(_BITMAP_TYPES)}
    )
    batches = [table.slice(0, 1001).to_batches()[0], table.slice(1001).to_batches()[0]]
    native = logical_hash(batches)
    monkeypatch.setattr(native_stream, "LIB", None)
    assert logical_hash(batches) == native


# --- staging buffers and the vector kernels ----------------------------------------------------


@pytest.mark.parametrize("stage", [64, 200, 1000, 1 << 20])
@pytest.mark.parametrize("typ", _BITMAP_TYPES, ids=str)
@pytest.mark.parametrize("null_rate", [0.0, 0.1, 1.0])
def test_staged_streams_identical(
    typ: Any, null_rate: float, stage: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Streams built a staging buffer at a time: buffers smaller than a 64-row block (the
    string loop then goes row by row, and rows longer than a buffer are hashed where they
    are), a few blocks, and one buffer for the whole column; sliced bitmaps."""
    monkeypatch.setattr(native_stream, "STAGE_BYTES", stage)
    arr = _random_array(typ, 700, null_rate, seed=12)
    for start, length in ((0, 700), (5, 640), (64, 129), (3, 1)):
        part = arr.slice(start, length)
        native, numpy_path = _leaf_both(part, monkeypatch)
        assert native == numpy_path, (start, length)


def test_staged_long_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """Values longer than a staging buffer between short ones, null and valid, int32 and int64
    offsets: each long row comes as its own pieces."""
    monkeypatch.setattr(native_stream, "STAGE_BYTES", 256)
    values = ["a", "b" * 1000, None, "c" * 300, "", None, "d" * 5000, "e"] * 30
    for typ in (pa.string(), pa.large_binary()):
        arr = pa.array([None if v is None else v.encode() for v in values], type=typ)
        for part in (arr, arr.slice(1), arr.slice(2, 9)):
            native, numpy_path = _leaf_both(part, monkeypatch)
            assert native == numpy_path


@pytest.mark.parametrize(
    "typ",
    [pa.int16(), pa.int32(), pa.float32(), pa.int64(), pa.float64(), pa.decimal128(25, 2)],
    ids=str,
)
@pytest.mark.parametrize("null_rate", [0.02, 0.1, 0.5, 0.97])
def test_vector_and_scalar_kernels_identical(
    typ: Any, null_rate: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The AVX-512 VBMI kernels (where the CPU has them) and the scalar loops build the same
    fixed-width streams as the numpy path, over many 64-row words at every bit offset."""
    arr = _random_array(typ, 5000, null_rate, seed=13)
    streams = []
    try:
        for enable in (True, False):
            native_stream.simd(enable)
            for start in (0, 1, 7, 9, 64):
                native, numpy_path = _leaf_both(arr.slice(start), monkeypatch)
                assert native == numpy_path, (enable, start)
                streams.append(native)
    finally:
        native_stream.simd(True)
    assert streams[:5] == streams[5:]


# --- assembly fused with hashing (OpenSSL SHA3 states updated by the C loops) -----------------


def _fused_and_numpy(arr: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[bytes, bytes]:
    """SHA3 of a leaf's stream hashed by the fused loops, and of the numpy path's stream."""
    state = native_stream.new_sha3(b"seed")
    assert state is not None, "libcrypto.so.3 (OpenSSL 3, hashlib's SHA3) was not loaded"
    hashing._hash_own_leaf(state, arr, "c")
    with monkeypatch.context() as m:
        m.setattr(native_stream, "LIB", None)
        stream = _leaf_bytes(arr)
    assert state.hashed == 4 + len(stream)  # the count that aligns updates to SHA3 blocks
    return state.digest(), hashlib.sha3_256(b"seed" + stream).digest()


def test_native_sha3_is_hashlib_sha3() -> None:
    state = native_stream.new_sha3(b"ab")
    assert state is not None
    reference = hashlib.sha3_256(b"ab")
    for chunk in (b"", b"c" * 135, b"d" * 137, np.arange(5000, dtype=np.int64), pa.py_buffer(b"e")):
        state.update(chunk)
        reference.update(chunk)
        assert state.digest() == reference.digest()  # digest() leaves the state usable


@pytest.mark.parametrize("typ", _BITMAP_TYPES, ids=str)
@pytest.mark.parametrize("null_rate", [0.0, 0.1, 1.0])
def test_fused_streams_identical(
    typ: Any, null_rate: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every leaf type, sliced at several bit offsets, over more rows than one 32 KiB piece."""
    arr = _random_array(typ, 12_000, null_rate, seed=21)
    for start, length in ((0, 12_000), (3, 11_000), (9, 63), (64, 5000), (7, 1), (5, 0)):
        fused, expected = _fused_and_numpy(arr.slice(start, length), monkeypatch)
        assert fused == expected, (start, length)


def test_fused_long_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """Values longer than a piece (32 KiB) between short ones, null and valid, int32 and int64
    offsets: a long row is hashed from where it is."""
    values = ["a", "b" * 40_000, None, "c" * 300, "", None, "d" * 70_000, "e"] * 5
    for typ in (pa.string(), pa.large_binary()):
        arr = pa.array([None if v is None else v.encode() for v in values], type=typ)
        for part in (arr, arr.slice(1), arr.slice(2, 9)):
            fused, expected = _fused_and_numpy(part, monkeypatch)
            assert fused == expected


def test_fused_struct_nulls_identical(monkeypatch: pytest.MonkeyPatch) -> None:
    """Leaves under structs with nulls at two levels (combined masks packed into bitmaps), in
    kamu's 10,000-row windows: fused hashing, the staged pieces and the numpy path agree."""
    rng = np.random.default_rng(8)
    n = 25_000
    inner = pa.StructArray.from_arrays(
        [
            _random_array(pa.int64(), n, 0.2, seed=1),
            _random_array(pa.string(), n, 0.2, seed=2),
            _random_array(pa.bool_(), n, 0.2, seed=3),
        ],
        names=["i", "s", "b"],
        mask=pa.array(rng.random(n) < 0.1),
    )
    table = pa.table({"st": inner, "f": _random_array(pa.float64(), n, 0.1, seed=4)})
    batch = table.to_batches()[0]

    def digest() -> str:
        hasher = hashing.LogicalHasher(table.schema)
        hasher.update(batch, window_rows=hashing.LOGICAL_HASH_BATCH_SIZE)
        return hasher.finalize().to_multibase()

    fused = digest()
    monkeypatch.setattr(native_stream, "CRYPTO", None)  # hashlib states, staged pieces
    assert digest() == fused
    monkeypatch.setattr(native_stream, "LIB", None)
    assert digest() == fused


@pytest.mark.parametrize("threads", [1, 2])
def test_fused_table_hash_identical(threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whole-table hashes, one thread and a pool: fused, staged pieces and numpy agree."""
    n = 70_000
    table = pa.table(
        {f"c{i}": _random_array(t, n, 0.1, seed=i) for i, t in enumerate(_BITMAP_TYPES)}
    )
    fused = logical_hash(table, threads=threads)
    monkeypatch.setattr(native_stream, "CRYPTO", None)
    assert logical_hash(table, threads=threads) == fused
    monkeypatch.setattr(native_stream, "LIB", None)
    assert logical_hash(table, threads=threads) == fused
