"""The work runner: durable work items (verify, publish, dispute) claimed and run by N workers.

Work items live in the state (SQLite): a node killed mid-item resumes it at its next start
(claims of a dead process are released). The retry policy is here and nowhere else: a failed
item is retried with capped exponential backoff and jitter up to ``max_attempts`` times, and an
item that is only *waiting* (:class:`~node.app.errors.RetryLater`: an input not pulled yet, a
source down) gets four times as many rounds. Items of one dataset never run concurrently.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field

from node.app.backoff import backoff_ns
from node.app.errors import RetryLater
from node.app.ports import Clock, StatePort
from node.app.rows import WorkItem

log = logging.getLogger("odf_node.work")

WorkHandler = Callable[[WorkItem], Awaitable[None]]


@dataclass(frozen=True)
class RetryPolicy:
    """When a failed work item runs again."""

    max_attempts: int = 8
    base_s: float = 5.0
    cap_s: float = 600.0
    waiting_factor: int = 4

    def next_attempt_ns(
        self, item: WorkItem, error: Exception, now_ns: int, rand: Callable[[], float]
    ) -> int | None:
        """When to retry ``item`` after ``error`` (None: give up)."""
        limit = self.max_attempts * (self.waiting_factor if isinstance(error, RetryLater) else 1)
        if item.attempts >= limit:
            return None
        return now_ns + backoff_ns(item.attempts, self.base_s, self.cap_s, rand=rand)


@dataclass(eq=False)
class WorkRunner:
    """Claims runnable items and runs their handlers; see the module docstring."""

    state: StatePort
    clock: Clock
    policy: RetryPolicy
    rand: Callable[[], float]
    _: KW_ONLY
    idle_poll_s: float = 1.0
    _handlers: dict[str, WorkHandler] = field(init=False, default_factory=dict)
    _wake: asyncio.Event = field(init=False, default_factory=asyncio.Event)
    running: dict[int, str] = field(init=False, default_factory=dict)

    def handle(self, kind: str, handler: WorkHandler) -> None:
        """Run items of ``kind`` with ``handler``."""
        self._handlers[kind] = handler

    def kick(self) -> None:
        """Wake the workers (new work was queued)."""
        self._wake.set()

    async def worker(self) -> None:
        """One worker: claim, run, repeat (forever; cancel to stop)."""
        while True:
            busy = set(self.running.values())
            item = await self.state.claim(self.clock(), exclude_dids=busy)
            if item is None:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.idle_poll_s)
                continue
            self.running[item.id] = item.did
            try:
                await self.run_item(item)
            finally:
                self.running.pop(item.id, None)
                self._wake.set()

    async def run_item(self, item: WorkItem) -> None:
        """Run one claimed item and record its outcome."""
        handler = self._handlers.get(item.kind)
        if handler is None:
            await self.state.fail(item.id, f"unknown work kind {item.kind!r}", None)
            return
        log.info("work #%d %s %s (attempt %d)", item.id, item.kind, item.did, item.attempts)
        try:
            await handler(item)
        except asyncio.CancelledError:
            raise  # shutdown: the claim is released at the next start
        except Exception as e:
            retry = self.policy.next_attempt_ns(item, e, self.clock(), self.rand)
            msg = str(e) or type(e).__name__
            log.warning(
                "work #%d %s failed: %s (%s)",
                item.id,
                item.kind,
                msg,
                "will retry" if retry else "giving up",
            )
            await self.state.fail(item.id, msg, retry)
            await self.state.log_event(
                f"{item.kind}.error", item.did, {"error": msg, "final": retry is None}
            )
            return
        await self.state.complete(item.id)
        log.info("work #%d %s %s done", item.id, item.kind, item.did)


async def prune_finished_work(state: StatePort, now_ns: int, keep_days: float) -> int:
    """Delete work items finished more than ``keep_days`` ago (0: keep all); how many went."""
    if keep_days <= 0:
        return 0
    n = await state.prune_work(now_ns - int(keep_days * 86_400 * 1_000_000_000))
    if n:
        log.info("pruned %d work items finished more than %g days ago", n, keep_days)
    return n


__all__ = ["RetryPolicy", "WorkHandler", "WorkRunner", "prune_finished_work"]
