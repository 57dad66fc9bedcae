"""The compiled block decoder (``native/odf_chain.c``) against the Python decoder.

For every input both must agree: the compiled one returns a block equal to the Python one's
(same types all the way down, so ``Multihash.code`` stays a ``Multicodec``, tuples stay tuples),
or returns None and the Python decoder decides; ``decode_block`` with the compiled decoder on
then gives exactly what it gives with it off (the same block, or the same error and message).
Inputs: kamu's compatibility vectors (both versions), the hostile shapes of the amplification
tests, generated blocks of every event kind, hand-made vtables with unknown trailing slots, and
mutated blocks (every single-byte change, every truncation, every aligned u32 overwritten with
small offsets, and hypothesis' structure-aware mutations at the fuzz profile).
Also: the Python decoder alone (no module, ``ODF_NATIVE_CHAIN=0``) decodes the same chains.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from enum import Enum
from pathlib import Path
from typing import Any

import flatbuffers
import pytest
from factories import SCHEMA_BYTES, T0, ChainBuilder, data_slice, mh
from fuzz_profile import fuzz
from hostile_flatbuffers import (
    dense_keywords_block,
    flat_keywords_block,
    nested_temporal_tables_block,
)
from hypothesis import given
from hypothesis import strategies as st
from strategies import EVENT_TYPES, metadata_blocks, metadata_events

from coordinator.identity import DatasetId
from coordinator.metadata import decode_block, encode_block, native_decode
from coordinator.metadata import flatbuffers_serde as fbs
from coordinator.metadata import model as m
from coordinator.metadata.timestamp import Timestamp
from coordinator.multiformats import Multihash

NATIVE = fbs.NATIVE_DECODER
GOLDEN = Path(__file__).resolve().parents[1] / "golden"


@pytest.fixture(autouse=True)
def _module_built() -> None:
    """``make setup`` builds the module (native/odf_chain.c, with the machine's C compiler and
    the interpreter's headers): without it these tests fail and say so."""
    assert NATIVE is not None, (
        f"{native_decode.module_path()} is not built: run `make setup` on a machine with a C "
        "compiler and the interpreter's headers (cc, Python.h; Debian: gcc, python3-dev)"
    )


def _same(a: Any, b: Any, path: str = "block") -> None:
    """``a`` and ``b`` are equal and of the same types all the way down."""
    assert type(a) is type(b), f"{path}: {type(a).__name__} != {type(b).__name__}"
    if dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            _same(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")
    elif isinstance(a, tuple):
        assert len(a) == len(b), f"{path}: {len(a)} != {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"
        if isinstance(a, Enum):
            assert a is b


def _outcome(decode: Callable[[], Any]) -> Any:
    try:
        return decode()
    except Exception as e:  # the error's type and text are part of the contract
        return (type(e), str(e))


@pytest.fixture
def python_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(fbs, "NATIVE_DECODER", None)
    yield


def check(data: bytes, *, must_decode: bool = False) -> bool:
    """Compare the two decoders on ``data``; True when the compiled one decoded it."""
    assert NATIVE is not None
    fast = NATIVE.decode_block(data)
    saved = fbs.NATIVE_DECODER
    fbs.NATIVE_DECODER = None
    try:
        slow = _outcome(lambda: decode_block(data))
    finally:
        fbs.NATIVE_DECODER = saved
    both = _outcome(lambda: decode_block(data))
    if fast is not None:
        assert isinstance(slow, m.MetadataBlock), (
            f"compiled decoder accepted what Python rejects: {slow}"
        )
        _same(fast, slow)
        _same(both, slow)
    else:
        assert not must_decode, "the compiled decoder fell back on a block it must decode"
        if isinstance(slow, m.MetadataBlock):
            _same(both, slow)
        else:
            assert both == slow
    return fast is not None


def check_content(data: bytes) -> None:
    """The inner-buffer entry point against ``decode_block_content`` in Python."""
    assert NATIVE is not None
    try:
        _version, inner = fbs.decode_manifest(data)
    except Exception:
        return
    fast = NATIVE.decode_content(inner)
    if fast is not None:
        _same(fast, fbs._decode_content(inner))


# ---------------------------------------------------------------------------------------------
# Valid inputs


def _golden_vectors() -> list[tuple[str, m.MetadataEvent]]:
    sys.path.insert(0, str(GOLDEN))
    try:
        import test_block_vectors as vectors
    finally:
        sys.path.remove(str(GOLDEN))
    return [(name, event) for name, event, *_ in vectors.VECTORS]


GOLDEN_VECTORS = _golden_vectors()


@pytest.mark.parametrize("version", [2, 3])
@pytest.mark.parametrize(("name", "event"), GOLDEN_VECTORS, ids=[v[0] for v in GOLDEN_VECTORS])
def test_kamu_vectors(name: str, event: m.MetadataEvent, version: int) -> None:
    block = m.MetadataBlock(
        system_time=Timestamp.parse("2020-01-01T12:00:00Z"),
        prev_block_hash=mh(b"prev"),
        sequence_number=117,
        event=event,
    )
    data = encode_block(block, version)
    assert check(data, must_decode=True)
    check_content(data)


def _chains() -> list[bytes]:
    root = ChainBuilder(version=2).root_with_data(30)
    for i in range(5):
        root.add(m.AddData(new_watermark=Timestamp(T0.epoch_ns + 10**12 + i)))
    root.add(
        m.AddData(
            prev_offset=299,
            new_checkpoint=m.Checkpoint(physical_hash=mh("cp"), size=5),
            new_source_state=m.SourceState(source_name="s", kind="k", value="ü€𝄞"),
            extra=m.ExtraAttributes.of({"opendatafabric.org/linkedObjects": {"n": 1}}),
        )
    )
    upstream = DatasetId.new_seeded_ed25519(b"up")
    derived = ChainBuilder(kind=m.DatasetKind.DERIVATIVE, version=3)
    prev_offset: int | None = None
    for i in range(20):
        start = 0 if prev_offset is None else prev_offset + 1
        derived.add(
            m.ExecuteTransform(
                query_inputs=(
                    m.ExecuteTransformInput(
                        dataset_id=upstream,
                        prev_block_hash=mh(f"b{i}") if i else None,
                        new_block_hash=mh(f"b{i + 1}"),
                        prev_offset=start - 1 if i else None,
                        new_offset=start + 9,
                    ),
                ),
                prev_offset=prev_offset,
                new_data=data_slice(start, start + 9),
                new_watermark=Timestamp(T0.epoch_ns + i),
            )
        )
        prev_offset = start + 9
    return root.blocks + derived.blocks


CHAIN_BLOCKS = _chains()
#: The root chain's block with a checkpoint, source state and extra attributes.
SOURCE_STATE_BLOCK = next(
    b
    for b in CHAIN_BLOCKS
    if isinstance(e := decode_block(b).event, m.AddData) and e.new_source_state is not None
)


def test_generated_chains() -> None:
    for data in CHAIN_BLOCKS:
        assert check(data, must_decode=True)
        check_content(data)


def test_timestamps_at_the_edges() -> None:
    # Years 1 and 9999 do not fit int64 nanoseconds: Python decodes them; the others natively.
    for text in (
        "0001-01-01T00:00:00Z",
        "1677-09-21T00:12:44Z",
        "1677-09-22T00:00:00Z",
        "1970-01-01T00:00:00Z",
        "1969-12-31T23:59:59.999999999Z",
        "2000-02-29T12:00:00Z",
        "2100-03-01T00:00:00Z",
        "2262-04-11T23:47:16.854775807Z",
        "2262-04-12T00:00:00Z",
        "9999-12-31T23:59:59.999999999Z",
    ):
        ts = Timestamp.parse(text)
        event = m.AddData(new_watermark=ts)
        block = m.MetadataBlock(
            system_time=ts, prev_block_hash=None, sequence_number=2**64 - 1, event=event
        )
        for version in (2, 3):
            decoded = check(encode_block(block, version))
            assert decoded == (-(2**63) <= ts.epoch_ns < 2**63), text


def test_hostile_shapes() -> None:
    for data in (
        flat_keywords_block(1000, 100),
        nested_temporal_tables_block(50, 50),
        dense_keywords_block(2000),
        dense_keywords_block(10, 5000),
    ):
        check(data)


def _manifest(inner: bytes, version: int = 2) -> bytes:
    return fbs.encode_manifest(inner, version)


def _block_with_unknown_slots(extra_block_slot: bool) -> bytes:
    """An AddData block whose Checkpoint and AddData tables carry slots this reader does not
    know (a newer writer's fields), which both decoders ignore."""
    b = flatbuffers.Builder(256)
    digest = b.CreateByteVector(mh("cp").to_bytes())
    b.StartObject(6)
    b.PrependUOffsetTRelativeSlot(0, digest, 0)
    b.PrependUint64Slot(1, 1000, 0)
    b.PrependUint64Slot(5, 77, 0)
    checkpoint = b.EndObject()
    b.StartObject(10)
    b.PrependUOffsetTRelativeSlot(3, checkpoint, 0)
    b.PrependUint64Slot(9, 5, 0)
    add_data = b.EndObject()
    b.StartObject(7 if extra_block_slot else 5)
    fbs.prepend_timestamp(b, 0, T0, 2)
    b.PrependUint64Slot(2, 7, 0)
    b.PrependUint8Slot(3, 1, 0)
    b.PrependUOffsetTRelativeSlot(4, add_data, 0)
    if extra_block_slot:
        b.PrependUint32Slot(6, 3, 0)
    b.Finish(b.EndObject())
    return _manifest(bytes(b.Output()))


@pytest.mark.parametrize("extra_block_slot", [False, True])
def test_unknown_trailing_slots_are_ignored(extra_block_slot: bool) -> None:
    data = _block_with_unknown_slots(extra_block_slot)
    assert check(data, must_decode=True)
    block = decode_block(data)
    assert block.event == m.AddData(new_checkpoint=m.Checkpoint(physical_hash=mh("cp"), size=1000))


@fuzz(300)
@given(metadata_blocks(), st.sampled_from([2, 3]))
def test_generated_blocks_of_every_kind(block: m.MetadataBlock, version: int) -> None:
    data = encode_block(block, version)
    check(data)
    check_content(data)


@pytest.mark.parametrize("event_type", EVENT_TYPES, ids=lambda t: t.__name__)
def test_every_event_kind_is_covered(event_type: type) -> None:
    """Each event kind decodes natively at least once (no kind silently left to Python)."""

    @fuzz(30)
    @given(metadata_blocks(metadata_events(event_type)))
    def decodes(block: m.MetadataBlock) -> None:
        data = encode_block(block, 2)
        if check(data):
            hits.append(1)

    hits: list[int] = []
    decodes()
    assert hits, f"no {event_type.__name__} block was decoded natively"


# ---------------------------------------------------------------------------------------------
# Malformed inputs


def _seeds() -> list[bytes]:
    add_data = CHAIN_BLOCKS[5]
    execute = CHAIN_BLOCKS[-1]
    # kamu's SetPollingSource vector: unions in unions and a PrepStep wrapper vector.
    polling = dict(GOLDEN_VECTORS)["SetPollingSource"]
    assert isinstance(polling, m.SetPollingSource) and polling.prepare
    polling_block = ChainBuilder().add(polling)
    return [add_data, SOURCE_STATE_BLOCK, execute, _block_with_unknown_slots(True), polling_block]


SEEDS = _seeds()


@pytest.mark.parametrize("seed", range(len(SEEDS)))
def test_every_single_byte_change(seed: int) -> None:
    data = SEEDS[seed]
    for i in range(len(data)):
        for value in {0x00, 0xFF, data[i] ^ 0x01, data[i] ^ 0x80, (data[i] + 4) & 0xFF}:
            if value != data[i]:
                check(data[:i] + bytes([value]) + data[i + 1 :])


@pytest.mark.parametrize("seed", range(len(SEEDS)))
def test_every_truncation_and_extension(seed: int) -> None:
    data = SEEDS[seed]
    for n in range(len(data)):
        check(data[:n])
    for tail in (b"\x00", b"\xff" * 7, bytes(64)):
        check(data + tail)


@pytest.mark.parametrize("seed", range(len(SEEDS)))
def test_every_aligned_word_as_a_small_offset(seed: int) -> None:
    data = SEEDS[seed]
    for i in range(0, len(data) - 3, 4):
        for value in (0, 1, 4, 8, len(data) - i - 4, len(data) - i, 0x7FFFFFFF, 0xFFFFFFFC):
            word = (value & 0xFFFFFFFF).to_bytes(4, "little")
            check(data[:i] + word + data[i + 4 :])
        for j in range(0, len(data), 4):  # point it at every other position
            word = ((j - i) & 0xFFFFFFFF).to_bytes(4, "little")
            check(data[:i] + word + data[i + 4 :])


def test_invalid_timestamp_parts() -> None:
    """Struct values Timestamp.from_parts rejects are rejected (or left to Python) natively."""
    ts = Timestamp.parse("2023-06-01T10:00:00.5Z")
    year, ordinal, seconds, nanos = ts.to_parts()
    packed = struct.pack("<iHHII", year, ordinal, 0, seconds, nanos)
    for version in (2, 3):
        data = encode_block(
            m.MetadataBlock(
                system_time=ts,
                prev_block_hash=None,
                sequence_number=1,
                event=m.AddData(new_watermark=ts),
            ),
            version,
        )
        assert data.count(packed) == 2
        for parts in (
            (2023, 365, seconds, nanos),
            (2024, 366, seconds, nanos),
            (2023, 366, seconds, nanos),
            (2024, 367, seconds, nanos),
            (2023, 0, seconds, nanos),
            (0, 1, 0, 0),
            (-1, 1, 0, 0),
            (10000, 1, 0, 0),
            (2023, 1, 86_399, 999_999_999),
            (2023, 1, 86_400, 0),
            (2023, 1, 0, 1_000_000_000),
            (2023, 1, 2**32 - 1, 2**32 - 1),
        ):
            bad = struct.pack("<iHHII", parts[0], parts[1], 0, parts[2], parts[3])
            valid = isinstance(_outcome(lambda p=parts: Timestamp.from_parts(*p)), Timestamp)
            for i in (data.find(packed), data.rfind(packed)):
                patched = data[:i] + bad + data[i + 16 :]
                assert check(patched) is valid, parts


def _union_block(code: int, with_value: bool) -> bytes:
    """A block whose event union has type ``code`` and a value or not."""
    b = flatbuffers.Builder(128)
    b.StartObject(7)
    b.PrependUint64Slot(1, 3, None)
    event = b.EndObject()
    b.StartObject(5)
    fbs.prepend_timestamp(b, 0, T0, 2)
    b.PrependUint64Slot(2, 7, 0)
    b.PrependUint8Slot(3, code, 0)
    if with_value:
        b.PrependUOffsetTRelativeSlot(4, event, 0)
    b.Finish(b.EndObject())
    return _manifest(bytes(b.Output()))


@pytest.mark.parametrize("code", [0, 1, 2, 13, 14, 255])
@pytest.mark.parametrize("with_value", [False, True])
def test_union_codes(code: int, with_value: bool) -> None:
    data = _union_block(code, with_value)
    # An AddData table with prev_offset 3; as DisablePollingSource (no fields) the slot is
    # unknown and ignored; as ExecuteTransform its required query_inputs are missing.
    valid = with_value and code in (1, 13)
    assert check(data) is valid
    if code == 1 and valid:
        assert decode_block(data).event == m.AddData(prev_offset=3)


@st.composite
def mutated(draw: st.DrawFn, seed: st.SearchStrategy[bytes]) -> bytes:
    """Flips, small offsets, cuts, splices and growth (as tests/fuzz/test_fuzz_blocks.py)."""
    data = bytearray(draw(seed))
    for _ in range(draw(st.integers(1, 8))):
        if not data:
            break
        op = draw(st.sampled_from(["flip", "offset", "cut", "splice", "grow"]))
        i = draw(st.integers(0, len(data) - 1))
        if op == "flip":
            data[i] ^= draw(st.integers(1, 255))
        elif op == "offset" and len(data) >= 8:
            j = min((i // 4) * 4, len(data) - 4)
            value = draw(st.integers(0, min(len(data), 4096)))
            data[j : j + 4] = value.to_bytes(4, "little")
        elif op == "cut":
            del data[i:]
        elif op == "splice":
            k = draw(st.integers(0, len(data) - 1))
            data[i:i] = data[k : k + draw(st.integers(1, 64))]
        else:
            data += draw(st.binary(max_size=64))
    return bytes(data)


@fuzz(400)
@given(mutated(st.sampled_from(SEEDS) | metadata_blocks().map(encode_block)))
def test_mutated_blocks(data: bytes) -> None:
    check(data)
    check_content(data)


@fuzz(200)
@given(st.binary(max_size=512))
def test_random_bytes(data: bytes) -> None:
    check(data)
    assert NATIVE is not None
    fast = NATIVE.decode_content(data)
    if fast is not None:
        _same(fast, fbs._decode_content(data))


def test_decoded_blocks_are_not_tracked_by_the_collector() -> None:
    """A decoded block is an acyclic tree: the compiled decoder leaves it untracked, so a chain
    kept in memory costs the cyclic collector nothing (tracked, it cost more than decoding)."""
    assert NATIVE is not None
    for data in (SOURCE_STATE_BLOCK, CHAIN_BLOCKS[-1]):
        block = NATIVE.decode_block(data)
        todo: list[Any] = [block]
        seen = 0
        while todo:
            value = todo.pop()
            if dataclasses.is_dataclass(value):
                assert not gc.is_tracked(value), type(value).__name__
                todo.extend(getattr(value, f.name) for f in dataclasses.fields(value))
                seen += 1
            elif isinstance(value, tuple):
                assert not gc.is_tracked(value)
                todo.extend(value)
        assert seen >= 8


#: Run in a child: the enum constructors of a configuration call configure again on their first
#: call, in the middle of a decode (an enum constructor is Python code, where another thread or
#: a finalizer may run). The child's freed memory is overwritten (PYTHONMALLOC=debug), so a
#: decode still reading replaced tables crashes it.
_RECONFIGURE_MID_DECODE = """
import sys
from coordinator.metadata import decode_block
from coordinator.metadata import flatbuffers_serde as fbs

native = fbs.NATIVE_DECODER
data = bytes.fromhex(sys.stdin.read())
recorded = []
class Recorder:
    def configure(self, *args):
        recorded.extend(args)
fbs._configure_native(Recorder())
tables, *rest = recorded
calls = []
def reentrant(enum_cls):
    def conv(value):
        if not calls:
            calls.append(value)
            fbs._configure_native(native)  # replaces the tables this decode is reading
        return enum_cls(value)
    return conv
ENUMS = ("ENUM", "ENUM_OPT", "ENUM16_OPT")
native.configure(
    [
        None if t is None else (
            t[0], t[1], tuple(f[:4] + (reentrant(f[4]),) if f[0] in ENUMS else f for f in t[2])
        )
        for t in tables
    ],
    *rest,
)
block = native.decode_block(data)
assert calls, "no enum was decoded"
fbs.NATIVE_DECODER = None
assert block == decode_block(data), block
fbs.NATIVE_DECODER = native
assert native.decode_block(data) == block
print("ok")
"""


def test_configure_during_a_decode_keeps_the_running_tables() -> None:
    """A decode keeps the configuration it started with: configure called meanwhile (another
    thread, a finalizer) installs the new one for later decodes and frees the old one only when
    the decode ends (it used to free the tables under the running decode: use-after-free)."""
    seed_block = CHAIN_BLOCKS[0]
    assert isinstance(decode_block(seed_block).event, m.Seed)  # its dataset_kind is an enum
    out = subprocess.run(
        [sys.executable, "-c", _RECONFIGURE_MID_DECODE],
        input=seed_block.hex(),
        env=dict(os.environ, PYTHONMALLOC="debug"),
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


def _recorded_configuration() -> list[Any]:
    """The arguments ``flatbuffers_serde`` configures the compiled decoder with."""
    recorded: list[Any] = []

    class Recorder:
        def configure(self, *args: Any) -> None:
            recorded.extend(args)

    fbs._configure_native(Recorder())  # type: ignore[arg-type]
    return recorded


def test_configure_refuses_leaves_with_missing_or_extra_slots() -> None:
    """The multihash leaf names both slots decoding fills, the others one: a multihash leaf
    given one slot used to be accepted, its digest then written at offset 0 of every decoded
    multihash (over the object's reference count)."""
    assert NATIVE is not None
    tables, block, hash_type, sha3, arrow0, ts_type, did_type = _recorded_configuration()
    code = vars(Multihash)["code"]
    for bad_hash, bad_ts in (
        ((Multihash, code), ts_type),
        ((Multihash, code, code), ts_type),
        (hash_type, (*ts_type, ts_type[1])),
    ):
        with pytest.raises((TypeError, ValueError)):
            NATIVE.configure(tables, block, bad_hash, sha3, arrow0, bad_ts, did_type)
    # The refused configurations left the installed one alone.
    assert check(CHAIN_BLOCKS[5], must_decode=True)


def test_interrupts_during_a_decode_reach_the_caller() -> None:
    """An exception that is not an ``Exception`` (KeyboardInterrupt or SystemExit from a signal
    handler, which may run while an enum constructor runs) propagates, as from the Python
    decoder, instead of being swallowed into a fallback."""
    assert NATIVE is not None
    tables, *rest = _recorded_configuration()

    def interrupted(_value: int) -> Any:
        raise KeyboardInterrupt

    enums = ("ENUM", "ENUM_OPT", "ENUM16_OPT")
    NATIVE.configure(
        [
            None
            if t is None
            else (t[0], t[1], tuple((*f[:4], interrupted) if f[0] in enums else f for f in t[2]))
            for t in tables
        ],
        *rest,
    )
    try:
        with pytest.raises(KeyboardInterrupt):
            NATIVE.decode_block(CHAIN_BLOCKS[0])  # a Seed: its dataset_kind is an enum
    finally:
        fbs._configure_native(NATIVE)
    assert check(CHAIN_BLOCKS[0], must_decode=True)


def test_non_bytes_are_left_to_python() -> None:
    assert NATIVE is not None
    data = CHAIN_BLOCKS[5]
    assert NATIVE.decode_block(bytearray(data)) is None  # type: ignore[arg-type]
    assert NATIVE.decode_block(memoryview(data)) is None  # type: ignore[arg-type]
    _same(decode_block(bytearray(data)), decode_block(data))  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Fallback


@pytest.mark.usefixtures("python_only")
def test_python_decoder_alone_decodes_the_chains() -> None:
    assert fbs.NATIVE_DECODER is None
    for data in CHAIN_BLOCKS:
        assert isinstance(decode_block(data), m.MetadataBlock)


def test_missing_module_falls_back(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(native_decode, "module_path", lambda: tmp_path / "absent.so")
    assert native_decode.load(fbs._configure_native) is None


def test_a_module_that_refuses_the_tables_falls_back() -> None:
    def refuse(native: native_decode.NativeDecoder) -> None:
        native.configure([], 0, (int,), 0, 0, (int,), (int,))  # type: ignore[arg-type]

    assert native_decode.load(refuse) is None
    # The refused configuration left the loaded tables alone.
    assert NATIVE is not None
    assert NATIVE.decode_block(CHAIN_BLOCKS[5]) is not None


def test_switch_forces_the_python_decoder() -> None:
    code = (
        "from coordinator.metadata import flatbuffers_serde as f; print(f.NATIVE_DECODER is None)"
    )
    for switch, expected in (("0", "True"), ("1", "False")):
        env = dict(os.environ, **{native_decode.ENV_SWITCH: switch})
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == expected


def test_schema_bytes_survive() -> None:
    """SetDataSchema's Arrow bytes come back as the same bytes object type and content."""
    builder = ChainBuilder()
    data = builder.add(m.SetDataSchema(raw_arrow_schema=SCHEMA_BYTES))
    assert check(data, must_decode=True)
