"""Dataset and node identity: ``did:odf`` identifiers, ed25519 keys and signatures.

A ``did:odf`` DID *is* the dataset's ed25519 public key (``did:odf:`` + multibase base16 of
``ed01 || pubkey``), so anyone can check a signature by the dataset owner without any PKI.
"""

from coordinator.identity.dataset_id import DatasetId, new_seeded_ed25519_bytes
from coordinator.identity.keys import (
    PrivateKey,
    generate_private_key,
    load_private_key,
    save_private_key,
    sign,
    verify_signature,
)

__all__ = [
    "DatasetId",
    "PrivateKey",
    "generate_private_key",
    "load_private_key",
    "new_seeded_ed25519_bytes",
    "save_private_key",
    "sign",
    "verify_signature",
]
