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


class GcPauses:
    """Times the interpreter's cyclic garbage collections (``gc.callbacks``) into ``observe``, and
    keeps full collections short.

    A collection holds the GIL until it is done, so every thread, the event loop included,
    waits for it. A full (generation 2) collection walks every container object the daemon
    holds; measured under the soak benchmark's load (1,000 datasets, 50 announcements/s) they
    came every ~13 s and took 0.25–0.5 s each, the daemon's worst RPC latencies. So what
    survives a full collection is frozen (``gc.freeze``: later collections skip it) and the
    next one walks only what was promoted since. Frozen objects that later become cyclic
    garbage are reclaimed by a full collection of everything every ``full_every_s`` (default
    15 min: what such garbage can pile up is bounded by a quarter of an hour's worth), the one
    long pause left. Objects freed by reference counting (nearly all) are freed at once either
    way.
    """

    def __init__(
        self,
        observe: Callable[[int, float], None],
        *,
        full_every_s: float = 15 * 60.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._observe = observe
        self._t0 = 0.0
        self._full_every_s = full_every_s
        self._monotonic = monotonic
        self._last_full = monotonic()
        self.full_since_freeze = False

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        elif phase == "stop":
            generation = info.get("generation", -1)
            self._observe(generation, time.perf_counter() - self._t0)
            if generation == 2:
                self.full_since_freeze = True

    def install(self, *, freeze: bool = True) -> None:
        """Start timing collections (and freeze the heap so far)."""
        import gc

        if self not in gc.callbacks:
            gc.callbacks.append(self)
        if freeze:
            gc.collect()
            gc.freeze()
            self._last_full = self._monotonic()
            self.full_since_freeze = False

    def maintain(self) -> None:
        """Freeze what survived the last full collection; every ``full_every_s`` collect all.

        Called from the daemon's housekeeping (every few seconds), never from a collection.
        """
        import gc

        if self._monotonic() - self._last_full >= self._full_every_s:
            gc.unfreeze()
            gc.collect()
            gc.freeze()
            self._last_full = self._monotonic()
            self.full_since_freeze = False
        elif self.full_since_freeze:
            gc.freeze()
            self.full_since_freeze = False

    def uninstall(self) -> None:
        """Stop timing (the frozen objects stay frozen)."""
        import gc

        if self in gc.callbacks:
            gc.callbacks.remove(self)
