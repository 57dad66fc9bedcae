"""The daemon's gossip service: the libp2p host process, the protocol core, discovery, and the
peer upkeep around them (remembered peers, scores, the node's own key records).

:class:`GossipRuntime` is built with the daemon (before the use cases, which reach it through
the :class:`~node.adapters.gossip.GossipSlot` it fills) and started after the application: its
:meth:`start` takes the use cases the gossip service calls (:class:`GossipUse`). Until then, and
after :meth:`stop`, the slot serves :class:`~node.adapters.gossip.NoGossip` and the helpers
here (``stream_request``, ``stream_peers``...) answer as a node without gossip.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from coordinator.identity import DatasetId, PrivateKey
from coordinator.multiformats import Multihash
from coordinator.storage.repository import DatasetRepository
from node.adapters.gossip import GossipAdapter, GossipSlot, NoGossip
from node.adapters.home_keys import HomeKeyStore
from node.app import NodeInfo
from node.app.effects import NodeEffects
from node.app.errors import InvalidArgument
from node.app.events import EventBus
from node.app.fetch import ChainFetcher, IpfsHint
from node.app.follow import SourceFollower
from node.app.metrics import NodeMetrics
from node.app.node_keys import NodeKeys
from node.app.ports import IpfsPort, StatePort
from node.config import NodeConfig
from node.daemon.addresses import advertised_multiaddrs
from node.daemon.reachability import ipfs_hints
from node.daemon.services import ServiceGroup
from node.daemon.wiring import PeerHooks
from node.home import NodeHome
from p2p.core import CoreConfig, ProtocolCore
from p2p.dht.stats import status_row

log = logging.getLogger("odf_node.daemon")

_PEER_SCORES_EVERY_S = 10.0
_DHT_STATUS_EVERY_S = 2.0
# A connected peer learns our topics from our first subscription message; a record published
# before that would not reach it (py-libp2p sends only to peers known in the topic).
_KEY_RECORDS_DELAY_S = 2.0


@dataclass(frozen=True)
class GossipUse:
    """The use cases the gossip service works with, handed over when it starts."""

    fetcher: ChainFetcher
    effects: NodeEffects
    follower: SourceFollower
    connect_peer: Callable[[str], Awaitable[object]]
    served_head: Callable[[DatasetId], str | None]


class GossipRuntime:
    """The ``gossip`` service of the daemon (see the module docstring)."""

    name = "gossip"

    def __init__(
        self,
        *,
        config: NodeConfig,
        home: NodeHome,
        node_key: PrivateKey,
        repo: DatasetRepository,
        state: StatePort,
        ipfs: Callable[[], IpfsPort],
        metrics: NodeMetrics,
        events: EventBus,
        clock: Callable[[], int],
        rng: random.Random,
        info: NodeInfo,
        group: ServiceGroup,
        slot: GossipSlot,
        owns: Callable[[DatasetId], bool],
        http_base: Callable[[], str],
        use: Callable[[], GossipUse],
    ) -> None:
        self._config = config
        self._home = home
        self._node_key = node_key
        self._repo = repo
        self._state = state
        self._ipfs = ipfs
        self._metrics = metrics
        self._events = events
        self._clock = clock
        self._rng = rng
        self._info = info
        self._group = group
        self._slot = slot
        self._owns = owns
        self._http_base = http_base
        self._use = use
        self.transport: Any = None
        """The libp2p host process (``p2p/libp2p_process.py``) while the service runs."""
        self.discovery: Any = None
        """Provider discovery (``p2p/discovery.py``), when ``[p2p] discovery`` is on."""
        self.dht: Any = None
        """The odf DHT (``p2p/dht_service.py``), when ``[dht] enabled`` is on."""
        self._service: Any = None
        self._own_key_records: list[bytes] | None = None

    # ---- lifecycle

    async def start(self) -> None:
        """Start the libp2p host, restore the core's subscriptions and accepted heads, run the
        gossip service and discovery, and serve the gossip port through the slot."""
        from p2p.service import GossipService

        use = self._use()
        self.transport = self._start_transport()
        await self.transport.start()
        core = await self._restored_core(use.follower)
        if self._config.p2p.serve_streams:
            from node.transfer.streams import PROTOCOL as STP_PROTOCOL

            served = use.served_head
            self.transport.set_request_handler(
                STP_PROTOCOL, lambda peer, data: self._serve_stream(served, data)
            )
        self._service = GossipService(core, self.transport, self._clock, use.fetcher, use.effects)
        self._service.on_peer_change(self._on_peer_change)
        await self._service.start()
        if self._config.dht.enabled and self._config.p2p.discovery:
            # Part of discovery: a node told to find no peers (discovery off) dials none.
            self._start_dht()
        if self._config.p2p.discovery:
            self._start_discovery(core)
        self._slot.install(
            GossipAdapter(
                self._service,
                self.transport,
                advertise=self.advertised_addrs,
                on_follow=self.discovery.trigger if self.discovery is not None else None,
            )
        )
        self._group.spawn_restarting(lambda: self._redial_known_peers(use), "peer-redial")
        self._group.spawn_restarting(self._record_peer_scores, "peer-scores")

    async def stop(self) -> None:
        """Stop the gossip service and the libp2p host; the slot serves no gossip again."""
        self._slot.install(NoGossip())
        if self._service is not None:
            await self._service.stop()
        if self.transport is not None:
            await self.transport.stop()

    def _start_transport(self) -> Any:
        from p2p.connmgr import ConnLimits
        from p2p.libp2p_host import Libp2pConfig
        from p2p.libp2p_process import Libp2pProcessTransport
        from p2p.relay import RelayLimits

        p = self._config.p2p
        loopback_only = self._config.network.loopback_only
        # The libp2p host runs in a process of its own: in a thread it held this interpreter's
        # lock for half of every second under load (docs/libp2p.md, "Process model").
        return Libp2pProcessTransport(
            Libp2pConfig(
                node_seed=self._node_key.seed(),
                listen_host=p.listen_host,
                listen_port=p.port,
                bootstrap=p.bootstrap,
                loopback_only=loopback_only,
                # Reachability behind NAT: open mode only (docs/nat.md).
                nat=not loopback_only,
                relay_service=p.relay_service,
                use_relays=p.use_relays,
                relay_limits=RelayLimits(
                    max_reservations=p.relay_max_reservations,
                    max_reservations_per_ip=p.relay_max_reservations_per_ip,
                    max_circuits=p.relay_max_circuits,
                    circuit_duration_s=p.relay_circuit_duration_s,
                    circuit_bytes=p.relay_circuit_bytes,
                    max_circuits_per_peer=p.relay_max_circuits_per_peer,
                    peer_bytes=p.relay_peer_bytes,
                    total_bytes=p.relay_total_bytes,
                    bytes_window_s=p.relay_bytes_window_s,
                ),
                reachability_interval_s=p.reachability_interval_s,
                hole_punching=p.hole_punching,
                conn_limits=ConnLimits(
                    high_water=p.peers_high_water,
                    low_water=p.peers_low_water,
                    max_per_ip=p.peers_per_ip_cap(loopback_only),
                    grace_s=p.conn_grace_s,
                    dial_backoff_base_s=p.dial_backoff_base_s,
                    dial_backoff_max_s=p.dial_backoff_max_s,
                ),
            ),
            on_restart=self._metrics.gossip_restarts.inc,
        )

    async def _restored_core(self, follower: SourceFollower) -> ProtocolCore:
        """A protocol core subscribed to what the node follows and owns, with the accepted
        heads of the last run reinstalled."""
        p = self._config.p2p
        core = ProtocolCore(
            CoreConfig(
                fetch_timeout_ns=int(p.fetch_timeout_s * 1e9),
                anti_entropy_interval_ns=int(p.anti_entropy_interval_s * 1e9),
                signer_rate_burst=p.signer_rate_burst,
                signer_rate_per_s=p.signer_rate_per_s,
            ),
            self._rng,
        )
        state = self._state
        by_url: set[str] = set()
        for sub in await state.subscriptions():
            core.subscribe(DatasetId.parse(sub.did))
            if sub.source_url is not None:
                by_url.add(sub.did)
        for h in await asyncio.to_thread(self._repo.list):
            if self._owns(h.id):
                core.subscribe(h.id)
        for acc in await state.accepted_heads():
            if acc.did in by_url:
                # A head pulled from a source: its "announcement" is our own observation.
                did = DatasetId.parse(acc.did)
                source = follower.source_of(did)
                if source is not None:
                    core.follow_source(did, source, Multihash.from_multibase(acc.head))
                continue
            try:
                core.restore_accepted(acc.envelope)
            except Exception as e:
                log.warning("could not restore accepted head of %s: %s", acc.did, e)
        return core

    def _start_discovery(self, core: ProtocolCore) -> None:
        from p2p.discovery import PROVIDERS_PROTOCOL, Discovery

        p = self._config.p2p
        subscribed = core.subscriptions
        self.discovery = discovery = Discovery(
            self.transport,
            self_record=self._peer_record,
            carries=lambda d: d in subscribed(),
            followed=lambda: [d for d in subscribed() if not self._owns(d)],
            connect_ipfs=self._discovered_ipfs,
            rng=self._rng,
            interval_s=p.discovery_interval_s,
            loopback_only=self._config.network.loopback_only,
            # Remembered, so a restarted node redials the peers it knew at once.
            on_record=self._remember_record,
            # One hop found no carrier: the DHT is asked (docs/libp2p.md).
            find_providers=self.dht.find_peer_records if self.dht is not None else None,
            ask_dht_after_s=self._config.dht.ask_after_s,
        )
        self.transport.set_request_handler(PROVIDERS_PROTOCOL, discovery.serve)
        self._service.on_peer_change(
            lambda _peer, connected: discovery.trigger() if connected else None
        )
        self._group.spawn_restarting(discovery.run, "discovery")

    def _start_dht(self) -> None:
        """Serve ``/odf/kad/1.0.0`` (unless light: ``[dht] serve = false``) and keep the
        datasets this node carries provided; a round runs on every new connection."""
        from p2p.dht import RecordLimits
        from p2p.dht.wire import PROTOCOL as KAD_PROTOCOL
        from p2p.dht_service import DhtConfig, DhtService

        d = self._config.dht
        self.dht = dht = DhtService(
            self.transport,
            node_key=self._node_key,
            self_addrs=self._dht_addrs,
            provided=self._carried,
            config=DhtConfig(
                serve=d.serve,
                interval_s=d.interval_s,
                query_timeout_s=d.query_timeout_s,
                lookup_timeout_s=d.lookup_timeout_s,
                rate_per_s=d.rate_per_s,
                rate_burst=d.rate_burst,
                records=RecordLimits(
                    ttl_ns=int(d.record_ttl_s * 1e9),
                    republish_ns=int(d.republish_s * 1e9),
                    per_key=d.records_per_dataset,
                    per_provider=d.datasets_per_provider,
                    max_records=d.max_records,
                ),
                loopback_only=self._config.network.loopback_only,
            ),
        )
        if d.serve:
            self.transport.set_request_handler(KAD_PROTOCOL, dht.serve)
        self._service.on_peer_change(lambda _peer, connected: dht.trigger() if connected else None)
        self._group.spawn_restarting(dht.run, "dht")
        self._group.spawn_restarting(self._report_dht, "dht-status")

    async def _report_dht(self) -> None:
        """Copy the DHT's counters into ``status`` (``p2p.dht``) every few seconds."""
        while True:
            self._info.dht = status_row(
                self.dht.stats, routing_table=len(self.dht.table), records=len(self.dht.store)
            )
            await asyncio.sleep(_DHT_STATUS_EVERY_S)

    def _dht_addrs(self) -> tuple[tuple[str, ...], tuple[str, ...], str]:
        """This node's (gossip, IPFS, HTTP) addresses for its signed provider records."""
        rec = self._peer_record()
        return rec.gossip, rec.ipfs, rec.http

    async def _carried(self) -> list[DatasetId]:
        """What this node provides in the DHT: the datasets it owns, and those it follows with
        a trusted head (a follower provides what it verified, never a head it only heard of)."""
        owned = [h.id for h in await asyncio.to_thread(self._repo.list) if self._owns(h.id)]
        trusted = [
            DatasetId.parse(s.did) for s in await self._state.subscriptions() if s.trusted_head
        ]
        return [*owned, *trusted]

    # ---- what the use cases and the other services ask of it

    def advertised_addrs(self) -> list[str]:
        """The gossip addresses peers should dial (relayed ones first behind NAT)."""
        if self.transport is None:
            return []
        direct = advertised_multiaddrs(
            list(self.transport.listen_addrs()),
            self._config.network.advertise_host,
            loopback_only=self._config.network.loopback_only,
        )
        reach = self._info.reachability
        relayed = [str(a) for a in reach.get("relayed_addrs", [])]
        # Behind NAT the direct addresses reach no one: peers dial the relayed ones first.
        return [*relayed, *direct] if reach.get("status") == "private" else [*direct, *relayed]

    async def stream_request(self, peer: str, protocol: str, data: bytes, timeout: float) -> bytes:
        """A request over the gossip host (``libp2p://`` pull sources)."""
        if self.transport is None:
            raise InvalidArgument("gossip is not running: no libp2p sources")
        result: bytes = await self.transport.request(peer, protocol, data, timeout)
        return result

    def stream_peers(self, did: DatasetId) -> list[str]:
        """Connected peers known (discovery) to carry ``did``: libp2p pull sources."""
        if self.discovery is None or self.transport is None:
            return []
        connected = set(self.transport.connected_peers())
        d = did.as_did_str()
        return [
            rec.peer_id
            for rec in self.discovery.providers()
            if d in rec.carries and rec.peer_id in connected
        ]

    def peer_connected(self, peer: str) -> bool:
        """Whether the gossip host is connected to ``peer`` (a libp2p pull source)."""
        return self.transport is not None and peer in self.transport.connected_peers()

    def ipfs_hints(self, did: DatasetId) -> list[IpfsHint]:
        """Why the IPFS node may get nothing of ``did`` (discovery's view; for pull events)."""
        if self.discovery is None:
            return []
        failed, withheld = self.discovery.ipfs_problems(did)
        return ipfs_hints(failed, withheld)

    def move_peer_score(self, old_peer: str, new_peer: str) -> None:
        """A peer rotated its node key: its score follows it to its new peer id."""
        if self._service is not None:
            self._service.core.move_peer_score(old_peer, new_peer, self._clock())

    # ---- serving and discovery

    async def _serve_stream(self, served: Callable[[DatasetId], str | None], data: bytes) -> bytes:
        """``/odf/stp/1.0.0``: hosted datasets to connected peers (node/transfer/streams.py)."""
        from node.transfer.streams import serve

        return await asyncio.to_thread(serve, self._repo, served, data)

    def _peer_record(self) -> Any:
        """This node's record for ``/odf/providers/1.0.0``: where peers reach it."""
        from p2p.discovery import PeerRecord

        ipfs = self._ipfs().info() or {}
        return PeerRecord(
            peer_id=str(self.transport.peer_id),
            gossip=tuple(self.advertised_addrs()),
            ipfs=tuple(str(a) for a in as_list(ipfs.get("addresses"))),
            http=self._http_base(),
            ipfs_withheld=tuple(str(a) for a in as_list(ipfs.get("withheld_addresses"))),
        )

    def _remember_record(self, rec: Any) -> None:
        async def store() -> None:
            await self._state.upsert_peer(rec.peer_id, list(rec.gossip), None, True)

        self._group.spawn(store(), "effect")

    async def _discovered_ipfs(self, multiaddr: str) -> None:
        """Connect the IPFS node to a provider's (only loopback ones in loopback-only mode)."""
        if self._config.network.loopback_only and not multiaddr.startswith("/ip4/127."):
            raise InvalidArgument(
                f"refusing non-loopback IPFS address {multiaddr!r}: "
                "[network] isolation is 'loopback-only'"
            )
        ipfs = self._ipfs()
        if ipfs.api_url is None:
            return
        await asyncio.wait_for(ipfs.connect(multiaddr), 15)

    # ---- peers

    def _on_peer_change(self, peer: str, connected: bool) -> None:
        # Every node has records of its own to gossip: its key's inception at least.
        if connected:
            self._group.spawn(self._publish_own_key_records(_KEY_RECORDS_DELAY_S), "effect")
        self._metrics.peers.set(self._slot.peer_count())
        self._events.publish("peer.connected" if connected else "peer.disconnected", {"peer": peer})
        self._group.spawn(self._state.upsert_peer(peer, None, None, connected), "effect")

    async def _publish_own_key_records(self, delay_s: float) -> None:
        """Gossip this node's key inception, rotation and revocation records
        (node/app/node_keys.py) on the node topic, ``delay_s`` after a peer connected (once it
        has learnt our topics). Read once: only ``key rotate`` / ``key revoke`` change them, and
        they need the daemon stopped."""
        from p2p.transport import NODE_TOPIC

        await asyncio.sleep(delay_s)
        records = self._own_key_records
        if records is None:
            keys = NodeKeys(HomeKeyStore(self._home), self._state, self._clock)
            records = self._own_key_records = await keys.own_records()
        for envelope in records:
            await self._service.publish_best_effort(NODE_TOPIC, envelope)

    async def _record_peer_scores(self) -> None:
        while True:
            await asyncio.sleep(_PEER_SCORES_EVERY_S)
            for peer in self._service.connected_peers():
                await self._state.upsert_peer(peer, None, self._slot.peer_score(peer), True)

    async def _redial_known_peers(self, use: GossipUse) -> None:
        bootstrap = set(self._config.p2p.bootstrap)
        connected = set(self._service.connected_peers())
        for p in await self._state.peers():
            for addr in p.addrs:
                if addr in bootstrap or p.peer_id in connected:
                    continue
                try:
                    await asyncio.wait_for(use.connect_peer(addr), 15)
                    log.info("reconnected to known peer %s", p.peer_id)
                    break
                except Exception as e:
                    log.info("known peer %s at %s unreachable: %s", p.peer_id, addr, e)
        await asyncio.Event().wait()  # done: stay parked so the supervisor does not restart it


def as_list(value: object) -> list[object]:
    """``value`` if it is a JSON array, else empty (a status field that is absent or malformed)."""
    return value if isinstance(value, list) else []


def peer_hooks(gossip: GossipRuntime | None) -> PeerHooks:
    """What the use cases ask of the gossip host; a node without gossip answers "nothing"."""
    if gossip is not None:
        return PeerHooks(
            stream_request=gossip.stream_request,
            stream_peers=gossip.stream_peers,
            peer_connected=gossip.peer_connected,
            ipfs_hints=gossip.ipfs_hints,
            move_peer_score=gossip.move_peer_score,
        )

    async def no_request(peer: str, protocol: str, data: bytes, timeout: float) -> bytes:
        raise InvalidArgument("gossip is not running: no libp2p sources")

    return PeerHooks(
        stream_request=no_request,
        stream_peers=lambda did: [],
        peer_connected=lambda peer: False,
        ipfs_hints=lambda did: [],
        move_peer_score=lambda old, new: None,
    )
