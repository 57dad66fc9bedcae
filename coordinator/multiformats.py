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
_MAX_DIGEST_LEN: Final = 64


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
        return cls(Multicodec.SHA3_256, hashlib.sha3_256(data).digest())

    @classmethod
    def from_bytes(cls, data: bytes) -> Multihash:
        """Parse the binary form ``varint(code) || varint(len) || digest``.

        Raises:
            InvalidMultihash: truncated, trailing bytes, or unsupported code.
        """
        data = bytes(data)
        # Fast path: nearly every hash in ODF metadata is sha3-256.
        if len(data) == 34 and data[:2] == _SHA3_PREFIX:
            return cls(Multicodec.SHA3_256, data[2:])
        try:
            code, n1, _ = varint.decode_raw(data)
            length, n2, _ = varint.decode_raw(data[n1:])
        except Exception as e:  # the package raises plain ValueError/IndexError variants
            raise InvalidMultihash(f"malformed multihash varint: {e}") from e
        digest = data[n1 + n2 :]
        if len(digest) != length:
            raise InvalidMultihash(
                f"multihash digest length {len(digest)} does not match declared {length}"
            )
        return cls(code, digest)

    @classmethod
    def from_multibase(cls, text: str) -> Multihash:
        """Parse the text form (``f1620…``, ``F…`` or ``z…``)."""
        return cls.from_bytes(decode_multibase(text))

    def to_bytes(self) -> bytes:
        """The binary multihash, as stored in ODF flatbuffers ``[ubyte]`` hash fields."""
        if self.code == Multicodec.SHA3_256 and len(self.digest) == 32:
            return _SHA3_PREFIX + self.digest
        return bytes(varint.encode(self.code)) + bytes(varint.encode(len(self.digest))) + self.digest

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
