"""The query workers' line protocol (:mod:`engine.query_worker`, :mod:`engine.spark_query_worker`).

One JSON request a line on stdin, one JSON answer a line on stdout, in order, until stdin closes:
``{"ok": true, "rows": N}``, or ``{"ok": false, "kind": K, "message": M}`` for a
:class:`~engine.errors.WorkerRefusal` (its kind) and for any other failure (``failed``).

An answer given inline (:class:`Answer` with ``inline``) is the line
``{"ok": true, "rows": N, "inline": B}`` followed by exactly ``B`` bytes on stdout: the rows as
one Arrow IPC stream, instead of a file the node reads back (a small answer's file cost more than
its bytes: made, mapped and removed on both sides).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.errors import WorkerRefusal

__all__ = ["Answer", "serve_lines"]


@dataclass(frozen=True)
class Answer:
    """A request's rows: their number, and when they are sent inline their Arrow IPC stream."""

    rows: int
    inline: bytes | None = None


def serve_lines(run: Callable[[dict[str, Any]], int | Answer]) -> None:
    """Answer each request line on stdin with ``run``'s rows (see the module docstring)."""
    out = sys.stdout
    for line in iter(sys.stdin.readline, ""):
        payload = b""
        try:
            got = run(json.loads(line))
            answer: dict[str, Any] = {"ok": True, "rows": got}
            if isinstance(got, Answer):
                answer["rows"] = got.rows
                if got.inline is not None:
                    payload = got.inline
                    answer["inline"] = len(payload)
        except WorkerRefusal as r:
            answer = {"ok": False, "kind": r.kind, "message": r.message}
        except Exception as e:  # the node gets every failure as an answer
            answer = {"ok": False, "kind": "failed", "message": f"{type(e).__name__}: {e}"}
        out.flush()  # whatever a request wrote as text (a streamed answer's part lines) first
        out.buffer.write(json.dumps(answer).encode() + b"\n" + payload)
        out.buffer.flush()
