"""The asyncio driver that connects a :class:`ProtocolCore` to a :class:`GossipTransport`.

It owns no rules: it feeds transport events, peer changes and timer ticks into the core (with
the injected clock), turns the core's verdict for each message into the transport's validation
result (:class:`Forward` -> ACCEPT, :class:`Penalise` -> REJECT, otherwise IGNORE) and carries
out every decision through the shared executor (:func:`p2p.executor.execute`): the network part
here (fetch tasks through an injected fetcher and their cancellation on :class:`AbandonFetch`,
equivocation proofs, anti-entropy requests over ``/odf/heads/1.0.0``), then the node's part
through the node's own :class:`~p2p.executor.DecisionEffects` (persist, verify, attest...).

Peer state reaches the core as messages: the transport publishes a snapshot of its connected
peers, and each tick turns changes into :class:`PeerConnected` / :class:`PeerDisconnected`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from coordinator.clock import Clock
from coordinator.identity import DatasetId
from coordinator.multiformats import Multihash
from p2p.core import (
    AbandonFetch,
    AntiEntropyReceived,
    Decision,
    EmitEquivocationProof,
    Event,
    FetchCompleted,
    FetchFailed,
    Forward,
    MessageReceived,
    PeerConnected,
    PeerDisconnected,
    Penalise,
    ProtocolCore,
    PublishAttestation,
    PublishDispute,
    RequestAntiEntropy,
    RequestFetch,
    SourceHeadAccepted,
    Tick,
    VerificationCompleted,
)
from p2p.errors import WireDecodeError
from p2p.executor import DecisionEffects, NullEffects, execute
from p2p.transport import (
    HEADS_PROTOCOL,
    NODE_TOPIC,
    GossipTransport,
    TransportError,
    ValidationResult,
    dataset_topic,
)
from p2p.wire import (
    MAX_HEADS_PER_EXCHANGE,
    EquivocationProof,
    KeyInception,
    KeyRevocation,
    KeyRotation,
    content_id,
    decode_heads_request,
    decode_heads_response,
    decode_unverified,
    encode_heads_request,
    encode_heads_response,
)

Fetcher = Callable[[RequestFetch], Awaitable[bool]]
"""Fetches and checks a chain; returns ``ancestry_ok``; raises to report a failed fetch.

It must be cancellable: when the core abandons a fetch the task running it is cancelled, and a
cancelled fetch must leave the store as it was (or, once it has committed, finish and return)."""

_AE_SLICE = 32
"""Anti-entropy reply entries the core checks per turn of the event loop."""

log = logging.getLogger(__name__)


class GossipService(NullEffects):
    """Drives one :class:`ProtocolCore` over one transport; see the module docstring.

    Its effect methods are the network part of each decision; :meth:`_apply` then hands the
    same decision to the node's effects. A decision with no network part is a no-op here
    (inherited): :class:`Accept`, :class:`Ignore` and :class:`Penalise` are answered by the
    validator (ACCEPT / IGNORE / REJECT, gossipsub's own scoring sees a REJECT too); a head
    accepted or rejected, a graylisted peer and a source to poll are the node's alone (it
    persists, verifies, logs; its follower owns the sources' schedule); attestations and
    disputes are signed by the node, which holds the key and the evidence.
    """

    def __init__(
        self,
        core: ProtocolCore,
        transport: GossipTransport,
        clock: Clock,
        fetcher: Fetcher,
        effects: DecisionEffects | None = None,
        *,
        tick_interval_s: float = 1.0,
        request_timeout_s: float = 5.0,
        catch_up_delay_s: float = 0.5,
    ) -> None:
        """Wire ``core`` to ``transport``; call :meth:`start` inside a running loop.

        ``effects`` is the node's part of each decision (after the network part done here).
        """
        self.core = core
        self._node: DecisionEffects = effects if effects is not None else NullEffects()
        self._fetches: dict[tuple[DatasetId, Multihash], asyncio.Task[None]] = {}
        self._peers: set[str] = set()
        self._peer_listeners: list[Callable[[str, bool], None]] = []
        self.transport = transport
        self._clock = clock
        self._fetcher = fetcher
        self._tick_s = tick_interval_s
        self._validating: bytes | None = None
        self._timeout_s = request_timeout_s
        self._tasks: set[asyncio.Task[None]] = set()
        self._listeners: list[Callable[[Decision], None]] = []
        self._joined: set[str] = set()
        # Topics waiting to be joined, in order, by one task (``_joiner``): the transport joins
        # one at a time anyway (paced), and 1,000 joins in flight at once would cost a task,
        # a call and a trio task each at the same moment, a peak the process keeps as RSS.
        self._to_join: asyncio.Queue[str] = asyncio.Queue()
        self._catch_up: set[DatasetId] = set()
        self._catch_up_task: asyncio.Future[None] | None = None
        self._catch_up_delay_s = catch_up_delay_s

    def on_decision(self, listener: Callable[[Decision], None]) -> None:
        """Call ``listener`` with every decision the core makes (in order)."""
        self._listeners.append(listener)

    def on_peer_change(self, listener: Callable[[str, bool], None]) -> None:
        """Call ``listener(peer, connected)`` when a peer connects or disconnects."""
        self._peer_listeners.append(listener)

    def connected_peers(self) -> list[str]:
        """Peers the core was told are connected (the asyncio thread's own copy)."""
        return sorted(self._peers)

    def peer_score(self, peer: str) -> float:
        """The core's current score of ``peer``."""
        return self.core.peer_score(peer, self._clock())

    def fetches_running(self) -> int:
        """Fetch tasks in flight (for status and metrics)."""
        return len(self._fetches)

    def verification_completed(
        self, dataset: DatasetId, head: Multihash, ok: bool
    ) -> PublishAttestation | PublishDispute | None:
        """Report a finished verification; the core's verdict: attest, dispute, or neither.

        The decisions also go through the executor like every other; the verdict is returned
        because only the caller holds the report an attestation or a dispute is made of.
        """
        for d in self._apply(VerificationCompleted(dataset, head, ok, self._clock())):
            if isinstance(d, PublishAttestation | PublishDispute):
                return d
        return None

    def source_head_accepted(self, dataset: DatasetId, source: str, head: Multihash) -> None:
        """Tell the core a head pulled from a followed source was accepted (URL subscriptions):
        its verification is then judged like an announced head's."""
        self._apply(SourceHeadAccepted(dataset, source, head, self._clock()))

    def topics(self) -> list[str]:
        """Topics this node joins: one per followed dataset plus the node topic."""
        return [dataset_topic(d.as_multibase()) for d in self.core.subscriptions()] + [NODE_TOPIC]

    async def start(self) -> None:
        """Join the topics, install validators and handlers, start the tick loop."""
        self.transport.set_request_handler(HEADS_PROTOCOL, self._serve_heads)
        for topic in self.topics():
            self._joined.add(topic)
            self.transport.set_validator(topic, self._validate)
            self._to_join.put_nowait(topic)
        self._spawn(self._joiner())
        self._spawn(self._tick_loop())

    async def stop(self) -> None:
        """Cancel the service's tasks."""
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t

    async def follow(self, did: DatasetId) -> None:
        """Follow ``did`` from now on: join its topic and ask connected peers for its head."""
        known = did in self.core.subscriptions()
        self.core.subscribe(did)
        topic = dataset_topic(did.as_multibase())
        if topic not in self._joined:
            self._joined.add(topic)
            self.transport.set_validator(topic, self._validate)
            self._to_join.put_nowait(topic)
        if not known:
            # Batched: following many datasets at once (an operator subscribing 1,000) asks each
            # peer once per batch, not once per dataset.
            self._catch_up.add(did)
            if self._catch_up_task is None:
                self._catch_up_task = asyncio.ensure_future(self._catch_up_soon())
                self._tasks.add(self._catch_up_task)
                self._catch_up_task.add_done_callback(self._tasks.discard)

    async def _catch_up_soon(self) -> None:
        await asyncio.sleep(self._catch_up_delay_s)
        dids, self._catch_up, self._catch_up_task = tuple(self._catch_up), set(), None
        new = self._sync_peers()  # a new peer was already asked about every dataset
        for peer in self.connected_peers():
            if peer in new:
                continue
            await self._anti_entropy(RequestAntiEntropy(peer, dids))

    def unfollow(self, did: DatasetId) -> None:
        """Stop following ``did`` (its topic stays joined; the core ignores its messages)."""
        self.core.unsubscribe(did)

    async def announce(self, envelope: bytes, topic: str) -> None:
        """Publish an envelope this node made (own announcements, attestations, proofs)."""
        await self.transport.publish(topic, envelope)

    def peer_connected(self, peer: str) -> None:
        """Tell the core about a new connection (it will ask the peer for heads)."""
        if peer in self._peers:
            return
        self._peers.add(peer)
        self._apply(PeerConnected(peer, self._clock()))
        for listener in self._peer_listeners:
            listener(peer, True)

    def peer_disconnected(self, peer: str) -> None:
        """Tell the core a connection closed."""
        if peer not in self._peers:
            return
        self._peers.discard(peer)
        self._apply(PeerDisconnected(peer, self._clock()))
        for listener in self._peer_listeners:
            listener(peer, False)

    def _sync_peers(self) -> set[str]:
        """Turn changes of the transport's peer snapshot into core events; the new peers."""
        # The transport's snapshot is handed over by message from its own thread; reading it
        # here is a plain attribute read, never a call into the libp2p thread.
        now = set(self.transport.connected_peers())
        new = now - self._peers
        for peer in sorted(new):
            self.peer_connected(peer)
        for peer in sorted(self._peers - now):
            self.peer_disconnected(peer)
        return new

    # ---- internals

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _apply(self, event: Event) -> list[Decision]:
        decisions = self.core.handle(event)
        for d in decisions:
            for listener in self._listeners:
                listener(d)
            execute(d, self)  # the network part
            execute(d, self._node)  # then the node's part
        return decisions

    # ---- DecisionEffects: the network part (the node's part follows in _apply)

    def forward(self, d: Forward) -> None:
        """The validator answers ACCEPT and gossipsub forwards.

        A message the core delayed (its sender's rate bucket was empty) is decided later, on a
        tick, after the validator already answered IGNORE: this node re-publishes it itself.
        """
        if d.content_id != self._validating:
            self._spawn(self.publish_best_effort(_topic_of(d.envelope), d.envelope))

    def fetch(self, d: RequestFetch) -> None:
        """Run the fetcher in a task that :meth:`abandon_fetch` can cancel."""
        key = (d.dataset, d.head)
        old = self._fetches.pop(key, None)
        if old is not None:
            old.cancel()
        task: asyncio.Task[None] = asyncio.ensure_future(self._fetch(d))
        self._fetches[key] = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def abandon_fetch(self, d: AbandonFetch) -> None:
        """Cancel the pull the core stopped waiting for (a cancelled pull commits nothing)."""
        task = self._fetches.pop((d.dataset, d.head), None)
        if task is not None:
            task.cancel()

    def equivocation(self, d: EmitEquivocationProof) -> None:
        """Publish the proof on the node topic; the node stores it."""
        self._spawn(self.publish_best_effort(NODE_TOPIC, d.proof.envelope))

    def anti_entropy(self, d: RequestAntiEntropy) -> None:
        """Ask the peer for its heads over ``/odf/heads/1.0.0``."""
        self._spawn(self._anti_entropy(d))

    async def publish_best_effort(self, topic: str, envelope: bytes) -> None:
        """Publish ``envelope``; no peers on the topic yet is fine (anti-entropy carries it)."""
        try:
            await self.transport.publish(topic, envelope)
        except TransportError:
            pass  # no peers on the topic yet: anti-entropy carries it later

    async def _validate(self, peer: str, data: bytes) -> ValidationResult:
        self._validating = cid = content_id(data)
        try:
            decisions = self._apply(MessageReceived(peer, data, self._clock()))
        finally:
            self._validating = None
        # Only a Forward of *this* message accepts it: the same event can drain the sender's
        # older, delayed messages (their Forwards are re-published by `forward`), and accepting
        # on those would let gossipsub relay this one unchecked, e.g. malformed or forged.
        if any(isinstance(d, Forward) and d.content_id == cid for d in decisions):
            return ValidationResult.ACCEPT
        # Any Penalise here concerns the same sender (only its own backlog drains), so a
        # REJECT blames the right peer even when the penalised message was an older one.
        if any(isinstance(d, Penalise) for d in decisions):
            return ValidationResult.REJECT
        return ValidationResult.IGNORE

    async def _joiner(self) -> None:
        # Joined without delivery: the validator (``_validate``) is where every message of a
        # topic is handled, so nothing has to be queued or drained per topic.
        while True:
            topic = await self._to_join.get()
            try:
                await self.transport.join(topic)
            except TransportError as e:
                log.warning("joining %s failed: %s", topic, e)

    def tick(self) -> None:
        """One timer tick now (the tick loop calls it; tests call it on a virtual clock)."""
        self._sync_peers()
        self._apply(Tick(self._clock()))

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(self._tick_s)
            self.tick()

    async def _fetch(self, req: RequestFetch) -> None:
        key = (req.dataset, req.head)
        try:
            ok = await self._fetcher(req)
        except asyncio.CancelledError:
            raise  # abandoned by the core (or shutdown): nothing to report
        except Exception as e:
            if self._fetches.get(key) is asyncio.current_task():
                del self._fetches[key]
            self._apply(
                FetchFailed(req.dataset, req.head, str(e) or type(e).__name__, self._clock())
            )
            return
        if self._fetches.get(key) is asyncio.current_task():
            del self._fetches[key]
        self._apply(FetchCompleted(req.dataset, req.head, ok, self._clock()))

    async def _anti_entropy(self, req: RequestAntiEntropy) -> None:
        # A request names at most MAX_HEADS_PER_EXCHANGE datasets (wire limit): a node following
        # more asks in several rounds.
        for i in range(0, len(req.datasets), MAX_HEADS_PER_EXCHANGE):
            chunk = req.datasets[i : i + MAX_HEADS_PER_EXCHANGE]
            try:
                raw = await self.transport.request(
                    req.peer, HEADS_PROTOCOL, encode_heads_request(chunk), self._timeout_s
                )
                envelopes = decode_heads_response(raw)
            except (TransportError, WireDecodeError):
                return
            # In slices, yielding in between: a reply of 1,000 heads (most already known, each
            # decoded again to see whether it can restart a stalled fetch) applied at once held
            # the loop for tens of milliseconds every anti-entropy round.
            envelopes = envelopes[: self.core.config.max_anti_entropy_entries]
            for j in range(0, len(envelopes), _AE_SLICE):
                part = tuple(envelopes[j : j + _AE_SLICE])
                self._apply(AntiEntropyReceived(req.peer, part, self._clock()))
                await asyncio.sleep(0)

    async def _serve_heads(self, peer: str, data: bytes) -> bytes:
        try:
            dids: list[DatasetId] = decode_heads_request(data)
        except WireDecodeError:
            return encode_heads_response([])
        return encode_heads_response(self.core.latest_heads(dids))


def _topic_of(envelope: bytes) -> str:
    """The topic a checked envelope belongs on: its dataset's, or the node topic for proofs and
    node key records."""
    msg = decode_unverified(envelope)
    if isinstance(msg, EquivocationProof) or isinstance(
        msg.message, KeyRotation | KeyRevocation | KeyInception
    ):
        return NODE_TOPIC
    return dataset_topic(msg.message.dataset.as_multibase())
