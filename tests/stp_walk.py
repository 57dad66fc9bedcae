"""A plain Simple Transfer Protocol walk, as a kamu client reads a dataset over HTTP.

``python tests/stp_walk.py BASE_URL`` (``BASE_URL`` = ``http://host:port/<dataset>``): ``GET
refs/head``, then ``GET blocks/<hash>`` back along ``prev_block_hash`` to the seed block,
checking each block's sha3-256 multihash, and ``GET data/<hash>`` / ``checkpoints/<hash>`` for
every slice and checkpoint the blocks name, checking their physical hashes. Prints a JSON
summary. Only ``urllib`` and the block decoder; no part of the node's pull code.
"""

from __future__ import annotations

import json
import sys
import urllib.request

from coordinator.metadata.flatbuffers_serde import block_hash, decode_block
from coordinator.multiformats import Multihash


def _get(url: str) -> bytes:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=30) as r:
        body: bytes = r.read()
        return body


def walk(base: str) -> dict[str, object]:
    """Walk the chain at ``base``; raise on any hash mismatch."""
    head = _get(f"{base}/refs/head").decode().strip()
    blocks, objects, nbytes = [], 0, 0
    h: Multihash | None = Multihash.from_multibase(head)
    while h is not None:
        raw = _get(f"{base}/blocks/{h.to_multibase()}")
        if block_hash(raw) != h:
            raise AssertionError(f"block {h} does not hash to its name")
        block = decode_block(raw)
        blocks.append(str(h))
        event = block.event
        for attr, kind in (("new_data", "data"), ("new_checkpoint", "checkpoints")):
            obj = getattr(event, attr, None)
            if obj is None:
                continue
            body = _get(f"{base}/{kind}/{obj.physical_hash.to_multibase()}")
            if Multihash.sha3_256(body) != obj.physical_hash or len(body) != obj.size:
                raise AssertionError(f"{kind} object {obj.physical_hash} does not match")
            objects += 1
            nbytes += len(body)
        h = block.prev_block_hash
    return {"head": head, "blocks": blocks, "objects": objects, "bytes": nbytes}


if __name__ == "__main__":
    print(json.dumps(walk(sys.argv[1].rstrip("/"))))
