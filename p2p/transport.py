"""The ``GossipTransport`` interface and an in-memory twin for tests.

A transport moves opaque bytes: pub/sub topics with a per-topic validator, and request/response
exchanges on named protocols (``/odf/heads/1.0.0``). The libp2p host (``p2p/libp2p_host.py``)
implements it over py-libp2p; :class:`InMemoryNetwork` implements it inside one asyncio loop, so
the daemon's logic can be tested without sockets. All methods are called from asyncio.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Final, Protocol

from coordinator.errors import UNAVAILABLE
from coordinator.identity import DatasetId
from coordinator.multiformats import encode_multibase_base58
from p2p.errors import P2PError

HEADS_PROTOCOL: Final = "/odf/heads/1.0.0"
NODE_TOPIC: Final = "odf/node/1"
"""The node-level topic carrying attestations, disputes and equivocation proofs."""


def peer_id_of_node(node: DatasetId) -> str:
    """The libp2p peer id (``12D3KooW…``) of the host run with node key ``node``.

    The host's identity is the node key (``Libp2pConfig.node_seed``): its peer id is the
    identity multihash of the protobuf ``PublicKey {Type: Ed25519, Data: key}`` in base58btc
    (libp2p/specs ``peer-ids/peer-ids.md``), computed here without loading libp2p.
    """
    key = node.to_bytes()[2:]  # after the ed25519-pub multicodec prefix
    public_key = b"\x08\x01\x12\x20" + key
    return encode_multibase_base58(b"\x00" + bytes([len(public_key)]) + public_key)[1:]


def dataset_topic(did_multibase: str) -> str:
    """The gossip topic of one dataset (``odf/ds/1/<multibase of the DID>``)."""
    return f"odf/ds/1/{did_multibase}"


class ValidationResult(enum.Enum):
    """A validator's verdict: forward, drop quietly, or drop and blame the sender."""

    ACCEPT = "accept"
    IGNORE = "ignore"
    REJECT = "reject"


@dataclass(frozen=True, slots=True)
class GossipMessage:
    """A message delivered on a subscribed topic; ``source`` is the forwarding peer's id."""

    topic: str
    data: bytes
    source: str


Validator = Callable[[str, bytes], Awaitable[ValidationResult]]
"""``(forwarding peer id, data) -> verdict``; runs before delivery and forwarding."""
RequestHandler = Callable[[str, bytes], Awaitable[bytes]]
"""``(requesting peer id, request bytes) -> response bytes``."""


class TransportError(P2PError):
    """A transport operation failed (peer unreachable, protocol unsupported, timeout...)."""

    rpc_code = UNAVAILABLE


async def delivered(
    queue: asyncio.Queue[GossipMessage], joined: Awaitable[object] | None = None
) -> AsyncIterator[GossipMessage]:
    """A subscription's messages: once ``joined`` (the join of its topic) is done, those the
    transport puts in ``queue``, as they come (the iterator never ends by itself)."""
    if joined is not None:
        await joined
    while True:
        yield await queue.get()


class HostIdentity:
    """A libp2p host's peer id and listen addresses as :class:`GossipTransport` shows them
    (shared by the libp2p transports, in this process or in a child); both are empty until
    the host has started and set ``_peer_id`` and ``_addrs``."""

    def __init__(self) -> None:
        self._peer_id = ""
        self._addrs: list[str] = []

    @property
    def peer_id(self) -> str:
        """The libp2p peer id (``12D3KooW…``) derived from the node key."""
        return self._peer_id

    def listen_addrs(self) -> list[str]:
        """Full listen multiaddrs (with ``/p2p/<id>``)."""
        return [a if "/p2p/" in a else f"{a}/p2p/{self._peer_id}" for a in self._addrs]


class GossipTransport(Protocol):
    """What the daemon needs from a gossip network; see the module docstring."""

    @property
    def peer_id(self) -> str:
        """This node's peer id."""
        ...

    async def publish(self, topic: str, data: bytes) -> None:
        """Publish ``data`` on ``topic`` (local validator is not applied to own messages)."""
        ...

    def subscribe(self, topic: str) -> AsyncIterator[GossipMessage]:
        """Join ``topic``; iterate accepted messages from other peers."""
        ...

    async def join(self, topic: str) -> None:
        """Join ``topic`` without taking delivery of its messages; return once joined.

        For a node that handles every message in the topic's validator (the protocol core
        does): nothing is queued, pumped or handed over per message or per topic, which a node
        following 1,000 datasets would otherwise pay for 1,000 times. A topic is either joined
        or subscribed, not both.
        """
        ...

    def set_validator(self, topic: str, validator: Validator) -> None:
        """Install the validator of ``topic``; rejected/ignored messages are not forwarded."""
        ...

    def set_request_handler(self, protocol: str, handler: RequestHandler) -> None:
        """Serve request/response exchanges on ``protocol``."""
        ...

    async def request(self, peer: str, protocol: str, data: bytes, timeout_s: float) -> bytes:
        """Send ``data`` to ``peer`` on ``protocol`` and return its response.

        Raises:
            TransportError: unreachable peer, unsupported protocol or timeout.
        """
        ...

    def connected_peers(self) -> list[str]:
        """Peers with an open connection."""
        ...


class RequestTransport(Protocol):
    """What the DHT (``p2p/dht_service.py``) and discovery (``p2p/discovery.py``) need of the
    host: its peer id, its connections, dials, and request/response exchanges."""

    @property
    def peer_id(self) -> str:
        """This node's peer id."""
        ...

    def connected_peers(self) -> list[str]:
        """Peers with an open connection."""
        ...

    async def connect(self, addr: str) -> str:
        """Dial a peer multiaddr; its peer id."""
        ...

    async def request(self, peer: str, protocol: str, data: bytes, timeout_s: float) -> bytes:
        """One request/response exchange."""
        ...


# --------------------------------------------------------------------------------------------
# In-memory twin


class InMemoryNetwork:
    """A fully in-process gossip network: flooding with per-hop validation and de-duplication.

    Links are explicit (:meth:`link`), so tests can build lines, stars or partitions; a message
    travels only across links, each hop applies the receiver's validator before delivering and
    forwarding, and each node forwards a given payload once (like gossipsub's seen-cache).
    """

    def __init__(self) -> None:
        """An empty network."""
        self._nodes: dict[str, InMemoryTransport] = {}
        self._links: dict[str, set[str]] = {}

    def add(self, peer_id: str) -> InMemoryTransport:
        """Create a node named ``peer_id``."""
        if peer_id in self._nodes:
            raise TransportError(f"duplicate peer id {peer_id}")
        t = InMemoryTransport(self, peer_id)
        self._nodes[peer_id] = t
        self._links[peer_id] = set()
        return t

    def link(self, a: str, b: str) -> None:
        """Connect ``a`` and ``b`` (both directions)."""
        self._links[a].add(b)
        self._links[b].add(a)

    def unlink(self, a: str, b: str) -> None:
        """Disconnect ``a`` and ``b``."""
        self._links[a].discard(b)
        self._links[b].discard(a)

    def neighbours(self, peer_id: str) -> list[str]:
        """Peers linked to ``peer_id``."""
        return sorted(self._links.get(peer_id, ()))

    def node(self, peer_id: str) -> InMemoryTransport:
        """The transport of ``peer_id``."""
        try:
            return self._nodes[peer_id]
        except KeyError as e:
            raise TransportError(f"unknown peer {peer_id}") from e

    async def _propagate(self, origin: str, topic: str, data: bytes) -> None:
        for peer in self.neighbours(origin):
            await self._nodes[peer]._receive(origin, topic, data)


class InMemoryTransport:
    """One node of an :class:`InMemoryNetwork`; implements :class:`GossipTransport`."""

    def __init__(self, network: InMemoryNetwork, peer_id: str) -> None:
        """Use :meth:`InMemoryNetwork.add` instead."""
        self._net = network
        self._id = peer_id
        self._queues: dict[str, asyncio.Queue[GossipMessage]] = {}
        self._joined: set[str] = set()
        self._validators: dict[str, Validator] = {}
        self._handlers: dict[str, RequestHandler] = {}
        self._seen: set[tuple[str, bytes]] = set()

    @property
    def peer_id(self) -> str:
        """This node's peer id."""
        return self._id

    async def publish(self, topic: str, data: bytes) -> None:
        """Flood ``data`` to the neighbours."""
        self._seen.add((topic, data))
        await self._net._propagate(self._id, topic, data)

    def subscribe(self, topic: str) -> AsyncIterator[GossipMessage]:
        """Join ``topic`` and iterate its messages."""
        return delivered(self._queues.setdefault(topic, asyncio.Queue()))

    async def join(self, topic: str) -> None:
        """Join ``topic``: validate and forward its messages, deliver none."""
        self._joined.add(topic)

    def set_validator(self, topic: str, validator: Validator) -> None:
        """Install the validator of ``topic``."""
        self._validators[topic] = validator

    def set_request_handler(self, protocol: str, handler: RequestHandler) -> None:
        """Serve ``protocol``."""
        self._handlers[protocol] = handler

    async def request(self, peer: str, protocol: str, data: bytes, timeout_s: float) -> bytes:
        """Call ``peer``'s handler for ``protocol`` (only across a link)."""
        if peer not in self._net.neighbours(self._id):
            raise TransportError(f"{peer} is not connected")
        handler = self._net.node(peer)._handlers.get(protocol)
        if handler is None:
            raise TransportError(f"{peer} does not support {protocol}")
        try:
            return await asyncio.wait_for(handler(self._id, data), timeout_s)
        except TimeoutError as e:
            raise TransportError(f"request to {peer} timed out") from e

    def connected_peers(self) -> list[str]:
        """Linked peers."""
        return self._net.neighbours(self._id)

    async def _receive(self, source: str, topic: str, data: bytes) -> None:
        key = (topic, data)
        if key in self._seen or (topic not in self._queues and topic not in self._joined):
            return
        self._seen.add(key)
        validator = self._validators.get(topic)
        verdict = ValidationResult.ACCEPT if validator is None else await validator(source, data)
        if verdict is not ValidationResult.ACCEPT:
            return
        queue = self._queues.get(topic)
        if queue is not None:
            queue.put_nowait(GossipMessage(topic, data, source))
        await self._net._propagate(self._id, topic, data)
