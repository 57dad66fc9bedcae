"""In-toto/DSSE export of attestations and disputes (``p2p/intoto.py``, ``docs/attestations.md``).

Every envelope is checked twice: by our verifier and by a third party's, securesystemslib's DSSE
``Envelope.verify`` with an ed25519 ``SSlibKey`` (secure-systems-lab/securesystemslib
``securesystemslib/dsse.py``). A tampered envelope must fail both.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import SSlibKey

from coordinator.identity import DatasetId, PrivateKey
from coordinator.metadata import model as m
from coordinator.metadata.timestamp import Timestamp
from coordinator.multiformats import Multihash
from node.app.intoto import block_facts
from p2p import vectors
from p2p.errors import EnvelopeError
from p2p.intoto import (
    ATTESTATION_PREDICATE,
    DISPUTE_PREDICATE,
    PAYLOAD_TYPE,
    STATEMENT_TYPE,
    BlockFacts,
    canonical_json,
    pae,
    parse_envelopes,
    seal,
    statement,
    verify_envelope,
)
from p2p.wire import sign_message

DATASET_KEY, NODE_KEY, OTHER_KEY = vectors.keys()
NODE_ID = NODE_KEY.dataset_id().as_did_key()
FACTS = BlockFacts(
    inputs=((DATASET_KEY.dataset_id().as_did_str(), Multihash.sha3_256(b"in").to_multibase()),),
    logical_hash=Multihash.sha3_256(b"logical").to_multibase(),
)


def envelope(key: PrivateKey = NODE_KEY, signer: PrivateKey = NODE_KEY) -> dict[str, Any]:
    """The vector attestation made by ``signer``, sealed by ``key``."""
    att = vectors.attestation()
    if signer is not NODE_KEY:
        att = type(att)(
            **{**{f: getattr(att, f) for f in att.__slots__}, "node": signer.dataset_id()}
        )
    stmt = statement(sign_message(att, signer), FACTS)
    return seal(stmt, key.dataset_id().as_did_key(), key.sign)


def third_party(env: dict[str, Any], key: PrivateKey = NODE_KEY) -> None:
    """securesystemslib's DSSE verification with the ed25519 key behind ``key``'s did:key."""
    sslib_key = SSlibKey(
        keyid=key.dataset_id().as_did_key(),
        keytype="ed25519",
        scheme="ed25519",
        keyval={"public": key.public_key_bytes().hex()},
    )
    # from_dict rewrites the signature dicts it is given: hand it a copy.
    Envelope.from_dict(copy.deepcopy(env)).verify([sslib_key], 1)


def payload_of(env: dict[str, Any]) -> dict[str, Any]:
    return json.loads(base64.b64decode(env["payload"]))  # type: ignore[no-any-return]


def test_pae_is_the_dsse_spec_example() -> None:
    # secure-systems-lab/dsse protocol.md, "Test vectors".
    assert pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_an_attestation_is_an_in_toto_statement_of_the_block() -> None:
    env = envelope()
    assert env["payloadType"] == PAYLOAD_TYPE
    assert env["signatures"][0]["keyid"] == NODE_ID
    stmt = payload_of(env)
    att = vectors.attestation()
    assert stmt["_type"] == STATEMENT_TYPE and stmt["predicateType"] == ATTESTATION_PREDICATE
    assert stmt["subject"] == [
        {
            "name": f"{att.dataset.as_did_str()}@{att.head.to_multibase()}",
            "digest": {"sha3_256": att.head.digest.hex()},
        }
    ]
    p = stmt["predicate"]
    assert p["verdict"] == "verified" and p["node"] == NODE_ID
    assert p["checks"] == ["metadata-integrity", "data-integrity", "replay"]
    assert p["engine"] == {"name": "spark", "release": "3.5.0"}
    assert p["inputs"] == [{"dataset": FACTS.inputs[0][0], "block": FACTS.inputs[0][1]}]
    assert p["logicalHash"] == FACTS.logical_hash
    assert p["issuedAt"] == "2025-11-21T04:40:00.000000001Z"
    assert base64.b64decode(p["wireEnvelope"]) == sign_message(att, NODE_KEY).envelope
    # The payload is the canonical JSON of the statement.
    assert base64.b64decode(env["payload"]) == canonical_json(stmt)


def test_our_envelope_verifies_with_ours_and_with_securesystemslib() -> None:
    env = envelope()
    v = verify_envelope(env)
    assert (v.signer, v.node, v.relayed, v.kind) == (NODE_ID, NODE_ID, False, "attestation")
    assert v.digest == vectors.attestation().head.digest.hex()
    third_party(env)


def test_a_dispute_exports_and_verifies_too() -> None:
    signed = sign_message(vectors.dispute(), NODE_KEY)
    env = seal(statement(signed), NODE_ID, NODE_KEY.sign)
    stmt = payload_of(env)
    assert stmt["predicateType"] == DISPUTE_PREDICATE
    assert stmt["predicate"]["kind"] == vectors.dispute().kind.name.lower()
    assert stmt["subject"][0]["digest"]["sha3_256"] == vectors.dispute().block.digest.hex()
    v = verify_envelope(env)
    assert v.kind == "dispute" and not v.relayed
    third_party(env)


def _flip_payload(env: dict[str, Any]) -> dict[str, Any]:
    raw = bytearray(base64.b64decode(env["payload"]))
    i = raw.index(b'"verified"') + 1
    raw[i] ^= 0x01  # "verified" -> "werified": still JSON, different bytes
    return {**env, "payload": base64.b64encode(bytes(raw)).decode()}


def _flip_signature(env: dict[str, Any]) -> dict[str, Any]:
    sig = bytearray(base64.b64decode(env["signatures"][0]["sig"]))
    sig[10] ^= 0x01
    return {**env, "signatures": [{**env["signatures"][0], "sig": base64.b64encode(sig).decode()}]}


def _wrong_keyid(env: dict[str, Any]) -> dict[str, Any]:
    other = OTHER_KEY.dataset_id().as_did_key()
    return {**env, "signatures": [{**env["signatures"][0], "keyid": other}]}


@pytest.mark.parametrize("tamper", [_flip_payload, _flip_signature, _wrong_keyid])
def test_a_tampered_envelope_fails_both_verifiers(tamper: Any) -> None:
    bad = tamper(envelope())
    with pytest.raises(EnvelopeError, match="signature does not verify"):
        verify_envelope(bad)
    with pytest.raises(VerificationError):
        third_party(bad)  # the node's key, as a verifier who knows the node would use
    if tamper is _wrong_keyid:
        with pytest.raises(VerificationError):
            third_party(bad, OTHER_KEY)  # the key the keyid names did not sign


def test_a_relayed_attestation_names_both_nodes() -> None:
    env = envelope(key=NODE_KEY, signer=OTHER_KEY)
    v = verify_envelope(env)
    assert v.signer == NODE_ID and v.node == OTHER_KEY.dataset_id().as_did_key()
    assert v.relayed
    third_party(env)


def test_a_predicate_that_contradicts_the_signed_wire_envelope_is_refused() -> None:
    # The sealing node lies about a peer's verdict: the DSSE layer is intact (a generic DSSE
    # verifier accepts it), ours compares the predicate with the peer's signed message.
    att = vectors.attestation()
    signed = sign_message(
        type(att)(
            **{**{f: getattr(att, f) for f in att.__slots__}, "node": OTHER_KEY.dataset_id()}
        ),
        OTHER_KEY,
    )
    stmt = statement(signed, FACTS)
    stmt["predicate"]["verdict"] = "integrity_only"
    env = seal(stmt, NODE_ID, NODE_KEY.sign)
    third_party(env)
    with pytest.raises(EnvelopeError, match=r"predicate\.verdict differs"):
        verify_envelope(env)
    # A wire envelope whose own signature is bad is refused as well.
    stmt = statement(signed, FACTS)
    wire = bytearray(base64.b64decode(stmt["predicate"]["wireEnvelope"]))
    wire[-1] ^= 0x01
    stmt["predicate"]["wireEnvelope"] = base64.b64encode(bytes(wire)).decode()
    with pytest.raises(EnvelopeError, match="embedded wire envelope does not verify"):
        verify_envelope(seal(stmt, NODE_ID, NODE_KEY.sign))


def test_verify_returns_exactly_the_checked_fields() -> None:
    """What a verifier shows is rebuilt from what it checked, never copied from the input."""
    v = verify_envelope(envelope(key=OTHER_KEY, signer=NODE_KEY))
    stmt = statement(sign_message(vectors.attestation(), NODE_KEY), FACTS)
    assert v.predicate == {k: x for k, x in stmt["predicate"].items() if k != "wireEnvelope"}


@pytest.mark.parametrize(
    ("change", "match"),
    [
        # A relay re-sealing a peer's verdict adds fields of its own: DSSE-valid, refused.
        (lambda s: s["predicate"].update(trustedBy=["x"]), r"predicate\.trustedBy is not a field"),
        (lambda s: s.update(note="trust me"), r"statement\.note is not a field"),
        (lambda s: s["predicate"].update(inputs={"a": 1}), r"predicate\.inputs must be"),
        (
            lambda s: s["predicate"]["inputs"][0].update(extra=1),
            r"predicate\.inputs\[0\] must be exactly",
        ),
        (lambda s: s["predicate"].update(logicalHash=["x"]), r"predicate\.logicalHash must be"),
        (lambda s: s.update(_type="https://in-toto.io/Statement/v0.1"), "not an in-toto statement"),
        (lambda s: s["subject"][0].update(digest={"sha256": "00" * 32}), "no sha3_256 digest"),
        (lambda s: s.update(subject=[]), "expected one subject"),
        (lambda s: s.update(predicateType="https://example.org/x"), "unknown predicateType"),
        (lambda s: s["subject"][0].update(name="other@x"), "subject or predicate type differs"),
    ],
)
def test_a_statement_out_of_shape_is_refused_even_when_signed(change: Any, match: str) -> None:
    stmt = statement(sign_message(vectors.attestation(), NODE_KEY), FACTS)
    change(stmt)
    env = seal(stmt, NODE_ID, NODE_KEY.sign)
    with pytest.raises(EnvelopeError, match=match):
        verify_envelope(env)


def test_envelope_shape_errors() -> None:
    env = envelope()
    with pytest.raises(EnvelopeError, match="payloadType"):
        verify_envelope({**env, "payloadType": "application/json"})
    with pytest.raises(EnvelopeError, match="one signature"):
        verify_envelope({**env, "signatures": [*env["signatures"], *env["signatures"]]})
    with pytest.raises(EnvelopeError, match="not an ed25519 did:key"):
        verify_envelope({**env, "signatures": [{**env["signatures"][0], "keyid": "did:odf:fed01"}]})
    with pytest.raises(EnvelopeError, match="base64"):
        verify_envelope({**env, "payload": "***"})


def test_an_export_parses_as_one_object_an_array_or_json_lines() -> None:
    a, b = envelope(), envelope(signer=OTHER_KEY)
    assert parse_envelopes(json.dumps(a)) == [a]
    assert parse_envelopes(json.dumps([a, b])) == [a, b]
    lines = canonical_json(a).decode() + "\n" + canonical_json(b).decode() + "\n"
    assert parse_envelopes(lines) == [a, b]
    with pytest.raises(EnvelopeError, match="no envelope"):
        parse_envelopes("[]")
    with pytest.raises(EnvelopeError, match="not JSON"):
        parse_envelopes("{nope")
    # Hostile nesting is refused as input, not raised as a RecursionError (an internal error
    # at the RPC boundary): found by tests/fuzz/test_fuzz_rpc.py.
    with pytest.raises(EnvelopeError, match="nested too deeply"):
        parse_envelopes("[" * 200_000)


def test_block_facts_read_the_inputs_and_the_new_data() -> None:
    h = Multihash.sha3_256
    inp = DatasetId(b"\x07" * 32)
    event = m.ExecuteTransform(
        query_inputs=(
            m.ExecuteTransformInput(dataset_id=inp, new_block_hash=h(b"n"), prev_block_hash=None),
            m.ExecuteTransformInput(dataset_id=inp),
        ),
        new_data=m.DataSlice(
            logical_hash=h(b"l"),
            physical_hash=h(b"p"),
            offset_interval=m.OffsetInterval(start=0, end=9),
            size=10,
        ),
    )
    block = m.MetadataBlock(
        system_time=Timestamp.parse("2025-01-01T00:00:00Z"),
        prev_block_hash=h(b"prev"),
        sequence_number=3,
        event=event,
    )
    facts = block_facts(block)
    assert facts.inputs == ((inp.as_did_str(), h(b"n").to_multibase()), (inp.as_did_str(), None))
    assert facts.logical_hash == h(b"l").to_multibase()
    seed = m.MetadataBlock(
        system_time=Timestamp.parse("2025-01-01T00:00:00Z"),
        sequence_number=0,
        event=m.Seed(dataset_id=inp, dataset_kind=m.DatasetKind.ROOT),
    )
    assert block_facts(seed) == BlockFacts((), None)
