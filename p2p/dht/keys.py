"""DHT keys: the SHA-256 of a peer id's or a dataset DID's bytes, compared by XOR distance.

As in libp2p's Kademlia (go-libp2p-kad-dht, ``kbucket``), a key is a 256-bit integer and two keys
are close when their XOR is small; the bucket a peer falls in is the length of the prefix its key
shares with the table owner's. Hashing the identifier first spreads the keys evenly whatever the
identifiers look like, so a peer cannot choose where it lands by choosing a name.
"""

from __future__ import annotations

import hashlib
from typing import NewType

KEY_BITS = 256

DhtKey = NewType("DhtKey", int)
"""A position in the key space: ``0 <= key < 2**256``."""


def key_of(identifier: bytes) -> DhtKey:
    """The key of a peer id's or a dataset DID's bytes (SHA-256, big-endian)."""
    return DhtKey(int.from_bytes(hashlib.sha256(identifier).digest(), "big"))


def distance(a: DhtKey, b: DhtKey) -> int:
    """Kademlia's XOR distance."""
    return a ^ b


def shared_prefix_len(a: DhtKey, b: DhtKey) -> int:
    """How many leading bits ``a`` and ``b`` share (256 for equal keys)."""
    return KEY_BITS - (a ^ b).bit_length()


__all__ = ["KEY_BITS", "DhtKey", "distance", "key_of", "shared_prefix_len"]
