"""Malformed block bytes always raise a typed error naming the problem, never anything else."""

from __future__ import annotations

import flatbuffers
import pytest
from factories import ChainBuilder

from coordinator.errors import InvalidBlock, UnsupportedBlockVersion
from coordinator.metadata import decode_block, decode_manifest, encode_block
from coordinator.metadata import model as m
from coordinator.metadata.flatbuffers_serde import encode_block_content

GOOD_BLOCK = ChainBuilder().block(m.SetInfo(description="hello", keywords=("a", "b")))


def manifest(kind: int, version: int, content: bytes | None) -> bytes:
    b = flatbuffers.Builder(256)
    off = b.CreateByteVector(content) if content is not None else None
    b.StartObject(3)
    b.PrependInt64Slot(0, kind, 0)
    b.PrependInt32Slot(1, version, 0)
    if off is not None:
        b.PrependUOffsetTRelativeSlot(2, off, 0)
    b.Finish(b.EndObject())
    return bytes(b.Output())


def test_wrong_manifest_kind() -> None:
    data = manifest(0x400001, 2, encode_block_content(GOOD_BLOCK))
    with pytest.raises(InvalidBlock, match="not odf-metadata-block"):
        decode_block(data)


@pytest.mark.parametrize("version", [0, 1, 4, 99, -1])
def test_unsupported_versions(version: int) -> None:
    data = manifest(0x400000, version, encode_block_content(GOOD_BLOCK))
    with pytest.raises(UnsupportedBlockVersion, match=f"version {version}"):
        decode_block(data)


def test_missing_content() -> None:
    with pytest.raises(InvalidBlock, match="no content"):
        decode_block(manifest(0x400000, 2, None))


def test_content_is_not_a_block() -> None:
    with pytest.raises(InvalidBlock):
        decode_block(manifest(0x400000, 2, b"\x00" * 3))
    with pytest.raises(InvalidBlock):
        decode_block(manifest(0x400000, 2, b"\x04\x00\x00\x00" + b"\xff" * 40))


def test_both_versions_roundtrip() -> None:
    for v in (2, 3):
        data = encode_block(GOOD_BLOCK, v)
        assert decode_manifest(data)[0] == v
        assert decode_block(data) == GOOD_BLOCK


@pytest.mark.parametrize("cut", [0, 1, 3, 4, 8, 16, 31, 47, 60])
def test_truncated(cut: int) -> None:
    data = encode_block(GOOD_BLOCK)
    with pytest.raises(InvalidBlock):
        decode_block(data[:cut])


def test_every_single_byte_flip_is_typed() -> None:
    """Flip each byte of a real block: the result either decodes or raises InvalidBlock."""
    data = encode_block(ChainBuilder().root_with_data(1).block(m.SetInfo(description="x")))
    for i in range(len(data)):
        for mask in (0x01, 0x80, 0xFF):
            mutated = bytearray(data)
            mutated[i] ^= mask
            try:
                decode_block(bytes(mutated))
            except InvalidBlock:
                pass


def test_missing_required_field() -> None:
    # A Seed table with no dataset_id: required by ODF, so decoding must refuse it.
    b = flatbuffers.Builder(128)
    b.StartObject(2)
    seed = b.EndObject()
    b.StartObject(5)
    b.PrependUint8Slot(3, 3, 0)  # event type = Seed
    b.PrependUOffsetTRelativeSlot(4, seed, 0)
    b.Prep(1, 16)
    b.head -= 16
    b.Bytes[b.head : b.head + 16] = bytes.fromhex("e40700000100000000000000" + "00000000")
    b.Slot(0)
    b.Finish(b.EndObject())
    with pytest.raises(InvalidBlock, match=r"Seed\.dataset_id is required"):
        decode_block(manifest(0x400000, 2, bytes(b.Output())))
