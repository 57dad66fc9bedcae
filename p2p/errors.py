"""Errors raised by the gossip layer.

All derive from :class:`coordinator.errors.OdfNodeError`; they may later move into
``coordinator/errors.py``.
"""

from __future__ import annotations

from coordinator.errors import (
    INVALID_INPUT,
    UNAVAILABLE,
    VERIFICATION_FAILED,
    DecodeError,
    EncodeError,
    OdfNodeError,
)


class P2PError(OdfNodeError):
    """Base of errors specific to the gossip layer."""


class WireDecodeError(DecodeError, P2PError):
    """Bytes are not a valid, canonical gossip message.

    ``reason`` is a stable short identifier (e.g. ``"truncated"``, ``"trailing-bytes"``,
    ``"bad-magic"``) so callers and tests can branch on it without parsing the text.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"[{reason}] {message}")
        self.reason = reason


class WireEncodeError(EncodeError, P2PError):
    """A gossip message cannot be encoded (a field is out of range or the result is too large)."""


class InvalidEquivocationProof(P2PError):
    """An equivocation proof does not prove that the dataset owner signed a fork."""

    rpc_code = VERIFICATION_FAILED


class EnvelopeError(P2PError):
    """A DSSE envelope (an exported in-toto statement) does not verify or is malformed."""

    rpc_code = VERIFICATION_FAILED


class InvalidPeerAddress(P2PError):
    """A string is not a peer multiaddr (``/ip4/<addr>/tcp/<port>/p2p/<peer id>``)."""

    rpc_code = INVALID_INPUT


class NetworkNotIsolated(P2PError):
    """The host refuses to start: a non-loopback interface or address is present or configured."""

    rpc_code = UNAVAILABLE


__all__ = [
    "EnvelopeError",
    "InvalidEquivocationProof",
    "InvalidPeerAddress",
    "NetworkNotIsolated",
    "P2PError",
    "WireDecodeError",
    "WireEncodeError",
]
