"""The odf DHT's wire format (``/odf/kad/1.0.0``): requests, responses and signed provider
records, in canonical bytes with a version field and fixed caps (frozen vectors:
``tests/unit/test_dht_wire.py``).

Each exchange is one request and one response on a fresh stream of the private protocol
:data:`PROTOCOL` (length-framed by the host, as every odf request protocol). Encoded with the
primitives of the gossip wire format (:mod:`p2p.wire`: big-endian integers, ``u16``-length
strings), so an encoding is unique and decoding is strict (unknown magic, version or type,
truncation, trailing bytes, oversize fields and lists are all rejected).

DhtRequest::

    "ODFK" || version u8 (=1) || op u8 || key (32 bytes) || addrs || [record]

``op`` is ``FIND_NODE`` (1), ``GET_PROVIDERS`` (2) or ``ADD_PROVIDER`` (3); ``key`` is the
target's DHT key (:func:`p2p.dht.keys.dataset_key`, :func:`p2p.dht.keys.peer_key`);
``addrs`` (``u8`` count, at most :data:`MAX_ADDRS` strings of at most :data:`MAX_ADDR_LEN`
bytes) are the sender's own gossip addresses when it serves the DHT, empty when it only queries
(a light node): a server adds a sender to its routing table only when it serves.
``ADD_PROVIDER`` carries one signed provider record (``u16``-length bytes) whose DID's key must
be ``key``.

DhtResponse::

    "ODFK" || version u8 (=1) || 0x80 || status u8 || retry_after_ms u32 || closer || providers

``status`` is ``OK`` (0), ``REFUSED`` (1: the record store's bounds refused the record),
``RATE_LIMITED`` (2: the sender is over its limit; ``retry_after_ms`` says when to ask again) or
``INVALID`` (3: the request or its record was not valid, or the record's signer is not the
sender). ``closer`` is up to :data:`MAX_PEERS` peers (peer id, addresses) closest to the key that
the responder knows; ``providers`` up to :data:`MAX_PROVIDERS` signed provider records of the key.

Signed provider record (what discovery's ``PeerRecord`` says of a carrier, signed by its node
key, so one lookup is enough to dial and pull, and a relaying node cannot forge one)::

    "ODFR" || version u8 (=1) || did (34) || node (34) || issued_ms u64
           || gossip addrs || ipfs addrs || http (text) || signature (64)

signed with ed25519 by ``node`` over :data:`RECORD_DOMAIN` followed by every byte before the
signature. The provider's libp2p peer id is that of its node key
(:func:`p2p.transport.peer_id_of_node`), so a record names exactly one peer and a server checks
that an ``ADD_PROVIDER``'s record is the sender's own. Records stay hints: every dial
authenticates the peer.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Final

from coordinator.errors import InvalidDatasetId, SignatureError
from coordinator.identity import DatasetId, PrivateKey, verify_signature
from p2p.dht.keys import DhtKey
from p2p.errors import WireDecodeError, WireEncodeError
from p2p.wire import DID_LEN, MAX_URL_LEN, SIGNATURE_LEN, Reader, Writer

PROTOCOL: Final = "/odf/kad/1.0.0"
MAGIC: Final = b"ODFK"
RECORD_MAGIC: Final = b"ODFR"
VERSION: Final = 1
RECORD_VERSION: Final = 1
RECORD_DOMAIN: Final = b"odf-node/dht-provider/v1\x00"
KEY_LEN: Final = 32
MAX_ADDRS: Final = 4
MAX_ADDR_LEN: Final = 256
MAX_PEER_ID_LEN: Final = 128
MAX_PEERS: Final = 20
MAX_PROVIDERS: Final = 20
MAX_RECORD_SIZE: Final = 2048
MAX_MESSAGE_SIZE: Final = 64 * 1024
"""No request or response is larger (20 peers x 4 addresses and 20 records of 2 KiB fit)."""
_RESPONSE: Final = 0x80
_U32 = struct.Struct(">I")


class DhtOp(enum.IntEnum):
    """What a request asks."""

    FIND_NODE = 1
    GET_PROVIDERS = 2
    ADD_PROVIDER = 3


class Status(enum.IntEnum):
    """How a request was answered."""

    OK = 0
    REFUSED = 1
    RATE_LIMITED = 2
    INVALID = 3


def _key_bytes(key: DhtKey) -> bytes:
    if not 0 <= key < 1 << (8 * KEY_LEN):
        raise WireEncodeError(f"DHT key out of range: {key}")
    return int(key).to_bytes(KEY_LEN, "big")


def _write_addrs(w: Writer, addrs: tuple[str, ...]) -> None:
    if len(addrs) > MAX_ADDRS:
        raise WireEncodeError(f"at most {MAX_ADDRS} addresses, got {len(addrs)}")
    w.u8(len(addrs))
    for a in addrs:
        w.text(a, MAX_ADDR_LEN)


def _read_addrs(r: Reader, what: str) -> tuple[str, ...]:
    n = r.u8(what)
    if n > MAX_ADDRS:
        raise WireDecodeError("too-many", f"{what}: {n} addresses > {MAX_ADDRS}")
    return tuple(r.text(what, MAX_ADDR_LEN) for _ in range(n))


def _writer(magic: bytes, version: int) -> Writer:
    """A writer that starts with the header (magic, version) of a message or record."""
    w = Writer()
    w.buf += magic
    w.u8(version)
    return w


def _message_reader(data: bytes, what: str) -> Reader:
    """A reader past the header of a DHT ``what`` (request, response) within its size cap.

    Raises:
        WireDecodeError: too large, or not this wire's magic and version.
    """
    if len(data) > MAX_MESSAGE_SIZE:
        raise WireDecodeError("too-large", f"{what} of {len(data)} bytes")
    r = Reader(bytes(data))
    _check_header(r, MAGIC, VERSION, f"DHT {what}")
    return r


def _check_header(r: Reader, magic: bytes, version: int, what: str) -> None:
    if r.take(len(magic), "magic") != magic:
        raise WireDecodeError("bad-magic", f"not a {what}")
    v = r.u8("version")
    if v != version:
        raise WireDecodeError("bad-version", f"{what} version {v} (this node reads {version})")


def _check_end(r: Reader) -> None:
    if r.pos != r.end:
        raise WireDecodeError("trailing-bytes", f"{r.end - r.pos} bytes after the message")


# ---- signed provider records


@dataclass(frozen=True, slots=True)
class SignedProviderRecord:
    """``node`` carries ``did`` and is reached at these addresses (signed by ``node``).

    Built by :meth:`sign` or :func:`decode_record` (which checks the signature); ``encoded`` is
    the exact bytes, what a provider store keeps and hands out.
    """

    did: DatasetId
    node: DatasetId
    issued_ms: int
    gossip: tuple[str, ...]
    ipfs: tuple[str, ...]
    http: str
    encoded: bytes

    @classmethod
    def sign(
        cls,
        key: PrivateKey,
        did: DatasetId,
        issued_ms: int,
        *,
        gossip: tuple[str, ...] = (),
        ipfs: tuple[str, ...] = (),
        http: str = "",
    ) -> SignedProviderRecord:
        """The record of ``key``'s node carrying ``did``, signed.

        Raises:
            WireEncodeError: a field is out of range or the record exceeds its cap.
        """
        w = _writer(RECORD_MAGIC, RECORD_VERSION)
        w.fixed(did.to_bytes(), DID_LEN)
        node = key.dataset_id()
        w.fixed(node.to_bytes(), DID_LEN)
        w.u64(issued_ms)
        _write_addrs(w, gossip)
        _write_addrs(w, ipfs)
        w.text(http, MAX_URL_LEN)
        unsigned = bytes(w.buf)
        encoded = unsigned + key.sign(RECORD_DOMAIN + unsigned)
        if len(encoded) > MAX_RECORD_SIZE:
            raise WireEncodeError(f"provider record of {len(encoded)} bytes > {MAX_RECORD_SIZE}")
        return cls(did, node, issued_ms, gossip, ipfs, http, encoded)


def decode_record(data: bytes) -> SignedProviderRecord:
    """A signed provider record, its signature checked.

    Raises:
        WireDecodeError: not a canonical record, or its signature does not verify
            (``reason`` ``"bad-signature"``).
    """
    data = bytes(data)
    if len(data) > MAX_RECORD_SIZE:
        raise WireDecodeError("too-large", f"provider record of {len(data)} bytes")
    if len(data) < SIGNATURE_LEN:
        raise WireDecodeError("truncated", "provider record shorter than a signature")
    r = Reader(data, 0, len(data) - SIGNATURE_LEN)
    _check_header(r, RECORD_MAGIC, RECORD_VERSION, "provider record")
    did = r.did("did")
    node = r.did("node")
    issued_ms = r.u64("issued_ms")
    gossip = _read_addrs(r, "gossip")
    ipfs = _read_addrs(r, "ipfs")
    http = r.text("http", MAX_URL_LEN)
    _check_end(r)
    try:
        verify_signature(node, RECORD_DOMAIN + data[: r.end], data[r.end :])
    except (SignatureError, InvalidDatasetId) as e:
        raise WireDecodeError("bad-signature", f"provider record: {e}") from None
    return SignedProviderRecord(did, node, issued_ms, gossip, ipfs, http, data)


# ---- requests and responses


@dataclass(frozen=True, slots=True)
class DhtRequest:
    """One DHT request (see the module docstring)."""

    op: DhtOp
    key: DhtKey
    addrs: tuple[str, ...] = ()
    """The sender's own gossip addresses when it serves the DHT; empty for a light node."""
    record: bytes = b""
    """``ADD_PROVIDER`` only: the signed provider record."""


@dataclass(frozen=True, slots=True)
class PeerInfo:
    """A peer a responder knows, and where it is reached."""

    peer_id: str
    addrs: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DhtResponse:
    """One DHT response (see the module docstring)."""

    status: Status = Status.OK
    retry_after_ms: int = 0
    closer: tuple[PeerInfo, ...] = ()
    providers: tuple[bytes, ...] = ()
    """Signed provider records, still to be checked with :func:`decode_record`."""


def encode_request(req: DhtRequest) -> bytes:
    """The canonical bytes of ``req``.

    Raises:
        WireEncodeError: a field is out of range.
    """
    w = _writer(MAGIC, VERSION)
    w.u8(int(req.op))
    w.fixed(_key_bytes(req.key), KEY_LEN)
    _write_addrs(w, req.addrs)
    if req.op is DhtOp.ADD_PROVIDER:
        if not req.record or len(req.record) > MAX_RECORD_SIZE:
            raise WireEncodeError("ADD_PROVIDER needs one provider record within its cap")
        w.var(req.record)
    elif req.record:
        raise WireEncodeError(f"{req.op.name} carries no record")
    return bytes(w.buf)


def decode_request(data: bytes) -> DhtRequest:
    """Strict inverse of :func:`encode_request` (the record is not checked here).

    Raises:
        WireDecodeError: not a canonical request.
    """
    r = _message_reader(data, "request")
    raw_op = r.u8("op")
    try:
        op = DhtOp(raw_op)
    except ValueError:
        raise WireDecodeError("bad-op", f"unknown DHT op {raw_op}") from None
    key = DhtKey(int.from_bytes(r.take(KEY_LEN, "key"), "big"))
    addrs = _read_addrs(r, "addrs")
    record = b""
    if op is DhtOp.ADD_PROVIDER:
        record = r.var("record")
        if not record or len(record) > MAX_RECORD_SIZE:
            raise WireDecodeError("too-large", "provider record empty or over its cap")
    _check_end(r)
    return DhtRequest(op, key, addrs, record)


def encode_response(resp: DhtResponse) -> bytes:
    """The canonical bytes of ``resp``.

    Raises:
        WireEncodeError: a field or list is out of range.
    """
    if len(resp.closer) > MAX_PEERS or len(resp.providers) > MAX_PROVIDERS:
        raise WireEncodeError("too many peers or providers in a DHT response")
    if not 0 <= resp.retry_after_ms <= 0xFFFFFFFF:
        raise WireEncodeError(f"retry_after_ms out of range: {resp.retry_after_ms}")
    w = _writer(MAGIC, VERSION)
    w.u8(_RESPONSE)
    w.u8(int(resp.status))
    w.buf += _U32.pack(resp.retry_after_ms)
    w.u8(len(resp.closer))
    for p in resp.closer:
        w.text(p.peer_id, MAX_PEER_ID_LEN)
        _write_addrs(w, p.addrs)
    w.u8(len(resp.providers))
    for rec in resp.providers:
        if len(rec) > MAX_RECORD_SIZE:
            raise WireEncodeError(f"provider record of {len(rec)} bytes > {MAX_RECORD_SIZE}")
        w.var(rec)
    out = bytes(w.buf)
    if len(out) > MAX_MESSAGE_SIZE:
        raise WireEncodeError(f"DHT response of {len(out)} bytes > {MAX_MESSAGE_SIZE}")
    return out


def decode_response(data: bytes) -> DhtResponse:
    """Strict inverse of :func:`encode_response` (records are not checked here).

    Raises:
        WireDecodeError: not a canonical response.
    """
    r = _message_reader(data, "response")
    if r.u8("type") != _RESPONSE:
        raise WireDecodeError("bad-op", "not a DHT response")
    raw_status = r.u8("status")
    try:
        status = Status(raw_status)
    except ValueError:
        raise WireDecodeError("bad-status", f"unknown DHT status {raw_status}") from None
    (retry_after_ms,) = _U32.unpack(r.take(4, "retry_after_ms"))
    n = r.u8("closer")
    if n > MAX_PEERS:
        raise WireDecodeError("too-many", f"{n} closer peers > {MAX_PEERS}")
    closer = tuple(
        PeerInfo(r.text("peer_id", MAX_PEER_ID_LEN), _read_addrs(r, "peer addrs")) for _ in range(n)
    )
    m = r.u8("providers")
    if m > MAX_PROVIDERS:
        raise WireDecodeError("too-many", f"{m} providers > {MAX_PROVIDERS}")
    providers = []
    for _ in range(m):
        rec = r.var("provider record")
        if len(rec) > MAX_RECORD_SIZE:
            raise WireDecodeError("too-large", f"provider record of {len(rec)} bytes")
        providers.append(rec)
    _check_end(r)
    return DhtResponse(status, int(retry_after_ms), closer, tuple(providers))


__all__ = [
    "MAX_ADDRS",
    "MAX_ADDR_LEN",
    "MAX_PEERS",
    "MAX_PROVIDERS",
    "MAX_RECORD_SIZE",
    "MAX_URL_LEN",
    "PROTOCOL",
    "DhtOp",
    "DhtRequest",
    "DhtResponse",
    "PeerInfo",
    "SignedProviderRecord",
    "Status",
    "decode_record",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
]
