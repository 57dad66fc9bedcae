"""The state port (``node/app/ports.py`` ``StatePort``) over :class:`node.state.store.NodeState`.

:class:`ThreadedState` is what the daemon runs: SQLite never touches the event loop.

* **Writes** go to one writer thread with its own connection. It takes every write queued
  while it was busy (up to ``max_batch``) and runs them in one transaction
  (:meth:`NodeState.batch`): one commit, one fsync for the lot — group commit. Each write is
  still atomic on its own (a savepoint), so a write that fails fails only its caller. A write's
  coroutine returns once the transaction holding it has committed (durable, as before); a
  caller cancelled while waiting may still find its write committed.
* **Reads** go to a reader thread with a second connection. WAL mode lets it read the last
  committed state while the writer commits, so a read never waits for an fsync, and every read
  sees every write whose coroutine has returned.

:class:`InlineState` runs the same methods synchronously on the caller's thread: the in-memory
twin for unit tests (an in-memory database cannot be shared between threads) and the offline
CLI's adapter. Both spell out every method of the port, each made from the ``NodeState``
method of the same name by a factory typed with its parameters (``_inline``, ``_read``,
``_write``), so mypy checks both adapters against ``StatePort`` signature by signature (no
``__getattr__``, no ``cast``). :data:`READS` and :data:`WRITES` say which thread serves each; a
unit test checks that every public ``NodeState`` method is in exactly one of them and that both
adapters define it.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from coordinator.clock import Clock
from coordinator.errors import OdfNodeError
from node.state.store import NodeState

if TYPE_CHECKING:
    from node.app.ports import StatePort

log = logging.getLogger("odf_node.state")

READS = frozenset(
    {
        "subscriptions",
        "subscription",
        "accepted_head",
        "accepted_heads",
        "verification",
        "verifications_of_heads",
        "attestations",
        "evidence_count",
        "attestations_of_head",
        "disputes",
        "disputed_blocks",
        "disputes_of_block",
        "datasets_signed_by",
        "equivocation_proofs",
        "observations",
        "split_views",
        "peer",
        "peers",
        "key_rotations",
        "key_revocations",
        "key_inceptions",
        "events",
        "recent_events",
        "pending_count",
        "pending_counts",
        "subscription_count",
        "status_counts",
        "work",
        "work_item",
        "schedules",
        "schedule",
    }
)
"""NodeState methods that only read."""

STATUS_READS = frozenset({"status_counts"})
"""Reads run on the caller's thread (the event loop), on a connection of their own: two count
queries of well under a millisecond. Handed to a reader thread they cost ``node.status`` two
thread wake-ups, ~15 ms at the median on a loaded 2-core machine, and they never wait for a
commit: in WAL mode readers do not wait for the writer."""

STATUS_BUSY_TIMEOUT_MS = 50
"""How long a status read may wait for a lock (only WAL recovery takes one readers wait for)."""

WRITES = frozenset(
    {
        "subscribe",
        "record_trust",
        "unsubscribe",
        "record_accepted_head",
        "record_verification",
        "add_attestation",
        "add_dispute",
        "keep_evidence",
        "add_equivocation_proof",
        "add_observation",
        "add_split_view",
        "add_key_rotation",
        "add_key_revocation",
        "add_key_inception",
        "upsert_peer",
        "log_event",
        "prune_events",
        "enqueue",
        "claim",
        "complete",
        "fail",
        "release_claims",
        "prune_work",
        "set_schedule",
        "schedule_ran",
        "remove_schedule",
    }
)
"""NodeState methods that write (one transaction each, or one savepoint of a batch)."""


_PROBE = "<probe>"
"""The name of :meth:`ThreadedState.write_probe`'s call: no write, only its transaction."""


class StateClosed(OdfNodeError):
    """The state adapter was closed; no more calls are served."""


P = ParamSpec("P")
R = TypeVar("R")


def _inline(
    fn: Callable[Concatenate[NodeState, P], R],
) -> Callable[Concatenate[InlineState, P], Coroutine[Any, Any, R]]:
    """``fn`` of :class:`NodeState` as a method of :class:`InlineState`: a coroutine that runs
    it on the caller's thread when awaited (the signature is ``fn``'s: mypy checks the adapter
    against the port through it)."""

    async def method(self: InlineState, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return fn(self.sync, *args, **kwargs)

    method.__name__ = fn.__name__
    method.__doc__ = fn.__doc__
    return method


def _read(
    fn: Callable[Concatenate[NodeState, P], R],
) -> Callable[Concatenate[ThreadedState, P], Coroutine[Any, Any, R]]:
    """``fn`` as a method of :class:`ThreadedState` run by the reader thread (or, for
    :data:`STATUS_READS`, on the caller's thread over a connection of its own)."""
    name = fn.__name__
    if name in STATUS_READS:

        async def inline(self: ThreadedState, /, *args: P.args, **kwargs: P.kwargs) -> R:
            return fn(self._status_state(name), *args, **kwargs)

        method = inline
    else:

        async def threaded(self: ThreadedState, /, *args: P.args, **kwargs: P.kwargs) -> R:
            result: R = await self._call(self._reader, name, args, kwargs)
            return result

        method = threaded
    method.__name__ = name
    method.__doc__ = fn.__doc__
    return method


def _write(
    fn: Callable[Concatenate[NodeState, P], R],
) -> Callable[Concatenate[ThreadedState, P], Coroutine[Any, Any, R]]:
    """``fn`` as a method of :class:`ThreadedState` run by the writer thread (group commit)."""
    name = fn.__name__

    async def method(self: ThreadedState, /, *args: P.args, **kwargs: P.kwargs) -> R:
        result: R = await self._call(self._writer, name, args, kwargs)
        return result

    method.__name__ = name
    method.__doc__ = fn.__doc__
    return method


class InlineState:
    """Every :class:`NodeState` method of the port as a coroutine that runs synchronously when
    awaited."""

    def __init__(self, state: NodeState) -> None:
        self.sync = state

    def close(self) -> None:
        """Close the database."""
        self.sync.close()

    # The port, method by method (mypy checks each against StatePort through its signature).
    accepted_head = _inline(NodeState.accepted_head)
    accepted_heads = _inline(NodeState.accepted_heads)
    add_attestation = _inline(NodeState.add_attestation)
    add_dispute = _inline(NodeState.add_dispute)
    add_equivocation_proof = _inline(NodeState.add_equivocation_proof)
    add_key_inception = _inline(NodeState.add_key_inception)
    add_key_revocation = _inline(NodeState.add_key_revocation)
    add_key_rotation = _inline(NodeState.add_key_rotation)
    add_observation = _inline(NodeState.add_observation)
    add_split_view = _inline(NodeState.add_split_view)
    attestations = _inline(NodeState.attestations)
    attestations_of_head = _inline(NodeState.attestations_of_head)
    claim = _inline(NodeState.claim)
    complete = _inline(NodeState.complete)
    datasets_signed_by = _inline(NodeState.datasets_signed_by)
    disputed_blocks = _inline(NodeState.disputed_blocks)
    disputes = _inline(NodeState.disputes)
    disputes_of_block = _inline(NodeState.disputes_of_block)
    enqueue = _inline(NodeState.enqueue)
    equivocation_proofs = _inline(NodeState.equivocation_proofs)
    events = _inline(NodeState.events)
    evidence_count = _inline(NodeState.evidence_count)
    fail = _inline(NodeState.fail)
    keep_evidence = _inline(NodeState.keep_evidence)
    key_inceptions = _inline(NodeState.key_inceptions)
    key_revocations = _inline(NodeState.key_revocations)
    key_rotations = _inline(NodeState.key_rotations)
    log_event = _inline(NodeState.log_event)
    observations = _inline(NodeState.observations)
    peer = _inline(NodeState.peer)
    peers = _inline(NodeState.peers)
    pending_count = _inline(NodeState.pending_count)
    pending_counts = _inline(NodeState.pending_counts)
    prune_events = _inline(NodeState.prune_events)
    prune_work = _inline(NodeState.prune_work)
    recent_events = _inline(NodeState.recent_events)
    record_accepted_head = _inline(NodeState.record_accepted_head)
    record_trust = _inline(NodeState.record_trust)
    record_verification = _inline(NodeState.record_verification)
    release_claims = _inline(NodeState.release_claims)
    remove_schedule = _inline(NodeState.remove_schedule)
    schedule = _inline(NodeState.schedule)
    schedule_ran = _inline(NodeState.schedule_ran)
    schedules = _inline(NodeState.schedules)
    set_schedule = _inline(NodeState.set_schedule)
    split_views = _inline(NodeState.split_views)
    status_counts = _inline(NodeState.status_counts)
    subscribe = _inline(NodeState.subscribe)
    subscription = _inline(NodeState.subscription)
    subscription_count = _inline(NodeState.subscription_count)
    subscriptions = _inline(NodeState.subscriptions)
    unsubscribe = _inline(NodeState.unsubscribe)
    upsert_peer = _inline(NodeState.upsert_peer)
    verification = _inline(NodeState.verification)
    verifications_of_heads = _inline(NodeState.verifications_of_heads)
    work = _inline(NodeState.work)
    work_item = _inline(NodeState.work_item)


@dataclass(slots=True)
class _Call:
    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]


def _settle(call: _Call, value: Any = None, error: BaseException | None = None) -> None:
    def done() -> None:
        if call.future.done():
            return  # the caller was cancelled; the outcome stands regardless
        if error is not None:
            call.future.set_exception(error)
        else:
            call.future.set_result(value)

    try:
        call.loop.call_soon_threadsafe(done)
    except RuntimeError:
        pass  # the loop is closed: nobody waits any more


@dataclass
class StateStats:
    """Counters of the threaded adapter (for tests, metrics and benchmarks)."""

    writes: int = 0
    transactions: int = 0
    reads: int = 0
    largest_batch: int = 0
    batch_sizes: list[int] = field(default_factory=list, repr=False)


class _Worker(threading.Thread):
    """A thread that owns one NodeState and serves calls from a queue."""

    def __init__(self, name: str, open_state: Callable[[], NodeState], batch: int) -> None:
        super().__init__(name=name, daemon=True)
        self.queue: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._open = open_state
        self._batch = batch
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.stats = StateStats()

    def run(self) -> None:
        try:
            state = self._open()
        except BaseException as e:
            self.error = e
            self.ready.set()
            return
        self.ready.set()
        try:
            while True:
                first = self.queue.get()
                if first is None:
                    return
                calls = [first]
                stop = False
                while len(calls) < self._batch:
                    try:
                        nxt = self.queue.get_nowait()
                    except queue.Empty:
                        break
                    if nxt is None:
                        stop = True
                        break
                    calls.append(nxt)
                if self._batch > 1:
                    self._write_batch(state, calls)
                else:
                    for c in calls:
                        self._read(state, c)
                if stop:
                    return
        finally:
            state.close()

    def _read(self, state: NodeState, c: _Call) -> None:
        self.stats.reads += 1
        try:
            value = getattr(state, c.name)(*c.args, **c.kwargs)
        except Exception as e:
            _settle(c, error=e)
            return
        _settle(c, value)

    def _write_batch(self, state: NodeState, calls: list[_Call]) -> None:
        outcomes: list[tuple[_Call, Any, BaseException | None]] = []
        try:
            with state.batch():
                for c in calls:
                    if c.name == _PROBE:
                        outcomes.append((c, None, None))  # nothing to write: commits with the rest
                        continue
                    try:
                        outcomes.append((c, getattr(state, c.name)(*c.args, **c.kwargs), None))
                    except Exception as e:
                        outcomes.append((c, None, e))
        except Exception as e:  # the commit failed: none of them happened
            log.error("state transaction of %d writes failed: %s", len(calls), e)
            outcomes = [(c, None, e) for c in calls]
        s = self.stats
        s.writes += len(calls)
        s.transactions += 1
        s.largest_batch = max(s.largest_batch, len(calls))
        if len(s.batch_sizes) < 10_000:
            s.batch_sizes.append(len(calls))
        for c, value, error in outcomes:
            _settle(c, value, error)


class ThreadedState:
    """The state port for the daemon: a writer thread (group commit) and a reader thread."""

    def __init__(self, path: Path, clock: Clock, *, max_batch: int = 256) -> None:
        if max_batch < 2:
            raise ValueError("max_batch must be >= 2")
        self._closed = False
        # The writer opens first: it creates the file and runs the migrations.
        self._writer = _Worker("state-writer", lambda: NodeState.open(path, clock), max_batch)
        self._start(self._writer)
        self._reader = _Worker("state-reader", lambda: NodeState.open(path, clock), 1)
        try:
            self._start(self._reader)
        except BaseException:
            self._writer.queue.put(None)
            self._writer.join()
            raise
        self._path, self._clock = path, clock
        self._status: NodeState | None = None  # opened on first use, on the caller's thread
        self._probe: asyncio.Future[Any] | None = None

    @staticmethod
    def _start(worker: _Worker) -> None:
        worker.start()
        worker.ready.wait()
        if worker.error is not None:
            worker.join()
            raise worker.error

    @property
    def stats(self) -> StateStats:
        """Write/transaction/read counters (the reader's reads included)."""
        w = self._writer.stats
        return StateStats(
            writes=w.writes,
            transactions=w.transactions,
            reads=self._reader.stats.reads,
            largest_batch=w.largest_batch,
            batch_sizes=list(w.batch_sizes),
        )

    async def _call(self, worker: _Worker, name: str, args: Any, kwargs: Any) -> Any:
        if self._closed:
            raise StateClosed(f"state is closed (call to {name})")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        worker.queue.put(_Call(name, args, kwargs, loop, fut))
        return await fut

    def _status_state(self, name: str) -> NodeState:
        if self._closed:
            raise StateClosed(f"state is closed (call to {name})")
        if self._status is None:
            self._status = NodeState.open(
                self._path, self._clock, busy_timeout_ms=STATUS_BUSY_TIMEOUT_MS
            )
        return self._status

    async def write_probe(self) -> None:
        """Return once an empty write, queued behind every write queued so far, has committed.

        How the daemon's ``/readyz`` sees that the writer keeps up: the probe waits for the
        writer's queue and for the write lock (another process holding the database, a stalled
        disk), and fails as a write would. Concurrent callers share one probe, so a writer that
        is stuck does not collect one per readiness check. An empty transaction writes no page,
        so a probe costs no fsync.
        """
        if self._closed:
            raise StateClosed("state is closed (write probe)")
        if self._probe is None or self._probe.done():
            loop = asyncio.get_running_loop()
            self._probe = loop.create_future()
            # Retrieved here: a caller that gave up must not leave an unretrieved exception.
            self._probe.add_done_callback(lambda f: f.cancelled() or f.exception())
            self._writer.queue.put(_Call(_PROBE, (), {}, loop, self._probe))
        await asyncio.shield(self._probe)

    # The port, method by method: reads on the reader thread, writes on the writer thread.
    accepted_head = _read(NodeState.accepted_head)
    accepted_heads = _read(NodeState.accepted_heads)
    attestations = _read(NodeState.attestations)
    attestations_of_head = _read(NodeState.attestations_of_head)
    datasets_signed_by = _read(NodeState.datasets_signed_by)
    disputed_blocks = _read(NodeState.disputed_blocks)
    disputes = _read(NodeState.disputes)
    disputes_of_block = _read(NodeState.disputes_of_block)
    equivocation_proofs = _read(NodeState.equivocation_proofs)
    events = _read(NodeState.events)
    evidence_count = _read(NodeState.evidence_count)
    key_inceptions = _read(NodeState.key_inceptions)
    key_revocations = _read(NodeState.key_revocations)
    key_rotations = _read(NodeState.key_rotations)
    observations = _read(NodeState.observations)
    peer = _read(NodeState.peer)
    peers = _read(NodeState.peers)
    pending_count = _read(NodeState.pending_count)
    pending_counts = _read(NodeState.pending_counts)
    recent_events = _read(NodeState.recent_events)
    schedule = _read(NodeState.schedule)
    schedules = _read(NodeState.schedules)
    split_views = _read(NodeState.split_views)
    status_counts = _read(NodeState.status_counts)
    subscription = _read(NodeState.subscription)
    subscription_count = _read(NodeState.subscription_count)
    subscriptions = _read(NodeState.subscriptions)
    verification = _read(NodeState.verification)
    verifications_of_heads = _read(NodeState.verifications_of_heads)
    work = _read(NodeState.work)
    work_item = _read(NodeState.work_item)
    add_attestation = _write(NodeState.add_attestation)
    add_dispute = _write(NodeState.add_dispute)
    add_equivocation_proof = _write(NodeState.add_equivocation_proof)
    add_key_inception = _write(NodeState.add_key_inception)
    add_key_revocation = _write(NodeState.add_key_revocation)
    add_key_rotation = _write(NodeState.add_key_rotation)
    add_observation = _write(NodeState.add_observation)
    add_split_view = _write(NodeState.add_split_view)
    claim = _write(NodeState.claim)
    complete = _write(NodeState.complete)
    enqueue = _write(NodeState.enqueue)
    fail = _write(NodeState.fail)
    keep_evidence = _write(NodeState.keep_evidence)
    log_event = _write(NodeState.log_event)
    prune_events = _write(NodeState.prune_events)
    prune_work = _write(NodeState.prune_work)
    record_accepted_head = _write(NodeState.record_accepted_head)
    record_trust = _write(NodeState.record_trust)
    record_verification = _write(NodeState.record_verification)
    release_claims = _write(NodeState.release_claims)
    remove_schedule = _write(NodeState.remove_schedule)
    schedule_ran = _write(NodeState.schedule_ran)
    set_schedule = _write(NodeState.set_schedule)
    subscribe = _write(NodeState.subscribe)
    unsubscribe = _write(NodeState.unsubscribe)
    upsert_peer = _write(NodeState.upsert_peer)

    async def aclose(self) -> None:
        """:meth:`close` without blocking the event loop."""
        self._close_status()  # on the thread that opened it
        await asyncio.to_thread(self.close)

    def _close_status(self) -> None:
        status, self._status = self._status, None
        if status is not None:
            try:
                status.close()
            except sqlite3.ProgrammingError:
                pass  # another thread's connection: released with the object

    def close(self) -> None:
        """Serve what is queued, then close every connection (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._close_status()
        workers = (self._writer, self._reader)
        for w in workers:
            w.queue.put(None)
        for w in workers:
            w.join()


if TYPE_CHECKING:  # both adapters are the port: mypy checks every method's signature

    def _is_the_port(inline: InlineState, threaded: ThreadedState) -> tuple[StatePort, StatePort]:
        return inline, threaded


__all__ = [
    "READS",
    "STATUS_READS",
    "WRITES",
    "InlineState",
    "StateClosed",
    "StateStats",
    "ThreadedState",
]
