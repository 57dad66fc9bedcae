"""The embedded node's ``dag/export`` (``js/helia-ipfs.mjs``): a CARv1 whose header names the
root and which holds every block of the DAG exactly once, each under a CID its bytes hash to.

The archive is parsed here independently of ``node/ipfs/car.py`` (the reader the pull uses), the
header with a generic CBOR decoder. Covered: raw leaves, a multi-chunk file (a dag-pb node over
raw leaves, more than 1 MiB in one batch), a subdirectory, an empty file and two files with the
same bytes (one block), read from the node's own blockstore; and an absent root, refused with an
HTTP error before any byte.
Needs ``unshare -rn``.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import cbor2
import pytest
from netns import ipfs_node  # noqa: F401 - pytest fixture

from node.ipfs.car import read_car
from node.ipfs.client import IpfsClient
from node.ipfs.embedded import EmbeddedIpfs
from node.ipfs.errors import IpfsError

pytestmark = pytest.mark.integration

CHUNK = 262144


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def _parse(car: bytes) -> tuple[object, list[tuple[int, bytes, bytes]]]:
    """The decoded header and each section's (codec, sha2-256 digest in the CID, block bytes)."""
    n, pos = _varint(car, 0)
    header = cbor2.loads(car[pos : pos + n])
    pos += n
    sections = []
    while pos < len(car):
        n, body = _varint(car, pos)
        end = body + n
        if car[body : body + 2] == b"\x12\x20":  # CIDv0: a bare sha2-256 multihash
            sections.append((0x70, car[body + 2 : body + 34], car[body + 34 : end]))
            pos = end
            continue
        version, p = _varint(car, body)
        assert version == 1
        codec, p = _varint(car, p)
        mh, p = _varint(car, p)
        assert mh == 0x12  # sha2-256
        dlen, p = _varint(car, p)
        sections.append((codec, car[p : p + dlen], car[p + dlen : end]))
        pos = end
    assert pos == len(car)
    return header, sections


def _cid_bytes(cid: str) -> bytes:
    from multiformats import CID

    return bytes(CID.decode(cid))


async def _export(client: IpfsClient, cid: str) -> bytes:
    buf = bytearray()
    async with client.open_dag_export(cid) as chunks:
        async for c in chunks:
            buf += c
    return bytes(buf)


def test_dag_export_holds_every_block_once(ipfs_node: EmbeddedIpfs, tmp_path: Path) -> None:  # noqa: F811
    root = tmp_path / "tree"
    (root / "sub").mkdir(parents=True)
    small = {f"f{i:03}": f"small file {i}\n".encode() * (i + 1) for i in range(150)}
    for name, data in small.items():
        (root / name).write_bytes(data)
    (root / "same-as-f007").write_bytes(small["f007"])
    (root / "empty").write_bytes(b"")
    # 5 full chunks and a 6th: more than the node reads into its 1 MiB buffer per batch
    big = bytes(range(256)) * (5 * CHUNK // 256) + b"tail"
    (root / "sub" / "big").write_bytes(big)
    (root / "sub" / "x").write_bytes(b"x")

    async def run() -> tuple[str, bytes, list[str]]:
        async with IpfsClient(ipfs_node.api_url) as client:
            cid = await client.add_directory(root)
            car = await _export(client, cid)
            blocks: list[str] = []
            async for b in read_car(_chunked(car), max_bytes=len(car)):
                blocks.append(f"{b.codec:x}:{len(b.data)}")
            return cid, car, blocks

    cid, car, via_reader = asyncio.run(run())
    header, sections = _parse(car)
    assert isinstance(header, dict)
    assert header["version"] == 1
    (tag,) = header["roots"]
    assert isinstance(tag, cbor2.CBORTag) and tag.tag == 42
    assert tag.value == b"\x00" + _cid_bytes(cid)
    for _, digest, data in sections:
        assert hashlib.sha256(data).digest() == digest  # each block under its own CID
    digests = [d for _, d, _ in sections]
    assert len(set(digests)) == len(digests)  # none twice
    raw = {d for c, d, _ in sections if c == 0x55}
    dag_pb = [d for c, d, _ in sections if c == 0x70]
    expected_raw = {hashlib.sha256(d).digest() for d in [*small.values(), b"", b"x"]}
    expected_raw |= {hashlib.sha256(big[i : i + CHUNK]).digest() for i in range(0, len(big), CHUNK)}
    assert raw == expected_raw
    assert len(dag_pb) == 3  # the root directory, sub/ and the multi-chunk file
    assert sections[0][1] == _cid_bytes(cid)[-32:]  # the root comes first
    # node/ipfs/car.py reads the same sections.
    assert via_reader == [f"{c:x}:{len(d)}" for c, _, d in sections]


async def _chunked(data: bytes, size: int = 1000) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


def test_dag_export_of_an_absent_root_is_an_http_error(ipfs_node: EmbeddedIpfs) -> None:  # noqa: F811
    from multiformats import CID

    digest = hashlib.sha256(b"never added anywhere").digest()
    absent = str(CID("base32", 1, "raw", bytes([0x12, 32]) + digest))

    async def run() -> None:
        async with IpfsClient(ipfs_node.api_url, timeout_s=1.0) as client:
            await _export(client, absent)

    with pytest.raises(IpfsError) as e:
        asyncio.run(run())
    assert e.value.status is not None and e.value.status >= 400


def test_dag_export_of_a_cid_v0_dag(ipfs_node: EmbeddedIpfs) -> None:  # noqa: F811
    """A file added as CIDv0 (dag-pb leaves, links by bare multihash) exports whole too."""
    import aiohttp

    data = bytes(range(251)) * (3 * CHUNK // 251)  # 3 chunks, the last one short

    async def run() -> tuple[str, bytes]:
        async with IpfsClient(ipfs_node.api_url) as client:
            form = aiohttp.FormData()
            form.add_field("file", data, filename="f", content_type="application/octet-stream")
            out = await client._json("add", {"cid-version": 0, "pin": False}, form)
            cid = str(out[-1]["Hash"])
            return cid, await _export(client, cid)

    cid, car = asyncio.run(run())
    assert cid.startswith("Qm")
    header, sections = _parse(car)
    assert isinstance(header, dict)
    (tag,) = header["roots"]
    assert tag.value == b"\x00" + _cid_bytes(cid)
    assert all(codec == 0x70 for codec, _, _ in sections)
    for _, digest, block in sections:
        assert hashlib.sha256(block).digest() == digest
    assert len(sections) == 1 + 3  # the file's root and its three leaves
    assert sections[0][1] == _cid_bytes(cid)[-32:]
