"""JSON-RPC error codes and the one place where exceptions become JSON-RPC error objects.

Code below the RPC boundary raises :class:`coordinator.errors.OdfNodeError` subclasses; each
class names its *kind* in the ``rpc_code`` class attribute (inherited, so a family shares its
base's kind and a subclass may override it). :func:`error_object` is the only reader of that
attribute. Handlers that need a specific code raise :class:`RpcError` directly.

Code table (also in ``docs/rpc.md``; keep the two in sync):

====== ===================== ===========================================================
code   name                  meaning
====== ===================== ===========================================================
-32700 PARSE_ERROR           body is not valid JSON (or not UTF-8)
-32600 INVALID_REQUEST       not a JSON-RPC 2.0 request object; empty batch
-32601 METHOD_NOT_FOUND      no such method
-32602 INVALID_PARAMS        params do not match the method's parameter spec
-32603 INTERNAL_ERROR        unexpected failure (details are logged, never sent)
-32000 NODE_ERROR            a deliberate node error with no more specific code
-32001 NOT_FOUND             dataset / block / ref / push source does not exist
-32002 INVALID_INPUT         input or query cannot be decoded / ingested / planned
-32003 CONFLICT              already exists, diverged heads, CAS failure, chain rule
-32004 UNAVAILABLE           network, source or engine unavailable: retry later
-32005 VERIFICATION_FAILED   hash / signature / proof / served object does not verify
-32010 UNAUTHORIZED          missing or wrong token
-32011 FORBIDDEN             foreign Host or Origin header
-32012 PAYLOAD_TOO_LARGE     request body exceeds the configured limit
-32013 BATCH_TOO_LARGE       more requests in a batch than the configured limit
====== ===================== ===========================================================
"""

from __future__ import annotations

import logging
from typing import Any, Final

from coordinator.errors import (
    CONFLICT,
    INVALID_INPUT,
    NODE_ERROR,
    NOT_FOUND,
    UNAVAILABLE,
    VERIFICATION_FAILED,
    OdfNodeError,
)

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
UNAUTHORIZED: Final = -32010
FORBIDDEN: Final = -32011
PAYLOAD_TOO_LARGE: Final = -32012
BATCH_TOO_LARGE: Final = -32013

CODE_MESSAGES: Final[dict[int, str]] = {
    PARSE_ERROR: "Parse error",
    INVALID_REQUEST: "Invalid Request",
    METHOD_NOT_FOUND: "Method not found",
    INVALID_PARAMS: "Invalid params",
    INTERNAL_ERROR: "Internal error",
    NODE_ERROR: "Node error",
    NOT_FOUND: "Not found",
    INVALID_INPUT: "Invalid input",
    CONFLICT: "Conflict",
    UNAVAILABLE: "Unavailable, retry later",
    VERIFICATION_FAILED: "Verification failed",
    UNAUTHORIZED: "Unauthorized",
    FORBIDDEN: "Forbidden host or origin",
    PAYLOAD_TOO_LARGE: "Payload too large",
    BATCH_TOO_LARGE: "Too many requests in batch",
}
"""Canonical short message per code (used in the OpenRPC document and for generic errors)."""

_log = logging.getLogger(__name__)


class RpcError(OdfNodeError):
    """An error a handler (or the server) raises to answer with an exact JSON-RPC error.

    ``data`` must be JSON-serialisable; it is sent to the client as the error's ``data`` member.
    """

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_json(self) -> dict[str, Any]:
        """The JSON-RPC error object."""
        obj: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            obj["data"] = self.data
        return obj


class TooManyTopics(RpcError):
    """``rpc.subscribe`` would give one WebSocket more topics than the server's limit (-32602).

    The call is refused whole (nothing is added); ``data`` names the limit, the socket's count
    and how many topics the call asked for that the socket lacks (a call of more topics than
    the limit is refused by its length: ``requested`` is then its length).
    """

    def __init__(self, limit: int, have: int, requested: int) -> None:
        super().__init__(
            INVALID_PARAMS,
            f"a WebSocket may subscribe to at most {limit} topics: it has {have}, "
            f"the call asks for {requested} more",
            {
                "type": "TooManyTopics",
                "param": "topics",
                "limit": limit,
                "subscribed": have,
                "requested": requested,
            },
        )


# Foreign (non-OdfNodeError) exception types that still deserve a specific code, e.g. a library
# error a handler lets through on purpose. Deliberate errors never need an entry: they carry
# their kind in ``rpc_code``.
_FOREIGN: dict[type[BaseException], int] = {}


def register_error(exc_type: type[BaseException], code: int) -> None:
    """Map a foreign ``exc_type`` (and its subclasses) to ``code``.

    Only for exception types outside the :class:`OdfNodeError` tree (an
    :class:`OdfNodeError` subclass states its code in ``rpc_code``). A registered foreign type is
    answered with its code and the code's canonical message, so that foreign exception text never
    leaks.
    """
    if issubclass(exc_type, OdfNodeError):
        raise TypeError(f"{exc_type.__name__} is an OdfNodeError: set its rpc_code instead")
    _FOREIGN[exc_type] = code


def code_for(exc: BaseException) -> int:
    """The JSON-RPC code for ``exc``: its ``rpc_code``, a registered foreign code, else -32603."""
    if isinstance(exc, RpcError):
        return exc.code
    if isinstance(exc, OdfNodeError):
        return type(exc).rpc_code
    for cls in type(exc).__mro__:
        code = _FOREIGN.get(cls)
        if code is not None:
            return code
    return INTERNAL_ERROR


def error_object(exc: BaseException, *, method: str | None = None) -> dict[str, Any]:
    """Turn ``exc`` into a JSON-RPC error object (``{"code", "message", "data"?}``).

    Deliberate errors (:class:`OdfNodeError`) keep their message and say their class name in
    ``data.type`` (plus ``rule`` / ``reason`` / ``object`` when present) so clients can branch
    without parsing text. Anything else is a bug: it is logged with its traceback and answered
    with the generic -32603 message.
    """
    if isinstance(exc, RpcError):
        return exc.to_json()
    code = code_for(exc)
    if code == INTERNAL_ERROR:
        _log.error("RPC method %s failed unexpectedly", method, exc_info=exc)
        return {"code": INTERNAL_ERROR, "message": CODE_MESSAGES[INTERNAL_ERROR]}
    data: dict[str, Any] = {"type": type(exc).__name__}
    if not isinstance(exc, OdfNodeError):
        # A registered foreign type: its code is meaningful, its text may not be safe to send.
        _log.warning("RPC method %s failed: %r", method, exc)
        return {"code": code, "message": CODE_MESSAGES.get(code, "Error"), "data": data}
    for attr in ("rule", "reason", "object"):
        value = getattr(exc, attr, None)
        if isinstance(value, str):
            data[attr] = value
    return {"code": code, "message": str(exc) or CODE_MESSAGES[code], "data": data}


def error_response(
    code: int, message: str | None = None, *, id: Any = None, data: Any = None
) -> dict[str, Any]:
    """A complete JSON-RPC error response with ``code`` and the canonical (or given) message."""
    err: dict[str, Any] = {"code": code, "message": message or CODE_MESSAGES.get(code, "Error")}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "error": err, "id": id}


__all__ = [
    "BATCH_TOO_LARGE",
    "CODE_MESSAGES",
    "CONFLICT",
    "FORBIDDEN",
    "INTERNAL_ERROR",
    "INVALID_INPUT",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "NODE_ERROR",
    "NOT_FOUND",
    "PARSE_ERROR",
    "PAYLOAD_TOO_LARGE",
    "UNAUTHORIZED",
    "UNAVAILABLE",
    "VERIFICATION_FAILED",
    "RpcError",
    "TooManyTopics",
    "code_for",
    "error_object",
    "error_response",
    "register_error",
]
