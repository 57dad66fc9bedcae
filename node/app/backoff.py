"""Retry delays for the work queue: exponential backoff with full jitter.

"Full jitter" (delay drawn uniformly from [0, min(cap, base * 2**(attempts-1))]) spreads the
retries of many items that failed together, e.g. when an IPFS gateway was down for a minute.
"""

from __future__ import annotations

from collections.abc import Callable

# 2**60 s is far above any cap; bounding the exponent keeps huge attempt counts cheap.
_MAX_EXPONENT = 60


def backoff_ns(
    attempts: int,
    base_s: float = 2.0,
    cap_s: float = 600.0,
    *,
    rand: Callable[[], float],
) -> int:
    """Delay in nanoseconds before retry number ``attempts`` (>= 1) with full jitter.

    ``rand`` returns a float in [0, 1) (e.g. ``random.Random(seed).random``); it is injected
    so callers and tests control randomness. Add the result to the clock to get ``retry_at_ns``.
    """
    if attempts < 1:
        raise ValueError(f"attempts must be >= 1, got {attempts}")
    if base_s <= 0 or cap_s <= 0:
        raise ValueError("base_s and cap_s must be positive")
    ceiling_s = min(cap_s, base_s * 2.0 ** min(attempts - 1, _MAX_EXPONENT))
    r = rand()
    if not 0.0 <= r <= 1.0:
        raise ValueError(f"rand() must return a value in [0, 1], got {r}")
    return int(r * ceiling_s * 1_000_000_000)
