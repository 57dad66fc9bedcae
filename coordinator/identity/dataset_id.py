"""The ``did:odf`` dataset identifier (ODF spec §Dataset Identity; kamu ``DatasetID``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from coordinator.errors import InvalidDatasetId, InvalidMultihash
from coordinator.multiformats import (
    decode_multibase,
    encode_multibase_base16,
    encode_multibase_base58,
)

ED25519_PUB_PREFIX: Final = b"\xed\x01"  # varint(0xed), the ed25519-pub multicodec
ED25519_KEY_LEN: Final = 32
DID_ODF_PREFIX: Final = "did:odf:"
DID_KEY_PREFIX: Final = "did:key:"
_MASK64: Final = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class DatasetId:
    """A dataset identity: an ed25519 public key.

    Binary form (``Seed.dataset_id``, ``ExecuteTransformInput.dataset_id``): ``ed01 || key``,
    34 bytes. Text form: ``did:odf:f`` + hex of the binary form.
    """

    public_key: bytes

    def __post_init__(self) -> None:
        if len(self.public_key) != ED25519_KEY_LEN:
            raise InvalidDatasetId(
                f"ed25519 public key must be {ED25519_KEY_LEN} bytes, got {len(self.public_key)}"
            )

    @classmethod
    def from_bytes(cls, data: bytes) -> DatasetId:
        """Parse the 34-byte binary form ``ed01 || key``."""
        data = bytes(data)
        if len(data) != len(ED25519_PUB_PREFIX) + ED25519_KEY_LEN:
            raise InvalidDatasetId(f"dataset id must be 34 bytes, got {len(data)}")
        if data[:2] != ED25519_PUB_PREFIX:
            raise InvalidDatasetId(
                f"unsupported key type 0x{data[:2].hex()}: only ed25519-pub (ed01) is supported"
            )
        return cls(data[2:])

    @classmethod
    def from_multibase(cls, text: str) -> DatasetId:
        """Parse the multibase form (``fed01…`` or ``z6Mk…``)."""
        try:
            return cls.from_bytes(decode_multibase(text))
        except InvalidMultihash as e:
            raise InvalidDatasetId(str(e)) from e

    @classmethod
    def from_did_str(cls, text: str) -> DatasetId:
        """Parse ``did:odf:<multibase>``; the multibase may be base16 (``f``) or base58 (``z``)."""
        if not text.startswith(DID_ODF_PREFIX):
            raise InvalidDatasetId(f"not a did:odf identifier: {text!r}")
        return cls.from_multibase(text[len(DID_ODF_PREFIX) :])

    @classmethod
    def from_did_key(cls, text: str) -> DatasetId:
        """Parse a ``did:key:z6Mk…`` ed25519 DID."""
        if not text.startswith(DID_KEY_PREFIX):
            raise InvalidDatasetId(f"not a did:key identifier: {text!r}")
        return cls.from_multibase(text[len(DID_KEY_PREFIX) :])

    @classmethod
    def parse(cls, text: str) -> DatasetId:
        """Parse any accepted text form: ``did:odf:…``, ``did:key:…`` or bare multibase."""
        if text.startswith(DID_ODF_PREFIX):
            return cls.from_did_str(text)
        if text.startswith(DID_KEY_PREFIX):
            return cls.from_did_key(text)
        return cls.from_multibase(text)

    @classmethod
    def new_seeded_ed25519(cls, seed: bytes) -> DatasetId:
        """kamu's *test-only* deterministic ID (``DatasetID::new_seeded_ed25519``).

        Not a real key pair: the bytes are random-looking but no private key exists. Used to
        reproduce kamu's golden vectors.
        """
        return cls(new_seeded_ed25519_bytes(seed))

    def to_bytes(self) -> bytes:
        """The 34-byte binary form stored in blocks."""
        return ED25519_PUB_PREFIX + self.public_key

    def as_multibase(self) -> str:
        """``fed01…`` (base16 multibase of the binary form)."""
        return encode_multibase_base16(self.to_bytes())

    def as_did_str(self) -> str:
        """``did:odf:fed01…``."""
        return DID_ODF_PREFIX + self.as_multibase()

    def as_did_key(self) -> str:
        """``did:key:z6Mk…`` (the same bytes in base58btc)."""
        return DID_KEY_PREFIX + encode_multibase_base58(self.to_bytes())

    def __str__(self) -> str:
        return self.as_did_str()

    def __repr__(self) -> str:
        return f"DatasetId({self.as_did_str()})"


def _rotl(x: int, k: int) -> int:
    return ((x << k) | (x >> (64 - k))) & _MASK64


def new_seeded_ed25519_bytes(seed: bytes) -> bytes:
    """32 pseudo-random bytes from rand 0.8 ``SmallRng::from_seed`` (Xoshiro256++ on 64-bit).

    The seed is zero-padded (or truncated) to 32 bytes and read as four little-endian u64 words;
    ``fill_bytes`` emits one little-endian ``next_u64`` per 8 bytes.
    """
    padded = (bytes(seed) + b"\x00" * 32)[:32]
    s = [int.from_bytes(padded[i : i + 8], "little") for i in range(0, 32, 8)]
    if not any(s):
        # rand_xoshiro replaces an all-zero seed with seed_from_u64(0) (SplitMix64).
        s = _splitmix64_words(0, 4)
    out = bytearray()
    for _ in range(4):
        result = (_rotl((s[0] + s[3]) & _MASK64, 23) + s[0]) & _MASK64
        t = (s[1] << 17) & _MASK64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = _rotl(s[3], 45)
        out += result.to_bytes(8, "little")
    return bytes(out)


def _splitmix64_words(state: int, n: int) -> list[int]:
    words = []
    for _ in range(n):
        state = (state + 0x9E3779B97F4A7C15) & _MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        words.append(z ^ (z >> 31))
    return words
