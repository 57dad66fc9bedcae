"""Frozen in-toto/DSSE envelopes (``tests/golden/data/intoto_vectors.jsonl``).

A fixed node key (``p2p.vectors.NODE_SEED``), the fixed attestation and dispute of
``p2p/vectors.py`` and fixed block facts must give these exact envelope bytes, one JSON line
each: ed25519 signatures are deterministic and the payload and envelope are canonical JSON
(``p2p/intoto.py``). A change here changes every export: say so in ``docs/attestations.md``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey

from coordinator.multiformats import Multihash
from p2p import vectors
from p2p.intoto import BlockFacts, canonical_json, seal, statement, verify_envelope
from p2p.wire import sign_message

VECTORS = Path(__file__).parent / "data" / "intoto_vectors.jsonl"


def generate() -> str:
    """The vector file's text: the attestation's envelope, then the dispute's."""
    ds, node, _ = vectors.keys()
    facts = BlockFacts(
        inputs=((ds.dataset_id().as_did_str(), Multihash.sha3_256(b"input").to_multibase()),),
        logical_hash=Multihash.sha3_256(b"logical").to_multibase(),
    )
    keyid = node.dataset_id().as_did_key()
    lines = [
        seal(statement(sign_message(vectors.attestation(), node), facts), keyid, node.sign),
        seal(statement(sign_message(vectors.dispute(), node)), keyid, node.sign),
    ]
    return "".join(canonical_json(e).decode() + "\n" for e in lines)


def test_envelopes_are_frozen_byte_for_byte() -> None:
    assert VECTORS.read_text(encoding="utf-8") == generate()


def test_frozen_envelopes_verify_with_ours_and_securesystemslib() -> None:
    _, node, _ = vectors.keys()
    key = SSlibKey(
        keyid=node.dataset_id().as_did_key(),
        keytype="ed25519",
        scheme="ed25519",
        keyval={"public": node.public_key_bytes().hex()},
    )
    kinds = []
    for line in VECTORS.read_text(encoding="utf-8").splitlines():
        env = json.loads(line)
        kinds.append(verify_envelope(env).kind)
        Envelope.from_dict(copy.deepcopy(env)).verify([key], 1)
    assert kinds == ["attestation", "dispute"]


if __name__ == "__main__":  # regenerate: python tests/golden/test_intoto_vectors.py
    VECTORS.write_text(generate(), encoding="utf-8")
