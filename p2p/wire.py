"""Canonical wire format of the gossip messages (``docs/p2p-wire-format.md``, ``schemas/p2p.md``).

Every message is an *envelope*::

    magic "ODFP" (4 bytes) || version u8 (=1) || kind u8 || body || signature (64 bytes)

Observation (kind 5) is a node's signed statement of the head a source showed it (witnessing,
``docs/follow.md``); KeyRotation (kind 6), KeyRevocation (kind 7) and KeyInception (kind 8) are
node key records (``docs/operations.md``). EquivocationProof (kind 4) has no signature: it is
self-verifying. The body is a fixed sequence of fields per kind, encoded with a handful of
primitives whose encoding is unique by construction (fixed-width big-endian integers, explicit
lengths, 0/1 option tags). Decoding is strict: unknown magic/version/kind, truncation, trailing
bytes, non-canonical multihashes, invalid UTF-8, bad option tags, unknown enum values or flag bits
and oversize inputs are all rejected.

Signatures are ed25519 over ``DOMAIN[kind] || header || body`` where ``header`` is the 6-byte
magic+version+kind prefix and ``DOMAIN`` is a NUL-terminated per-kind string, so a signature for
one message kind can never be replayed as another kind (or as anything else the key signs, such as
a kamu ``Ed25519Signature2020`` proof). Announcements are signed by the dataset key (the DID);
attestations, disputes and observations by the node key, key revocations by the revoked key or
(record version 2) by the key it committed to as its next one, key rotations by the new key
(and, inside the body, the old one), key inceptions by the key they commit.

The *content id* of a message is the SHA3-256 digest of its full envelope bytes.
"""

from __future__ import annotations

import enum
import hashlib
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final, TypeVar

from coordinator.errors import InvalidDatasetId, InvalidMultihash, SignatureError
from coordinator.identity import DatasetId, PrivateKey, verify_signature
from coordinator.multiformats import Multicodec, Multihash
from p2p.errors import InvalidEquivocationProof, WireDecodeError, WireEncodeError
from p2p.limits import MAX_MESSAGE_SIZE

MAGIC: Final = b"ODFP"
WIRE_VERSION: Final = 1
HEADER_LEN: Final = 6
SIGNATURE_LEN: Final = 64
NONCE_LEN: Final = 16
DID_LEN: Final = 34

MAX_SIGNED_SIZE: Final = 2000
"""Hard cap on a signed envelope, so that a proof holding two of them fits ``MAX_MESSAGE_SIZE``."""
MAX_LOCATIONS: Final = 4
"""At most this many IPFS CIDs and, separately, this many HTTP URLs."""
MAX_CID_LEN: Final = 128
MAX_URL_LEN: Final = 512
MAX_ENGINE_FIELD_LEN: Final = 64
MAX_DETAIL_LEN: Final = 256
MAX_U64: Final = (1 << 64) - 1

_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")
_U16 = struct.Struct(">H")
_CID_ALPHABET: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_T = TypeVar("_T")
_E = TypeVar("_E", bound=enum.IntEnum)


class MessageKind(enum.IntEnum):
    """The ``kind`` byte of an envelope."""

    HEAD_ANNOUNCEMENT = 1
    ATTESTATION = 2
    DISPUTE = 3
    EQUIVOCATION_PROOF = 4
    OBSERVATION = 5
    KEY_ROTATION = 6
    KEY_REVOCATION = 7
    KEY_INCEPTION = 8


DOMAINS: Final[dict[MessageKind, bytes]] = {
    MessageKind.HEAD_ANNOUNCEMENT: b"odf-node/head-announcement/v1\x00",
    MessageKind.ATTESTATION: b"odf-node/attestation/v1\x00",
    MessageKind.DISPUTE: b"odf-node/dispute/v1\x00",
    MessageKind.OBSERVATION: b"odf-node/observation/v1\x00",
    MessageKind.KEY_ROTATION: b"odf-node/key-rotation/v1\x00",
    MessageKind.KEY_REVOCATION: b"odf-node/key-revocation/v1\x00",
    MessageKind.KEY_INCEPTION: b"odf-node/key-inception/v1\x00",
}
ROTATION_OLD_KEY_DOMAIN: Final = b"odf-node/key-rotation/old-key/v1\x00"
"""Domain of the old key's signature inside a :class:`KeyRotation` (the envelope's own
signature, by the new key, uses ``DOMAINS[KEY_ROTATION]``)."""
KEY_RECORD_VERSION: Final = 2
"""The ``version`` field of key rotation and revocation records this node makes.

Version 2 adds pre-rotation: a rotation commits to the digest of the key that will succeed its
new key (:func:`next_key_digest`), and a revocation may be signed by the revoked key's committed
next key. Version 1 records (no commitment, self-signed revocations) are still read."""
KEY_RECORD_VERSIONS: Final = frozenset({1, 2})
"""Key record versions the decoder accepts."""
KEY_INCEPTION_VERSION: Final = 1
"""The ``version`` field of :class:`KeyInception` records (the only one there is)."""
NEXT_KEY_DOMAIN: Final = b"odf-node/next-key/v1\x00"
"""Domain of :func:`next_key_digest`."""
NEXT_KEY_DIGEST_LEN: Final = 32

OBSERVATION_VERSION: Final = 1
"""The ``version`` field of an :class:`Observation` body (its layout may change on its own)."""


class Verdict(enum.IntEnum):
    """What an attesting node concluded about a head."""

    VERIFIED = 1
    """Integrity checked and every transform replayed with matching logical hashes."""
    INTEGRITY_ONLY = 2
    """Metadata and data hashes checked; transforms not replayed (or a root dataset)."""
    UNVERIFIABLE = 3
    """The node could not check the head (inputs missing, engine unavailable, ...)."""


class Checks(enum.IntFlag):
    """Bit flags of what an attesting node checked."""

    METADATA_INTEGRITY = 1
    DATA_INTEGRITY = 2
    REPLAY = 4


_ALL_CHECKS: Final = int(Checks.METADATA_INTEGRITY | Checks.DATA_INTEGRITY | Checks.REPLAY)


class DisputeKind(enum.IntEnum):
    """Why a node disputes a block."""

    REPLAY_MISMATCH = 1
    INTEGRITY = 2


# --------------------------------------------------------------------------------------------
# Primitive writer / reader


class Writer:
    """Appends the wire format's primitives to ``buf`` (range-checked: ``WireEncodeError``);
    shared by every canonical format of ``p2p`` (the gossip envelopes, ``p2p/dht/wire.py``)."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def u8(self, v: int) -> None:
        if not 0 <= v <= 0xFF:
            raise WireEncodeError(f"u8 out of range: {v}")
        self.buf.append(v)

    def u64(self, v: int) -> None:
        if not 0 <= v <= MAX_U64:
            raise WireEncodeError(f"u64 out of range: {v}")
        self.buf += _U64.pack(v)

    def i64(self, v: int) -> None:
        if not -(1 << 63) <= v < (1 << 63):
            raise WireEncodeError(f"i64 out of range: {v}")
        self.buf += _I64.pack(v)

    def fixed(self, data: bytes, n: int) -> None:
        if len(data) != n:
            raise WireEncodeError(f"expected {n} bytes, got {len(data)}")
        self.buf += data

    def var(self, data: bytes) -> None:
        if len(data) > 0xFFFF:
            raise WireEncodeError(f"byte string too long: {len(data)}")
        self.buf += _U16.pack(len(data)) + data

    def text(self, s: str, max_len: int) -> None:
        raw = s.encode("utf-8")
        if len(raw) > max_len:
            raise WireEncodeError(f"string longer than {max_len} bytes: {s[:40]!r}")
        self.var(raw)

    def mh(self, h: Multihash) -> None:
        raw = h.to_bytes()
        self.u8(len(raw))
        self.buf += raw

    def did(self, d: DatasetId) -> None:
        self.fixed(d.to_bytes(), DID_LEN)

    def opt(self, v: _T | None, write: Callable[[_T], None]) -> None:
        """An option: tag 0 for ``None``, else tag 1 and ``v`` as ``write`` writes it."""
        if v is None:
            self.u8(0)
        else:
            self.u8(1)
            write(v)


class Reader:
    """Reads the primitives :class:`Writer` writes from ``data[pos:end]``, strictly
    (``WireDecodeError`` on truncation, oversize or non-canonical fields)."""

    def __init__(self, data: bytes, pos: int = 0, end: int | None = None) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end

    def take(self, n: int, what: str) -> bytes:
        if self.pos + n > self.end:
            raise WireDecodeError("truncated", f"truncated while reading {what}")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def u8(self, what: str) -> int:
        return self.take(1, what)[0]

    def u64(self, what: str) -> int:
        return int(_U64.unpack(self.take(8, what))[0])

    def i64(self, what: str) -> int:
        return int(_I64.unpack(self.take(8, what))[0])

    def var(self, what: str) -> bytes:
        (n,) = _U16.unpack(self.take(2, what))
        return self.take(int(n), what)

    def text(self, what: str, max_len: int) -> str:
        raw = self.var(what)
        if len(raw) > max_len:
            raise WireDecodeError("field-too-long", f"{what} longer than {max_len} bytes")
        try:
            return raw.decode("utf-8", errors="strict")
        except UnicodeDecodeError as e:
            raise WireDecodeError("bad-utf8", f"{what} is not valid UTF-8") from e

    def enum(self, kind: type[_E], what: str, label: str | None = None) -> _E:
        """A one-byte member of ``kind``; ``unknown-enum`` names it ``label`` (default ``what``)."""
        v = self.u8(what)
        try:
            return kind(v)
        except ValueError as e:
            raise WireDecodeError("unknown-enum", f"unknown {label or what} {v}") from e

    def tag(self, what: str) -> bool:
        t = self.u8(what)
        if t > 1:
            raise WireDecodeError("bad-option-tag", f"option tag of {what} must be 0 or 1, got {t}")
        return t == 1

    def mh(self, what: str) -> Multihash:
        raw = self.take(self.u8(what), what)
        try:
            h = Multihash.from_bytes(raw)
        except InvalidMultihash as e:
            raise WireDecodeError("bad-multihash", f"{what}: {e}") from e
        if h.to_bytes() != raw:
            raise WireDecodeError("non-canonical", f"{what}: non-canonical multihash varints")
        return h

    def block_hash(self, what: str) -> Multihash:
        h = self.mh(what)
        if h.code != Multicodec.SHA3_256 or len(h.digest) != 32:
            raise WireDecodeError("bad-multihash", f"{what} must be a sha3-256 multihash")
        return h

    def opt_block_hash(self, what: str) -> Multihash | None:
        return self.block_hash(what) if self.tag(what) else None

    def opt_mh(self, what: str) -> Multihash | None:
        return self.mh(what) if self.tag(what) else None

    def opt_i64(self, what: str) -> int | None:
        return self.i64(what) if self.tag(what) else None

    def opt_u64(self, what: str) -> int | None:
        return self.u64(what) if self.tag(what) else None

    def did(self, what: str) -> DatasetId:
        raw = self.take(DID_LEN, what)
        try:
            return DatasetId.from_bytes(raw)
        except InvalidDatasetId as e:
            raise WireDecodeError("bad-did", f"{what}: {e}") from e


# --------------------------------------------------------------------------------------------
# Message bodies


def _check_block_hash(h: Multihash, what: str) -> None:
    if h.code != Multicodec.SHA3_256 or len(h.digest) != 32:
        raise WireEncodeError(f"{what} must be a sha3-256 multihash")


def _check_nonce(nonce: bytes) -> None:
    if len(nonce) != NONCE_LEN:
        raise WireEncodeError(f"nonce must be {NONCE_LEN} bytes, got {len(nonce)}")


def _valid_cid(cid: str) -> bool:
    return 0 < len(cid) <= MAX_CID_LEN and all(c in _CID_ALPHABET for c in cid)


def _valid_url(url: str) -> bool:
    return (
        0 < len(url) <= MAX_URL_LEN
        and url.startswith(("http://", "https://"))
        and all(0x21 <= ord(c) <= 0x7E for c in url)
    )


@dataclass(frozen=True, slots=True)
class FetchLocations:
    """Where a head can be fetched: IPFS root CIDs (text form) and HTTP base URLs.

    CIDs are 1..128 alphanumeric ASCII characters (base32 / base58 multibase); URLs are
    ``http://`` or ``https://`` followed by printable ASCII without spaces, at most 512 bytes.
    At most four of each.
    """

    ipfs_cids: tuple[str, ...] = ()
    http_urls: tuple[str, ...] = ()

    def validate(self) -> str | None:
        """A short reason if the locations break a rule, else ``None``."""
        if len(self.ipfs_cids) > MAX_LOCATIONS or len(self.http_urls) > MAX_LOCATIONS:
            return "too-many-locations"
        if not all(_valid_cid(c) for c in self.ipfs_cids):
            return "bad-cid"
        if not all(_valid_url(u) for u in self.http_urls):
            return "bad-url"
        return None

    def _write(self, w: Writer) -> None:
        reason = self.validate()
        if reason is not None:
            raise WireEncodeError(f"invalid fetch locations: {reason}")
        w.u8(len(self.ipfs_cids))
        for c in self.ipfs_cids:
            w.text(c, MAX_CID_LEN)
        w.u8(len(self.http_urls))
        for u in self.http_urls:
            w.text(u, MAX_URL_LEN)

    @classmethod
    def _read(cls, r: Reader) -> FetchLocations:
        n = r.u8("ipfs_cids count")
        if n > MAX_LOCATIONS:
            raise WireDecodeError("too-many-locations", f"{n} IPFS CIDs (max {MAX_LOCATIONS})")
        cids = tuple(r.text("ipfs cid", MAX_CID_LEN) for _ in range(n))
        n = r.u8("http_urls count")
        if n > MAX_LOCATIONS:
            raise WireDecodeError("too-many-locations", f"{n} HTTP URLs (max {MAX_LOCATIONS})")
        urls = tuple(r.text("http url", MAX_URL_LEN) for _ in range(n))
        loc = cls(cids, urls)
        reason = loc.validate()
        if reason is not None:
            raise WireDecodeError(reason, "invalid fetch locations")
        return loc


@dataclass(frozen=True, slots=True)
class HeadAnnouncement:
    """ "Dataset ``dataset`` has head ``head`` at ``sequence`` in ``epoch``", by the dataset key.

    ``sequence`` is the ODF sequence number of the head block. ``epoch`` starts at 0 and is bumped
    only by an owner-signed history rewrite (reset, hard compaction, forced push).
    """

    dataset: DatasetId
    head: Multihash
    sequence: int
    prev_head: Multihash | None
    epoch: int
    locations: FetchLocations
    issued_at_ns: int
    nonce: bytes

    KIND = MessageKind.HEAD_ANNOUNCEMENT

    def signer(self) -> DatasetId:
        """The key that must sign this message: the dataset's own key."""
        return self.dataset

    def _write(self, w: Writer) -> None:
        _check_block_hash(self.head, "head")
        if self.prev_head is not None:
            _check_block_hash(self.prev_head, "prev_head")
        _check_nonce(self.nonce)
        w.did(self.dataset)
        w.mh(self.head)
        w.u64(self.sequence)
        w.opt(self.prev_head, w.mh)
        w.u64(self.epoch)
        self.locations._write(w)
        w.u64(self.issued_at_ns)
        w.fixed(self.nonce, NONCE_LEN)

    @classmethod
    def _read(cls, r: Reader) -> HeadAnnouncement:
        return cls(
            dataset=r.did("dataset"),
            head=r.block_hash("head"),
            sequence=r.u64("sequence"),
            prev_head=r.opt_block_hash("prev_head"),
            epoch=r.u64("epoch"),
            locations=FetchLocations._read(r),
            issued_at_ns=r.u64("issued_at_ns"),
            nonce=r.take(NONCE_LEN, "nonce"),
        )


@dataclass(frozen=True, slots=True)
class Attestation:
    """ "Node ``node`` checked dataset ``dataset`` at ``head``", signed by the node key."""

    node: DatasetId
    dataset: DatasetId
    head: Multihash
    verdict: Verdict
    engine_name: str
    engine_version: str
    checks: Checks
    locations: FetchLocations
    issued_at_ns: int
    nonce: bytes

    KIND = MessageKind.ATTESTATION

    def signer(self) -> DatasetId:
        """The key that must sign this message: the attesting node's key."""
        return self.node

    def _write(self, w: Writer) -> None:
        _check_block_hash(self.head, "head")
        _check_nonce(self.nonce)
        if int(self.checks) & ~_ALL_CHECKS:
            raise WireEncodeError(f"unknown check bits: {int(self.checks):#x}")
        w.did(self.node)
        w.did(self.dataset)
        w.mh(self.head)
        w.u8(int(Verdict(self.verdict)))
        w.text(self.engine_name, MAX_ENGINE_FIELD_LEN)
        w.text(self.engine_version, MAX_ENGINE_FIELD_LEN)
        w.u8(int(self.checks))
        self.locations._write(w)
        w.u64(self.issued_at_ns)
        w.fixed(self.nonce, NONCE_LEN)

    @classmethod
    def _read(cls, r: Reader) -> Attestation:
        node = r.did("node")
        dataset = r.did("dataset")
        head = r.block_hash("head")
        verdict = r.enum(Verdict, "verdict")
        engine_name = r.text("engine_name", MAX_ENGINE_FIELD_LEN)
        engine_version = r.text("engine_version", MAX_ENGINE_FIELD_LEN)
        c = r.u8("checks")
        if c & ~_ALL_CHECKS:
            raise WireDecodeError("unknown-flags", f"unknown check bits {c:#x}")
        return cls(
            node=node,
            dataset=dataset,
            head=head,
            verdict=verdict,
            engine_name=engine_name,
            engine_version=engine_version,
            checks=Checks(c),
            locations=FetchLocations._read(r),
            issued_at_ns=r.u64("issued_at_ns"),
            nonce=r.take(NONCE_LEN, "nonce"),
        )


@dataclass(frozen=True, slots=True)
class Evidence:
    """One side (expected or computed) of a dispute's evidence; every field is optional.

    ``offsets`` is the inclusive ``(start, end)`` record offset interval; ``watermark_ns`` is the
    output watermark in nanoseconds since the Unix epoch (signed).
    """

    logical_hash: Multihash | None = None
    physical_hash: Multihash | None = None
    offsets: tuple[int, int] | None = None
    watermark_ns: int | None = None

    def _write(self, w: Writer) -> None:
        w.opt(self.logical_hash, w.mh)
        w.opt(self.physical_hash, w.mh)
        if self.offsets is None:
            w.u8(0)
        else:
            start, end = self.offsets
            if start > end:
                raise WireEncodeError(f"offset interval start {start} > end {end}")
            w.u8(1)
            w.u64(start)
            w.u64(end)
        w.opt(self.watermark_ns, w.i64)

    @classmethod
    def _read(cls, r: Reader) -> Evidence:
        logical = r.opt_mh("logical_hash")
        physical = r.opt_mh("physical_hash")
        offsets: tuple[int, int] | None = None
        if r.tag("offsets"):
            start, end = r.u64("offset start"), r.u64("offset end")
            if start > end:
                raise WireDecodeError("bad-interval", f"offset start {start} > end {end}")
            offsets = (start, end)
        return cls(logical, physical, offsets, r.opt_i64("watermark_ns"))


@dataclass(frozen=True, slots=True)
class Dispute:
    """ "Node ``node`` found block ``block`` of ``dataset`` wrong", with evidence; node-signed."""

    node: DatasetId
    dataset: DatasetId
    block: Multihash
    kind: DisputeKind
    expected: Evidence
    computed: Evidence
    detail: str
    issued_at_ns: int
    nonce: bytes

    KIND = MessageKind.DISPUTE

    def signer(self) -> DatasetId:
        """The key that must sign this message: the disputing node's key."""
        return self.node

    def _write(self, w: Writer) -> None:
        _check_block_hash(self.block, "block")
        _check_nonce(self.nonce)
        w.did(self.node)
        w.did(self.dataset)
        w.mh(self.block)
        w.u8(int(DisputeKind(self.kind)))
        self.expected._write(w)
        self.computed._write(w)
        w.text(self.detail, MAX_DETAIL_LEN)
        w.u64(self.issued_at_ns)
        w.fixed(self.nonce, NONCE_LEN)

    @classmethod
    def _read(cls, r: Reader) -> Dispute:
        node = r.did("node")
        dataset = r.did("dataset")
        block = r.block_hash("block")
        kind = r.enum(DisputeKind, "kind", "dispute kind")
        return cls(
            node=node,
            dataset=dataset,
            block=block,
            kind=kind,
            expected=Evidence._read(r),
            computed=Evidence._read(r),
            detail=r.text("detail", MAX_DETAIL_LEN),
            issued_at_ns=r.u64("issued_at_ns"),
            nonce=r.take(NONCE_LEN, "nonce"),
        )


def valid_source_url(url: str) -> bool:
    """Whether ``url`` may be an observation's source: 1..512 bytes of printable ASCII without
    spaces, starting ``http://``, ``https://``, ``ipfs://`` or ``ipns://`` (a local path is
    nothing another node could compare, so it is never observed on the wire)."""
    return (
        0 < len(url) <= MAX_URL_LEN
        and url.startswith(("http://", "https://", "ipfs://", "ipns://"))
        and all(0x21 <= ord(c) <= 0x7E for c in url)
    )


@dataclass(frozen=True, slots=True)
class Observation:
    """ "Node ``node`` saw source ``source`` show head ``head`` (at ``sequence``) for ``dataset``
    at ``issued_at_ns``", signed by the node key (witnessing, ``docs/follow.md``).

    Sources are not owner-signed: two observations of one source whose heads do not descend one
    from the other are evidence of a split view. ``locations`` says where the observer's copy of
    that chain can be fetched (so a node the source shows another chain can still check it).
    ``version`` is :data:`OBSERVATION_VERSION`; a body of another version is refused.
    """

    node: DatasetId
    dataset: DatasetId
    source: str
    head: Multihash
    sequence: int
    locations: FetchLocations
    issued_at_ns: int
    version: int = OBSERVATION_VERSION

    KIND = MessageKind.OBSERVATION

    def signer(self) -> DatasetId:
        """The key that must sign this message: the observing node's key."""
        return self.node

    def _write(self, w: Writer) -> None:
        if self.version != OBSERVATION_VERSION:
            raise WireEncodeError(f"observation version must be {OBSERVATION_VERSION}")
        _check_block_hash(self.head, "head")
        if not valid_source_url(self.source):
            raise WireEncodeError(f"invalid observation source URL: {self.source[:40]!r}")
        w.u8(self.version)
        w.did(self.node)
        w.did(self.dataset)
        w.text(self.source, MAX_URL_LEN)
        w.mh(self.head)
        w.u64(self.sequence)
        self.locations._write(w)
        w.u64(self.issued_at_ns)

    @classmethod
    def _read(cls, r: Reader) -> Observation:
        version = r.u8("observation version")
        if version != OBSERVATION_VERSION:
            raise WireDecodeError("unknown-version", f"unknown observation version {version}")
        node = r.did("node")
        dataset = r.did("dataset")
        source = r.text("source", MAX_URL_LEN)
        if not valid_source_url(source):
            raise WireDecodeError("bad-url", "invalid observation source URL")
        return cls(
            node=node,
            dataset=dataset,
            source=source,
            head=r.block_hash("head"),
            sequence=r.u64("sequence"),
            locations=FetchLocations._read(r),
            issued_at_ns=r.u64("issued_at_ns"),
            version=version,
        )


def next_key_digest(key: DatasetId) -> bytes:
    """The pre-rotation commitment to ``key``: SHA3-256 of ``NEXT_KEY_DOMAIN || did bytes``.

    A rotation record publishes this digest of the key that will succeed its new key, so that
    whoever later holds only the current key cannot choose the next one (KERI's pre-rotation).
    """
    return hashlib.sha3_256(NEXT_KEY_DOMAIN + key.to_bytes()).digest()


def _read_record_version(r: Reader) -> int:
    v = r.u8("record version")
    if v not in KEY_RECORD_VERSIONS:
        raise WireDecodeError("unknown-version", f"unknown key record version {v}")
    return v


def _check_record_version(version: int) -> None:
    if version not in KEY_RECORD_VERSIONS:
        raise WireEncodeError(f"unknown key record version {version}")


@dataclass(frozen=True, slots=True)
class KeyRotation:
    """ "Node key ``old`` is succeeded by node key ``new``", signed by both.

    The envelope is signed by the new key (:meth:`signer`); ``old_signature`` is the old key's
    signature over ``ROTATION_OLD_KEY_DOMAIN || header || <the body without old_signature>``
    and sits at the end of the body, so the new key's signature covers it too. Neither key
    alone can make a record: a new key cannot claim an identity it does not hold.

    Version 2 body: ``version (=2) || old || new || next_digest (32) || issued_at_ns ||
    nonce || old_signature``, where ``next_digest`` is :func:`next_key_digest` of the key that
    will succeed ``new`` (pre-rotation). Receivers accept a rotation of a key whose commitment
    they know only if ``next_key_digest(new)`` equals it, so a thief holding only the current
    key cannot hand the identity to a key of its own (docs/operations.md, "Node key
    rotation"). Version 1 (no ``next_digest``) is the format before pre-rotation, still read.
    Build with :meth:`make`.
    """

    old: DatasetId
    new: DatasetId
    issued_at_ns: int
    nonce: bytes
    old_signature: bytes
    next_digest: bytes | None = None
    """Commitment to the key after ``new`` (version 2); None in a version 1 record."""
    version: int = KEY_RECORD_VERSION

    KIND = MessageKind.KEY_ROTATION

    def signer(self) -> DatasetId:
        """The key that must sign the envelope: the new key."""
        return self.new

    def _fields(self, w: Writer) -> None:
        _check_nonce(self.nonce)
        _check_record_version(self.version)
        if self.old == self.new:
            raise WireEncodeError("a key rotation needs two different keys")
        if (self.version >= 2) != (self.next_digest is not None):
            raise WireEncodeError("a version 2 key rotation (only) has a next key digest")
        w.u8(self.version)
        w.did(self.old)
        w.did(self.new)
        if self.next_digest is not None:
            w.fixed(self.next_digest, NEXT_KEY_DIGEST_LEN)
        w.u64(self.issued_at_ns)
        w.fixed(self.nonce, NONCE_LEN)

    def old_signing_input(self) -> bytes:
        """The exact bytes the old key signs."""
        w = Writer()
        self._fields(w)
        return ROTATION_OLD_KEY_DOMAIN + _header(self.KIND) + bytes(w.buf)

    def verify_old_signature(self) -> None:
        """Check the old key's signature.

        Raises:
            SignatureError: ``old_signature`` is not by ``old`` over this record.
        """
        verify_signature(self.old, self.old_signing_input(), self.old_signature)

    def _write(self, w: Writer) -> None:
        self._fields(w)
        w.fixed(self.old_signature, SIGNATURE_LEN)

    @classmethod
    def _read(cls, r: Reader) -> KeyRotation:
        version = _read_record_version(r)
        old, new = r.did("old"), r.did("new")
        if old == new:
            raise WireDecodeError("same-key", "a key rotation names the same key twice")
        next_digest = r.take(NEXT_KEY_DIGEST_LEN, "next_digest") if version >= 2 else None
        return cls(
            old=old,
            new=new,
            issued_at_ns=r.u64("issued_at_ns"),
            nonce=r.take(NONCE_LEN, "nonce"),
            old_signature=r.take(SIGNATURE_LEN, "old_signature"),
            next_digest=next_digest,
            version=version,
        )

    @classmethod
    def make(
        cls,
        old: PrivateKey,
        new: PrivateKey,
        issued_at_ns: int,
        nonce: bytes,
        next_digest: bytes | None,
    ) -> SignedMessage:
        """The signed record of ``old`` handing over to ``new``, committing to the key after
        ``new`` (``next_digest``: :func:`next_key_digest` of it). ``None`` makes a version 1
        record without a commitment (the format before pre-rotation: test vectors, upgrades).
        """
        version = 1 if next_digest is None else KEY_RECORD_VERSION
        fields = (old.dataset_id(), new.dataset_id(), issued_at_ns, nonce)
        unsigned = cls(*fields, b"\0" * 64, next_digest, version)
        record = cls(*fields, old.sign(unsigned.old_signing_input()), next_digest, version)
        return sign_message(record, new)


@dataclass(frozen=True, slots=True)
class KeyRevocation:
    """ "Node key ``node`` no longer counts from ``issued_at_ns`` on".

    Signed by ``node`` itself (``by`` is None), or (version 2) by ``by``: the key ``node``
    committed to as its next one. A self-signed revocation can be made by anyone holding the
    key, a thief included, which at worst kills the stolen key (what its owner wants). A
    revocation by the committed next key can be made only by the owner (the thief never held
    that key) and beats any rotation the revoked key signed: receivers check
    ``next_key_digest(by)`` against the commitment they know (``node/app/identities.py``).

    Version 2 body: ``version (=2) || node || by (option tag, DID) || issued_at_ns || nonce``;
    version 1: ``version (=1) || node || issued_at_ns || nonce``.
    """

    node: DatasetId
    issued_at_ns: int
    nonce: bytes
    version: int = KEY_RECORD_VERSION
    by: DatasetId | None = None
    """The committed next key of ``node`` that signed this revocation; None: ``node`` did."""

    KIND = MessageKind.KEY_REVOCATION

    def signer(self) -> DatasetId:
        """The key that must sign the envelope: ``by``, or the revoked key itself."""
        return self.by if self.by is not None else self.node

    def _write(self, w: Writer) -> None:
        _check_nonce(self.nonce)
        _check_record_version(self.version)
        if self.by is not None and (self.version < 2 or self.by == self.node):
            raise WireEncodeError("only a version 2 revocation names another key as signer")
        w.u8(self.version)
        w.did(self.node)
        if self.version >= 2:
            w.opt(self.by, w.did)
        w.u64(self.issued_at_ns)
        w.fixed(self.nonce, NONCE_LEN)

    @classmethod
    def _read(cls, r: Reader) -> KeyRevocation:
        version = _read_record_version(r)
        node = r.did("node")
        by = r.did("by") if version >= 2 and r.tag("by") else None
        if by == node:
            raise WireDecodeError("same-key", "a revocation names the revoked key as its signer")
        return cls(
            node=node,
            issued_at_ns=r.u64("issued_at_ns"),
            nonce=r.take(NONCE_LEN, "nonce"),
            version=version,
            by=by,
        )


@dataclass(frozen=True, slots=True)
class KeyInception:
    """ "Node key ``node`` commits to the key whose digest is ``next_digest`` as its successor".

    The first key of a node (or one a version 1 rotation introduced) has no commitment from a
    rotation; this record, signed by ``node`` itself, gives it one, so that a thief who later
    steals ``node`` alone cannot rotate it to a key of its own: receivers that know the
    commitment accept only a rotation to the committed key, and a revocation signed by it
    (``node/app/identities.py``). ``next_digest`` is :func:`next_key_digest` of that key, the
    form a version 2 :class:`KeyRotation` commits with.

    Body: ``version (=1) || node || next_digest (32) || issued_at_ns || nonce``.
    """

    node: DatasetId
    next_digest: bytes
    issued_at_ns: int
    nonce: bytes
    version: int = KEY_INCEPTION_VERSION

    KIND = MessageKind.KEY_INCEPTION

    def signer(self) -> DatasetId:
        """The key that must sign the envelope: the committing key itself."""
        return self.node

    def _write(self, w: Writer) -> None:
        _check_nonce(self.nonce)
        if self.version != KEY_INCEPTION_VERSION:
            raise WireEncodeError(f"unknown key inception version {self.version}")
        w.u8(self.version)
        w.did(self.node)
        w.fixed(self.next_digest, NEXT_KEY_DIGEST_LEN)
        w.u64(self.issued_at_ns)
        w.fixed(self.nonce, NONCE_LEN)

    @classmethod
    def _read(cls, r: Reader) -> KeyInception:
        version = r.u8("record version")
        if version != KEY_INCEPTION_VERSION:
            raise WireDecodeError("unknown-version", f"unknown key inception version {version}")
        return cls(
            node=r.did("node"),
            next_digest=r.take(NEXT_KEY_DIGEST_LEN, "next_digest"),
            issued_at_ns=r.u64("issued_at_ns"),
            nonce=r.take(NONCE_LEN, "nonce"),
            version=version,
        )


SignableMessage = (
    HeadAnnouncement
    | Attestation
    | Dispute
    | Observation
    | KeyRotation
    | KeyRevocation
    | KeyInception
)


def _header(kind: MessageKind) -> bytes:
    return MAGIC + bytes([WIRE_VERSION, int(kind)])


def _body(msg: SignableMessage) -> bytes:
    w = Writer()
    msg._write(w)
    return bytes(w.buf)


def signing_input(msg: SignableMessage) -> bytes:
    """The exact bytes that are ed25519-signed: ``DOMAIN || header || body``."""
    return DOMAINS[msg.KIND] + _header(msg.KIND) + _body(msg)


@dataclass(frozen=True, slots=True)
class SignedMessage:
    """A decoded (or freshly signed) envelope: the message, its signature and its exact bytes.

    A ``SignedMessage`` obtained from :func:`decode_unverified` is *not* known to be authentic;
    call :meth:`verify` (or use :func:`decode`).
    """

    message: SignableMessage
    signature: bytes
    envelope: bytes
    content_id: bytes = field(repr=False)

    @property
    def kind(self) -> MessageKind:
        """The envelope's message kind."""
        return self.message.KIND

    def signer(self) -> DatasetId:
        """The key that must have signed the envelope."""
        return self.message.signer()

    def verify(self) -> None:
        """Check the signature against the required signer.

        Raises:
            SignatureError: the signature is not by :meth:`signer` over this message.
        """
        signed = DOMAINS[self.kind] + self.envelope[: len(self.envelope) - SIGNATURE_LEN]
        verify_signature(self.signer(), signed, self.signature)
        if isinstance(self.message, KeyRotation):
            self.message.verify_old_signature()


def content_id(envelope: bytes) -> bytes:
    """The 32-byte de-duplication id of an envelope: SHA3-256 of its exact bytes."""
    return hashlib.sha3_256(envelope).digest()


def sign_message(msg: SignableMessage, key: PrivateKey) -> SignedMessage:
    """Encode and sign ``msg`` with ``key``.

    The key is *not* required to match :meth:`signer` (tests need forgeries); a mismatching key
    produces an envelope that fails :meth:`SignedMessage.verify`.

    Raises:
        WireEncodeError: a field is out of range or the envelope exceeds ``MAX_SIGNED_SIZE``.
    """
    unsigned = _header(msg.KIND) + _body(msg)
    sig = key.sign(DOMAINS[msg.KIND] + unsigned)
    envelope = unsigned + sig
    if len(envelope) > MAX_SIGNED_SIZE:
        raise WireEncodeError(f"envelope of {len(envelope)} bytes exceeds {MAX_SIGNED_SIZE}")
    return SignedMessage(msg, sig, envelope, content_id(envelope))


@dataclass(frozen=True, slots=True)
class EquivocationProof:
    """Two owner-signed announcements of the same DID, epoch and sequence with different heads.

    Canonical form: ``first.envelope < second.envelope`` (bytewise), so a pair has one encoding.
    Build with :meth:`make`; check with :func:`verify_equivocation_proof`.
    """

    first: SignedMessage
    second: SignedMessage
    envelope: bytes
    content_id: bytes = field(repr=False)

    KIND = MessageKind.EQUIVOCATION_PROOF

    @classmethod
    def make(cls, a: SignedMessage, b: SignedMessage) -> EquivocationProof:
        """Wrap two conflicting announcements (any order) into a canonical proof envelope."""
        first, second = (a, b) if a.envelope < b.envelope else (b, a)
        w = Writer()
        w.var(first.envelope)
        w.var(second.envelope)
        envelope = _header(MessageKind.EQUIVOCATION_PROOF) + bytes(w.buf)
        if len(envelope) > MAX_MESSAGE_SIZE:
            raise WireEncodeError(f"proof of {len(envelope)} bytes exceeds {MAX_MESSAGE_SIZE}")
        return cls(first, second, envelope, content_id(envelope))

    @property
    def dataset(self) -> DatasetId:
        """The equivocating dataset."""
        msg = self.first.message
        assert isinstance(msg, HeadAnnouncement)
        return msg.dataset


WireMessage = SignedMessage | EquivocationProof

_READERS: Final[dict[MessageKind, Callable[[Reader], SignableMessage]]] = {
    MessageKind.HEAD_ANNOUNCEMENT: HeadAnnouncement._read,
    MessageKind.ATTESTATION: Attestation._read,
    MessageKind.DISPUTE: Dispute._read,
    MessageKind.OBSERVATION: Observation._read,
    MessageKind.KEY_ROTATION: KeyRotation._read,
    MessageKind.KEY_REVOCATION: KeyRevocation._read,
    MessageKind.KEY_INCEPTION: KeyInception._read,
}


def _read_header(data: bytes) -> MessageKind:
    if len(data) < HEADER_LEN:
        raise WireDecodeError("truncated", f"{len(data)} bytes is shorter than the header")
    if data[:4] != MAGIC:
        raise WireDecodeError("bad-magic", f"bad magic {data[:4].hex()}")
    if data[4] != WIRE_VERSION:
        raise WireDecodeError("unknown-version", f"unknown wire version {data[4]}")
    try:
        return MessageKind(data[5])
    except ValueError as e:
        raise WireDecodeError("unknown-kind", f"unknown message kind {data[5]}") from e


def _decode_signed(data: bytes, max_size: int) -> SignedMessage:
    if len(data) > max_size:
        raise WireDecodeError("oversized", f"{len(data)} bytes exceeds {max_size}")
    kind = _read_header(data)
    if kind == MessageKind.EQUIVOCATION_PROOF:
        raise WireDecodeError("unexpected-kind", "an equivocation proof cannot be nested")
    if len(data) < HEADER_LEN + SIGNATURE_LEN:
        raise WireDecodeError("truncated", "envelope shorter than header + signature")
    body_end = len(data) - SIGNATURE_LEN
    r = Reader(data, HEADER_LEN, body_end)
    msg = _READERS[kind](r)
    if r.pos != body_end:
        raise WireDecodeError("trailing-bytes", f"{body_end - r.pos} bytes after the body")
    return SignedMessage(msg, data[body_end:], data, content_id(data))


def decode_unverified(data: bytes) -> WireMessage:
    """Parse an envelope strictly *without* checking signatures.

    Raises:
        WireDecodeError: any deviation from the canonical encoding (``reason`` says which).
    """
    data = bytes(data)
    if len(data) > MAX_MESSAGE_SIZE:
        raise WireDecodeError("oversized", f"{len(data)} bytes exceeds {MAX_MESSAGE_SIZE}")
    kind = _read_header(data)
    if kind != MessageKind.EQUIVOCATION_PROOF:
        return _decode_signed(data, MAX_SIGNED_SIZE)
    r = Reader(data, HEADER_LEN)
    first = _decode_signed(r.var("first announcement"), MAX_SIGNED_SIZE)
    second = _decode_signed(r.var("second announcement"), MAX_SIGNED_SIZE)
    if r.pos != len(data):
        raise WireDecodeError("trailing-bytes", f"{len(data) - r.pos} bytes after the proof")
    if not first.envelope < second.envelope:
        raise WireDecodeError("non-canonical", "proof announcements not in ascending byte order")
    return EquivocationProof(first, second, data, content_id(data))


def decode(data: bytes) -> WireMessage:
    """Parse an envelope strictly and check its signature(s) (or the proof).

    Raises:
        WireDecodeError: malformed or non-canonical bytes.
        SignatureError: a signature does not verify.
        InvalidEquivocationProof: a proof's announcements do not conflict.
    """
    msg = decode_unverified(data)
    if isinstance(msg, EquivocationProof):
        verify_equivocation_proof(msg)
    else:
        msg.verify()
    return msg


def conflicting(a: HeadAnnouncement, b: HeadAnnouncement) -> bool:
    """Whether two announcements fork: same DID, epoch and sequence, different heads."""
    return (
        a.dataset == b.dataset
        and a.epoch == b.epoch
        and a.sequence == b.sequence
        and a.head != b.head
    )


def verify_equivocation_proof(proof: EquivocationProof | bytes) -> DatasetId:
    """Check that a proof shows the dataset owner signing two forking heads; anyone can run this.

    Returns:
        The equivocating dataset's DID.

    Raises:
        InvalidEquivocationProof: the bytes are not a proof, a signature is bad, or the two
            announcements do not conflict.
    """
    if not isinstance(proof, EquivocationProof):
        try:
            decoded = decode_unverified(proof)
        except WireDecodeError as e:
            raise InvalidEquivocationProof(f"malformed proof: {e}") from e
        if not isinstance(decoded, EquivocationProof):
            raise InvalidEquivocationProof("not an equivocation proof envelope")
        proof = decoded
    a, b = proof.first.message, proof.second.message
    if not isinstance(a, HeadAnnouncement) or not isinstance(b, HeadAnnouncement):
        raise InvalidEquivocationProof("a proof must hold two head announcements")
    for part in (proof.first, proof.second):
        try:
            part.verify()
        except SignatureError as e:
            raise InvalidEquivocationProof(f"announcement not signed by its dataset: {e}") from e
    if not conflicting(a, b):
        raise InvalidEquivocationProof(
            "announcements do not conflict (need same DID, epoch and sequence, different heads)"
        )
    return a.dataset


# --------------------------------------------------------------------------------------------
# Anti-entropy request/response bodies (protocol /odf/heads/1.0.0)

MAX_HEADS_PER_EXCHANGE: Final = 256


def encode_heads_request(datasets: Iterable[DatasetId]) -> bytes:
    """``u16 count || count x did(34)``: "send me your latest accepted heads of these DIDs"."""
    dids = list(datasets)
    if len(dids) > MAX_HEADS_PER_EXCHANGE:
        raise WireEncodeError(f"at most {MAX_HEADS_PER_EXCHANGE} datasets per request")
    return _U16.pack(len(dids)) + b"".join(d.to_bytes() for d in dids)


def decode_heads_request(data: bytes) -> list[DatasetId]:
    """Strict inverse of :func:`encode_heads_request`."""
    return _decode_heads_body(data, lambda r: r.did("dataset"), "datasets requested", "request")


def encode_heads_response(envelopes: Iterable[bytes]) -> bytes:
    """``u16 count || count x var(signed announcement envelope)``."""
    envs = list(envelopes)[:MAX_HEADS_PER_EXCHANGE]
    w = Writer()
    w.buf += _U16.pack(len(envs))
    for e in envs:
        w.var(e)
    return bytes(w.buf)


def decode_heads_response(data: bytes) -> list[bytes]:
    """Split a heads response into envelopes (each is validated later by the core)."""
    return _decode_heads_body(data, lambda r: r.var("envelope"), "heads in response", "response")


def _decode_heads_body(
    data: bytes, read: Callable[[Reader], _T], items: str, body: str
) -> list[_T]:
    """``u16 count || count x item`` of an anti-entropy ``body`` (request or response), at most
    :data:`MAX_HEADS_PER_EXCHANGE` items (``items`` names them in the error), nothing after."""
    r = Reader(bytes(data))
    (n,) = _U16.unpack(r.take(2, "count"))
    if n > MAX_HEADS_PER_EXCHANGE:
        raise WireDecodeError("too-many", f"{n} {items}")
    out = [read(r) for _ in range(int(n))]
    if r.pos != len(data):
        raise WireDecodeError("trailing-bytes", f"bytes after the heads {body}")
    return out
