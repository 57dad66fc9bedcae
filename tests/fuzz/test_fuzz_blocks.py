"""Fuzz: metadata blocks and Arrow schemas from strangers.

A block is named by its own hash, so the hash check proves nothing about its contents: any peer
or source can hand the node any bytes under their hash. For every input the decoder must either
return a value or raise :class:`~coordinator.errors.InvalidBlock` (the schema decoder: a
:class:`~coordinator.errors.DecodeError`), in bounded time, and what it returns must be small
compared with the bytes it came from (no amplification through shared FlatBuffers offsets).

Mutations are structure-aware: besides flipped, cut and spliced bytes, aligned 32-bit words are
overwritten with small offsets, which is how shared and cyclic references are made.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import struct
from enum import Enum
from pathlib import Path
from typing import Any

import pyarrow as pa
from fuzz_profile import fuzz
from hypothesis import given
from hypothesis import strategies as st
from strategies import metadata_blocks

from coordinator.errors import DecodeError, InvalidBlock
from coordinator.metadata import decode_block, encode_block
from coordinator.metadata.arrow_schema import decode_arrow_schema
from coordinator.metadata.timestamp import Timestamp
from coordinator.multiformats import Multihash

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "data" / "arrow_schemas.json"


def decoded_units(value: Any, depth: int = 0) -> int:
    """Characters, bytes and objects in a decoded value (its materialised size)."""
    assert depth < 200, "decoded value nested deeper than any block allows"
    if value is None or isinstance(value, bool | int | float | Enum | Timestamp):
        return 1
    if isinstance(value, str | bytes):
        return 1 + len(value)
    if isinstance(value, Multihash):
        return 1 + len(value.digest)
    if isinstance(value, tuple | list):
        return 1 + sum(decoded_units(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return 1 + sum(
            decoded_units(k, depth + 1) + decoded_units(v, depth + 1) for k, v in value.items()
        )
    if dataclasses.is_dataclass(value):
        return 1 + sum(
            decoded_units(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)
        )
    return 1 + len(repr(value))


@st.composite
def mutated(draw: st.DrawFn, seed: st.SearchStrategy[bytes]) -> bytes:
    data = bytearray(draw(seed))
    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from(["flip", "offset", "cut", "splice", "grow"]))
        if not data:
            break
        i = draw(st.integers(0, len(data) - 1))
        if op == "flip":
            data[i] ^= draw(st.integers(1, 255))
        elif op == "offset" and len(data) >= 8:
            # An aligned u32 rewritten as a small offset: shares or loops a reference.
            j = (i // 4) * 4
            j = min(j, len(data) - 4)
            data[j : j + 4] = struct.pack("<I", draw(st.integers(0, min(len(data), 4096))))
        elif op == "cut":
            del data[i:]
        elif op == "splice":
            k = draw(st.integers(0, len(data) - 1))
            n = draw(st.integers(1, 64))
            data[i:i] = data[k : k + n]
        else:
            data += draw(st.binary(max_size=64))
    return bytes(data)


ENCODED_BLOCKS = metadata_blocks().map(encode_block)


@fuzz(400)
@given(mutated(ENCODED_BLOCKS))
def test_a_mutated_block_decodes_small_or_is_invalid(data: bytes) -> None:
    try:
        block = decode_block(data)
    except InvalidBlock:
        return
    assert decoded_units(block) <= 4 * len(data) + 256


@fuzz(200)
@given(st.binary(max_size=2048))
def test_random_bytes_are_an_invalid_block(data: bytes) -> None:
    try:
        decode_block(data)
    except InvalidBlock:
        pass


def _golden_schemas() -> list[bytes]:
    cases = json.loads(GOLDEN.read_text())
    items = cases.values() if isinstance(cases, dict) else cases
    out = []
    for case in items:
        for key in ("base64",):
            if isinstance(case, dict) and isinstance(case.get(key), str):
                try:
                    out.append(base64.b64decode(case[key], validate=True))
                except ValueError:
                    continue
                break
    return out


SCHEMAS = _golden_schemas()


def test_golden_schemas_were_found() -> None:
    assert len(SCHEMAS) >= 5  # the fuzz below mutates real kamu schemas, not nothing


def _schema_units(schema: pa.Schema) -> int:
    units = 0
    stack: list[pa.DataType] = []
    for f in schema:
        units += 1 + len(f.name)
        stack.append(f.type)
    while stack:
        t = stack.pop()
        units += 1
        for i in range(getattr(t, "num_fields", 0)):
            child = t.field(i)
            units += 1 + len(child.name)
            stack.append(child.type)
    if schema.metadata:
        units += sum(len(k) + len(v) for k, v in schema.metadata.items())
    return units


@fuzz(400)
@given(mutated(st.sampled_from(SCHEMAS) if SCHEMAS else st.just(b"")))
def test_a_mutated_schema_decodes_small_or_is_invalid(data: bytes) -> None:
    try:
        schema = decode_arrow_schema(data)
    except DecodeError:
        return
    assert _schema_units(schema) <= 4 * len(data) + 256
