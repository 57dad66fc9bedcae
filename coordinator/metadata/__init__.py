"""ODF metadata: the typed event model, FlatBuffers and YAML serde, block hashing.

Public API used across the project::

    decode_block(data: bytes) -> MetadataBlock
    encode_block(block, version: int = 2) -> bytes
    block_hash(data: bytes) -> Multihash   # str() is the multibase form f1620…
"""

from coordinator.metadata.flatbuffers_serde import (
    BLOCK_VERSION_V2,
    BLOCK_VERSION_V3,
    DEFAULT_BLOCK_VERSION,
    SUPPORTED_BLOCK_VERSIONS,
    block_hash,
    decode_block,
    decode_manifest,
    encode_block,
    set_write_form,
    write_form,
)
from coordinator.metadata.model import *  # noqa: F403 - the model is the package's vocabulary
from coordinator.metadata.model import MetadataBlock
from coordinator.metadata.timestamp import Timestamp

__all__ = [
    "BLOCK_VERSION_V2",
    "BLOCK_VERSION_V3",
    "DEFAULT_BLOCK_VERSION",
    "SUPPORTED_BLOCK_VERSIONS",
    "MetadataBlock",
    "Timestamp",
    "block_hash",
    "decode_block",
    "decode_manifest",
    "encode_block",
    "set_write_form",
    "write_form",
]
