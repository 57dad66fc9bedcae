"""Regression: FlatBuffers offsets shared between objects cannot amplify a decode.

A vector may hold N offsets to one string or table; a decoder that follows them builds that
object N times. Before the amplification budget, a 140 KB block whose ``SetInfo.keywords`` held
10,000 offsets to one 100 KB string decoded to 10^9 characters (4.3 s, 1 GB RSS), and nested
sharing (``temporal_tables`` x ``primary_key``) grew quadratically. Now every decoder charges
what it builds against the buffer's own size (``docs/resource-budget.md``) and rejects the rest:
blocks with :class:`InvalidBlock`, Arrow schemas and engine messages with :class:`DecodeError`.

The hostile buffers are written by hand (``tests/hostile_flatbuffers.py``); each test bounds the
time it allows, far above what the budgeted decoder needs (milliseconds) and far below what the
old one took on the same bytes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import hostile_flatbuffers as hf
import pyarrow as pa
import pytest

from coordinator.errors import DecodeError, InvalidBlock
from coordinator.metadata import decode_block, encode_block
from coordinator.metadata import model as m
from coordinator.metadata.arrow_schema import decode_arrow_schema, encode_arrow_schema
from coordinator.metadata.timestamp import Timestamp
from coordinator.transform.fbs import decode_raw_query_request, decode_transform_request

QUICK_S = 1.0  # generous on a shared machine: the budgeted decoders take milliseconds here


@contextmanager
def quickly(limit: float = QUICK_S) -> Iterator[None]:
    """Fail if the body takes longer than ``limit`` seconds."""
    t0 = time.perf_counter()
    yield
    elapsed = time.perf_counter() - t0
    assert elapsed < limit, f"took {elapsed:.2f} s"


def _set_info(keywords: tuple[str, ...]) -> bytes:
    return encode_block(
        m.MetadataBlock(
            system_time=Timestamp.parse("2024-01-01T00:00:00Z"),
            prev_block_hash=None,
            sequence_number=0,
            event=m.SetInfo(description=None, keywords=keywords),
        )
    )


# --- blocks ---------------------------------------------------------------------------------


def test_flat_sharing_of_one_large_string_is_an_invalid_block() -> None:
    # The defect's block: 10,000 offsets to one 100 KB string, ~140 KB that named 10^9 chars.
    data = hf.flat_keywords_block(10_000, 100_000)
    assert len(data) < 141_000
    with quickly(), pytest.raises(InvalidBlock, match="shared offsets"):
        decode_block(data)


def test_nested_sharing_is_an_invalid_block() -> None:
    # 2,000 tables sharing one primary_key of 2,000 offsets to one string: 16 KB naming 4 * 10^6
    # strings (the old decoder built them all, ~2.5 s; a 64 KB block took 37 s).
    data = hf.nested_temporal_tables_block(2_000, 2_000)
    assert len(data) < 17_000
    with quickly(), pytest.raises(InvalidBlock, match="shared offsets"):
        decode_block(data)


def test_nested_sharing_of_empty_strings_is_an_invalid_block() -> None:
    # Empty strings cost nothing to build but the vectors still do: the budget counts them.
    data = hf.nested_temporal_tables_block(2_000, 2_000, length=0)
    with quickly(), pytest.raises(InvalidBlock, match="shared offsets"):
        decode_block(data)


def test_sharing_within_the_blocks_own_size_still_decodes() -> None:
    # The rule bounds the decoded size; it does not ban sharing as such.
    block = decode_block(hf.flat_keywords_block(3, 8))
    assert isinstance(block.event, m.SetInfo)
    assert block.event.keywords == ("k" * 8,) * 3
    nested = decode_block(hf.nested_temporal_tables_block(2, 3, length=2))
    assert isinstance(nested.event, m.SetTransform)
    assert (
        nested.event.transform.temporal_tables
        == (m.TemporalTable(name="t", primary_key=("cc",) * 3),) * 2
    )


@pytest.mark.parametrize(
    "keywords",
    [
        ("x" * 1_000_000,),  # one string nearly as large as the block
        tuple(f"{i}" for i in range(20_000)),  # many tiny strings
        ("",) * 5_000,  # empty strings: 4-byte length + NUL each
    ],
    ids=["one-large", "many-tiny", "many-empty"],
)
def test_honest_blocks_fit_their_budget(keywords: tuple[str, ...]) -> None:
    # A builder never overlaps objects, so our encoder's (and kamu's) blocks always fit.
    block = decode_block(_set_info(keywords))
    assert isinstance(block.event, m.SetInfo)
    assert block.event.keywords == keywords


def test_densest_honest_block_decodes() -> None:
    # Hand-made without sharing, objects packed as tightly as the format allows.
    block = decode_block(hf.dense_keywords_block(10_000, 2))
    assert isinstance(block.event, m.SetInfo)
    assert block.event.keywords is not None and len(block.event.keywords) == 10_000


# --- Arrow schemas --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        # ~4 MiB: 500,000 offsets to one field named by 2 MB (the decoder used to build a view
        # of every element first: 1.8 s, 85 MiB).
        lambda: hf.flat_fields_schema(500_000, 2_000_000),
        # ~1 MiB: 130,000 struct children sharing one struct of 130,000 shared fields (3.6 s,
        # 94 MiB before).
        lambda: hf.nested_struct_schema(130_000, 130_000),
    ],
    ids=["flat", "nested"],
)
def test_shared_schema_fields_are_a_decode_error(build: Callable[[], bytes]) -> None:
    data = build()
    with quickly(), pytest.raises(DecodeError, match="shared offsets"):
        decode_arrow_schema(data)


def test_honest_schemas_fit_their_budget() -> None:
    assert len(decode_arrow_schema(hf.dense_fields_schema(2_000))) == 2_000
    schema = pa.schema(
        [pa.field("n" * 100_000, pa.string())]
        + [pa.field(f"c{i}", pa.struct([pa.field("a", pa.int64())])) for i in range(500)]
    )
    assert decode_arrow_schema(encode_arrow_schema(schema)) == schema


def test_schema_sharing_within_its_own_size_still_decodes() -> None:
    assert decode_arrow_schema(hf.flat_fields_schema(2, 8)).names == ["f" * 8] * 2
    assert len(decode_arrow_schema(hf.nested_struct_schema(2, 2)).field(0).type) == 2


# --- engine protocol ------------------------------------------------------------------------


def test_shared_engine_message_strings_are_a_decode_error() -> None:
    data = hf.shared_paths_raw_query(10_000, 100_000)
    with quickly(), pytest.raises(DecodeError, match="shared offsets"):
        decode_raw_query_request(data)
    assert len(decode_raw_query_request(hf.shared_paths_raw_query(2, 16)).input_data_paths) == 2


def test_malformed_transform_request_is_a_decode_error() -> None:
    # The request decoder shares the budget and error mapping with the raw query decoder.
    with pytest.raises(DecodeError):
        decode_transform_request(hf.shared_paths_raw_query(10_000, 100_000))
