"""Event-loop lag: how late the daemon's single asyncio loop runs what is due.

Everything the daemon does (gossip validation, pulls, the pipeline, RPC) shares one loop, so a
callback that blocks it delays every RPC answer and every gossip reply. The monitor schedules
a wake-up every ``interval_s`` and records how late it came; the figure goes to the
``odf_event_loop_lag_seconds`` histogram, and a lag beyond ``warn_s`` is logged (at most once a
minute, with the worst lag seen since the last warning), which is where an operator looks
first when ``node.status`` is slow.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


async def watch_event_loop(
    observe: Callable[[float], None],
    *,
    interval_s: float = 0.5,
    warn_s: float = 1.0,
    warn_every_s: float = 60.0,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> None:
    """Run until cancelled, calling ``observe(lag_seconds)`` after every interval."""
    last_warn: float | None = None
    worst = 0.0
    while True:
        t0 = monotonic()
        await sleep(interval_s)
        lag = max(0.0, monotonic() - t0 - interval_s)
        observe(lag)
        if lag >= warn_s:
            worst = max(worst, lag)
            now = monotonic()
            if last_warn is None or now - last_warn >= warn_every_s:
                log.warning(
                    "event loop blocked: a %.1f s timer ran %.2f s late (worst since the last "
                    "warning); RPC and gossip were delayed as long",
                    interval_s,
                    worst,
                )
                last_warn, worst = now, 0.0
