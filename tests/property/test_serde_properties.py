"""Property tests of the FlatBuffers and YAML serde over generated metadata.

* FlatBuffers: ``decode(encode(x)) == x`` and ``encode(decode(b)) == b`` for blocks of every
  event type, block versions 2 and 3;
* YAML / plain data: ``block_from_yaml(block_to_yaml(x)) == x``, the text is a fixed point, plain
  data survives JSON; snapshots round-trip too;
* robustness: mutated or truncated block bytes make ``decode_block`` either succeed or raise
  :class:`InvalidBlock` (nothing else); mutated YAML only ever raises :class:`DecodeError`.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import EVENT_TYPES, dataset_snapshots, metadata_blocks, metadata_events

from coordinator.errors import DecodeError, InvalidBlock
from coordinator.identity import DatasetId
from coordinator.metadata import decode_block, encode_block
from coordinator.metadata import model as m
from coordinator.metadata.snapshot import DatasetSnapshot, snapshot_from_yaml, snapshot_to_yaml
from coordinator.metadata.timestamp import Timestamp
from coordinator.metadata.yaml_serde import (
    block_from_yaml,
    block_to_yaml,
    event_from_dict,
    event_to_dict,
)
from coordinator.multiformats import Multihash

PER_TYPE = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

EVENT_IDS = [t.__name__ for t in EVENT_TYPES]


def _blocks_of(event_type: type) -> st.SearchStrategy[m.MetadataBlock]:
    return metadata_blocks(metadata_events(event_type))


# ---------------------------------------------------------------------------------------------
# FlatBuffers


@pytest.mark.parametrize("version", [2, 3])
@pytest.mark.parametrize("event_type", EVENT_TYPES, ids=EVENT_IDS)
def test_flatbuffers_round_trip(event_type: type, version: int) -> None:
    @PER_TYPE
    @given(_blocks_of(event_type))
    def check(block: m.MetadataBlock) -> None:
        data = encode_block(block, version=version)
        decoded = decode_block(data)
        assert decoded == block
        assert encode_block(decoded, version=version) == data

    check()


# ---------------------------------------------------------------------------------------------
# YAML and plain data


@pytest.mark.parametrize("event_type", EVENT_TYPES, ids=EVENT_IDS)
def test_yaml_round_trip(event_type: type) -> None:
    @PER_TYPE
    @given(_blocks_of(event_type), st.sampled_from([2, 3]))
    def check(block: m.MetadataBlock, version: int) -> None:
        text = block_to_yaml(block, version=version)
        parsed = block_from_yaml(text)
        assert parsed == block
        assert block_to_yaml(parsed, version=version) == text

    check()


@pytest.mark.parametrize("event_type", EVENT_TYPES, ids=EVENT_IDS)
def test_event_dict_survives_json(event_type: type) -> None:
    @PER_TYPE
    @given(metadata_events(event_type))
    def check(event: m.MetadataEvent) -> None:
        plain = event_to_dict(event)
        assert next(iter(plain)) == "kind"
        assert event_from_dict(json.loads(json.dumps(plain))) == event

    check()


@FUZZ
@given(dataset_snapshots())
def test_snapshot_round_trip(snapshot: DatasetSnapshot) -> None:
    text = snapshot_to_yaml(snapshot)
    assert snapshot_from_yaml(text) == snapshot
    assert snapshot_to_yaml(snapshot_from_yaml(text)) == text


# ---------------------------------------------------------------------------------------------
# Robustness of decode_block against damaged bytes

_MUTATION = st.one_of(
    st.tuples(st.just("set"), st.integers(min_value=0), st.integers(0, 255)),
    st.tuples(st.just("xor"), st.integers(min_value=0), st.integers(1, 255)),
    st.tuples(st.just("truncate"), st.integers(min_value=0), st.just(0)),
    st.tuples(st.just("insert"), st.integers(min_value=0), st.integers(0, 255)),
    st.tuples(st.just("delete"), st.integers(min_value=0), st.just(0)),
)


def _mutate(data: bytes, mutations: list[tuple[str, int, int]]) -> bytes:
    buf = bytearray(data)
    for op, pos, value in mutations:
        if not buf:
            break
        i = pos % len(buf)
        if op == "set":
            buf[i] = value
        elif op == "xor":
            buf[i] ^= value
        elif op == "truncate":
            del buf[i:]
        elif op == "insert":
            buf.insert(i, value)
        else:
            del buf[i]
    return bytes(buf)


def _decode_or_invalid(data: bytes) -> None:
    try:
        decode_block(data)
    except InvalidBlock:
        pass


@FUZZ
@given(metadata_blocks(), st.sampled_from([2, 3]), st.lists(_MUTATION, min_size=1, max_size=4))
def test_damaged_blocks_raise_only_invalid_block(
    block: m.MetadataBlock, version: int, mutations: list[tuple[str, int, int]]
) -> None:
    _decode_or_invalid(_mutate(encode_block(block, version=version), mutations))


@FUZZ
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_invalid_block(data: bytes) -> None:
    _decode_or_invalid(data)


def _sample_blocks() -> list[m.MetadataBlock]:
    h = Multihash.sha3_256
    t = Timestamp.parse("2020-01-01T12:00:00.123456789Z")
    return [
        m.MetadataBlock(
            system_time=t,
            prev_block_hash=h(b"prev"),
            sequence_number=7,
            event=m.SetPollingSource(
                fetch=m.FetchStepFilesGlob(
                    path="./*.csv",
                    event_time=m.EventTimeSourceFromPath(pattern="(.*)", timestamp_format="%Y"),
                    cache=m.SourceCachingForever(),
                    order=m.SourceOrdering.BY_NAME,
                ),
                prepare=(m.PrepStepDecompress(format=m.CompressionFormat.ZIP, sub_path="a"),),
                read=m.ReadStepCsv(ddl_schema=("a INT",), header=True, infer_schema=False),
                preprocess=m.TransformSql(engine="spark", query="SELECT 1"),
                merge=m.MergeStrategySnapshot(primary_key=("a",), compare_columns=()),
            ),
        ),
        m.MetadataBlock(
            system_time=t,
            sequence_number=0,
            event=m.Seed(
                dataset_id=DatasetId.new_seeded_ed25519(b"x"),
                dataset_kind=m.DatasetKind.DERIVATIVE,
            ),
        ),
        m.MetadataBlock(
            system_time=t,
            prev_block_hash=h(b"p"),
            sequence_number=3,
            event=m.ExecuteTransform(
                query_inputs=(
                    m.ExecuteTransformInput(
                        dataset_id=DatasetId.new_seeded_ed25519(b"i"),
                        new_block_hash=h(b"b"),
                        new_offset=4,
                    ),
                ),
                new_checkpoint=m.Checkpoint(physical_hash=h(b"c"), size=1),
                new_watermark=t,
            ),
        ),
    ]


@pytest.mark.parametrize("version", [2, 3])
@pytest.mark.parametrize("index", range(3))
def test_every_single_byte_mutation_and_truncation(index: int, version: int) -> None:
    data = encode_block(_sample_blocks()[index], version=version)
    for cut in range(len(data)):
        _decode_or_invalid(data[:cut])
    for i in range(len(data)):
        for value in (0x00, 0x01, 0x7F, 0x80, 0xFF, data[i] ^ 0x01):
            _decode_or_invalid(data[:i] + bytes([value]) + data[i + 1 :])


# ---------------------------------------------------------------------------------------------
# Robustness of the YAML reader against damaged text


@FUZZ
@given(
    metadata_blocks(),
    st.lists(
        st.tuples(st.integers(min_value=0), st.sampled_from(list(" :-'\"[]{}#&*!|>\n\tx0"))),
        min_size=1,
        max_size=4,
    ),
)
def test_damaged_yaml_raises_only_decode_error(
    block: m.MetadataBlock, edits: list[tuple[int, str]]
) -> None:
    text = list(block_to_yaml(block))
    for pos, ch in edits:
        text[pos % len(text)] = ch
    try:
        block_from_yaml("".join(text))
    except DecodeError:
        pass
