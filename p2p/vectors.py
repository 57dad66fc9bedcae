"""Deterministic test vectors of the gossip wire format (frozen in ``schemas/p2p_vectors.json``).

Run ``python -m p2p.vectors`` to print the JSON; the golden test compares the stored file with
this output byte for byte and checks every vector against the decoder. Changing the output of this
module is a wire-format change: bump ``WIRE_VERSION`` instead.
"""

from __future__ import annotations

import json
from typing import Any

from coordinator.identity import PrivateKey, generate_private_key
from coordinator.multiformats import Multicodec, Multihash
from p2p.wire import (
    DOMAINS,
    Attestation,
    Checks,
    Dispute,
    DisputeKind,
    EquivocationProof,
    Evidence,
    FetchLocations,
    HeadAnnouncement,
    KeyInception,
    KeyRevocation,
    KeyRotation,
    MessageKind,
    Observation,
    SignedMessage,
    Verdict,
    next_key_digest,
    sign_message,
)

DATASET_SEED = b"\x01" * 32
NODE_SEED = b"\x02" * 32
OTHER_SEED = b"\x03" * 32
ISSUED_AT_NS = 1_763_700_000_000_000_000


def keys() -> tuple[PrivateKey, PrivateKey, PrivateKey]:
    """``(dataset key, node key, unrelated key)`` from fixed seeds."""
    return (
        generate_private_key(DATASET_SEED),
        generate_private_key(NODE_SEED),
        generate_private_key(OTHER_SEED),
    )


def _h(label: str) -> Multihash:
    return Multihash.sha3_256(label.encode())


def announcement(
    seq: int = 7, head: str = "head-7", epoch: int = 0, prev: str | None = "head-6"
) -> HeadAnnouncement:
    """A deterministic announcement by the dataset key."""
    ds, _, _ = keys()
    return HeadAnnouncement(
        dataset=ds.dataset_id(),
        head=_h(head),
        sequence=seq,
        prev_head=_h(prev) if prev is not None else None,
        epoch=epoch,
        locations=FetchLocations(
            ipfs_cids=("bafybeigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi",),
            http_urls=("https://example.org/odf/ds", "http://127.0.0.1:8080/ds"),
        ),
        issued_at_ns=ISSUED_AT_NS,
        nonce=bytes(range(16)),
    )


def attestation() -> Attestation:
    """A deterministic attestation by the node key."""
    ds, node, _ = keys()
    return Attestation(
        node=node.dataset_id(),
        dataset=ds.dataset_id(),
        head=_h("head-7"),
        verdict=Verdict.VERIFIED,
        engine_name="spark",
        engine_version="3.5.0",
        checks=Checks.METADATA_INTEGRITY | Checks.DATA_INTEGRITY | Checks.REPLAY,
        locations=FetchLocations(http_urls=("https://node.example.org/ds",)),
        issued_at_ns=ISSUED_AT_NS + 1,
        nonce=bytes([0xA5]) * 16,
    )


def dispute() -> Dispute:
    """A deterministic dispute by the node key."""
    ds, node, _ = keys()
    return Dispute(
        node=node.dataset_id(),
        dataset=ds.dataset_id(),
        block=_h("head-7"),
        kind=DisputeKind.REPLAY_MISMATCH,
        expected=Evidence(
            logical_hash=Multihash(Multicodec.ARROW0_SHA3_256, b"\x11" * 32),
            offsets=(0, 99),
            watermark_ns=1_700_000_000_000_000_000,
        ),
        computed=Evidence(
            logical_hash=Multihash(Multicodec.ARROW0_SHA3_256, b"\x22" * 32),
            offsets=(0, 98),
            watermark_ns=-1,
        ),
        detail="slice 3: logical hash differs",
        issued_at_ns=ISSUED_AT_NS + 2,
        nonce=bytes([0x5A]) * 16,
    )


def observation(head: str = "head-7", sequence: int = 7) -> Observation:
    """A deterministic observation by the node key (a source showed ``head``)."""
    ds, node, _ = keys()
    return Observation(
        node=node.dataset_id(),
        dataset=ds.dataset_id(),
        source="https://data.example.org/odf/ds",
        head=_h(head),
        sequence=sequence,
        locations=FetchLocations(http_urls=("https://node.example.org/ds",)),
        issued_at_ns=ISSUED_AT_NS + 3,
    )


def key_rotation() -> SignedMessage:
    """A deterministic version 1 rotation (no commitment) of the node key to the "other" key
    (signed by both): the format before pre-rotation, still read."""
    _, node, other = keys()
    return KeyRotation.make(node, other, ISSUED_AT_NS + 3, bytes([0x3C]) * 16, None)


def key_revocation() -> SignedMessage:
    """A deterministic version 1 revocation of the node key, by itself."""
    _, node, _ = keys()
    return sign_message(
        KeyRevocation(node.dataset_id(), ISSUED_AT_NS + 4, bytes([0xC3]) * 16, version=1), node
    )


def key_rotation_v2() -> SignedMessage:
    """A deterministic version 2 rotation of the node key to the "other" key, committing to
    the dataset key as the one after it (pre-rotation)."""
    ds, node, other = keys()
    return KeyRotation.make(
        node, other, ISSUED_AT_NS + 5, bytes([0x5C]) * 16, next_key_digest(ds.dataset_id())
    )


def key_revocation_by_next_key() -> SignedMessage:
    """A deterministic version 2 revocation of the node key, signed by the "other" key (its
    committed next key in :func:`key_rotation_v2`'s chain when the node key is that chain's
    new key)."""
    _, node, other = keys()
    msg = KeyRevocation(
        node.dataset_id(), ISSUED_AT_NS + 6, bytes([0xC5]) * 16, by=other.dataset_id()
    )
    return sign_message(msg, other)


def key_inception() -> SignedMessage:
    """A deterministic inception of the node key (signed by it), committing to the "other" key
    as its next one (the form :func:`key_rotation_v2` commits with)."""
    _, node, other = keys()
    msg = KeyInception(
        node.dataset_id(), next_key_digest(other.dataset_id()), ISSUED_AT_NS + 7, bytes([0x1C]) * 16
    )
    return sign_message(msg, node)


def _forge(msg: HeadAnnouncement, domain_kind: MessageKind) -> bytes:
    """Sign ``msg`` with the dataset key but under another kind's domain string."""
    ds, _, _ = keys()
    good = sign_message(msg, ds)
    unsigned = good.envelope[:-64]
    return unsigned + ds.sign(DOMAINS[domain_kind] + unsigned)


# A bad vector: (name, envelope bytes, the error the decoder must report).
BadVector = tuple[str, bytes, str]


def build() -> dict[str, Any]:
    """All vectors as a JSON-ready dict (hex strings)."""
    ds, node, other = keys()
    good = _good_messages(ds, node)
    return {
        "format": "odf-node p2p wire format v1 (docs/p2p-wire-format.md)",
        "keys": {
            "dataset_seed": DATASET_SEED.hex(),
            "dataset_did": ds.dataset_id().as_did_str(),
            "node_seed": NODE_SEED.hex(),
            "node_did": node.dataset_id().as_did_str(),
            "other_seed": OTHER_SEED.hex(),
            "other_did": other.dataset_id().as_did_str(),
        },
        "good": [
            {"name": name, "hex": m.envelope.hex(), "content_id": m.content_id.hex()}
            for name, m in good.items()
        ],
        "bad": [{"name": n, "hex": b.hex(), "error": e} for n, b, e in _bad_vectors(good)],
    }


def _good_messages(
    ds: PrivateKey, node: PrivateKey
) -> dict[str, SignedMessage | EquivocationProof]:
    """The valid messages, by vector name, in the order the stored file lists them."""
    ann = sign_message(announcement(), ds)
    ann_min = sign_message(
        HeadAnnouncement(
            dataset=ds.dataset_id(),
            head=_h("head-0"),
            sequence=0,
            prev_head=None,
            epoch=0,
            locations=FetchLocations(),
            issued_at_ns=0,
            nonce=b"\x00" * 16,
        ),
        ds,
    )
    fork = sign_message(announcement(head="head-7-fork"), ds)
    return {
        "announcement": ann,
        "announcement_minimal": ann_min,
        "attestation": sign_message(attestation(), node),
        "dispute": sign_message(dispute(), node),
        "equivocation_proof": EquivocationProof.make(ann, fork),
        "observation": sign_message(observation(), node),
        "key_rotation": key_rotation(),
        "key_revocation": key_revocation(),
        "key_rotation_v2": key_rotation_v2(),
        "key_revocation_by_next_key": key_revocation_by_next_key(),
        "key_inception": key_inception(),
    }


def _bad_vectors(good: dict[str, SignedMessage | EquivocationProof]) -> list[BadVector]:
    """Every bad vector, each group derived from the good message it corrupts."""

    def signed(name: str) -> SignedMessage:
        msg = good[name]
        assert isinstance(msg, SignedMessage)
        return msg

    proof = good["equivocation_proof"]
    assert isinstance(proof, EquivocationProof)
    return [
        *_bad_announcements(signed("announcement"), proof),
        *_bad_observations(signed("observation")),
        *_bad_rotations(signed("key_rotation")),
        ("key_revocation_by_other_key", _resigned(signed("key_revocation"), "other"), "signature"),
        *_bad_rotations_v2(signed("key_rotation_v2")),
        *_bad_revocations_by_next_key(signed("key_revocation_by_next_key")),
        *_bad_inceptions(signed("key_inception")),
    ]


def _resigned(msg: SignedMessage, signer: str) -> bytes:
    """``msg``'s record signed again by the ``"dataset"``, ``"node"`` or ``"other"`` key."""
    ds, node, other = keys()
    key = {"dataset": ds, "node": node, "other": other}[signer]
    return sign_message(msg.message, key).envelope


def _bad_announcements(ann: SignedMessage, proof: EquivocationProof) -> list[BadVector]:
    """Malformed or wrongly signed announcements and equivocation proofs."""
    ds, _, other = keys()
    env = ann.envelope
    prev_tag_at = 6 + 34 + 1 + 34 + 8  # header, dataset, head len+hash, sequence
    bad_tag = bytearray(env)
    bad_tag[prev_tag_at] = 2
    first_len = 2 + len(proof.first.envelope)
    swapped = (
        proof.envelope[:6] + proof.envelope[6 + first_len :] + proof.envelope[6 : 6 + first_len]
    )
    same_head = sign_message(
        HeadAnnouncement(**{**_fields(announcement()), "nonce": b"\xff" * 16}), ds
    )
    no_conflict = EquivocationProof.make(ann, same_head)
    return [
        ("empty", b"", "decode:truncated"),
        ("garbage", b"not an odf gossip message at all", "decode:bad-magic"),
        ("truncated", env[:-1], "decode:truncated"),
        ("truncated_header", env[:5], "decode:truncated"),
        ("trailing_byte", env + b"\x00", "decode:trailing-bytes"),
        ("unknown_version", env[:4] + b"\x02" + env[5:], "decode:unknown-version"),
        ("unknown_kind", env[:5] + b"\x09" + env[6:], "decode:unknown-kind"),
        ("oversized", env + b"\x00" * (4097 - len(env)), "decode:oversized"),
        ("bad_option_tag", bytes(bad_tag), "decode:bad-option-tag"),
        ("bad_did_prefix", env[:6] + b"\xee" + env[7:], "decode:bad-did"),
        ("head_not_sha3", env[:41] + b"\x12" + env[42:], "decode:bad-multihash"),
        ("url_not_http", env.replace(b"https://", b"httpx://"), "decode:bad-url"),
        ("wrong_key", sign_message(announcement(), other).envelope, "signature"),
        ("tampered_sequence", env[:82] + b"\x08" + env[83:], "signature"),
        ("cross_domain_signature", _forge(announcement(), MessageKind.ATTESTATION), "signature"),
        (
            "attestation_signed_by_dataset_key",
            sign_message(attestation(), ds).envelope,
            "signature",
        ),
        ("proof_non_canonical_order", swapped, "decode:non-canonical"),
        ("proof_not_conflicting", no_conflict.envelope, "proof"),
    ]


def _bad_observations(obs: SignedMessage) -> list[BadVector]:
    """Observations with an unknown version, a non-URL source or the wrong signer."""
    ds, _, _ = keys()
    env = obs.envelope
    # The body starts with the observation's own version byte, right after the header.
    obs_v2 = env[:6] + b"\x02" + env[7:]
    src_at = env.index(b"https://data.")
    return [
        ("observation_unknown_version", obs_v2, "decode:unknown-version"),
        (
            "observation_source_not_url",
            env[:src_at] + b"file:" + env[src_at + 5 :],
            "decode:bad-url",
        ),
        (
            "observation_signed_by_dataset_key",
            sign_message(observation(), ds).envelope,
            "signature",
        ),
    ]


def _bad_rotations(rot: SignedMessage) -> list[BadVector]:
    """Version 1 rotations whose old key's signature, keys or record version are wrong."""
    _, _, other = keys()
    rot_msg = rot.message
    assert isinstance(rot_msg, KeyRotation)
    # The old key's signature is the body's last 64 bytes, before the envelope's own.
    rot_bad_old = bytearray(rot.envelope)
    rot_bad_old[-65] ^= 0x01
    # The same record with the old key's signature altered, signed again by the new key.
    rot_bad_old_msg = KeyRotation(
        rot_msg.old,
        rot_msg.new,
        rot_msg.issued_at_ns,
        rot_msg.nonce,
        rot_msg.old_signature[:-1] + bytes([rot_msg.old_signature[-1] ^ 0x01]),
        version=1,
    )
    rot_forged_old = sign_message(
        KeyRotation(
            rot_msg.old, rot_msg.new, rot_msg.issued_at_ns, rot_msg.nonce, bytes(64), version=1
        ),
        other,
    )
    rot_same = bytearray(rot.envelope)
    rot_same[7 + 34 : 7 + 68] = rot.envelope[7 : 7 + 34]  # new := old
    return [
        # The new key's signature still verifies over the altered body: only the old key's fails.
        (
            "key_rotation_bad_old_signature",
            sign_message(rot_bad_old_msg, other).envelope,
            "signature",
        ),
        ("key_rotation_without_old_key", rot_forged_old.envelope, "signature"),
        ("key_rotation_tampered", bytes(rot_bad_old), "signature"),
        ("key_rotation_same_key", bytes(rot_same), "decode:same-key"),
        (
            "key_rotation_unknown_record_version",
            rot.envelope[:6] + b"\x03" + rot.envelope[7:],
            "decode:unknown-version",
        ),
    ]


def _bad_rotations_v2(rot2: SignedMessage) -> list[BadVector]:
    """A version 2 rotation misread as version 1, and one with its commitment altered."""
    env = rot2.envelope
    # A version 2 rotation read as version 1 (the commitment's bytes then shift every field).
    rot2_as_v1 = env[:6] + b"\x01" + env[7:]
    return [
        ("key_rotation_v2_read_as_v1", rot2_as_v1, "decode:trailing-bytes"),
        (
            "key_rotation_v2_tampered_next_digest",
            env[: 7 + 68] + bytes([env[7 + 68] ^ 1]) + env[7 + 69 :],
            "signature",
        ),
    ]


def _bad_revocations_by_next_key(rev_next: SignedMessage) -> list[BadVector]:
    """Version 2 revocations signed by the revoked key, or naming it as their own signer."""
    rev_self_named = bytearray(rev_next.envelope)
    rev_self_named[7 + 34 + 1 : 7 + 34 + 1 + 34] = rev_next.envelope[7 : 7 + 34]  # by := node
    return [
        (
            "key_revocation_by_next_key_signed_by_revoked_key",
            _resigned(rev_next, "node"),
            "signature",
        ),
        ("key_revocation_names_itself_as_signer", bytes(rev_self_named), "decode:same-key"),
    ]


def _bad_inceptions(inc: SignedMessage) -> list[BadVector]:
    """Inceptions with the wrong signer, an altered commitment, version or domain."""
    _, node, _ = keys()
    env = inc.envelope
    return [
        # Only the committing key can sign its inception (a thief holding another key cannot
        # give the node key a commitment of its choosing).
        ("key_inception_signed_by_other_key", _resigned(inc, "other"), "signature"),
        (
            "key_inception_tampered_next_digest",
            env[: 7 + 34] + bytes([env[7 + 34] ^ 1]) + env[7 + 35 :],
            "signature",
        ),
        (
            "key_inception_unknown_version",
            env[:6] + b"\x02" + env[7:],
            "decode:unknown-version",
        ),
        ("key_inception_truncated", env[:-65] + env[-64:], "decode:truncated"),
        (
            "key_inception_cross_domain_signature",
            env[:-64] + node.sign(DOMAINS[MessageKind.KEY_ROTATION] + env[:-64]),
            "signature",
        ),
    ]


def _fields(a: HeadAnnouncement) -> dict[str, Any]:
    return {f: getattr(a, f) for f in HeadAnnouncement.__dataclass_fields__}


def render() -> str:
    """The canonical JSON text of :func:`build` (sorted keys, 2-space indent, final newline)."""
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    print(render(), end="")
