"""Attestations and disputes as in-toto Statements v1 in DSSE envelopes (``docs/attestations.md``).

The gossip wire format (``p2p/wire.py``) is ours; a verifier outside odf-node knows in-toto and
DSSE. This module maps a signed :class:`~p2p.wire.Attestation` or :class:`~p2p.wire.Dispute`
onto an in-toto Statement v1 (in-toto/attestation ``spec/v1/statement.md``) whose subject is the
block (its sha3-256 digest) and whose predicate carries what the node concluded, seals it in a
DSSE envelope (secure-systems-lab/dsse ``envelope.md``, ``protocol.md``) signed by an ed25519 key,
and verifies such envelopes.

Pure: no IO, no clock; the key stays with the caller (``sign`` is a callable over the PAE).

Canonical bytes: the payload is the statement as compact JSON with sorted keys (UTF-8); the
envelope, as odf-node writes it, is compact JSON with sorted keys too. A verifier must not rely
on either (DSSE signs the payload bytes as they are), but they make exports reproducible: the
same statement and key always give the same envelope bytes (ed25519 signatures are
deterministic), which the golden test freezes.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from coordinator.errors import InvalidDatasetId, SignatureError
from coordinator.identity import DatasetId, verify_signature
from coordinator.multiformats import Multihash
from p2p.errors import EnvelopeError, WireDecodeError
from p2p.wire import Attestation, Checks, Dispute, Evidence, SignedMessage, decode

STATEMENT_TYPE: Final = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE: Final = "application/vnd.in-toto+json"
ATTESTATION_PREDICATE: Final = "https://odf-node.dev/attestation/v1"
"""Predicate type of a node's attestation of a head (``docs/attestations.md``)."""
DISPUTE_PREDICATE: Final = "https://odf-node.dev/dispute/v1"
"""Predicate type of a node's dispute of a block (``docs/attestations.md``)."""
DIGEST_ALGORITHM: Final = "sha3_256"
"""The in-toto DigestSet name of SHA3-256 (in-toto/attestation ``spec/v1/digest_set.md``)."""
MAX_ENVELOPE_BYTES: Final = 64 * 1024
"""An exported envelope is a few KiB; anything much larger is refused before decoding."""
_MAX_HASH_CHARS: Final = 128
"""A multibase hash or did:odf is under 100 characters."""
_MAX_INPUTS: Final = 1024
"""More inputs than any transform reads; an envelope is at most 64 KiB anyway."""

_CHECK_NAMES: Final = (
    (Checks.METADATA_INTEGRITY, "metadata-integrity"),
    (Checks.DATA_INTEGRITY, "data-integrity"),
    (Checks.REPLAY, "replay"),
)


@dataclass(frozen=True, slots=True)
class BlockFacts:
    """What the attested block itself says, read from the node's copy of the chain.

    The wire attestation signs the block's hash, not its contents; these facts are copied from
    the block whose digest is the statement's subject, so anyone holding that block can check
    them. ``inputs``: ``(dataset DID, block hash)`` of each input an ``ExecuteTransform`` read up
    to (``None``: the input had no block yet); ``logical_hash``: the new data slice's logical
    hash (``None``: the block adds no data).
    """

    inputs: tuple[tuple[str, str | None], ...] = ()
    logical_hash: str | None = None


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: the exact bytes an envelope's signature covers.

    ``"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body``, lengths as ASCII decimal byte counts.
    """
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(t), t, len(payload), payload)


def canonical_json(value: Any) -> bytes:
    """Compact JSON with sorted keys, UTF-8: the bytes odf-node signs and writes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def rfc3339(ns: int) -> str:
    """``ns`` since the Unix epoch as RFC 3339 UTC with nine fractional digits."""
    seconds, frac = divmod(ns, 1_000_000_000)
    stamp = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{frac:09d}Z"


def _checks(checks: Checks) -> list[str]:
    return [name for flag, name in _CHECK_NAMES if checks & flag]


def _evidence(e: Evidence) -> dict[str, Any]:
    return {
        "logicalHash": e.logical_hash.to_multibase() if e.logical_hash else None,
        "physicalHash": e.physical_hash.to_multibase() if e.physical_hash else None,
        "offsets": list(e.offsets) if e.offsets is not None else None,
        "watermark": rfc3339(e.watermark_ns) if e.watermark_ns is not None else None,
    }


def subject(dataset: DatasetId, block: Multihash) -> dict[str, Any]:
    """The statement's subject: the block, named ``<did:odf>@<block hash>``."""
    return {
        "name": f"{dataset.as_did_str()}@{block.to_multibase()}",
        "digest": {DIGEST_ALGORITHM: block.digest.hex()},
    }


def statement(signed: SignedMessage, facts: BlockFacts | None = None) -> dict[str, Any]:
    """The in-toto Statement v1 of a signed attestation or dispute.

    ``facts`` (attestations only) come from the node's copy of the block; ``None`` when it has
    none, and then ``inputs`` and ``logicalHash`` are ``null``. The predicate embeds the signed
    gossip envelope (``wireEnvelope``, base64) so the original signer's signature travels with it.

    Raises:
        EnvelopeError: the message is neither an attestation nor a dispute.
    """
    msg = signed.message
    wire = base64.b64encode(signed.envelope).decode("ascii")
    if isinstance(msg, Attestation):
        predicate: dict[str, Any] = {
            "dataset": msg.dataset.as_did_str(),
            "block": msg.head.to_multibase(),
            "node": msg.node.as_did_key(),
            "verdict": msg.verdict.name.lower(),
            "checks": _checks(msg.checks),
            "engine": {"name": msg.engine_name, "release": msg.engine_version},
            "inputs": (
                [{"dataset": d, "block": b} for d, b in facts.inputs] if facts is not None else None
            ),
            "logicalHash": facts.logical_hash if facts is not None else None,
            "locations": {
                "ipfs": list(msg.locations.ipfs_cids),
                "http": list(msg.locations.http_urls),
            },
            "issuedAt": rfc3339(msg.issued_at_ns),
            "wireEnvelope": wire,
        }
        return {
            "_type": STATEMENT_TYPE,
            "subject": [subject(msg.dataset, msg.head)],
            "predicateType": ATTESTATION_PREDICATE,
            "predicate": predicate,
        }
    if isinstance(msg, Dispute):
        return {
            "_type": STATEMENT_TYPE,
            "subject": [subject(msg.dataset, msg.block)],
            "predicateType": DISPUTE_PREDICATE,
            "predicate": {
                "dataset": msg.dataset.as_did_str(),
                "block": msg.block.to_multibase(),
                "node": msg.node.as_did_key(),
                "kind": msg.kind.name.lower(),
                "expected": _evidence(msg.expected),
                "computed": _evidence(msg.computed),
                "detail": msg.detail,
                "issuedAt": rfc3339(msg.issued_at_ns),
                "wireEnvelope": wire,
            },
        }
    raise EnvelopeError(f"a {msg.KIND.name.lower()} is not exported as an in-toto statement")


def seal(stmt: Mapping[str, Any], keyid: str, sign: Callable[[bytes], bytes]) -> dict[str, Any]:
    """A DSSE envelope of ``stmt``: ``sign`` (ed25519) signs the PAE; ``keyid`` names the key."""
    payload = canonical_json(stmt)
    sig = sign(pae(PAYLOAD_TYPE, payload))
    return {
        "payload": base64.b64encode(payload).decode("ascii"),
        "payloadType": PAYLOAD_TYPE,
        "signatures": [{"keyid": keyid, "sig": base64.b64encode(sig).decode("ascii")}],
    }


@dataclass(frozen=True, slots=True)
class VerifiedStatement:
    """What a checked envelope attests (see :func:`verify_envelope`).

    ``signer``: the envelope's key (a ``did:key``); ``node``: who made the attestation or dispute
    (the wire envelope's signer); ``relayed``: they differ (the signer exported what it received).
    ``predicate``: the checked fields only: those the wire envelope signs, and for an attestation
    ``inputs`` and ``logicalHash`` (signed by ``signer`` alone); no ``wireEnvelope``.
    """

    signer: str
    node: str
    relayed: bool
    kind: str
    predicate_type: str
    dataset: str
    block: str
    digest: str
    predicate: dict[str, Any] = field(repr=False)


def _b64(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise EnvelopeError(f"{what} must be a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        pass
    try:  # DSSE accepts the URL-safe alphabet, padded or not, as well
        return base64.b64decode(value + "=" * (-len(value) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError) as e:
        raise EnvelopeError(f"{what} is not base64") from e


def _field(obj: Mapping[str, Any], key: str, kind: type, what: str) -> Any:
    value = obj.get(key)
    if not isinstance(value, kind):
        raise EnvelopeError(f"{what}: {key!r} missing or not a {kind.__name__}")
    return value


def verify_envelope(envelope: Mapping[str, Any]) -> VerifiedStatement:
    """Check an exported envelope end to end; what it attests.

    In order: the envelope's shape and payload type; its one signature, by the ``did:key`` of
    its ``keyid``, over the PAE; the statement's type, its one subject with a sha3_256 digest,
    the predicate type; the embedded gossip envelope, decoded strictly with its own signature
    checked; and that the statement says what that signed envelope says (dataset, block,
    node, verdict or kind). ``inputs`` and ``logicalHash`` are the signer's reading of the block
    and are checked only against the block itself (``docs/attestations.md``). A field the
    statement v1 does not have (at the top or in the predicate) is refused: the envelope's
    signer could add anything to a peer's verdict. The returned predicate holds exactly the
    checked fields, without the embedded wire envelope.

    Raises:
        EnvelopeError: any check fails (the message says which).
    """
    keyid, payload = _signed_payload(envelope)
    stmt = _statement_of(payload)
    want, keys = _signed_predicate(stmt)
    out = {k: want[k] for k in keys}
    if stmt.predicate_type == ATTESTATION_PREDICATE:
        out["inputs"] = _checked_inputs(stmt.predicate.get("inputs"))
        out["logicalHash"] = _checked_hash(
            stmt.predicate.get("logicalHash"), "predicate.logicalHash"
        )
    node = str(want["node"])
    return VerifiedStatement(
        signer=keyid,
        node=node,
        relayed=node != keyid,
        kind="attestation" if stmt.predicate_type == ATTESTATION_PREDICATE else "dispute",
        predicate_type=stmt.predicate_type,
        dataset=str(want["dataset"]),
        block=str(want["block"]),
        digest=stmt.digest,
        predicate=out,
    )


def _signed_payload(envelope: Mapping[str, Any]) -> tuple[str, bytes]:
    """The DSSE layer: ``(keyid, payload)`` once the envelope's one signature verifies."""
    if not isinstance(envelope, Mapping):
        raise EnvelopeError("an envelope must be a JSON object")
    payload_type = _field(envelope, "payloadType", str, "envelope")
    if payload_type != PAYLOAD_TYPE:
        raise EnvelopeError(f"payloadType {payload_type!r} is not {PAYLOAD_TYPE!r}")
    payload = _b64(envelope.get("payload"), "payload")
    signatures = _field(envelope, "signatures", list, "envelope")
    if len(signatures) != 1 or not isinstance(signatures[0], Mapping):
        raise EnvelopeError(f"expected one signature, found {len(signatures)}")
    keyid = _field(signatures[0], "keyid", str, "signature")
    sig = _b64(signatures[0].get("sig"), "signature")
    try:
        key = DatasetId.from_did_key(keyid)
    except InvalidDatasetId as e:
        raise EnvelopeError(f"keyid {keyid!r} is not an ed25519 did:key: {e}") from e
    try:
        verify_signature(key, pae(payload_type, payload), sig)
    except SignatureError as e:
        raise EnvelopeError(f"the signature does not verify for {keyid}") from e
    return keyid, payload


@dataclass(frozen=True, slots=True)
class _Statement:
    """A payload read as an in-toto statement: its shape checked, nothing trusted yet."""

    body: dict[str, Any]
    subject: dict[str, Any]
    digest: str
    predicate_type: str
    predicate: dict[str, Any]


def _statement_of(payload: bytes) -> _Statement:
    """The statement layer: one subject with a sha3_256 digest and a known predicate type."""
    try:
        stmt = json.loads(payload)
    # RecursionError: a hostile payload nested deeper than the decoder recurses (no statement is).
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise EnvelopeError("the payload is not JSON") from e
    if not isinstance(stmt, dict) or stmt.get("_type") != STATEMENT_TYPE:
        raise EnvelopeError(f"the payload is not an in-toto statement ({STATEMENT_TYPE})")
    subjects = _field(stmt, "subject", list, "statement")
    if len(subjects) != 1 or not isinstance(subjects[0], dict):
        raise EnvelopeError(f"expected one subject, found {len(subjects)}")
    digests = _field(subjects[0], "digest", dict, "subject")
    digest = digests.get(DIGEST_ALGORITHM)
    if not isinstance(digest, str) or len(digest) != 64 or digest != digest.lower():
        raise EnvelopeError(f"the subject has no {DIGEST_ALGORITHM} digest (64 lowercase hex)")
    predicate_type = _field(stmt, "predicateType", str, "statement")
    if predicate_type not in (ATTESTATION_PREDICATE, DISPUTE_PREDICATE):
        raise EnvelopeError(f"unknown predicateType {predicate_type!r}")
    predicate = _field(stmt, "predicate", dict, "statement")
    return _Statement(stmt, subjects[0], digest, predicate_type, predicate)


def _signed_predicate(stmt: _Statement) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The wire layer: the predicate the embedded gossip envelope signs, and the keys the
    statement must match it on (it does, and has no field of its own)."""
    wire = _b64(stmt.predicate.get("wireEnvelope"), "predicate.wireEnvelope")
    try:
        signed = decode(wire)
    except (WireDecodeError, SignatureError) as e:
        raise EnvelopeError(f"the embedded wire envelope does not verify: {e}") from e
    if not isinstance(signed, SignedMessage):
        raise EnvelopeError("the embedded wire envelope is not an attestation or a dispute")
    expected = statement(signed)  # refuses announcements
    want: dict[str, Any] = expected["predicate"]
    if stmt.subject != expected["subject"][0] or stmt.predicate_type != expected["predicateType"]:
        raise EnvelopeError("the subject or predicate type differs from the signed wire envelope")
    keys: tuple[str, ...] = ("dataset", "block", "node", "issuedAt")
    keys += (
        ("verdict", "checks", "engine", "locations")
        if stmt.predicate_type == ATTESTATION_PREDICATE
        else ("kind", "expected", "computed", "detail")
    )
    for k in keys:
        if stmt.predicate.get(k) != want[k]:
            raise EnvelopeError(f"predicate.{k} differs from the signed wire envelope")
    # Whoever seals the statement signs all of it, and can add fields of its own to a peer's
    # verdict (a relay re-sealing what it received): a v1 statement has a fixed set of fields,
    # so any other is refused, and only the checked fields are returned (never the input's).
    extra = sorted(set(stmt.body) - set(expected))
    if extra:
        raise EnvelopeError(f"statement.{extra[0][:64]} is not a field of an in-toto statement v1")
    extra = sorted(set(stmt.predicate) - set(want))
    if extra:
        raise EnvelopeError(
            f"predicate.{extra[0][:64]} is not a field of {stmt.predicate_type} "
            "(added outside the signed wire envelope)"
        )
    return want, keys


def _checked_hash(value: Any, what: str) -> str | None:
    """A block or logical hash as the envelope's signer wrote it: null or a short string."""
    if value is None or (isinstance(value, str) and 0 < len(value) <= _MAX_HASH_CHARS):
        return value
    raise EnvelopeError(f"{what} must be null or a multibase hash")


def _checked_inputs(value: Any) -> list[dict[str, str | None]] | None:
    """``predicate.inputs`` of an attestation: null or ``[{"dataset", "block"}]``, nothing else
    (the signer's reading of the block, checked against the block itself, not the wire)."""
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > _MAX_INPUTS:
        raise EnvelopeError(f"predicate.inputs must be null or a list of at most {_MAX_INPUTS}")
    out: list[dict[str, str | None]] = []
    for i, item in enumerate(value):
        if not isinstance(item, dict) or set(item) != {"dataset", "block"}:
            raise EnvelopeError(f"predicate.inputs[{i}] must be exactly {{dataset, block}}")
        dataset = item["dataset"]
        if not isinstance(dataset, str) or not 0 < len(dataset) <= _MAX_HASH_CHARS:
            raise EnvelopeError(f"predicate.inputs[{i}].dataset must be a did:odf")
        out.append(
            {"dataset": dataset, "block": _checked_hash(item["block"], f"predicate.inputs[{i}]")}
        )
    return out


def parse_envelopes(text: str) -> list[Any]:
    """The envelopes of an export: one JSON object, a JSON array, or JSON lines.

    Raises:
        EnvelopeError: the text is none of these, or holds no envelope.
    """
    stripped = text.strip()
    if len(stripped.encode()) > 64 * MAX_ENVELOPE_BYTES:
        raise EnvelopeError("the file is too large to be an export of envelopes")
    # RecursionError: hostile input nested deeper than the decoder recurses (an export of
    # envelopes is four levels deep); refused like any other text that is not an export.
    try:
        value = json.loads(stripped)
    except RecursionError as e:
        raise EnvelopeError("not an export of envelopes: nested too deeply") from e
    except ValueError:
        try:
            value = [json.loads(line) for line in stripped.splitlines() if line.strip()]
        except (ValueError, RecursionError) as e:
            raise EnvelopeError("not JSON, a JSON array or JSON lines") from e
    items = value if isinstance(value, list) else [value]
    if not items:
        raise EnvelopeError("no envelope in the input")
    return items


__all__ = [
    "ATTESTATION_PREDICATE",
    "DIGEST_ALGORITHM",
    "DISPUTE_PREDICATE",
    "PAYLOAD_TYPE",
    "STATEMENT_TYPE",
    "BlockFacts",
    "VerifiedStatement",
    "canonical_json",
    "pae",
    "parse_envelopes",
    "rfc3339",
    "seal",
    "statement",
    "subject",
    "verify_envelope",
]
