"""Following datasets by URL, and witnessing their sources (``docs/follow.md``).

Every ODF dataset kamu publishes lives in a repository (HTTP Simple Transfer Protocol, IPFS,
IPNS, a directory) whose owner gossips nothing. :class:`SourceFollower` follows such a dataset
from its source: it polls ``refs/head`` on a schedule (``[follow] poll_interval_s``, jittered,
conditional requests so that an idle source costs one small request, backoff on errors), pulls
new blocks (which must descend from the accepted head, as for a gossiped head), and hands the
head to the same pipeline as an owner-announced one: accepted head -> trust policy / verify ->
republish -> attestation on the DID's topic. The source is the authority, as in kamu: no owner
signs these heads.

**Scheduling.** One task and a heap of due times, not one sleeping task per subscription: 1,000
followed sources cost one timer, and polls run at most ``concurrency`` at a time over the
transfer's one HTTP session (bounded connections).

**Witnessing.** Each head a poll brings is signed by the node as an
:class:`~p2p.wire.Observation` (DID, source, head, sequence, time) and gossiped on the dataset's
topic. A peer's observation of a source we follow showing another head makes the protocol core
ask for a poll (``PollSource``), so one follower's discovery reaches every follower in seconds.
Two observations of the same source whose heads do not descend one from the other are a
**split view** (the source showed different histories): the node checks it on the chains
themselves (its own, and the other one read block by block, hash-checked, from the source or
the observer's locations), keeps both signed observations as evidence, logs the event
``source.split_view`` and reports it in ``disputes`` and the console.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlparse

from coordinator.errors import DatasetNotFound, OdfNodeError
from coordinator.identity import DatasetId, PrivateKey
from coordinator.metadata import decode_block
from coordinator.multiformats import Multihash
from coordinator.storage.repository import DatasetRepository, validate_alias
from node.app.datasets import CommitLocks
from node.app.errors import InvalidArgument
from node.app.fetch import PullDiverged
from node.app.metrics import NodeMetrics
from node.app.ports import Clock, EventSink, GossipPort, SourcePort, StatePort, TransferPort
from node.app.rows import EvidenceCaps, ObservationRecord
from node.app.verify import Spawn
from p2p.wire import (
    FetchLocations,
    Observation,
    SignedMessage,
    decode_unverified,
    sign_message,
    valid_source_url,
)

log = logging.getLogger("odf_node.follow")

AcceptHead = Callable[[DatasetId, Multihash, int], Awaitable[None]]
"""Queue verification of an accepted head (the trust policy's choice, as for gossiped heads)."""
Relation = Literal["same", "ours-newer", "theirs-newer", "split", "unknown"]

TICK_S = 0.05
"""The poll loop sleeps at least this long between rounds: the polls that fall due within one
tick start together (1,000 sources every 10 s: 20 wake-ups a second instead of 100). A poll
asked for now (``poll_now``) wakes it at once."""

MAX_SPLIT_WALK = 10_000
"""Blocks a split-view check reads from another chain at most (beyond: "unknown")."""

MAX_JUDGED = 16
"""Pairs of heads named within one poll whose relation a source remembers."""


@dataclass(frozen=True)
class FollowSettings:
    """``[follow]``: the polling schedule and its bounds."""

    poll_interval_s: float = 300.0
    jitter: float = 0.1
    backoff_max_s: float = 3600.0
    min_gap_s: float = 1.0
    concurrency: int = 32


def normalise_source(url: str) -> str:
    """The source URL as stored and observed (no trailing slash; a path made absolute is the
    caller's job). Raises :class:`InvalidArgument` for a scheme no pull can read."""
    u = url.strip().rstrip("/")
    scheme = urlparse(u).scheme
    if scheme in ("http", "https", "ipfs", "ipns", "file") or (scheme == "" and u.startswith("/")):
        return u
    raise InvalidArgument(
        f"not a source URL: {url!r} (http(s)://, ipfs://, ipns://, file:// or an absolute path)"
    )


@dataclass
class _Source:
    """One followed source: its poll state."""

    did: DatasetId
    url: str
    alias: str | None
    head: Multihash | None = None
    sequence: int = -1
    etag: str | None = None
    last_modified: str | None = None
    failures: int = 0
    due: float = 0.0
    polling: bool = False
    again: bool = False
    last_poll: float = -1e18
    judged: dict[tuple[Multihash, Multihash], tuple[Relation, int]] = field(default_factory=dict)
    """How two heads this source named within one poll relate (and the one's sequence number),
    judged once: a source that flips between two forks on every request costs one walk of
    the other chain, not one a poll (at most :data:`MAX_JUDGED` pairs are kept)."""
    own: dict[Multihash, ObservationRecord] = field(default_factory=dict)
    """The node's own stored observations of heads at this source (at most
    :data:`MAX_JUDGED`): found without reading the source's newest observations, which
    strangers' observations of the same source can fill."""


class SourceFollower:
    """Polls followed sources and witnesses them; see the module docstring."""

    def __init__(
        self,
        repo: DatasetRepository,
        state: StatePort,
        transfer: TransferPort,
        sources: SourcePort,
        gossip: GossipPort,
        locks: CommitLocks,
        metrics: NodeMetrics,
        events: EventSink,
        clock: Clock,
        node_key: PrivateKey,
        accept: AcceptHead,
        *,
        settings: FollowSettings | None = None,
        http_urls: Callable[[DatasetId], tuple[str, ...]] = lambda _d: (),
        rng: Callable[[], float],
        spawn: Spawn | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._repo = repo
        self._state = state
        self._transfer = transfer
        self._sources = sources
        self._gossip = gossip
        self._locks = locks
        self._metrics = metrics
        self._events = events
        self._clock = clock
        self._key = node_key
        self._node = node_key.dataset_id()
        self._node_id = self._node.as_did_key()
        self._accept = accept
        self.settings = settings or FollowSettings()
        self._http_urls = http_urls
        self._rng = rng
        self._spawn = spawn
        self._now = monotonic
        self._by_did: dict[DatasetId, _Source] = {}
        self._heap: list[tuple[float, int, DatasetId]] = []
        self._seq = 0
        self._wake: asyncio.Event | None = None
        self._wake_at = float("-inf")
        """When the sleeping poll loop wakes next (-inf: it is not sleeping)."""
        self._running: set[asyncio.Task[None]] = set()
        self.polls = 0
        """Polls done (probes of ``refs/head``), for the benchmark and metrics."""
        self.probe_requests = 0
        self.probe_bytes = 0

    # ---- the schedule

    def _interval(self, failures: int = 0) -> float:
        s = self.settings
        base = s.poll_interval_s * (2**failures if failures else 1)
        base = min(base, max(s.backoff_max_s, s.poll_interval_s))
        return base * (1 - s.jitter + 2 * s.jitter * self._rng())

    def _schedule(self, src: _Source, due: float) -> None:
        src.due = due
        self._seq += 1
        heapq.heappush(self._heap, (due, self._seq, src.did))
        # Only an earlier due time wakes the sleeping loop: each finished poll reschedules its
        # source one interval ahead, and waking the loop for that cost more main-loop time than
        # the poll's own bookkeeping (bench-follow-urls, docs/follow.md).
        if self._wake is not None and due < self._wake_at:
            self._wake.set()

    def following(self) -> int:
        """Sources followed."""
        return len(self._by_did)

    def source_of(self, did: DatasetId) -> str | None:
        """The URL ``did`` is followed from, if any."""
        src = self._by_did.get(did)
        return src.url if src is not None else None

    async def restore(self) -> None:
        """Follow every stored URL subscription, first polls spread over one interval."""
        now = self._now()
        for sub in await self._state.subscriptions():
            if sub.source_url is None:
                continue
            did = DatasetId.parse(sub.did)
            acc = await self._state.accepted_head(sub.did)
            src = _Source(did, sub.source_url, sub.alias)
            if acc is not None:
                src.head, src.sequence = Multihash.from_multibase(acc.head), acc.sequence
            self._by_did[did] = src
            self._gossip.follow_source(did, src.url, src.head)
            self._schedule(src, now + self.settings.poll_interval_s * self._rng())

    def poll_now(self, did: DatasetId, source: str) -> None:
        """Poll ``did``'s source as soon as possible (a peer observed another head there).

        Coalesced: a poll running now is followed by one more; polls of one source are at
        least ``[follow] min_gap_s`` apart, so a burst of observations costs one request.
        """
        src = self._by_did.get(did)
        if src is None or src.url != source:
            return
        if src.polling:
            src.again = True
            return
        due = max(self._now(), src.last_poll + self.settings.min_gap_s)
        if due < src.due:
            self._schedule(src, due)

    def due_now(self) -> list[DatasetId]:
        """Pop every source whose poll is due (stale heap entries are skipped)."""
        now = self._now()
        out: list[DatasetId] = []
        while self._heap and self._heap[0][0] <= now:
            due, _, did = heapq.heappop(self._heap)
            src = self._by_did.get(did)
            if src is None or src.due != due or src.polling:
                continue
            out.append(did)
        return out

    def next_due(self) -> float | None:
        """When the next poll is due (monotonic seconds), if any."""
        while self._heap:
            due, _, did = self._heap[0]
            src = self._by_did.get(did)
            if src is not None and src.due == due and not src.polling:
                return due
            heapq.heappop(self._heap)
        return None

    async def run(self) -> None:
        """The poll loop (one task): wait for the next due time, start the due polls."""
        self._wake = asyncio.Event()
        sem = asyncio.Semaphore(max(1, self.settings.concurrency))
        try:
            await self._loop(sem)
        finally:
            await self.stop()  # polls in flight end with the loop (shutdown, a restart)

    async def _loop(self, sem: asyncio.Semaphore) -> None:
        wake = self._wake
        assert wake is not None
        loop = asyncio.get_running_loop()
        while True:
            self._wake_at = float("-inf")
            for did in self.due_now():
                await sem.acquire()
                task = asyncio.ensure_future(self._poll_releasing(did, sem))
                self._running.add(task)
                task.add_done_callback(self._running.discard)
            nxt = self.next_due()
            wake.clear()
            if nxt is None:
                self._wake_at = float("inf")
                await wake.wait()
                continue
            # One timer, not a task per sleep (asyncio.wait_for): this loop turns ~20 times a
            # second with 1,000 sources.
            self._wake_at = max(nxt, self._now() + TICK_S)
            timer = loop.call_later(max(0.0, self._wake_at - self._now()), wake.set)
            try:
                await wake.wait()
            finally:
                timer.cancel()

    async def _poll_releasing(self, did: DatasetId, sem: asyncio.Semaphore) -> None:
        try:
            await self.poll(did)
        except Exception:  # one source's failure must not stop the others' polls
            log.exception("poll of %s failed", did)
        finally:
            sem.release()

    async def stop(self) -> None:
        """Cancel the polls in flight."""
        for t in list(self._running):
            t.cancel()
        for t in list(self._running):
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass

    # ---- subscribing

    async def subscribe(
        self, source: str, did: DatasetId | None, alias: str | None, override: Any
    ) -> DatasetId:
        """Follow a dataset from ``source``: the first pull runs now (it names the DID),
        then the head is accepted and verified and the source polled from then on.

        Raises:
            InvalidArgument: ``did`` is given and the source serves another dataset.
            plus what a pull raises (unreachable source, refused address, diverged chain).
        """
        url = normalise_source(source)
        if alias is not None:
            validate_alias(alias)
        if did is not None:
            known = self._local_alias(did)
            alias = alias or known
        summary = await self._transfer.pull(url, alias=alias)
        pulled = DatasetId.parse(str(summary["id"]))
        if did is not None and pulled != did:
            raise InvalidArgument(f"{url} serves {pulled.as_did_str()}, not {did.as_did_str()}")
        sub = await self._state.subscribe(
            pulled.as_did_str(), alias, "url", override, source_url=url
        )
        await self._state.log_event("subscribe", sub.did, {"alias": alias, "source": url})
        src = self._by_did.get(pulled)
        if src is None or src.url != url:
            src = _Source(pulled, url, sub.alias)
            acc = await self._state.accepted_head(sub.did)
            if acc is not None:
                src.head, src.sequence = Multihash.from_multibase(acc.head), acc.sequence
            self._by_did[pulled] = src
        self._gossip.follow_source(pulled, url, src.head)
        await self._gossip.follow(pulled)
        head = self._stored_head(pulled)
        if head is not None and head != src.head:
            await self._accepted(src, head)
        src.last_poll = self._now()
        self._schedule(src, self._now() + self._interval())
        return pulled

    async def follow_input(self, of: DatasetId, input_did: DatasetId) -> bool:
        """Follow an input of ``of`` (followed by URL) from beside its source:
        ``{parent of the source}/{input DID}``, as ``odf-node serve-http`` serves every dataset
        it holds by DID. False when ``of`` is not followed over HTTP or that URL does not serve
        the input (the caller then follows it over gossip)."""
        src = self._by_did.get(of)
        if src is None or not src.url.startswith(("http://", "https://")):
            return False
        if input_did in self._by_did:
            return True
        url = f"{src.url.rsplit('/', 1)[0]}/{input_did.as_did_str()}"
        try:
            await self.subscribe(url, input_did, input_did.as_multibase(), None)
        except (OdfNodeError, OSError) as e:
            log.info("input %s of %s not served at %s: %s", input_did, of, url, e)
            return False
        await self._state.log_event(
            "subscribe.input", input_did.as_did_str(), {"of": of.as_did_str(), "source": url}
        )
        return True

    def forget(self, did: DatasetId) -> None:
        """Stop polling ``did``'s source (unsubscribe)."""
        self._by_did.pop(did, None)

    def _local_alias(self, did: DatasetId) -> str | None:
        try:
            return self._repo.resolve(did.as_did_str()).alias
        except (DatasetNotFound, OdfNodeError):
            return None

    def _stored_head(self, did: DatasetId) -> Multihash | None:
        if not self._repo.contains(did.as_did_str()):
            return None
        return self._repo.open(did.as_did_str()).head()

    # ---- polling

    async def poll(self, did: DatasetId) -> None:
        """One poll of ``did``'s source: probe, pull what is new, accept and observe it."""
        src = self._by_did.get(did)
        if src is None:
            return
        src.polling = True
        src.last_poll = self._now()
        self.polls += 1
        try:
            await self._poll(src)
        finally:
            src.polling = False
            if self._by_did.get(did) is src:
                if src.again:
                    src.again = False
                    self._schedule(src, max(self._now(), src.last_poll + self.settings.min_gap_s))
                else:
                    self._schedule(src, self._now() + self._interval(src.failures))

    async def _poll(self, src: _Source) -> None:
        did = src.did.as_did_str()
        try:
            probe = await self._sources.probe_head(src.url, src.etag, src.last_modified)
        except (OdfNodeError, OSError) as e:
            src.failures += 1
            self._metrics.source_polls.labels("error").inc()
            if src.failures == 1:  # once per streak: an unreachable source is not news each time
                await self._state.log_event(
                    "source.unreachable", did, {"source": src.url, "error": str(e)[:500]}
                )
            return
        if src.failures:
            src.failures = 0
        self.probe_requests += probe.requests
        self.probe_bytes += probe.bytes
        src.etag, src.last_modified = probe.etag, probe.last_modified
        if not probe.changed or probe.head is None:
            self._metrics.source_polls.labels("unchanged").inc()
            return
        try:
            remote = Multihash.from_multibase(probe.head)
        except Exception:
            self._metrics.source_polls.labels("error").inc()
            return
        if remote == src.head:
            self._metrics.source_polls.labels("unchanged").inc()
            return
        self._metrics.source_polls.labels("changed").inc()
        alias = self._local_alias(src.did) or src.alias
        try:
            async with self._locks.of(src.did):
                summary = await self._transfer.pull(src.url, alias=alias)
        except PullDiverged as e:
            await self._diverged(src, remote, str(e))
            return
        except (OdfNodeError, OSError) as e:
            src.failures += 1
            await self._state.log_event(
                "pull.rejected" if "reject" in type(e).__name__.lower() else "source.unreachable",
                did,
                {"source": src.url, "error": str(e)[:500]},
            )
            return
        head = self._stored_head(src.did)
        if head is not None and head != src.head and summary.get("comparison") == "local-behind":
            await self._accepted(src, head)
        if head is not None and head != remote:
            # refs/head named one head and the pull (which reads refs/head again) got another:
            # a source answering differently per request shows two histories in one poll.
            await self._two_heads(src, remote, head)

    async def _accepted(self, src: _Source, head: Multihash) -> None:
        """A head pulled from the source descends from the accepted one: observe it, accept
        it, verify it (the same pipeline as an announced head)."""
        ds = self._repo.open(src.did.as_did_str())
        block = await asyncio.to_thread(ds.get_block, head, verify=False)
        seq = block.sequence_number
        sm = await self._observe(src, head, seq)
        did = src.did.as_did_str()
        # The accepted head's "announcement" is our own signed observation (no owner signs it).
        stored = await self._state.record_accepted_head(
            did, 0, seq, head.to_multibase(), None, sm.envelope if sm is not None else b""
        )
        src.head, src.sequence = head, seq
        self._gossip.source_head_accepted(src.did, src.url, head)
        if not stored:
            return
        data = {"head": head.to_multibase(), "sequence": seq, "source": src.url}
        await self._state.log_event("head.accepted", did, data)
        self._events.publish("head.accepted", {"did": did, **data})
        await self._accept(src.did, head, seq)
        for theirs in await self._state.observations(did, src.url, limit=20):
            if not theirs.own:
                await self._check(src, theirs)

    async def _observe(self, src: _Source, head: Multihash, seq: int) -> SignedMessage | None:
        """Sign, store and gossip our observation of ``head`` at the source (None for a local
        path: nothing another node could compare)."""
        if not valid_source_url(src.url):
            return None
        urls = tuple(u for u in self._http_urls(src.did) if u.startswith(("http://", "https://")))
        obs = Observation(
            node=self._node,
            dataset=src.did,
            source=src.url,
            head=head,
            sequence=seq,
            locations=FetchLocations((), urls[:4]),
            issued_at_ns=self._clock(),
        )
        sm = sign_message(obs, self._key)
        await self._state.add_observation(
            src.did.as_did_str(),
            src.url,
            head.to_multibase(),
            seq,
            self._node_id,
            sm.envelope,
            True,
            obs.issued_at_ns,
        )
        await self._gossip.publish(src.did, sm.envelope)
        return sm

    async def _diverged(self, src: _Source, remote: Multihash, error: str) -> None:
        """The source now shows a head that does not descend from the one we accepted."""
        did = src.did.as_did_str()
        self._metrics.source_polls.labels("diverged").inc()
        await self._state.log_event(
            "source.diverged",
            did,
            {"source": src.url, "head": remote.to_multibase(), "error": error[:500]},
        )
        try:
            block = decode_block(await self._sources.read_block(src.url, remote))
        except Exception as e:  # the evidence cannot be signed without its sequence number
            log.warning("diverged head %s of %s unreadable: %s", remote, src.url, e)
            return
        # Our observations of both heads, signed once: a source that stays diverged is seen
        # again on every poll, and each poll signing (and gossiping) a new one made a new
        # split view record each time.
        theirs = await self._own_observation(src, remote, block.sequence_number)
        if src.head is None or theirs is None:
            return
        ours = await self._own_observation(src, src.head, src.sequence)
        if ours is not None:
            await self._split(
                src,
                ours,
                theirs,
                "the source replaced the accepted head by one that does not descend from it",
            )

    async def _two_heads(self, src: _Source, shown: Multihash, pulled: Multihash) -> None:
        """Within one poll the source named ``shown`` and the pull got ``pulled``: a split view
        unless one descends from the other (the source may just have moved on meanwhile)."""
        ds = self._repo.open(src.did.as_did_str())
        ours = await asyncio.to_thread(ds.get_block, pulled, verify=False)
        known = src.judged.get((pulled, shown))
        if known is not None:
            relation, shown_seq = known
        else:
            try:
                block = decode_block(await self._sources.read_block(src.url, shown))
            except Exception as e:  # cannot compare without the block: not evidence either way
                log.debug("head %s shown by %s unreadable: %s", shown, src.url, e)
                return
            shown_seq = block.sequence_number
            relation = await self.relation(
                src.did, pulled, ours.sequence_number, shown, shown_seq, [src.url]
            )
            if relation != "unknown":  # unknown: a source that did not answer; ask again
                if len(src.judged) >= MAX_JUDGED:
                    src.judged.clear()
                src.judged[(pulled, shown)] = (relation, shown_seq)
        if relation != "split":
            return
        a = await self._own_observation(src, pulled, ours.sequence_number)
        b = await self._own_observation(src, shown, shown_seq)
        if a is not None and b is not None:
            await self._split(
                src,
                a,
                b,
                "the source showed two heads that do not descend one from the other in one poll",
            )

    async def _own_observation(
        self, src: _Source, head: Multihash, seq: int
    ) -> ObservationRecord | None:
        """Our stored observation of ``head`` at the source, signed (and gossiped) now if we
        have none among the newest (None for a local path: nothing to observe)."""
        cached = src.own.get(head)
        if cached is not None:
            return cached
        text = head.to_multibase()
        did = src.did.as_did_str()
        for _ in range(2):
            mine = await self._state.observations(did, src.url, limit=50)
            found = next((o for o in mine if o.own and o.head == text), None)
            if found is not None:
                if len(src.own) >= MAX_JUDGED:
                    src.own.clear()
                src.own[head] = found
                return found
            if await self._observe(src, head, seq) is None:
                return None
        return None

    # ---- witnessing

    async def observed(
        self,
        sm: SignedMessage,
        o: Observation,
        *,
        trusted: Sequence[str] = (),
        caps: EvidenceCaps | None = None,
    ) -> None:
        """A peer's observation passed the core's checks: store it (``trusted`` keys' kept,
        strangers' within ``caps``: :meth:`StatePort.add_observation`); compare it with
        ours."""
        did = o.dataset.as_did_str()
        await self._state.add_observation(
            did,
            o.source,
            o.head.to_multibase(),
            o.sequence,
            o.node.as_did_key(),
            sm.envelope,
            False,
            o.issued_at_ns,
            trusted=trusted,
            caps=caps,
        )
        src = self._by_did.get(o.dataset)
        if src is None or src.url != o.source:
            return
        rows = await self._state.observations(did, o.source, limit=5)
        theirs = next((r for r in rows if r.envelope == sm.envelope), None)
        if theirs is None:
            return
        if self._spawn is not None:
            self._spawn(self._check(src, theirs))
        else:
            await self._check(src, theirs)

    async def _check(self, src: _Source, theirs: ObservationRecord) -> None:
        """Compare a peer's observation with our accepted head from the same source."""
        if src.head is None:
            return
        # Ours by head, not among the source's newest observations: 50 strangers' observations
        # of the same source pushed it out of those, and no fork was compared any more.
        ours = await self._own_observation(src, src.head, src.sequence)
        if ours is None:
            return
        urls = [src.url, *_locations(theirs.envelope)]
        relation = await self.relation(
            src.did,
            src.head,
            src.sequence,
            Multihash.from_multibase(theirs.head),
            theirs.sequence,
            urls,
        )
        if relation == "split":
            await self._split(
                src, ours, theirs, "the heads the source showed do not descend one from the other"
            )

    async def relation(
        self,
        did: DatasetId,
        ours: Multihash,
        our_seq: int,
        theirs: Multihash,
        their_seq: int,
        urls: list[str],
    ) -> Relation:
        """How another head relates to ours: the older one must be on the newer one's chain.

        Ours is walked locally; theirs, when newer, block by block (hash-checked) from the
        first of ``urls`` that serves them, down to our sequence number.
        """
        if ours == theirs:
            return "same"
        if their_seq <= our_seq:
            ds = self._repo.open(did.as_did_str())

            def at_seq() -> Multihash | None:
                h: Multihash | None = ours
                while h is not None:
                    b = ds.get_block(h, verify=False)
                    if b.sequence_number <= their_seq:
                        return h if b.sequence_number == their_seq else None
                    h = b.prev_block_hash
                return None

            return "ours-newer" if await asyncio.to_thread(at_seq) == theirs else "split"
        for url in urls:
            h: Multihash | None = theirs
            steps = 0
            try:
                while h is not None and steps < MAX_SPLIT_WALK:
                    b = decode_block(await self._sources.read_block(url, h))
                    steps += 1
                    if b.sequence_number <= our_seq:
                        return "theirs-newer" if h == ours else "split"
                    h = b.prev_block_hash
                    if h == ours:
                        return "theirs-newer"
            except Exception as e:  # this place does not serve that chain: try the next
                log.debug("reading %s's chain from %s: %s", theirs, url, e)
                continue
        return "unknown"

    async def _split(
        self, src: _Source, a: ObservationRecord, b: ObservationRecord, detail: str
    ) -> None:
        did = src.did.as_did_str()
        text = (
            f"{detail}: {a.head} (sequence {a.sequence}, observed by {a.signer}) and "
            f"{b.head} (sequence {b.sequence}, observed by {b.signer})"
        )
        # One record per (source, fork): a fork seen again counts, it is not news again.
        if not await self._state.add_split_view(did, src.url, a.content_id, b.content_id, text):
            return
        self._metrics.source_polls.labels("split_view").inc()
        data = {
            "source": src.url,
            "heads": [a.head, b.head],
            "observers": [a.signer, b.signer],
            "observations": [a.content_id, b.content_id],
        }
        await self._state.log_event("source.split_view", did, data)
        self._events.publish("source.split_view", {"did": did, **data})
        log.warning("split view of %s at %s: %s", did, src.url, text)


def _locations(envelope: bytes) -> list[str]:
    """The HTTP locations an observation names (where its observer's copy can be read)."""
    try:
        msg = decode_unverified(envelope)
    except Exception:
        return []
    if isinstance(msg, SignedMessage) and isinstance(msg.message, Observation):
        return [u.rstrip("/") for u in msg.message.locations.http_urls]
    return []


__all__ = ["FollowSettings", "SourceFollower", "normalise_source"]
