"""Inferring linked objects (RFC-017) from a pulled part, and the CARv1 stream reader."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from coordinator.ingest.linked import LinkedObjectsSummary, extra_attributes_json
from coordinator.metadata import model as m
from coordinator.multiformats import Multihash
from node.ipfs.car import DAG_PB_CODEC, RAW_CODEC, CarError, read_car
from node.transfer.linked import LinkSummary, LinkSummaryError, link_choices, link_summary

H = [Multihash.sha3_256(bytes([i])) for i in range(4)]


def _part(tmp: Path, **cols: list[str | None]) -> Path:
    p = tmp / "part.parquet"
    pq.write_table(pa.table({k: pa.array(v, pa.string()) for k, v in cols.items()}), p)
    return p


def test_link_summary_parsing() -> None:
    extra = m.ExtraAttributes(entries=extra_attributes_json(LinkedObjectsSummary(3, 70)))
    assert link_summary(m.AddData(extra=extra)) == LinkSummary(3, 70)
    assert link_summary(m.AddData()) is None
    assert link_summary(m.AddData(extra=m.ExtraAttributes(entries='{"other":1}'))) is None
    negative = '{"opendatafabric.org/linkedObjects":{"numObjectsNaive":-1,"sizeNaive":0}}'
    for bad in ("nope", negative):
        with pytest.raises(LinkSummaryError):
            link_summary(m.AddData(extra=m.ExtraAttributes(entries=bad)))


def test_link_column_inferred_from_counts(tmp_path: Path) -> None:
    part = _part(
        tmp_path,
        name=["a", "b", "c"],
        link=[str(H[0]), None, str(H[0])],
        # Every value a multihash, but the counts say it is not a link column.
        digest=[str(H[1]), str(H[2]), str(H[3])],
    )
    assert link_choices(part, LinkSummary(2, 0)) == [Counter({H[0]: 2})]
    assert link_choices(part, LinkSummary(3, 0)) == [Counter({H[1]: 1, H[2]: 1, H[3]: 1})]
    assert link_choices(part, LinkSummary(5, 0)) == [Counter({H[0]: 2, H[1]: 1, H[2]: 1, H[3]: 1})]
    assert link_choices(part, LinkSummary(4, 0)) == []
    assert link_choices(part, LinkSummary(0, 0)) == [Counter()]


def test_ambiguous_columns_give_every_choice(tmp_path: Path) -> None:
    part = _part(tmp_path, a=[str(H[0]), None], b=[None, str(H[1])])
    assert link_choices(part, LinkSummary(1, 0)) == [Counter({H[0]: 1}), Counter({H[1]: 1})]


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _section(cid: bytes, data: bytes) -> bytes:
    return _varint(len(cid) + len(data)) + cid + data


def _chunks(data: bytes, size: int) -> AsyncIterator[bytes]:
    async def gen() -> AsyncIterator[bytes]:
        for i in range(0, len(data), size):
            yield data[i : i + size]

    return gen()


async def _read(data: bytes, size: int, cap: int = 1 << 20) -> list[tuple[int, bytes]]:
    return [(b.codec, b.data) async for b in read_car(_chunks(data, size), max_bytes=cap)]


def test_car_reader_any_chunking() -> None:
    header = b"\xa2eroots\x80gversion\x01"  # dag-cbor {roots: [], version: 1}
    raw_cid = b"\x01\x55\x12\x20" + bytes(32)
    v0_cid = b"\x12\x20" + bytes(range(32))
    car = (
        _varint(len(header))
        + header
        + _section(raw_cid, b"block-one")
        + _section(v0_cid, b"\x0a\x02dir")
        + _section(raw_cid, b"x" * 300)
    )
    want = [(RAW_CODEC, b"block-one"), (DAG_PB_CODEC, b"\x0a\x02dir"), (RAW_CODEC, b"x" * 300)]
    for size in (1, 3, 7, 64, len(car)):
        assert asyncio.run(_read(car, size)) == want
    with pytest.raises(CarError, match="cap"):
        asyncio.run(_read(car, 16, cap=100))
    with pytest.raises(CarError, match="ends inside"):
        asyncio.run(_read(car[:-5], 16))
    with pytest.raises(CarError):
        asyncio.run(_read(_varint(len(header)) + header + _section(b"\x02\x55\x12\x20", b""), 8))
