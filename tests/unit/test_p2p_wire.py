"""Encoding rules of the gossip wire format: round trips, caps, strictness, proofs."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.errors import SignatureError
from coordinator.identity import generate_private_key
from coordinator.multiformats import Multicodec, Multihash
from p2p import vectors
from p2p.errors import InvalidEquivocationProof, WireDecodeError, WireEncodeError
from p2p.limits import MAX_MESSAGE_SIZE
from p2p.wire import (
    MAX_SIGNED_SIZE,
    Attestation,
    Checks,
    EquivocationProof,
    Evidence,
    FetchLocations,
    HeadAnnouncement,
    SignedMessage,
    conflicting,
    decode,
    decode_unverified,
    sign_message,
    signing_input,
    verify_equivocation_proof,
)

OWNER, NODE, OTHER = vectors.keys()


def ann(**changes: object) -> HeadAnnouncement:
    return dataclasses.replace(vectors.announcement(), **changes)  # type: ignore[arg-type]


def test_roundtrip_all_kinds() -> None:
    for msg, key in (
        (vectors.announcement(), OWNER),
        (vectors.attestation(), NODE),
        (vectors.dispute(), NODE),
    ):
        sm = sign_message(msg, key)
        back = decode(sm.envelope)
        assert isinstance(back, SignedMessage)
        assert back.message == msg and back.envelope == sm.envelope
        assert back.signer() == msg.signer()


def test_signature_is_domain_separated() -> None:
    msg = vectors.announcement()
    si = signing_input(msg)
    assert si.startswith(b"odf-node/head-announcement/v1\x00ODFP\x01\x01")
    sm = sign_message(msg, OWNER)
    assert sm.envelope[:-64] == si[len(b"odf-node/head-announcement/v1\x00") :]


@pytest.mark.parametrize(
    "changes",
    [
        {"nonce": b"\x00" * 15},
        {"head": Multihash(Multicodec.SHA2_256, b"\x00" * 32)},
        {"prev_head": Multihash(Multicodec.ARROW0_SHA3_256, b"\x00" * 32)},
        {"sequence": -1},
        {"epoch": 1 << 64},
        {"locations": FetchLocations(ipfs_cids=("a",) * 5)},
        {"locations": FetchLocations(ipfs_cids=("bafy/../x",))},
        {"locations": FetchLocations(http_urls=("ftp://x",))},
        {"locations": FetchLocations(http_urls=("https://a b",))},
        {"locations": FetchLocations(http_urls=("https://" + "a" * 600,))},
    ],
)
def test_encode_rejects_invalid_fields(changes: dict[str, object]) -> None:
    with pytest.raises(WireEncodeError):
        sign_message(ann(**changes), OWNER)


def test_signed_size_cap_keeps_proofs_under_message_cap() -> None:
    urls = tuple("https://example.org/" + "x" * 480 + str(i) for i in range(4))
    with pytest.raises(WireEncodeError):
        sign_message(ann(locations=FetchLocations(http_urls=urls)), OWNER)
    big = tuple("https://e.org/" + "x" * 400 + str(i) for i in range(4))
    a = sign_message(ann(locations=FetchLocations(http_urls=big)), OWNER)
    b = sign_message(
        ann(
            locations=FetchLocations(http_urls=big),
            head=Multihash.sha3_256(b"x"),
        ),
        OWNER,
    )
    assert len(a.envelope) <= MAX_SIGNED_SIZE
    assert len(EquivocationProof.make(a, b).envelope) <= MAX_MESSAGE_SIZE


def test_attestation_rejects_unknown_check_bits_and_verdicts() -> None:
    att = vectors.attestation()
    env = bytearray(sign_message(att, NODE).envelope)
    verdict_at = 6 + 34 + 34 + 1 + 34
    env[verdict_at] = 9
    with pytest.raises(WireDecodeError) as ei:
        decode_unverified(bytes(env))
    assert ei.value.reason == "unknown-enum"
    with pytest.raises(WireEncodeError):
        sign_message(dataclasses.replace(att, checks=Checks(8)), NODE)
    env = bytearray(sign_message(att, NODE).envelope)
    checks_at = verdict_at + 1 + 2 + len("spark") + 2 + len("3.5.0")
    env[checks_at] = 0x0F
    with pytest.raises(WireDecodeError) as ei:
        decode_unverified(bytes(env))
    assert ei.value.reason == "unknown-flags"


def test_bad_utf8_and_non_canonical_multihash_are_rejected() -> None:
    att = sign_message(vectors.attestation(), NODE).envelope
    name_at = 6 + 34 + 34 + 1 + 34 + 1 + 2
    bad = att[:name_at] + b"\xff" + att[name_at + 1 :]
    with pytest.raises(WireDecodeError) as ei:
        decode_unverified(bad)
    assert ei.value.reason == "bad-utf8"
    # Dispute evidence accepts any supported multihash, but only with minimal varints.
    dis = sign_message(vectors.dispute(), NODE).envelope
    canonical = Multihash(Multicodec.ARROW0_SHA3_256, b"\x11" * 32).to_bytes()
    at = dis.index(canonical)
    padded = bytes([canonical[0] | 0x80, canonical[1] | 0x80, canonical[2] | 0x80, 0x00])
    non_canonical = padded + canonical[3:]
    tampered = dis[: at - 1] + bytes([len(non_canonical)]) + non_canonical
    tampered += dis[at + len(canonical) :]
    with pytest.raises(WireDecodeError) as ei:
        decode_unverified(tampered)
    assert ei.value.reason in {"non-canonical", "bad-multihash"}


def test_evidence_rejects_inverted_interval() -> None:
    with pytest.raises(WireEncodeError):
        sign_message(
            dataclasses.replace(vectors.dispute(), expected=Evidence(offsets=(5, 1))), NODE
        )


def _pair(**b_changes: object) -> tuple[SignedMessage, SignedMessage]:
    a = sign_message(ann(), OWNER)
    b = sign_message(ann(head=Multihash.sha3_256(b"fork"), **b_changes), OWNER)
    return a, b


def test_equivocation_proof_checks() -> None:
    a, b = _pair()
    proof = EquivocationProof.make(b, a)
    assert verify_equivocation_proof(proof) == OWNER.dataset_id()
    assert decode(proof.envelope) == proof
    assert conflicting(a.message, b.message)  # type: ignore[arg-type]
    for changes in ({"sequence": 8}, {"epoch": 1}):
        a2, b2 = _pair(**changes)
        with pytest.raises(InvalidEquivocationProof):
            verify_equivocation_proof(EquivocationProof.make(a2, b2))
    # forged second announcement
    forged = sign_message(ann(head=Multihash.sha3_256(b"fork")), OTHER)
    with pytest.raises(InvalidEquivocationProof):
        verify_equivocation_proof(EquivocationProof.make(a, forged))
    # two announcements of different datasets
    other_ds = sign_message(
        ann(dataset=OTHER.dataset_id(), head=Multihash.sha3_256(b"fork")), OTHER
    )
    with pytest.raises(InvalidEquivocationProof):
        verify_equivocation_proof(EquivocationProof.make(a, other_ds))
    # an attestation is no announcement
    att = sign_message(vectors.attestation(), NODE)
    with pytest.raises(InvalidEquivocationProof):
        verify_equivocation_proof(EquivocationProof.make(a, att))
    with pytest.raises(InvalidEquivocationProof):
        verify_equivocation_proof(b"garbage")
    with pytest.raises(InvalidEquivocationProof):
        verify_equivocation_proof(a.envelope)


def test_nested_proof_is_rejected() -> None:
    a, b = _pair()
    proof = EquivocationProof.make(a, b).envelope
    nested = (
        proof[:6]
        + len(proof).to_bytes(2, "big")
        + proof
        + len(a.envelope).to_bytes(2, "big")
        + a.envelope
    )
    with pytest.raises(WireDecodeError) as ei:
        decode_unverified(nested)
    assert ei.value.reason == "unexpected-kind"


def test_decode_verifies_signature() -> None:
    with pytest.raises(SignatureError):
        decode(sign_message(vectors.announcement(), NODE).envelope)


@settings(max_examples=60, deadline=None)
@given(
    seq=st.integers(0, (1 << 64) - 1),
    epoch=st.integers(0, (1 << 64) - 1),
    issued=st.integers(0, (1 << 64) - 1),
    nonce=st.binary(min_size=16, max_size=16),
    cids=st.lists(st.text("abcXYZ019", min_size=1, max_size=20), max_size=4),
    has_prev=st.booleans(),
)
def test_roundtrip_property(
    seq: int, epoch: int, issued: int, nonce: bytes, cids: list[str], has_prev: bool
) -> None:
    msg = ann(
        sequence=seq,
        epoch=epoch,
        issued_at_ns=issued,
        nonce=nonce,
        prev_head=Multihash.sha3_256(b"p") if has_prev else None,
        locations=FetchLocations(ipfs_cids=tuple(cids)),
    )
    sm = sign_message(msg, OWNER)
    assert decode(sm.envelope) == sm
    # every strict prefix is rejected
    with pytest.raises(WireDecodeError):
        decode_unverified(sm.envelope[: len(sm.envelope) // 2])


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=300))
def test_random_bytes_never_crash(data: bytes) -> None:
    try:
        decode(b"ODFP\x01" + data)
    except (WireDecodeError, SignatureError, InvalidEquivocationProof):
        pass


def test_attestation_type_is_exported() -> None:
    assert Attestation.KIND == 2
    assert generate_private_key(b"\x02" * 32).dataset_id() == NODE.dataset_id()
