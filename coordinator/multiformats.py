"""Multihash, multicodec and multibase values exactly as kamu-cli prints and stores them.

kamu stores hashes in blocks in the binary multihash form (``varint(code) || varint(len) ||
digest``) and prints them as multibase base16 (``f`` + lowercase hex), e.g. ``f1620…`` for a
sha3-256 block hash and ``f9680c00120…`` for an ``arrow0-sha3-256`` logical hash. Parsing also
accepts ``F`` (upper-case base16) and ``z`` (base58btc), as kamu does.

The ``multiformats`` package provides the codec table, varints and base58; the two ODF
private-use codes are registered here on import.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from multiformats import multibase, multicodec, varint

from coordinator.errors import InvalidMultihash


class Multicodec(IntEnum):
    """The multicodec codes ODF uses (kamu-cli ``src/utils/multiformats/src/multicodec.rs``)."""

    IDENTITY = 0x00
    CIDV1 = 0x01
    SHA2_256 = 0x12
    SHA3_256 = 0x16
    ED25519_PUB = 0xED
    ARROW0_SHA3_256 = 0x300016
    ODF_METADATA_BLOCK = 0x400000
    ODF_DATASET_SNAPSHOT = 0x400001


_PRIVATE_CODECS: Final = (
    ("arrow0-sha3-256", "multihash", Multicodec.ARROW0_SHA3_256),
    ("odf-metadata-block", "odf", Multicodec.ODF_METADATA_BLOCK),
    ("odf-dataset-snapshot", "odf", Multicodec.ODF_DATASET_SNAPSHOT),
)


def _register_private_codecs() -> None:
    for name, tag, code in _PRIVATE_CODECS:
        if not multicodec.exists(name):
            multicodec.register(
                multicodec.Multicodec(name=name, tag=tag, code=int(code), status="draft")
            )


_register_private_codecs()

# Hash codes a multihash may carry in ODF data; anything else is refused on parse.
_SUPPORTED_HASH_CODES: Final = frozenset(
    {Multicodec.SHA3_256, Multicodec.ARROW0_SHA3_256, Multicodec.SHA2_256}
)
_SHA3_PREFIX: Final = b"\x16\x20"
_new_object = object.__new__
_ARROW0_PREFIX: Final = b"\x96\x80\xc0\x01\x20"
_MAX_DIGEST_LEN: Final = 64
_HEX_RE: Final = re.compile(r"(?:[0-9a-fA-F]{2})*")


def _read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    """Decode an unsigned LEB128 varint (max 9 bytes, minimal form); ``(value, next_pos)``."""
    value = 0
    shift = 0
    for i in range(pos, min(pos + 9, len(data))):
        byte = data[i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if byte == 0 and i > pos:
                raise InvalidMultihash("non-minimal varint")
            return value, i + 1
        shift += 7
    raise InvalidMultihash("truncated or overlong varint")


def encode_multibase_base16(data: bytes) -> str:
    """Multibase base16 (lower-case, ``f`` prefix), kamu's canonical text form."""
    return "f" + data.hex()


def encode_multibase_base58(data: bytes) -> str:
    """Multibase base58btc (``z`` prefix), used by ``did:key``."""
    return str(multibase.encode(data, "base58btc"))


def decode_multibase(text: str) -> bytes:
    """Decode a multibase string in one of the bases kamu accepts (``f``, ``F``, ``z``).

    Raises:
        InvalidMultihash: unknown base prefix or invalid characters.
    """
    if not text:
        raise InvalidMultihash("empty multibase string")
    prefix, body = text[0], text[1:]
    if prefix in "fF" and not _HEX_RE.fullmatch(body):
        raise InvalidMultihash(f"invalid base16 multibase string {text!r}")
    try:
        if prefix == "f":
            if body != body.lower():
                raise ValueError("lower-case base16 expected after 'f'")
            return bytes.fromhex(body)
        if prefix == "F":
            if body != body.upper():
                raise ValueError("upper-case base16 expected after 'F'")
            return bytes.fromhex(body)
        if prefix == "z":
            return bytes(multibase.decode(text))
    except ValueError as e:
        raise InvalidMultihash(f"invalid multibase string {text!r}: {e}") from e
    raise InvalidMultihash(f"unsupported multibase prefix {prefix!r} in {text!r}")


@dataclass(frozen=True, slots=True)
class Multihash:
    """A self-describing hash: hash-function code plus digest."""

    code: int
    digest: bytes

    def __post_init__(self) -> None:
        if self.code not in _SUPPORTED_HASH_CODES:
            raise InvalidMultihash(f"unsupported multihash code 0x{self.code:x}")
        if not 0 < len(self.digest) <= _MAX_DIGEST_LEN:
            raise InvalidMultihash(f"invalid digest length {len(self.digest)}")

    @classmethod
    def sha3_256(cls, data: bytes) -> Multihash:
        """Hash ``data`` with SHA3-256 (code 0x16)."""
        # Once per block of a chain: :meth:`_trusted` inlined (a quarter of the cost above sha3).
        obj = _new_object(cls)
        _set_code(obj, Multicodec.SHA3_256)
        _set_digest(obj, _sha3_256(data).digest())
        return obj

    @classmethod
    def from_bytes(cls, data: bytes) -> Multihash:
        """Parse the binary form ``varint(code) || varint(len) || digest``.

        Raises:
            InvalidMultihash: truncated, trailing bytes, or unsupported code.
        """
        data = bytes(data)
        # Fast paths: nearly every hash in ODF metadata is sha3-256 or arrow0-sha3-256, and
        # their codes are valid by construction, so the checking constructor can be skipped.
        n = len(data)
        if n == 34 and data[:2] == _SHA3_PREFIX:
            return cls._trusted(Multicodec.SHA3_256, data[2:])
        if n == 37 and data[:5] == _ARROW0_PREFIX:
            return cls._trusted(Multicodec.ARROW0_SHA3_256, data[5:])
        code, pos = _read_uvarint(data, 0)
        length, pos = _read_uvarint(data, pos)
        digest = data[pos:]
        if len(digest) != length:
            raise InvalidMultihash(
                f"multihash digest length {len(digest)} does not match declared {length}"
            )
        return cls(code, digest)

    @classmethod
    def sha3_256_of_digest(cls, digest: bytes) -> Multihash:
        """The sha3-256 multihash (code 0x16) of a 32-byte ``digest`` already computed or read
        (a decoder that found the ``0x16 0x20`` prefix: no second parse)."""
        if len(digest) != 32:
            raise InvalidMultihash(f"invalid sha3-256 digest length {len(digest)}")
        return cls._trusted(Multicodec.SHA3_256, digest)

    @classmethod
    def _trusted(cls, code: int, digest: bytes) -> Multihash:
        # The frozen dataclass's checks skipped; the slots set through their descriptors.
        obj = _new_object(cls)
        _set_code(obj, code)
        _set_digest(obj, digest)
        return obj

    @classmethod
    def from_multibase(cls, text: str) -> Multihash:
        """Parse the text form (``f1620…``, ``F…`` or ``z…``)."""
        return cls.from_bytes(decode_multibase(text))

    def to_bytes(self) -> bytes:
        """The binary multihash, as stored in ODF flatbuffers ``[ubyte]`` hash fields."""
        if self.code == Multicodec.SHA3_256 and len(self.digest) == 32:
            return _SHA3_PREFIX + self.digest
        if self.code == Multicodec.ARROW0_SHA3_256 and len(self.digest) == 32:
            return _ARROW0_PREFIX + self.digest
        return (
            bytes(varint.encode(self.code)) + bytes(varint.encode(len(self.digest))) + self.digest
        )

    def to_multibase(self) -> str:
        """kamu's text form: multibase base16 of the binary multihash."""
        return encode_multibase_base16(self.to_bytes())

    def to_multibase_base58(self) -> str:
        """The base58btc text form (``z…``)."""
        return encode_multibase_base58(self.to_bytes())

    def short(self) -> str:
        """kamu's short display form: the last 8 hex characters."""
        return self.to_multibase()[-8:]

    def __str__(self) -> str:
        return self.to_multibase()

    def __repr__(self) -> str:
        return f"Multihash({self.to_multibase()})"


# The slots' descriptors: setting through them skips ``object.__setattr__``'s name lookup.
_set_code = vars(Multihash)["code"].__set__
_set_digest = vars(Multihash)["digest"].__set__
_sha3_256 = hashlib.sha3_256
