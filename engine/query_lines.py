"""The query workers' line protocol (:mod:`engine.query_worker`, :mod:`engine.spark_query_worker`).

One JSON request a line on stdin, one JSON answer a line on stdout, in order, until stdin closes:
``{"ok": true, "rows": N}``, or ``{"ok": false, "kind": K, "message": M}`` for a
:class:`~engine.errors.WorkerRefusal` (its kind) and for any other failure (``failed``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from engine.errors import WorkerRefusal

__all__ = ["serve_lines"]


def serve_lines(run: Callable[[dict[str, Any]], int]) -> None:
    """Answer each request line on stdin with ``run``'s row count (see the module docstring)."""
    for line in iter(sys.stdin.readline, ""):
        try:
            answer: dict[str, Any] = {"ok": True, "rows": run(json.loads(line))}
        except WorkerRefusal as r:
            answer = {"ok": False, "kind": r.kind, "message": r.message}
        except Exception as e:  # the node gets every failure as an answer
            answer = {"ok": False, "kind": "failed", "message": f"{type(e).__name__}: {e}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
