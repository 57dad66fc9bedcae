"""The ODF core: identity, multiformats, metadata blocks and chains, dataset storage, data slices.

Nothing in this package performs network I/O or imports anything above it (``p2p``, ``node``,
``sim``). It is byte-compatible with kamu-cli for ODF spec v0.34.0.
"""
