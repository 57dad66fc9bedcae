"""The embedded IPFS node gives the same bytes the same CIDs as the js-ipfs 0.66.1 node it
replaced.

Published CIDs are what other nodes and kamu hold: a changed chunker, CID version, leaf type,
DAG layout or directory sharding would make a republished dataset a new one. Every expected
value below was computed by the js-ipfs 0.66.1 node (``EmbeddedIpfs`` as of the release before
Helia) through the same client calls: ``add`` with ``cid-version=1``, ``raw-leaves=true`` and
the default chunker, and ``block/put`` of a raw block. They cover an empty file, a single raw
leaf, exactly one chunk, one chunk plus a byte, several chunks, more than 174 chunks (a second
DAG level), a dataset-like tree with an empty file and an empty directory, and a directory of
3,000 entries (js-ipfs never sharded it; kubo would). Needs ``unshare -rn``.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest
from netns import ipfs_node  # noqa: F401 - pytest fixture

from node.ipfs.client import IpfsClient
from node.ipfs.embedded import EmbeddedIpfs

pytestmark = pytest.mark.integration

#: (size in bytes, CID computed by js-ipfs 0.66.1) of deterministic content named by the key.
FILES = {
    "empty": (0, "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku"),
    "hello": (5, "bafkreibfwhiqxexcy7tqovlaychgxqdnjv7ixqbnp2crit5efo4curj5mq"),
    "chunk": (262144, "bafkreic74vehgcjkowwtjsjzgt3kxuet5dfyybptqw7f5o52g4jb5tqcda"),
    "chunk_plus_1": (262145, "bafybeif5pphfgx2bpvx7qlbe2oupzaxzy2ky6xwaajtwr7admxskkwu54u"),
    "one_mib_plus_7": (
        (1 << 20) + 7,
        "bafybeif4ytjcjhms56rfqmriq35lamgmimdvxclcp433i2uk4lfrub7bae",
    ),
    "many_chunks": (
        175 * 262144 + 3,
        "bafybeidlkg5bg7e4rnmnx5ptaywbrcyiwgtpvbdwnbckp5ecnijfdhpf6a",
    ),
}
TREE_NO_INFO = "bafybeihbee4skb4mxqpvb6ucgfiaxwjoagrdhc6bqdi5ucabuxotcfks2q"
DIR_3000_ENTRIES = "bafybeidqdm2d42rqimmyvilf7oc7o7tnmvabswuvyooz7qw476o6t6o63a"
RAW_BLOCK = "bafkreie43m4fzqitrokwk5xmd5gdduznmn4bextzsit4c7twmgz6tocvhe"


def det(n: int, seed: bytes) -> bytes:
    """``n`` deterministic bytes: SHA-256 of ``seed`` and a counter, concatenated."""
    out = bytearray()
    i = 0
    while len(out) < n:
        out += hashlib.sha256(seed + i.to_bytes(8, "big")).digest()
        i += 1
    return bytes(out[:n])


def _tree(root: Path) -> None:
    (root / "blocks").mkdir(parents=True)
    for i in range(3):
        (root / "blocks" / f"f{i:02d}").write_bytes(det(1000 * i + 10, b"b%d" % i))
    (root / "refs").mkdir()
    (root / "refs" / "head").write_bytes(b"f00\n")
    (root / "data").mkdir()
    (root / "data" / "x.parquet").write_bytes(det(600_000, b"p"))
    (root / "checkpoints").mkdir()
    (root / "empty.txt").write_bytes(b"")
    (root / "info").mkdir()
    (root / "info" / "alias").write_text("x")


def _big_dir(root: Path) -> None:
    root.mkdir(parents=True)
    for i in range(3000):
        (root / f"{i:064x}").write_bytes(det(40, b"%d" % i))


def test_cids_match_js_ipfs(tmp_path: Path, ipfs_node: EmbeddedIpfs) -> None:  # noqa: F811
    _tree(tmp_path / "ds")
    _big_dir(tmp_path / "big")

    async def go() -> dict[str, str]:
        got: dict[str, str] = {}
        async with IpfsClient(ipfs_node.api_url, timeout_s=120) as c:
            for name, (size, _) in FILES.items():
                got[name] = await c.add_bytes(det(size, name.encode()))
            got["tree"] = await c.add_directory(tmp_path / "ds", exclude_top=frozenset({"info"}))
            got["big"] = await c.add_directory(tmp_path / "big")
            got["block"] = await c.block_put(b"odf-node block")
            # The bytes come back as they went in (a multi-level DAG, through the RPC API).
            assert await c.cat(f"/ipfs/{got['many_chunks']}") == det(
                FILES["many_chunks"][0], b"many_chunks"
            )
        return got

    got = asyncio.run(go())
    assert {k: got[k] for k in FILES} == {k: cid for k, (_, cid) in FILES.items()}
    assert got["tree"] == TREE_NO_INFO
    assert got["big"] == DIR_3000_ENTRIES
    assert got["block"] == RAW_BLOCK
