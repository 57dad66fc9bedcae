"""The daemon's ``pipeline`` service: the work-queue workers, the source follower, the flow
scheduler (docs/flows.md), the event-loop monitor, and housekeeping every few seconds (queue
depth metrics, trust timeouts, event and finished-work pruning, returning freed heap to the
operating system).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from coordinator.errors import OdfNodeError
from node.app.flows import POLL, TRANSFORM
from node.app.metrics import NodeMetrics
from node.app.ports import StatePort
from node.app.work import prune_finished_work
from node.config import NodeConfig
from node.daemon.engine_service import EngineService
from node.daemon.loop_monitor import GcPauses, watch_event_loop
from node.daemon.services import ServiceGroup
from procutil.heap import trim_heap

if TYPE_CHECKING:
    from node.daemon.wiring import Wiring

log = logging.getLogger("odf_node.daemon")

_TICK_S = 5.0
_PRUNE_EVERY_NS = 600 * 1_000_000_000
# A node that keeps finished work less than ~1.7 h (a compressed-time benchmark) prunes every
# tenth of that window instead, so its state file still levels off at about one window of work.
_PRUNE_WINDOW_FRACTION = 0.1
_TRIM_HEAP_EVERY_NS = 60 * 1_000_000_000  # procutil/heap.py
_KEPT_EVENTS = 100_000


@dataclass(eq=False, kw_only=True)
class Pipeline:
    """The ``pipeline`` service (see the module docstring)."""

    name = "pipeline"

    config: NodeConfig
    group: ServiceGroup
    state: StatePort
    metrics: NodeMetrics
    clock: Callable[[], int]
    engine: EngineService
    gc_pauses: GcPauses
    wiring: Callable[[], Wiring]

    async def start(self) -> None:
        """Spawn the workers and the loops (supervised by the group, restarted on a crash)."""
        w = self.wiring()
        for i in range(self.config.pipeline.concurrency):
            self.group.spawn(w.app.work.worker(), f"worker-{i}")
        self.group.spawn_restarting(w.follower.run, "follow")
        self.group.spawn_restarting(self._housekeeping, "housekeeping")
        self.group.spawn_restarting(self._flows, "flows")
        self.group.spawn_restarting(
            lambda: watch_event_loop(self.metrics.loop_lag.observe), "loop-monitor"
        )

    async def stop(self) -> None:
        """Nothing to release: the workers and loops are tasks of the group."""

    def _prune_every_ns(self) -> int:
        keep_ns = self.config.pipeline.keep_finished_work_days * 86_400 * 1_000_000_000
        if keep_ns <= 0:
            return _PRUNE_EVERY_NS
        return min(_PRUNE_EVERY_NS, max(5_000_000_000, int(keep_ns * _PRUNE_WINDOW_FRACTION)))

    async def _housekeeping(self) -> None:
        trust = self.wiring().trust
        last_prune: int | None = None
        last_trim = self.clock()
        prune_every_ns = self._prune_every_ns()
        while True:
            await self._sample()
            await self.state.prune_events(_KEPT_EVENTS)
            await trust.tick()
            now = self.clock()
            if now - last_trim >= _TRIM_HEAP_EVERY_NS:
                # Off the loop: it walks the heap (a few ms); glibc serialises it per arena.
                await asyncio.to_thread(trim_heap)
                last_trim = now
            if last_prune is None or now - last_prune >= prune_every_ns:
                await prune_finished_work(
                    self.state, now, self.config.pipeline.keep_finished_work_days
                )
                last_prune = now
            await asyncio.sleep(_TICK_S)

    async def _sample(self) -> None:
        """Metrics that are read, not counted: history, queue depths, engine, GC."""
        m = self.metrics
        m.sample_history(self.clock())
        pending = await self.state.pending_counts()
        for kind in ("verify", "publish", "dispute", POLL, TRANSFORM):
            m.queue_depth.labels(kind).set(pending.get(kind, 0))
        engine = self.engine.created
        m.engine_running.set(1 if engine is not None and engine.running else 0)
        self.gc_pauses.maintain()

    async def _flows(self) -> None:
        """The flow scheduler (``docs/flows.md``): queue the flows that are due, every tick."""
        flows = self.wiring().flows
        while True:
            try:
                await flows.tick()
            except OdfNodeError as e:  # a bad chain or state read: log it, try next tick
                log.warning("flow scheduler: %s", e)
            await asyncio.sleep(self.config.flows.tick_s)
