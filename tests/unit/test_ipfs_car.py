"""The CARv1 reader (``node/ipfs/car.py``) beyond the common case: sections cut anywhere by the
chunking, blocks far larger than a chunk, CIDs off its fast path (multi-byte codecs, other
multihashes, CIDv0) and an empty block on it."""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import AsyncIterator

import pytest

from node.ipfs.car import DAG_PB_CODEC, RAW_CODEC, CarError, read_car

HEADER = b"\xa2eroots\x80gversion\x01"  # dag-cbor {roots: [], version: 1}


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _cid_v1(codec: int, data: bytes, mh: int = 0x12) -> bytes:
    digest = hashlib.sha256(data).digest() if mh == 0x12 else hashlib.sha512(data).digest()
    if mh == 0x00:
        digest = data
    return _varint(1) + _varint(codec) + _varint(mh) + _varint(len(digest)) + digest


def _car(sections: list[tuple[bytes, bytes]]) -> bytes:
    out = _varint(len(HEADER)) + HEADER
    for cid, data in sections:
        out += _varint(len(cid) + len(data)) + cid + data
    return out


async def _read(data: bytes, sizes: list[int], cap: int = 1 << 26) -> list[tuple[int, bytes]]:
    async def gen() -> AsyncIterator[bytes]:
        pos = 0
        i = 0
        while pos < len(data):
            n = sizes[i % len(sizes)]
            yield data[pos : pos + n]
            pos += n
            i += 1

    return [(b.codec, b.data) async for b in read_car(gen(), max_bytes=cap)]


def test_every_kind_of_cid_and_any_chunking() -> None:
    big = random.Random(1).randbytes(300_000)  # a 2- and 3-byte length varint
    blocks = [
        (_cid_v1(RAW_CODEC, b""), b""),  # 36 bytes: the fast path's smallest section
        (_cid_v1(RAW_CODEC, b"a"), b"a"),
        (_cid_v1(0x0129, b"{}"), b"{}"),  # dag-json: a two-byte codec
        (_cid_v1(RAW_CODEC, b"id", mh=0x00), b"id"),  # identity multihash
        (_cid_v1(RAW_CODEC, b"long", mh=0x13), b"long"),  # sha2-512
        (b"\x12\x20" + hashlib.sha256(b"pb").digest(), b"pb"),  # CIDv0
        (_cid_v1(RAW_CODEC, big), big),
        (_cid_v1(DAG_PB_CODEC, b"\x0a\x00"), b"\x0a\x00"),
    ]
    want = [(RAW_CODEC, b""), (RAW_CODEC, b"a"), (0x0129, b"{}"), (RAW_CODEC, b"id")]
    want += [(RAW_CODEC, b"long"), (DAG_PB_CODEC, b"pb"), (RAW_CODEC, big)]
    want += [(DAG_PB_CODEC, b"\x0a\x00")]
    car = _car(blocks)
    for sizes in ([1], [7], [1, 2, 3, 5, 8, 13], [4096], [65536, 1], [len(car)]):
        assert asyncio.run(_read(car, sizes)) == want, sizes


def test_a_large_block_in_small_chunks() -> None:
    big = random.Random(2).randbytes(4 << 20)
    car = _car([(_cid_v1(RAW_CODEC, big), big), (_cid_v1(RAW_CODEC, b"x"), b"x")])
    assert asyncio.run(_read(car, [1000])) == [(RAW_CODEC, big), (RAW_CODEC, b"x")]


def test_malformed_archives() -> None:
    car = _car([(_cid_v1(RAW_CODEC, b"abc"), b"abc")])
    with pytest.raises(CarError, match="ends inside"):
        asyncio.run(_read(car[:-1], [5]))
    with pytest.raises(CarError, match="ends inside"):  # inside a section's length varint
        asyncio.run(_read(_car([]) + b"\x80", [5]))
    with pytest.raises(CarError, match="cap"):
        asyncio.run(_read(car, [5], cap=len(car) - 1))
    with pytest.raises(CarError, match="empty archive"):
        asyncio.run(_read(b"", [5]))
    with pytest.raises(CarError, match="empty section"):
        asyncio.run(_read(_car([]) + b"\x00", [5]))
    with pytest.raises(CarError, match="shorter than its CID"):
        cid = _cid_v1(RAW_CODEC, b"q")  # a section of 10 bytes, then a whole one
        asyncio.run(_read(_car([]) + _varint(10) + cid[:10] + _car([(cid, b"q")])[18:], [99]))
    with pytest.raises(CarError, match="CID version"):
        asyncio.run(_read(_car([]) + _varint(40) + b"\x02" * 40, [64]))
