"""DHT keys: the SHA-256 of a peer id's or a dataset DID's bytes, compared by XOR distance.

As in libp2p's Kademlia (go-libp2p-kad-dht, ``kbucket``), a key is a 256-bit integer and two keys
are close when their XOR is small; the bucket a peer falls in is the length of the prefix its key
shares with the table owner's. Hashing the identifier first spreads the keys evenly whatever the
identifiers look like, so a peer cannot choose where it lands by choosing a name.

A dataset's key is :func:`dataset_key` (of its ``did:odf:`` string) and a peer's is
:func:`peer_key` (of its libp2p peer id): the daemon (``p2p/dht_service.py``) and the simulator
(``sim/internet.py``) both use these two, so their keys cannot drift apart.
"""

from __future__ import annotations

import hashlib
from typing import NewType

from coordinator.identity import DatasetId

KEY_BITS = 256

DhtKey = NewType("DhtKey", int)
"""A position in the key space: ``0 <= key < 2**256``."""


def key_of(identifier: bytes) -> DhtKey:
    """The key of a peer id's or a dataset DID's bytes (SHA-256, big-endian)."""
    return DhtKey(int.from_bytes(hashlib.sha256(identifier).digest(), "big"))


def dataset_key(did: DatasetId) -> DhtKey:
    """The DHT key of a dataset: the SHA-256 of its ``did:odf:`` string."""
    return key_of(did.as_did_str().encode())


def peer_key(peer_id: str) -> DhtKey:
    """The DHT key of a libp2p peer id (the SHA-256 of its base58 string)."""
    return key_of(peer_id.encode())


def distance(a: DhtKey, b: DhtKey) -> int:
    """Kademlia's XOR distance."""
    return a ^ b


def shared_prefix_len(a: DhtKey, b: DhtKey) -> int:
    """How many leading bits ``a`` and ``b`` share (256 for equal keys)."""
    return KEY_BITS - (a ^ b).bit_length()


__all__ = [
    "KEY_BITS",
    "DhtKey",
    "dataset_key",
    "distance",
    "key_of",
    "peer_key",
    "shared_prefix_len",
]
