"""The ODF core: identity, multiformats, metadata blocks and chains, dataset storage, data slices.

Nothing in this package performs network I/O or imports anything above it (``p2p``, ``node``,
``sim``). It is byte-compatible with kamu-cli for ODF spec v0.34.0.
"""

from coordinator import flatbuffers_runtime as _flatbuffers_runtime

# Before any module of the core imports ``flatbuffers``: it would otherwise import numpy.
_flatbuffers_runtime.load()
