"""The errors both engines (DataFusion and Spark) and their query workers raise for a refused query.

One definition each, so a caller catching a refusal does not depend on which engine ran.
"""

from __future__ import annotations

from coordinator.errors import INVALID_INPUT, OdfNodeError


class SandboxViolation(OdfNodeError):
    """The query is not allowed to run; ``reason`` says why."""

    rpc_code = INVALID_INPUT

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class InvalidQuery(OdfNodeError):
    """The query or its output breaks the engine's rules."""

    rpc_code = INVALID_INPUT


class WorkerRefusal(Exception):
    """An answer a query worker gives instead of rows.

    ``kind`` is one of the refusal kinds of the worker's protocol (see the docstrings of
    :mod:`engine.query_worker` and :mod:`engine.spark_query_worker`); ``message`` says why.
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


__all__ = ["InvalidQuery", "SandboxViolation", "WorkerRefusal"]
