"""The asyncio driver that connects a :class:`ProtocolCore` to a :class:`GossipTransport`.

It owns no rules: it feeds transport events and timer ticks into the core (with the injected
clock), turns the core's verdict for each message into the transport's validation result
(:class:`Forward` -> ACCEPT, :class:`Penalise` -> REJECT, otherwise IGNORE) and carries out the
other decisions (fetch through an injected fetcher, publish equivocation proofs, anti-entropy
requests over ``/odf/heads/1.0.0``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from coordinator.identity import DatasetId
from p2p.core import (
    AntiEntropyReceived,
    Decision,
    EmitEquivocationProof,
    Event,
    FetchCompleted,
    FetchFailed,
    Forward,
    MessageReceived,
    PeerConnected,
    Penalise,
    ProtocolCore,
    RequestAntiEntropy,
    RequestFetch,
    Tick,
)
from p2p.errors import WireDecodeError
from p2p.transport import (
    HEADS_PROTOCOL,
    NODE_TOPIC,
    GossipMessage,
    GossipTransport,
    TransportError,
    ValidationResult,
    dataset_topic,
)
from p2p.wire import (
    MAX_HEADS_PER_EXCHANGE,
    decode_heads_request,
    decode_heads_response,
    encode_heads_request,
    encode_heads_response,
)

Clock = Callable[[], int]
"""Returns the current time in ns since the Unix epoch (injected; ``time.time_ns`` in prod)."""
Fetcher = Callable[[RequestFetch], Awaitable[bool]]
"""Fetches and checks a chain; returns ``ancestry_ok``; raises to report a failed fetch."""


@dataclass(slots=True)
class ServiceLog:
    """Decisions the service has seen, for metrics and tests."""

    decisions: list[Decision] = field(default_factory=list)


class GossipService:
    """Drives one :class:`ProtocolCore` over one transport; see the module docstring."""

    def __init__(
        self,
        core: ProtocolCore,
        transport: GossipTransport,
        clock: Clock,
        fetcher: Fetcher,
        *,
        tick_interval_s: float = 1.0,
        request_timeout_s: float = 5.0,
        catch_up_delay_s: float = 0.5,
    ) -> None:
        """Wire ``core`` to ``transport``; call :meth:`start` inside a running loop."""
        self.core = core
        self.transport = transport
        self._clock = clock
        self._fetcher = fetcher
        self._tick_s = tick_interval_s
        self._timeout_s = request_timeout_s
        self._tasks: set[asyncio.Task[None]] = set()
        self.log = ServiceLog()
        self._listeners: list[Callable[[Decision], None]] = []
        self._joined: set[str] = set()
        self._catch_up: set[DatasetId] = set()
        self._catch_up_task: asyncio.Future[None] | None = None
        self._catch_up_delay_s = catch_up_delay_s

    def on_decision(self, listener: Callable[[Decision], None]) -> None:
        """Call ``listener`` with every decision the core makes (in order)."""
        self._listeners.append(listener)

    def topics(self) -> list[str]:
        """Topics this node joins: one per followed dataset plus the node topic."""
        return [dataset_topic(d.as_multibase()) for d in self.core.subscriptions()] + [NODE_TOPIC]

    async def start(self) -> None:
        """Join the topics, install validators and handlers, start the tick loop."""
        self.transport.set_request_handler(HEADS_PROTOCOL, self._serve_heads)
        for topic in self.topics():
            self._joined.add(topic)
            self.transport.set_validator(topic, self._validate)
            self._spawn(self._drain(self.transport.subscribe(topic)))
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
            self._spawn(self._drain(self.transport.subscribe(topic)))
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
        for peer in self.transport.connected_peers():
            await self._anti_entropy(RequestAntiEntropy(peer, dids))

    def unfollow(self, did: DatasetId) -> None:
        """Stop following ``did`` (its topic stays joined; the core ignores its messages)."""
        self.core.unsubscribe(did)

    async def announce(self, envelope: bytes, topic: str) -> None:
        """Publish an envelope this node made (own announcements, attestations, proofs)."""
        await self.transport.publish(topic, envelope)

    def peer_connected(self, peer: str) -> None:
        """Tell the core about a new connection (it will ask the peer for heads)."""
        self._apply(PeerConnected(peer, self._clock()))

    # ---- internals

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _apply(self, event: Event) -> list[Decision]:
        decisions = self.core.handle(event)
        for d in decisions:
            self.log.decisions.append(d)
            for listener in self._listeners:
                listener(d)
            self._execute(d)
        return decisions

    def _execute(self, d: Decision) -> None:
        match d:
            case RequestFetch():
                self._spawn(self._fetch(d))
            case EmitEquivocationProof():
                self._spawn(self.transport.publish(NODE_TOPIC, d.proof.envelope))
            case RequestAntiEntropy():
                self._spawn(self._anti_entropy(d))
            case _:
                pass

    async def _validate(self, peer: str, data: bytes) -> ValidationResult:
        decisions = self._apply(MessageReceived(peer, data, self._clock()))
        if any(isinstance(d, Forward) for d in decisions):
            return ValidationResult.ACCEPT
        if any(isinstance(d, Penalise) for d in decisions):
            return ValidationResult.REJECT
        return ValidationResult.IGNORE

    async def _drain(self, messages: AsyncIterator[GossipMessage]) -> None:
        # Messages were fully handled by the validator; the subscription only has to be drained.
        async for _ in messages:
            pass

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(self._tick_s)
            self._apply(Tick(self._clock()))

    async def _fetch(self, req: RequestFetch) -> None:
        try:
            ok = await self._fetcher(req)
        except Exception as e:
            self._apply(
                FetchFailed(req.dataset, req.head, str(e) or type(e).__name__, self._clock())
            )
            return
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
            self._apply(AntiEntropyReceived(req.peer, tuple(envelopes), self._clock()))

    async def _serve_heads(self, peer: str, data: bytes) -> bytes:
        try:
            dids: list[DatasetId] = decode_heads_request(data)
        except WireDecodeError:
            return encode_heads_response([])
        return encode_heads_response(self.core.latest_heads(dids))
