"""Flows: datasets that update themselves (``docs/flows.md``).

A dataset's *trigger* (one per dataset, in the state's ``schedules`` table) says when the
daemon runs its flow:

* a polling root: ``every`` N seconds or on a ``cron`` expression (:mod:`node.app.cron`); the
  flow is a ``poll`` work item that runs the root's polling source once
  (:meth:`DatasetUseCases.poll`, as ``dataset pull ALIAS``) and publishes what it committed;
* a derivative: ``on_input``; the flow is a ``transform`` work item
  (:meth:`DatasetUseCases.transform`) queued when an input's stored head changes (an owned
  input after a commit, a followed one once its head is trusted: ``node/app/trust.py``), and
  publishes the step it committed.

This is kamu-node's flow system reduced to one node (kamu-node: scheduled ingest flows and
reactive transform flows). Every run is a work item (:mod:`node.app.work`), so it is durable,
retried with backoff (an unreachable source or a not-yet-trusted input waits longer, as
:class:`~node.app.errors.RetryLater`), and listed by ``odf-node flows`` and the console. Runs
coalesce: a dataset has at most one pending flow item; one that is running is never joined by a
second concurrent run (the work runner serialises a dataset's items), and a change seen while
it runs is picked up by the next tick once it is done. A failing source only delays its own
dataset's items.

:meth:`FlowUseCases.tick` is the scheduler's step, given the time: the daemon calls it every
second (``[flows] tick_s``); unit tests call it with their own clock and never sleep.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from coordinator.errors import OdfNodeError, SourceUnreachable
from coordinator.identity import DatasetId
from coordinator.metadata.timestamp import Timestamp
from coordinator.storage.repository import DatasetRepository
from node.app.cron import CronSchedule
from node.app.datasets import DatasetUseCases
from node.app.errors import InvalidArgument, RetryLater, Unavailable, UntrustedInput
from node.app.ports import Clock, StatePort
from node.app.results import FlowRunRow, FlowsResult, ScheduleRow
from node.app.rows import Schedule, WorkItem

log = logging.getLogger("odf_node.flows")

#: The work kinds of flow runs.
POLL: Final = "poll"
TRANSFORM: Final = "transform"
FLOW_KINDS: Final = (POLL, TRANSFORM)
#: The shortest ``--every``: one tick of the scheduler.
MIN_EVERY_S: Final = 1.0
#: The longest ``--every``: a year and a day. Due times are nanoseconds in a signed 64-bit
#: SQLite integer (which ends in 2262); without a bound, ``--every 107000d`` was accepted and its
#: first run's next time overflowed, and the failing write stopped every other schedule.
MAX_EVERY_S: Final = 366 * 86400.0
#: The largest due time the state can store (SQLite INTEGER).
_MAX_NS: Final = 2**63 - 1
#: How long a schedule whose step failed waits before the scheduler tries it again: a row that
#: fails on every tick would otherwise log every second.
FAILED_RETRY_S: Final = 60
_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}

__all__ = [
    "FAILED_RETRY_S",
    "FLOW_KINDS",
    "MAX_EVERY_S",
    "POLL",
    "TRANSFORM",
    "FlowUseCases",
    "parse_every",
    "require_flows",
]


def parse_every(text: str) -> float:
    """Seconds in a duration such as ``90``, ``30s``, ``15m``, ``1h``, ``1h30m``, ``1d``.

    A hand-written scanner (no regex: the text comes from a client, docs/resource-budget.md).

    Raises:
        InvalidArgument: anything else, under :data:`MIN_EVERY_S` or over :data:`MAX_EVERY_S`.
    """
    t = text.strip().lower()
    bad = InvalidArgument(
        f"--every {text[:50]!r} is not a duration (e.g. 90, 30s, 15m, 1h, 1h30m, 1d)"
    )
    if not t or len(t) > 64:
        raise bad
    seconds = 0.0
    number = ""
    for ch in t:
        if ch.isdigit() or (ch == "." and "." not in number):
            number += ch
        elif ch in _UNITS and number not in ("", "."):
            seconds += float(number) * _UNITS[ch]
            number = ""
        else:
            raise bad
    if number:
        if number == "." or seconds:  # a bare number is seconds, alone only
            raise bad
        seconds = float(number)
    if seconds < MIN_EVERY_S:
        raise InvalidArgument(f"--every must be at least {MIN_EVERY_S:g} s, got {text[:50]!r}")
    if seconds > MAX_EVERY_S:
        raise InvalidArgument(
            f"--every must be at most 366d ({MAX_EVERY_S:.0f} s), got {text[:50]!r}; "
            "for rarer runs use --cron (e.g. @yearly)"
        )
    return seconds


def _trigger_text(s: Schedule) -> str:
    if s.every_s is not None:
        return f"every {s.every_s:g}s"
    if s.cron is not None:
        return f"cron {s.cron}"
    return "on input"


class FlowUseCases:
    """Triggers (``dataset schedule``), the scheduler's step and the flow handlers."""

    def __init__(
        self,
        repo: DatasetRepository,
        state: StatePort,
        clock: Clock,
        datasets: DatasetUseCases,
        *,
        kick: Callable[[], None] = lambda: None,
        untrusted_input: Callable[[DatasetId], str | None] | None = None,
    ) -> None:
        self._repo = repo
        self._state = state
        self._clock = clock
        self._datasets = datasets
        self._kick = kick
        self._untrusted_input = untrusted_input
        # A schedule whose step failed: when it may be tried again, and the error (shown by
        # ``flows``). In memory: a restart tries every schedule again at once.
        self._failed: dict[str, tuple[int, str]] = {}

    # ------------------------------------------------------------------ commands

    async def schedule(
        self,
        ref: str,
        *,
        every: str | None = None,
        cron: str | None = None,
        on_input: bool = False,
        off: bool = False,
    ) -> ScheduleRow:
        """Set (or with ``off`` remove) the flow trigger of an owned dataset.

        Raises:
            InvalidArgument: not exactly one of ``every``, ``cron``, ``on_input``, ``off``; a
                duration or cron expression that does not parse; a time trigger on a dataset
                without an active polling source, ``on_input`` on a non-derivative.
            NotOwner: this node does not hold the dataset's key.
        """
        if (every is not None) + (cron is not None) + on_input + off != 1:
            raise InvalidArgument("give exactly one of --every, --cron, --on-input, --off")
        handle = self._repo.resolve(ref)
        did = handle.id
        alias = handle.alias
        if off:
            removed = await self._state.remove_schedule(did.as_did_str())
            return ScheduleRow(id=did.as_did_str(), alias=alias, active=False, removed=removed)
        self._datasets.require_owned(did)
        chain = await asyncio.to_thread(self._repo.open(did.as_did_str()).state)
        now = self._clock()
        if on_input:
            if chain.set_transform is None:
                raise InvalidArgument(
                    f"{alias} is not a derivative (no SetTransform): --on-input triggers a "
                    "transform when an input changes; a polling root takes --every or --cron"
                )
            # No input seen yet: the first tick brings the derivative up to date.
            s = await self._state.set_schedule(did.as_did_str(), on_input=True, inputs_seen={})
        else:
            if not chain.polling_source:
                raise InvalidArgument(
                    f"{alias} has no active polling source (SetPollingSource): --every and "
                    "--cron run a root's polling source; a derivative takes --on-input"
                )
            if every is not None:
                seconds = parse_every(every)
                # The first run is due at once: the user sees the flow work.
                s = await self._state.set_schedule(did.as_did_str(), every_s=seconds, next_ns=now)
            else:
                assert cron is not None
                parsed = CronSchedule.parse(cron)
                s = await self._state.set_schedule(
                    did.as_did_str(), cron=parsed.text, next_ns=parsed.next_after(now)
                )
        await self._state.log_event(
            "flow.schedule", did.as_did_str(), {"trigger": _trigger_text(s)}
        )
        self._kick()
        return self._row(s, alias)

    def _row(self, s: Schedule, alias: str | None) -> ScheduleRow:
        return ScheduleRow(
            id=s.did,
            alias=alias,
            active=True,
            removed=False,
            trigger=_trigger_text(s),
            every_s=s.every_s,
            cron=s.cron,
            on_input=s.on_input,
            next_run=Timestamp(s.next_ns).to_rfc3339() if s.next_ns is not None else None,
            error=self._failed[s.did][1] if s.did in self._failed else None,
        )

    def _alias(self, did: str) -> str | None:
        try:
            return self._repo.resolve(did).alias
        except (OdfNodeError, OSError, ValueError):
            return None

    async def flows(self, did: str | None = None, limit: int = 100) -> FlowsResult:
        """The triggers and the newest ``limit`` flow runs (``did``: of one dataset)."""
        want = self._repo.resolve(did).id.as_did_str() if did else None
        schedules = [s for s in await self._state.schedules() if want in (None, s.did)]
        items = [w for w in await self._state.work(did=want) if w.kind in FLOW_KINDS]
        items = sorted(items, key=lambda w: w.id, reverse=True)[: max(1, limit)]
        aliases: dict[str, str | None] = {}

        def alias(d: str) -> str | None:
            if d not in aliases:
                aliases[d] = self._alias(d)
            return aliases[d]

        return FlowsResult(
            schedules=[self._row(s, alias(s.did)) for s in schedules],
            runs=[
                FlowRunRow.from_record(
                    w,
                    alias=alias(w.did),
                    trigger=str(w.payload.get("trigger", "")),
                    created=Timestamp(w.created_ns).to_rfc3339(),
                    updated=Timestamp(w.updated_ns).to_rfc3339(),
                )
                for w in items
            ],
        )

    # ------------------------------------------------------------------ the scheduler

    async def tick(self) -> list[WorkItem]:
        """Queue the flows that are due now; the items queued (or joined).

        A time trigger is due at ``next_ns``; its next time is then computed from now, so a
        node that was down runs a missed flow once, not once per missed period. An
        ``on_input`` trigger is due when an input's stored head differs from the one its last
        transform was queued for and every input is trusted.
        """
        now = self._clock()
        queued: list[WorkItem] = []
        schedules = await self._state.schedules()
        reactive = [s for s in schedules if s.on_input and not self._held(s.did, now)]
        for s in schedules:
            if s.on_input or s.next_ns is None or s.next_ns > now or self._held(s.did, now):
                continue
            if (item := await self._fire(s, now, self._queue_timed(s, now))) is not None:
                queued.append(item)
        if reactive:
            changed, failed = await asyncio.to_thread(self._changed_inputs, reactive)
            for s, error in failed:
                await self._schedule_failed(s, now, error)
            for s, heads in changed:
                if (item := await self._fire(s, now, self._queue_on_input(s, heads))) is not None:
                    queued.append(item)
        if queued:
            self._kick()
        return queued

    def _held(self, did: str, now: int) -> bool:
        """Whether ``did``'s schedule failed lately and waits before it is tried again."""
        failed = self._failed.get(did)
        return failed is not None and now < failed[0]

    async def _fire(
        self, s: Schedule, now: int, queue: Awaitable[WorkItem | None]
    ) -> WorkItem | None:
        """Await one schedule's ``queue`` (None: nothing queued). A failure is recorded for
        that row and returns None: one bad row must not stop the others; a queued item clears
        the row's failure."""
        try:
            item = await queue
        except Exception as e:
            await self._schedule_failed(s, now, e)
            return None
        if item is not None:
            self._failed.pop(s.did, None)
        return item

    async def _queue_timed(self, s: Schedule, now: int) -> WorkItem:
        """A due timed schedule's poll, and its next time."""
        # The next time first: a row whose next time cannot be computed or stored queues
        # nothing (it would otherwise queue on every tick).
        nxt = self._next_time(s, now)
        item = await self._state.enqueue(POLL, s.did, None, {"trigger": _trigger_text(s)})
        await self._state.schedule_ran(s.did, next_ns=nxt)
        return item

    async def _queue_on_input(self, s: Schedule, heads: dict[str, str]) -> WorkItem | None:
        """The transform of a dataset whose inputs moved to ``heads``, and the heads seen."""
        item = await self._state.enqueue(TRANSFORM, s.did, None, {"trigger": "on input"})
        if item.state == "claimed":
            return None  # running: this change is picked up once it is done
        await self._state.schedule_ran(s.did, inputs_seen=heads)
        return item

    async def _schedule_failed(self, s: Schedule, now: int, e: Exception) -> None:
        """Log and mark a schedule whose step failed; it is tried again after
        :data:`FAILED_RETRY_S` (``flows`` shows the error meanwhile)."""
        message = f"{type(e).__name__}: {e}"[:500]
        first = self._failed.get(s.did, (0, ""))[1] != message
        self._failed[s.did] = (now + FAILED_RETRY_S * 1_000_000_000, message)
        if not first:
            return  # said already; the retry is quiet until the error changes
        # A typed error is the row's own fault; anything else is a bug worth its traceback.
        log.warning(
            "flow schedule of %s (%s) failed, the other schedules go on; retried in %d s: %s",
            s.did,
            _trigger_text(s),
            FAILED_RETRY_S,
            message,
            exc_info=not isinstance(e, OdfNodeError),
        )
        try:
            await self._state.log_event("flow.schedule_failed", s.did, {"error": message})
        except Exception as log_error:  # the state itself may be what failed
            log.warning("flow schedule of %s: cannot record the failure: %s", s.did, log_error)

    def _next_time(self, s: Schedule, now: int) -> int:
        if s.every_s is not None:
            if not MIN_EVERY_S <= s.every_s <= MAX_EVERY_S:
                # Stored by an older version that had no upper bound.
                raise InvalidArgument(
                    f"every {s.every_s:.0f}s is outside {MIN_EVERY_S:g}-{MAX_EVERY_S:.0f} s; "
                    "set the schedule again"
                )
            period = int(s.every_s * 1_000_000_000)
            due = s.next_ns if s.next_ns is not None else now
            missed = max(0, (now - due) // period)
            nxt = due + (missed + 1) * period
        else:
            assert s.cron is not None
            nxt = CronSchedule.parse(s.cron).next_after(now)
        if nxt > _MAX_NS:
            raise InvalidArgument(f"the next run of {_trigger_text(s)} is past the year 2262")
        return nxt

    def _changed_inputs(
        self, reactive: list[Schedule]
    ) -> tuple[list[tuple[Schedule, dict[str, str]]], list[tuple[Schedule, Exception]]]:
        """The ``on_input`` triggers whose inputs changed, with the inputs' current heads, and
        those whose inputs could not be read (in a worker thread: it reads the chains' heads).
        """
        out = []
        failed: list[tuple[Schedule, Exception]] = []
        for s in reactive:
            try:
                heads = self._input_heads(s)
            except Exception as e:  # one derivative's bad chain must not stop the others
                failed.append((s, e))
                continue
            if heads is not None and heads != s.inputs_seen:
                out.append((s, heads))
        return out, failed

    def _input_heads(self, s: Schedule) -> dict[str, str] | None:
        """The current heads of ``s``'s inputs; None while it waits (not a derivative here,
        an input not pulled yet, no head, or not trusted yet)."""
        try:
            if not self._repo.contains(s.did):
                return None
            st = self._repo.open(s.did).state().set_transform
        except (OdfNodeError, OSError) as e:
            log.warning("flow of %s: cannot read its chain: %s", s.did, e)
            return None
        if st is None:
            return None
        heads: dict[str, str] = {}
        for i in st.inputs:
            try:
                input_id = DatasetId.parse(i.dataset_ref)
            except (OdfNodeError, ValueError):
                return None
            key = input_id.as_did_str()
            if not self._repo.contains(key):
                return None  # not pulled yet
            head = self._repo.open(key).head()
            if head is None:
                return None
            if self._untrusted_input is not None and self._untrusted_input(input_id):
                return None  # followed, its newest head not trusted yet
            heads[key] = head.to_multibase()
        return heads

    # ------------------------------------------------------------------ work handlers

    async def run_poll(self, item: WorkItem) -> None:
        """Run a root's polling source once and publish what it committed."""
        try:
            await self._datasets.poll(item.did, publish=True)
        except SourceUnreachable as e:
            raise RetryLater(str(e)) from e

    async def run_transform(self, item: WorkItem) -> None:
        """Run a derivative's next transform step and publish it."""
        try:
            await self._datasets.transform(item.did, publish=True)
        except UntrustedInput as e:
            raise RetryLater(str(e)) from e


def require_flows(flows: FlowUseCases | None) -> FlowUseCases:
    """``flows`` or :class:`Unavailable` (a context without the flow use cases)."""
    if flows is None:
        raise Unavailable("flows are not available in this context")
    return flows
