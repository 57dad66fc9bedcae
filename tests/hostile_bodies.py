"""Adversarial JSON-RPC bodies for the body scanner (issue 26), shared by tests and benchmarks.

Each shape once cost, or could cost, time that grows faster than the body: the former nesting
check (``node/rpc/server.py``) removed string literals with ``"(?:[^"\\]|\\.)*"``, which on an
unterminated string of escaped quotes fails and is retried from every later quote (a 40 KB body
took 9.4 s, 1 MiB about an hour). More than 64 brackets make the server run the scan at all, so
every shape opens with 65 of them (or is made of brackets). :func:`adversarial_body` builds one
shape at an exact size; :func:`adversarial_bodies` strategy draws them at small sizes for the
fuzz suite.
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import strategies as st

OPEN: bytes = b"[" * 65
"""65 brackets: over ``MAX_JSON_DEPTH``, so the server scans the body."""

SHAPES: dict[str, Callable[[int], bytes]] = {
    # The body: an unterminated string of escaped quotes.
    "escaped-quotes": lambda n: OPEN + b'"' + b'\\"' * n,
    # The same inside a request object, the string left open.
    "request-escaped-quotes": lambda n: (
        (b'{"jsonrpc": "2.0", "id": 1, "method": "node.status", "params": ' + OPEN + b'"')
        + b'\\"' * n
    ),
    # Backslashes only: every character starts an escape.
    "backslashes": lambda n: OPEN + b'"' + b"\\" * (2 * n),
    # Quotes and escaped quotes alternating, never closed for long.
    "quote-escape-runs": lambda n: OPEN + b'"\\"' * (2 * n // 3),
    # Brackets inside many short strings (each string is skipped, the brackets must not count).
    "brackets-in-strings": lambda n: OPEN + b'"[{\\"' * (n // 2),
    # Only opening brackets: the nesting walk must stop at depth 65, not run to the end.
    "open-brackets": lambda n: b"[" * (2 * n),
    # Empty arrays side by side: depth 1, every bracket visited.
    "empty-pairs": lambda n: b"[]" * n,
    # A slow climb: one level deeper every three characters.
    "climb": lambda n: b"[[]" * (2 * n // 3),
    # Depth 64 everywhere (the limit, accepted by the scan), then invalid.
    "chains-at-limit": lambda n: (b"[" * 64 + b"]" * 64) * max(1, n // 64),
}
"""Each shape as a function of a repeat count ``n`` (the body is about ``2 n`` bytes)."""


def adversarial_body(shape: str, size: int) -> bytes:
    """``shape`` at exactly ``size`` bytes (cut or padded with the shape's own repeats)."""
    make = SHAPES[shape]
    body = make(size // 2 + 1)
    while len(body) < size:
        body = make(size)
    return body[:size]


@st.composite
def adversarial_bodies(draw: st.DrawFn, max_size: int = 65_536) -> bytes:
    """A shape of :data:`SHAPES` at a size up to ``max_size``, sometimes with a tail of bytes."""
    shape = draw(st.sampled_from(sorted(SHAPES)))
    body = adversarial_body(shape, draw(st.integers(min_value=66, max_value=max_size)))
    if draw(st.booleans()):
        body += draw(st.sampled_from([b'"', b"]", b"}", b'"]}', b"\\", b"\xff"]))
    return body


__all__ = ["OPEN", "SHAPES", "adversarial_bodies", "adversarial_body"]
