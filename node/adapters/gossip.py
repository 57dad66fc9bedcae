"""The gossip port over :class:`p2p.service.GossipService` and its libp2p transport."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coordinator.identity import DatasetId
from coordinator.multiformats import Multihash
from node.app.errors import Unavailable
from node.app.ports import VerificationVerdict
from p2p.core import PublishAttestation, PublishDispute
from p2p.service import GossipService
from p2p.transport import dataset_topic
from p2p.wire import decode_unverified


class GossipAdapter:
    """:class:`~node.app.ports.GossipPort` over a running gossip service."""

    def __init__(
        self,
        service: GossipService,
        transport: Any,
        *,
        advertise: Callable[[], list[str]] | None = None,
        on_follow: Callable[[], None] | None = None,
    ) -> None:
        """``advertise`` gives the listen addresses as peers should dial them; ``on_follow``
        runs after each new follow (the daemon starts a discovery round)."""
        self.service = service
        self._transport = transport
        self._advertise = advertise
        self._on_follow = on_follow

    @property
    def enabled(self) -> bool:
        """Gossip runs."""
        return True

    def peer_id(self) -> str | None:
        """The libp2p peer id."""
        return str(self._transport.peer_id)

    def listen_addrs(self) -> list[str]:
        """Full listen multiaddrs, as peers should dial them."""
        if self._advertise is not None:
            return self._advertise()
        return list(self._transport.listen_addrs())

    def peer_count(self) -> int:
        """Connected peers (the service's own copy, updated by message)."""
        return len(self.service.connected_peers())

    def peer_score(self, peer: str) -> float:
        """The core's current score of ``peer``."""
        return self.service.peer_score(peer)

    async def connect(self, multiaddr: str) -> str:
        """Dial a peer at this very address (a user's ``connect``: a wrong address fails even
        when the peer is connected otherwise); the core hears of it on the next peer sync."""
        peer: str = await self._transport.connect(multiaddr, exact=True)
        self.service.peer_connected(peer)
        return peer

    async def follow(self, did: DatasetId) -> None:
        """Join ``did``'s topic and ask connected peers for its head (and who carries it)."""
        await self.service.follow(did)
        if self._on_follow is not None:
            self._on_follow()

    def unfollow(self, did: DatasetId) -> None:
        """Stop following ``did``."""
        self.service.unfollow(did)

    async def publish(self, did: DatasetId, envelope: bytes) -> None:
        """Publish on ``did``'s topic; no peers yet is fine (anti-entropy carries it later)."""
        await self.service.publish_best_effort(dataset_topic(did.as_multibase()), envelope)

    def accept_own(self, envelope: bytes) -> None:
        """Install our own signed announcement as the accepted head."""
        self.service.core.restore_accepted(envelope)

    def verification_completed(
        self, did: DatasetId, head: Multihash, ok: bool
    ) -> VerificationVerdict:
        """The core's verdict on a finished verification (also seen by the executor)."""
        return self.service.verification_completed(did, head, ok)

    def fetches_running(self) -> int:
        """Pulls in flight for the core."""
        return self.service.fetches_running()

    def follow_source(self, did: DatasetId, source: str, head: Multihash | None) -> None:
        """The core follows ``did`` from ``source`` too."""
        self.service.core.follow_source(did, source, head)

    def source_head_accepted(self, did: DatasetId, source: str, head: Multihash) -> None:
        """Through the service, so its decisions go through the executor."""
        self.service.source_head_accepted(did, source, head)


class NoGossip:
    """The gossip port of a node with ``[p2p] enabled = false``.

    There is no protocol core to consult: the head verified is the only head this node knows,
    so the verdict follows from the outcome alone (attest what verified, dispute what failed).
    """

    @property
    def enabled(self) -> bool:
        """Gossip is off."""
        return False

    def peer_id(self) -> str | None:
        """None: no gossip host."""
        return None

    def listen_addrs(self) -> list[str]:
        """None."""
        return []

    def peer_count(self) -> int:
        """Zero."""
        return 0

    def peer_score(self, peer: str) -> float:
        """Zero."""
        return 0.0

    async def connect(self, multiaddr: str) -> str:
        """Refused (the use case checks :attr:`enabled` first)."""
        raise Unavailable("gossip is disabled on this node: set [p2p] enabled = true")

    async def follow(self, did: DatasetId) -> None:
        """Nothing to join."""

    def unfollow(self, did: DatasetId) -> None:
        """Nothing to leave."""

    async def publish(self, did: DatasetId, envelope: bytes) -> None:
        """Nowhere to publish; the message is still stored by the caller."""
        decode_unverified(envelope)

    def accept_own(self, envelope: bytes) -> None:
        """No core."""

    def verification_completed(
        self, did: DatasetId, head: Multihash, ok: bool
    ) -> VerificationVerdict:
        """Attest what verified, dispute what failed (no newer head can supersede it here)."""
        return PublishAttestation(did, head) if ok else PublishDispute(did, head)

    def fetches_running(self) -> int:
        """Zero."""
        return 0

    def follow_source(self, did: DatasetId, source: str, head: Multihash | None) -> None:
        """No core."""

    def source_head_accepted(self, did: DatasetId, source: str, head: Multihash) -> None:
        """No core: :meth:`verification_completed` attests what verified anyway."""


class GossipSlot:
    """The gossip port the use cases hold from construction: :class:`NoGossip` until the gossip
    service starts and :meth:`install`\\ s its :class:`GossipAdapter`, and again after it stops.

    Why: the gossip service needs use cases (the fetcher, the effects) that themselves publish
    through the gossip port, so one of the two must exist first. The slot is that one: every
    method of the port is spelled out (mypy checks it against ``GossipPort``), none forwards by
    name.
    """

    def __init__(self) -> None:
        self._current: GossipAdapter | NoGossip = NoGossip()

    def install(self, adapter: GossipAdapter | NoGossip) -> None:
        """Serve the port with ``adapter`` from now on."""
        self._current = adapter

    @property
    def current(self) -> GossipAdapter | NoGossip:
        """The adapter serving the port now."""
        return self._current

    @property
    def enabled(self) -> bool:
        """Whether gossip runs now."""
        return self._current.enabled

    def peer_id(self) -> str | None:
        """The libp2p peer id, if gossip runs."""
        return self._current.peer_id()

    def listen_addrs(self) -> list[str]:
        """Full listen multiaddrs."""
        return self._current.listen_addrs()

    def peer_count(self) -> int:
        """Connected peers."""
        return self._current.peer_count()

    def peer_score(self, peer: str) -> float:
        """The protocol core's score of ``peer``."""
        return self._current.peer_score(peer)

    async def connect(self, multiaddr: str) -> str:
        """Dial a peer; its peer id."""
        return await self._current.connect(multiaddr)

    async def follow(self, did: DatasetId) -> None:
        """Join ``did``'s topic."""
        await self._current.follow(did)

    def unfollow(self, did: DatasetId) -> None:
        """Stop following ``did``."""
        self._current.unfollow(did)

    async def publish(self, did: DatasetId, envelope: bytes) -> None:
        """Publish a signed envelope on ``did``'s topic."""
        await self._current.publish(did, envelope)

    def accept_own(self, envelope: bytes) -> None:
        """Install an announcement this node signed as the accepted head."""
        self._current.accept_own(envelope)

    def verification_completed(
        self, did: DatasetId, head: Multihash, ok: bool
    ) -> VerificationVerdict:
        """Report a finished verification; the core's verdict."""
        return self._current.verification_completed(did, head, ok)

    def fetches_running(self) -> int:
        """Pulls in flight on behalf of the core."""
        return self._current.fetches_running()

    def follow_source(self, did: DatasetId, source: str, head: Multihash | None) -> None:
        """Tell the core ``did`` is followed from ``source``."""
        self._current.follow_source(did, source, head)

    def source_head_accepted(self, did: DatasetId, source: str, head: Multihash) -> None:
        """Tell the core a head pulled from ``source`` was accepted."""
        self._current.source_head_accepted(did, source, head)
