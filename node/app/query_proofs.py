"""kamu's verifiable-query commitments, byte for byte: canonical JSON, hashes, proofs, checks.

A kamu node answering ``/query`` with ``include: ["Proof"]`` commits to its answer
(kamu-cli ``src/adapter/http/src/data/query_handler.rs``):

* ``commitment.inputHash``, ``outputHash`` and ``subQueriesHash`` are the sha3-256 multihashes
  (``f1620`` + hex) of the canonical JSON of the response's ``input``, ``output`` and
  ``subQueries`` (``[]`` while no node delegates sub-queries);
* ``proof`` is ``{"type": "Ed25519Signature2020", "verificationMethod": <the node's did:key>,
  "proofValue": <multibase base64url of the ed25519 signature over the canonical JSON of the
  commitment>}``.

Canonical JSON is the ``canonical_json`` 0.7 crate (mozilla-services/canonicaljson-rs) over
serde_json values: object keys sorted by code point, no whitespace, every character outside
printable ASCII written as a ``\\u`` escape (lower-case hex; astral characters as a surrogate
pair), and floats in normalised scientific notation (``2537.07`` -> ``2.53707E3``, ``100.0``
-> ``1E2``). :func:`canonical_json` reproduces it; a plain ``json.dumps(sort_keys=True)``
does not (floats and non-ASCII differ), so the two must not be mixed.

The key signs only these commitment documents (they start with ``{"inputHash"``), which no
gossip signing input (``odf-node/<kind>/v1``) nor DSSE encoding (``DSSEv1``) starts with: the
signature cannot be replayed as another kind of statement (see ``VerifyPipeline.seal``).

:func:`check_commitment` is ``/verify``'s first step (kamu-cli
``src/adapter/http/src/data/verify_handler.rs``): the request's own hashes and signature,
without reading any data; the error builders give the exact shapes and messages of kamu's
``verify_types.rs``. Pure: no I/O.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from coordinator.errors import OdfNodeError
from coordinator.identity import DatasetId
from coordinator.identity.keys import verify_signature
from coordinator.multiformats import Multihash

PROOF_TYPE: Final = "Ed25519Signature2020"
INCLUDE_ORDER: Final = ("Input", "Proof", "Schema", "Attestations")
"""kamu serialises ``include`` as a ``BTreeSet`` of its enum (declaration order: Input, Proof,
Schema); our extension ``Attestations`` sorts after them."""

_encode_ascii: Final = json.encoder.encode_basestring_ascii
_I64_MIN: Final = -(2**63)
_U64_MAX: Final = 2**64 - 1
_SHORT_ESCAPES: Final = {
    '"': '\\"',
    "\\": "\\\\",
    "\n": "\\n",
    "\t": "\\t",
    "\r": "\\r",
    "\b": "\\b",
    "\f": "\\f",
}


class CommitmentError(OdfNodeError):
    """A value cannot be put in canonical JSON (a NaN, an infinity, a non-JSON type)."""


# ---- canonical JSON


def canonical_json(value: Any) -> bytes:
    """The canonical JSON bytes of a JSON value, as kamu's ``to_canonical_json`` writes them.

    Raises:
        CommitmentError: ``value`` holds something that is not JSON (bytes, a set...).
    """
    out: list[str] = []
    _write(value, out)
    return "".join(out).encode("utf-8")


def _write(value: Any, out: list[str]) -> None:
    # Order matters: bool is an int in Python, and must print as a literal.
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        # serde_json holds integers as i64/u64; a larger one is parsed as an f64.
        out.append(str(value) if _I64_MIN <= value <= _U64_MAX else float_text(float(value)))
    elif isinstance(value, float):
        # serde_json::to_value turns NaN and the infinities into null.
        out.append(float_text(value) if math.isfinite(value) else "null")
    elif isinstance(value, str):
        out.append(string_text(value))
    elif isinstance(value, Mapping):
        out.append("{")
        for i, key in enumerate(sorted(value)):
            if not isinstance(key, str):
                raise CommitmentError(f"object keys must be strings, got {type(key).__name__}")
            if i:
                out.append(",")
            out.append(string_text(key))
            out.append(":")
            _write(value[key], out)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write(item, out)
        out.append("]")
    else:
        raise CommitmentError(f"not a JSON value: {type(value).__name__}")


def float_text(x: float) -> str:
    """A float as canonical_json writes it: Rust's shortest ``{:e}`` with a capital ``E`` and
    no ``+`` (``2.53707E3``, ``1E-3``, ``0E0``).

    Raises:
        CommitmentError: NaN or an infinity (serde_json cannot hold them).
    """
    if not math.isfinite(x):
        raise CommitmentError(f"{x!r} has no JSON form")
    sign = "-" if math.copysign(1.0, x) < 0 else ""
    # repr is the shortest round-tripping decimal, the digits Rust's formatter prints too.
    _, digits, exponent = Decimal(repr(abs(x))).as_tuple()
    assert isinstance(exponent, int)  # finite
    ds = list(digits)
    while len(ds) > 1 and ds[-1] == 0:
        ds.pop()
        exponent += 1
    if ds == [0]:
        return f"{sign}0E0"
    # The Decimal's exponent counts from the last digit; scientific counts from the first.
    sci = exponent + len(ds) - 1
    mantissa = str(ds[0]) + ("." + "".join(map(str, ds[1:])) if len(ds) > 1 else "")
    return f"{sign}{mantissa}E{sci}"


def string_text(s: str) -> str:
    """A string as canonical_json writes it: serde_json's escapes for ``"``, ``\\`` and the
    control characters (``\\n``, ``\\t``…, else ``\\u00XX``), and Rust's ``escape_default``
    ``\\u`` escapes, zero-padded to four lower-case hex digits (astral characters as a
    surrogate pair), for everything else outside printable ASCII (DEL included).

    These are exactly the escapes of Python's ``json`` with ``ensure_ascii`` (its C encoder is
    used; ``tests/unit/test_query_proofs.py`` holds the crate's own vectors)."""
    return _encode_ascii(s)


def _string_text_reference(s: str) -> str:
    """:func:`string_text` spelled out character by character (the tests compare the two)."""
    parts = ['"']
    for ch in s:
        code = ord(ch)
        if 0x20 <= code <= 0x7E:
            parts.append(_SHORT_ESCAPES.get(ch, ch))
        elif ch in _SHORT_ESCAPES:
            parts.append(_SHORT_ESCAPES[ch])
        elif code <= 0xFFFF:
            parts.append(f"\\u{code:04x}")
        else:
            v = code - 0x10000
            parts.append(f"\\u{0xD800 + (v >> 10):x}\\u{0xDC00 + (v & 0x3FF):x}")
    parts.append('"')
    return "".join(parts)


def canonical_json_without_floats(value: Any) -> bytes:
    """:func:`canonical_json` of a value the caller knows holds no float and no integer
    outside i64/u64 (an answer whose columns are not floating-point), by the C JSON encoder:
    an order of magnitude faster on large answers.

    Raises:
        CommitmentError: the value is not JSON.
    """
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise CommitmentError(str(e)) from e
    return text.encode("ascii")


def hash_of(value: Any, *, floats: bool = True) -> str:
    """The sha3-256 multihash (``f1620…``) of ``value``'s canonical JSON (``floats=False``:
    the caller knows it holds none, see :func:`canonical_json_without_floats`)."""
    data = canonical_json(value) if floats else canonical_json_without_floats(value)
    return Multihash.sha3_256(data).to_multibase()


# ---- commitments and proofs


def make_commitment(
    input: Mapping[str, Any],
    output: Mapping[str, Any],
    sub_queries: Sequence[Any] = (),
    *,
    output_floats: bool = True,
) -> dict[str, str]:
    """``{"inputHash", "outputHash", "subQueriesHash"}`` of a response's three parts
    (``output_floats=False``: the output holds no float, see :func:`hash_of`)."""
    return {
        "inputHash": hash_of(input),
        "outputHash": hash_of(output, floats=output_floats),
        "subQueriesHash": hash_of(list(sub_queries)),
    }


def encode_signature(signature: bytes) -> str:
    """Multibase base64url without padding (``u…``), kamu's ``Signature`` text form."""
    return "u" + base64.urlsafe_b64encode(signature).decode("ascii").rstrip("=")


def decode_signature(text: str) -> bytes:
    """The signature bytes of ``u…`` (base64url), ``m…`` (base64), ``f…`` (hex) or ``z…``.

    Raises:
        CommitmentError: not one of those encodings.
    """
    try:
        if text.startswith("u"):
            body = text[1:]
            return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        if text.startswith("m"):
            body = text[1:]
            return base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
        if text.startswith(("f", "F")):
            return bytes.fromhex(text[1:])
        if text.startswith("z"):
            from coordinator.multiformats import decode_multibase

            return decode_multibase(text)
    except (ValueError, OdfNodeError) as e:
        raise CommitmentError(f"malformed signature: {e}") from e
    raise CommitmentError(f"unsupported multibase encoding of the signature: {text[:1]!r}")


@dataclass(frozen=True)
class CommitmentSigner:
    """Signs query commitments with the node key (``did_key``: the key's ``did:key``).

    It builds the signed bytes itself, so the key it holds signs nothing but commitment
    documents (see the module docstring).
    """

    did_key: str
    sign_bytes: Callable[[bytes], bytes]

    def proof(self, commitment: Mapping[str, str]) -> dict[str, str]:
        """The ``proof`` block of a commitment."""
        doc = {k: commitment[k] for k in ("inputHash", "outputHash", "subQueriesHash")}
        return {
            "type": PROOF_TYPE,
            "verificationMethod": self.did_key,
            "proofValue": encode_signature(self.sign_bytes(canonical_json(doc))),
        }


# ---- kamu's /verify errors (verify_types.rs): shapes and messages


def input_hash_error() -> dict[str, Any]:
    """``InvalidRequest::InputHash``."""
    return {
        "kind": "InvalidRequest::InputHash",
        "message": "The commitment is invalid and cannot be disputed: commitment.inputHash "
        "doesn't match the hash of input object",
    }


def sub_queries_hash_error() -> dict[str, Any]:
    """``InvalidRequest::SubQueriesHash``."""
    return {
        "kind": "InvalidRequest::SubQueriesHash",
        "message": "The commitment is invalid and cannot be disputed: "
        "commitment.subQueriesHash doesn't match the hash of subQueries object",
    }


def bad_signature_error(reason: str) -> dict[str, Any]:
    """``InvalidRequest::BadSignature`` (``reason``: why the signature does not verify)."""
    return {
        "kind": "InvalidRequest::BadSignature",
        "message": f"The commitment is invalid and cannot be disputed: {reason}",
    }


def output_mismatch_error(expected_hash: str, actual_hash: str) -> dict[str, Any]:
    """``VerificationFailed::OutputMismatch``: the reproduced output hashes differently."""
    return {
        "kind": "VerificationFailed::OutputMismatch",
        "message": "Query was reproduced but resulted in output hash different from expected. "
        "This means that the output was either falsified, or the query reproducibility was "
        "not guaranteed by the system.",
        "expected_hash": expected_hash,
        "actual_hash": actual_hash,
    }


def dataset_not_found_error(dataset_id: str) -> dict[str, Any]:
    """``VerificationFailed::DatasetNotFound``: an input dataset is not on this node."""
    return {
        "kind": "VerificationFailed::DatasetNotFound",
        "message": "Unable to reproduce the query as one of the input datasets cannot be found. "
        "The owner of dataset either deleted it or made private or this node requires "
        "additional configuration in order to locate it.",
        "dataset_id": dataset_id,
    }


def dataset_block_not_found_error(dataset_id: str, block_hash: str) -> dict[str, Any]:
    """``VerificationFailed::DatasetBlockNotFound``: a pinned block is not on the chain here."""
    return {
        "kind": "VerificationFailed::DatasetBlockNotFound",
        "message": "Unable to reproduce the query as one of the input datasets does not "
        "contain a block with specified hash. Under normal circumstances a block can disappear "
        "only when the owner of dataset performs history-altering operation such as reset or "
        "hard compaction. There is also a probability that block hash was spoofed in the "
        "original request to falsify the results.",
        "dataset_id": dataset_id,
        "block_hash": block_hash,
    }


def verify_response(error: Mapping[str, Any] | None) -> dict[str, Any]:
    """kamu's ``VerifyResponse``: ``{"ok": true}`` or ``{"ok": false, "error": {...}}``."""
    return {"ok": True} if error is None else {"ok": False, "error": dict(error)}


# ---- checking a stored commitment without reading data


_SIGNATURE_FAILED: Final = "Verification equation was not satisfied"
"""ed25519-dalek's message for a signature that does not verify, which kamu passes on."""


def check_commitment(request: Mapping[str, Any]) -> dict[str, Any] | None:
    """``/verify``'s first step over a request ``{input, subQueries, commitment, proof}``:
    the ``InvalidRequest::*`` error it earns, or None when its hashes and signature hold.

    Raises:
        CommitmentError: the request is not shaped like a commitment (a field is missing or
            of the wrong type; kamu refuses such a body before verifying anything).
    """
    for name in ("input", "subQueries", "commitment", "proof"):
        if name not in request:
            raise CommitmentError(f"missing field `{name}`")
    commitment, proof = request["commitment"], request["proof"]
    if not isinstance(commitment, Mapping) or not isinstance(proof, Mapping):
        raise CommitmentError("`commitment` and `proof` must be objects")
    if not isinstance(request["subQueries"], list):
        raise CommitmentError("`subQueries` must be an array")
    for name in ("inputHash", "outputHash", "subQueriesHash"):
        if not isinstance(commitment.get(name), str):
            raise CommitmentError(f"missing field `commitment.{name}`")
    if proof.get("type") != PROOF_TYPE:
        raise CommitmentError(f"unsupported proof type {proof.get('type')!r} (only {PROOF_TYPE})")
    if not _same_hash(commitment["inputHash"], hash_of(request["input"])):
        return input_hash_error()
    if not _same_hash(commitment["subQueriesHash"], hash_of(request["subQueries"])):
        return sub_queries_hash_error()
    return check_signature(commitment, proof)


def check_signature(
    commitment: Mapping[str, Any], proof: Mapping[str, Any]
) -> dict[str, Any] | None:
    """``InvalidRequest::BadSignature`` unless ``proof`` signs ``commitment``, else None."""
    try:
        signer = DatasetId.from_did_key(str(proof.get("verificationMethod", "")))
    except OdfNodeError as e:
        return bad_signature_error(f"bad verificationMethod: {e}")
    try:
        signature = decode_signature(str(proof.get("proofValue", "")))
    except CommitmentError as e:
        return bad_signature_error(str(e))
    doc = {k: commitment[k] for k in ("inputHash", "outputHash", "subQueriesHash")}
    try:
        verify_signature(signer, canonical_json(doc), signature)
    except OdfNodeError:
        return bad_signature_error(_SIGNATURE_FAILED)
    return None


def _same_hash(stated: str, actual: str) -> bool:
    """Whether two multihash texts name the same hash (kamu compares parsed multihashes, so
    ``F…`` or base58 forms of the same hash match)."""
    if stated == actual:
        return True
    try:
        return Multihash.from_multibase(stated) == Multihash.from_multibase(actual)
    except (OdfNodeError, ValueError):
        return False


__all__ = [
    "INCLUDE_ORDER",
    "PROOF_TYPE",
    "CommitmentError",
    "CommitmentSigner",
    "bad_signature_error",
    "canonical_json",
    "canonical_json_without_floats",
    "check_commitment",
    "check_signature",
    "dataset_block_not_found_error",
    "dataset_not_found_error",
    "decode_signature",
    "encode_signature",
    "float_text",
    "hash_of",
    "input_hash_error",
    "make_commitment",
    "output_mismatch_error",
    "string_text",
    "sub_queries_hash_error",
    "verify_response",
]
