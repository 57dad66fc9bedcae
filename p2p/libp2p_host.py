"""A :class:`GossipTransport` over py-libp2p 0.8.1, run in its own trio thread.

py-libp2p is trio-only, so the host runs ``trio.run`` in a dedicated thread and talks to the
asyncio side through two thread-safe primitives (``TrioToken.run_sync_soon`` one way,
``loop.call_soon_threadsafe`` the other); see ``docs/libp2p.md``, "Threading model".

Network safety: :meth:`Libp2pTransport.start` refuses to run when any interface other than ``lo``
exists, and listen/dial addresses must be ``/ip4/127.x.x.x``; mDNS, UPnP, AutoTLS, QUIC and
bootstrap are off. Gossipsub is tuned as ``docs/libp2p.md``, "Gossipsub settings" explains:
heartbeat 1 s, ``degree_high`` 64, the library spam limiter and eclipse protection (all loopback
peers share one IP) off in favour of the core's own rate limits, ``seen_ttl`` 600 s,
content-addressed message ids, seqno counter seeded from the wall clock, and a message size cap.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import logging
import socket
import struct
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from p2p.connmgr import ConnectionManager, ConnLimits, PeerConn
from p2p.errors import InvalidPeerAddress, NetworkNotIsolated
from p2p.limits import MAX_MESSAGE_SIZE
from p2p.netguard import assert_loopback_multiaddr, assert_loopback_only
from p2p.relay import RelayLimits
from p2p.transport import (
    GossipMessage,
    HostIdentity,
    RequestHandler,
    TransportError,
    ValidationResult,
    Validator,
    delivered,
)

T = TypeVar("T")
log = logging.getLogger(__name__)
_LEN = struct.Struct(">I")
MAX_REQUEST_SIZE = 1 << 20
# The pending queue covers the moment between a connection and the peer's subscriptions
# arriving (well under a second on loopback); the library defaults are 100 messages and 30 s.
_PENDING_PER_PEER = 16
_PENDING_TTL_S = 5.0
_OUTCOMES_KEPT = 64
# How often what py-libp2p keeps of departed peers is pruned (prune_idle_peer_records).
_PEER_RECORDS_PRUNE_EVERY_S = 30.0


class _QuietPendingQueue(logging.Filter):
    """Drops gossipsub's per-message "pending message queue ... exceeded" WARNING: it fires for
    every message and every connected peer that follows other topics, which is the normal state
    of a node following a few of many datasets, and writing it cost more than the routing."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("pending message queue for peer")


def _quiet_gossipsub_logs() -> None:
    lg = logging.getLogger("libp2p.pubsub.gossipsub")
    if not any(isinstance(f, _QuietPendingQueue) for f in lg.filters):
        lg.addFilter(_QuietPendingQueue())


def parse_peer_multiaddr(addr: str) -> Any:
    """The libp2p ``PeerInfo`` of ``/ip4/.../tcp/N/p2p/<peer id>``.

    Raises:
        InvalidPeerAddress: ``addr`` is not a multiaddr ending in a valid ``/p2p/<peer id>``.
    """
    import multiaddr
    from libp2p.peer.peerinfo import info_from_p2p_addr

    try:
        return info_from_p2p_addr(multiaddr.Multiaddr(addr))
    except Exception as e:  # the multiaddr and libp2p parsers raise many unrelated types
        raise InvalidPeerAddress(f"not a peer multiaddr {addr[:200]!r}: {e}") from None


@dataclass(frozen=True, slots=True)
class Libp2pConfig:
    """Host settings. ``node_seed`` is the node's 32-byte ed25519 private seed."""

    node_seed: bytes
    listen_host: str = "127.0.0.1"
    listen_port: int = 0
    bootstrap: tuple[str, ...] = ()
    heartbeat_interval_s: int = 1
    degree: int = 6
    degree_low: int = 4
    degree_high: int = 64
    seen_ttl_s: int = 600
    # Bootstrap peers that drop are redialled (capped exponential backoff with jitter).
    redial_interval_s: float = 5.0
    redial_max_delay_s: float = 60.0
    # Network safety: refuse to start unless `lo` is the only interface, and refuse any
    # non-loopback listen/dial address. Only an explicitly "open" deployment turns this off.
    loopback_only: bool = True
    # Topics a remote peer may join (py-libp2p's default is 100). One topic per dataset: a node
    # following 1,000 datasets must be heard on all of them.
    max_topics_per_peer: int = 10_000
    join_interval_s: float = 0.02
    # How often the trio thread posts its connected-peer snapshot to the asyncio thread, and
    # how often the connection manager looks at the connected peers.
    peer_watch_interval_s: float = 0.5
    # Reachability behind NAT (p2p/relay.py, docs/nat.md); open mode only. ``nat`` runs
    # AutoNAT (answering peers and asking them) and accepts and dials relayed connections;
    # ``relay_service`` offers a circuit relay to others within ``relay_limits``;
    # ``use_relays`` reserves a slot on the bootstrap peers' relays when AutoNAT says private.
    nat: bool = False
    relay_service: bool = False
    use_relays: bool = True
    relay_limits: RelayLimits = field(default_factory=RelayLimits)
    reachability_interval_s: float = 60.0
    # DCUtR (p2p/holepunch.py, docs/nat.md): with ``nat``, a relayed connection is upgraded to
    # a direct one by a hole punch where the NATs allow it.
    hole_punching: bool = True
    # Connection manager (p2p/connmgr.py, docs/libp2p.md "Connection manager"): above
    # high_water connected peers, trim to low_water; at most max_per_ip inbound peers per
    # remote IP (0: no cap); a new peer is not trimmed for grace_s; a peer whose dial failed
    # waits dial_backoff_base_s, doubling up to dial_backoff_max_s.
    conn_limits: ConnLimits = field(default_factory=ConnLimits)

    @classmethod
    def from_frame(cls, raw: dict[str, Any]) -> Libp2pConfig:
        """The config that ``dataclasses.asdict`` made ``raw`` (the child process's first frame)."""
        return cls(
            **{
                **raw,
                "bootstrap": tuple(raw.get("bootstrap", ())),
                "relay_limits": RelayLimits(**raw.get("relay_limits", {})),
                "conn_limits": ConnLimits(**raw.get("conn_limits", {})),
            }
        )


async def _drain_channel(receive: Any) -> None:
    """Read and drop everything sent to a trio channel, until all its senders are closed."""
    async with receive:
        async for _ in receive:
            pass


def _content_msg_id(msg: Any) -> bytes:
    return hashlib.sha3_256(bytes(msg.data)).digest()


async def _read_frame(stream: Any, limit: int) -> bytes:
    header = await _read_exact(stream, _LEN.size)
    (n,) = _LEN.unpack(header)
    if n > limit:
        raise TransportError(f"frame of {n} bytes exceeds {limit}")
    return await _read_exact(stream, int(n))


async def _read_exact(stream: Any, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = await stream.read(n - len(buf))
        if not chunk:
            raise TransportError("stream closed early")
        buf += chunk
    return bytes(buf)


class Libp2pTransport(HostIdentity):
    """py-libp2p host + gossipsub behind :class:`p2p.transport.GossipTransport`."""

    def __init__(self, config: Libp2pConfig) -> None:
        """Prepare (nothing runs until :meth:`start`)."""
        super().__init__()
        self.config = config
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._token: Any = None
        self._nursery: Any = None
        self._stop_event: Any = None
        self._host: Any = None
        self._pubsub: Any = None
        self._validators: dict[str, Validator] = {}
        self._handlers: dict[str, RequestHandler] = {}
        self._queues: dict[str, asyncio.Queue[GossipMessage]] = {}
        self._joins: dict[str, asyncio.Future[None]] = {}
        self._error: BaseException | None = None
        self._redial_task: asyncio.Task[None] | None = None
        self._join_lock: Any = None
        # Send side of the one channel that takes every joined topic's deliveries (see
        # ``_join_in_trio``); created on the trio thread.
        self._discard: Any = None
        # Written only on the asyncio thread (posted from the trio thread by _watch_peers).
        self._peer_snapshot: tuple[str, ...] = ()
        # The relay machinery (trio side) and its last snapshot (asyncio side).
        self._relay: Any = None
        self._reachability: dict[str, Any] = {"status": "unknown", "relayed_addrs": []}
        # Hole punching (trio side) and what it posted (asyncio side): the last outcomes and,
        # per connected peer, ``direct`` or ``relayed``.
        self._puncher: Any = None
        self._punch_outcomes: collections.deque[dict[str, Any]] = collections.deque(
            maxlen=_OUTCOMES_KEPT
        )
        self._conn_kinds: dict[str, str] = {}

        from p2p.redial import peer_id_of

        # Its connected-peer side runs on the trio thread (_watch_peers), its dial backoff on
        # the asyncio thread (connect); the two keep separate tables.
        self.connmgr = ConnectionManager(
            config.conn_limits,
            time.monotonic,
            protected=frozenset(peer_id_of(a) for a in config.bootstrap),
        )

    # ---- lifecycle

    async def start(self) -> None:
        """Start the trio thread and the host; returns once it listens.

        Raises:
            NetworkNotIsolated: a non-loopback interface exists or an address is not loopback.
        """
        if self.config.loopback_only:
            if self.config.nat or self.config.relay_service:
                raise NetworkNotIsolated("relays and AutoNAT are for open mode only")
            assert_loopback_only("the libp2p host")
            assert_loopback_multiaddr(
                f"/ip4/{self.config.listen_host}/tcp/{self.config.listen_port}"
            )
            for addr in self.config.bootstrap:
                assert_loopback_multiaddr(addr)
        if self.config.listen_port:
            refuse_port_in_use(self.config.listen_host, self.config.listen_port)
        self._loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = self._loop.create_future()
        self._thread = threading.Thread(
            target=self._thread_main, args=(ready,), name="libp2p-trio", daemon=True
        )
        self._thread.start()
        await ready
        if self.config.bootstrap:
            import random

            from p2p.redial import Redialer

            redialer = Redialer(
                addrs=self.config.bootstrap,
                connect=self.connect,
                connected_peers=self.connected_peers,
                sleep=asyncio.sleep,
                rng=random.Random(),
                check_interval_s=self.config.redial_interval_s,
                max_delay_s=self.config.redial_max_delay_s,
            )
            await redialer.run_once()  # first dial before start() returns
            self._redial_task = asyncio.create_task(redialer.run(), name="libp2p-redial")

    def _thread_main(self, ready: asyncio.Future[None]) -> None:
        import trio

        try:
            trio.run(self._trio_main, ready)
        except BaseException as e:
            self._error = e
            loop = self._loop
            assert loop is not None
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_set_exception, ready, e)

    async def _trio_main(self, ready: asyncio.Future[None]) -> None:
        import multiaddr
        import trio
        from libp2p import new_host
        from libp2p.crypto.ed25519 import create_new_key_pair
        from libp2p.pubsub.gossipsub import PROTOCOL_ID, PROTOCOL_ID_V11, PROTOCOL_ID_V12, GossipSub
        from libp2p.pubsub.pubsub import Pubsub
        from libp2p.tools.anyio_service import background_trio_service

        from p2p.inbound_conns import end_inbound_handlers_with_their_connections

        cfg = self.config
        _quiet_gossipsub_logs()
        host = new_host(
            key_pair=create_new_key_pair(cfg.node_seed),
            listen_addrs=[multiaddr.Multiaddr(f"/ip4/{cfg.listen_host}/tcp/{cfg.listen_port}")],
            enable_mDNS=False,
            enable_upnp=False,
            enable_autotls=False,
            enable_quic=False,
            bootstrap=None,
        )
        # py-libp2p 0.8.1 keeps every inbound connection's handler until the swarm stops
        # (p2p/inbound_conns.py): end each with its connection.
        end_inbound_handlers_with_their_connections(host.get_network())
        gossipsub = GossipSub(
            [PROTOCOL_ID_V12, PROTOCOL_ID_V11, PROTOCOL_ID],
            degree=cfg.degree,
            degree_low=cfg.degree_low,
            degree_high=cfg.degree_high,
            heartbeat_interval=cfg.heartbeat_interval_s,
            spam_protection_enabled=False,
            eclipse_protection_enabled=False,
            # On by default: about 30 s after start it rescales the heartbeat from its mesh
            # "health", which with fewer than 6 mesh peers per topic means 30-60 s heartbeats, and
            # the message cache then replays minutes-old messages to every peer that
            # (re)subscribes (docs/libp2p.md, "Gossipsub settings").
            adaptive_gossip_enabled=False,
            # Every message this node sends is also queued for each connected peer not (yet)
            # known in its topic, in case that peer's subscriptions are still arriving; the
            # queue is pruned, and a WARNING logged, per message and per such peer. With 25
            # peers that follow other datasets that was a quarter of this thread's time at
            # 50 messages/s (docs/libp2p.md, "Gossipsub settings").
            max_pending_messages_per_peer=_PENDING_PER_PEER,
            pending_messages_ttl=_PENDING_TTL_S,
        )
        pubsub = Pubsub(
            host,
            gossipsub,
            seen_ttl=cfg.seen_ttl_s,
            strict_signing=True,
            msg_id_constructor=_content_msg_id,
            max_subscriptions_per_peer=cfg.max_topics_per_peer,
        )
        # Seqnos stay fresh across restarts (docs/libp2p.md, "Gossipsub settings").
        pubsub.counter = time.time_ns()
        listen = [multiaddr.Multiaddr(f"/ip4/{cfg.listen_host}/tcp/{cfg.listen_port}")]
        self._token = trio.lowlevel.current_trio_token()
        self._join_lock = trio.Lock()
        self._stop_event = trio.Event()
        async with (
            host.run(listen_addrs=listen),
            background_trio_service(pubsub),
            background_trio_service(gossipsub),
            trio.open_nursery() as nursery,
        ):
            await pubsub.wait_until_ready()
            self._host, self._pubsub, self._nursery = host, pubsub, nursery
            self._peer_id = host.get_id().to_string()
            self._addrs = [str(a) for a in host.get_addrs()]
            for proto in self._handlers:
                self._install_handler(proto)
            loop = self._loop
            assert loop is not None
            nursery.start_soon(self._watch_peers)
            if cfg.nat or cfg.relay_service:
                await self._start_relay(nursery)
            self._discard, discarded = trio.open_memory_channel(256)
            nursery.start_soon(_drain_channel, discarded)
            loop.call_soon_threadsafe(_set_result, ready, None)
            await self._stop_event.wait()
            nursery.cancel_scope.cancel()

    async def _start_relay(self, nursery: Any) -> None:
        from libp2p.tools.anyio_service import background_trio_service

        from p2p.relay import RelaySupport

        cfg = self.config
        loop = self._loop
        assert loop is not None

        def post(snapshot: dict[str, Any]) -> None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._set_reachability, snapshot)

        relay = RelaySupport(
            self._host,
            service=cfg.relay_service,
            client=cfg.nat and cfg.use_relays,
            limits=cfg.relay_limits,
            candidates=lambda: cfg.bootstrap,
            on_change=post,
            check_interval_s=cfg.reachability_interval_s,
        )
        self._relay = relay
        post(relay.snapshot())

        async def serve_relay() -> None:
            async with background_trio_service(relay.protocol):
                if cfg.nat:
                    await relay.run(nursery)
                else:
                    import trio

                    await trio.sleep_forever()

        nursery.start_soon(serve_relay)
        self._start_hole_punching(nursery)

    def _start_hole_punching(self, nursery: Any) -> None:
        """With ``nat`` and ``hole_punching``: the DCUtR service (``p2p/holepunch.py``), which
        registers ``/libp2p/dcutr`` and drives punches. Without, nothing: no punch is driven,
        a peer's attempt finds no ``/libp2p/dcutr`` here, and relayed connections stay relayed
        (``status`` still tells direct from relayed, from :meth:`_watch_peers`)."""
        from libp2p.tools.anyio_service import background_trio_service

        cfg = self.config
        loop = self._loop
        assert loop is not None
        if not (cfg.nat and cfg.hole_punching):
            return
        from p2p.holepunch import HolePuncher, connection_kinds

        def outcome(o: dict[str, Any]) -> None:
            # With the connection kinds as they are now: the outcome and status agree.
            kinds = connection_kinds(self._host)
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._set_conn_kinds, kinds)
                loop.call_soon_threadsafe(self._punch_outcomes.append, o)

        self._puncher = HolePuncher(self._host, outcome)

        async def serve_punch() -> None:
            async with background_trio_service(self._puncher):
                import trio

                await trio.sleep_forever()

        nursery.start_soon(serve_punch)

    def hole_punching(self) -> dict[str, Any]:
        """``{"enabled": bool, "connections": {peer: "direct"|"relayed"}, "outcomes": [...]}``:
        the last hole-punch outcomes (``p2p/holepunch.py``, oldest first, each with a ``seq``
        that grows) and the kind of every connected peer's best connection (empty without
        ``nat``)."""
        return {
            "enabled": self._puncher is not None,
            "connections": dict(self._conn_kinds),
            "outcomes": list(self._punch_outcomes),
        }

    def _set_conn_kinds(self, kinds: dict[str, str]) -> None:
        self._conn_kinds = kinds

    def _set_reachability(self, snapshot: dict[str, Any]) -> None:
        self._reachability = snapshot

    def reachability(self) -> dict[str, Any]:
        """The last reachability snapshot (``p2p/relay.py``: ``status``, ``relayed_addrs``,
        ``relay_service``, ``relay_errors``); ``status`` ``"unknown"`` without AutoNAT."""
        return dict(self._reachability)

    async def stop(self) -> None:
        """Stop the host and join the thread."""
        if self._redial_task is not None:
            self._redial_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._redial_task
            self._redial_task = None
        if self._token is not None and self._stop_event is not None:
            with contextlib.suppress(Exception):
                self._token.run_sync_soon(self._stop_event.set)
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 10)
        self._thread = None

    # ---- bridge

    def _run_in_trio(self, afn: Callable[[], Awaitable[T]]) -> asyncio.Future[T]:
        loop = self._loop
        if loop is None or self._token is None:
            raise TransportError("transport not started")
        fut: asyncio.Future[T] = loop.create_future()

        async def runner() -> None:
            try:
                result = await afn()
            except BaseException as e:
                loop.call_soon_threadsafe(_set_exception, fut, e)
            else:
                loop.call_soon_threadsafe(_set_result, fut, result)

        self._token.run_sync_soon(self._nursery.start_soon, runner)
        return fut

    async def _await_asyncio(self, coro: Coroutine[Any, Any, T]) -> T:
        import trio

        loop = self._loop
        assert loop is not None
        cf = asyncio.run_coroutine_threadsafe(coro, loop)
        done = trio.Event()
        token = self._token

        def wake(_: object) -> None:
            # A handler still running when the host stops ends after trio did: nobody waits.
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(done.set)

        cf.add_done_callback(wake)
        await done.wait()
        return cf.result()

    # ---- GossipTransport (peer_id and listen_addrs: HostIdentity)

    async def connect(self, addr: str, *, exact: bool = False) -> str:
        """Dial a ``/ip4/.../tcp/N/p2p/ID`` multiaddr (loopback only unless open); the peer id.

        A peer already connected is not dialled again (the node's own discovery, DHT and redial
        connect to peers they may already have), unless ``exact``: then this very address is
        dialled when no connection uses it, so a user's ``connect`` of a wrong address fails
        instead of succeeding on the connection there is.
        """
        if self.config.loopback_only:
            assert_loopback_multiaddr(addr)
        from p2p.relay import is_relayed

        relayed = is_relayed(addr)
        if relayed and self._relay is None:
            raise TransportError(f"cannot connect to {addr}: relayed addresses need [p2p] nat")
        info = parse_peer_multiaddr(addr)
        peer = str(info.peer_id.to_string())
        wait = self.connmgr.dial_wait_s(peer, addr)
        if wait > 0 and peer not in self._peer_snapshot:
            raise TransportError(
                f"cannot connect to {addr}: its last dial failed; dial backoff, next try in "
                f"{wait:.0f} s ([p2p] dial_backoff_base_s)"
            )

        async def dial() -> None:
            if relayed:
                await self._relay.dial(addr)
            else:
                # The swarm refuses every dial to a peer for 60 s once one failed (its negative
                # peer cache, docs/libp2p.md "Behind NAT"): an address of that peer not in this
                # node's own per-address backoff is dialled all the same.
                network = self._host.get_network()
                negative = getattr(network, "_negative_peer_cache", None)
                if negative is not None:
                    negative.evict(peer)
                # ``host.connect`` returns at once for a peer already connected, dialling
                # nothing: with ``exact``, dial this very address unless a connection uses it
                # already, so a wrong one fails here instead of being reported (and remembered)
                # as the peer's. Not for the node's own connects: a peer that dialled us is
                # connected from an ephemeral port, and dialling its listen address would open
                # a second connection each time (and, through a relay, a second hole punch).
                if (
                    exact
                    and network.get_connections(info.peer_id)
                    and not any(
                        set(info.addrs) & set(c.get_transport_addresses())
                        for c in network.get_connections(info.peer_id)
                    )
                ):
                    await network.dial_addr(info.addrs[0], info.peer_id)
                await self._host.connect(info)
            peers = tuple(sorted(p.to_string() for p in self._host.get_connected_peers()))
            loop = self._loop
            assert loop is not None
            loop.call_soon_threadsafe(self._set_peer_snapshot, peers)

        try:
            await self._run_in_trio(dial)
        except Exception as e:
            self.connmgr.dial_failed(peer, addr)
            raise TransportError(f"cannot connect to {addr}: {e}") from e
        self.connmgr.dial_succeeded(peer)
        return peer

    async def publish(self, topic: str, data: bytes) -> None:
        """Publish on ``topic`` (size-capped)."""
        if len(data) > MAX_MESSAGE_SIZE:
            raise TransportError(f"message of {len(data)} bytes exceeds {MAX_MESSAGE_SIZE}")

        async def pub() -> None:
            await self._pubsub.publish(topic, data)

        await self._run_in_trio(pub)

    async def topic_peers(self) -> dict[str, set[str]]:
        """Every topic's peers known to have joined it (read on the libp2p thread, copied)."""

        async def read() -> dict[str, set[str]]:
            return {t: {p.to_string() for p in ps} for t, ps in self._pubsub.peer_topics.items()}

        return await self._run_in_trio(read)

    def subscribe(self, topic: str) -> AsyncIterator[GossipMessage]:
        """Join ``topic``; messages are pumped from trio into an asyncio queue."""
        if topic in self._joins and topic not in self._queues:
            raise TransportError(f"{topic} is joined without delivery; it cannot be subscribed")
        queue = self._queues.setdefault(topic, asyncio.Queue(10_000))
        loop = self._loop
        assert loop is not None

        def deliver(gm: GossipMessage) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, gm)

        joined = self._run_in_trio(lambda: self._join_in_trio(topic, deliver))
        self._joins[topic] = joined
        return delivered(queue, joined)

    async def join(self, topic: str) -> None:
        """Join ``topic`` without delivery (see :meth:`GossipTransport.join`)."""
        if topic in self._queues:
            raise TransportError(f"{topic} is subscribed; it cannot also be joined")
        joined = self._joins.get(topic)
        if joined is None:
            joined = self._joins[topic] = self._run_in_trio(lambda: self._join_in_trio(topic, None))
        await asyncio.shield(joined)

    async def _join_in_trio(
        self, topic: str, deliver: Callable[[GossipMessage], None] | None
    ) -> None:
        """On the trio thread: join ``topic`` and drain its subscription into ``deliver``.

        py-libp2p hands each subscribed topic's messages to a bounded channel and drops (with a
        warning) what does not fit, so the channel is drained even when nothing is delivered.
        """
        import trio

        # Joins are serialised and paced: py-libp2p 0.8.1 drops subscription announcements
        # sent in a burst (measured: 1,000 joins at once -> the peer learned 2 topics;
        # 20 ms apart -> all 1,000).
        async with self._join_lock:
            subscription = await self._pubsub.subscribe(topic)
            await trio.sleep(self.config.join_interval_s)

        channels = getattr(self._pubsub, "subscribed_topics_send", None)
        if deliver is None and isinstance(channels, dict) and topic in channels:
            # Nothing reads a joined topic's messages: py-libp2p's delivery for it goes to the
            # one shared channel one task drains, instead of a channel and a task per topic
            # (about 3 KB each: 3 MB for a node following 1,000 datasets). py-libp2p only
            # ``send_nowait``s into this entry and ``aclose``s it on unsubscribe; a clone
            # closes alone.
            per_topic = channels[topic]
            channels[topic] = self._discard.clone()
            await per_topic.aclose()
            return

        async def pump() -> None:
            while True:
                m = await subscription.get()
                if deliver is not None:
                    deliver(GossipMessage(topic, bytes(m.data), _peer_str(m.from_id)))

        self._nursery.start_soon(pump)

    async def wait_joined(self, topic: str) -> None:
        """Return once :meth:`subscribe` has joined ``topic`` (raises what the join raised)."""
        await asyncio.shield(self._joins[topic])

    def set_validator(self, topic: str, validator: Validator) -> None:
        """Install an async validator (run on the asyncio loop) for ``topic``."""
        self._validators[topic] = validator

        async def trio_validator(forwarder: Any, msg: Any) -> bool:
            data = bytes(msg.data)
            if len(data) > MAX_MESSAGE_SIZE:
                return False
            if forwarder == self._host.get_id():
                return True  # our own publish: the interface applies validators to others only
            verdict = await self._await_asyncio(_call(validator, forwarder.to_string(), data))
            return verdict is ValidationResult.ACCEPT

        def install() -> None:
            self._pubsub.set_topic_validator(topic, trio_validator, True)

        if self._token is None:
            raise TransportError("transport not started")
        self._token.run_sync_soon(install)

    def set_request_handler(self, protocol: str, handler: RequestHandler) -> None:
        """Serve ``protocol`` (length-prefixed request, length-prefixed response)."""
        self._handlers[protocol] = handler
        if self._token is not None:
            self._token.run_sync_soon(self._install_handler, protocol)

    def _install_handler(self, protocol: str) -> None:
        from libp2p.custom_types import TProtocol

        handler = self._handlers[protocol]

        async def serve(stream: Any) -> None:
            try:
                request = await _read_frame(stream, MAX_REQUEST_SIZE)
                peer = stream.muxed_conn.peer_id.to_string()
                response = await self._await_asyncio(_call(handler, peer, request))
                await stream.write(_LEN.pack(len(response)) + response)
            except Exception:
                with contextlib.suppress(Exception):
                    await stream.reset()
                return
            with contextlib.suppress(Exception):
                await stream.close()

        self._host.set_stream_handler(TProtocol(protocol), serve)

    async def request(self, peer: str, protocol: str, data: bytes, timeout_s: float) -> bytes:
        """One request/response exchange on a fresh stream."""
        import trio
        from libp2p.custom_types import TProtocol
        from libp2p.peer.id import ID

        async def exchange() -> bytes:
            with trio.fail_after(timeout_s):
                stream = await self._host.new_stream(ID.from_base58(peer), [TProtocol(protocol)])
                try:
                    await stream.write(_LEN.pack(len(data)) + data)
                    return await _read_frame(stream, MAX_REQUEST_SIZE)
                finally:
                    with contextlib.suppress(Exception):
                        await stream.close()

        try:
            return await self._run_in_trio(exchange)
        except TransportError:
            raise
        except Exception as e:
            raise TransportError(f"request to {peer} on {protocol} failed: {e!r}") from e

    def connected_peers(self) -> list[str]:
        """Peers with an open connection: the latest snapshot the trio thread posted.

        libp2p's peer tables belong to the trio thread; reading them from the asyncio thread
        would race with their updates, so the trio side hands copies over by message.
        """
        return list(self._peer_snapshot)

    def _set_peer_snapshot(self, peers: tuple[str, ...]) -> None:
        self._peer_snapshot = peers

    async def _watch_peers(self) -> None:
        import trio

        last: tuple[str, ...] | None = None
        last_kinds: dict[str, str] = {}
        next_peer_prune = time.monotonic() + _PEER_RECORDS_PRUNE_EVERY_S
        while True:
            # Housekeeping of py-libp2p's own records reads its private attributes: whatever
            # it meets, it must never end this loop (the peer snapshots and the connection
            # manager run here).
            try:
                if self._pubsub is not None:
                    prune_unread_gossip_bookkeeping(self._pubsub.router)
                    slim_equivocation_records(
                        self._pubsub.router, time.monotonic(), float(self.config.seen_ttl_s)
                    )
                if time.monotonic() >= next_peer_prune:
                    next_peer_prune = time.monotonic() + _PEER_RECORDS_PRUNE_EVERY_S
                    connected = {p.to_string() for p in self._host.get_connected_peers()}
                    prune_idle_peer_records(self._host.get_network(), connected, time.time())
            except Exception:
                log.exception("libp2p bookkeeping failed; the peer watch goes on")
            if self._host.get_connected_peers():
                await self._manage_connections()
            if self._relay is not None:
                from p2p.holepunch import connection_kinds

                kinds = connection_kinds(self._host)
                if kinds != last_kinds:
                    last_kinds = kinds
                    loop = self._loop
                    assert loop is not None
                    with contextlib.suppress(RuntimeError):
                        loop.call_soon_threadsafe(self._set_conn_kinds, kinds)
            peers = tuple(sorted(p.to_string() for p in self._host.get_connected_peers()))
            if peers != last:
                if last:
                    self._forget(set(last) - set(peers))
                last = peers
                loop = self._loop
                assert loop is not None
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(self._set_peer_snapshot, peers)
            await trio.sleep(self.config.peer_watch_interval_s)

    def _forget(self, gone: set[str]) -> None:
        """On the trio thread: drop what py-libp2p's peerstore keeps of disconnected peers.

        It keeps every peer it ever saw (addresses, key, protocols, records) up to 1,000 peers,
        so a node whose peers come and go grew by their entries for hours (``make
        bench-longrun``: the libp2p process at about 9 MB/h under 200 new peers an hour). The
        daemon keeps its own record of its peers (state ``peers``, discovery), and a dial
        (:meth:`connect`) or an inbound connection stores a peer's data again.
        """
        from libp2p.peer.id import ID

        store = self._host.get_peerstore()
        for peer in gone:
            with contextlib.suppress(Exception):
                pid = ID.from_base58(peer)
                if pid not in self._host.get_connected_peers():
                    store.clear_peerdata(pid)

    async def _manage_connections(self) -> None:
        """On the trio thread: disconnect what the connection manager says must go."""
        conns = []
        ids = {}
        for pid, peer_conns in self._host.get_network().get_connections_map().items():
            if not peer_conns:
                continue
            peer = pid.to_string()
            ids[peer] = pid
            conns.append(_peer_conn(peer, peer_conns[0]))
        # A reservation lives on its connection: the relay's, and its holders' on a relay.
        keep = self._relay.held_slots() if self._relay is not None else ()
        for peer in self.connmgr.update(conns, keep):
            with contextlib.suppress(Exception):
                await self._host.disconnect(ids[peer])


class _Digest:
    """Stands for a message's ``data`` in an equivocation record: equal to exactly the byte
    strings with the same BLAKE2b-256 digest, so the check's ``existing.data != msg.data``
    reads as before while the record keeps 32 bytes instead of the whole payload."""

    __slots__ = ("digest",)

    def __init__(self, data: bytes) -> None:
        self.digest = hashlib.blake2b(data, digest_size=32).digest()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _Digest):
            return self.digest == other.digest
        if isinstance(other, bytes | bytearray | memoryview):
            return self.digest == hashlib.blake2b(other, digest_size=32).digest()
        return NotImplemented  # (``!=`` is the inverse: Python derives it from ``__eq__``)

    __hash__ = None  # type: ignore[assignment]  # compared, never a key


class SlimMessage:
    """What py-libp2p's equivocation check reads of a message it keeps: ``data`` (here a
    :class:`_Digest` of it) and ``topicIDs`` (gossipsub ``_check_equivocation`` compares those
    two and nothing else), and when the record was made slim (``at``, monotonic seconds).

    The router keeps the first message of every (origin, seqno) it sees, up to 1,000 (then
    the newest 500), as the protobuf object itself. A parsed protobuf message keeps its whole
    parse arena alive (the ``RPC`` it came in, every other message and control field of it):
    about 2.8 KB of native memory for an 840-byte gossip RPC, against ~110 bytes tracemalloc
    can see: 1,000 records held ~2 MB that no Python heap census shows (one part of the libp2p
    process's growth under ``make bench-longrun``, docs/operations.md). A slim record holds a
    digest and the topic list: ~0.3 KB instead of the payload's copy.
    """

    __slots__ = ("at", "data", "topicIDs")

    def __init__(self, data: bytes, topic_ids: list[str], at: float = 0.0) -> None:
        self.data = _Digest(data)
        self.topicIDs = topic_ids
        self.at = at


def slim_equivocation_records(router: Any, now: float = 0.0, keep_s: float | None = None) -> int:
    """Replace the protobuf messages py-libp2p's gossipsub keeps for its equivocation check by
    :class:`SlimMessage` records stamped ``now``, newest first until one is already slim; with
    ``keep_s``, drop the slim records older than that; how many were made slim.

    The check's outcome is unchanged for every record kept: the same digest of ``data`` and
    the same topic list. ``keep_s`` is the pubsub seen-cache lifetime: a message whose id the
    seen cache has forgotten is delivered as new anyway, so a record older than that guards
    nothing the seen cache does not, and the records reach their steady size within that time
    instead of filling towards 1,000 for as long as that takes (~20 minutes at one message a
    second). Run on the trio thread, where the router adds them.
    """
    records = getattr(router, "equivocation_detection", None)
    if not records:
        return 0
    done = 0
    for key in reversed(records):  # insertion order: the newest are at the end
        msg = records[key]
        if isinstance(msg, SlimMessage):
            break
        records[key] = SlimMessage(bytes(msg.data), list(msg.topicIDs), now)
        done += 1
    if keep_s is not None:
        expired = []
        for key, msg in records.items():  # oldest first
            if not isinstance(msg, SlimMessage) or now - msg.at <= keep_s:
                break
            expired.append(key)
        for key in expired:
            del records[key]
    return done


def prune_idle_peer_records(network: Any, connected: set[str], wall_now: float) -> int:
    """Drop what py-libp2p 0.8.1 keeps per peer after the peer has gone and the record no
    longer changes anything; how many records went. Run on the trio thread.

    * The resource manager's per-peer connection rate limiter keeps a token bucket for each
      of the last 1,000 peers (evicting only when a new one needs room): a bucket of a peer
      that is not connected and has refilled to at least a new bucket's tokens allows nothing
      a new one would not, so it goes.
    * The auto-connector remembers every disconnect, pruned only past 500 entries; an entry
      counts only during its re-dial backoff (60 s), so older ones go.

    Under churn (``make bench-longrun``: 200 new peers an hour) both grew for hours before
    their caps, a few hundred bytes a peer: that is warm-up the node never finished within the
    bench's hour. ``wall_now`` is ``time.time()``: py-libp2p stamps both with the wall clock.
    """
    dropped = 0
    auto = getattr(network, "auto_connector", None)
    recent = getattr(auto, "_recent_disconnects", None)
    if isinstance(recent, dict):
        backoff = float(getattr(auto, "_disconnect_backoff", 60.0))
        for pid in [p for p, at in recent.items() if wall_now - at > backoff]:
            del recent[pid]
            dropped += 1
    manager = getattr(network, "_resource_manager", None)
    limiter: Any = getattr(manager, "connection_rate_limiter", None)
    buckets = getattr(limiter, "_token_buckets", None)
    if isinstance(buckets, dict):
        for key in list(buckets):
            if not key.startswith("peer:") or key[5:] in connected:
                continue
            bucket = buckets[key]
            config = bucket.config
            elapsed = max(0.0, wall_now - bucket._last_refill_time)
            tokens = min(bucket._tokens + elapsed * config.refill_rate, config.capacity)
            if tokens >= config.initial_tokens:
                del buckets[key]
                limiter._last_request_times.pop(key, None)
                limiter._window_counts.pop(key, None)
                dropped += 1
    return dropped


def prune_unread_gossip_bookkeeping(router: Any) -> None:
    """Drop what py-libp2p 0.8.1's gossipsub records for a feature this node turns off.

    Its router appends the time of every message it routes to ``recent_message_deliveries``
    (one list per topic), which only its adaptive gossip reads and prunes, in the heartbeat,
    when ``adaptive_gossip_enabled`` -- off here (see ``_trio_main``): the lists then grew by
    one float per message for the life of the process. Cleared on the trio thread, where the
    router appends.
    """
    if getattr(router, "adaptive_gossip_enabled", True):
        return
    deliveries = getattr(router, "recent_message_deliveries", None)
    if deliveries:
        deliveries.clear()


def _peer_conn(peer: str, conn: Any) -> PeerConn:
    """What the connection manager needs of a libp2p connection (best effort: py-libp2p's
    connection types differ in what they expose)."""
    from p2p.relay import is_relayed_conn

    ip: str | None = None
    with contextlib.suppress(Exception):
        remote = conn.muxed_conn.get_remote_address()
        if remote is not None and not is_relayed_conn(conn):
            ip = str(remote[0])
    # libp2p.rcmgr.metrics.Direction, an IntEnum whose INBOUND is 0 (falsy).
    direction = getattr(conn, "direction", None)
    inbound = str(getattr(direction, "name", direction)).lower() == "inbound"
    return PeerConn(peer, ip, inbound)


async def _call(fn: Callable[[str, bytes], Awaitable[T]], peer: str, data: bytes) -> T:
    return await fn(peer, data)


def _peer_str(raw: bytes) -> str:
    from libp2p.peer.id import ID

    try:
        return str(ID(raw).to_string())
    except Exception:
        return raw.hex()


def _set_result(fut: asyncio.Future[Any], value: Any) -> None:
    if not fut.done():
        fut.set_result(value)


def refuse_port_in_use(host: str, port: int) -> None:
    """Refuse a gossip port another process listens on.

    py-libp2p's TCP listener sets ``SO_REUSEPORT`` (for hole punching), so a second node given
    the same port binds it too, and the kernel hands each incoming connection to either node:
    dials naming the first node's peer id then fail at random. A plain bind finds the listener
    first (``SO_REUSEADDR`` only, which a socket left in TIME_WAIT allows and a listening one
    does not).

    Raises:
        TransportError: the port is in use, naming the settings that choose another.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as e:
            raise TransportError(
                f"gossip port {host}:{port} is in use ({e.strerror}): another node listens "
                "there; give this one another port (--p2p-port, [p2p] port)"
            ) from None


def _set_exception(fut: asyncio.Future[Any], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)
