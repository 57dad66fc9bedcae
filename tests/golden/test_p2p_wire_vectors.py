"""Frozen hex vectors of the gossip wire format (``schemas/p2p_vectors.json``).

The stored file must equal what :mod:`p2p.vectors` generates byte for byte, every good vector must
decode, verify and re-encode to the same bytes, and every bad vector must fail with its recorded
error.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from coordinator.errors import SignatureError
from coordinator.identity import generate_private_key
from p2p import vectors
from p2p.errors import InvalidEquivocationProof, WireDecodeError
from p2p.wire import EquivocationProof, SignedMessage, content_id, decode, sign_message

VECTORS_PATH = Path(__file__).resolve().parents[2] / "schemas" / "p2p_vectors.json"
STORED: dict[str, Any] = json.loads(VECTORS_PATH.read_text(encoding="utf-8"))


def test_stored_vectors_match_generator_byte_for_byte() -> None:
    assert VECTORS_PATH.read_text(encoding="utf-8") == vectors.render()


def test_keys_are_the_documented_seeds() -> None:
    keys = STORED["keys"]
    assert keys["dataset_did"] == generate_private_key(b"\x01" * 32).dataset_id().as_did_str()
    assert keys["node_did"] == generate_private_key(b"\x02" * 32).dataset_id().as_did_str()
    assert keys["dataset_did"] == (
        "did:odf:fed018a88e3dd7409f195fd52db2d3cba5d72ca6709bf1d94121bf3748801b40f6f5c"
    )


@pytest.mark.parametrize("vec", STORED["good"], ids=lambda v: v["name"])
def test_good_vector_decodes_and_reencodes(vec: dict[str, str]) -> None:
    data = bytes.fromhex(vec["hex"])
    msg = decode(data)
    assert msg.envelope == data
    assert msg.content_id.hex() == vec["content_id"] == content_id(data).hex()
    if isinstance(msg, SignedMessage):
        signer = {
            STORED["keys"]["dataset_did"]: vectors.DATASET_SEED,
            STORED["keys"]["node_did"]: vectors.NODE_SEED,
            STORED["keys"]["other_did"]: vectors.OTHER_SEED,
        }[msg.signer().as_did_str()]
        assert sign_message(msg.message, generate_private_key(signer)).envelope == data
    else:
        assert isinstance(msg, EquivocationProof)
        assert EquivocationProof.make(msg.second, msg.first).envelope == data


@pytest.mark.parametrize("vec", STORED["bad"], ids=lambda v: v["name"])
def test_bad_vector_is_rejected(vec: dict[str, str]) -> None:
    data = bytes.fromhex(vec["hex"])
    expected = vec["error"]
    if expected.startswith("decode:"):
        with pytest.raises(WireDecodeError) as ei:
            decode(data)
        assert ei.value.reason == expected.removeprefix("decode:")
    elif expected == "signature":
        with pytest.raises(SignatureError):
            decode(data)
    else:
        assert expected == "proof"
        with pytest.raises(InvalidEquivocationProof):
            decode(data)


def test_announcement_vector_prefix() -> None:
    ann = bytes.fromhex(STORED["good"][0]["hex"])
    assert ann[:6] == b"ODFP\x01\x01"
    assert ann[6:8] == b"\xed\x01"


def test_document_hex_matches_frozen_vectors() -> None:
    doc = (VECTORS_PATH.parents[1] / "docs" / "p2p-wire-format.md").read_text(encoding="utf-8")
    found = re.findall(
        r"vector `(\w+)` \(content id `([0-9a-f]+)`\):\n\n```hex\n([0-9a-f\n]+)```", doc
    )
    good = {v["name"]: v for v in STORED["good"]}
    assert {name for name, _, _ in found} == set(good)
    for name, cid, hex_text in found:
        assert hex_text.replace("\n", "") == good[name]["hex"]
        assert cid == good[name]["content_id"]
    for vec in STORED["bad"]:
        assert f"| `{vec['name']}` | {len(vec['hex']) // 2} | `{vec['error']}` |" in doc
