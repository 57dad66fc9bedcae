"""The composition root: builds the adapters, wires the application, runs the services.

Read top down: this module -> use cases (``node/app``) -> ports (``node/app/ports.py``) ->
adapters (``node/adapters``, ``node/state``, ``p2p``, ``node/ipfs``, ``node/transfer``,
``node/engine_client.py``). Nothing here decides anything about datasets or gossip: it only
creates objects and starts/stops them.

Service start order (stopped in reverse): state -> IPFS -> engine -> gossip -> pipeline
workers -> HTTP surface -> RPC. Accepted heads are reinstalled into the protocol core at
start-up, and work items claimed by a process that died are released and resumed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import random
import signal
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from coordinator.errors import OdfNodeError
from coordinator.identity import DatasetId, PrivateKey
from coordinator.multiformats import Multihash
from coordinator.storage.repository import DatasetRepository
from node.adapters.backup import HomeBackup
from node.adapters.gossip import GossipAdapter, NoGossip
from node.adapters.ipfs import IpfsAdapter, NoIpfs
from node.adapters.loop_thread import LoopThread
from node.adapters.query_engine import DataFusionQueryEngine
from node.adapters.spark_query import SparkQueryEngine
from node.adapters.state import ThreadedState
from node.adapters.transfer import TransferAdapter
from node.app import Application, NodeInfo
from node.app.console import ConsoleQueries
from node.app.data import VerifiedData
from node.app.datasets import CommitLocks, DatasetUseCases
from node.app.effects import NodeEffects
from node.app.errors import InvalidArgument
from node.app.events import EventBus
from node.app.fetch import ChainFetcher
from node.app.flows import POLL, TRANSFORM, FlowUseCases
from node.app.follow import FollowSettings, SourceFollower
from node.app.identities import NodeIdentities
from node.app.keys import NodeKeyRecords
from node.app.metrics import NodeMetrics
from node.app.ports import GossipPort, IpfsPort, StatePort
from node.app.publish import PublishPipeline
from node.app.query_proofs import CommitmentSigner
from node.app.subscriptions import SubscriptionUseCases
from node.app.trust import TrustDriver
from node.app.verify import VerifyPipeline
from node.app.work import RetryPolicy, WorkRunner, prune_finished_work
from node.compose import polling_options
from node.config import NodeConfig
from node.daemon.addresses import advertised_http_url, advertised_multiaddrs
from node.daemon.health import Readiness
from node.daemon.loop_monitor import GcPauses, watch_event_loop
from node.daemon.reachability import ipfs_hints, start_warnings, withheld_ipfs
from node.daemon.sdnotify import Notifier, ping_watchdog
from node.daemon.services import FunctionService, ServiceGroup
from node.home import NodeHome
from node.home_lock import HomeLock
from p2p.core import CoreConfig, ProtocolCore
from procutil.heap import trim_heap

log = logging.getLogger("odf_node.daemon")

_PRUNE_EVERY_NS = 600 * 1_000_000_000
# A node that keeps finished work less than ~1.7 h (a compressed-time benchmark) prunes every
# tenth of that window instead, so its state file still levels off at about one window of work.
_PRUNE_WINDOW_FRACTION = 0.1
_TRIM_HEAP_EVERY_NS = 60 * 1_000_000_000  # procutil/heap.py
# The daemon runs four busy threads (this loop, the libp2p thread, the transfer loop, the state
# writer). Each time this loop wakes (a socket ready, a result handed over) it needs the GIL,
# and with Python's default 5 ms switch interval it waits up to that long behind a thread that
# computes; an RPC call wakes it a dozen times. 1 ms keeps that wait short at little cost.
_GIL_SWITCH_INTERVAL_S = 0.001
_PEER_SCORES_EVERY_S = 10.0
_REACHABILITY_POLL_S = 2.0
# A connected peer learns our topics from our first subscription message; a record published
# before that would not reach it (py-libp2p sends only to peers known in the topic).
_KEY_RECORDS_DELAY_S = 2.0


@dataclass
class Daemon:
    """One running node. ``await run(stop_event)`` starts everything and runs until stopped."""

    home: NodeHome
    config: NodeConfig
    clock: Callable[[], int] = time.time_ns
    rng: random.Random = field(default_factory=random.Random)
    ephemeral: bool = False

    repo: DatasetRepository = field(init=False)
    node_key: PrivateKey = field(init=False)
    metrics: NodeMetrics = field(init=False)
    events: EventBus = field(init=False)
    group: ServiceGroup = field(init=False)
    transfer_loop: LoopThread = field(init=False)
    transfer: TransferAdapter = field(init=False)
    gc_pauses: GcPauses = field(init=False)
    info: NodeInfo = field(init=False)
    locks: CommitLocks = field(init=False)
    state: StatePort = field(init=False)
    gossip: GossipPort = field(init=False)
    ipfs: IpfsPort = field(init=False)
    app: Application = field(init=False)
    trust: TrustDriver = field(init=False)
    _engine: Any = field(default=None, init=False)
    _ipfs_node: Any = field(default=None, init=False)
    _transport: Any = field(default=None, init=False)
    _service: Any = field(default=None, init=False)
    _discovery: Any = field(default=None, init=False)
    _http_runner: Any = field(default=None, init=False)
    _flight_sql: Any = field(default=None, init=False)
    _flight_sql_thread: Any = field(default=None, init=False)
    _rpc: Any = field(default=None, init=False)
    _threaded: ThreadedState | None = field(default=None, init=False)
    stopping: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.repo = self.home.repository()
        self.node_key = self.home.node_key()
        self.metrics = NodeMetrics()
        self.events = EventBus()
        self.group = ServiceGroup()
        self.locks = CommitLocks()
        self.gossip = NoGossip()
        self.ipfs = NoIpfs()
        self.info = NodeInfo(
            node_id=self.node_key.dataset_id().as_did_key(),
            home=str(self.home.path),
            spark_master=self.config.engine.spark_master,
            block_version=self.config.metadata.apply(),
            config=self.config.to_dict(),
        )

    @property
    def node_id(self) -> str:
        """The node's ``did:key``."""
        return self.info.node_id

    def owns(self, did: DatasetId) -> bool:
        """Whether this node holds the dataset key of ``did``."""
        return self.repo.key_path(did).is_file()

    # ---- lifecycle

    async def run(self, stop: asyncio.Event) -> None:
        """Start every service, run until ``stop`` is set or a task crashes, then stop."""
        if os.environ.get("ODF_NODE_TRACEMALLOC", "0") != "0":
            from procutil.memdebug import start_if_requested

            start_if_requested()
        lock = HomeLock(self.home.path)
        lock.acquire_daemon()
        sys.setswitchinterval(_GIL_SWITCH_INTERVAL_S)
        notifier = Notifier()
        # As sd_notify(unset_environment=1): child processes (libp2p, IPFS, engine workers) must
        # not inherit the socket or the watchdog and speak for the node.
        for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
            os.environ.pop(name, None)
        self.group.on_starting = lambda name: notifier.status(f"starting {name}")
        gc_pauses = self.gc_pauses = GcPauses(
            lambda gen, s: self.metrics.gc_pause.labels(str(gen)).observe(s)
        )
        try:
            self._build_services()
            await self.group.start()
            self.info.started_at_ns = self.clock()
            await self._warn_reachability()
            gc_pauses.install(freeze=True)
            # systemd (Type=notify): every service is up. The watchdog pings from this loop.
            notifier.ready(f"ready: node {self.node_id}")
            interval = notifier.watchdog_interval_s
            if interval is not None:
                self.group.spawn_restarting(
                    lambda: ping_watchdog(notifier, interval), "systemd-watchdog"
                )
            log.info(
                "odf-node ready: home=%s node_id=%s rpc=%s http=%s ipfs=%s",
                self.home.path,
                self.node_id,
                self.info.rpc_url,
                self.info.http_url,
                self.ipfs.api_url,
            )
            waiter = asyncio.ensure_future(stop.wait())
            failure = asyncio.ensure_future(self.group.wait_failure())
            done, _ = await asyncio.wait({waiter, failure}, return_when=asyncio.FIRST_COMPLETED)
            for t in (waiter, failure):
                t.cancel()
            self.stopping = True
            notifier.stopping()
            log.info("odf-node stopping")
            await self.group.stop()
            if failure in done and not failure.cancelled():
                raise RuntimeError(f"a daemon task crashed: {failure.result()!r}")
        finally:
            notifier.close()
            gc_pauses.uninstall()
            lock.release()
            log.info("odf-node stopped")

    def _build_services(self) -> None:
        g = self.group
        g.add(FunctionService("state", self._start_state, self._stop_state))
        if self.config.ipfs.mode != "none":
            g.add(FunctionService("ipfs", self._start_ipfs, self._stop_ipfs))
        g.add(FunctionService("engine", _noop, self._stop_engine))
        g.add(FunctionService("application", self._start_app, self._stop_app))
        if self.config.p2p.enabled:
            g.add(FunctionService("gossip", self._start_gossip, self._stop_gossip))
        g.add(FunctionService("pipeline", self._start_pipeline, _noop))
        if self.config.http.enabled:
            g.add(FunctionService("http", self._start_http, self._stop_http))
        if self.config.query.flight_sql_enabled:
            # After the application (stopped before it): its calls run Application.data.
            g.add(FunctionService("flight-sql", self._start_flight_sql, self._stop_flight_sql))
        g.add(FunctionService("rpc", self._start_rpc, self._stop_rpc))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        return self.group.spawn(coro, "effect")

    # ---- state

    async def _start_state(self) -> None:
        # Opening runs migrations (disk IO): off the loop like every later call.
        threaded = await asyncio.to_thread(ThreadedState, self.home.path / "state.db", self.clock)
        self._threaded = threaded
        self.state = threaded
        released = await self.state.release_claims()
        if released:
            log.info("resuming %d work item(s) interrupted by the last shutdown", released)
        await self.state.log_event("daemon.start", None, {"node_id": self.node_id})

    async def _stop_state(self) -> None:
        with contextlib.suppress(Exception):
            await self.state.log_event("daemon.stop", None, {})
        close = getattr(self.state, "aclose", None)
        if close is not None:
            await close()
        else:
            self.state.close()  # type: ignore[attr-defined]

    # ---- IPFS

    async def _start_ipfs(self) -> None:
        from node.ipfs.client import IpfsClient

        cfg = self.config.ipfs
        if cfg.mode == "embedded":
            from node.daemon.ipfs_process import start_embedded_ipfs

            adv = self.config.network.advertise_host
            announce = (
                tuple(
                    advertised_multiaddrs(
                        [f"/ip4/0.0.0.0/tcp/{cfg.swarm_port}"], adv, loopback_only=False
                    )
                )
                if adv and cfg.swarm_port
                else ()
            )
            self._ipfs_node = await asyncio.to_thread(
                functools.partial(
                    start_embedded_ipfs,
                    self.home.path / "ipfs",
                    self.config.network.loopback_only,
                    swarm_host=cfg.swarm_host,
                    swarm_port=cfg.swarm_port,
                    announce=announce,
                )
            )
            api = self._ipfs_node.api_url
        else:
            api = cfg.api_url
        async with IpfsClient(api) as client:
            ident = await client.id()
            peer_id = ident.get("ID") or ident.get("id")
            listening = [str(a) for a in ident.get("Addresses") or ident.get("addresses") or []]
            # What peers should dial: the advertised host, and no loopback address in open mode.
            addresses = advertised_multiaddrs(
                listening,
                self.config.network.advertise_host,
                loopback_only=self.config.network.loopback_only,
            )
            info = {
                "peer_id": peer_id,
                "addresses": [a if "/p2p/" in a else f"{a}/p2p/{peer_id}" for a in addresses],
                "api": api,
                "mode": cfg.mode,
            }
            if not self.config.network.loopback_only:
                # Listened on but advertised to nobody (loopback in open mode): named in the
                # start warning and in the discovery record, so peers can say why they wait.
                info["withheld_addresses"] = [
                    a if "/p2p/" in a else f"{a}/p2p/{peer_id}"
                    for a in withheld_ipfs(listening, addresses)
                ]
            # Configured peers, then the ones an operator connected earlier (remembered).
            remembered = [
                str(e.data["multiaddr"])
                for e in await self.state.events(0, 1000, "ipfs.connect")
                if "multiaddr" in e.data
            ]
            for addr in dict.fromkeys([*cfg.swarm_peers, *remembered]):
                try:
                    await asyncio.wait_for(client.swarm_connect(addr), 15)
                except Exception as e:  # a peer being down must not stop the node
                    log.warning("IPFS swarm connect to %s failed: %s", addr, e)
        self.ipfs = IpfsAdapter(api, info)

    async def _stop_ipfs(self) -> None:
        if self._ipfs_node is not None:
            from node.daemon.ipfs_process import stop_embedded_ipfs

            await asyncio.to_thread(stop_embedded_ipfs, self._ipfs_node, self.home.path / "ipfs")
            self._ipfs_node = None

    # ---- engine

    def engine(self) -> Any:
        """The engine router, created on first use: its modules (gRPC, pyarrow) and its worker
        processes (Spark, DataFusion per release) cost memory that an idle node should not
        pay."""
        if self._engine is None:
            from node.engine_client import EngineClient
            from node.engine_router import EngineRouter

            e = self.config.engine
            memory = (e.memory_limit_mib << 20) or None
            cpu = e.cpu_limit_s or None
            self._engine = EngineRouter(
                lambda: EngineClient(
                    master=e.spark_master,
                    idle_timeout=float(e.idle_timeout_s),
                    isolate_network=e.isolate_network,
                    memory_limit=memory,
                    cpu_limit=cpu,
                    driver_host=e.driver_host,
                ),
                idle_timeout=float(e.idle_timeout_s),
                isolate_network=e.isolate_network,
                memory_limit=memory,
                cpu_limit=cpu,
                datafusion_workers=e.datafusion_workers or None,
            )
        return self._engine

    async def _stop_engine(self) -> None:
        if self._engine is not None:
            await asyncio.to_thread(self._engine.close)

    # ---- the application

    def _http_base(self) -> str:
        """The HTTP base URL peers pull from ("" without an HTTP surface or public URL)."""
        return advertised_http_url(
            self.config.http.public_url,
            (self.info.http_url or "") if self.config.http.enabled else "",
            self.config.network.advertise_host,
        )

    def http_urls(self, did: DatasetId) -> tuple[str, ...]:
        """Where peers can pull ``did`` from this node over HTTP (announced in gossip)."""
        base = self._http_base()
        return (f"{base}/{did.as_did_str()}",) if base else ()

    async def _start_app(self) -> None:
        p = self.config.pipeline
        work = WorkRunner(
            self.state,
            self.clock,
            RetryPolicy(p.max_attempts, p.retry_base_s, p.retry_cap_s),
            self.rng.random,
        )
        publish = PublishPipeline(
            self.repo,
            self.state,
            _Late(self, "gossip"),
            _Late(self, "ipfs"),
            self.events,
            self.clock,
            self.http_urls,
            work.kick,
        )
        verify = VerifyPipeline(
            self.repo,
            self.state,
            _Late(self, "gossip"),
            _Late(self, "ipfs"),
            self.engine,
            self.events,
            self.metrics,
            self.clock,
            self.node_key,
            replay=p.replay,
            republish=p.republish,
            http_urls=self.http_urls,
            kick=work.kick,
        )
        trust_config = self.config.trust_config()
        # Strangers' key records are held in memory under the state's cap (issue 39).
        identities = NodeIdentities(cap=self.config.storage.evidence_caps().key_records)
        self.trust = trust = TrustDriver(
            trust_config,
            self.state,
            self.events,
            self.clock,
            self.rng,
            verify,
            republish=verify.republish,
            current_head=self._stored_head,
            contains_block=self._contains_block,
            identities=identities,
        )
        verify.trust = trust
        caps = self.config.storage.evidence_caps()
        self.keys = keys = NodeKeyRecords(
            self.state,
            identities,
            self.events,
            trust=trust,
            move_peer_score=self._move_peer_score,
            cap=caps.key_records,
            trusted_nodes=lambda: trust.default.trusted_attesters,
        )
        await self._ensure_inception()
        await keys.load()
        await trust.restore()
        work.handle("verify", verify.run)
        work.handle("publish", publish.run)
        work.handle("dispute", verify.run_rejected_head)
        # Pulls run on their own loop thread: at 50 announcements/s they held this loop for over
        # half its time, so RPC calls and gossip validation waited behind them.
        self.transfer_loop = LoopThread("transfer")
        self.transfer_loop.start()
        self.transfer = transfer = TransferAdapter(
            self.repo,
            lambda: self.ipfs.api_url,
            config=self.config,
            loop_thread=self.transfer_loop,
            p2p_request=self._stream_request,
        )
        datasets = DatasetUseCases(
            self.repo,
            self.engine,
            state=self.state,
            transfer=transfer,
            on_commit=publish.queue_id,
            locks=self.locks,
            polling=polling_options(self.config),
            untrusted_input=trust.untrusted_input,
        )
        self.flows = flows = FlowUseCases(
            self.repo,
            self.state,
            self.clock,
            datasets,
            kick=work.kick,
            untrusted_input=trust.untrusted_input,
        )
        work.handle(POLL, flows.run_poll)
        work.handle(TRANSFORM, flows.run_transform)

        async def trust_changed(did: DatasetId) -> None:
            await trust.configure(did)
            await self.effects.keep_trusted((did,))  # its newly trusted keys' evidence

        subs = SubscriptionUseCases(
            self.state,
            _Late(self, "gossip"),
            _Late(self, "ipfs"),
            self.owns,
            loopback_only=self.config.network.loopback_only,
            trust=trust_config,
            on_trust_change=trust_changed,
        )
        self.effects = NodeEffects(
            self.state,
            verify,
            self.events,
            self.metrics,
            self._spawn,
            self.owns,
            work.kick,
            trust,
            keys,
            caps,
        )
        # Evidence of keys trusted since it was stored ([trust] changed) is kept from now on.
        await self.effects.keep_trusted(
            DatasetId.parse(s.did) for s in await self.state.subscriptions()
        )
        f = self.config.follow
        self.follower = follower = SourceFollower(
            self.repo,
            self.state,
            transfer,
            transfer,
            _Late(self, "gossip"),
            self.locks,
            self.metrics,
            self.events,
            self.clock,
            self.node_key,
            trust.head_accepted,  # as for an announced head: the trust policy decides
            settings=FollowSettings(
                poll_interval_s=f.poll_interval_s,
                jitter=f.jitter,
                backoff_max_s=f.backoff_max_s,
                min_gap_s=f.min_gap_s,
                concurrency=f.max_connections,
            ),
            http_urls=self.http_urls,
            rng=self.rng.random,
            spawn=self._spawn,
        )
        subs.follower = follower
        verify.follow_input = follower.follow_input
        self.effects.witness = follower
        await follower.restore()
        self.gossip = NoGossip()
        self.fetcher = ChainFetcher(
            self.repo,
            self.state,
            transfer,
            self.locks,
            self.metrics,
            ipfs_enabled=lambda: self.ipfs.api_url is not None,
            events=self.events,
            ipfs_hints=self._ipfs_hints,
            stream_peers=self._stream_peers,
            peer_connected=self._peer_connected,
        )
        verify.input_missing = self.fetcher.note_input
        self.app = Application(
            info=self.info,
            clock=self.clock,
            repo=self.repo,
            state=self.state,
            gossip=_Late(self, "gossip"),
            ipfs=_Late(self, "ipfs"),
            engine=lambda: self._engine,
            metrics=self.metrics,
            locks=self.locks,
            datasets=datasets,
            subscriptions=subs,
            publish=publish,
            verify=verify,
            work=work,
            console=ConsoleQueries(self.repo, self.state, _Late(self, "gossip"), self.metrics),
            events=self.events,
            backup_port=HomeBackup(self.home.path),
            flows=flows,
            query_signer=CommitmentSigner(self.node_id, self.node_key.sign),
            data=VerifiedData(
                self.repo,
                self.state,
                # Workers start on the first query (then [query] warm_workers stay ready).
                DataFusionQueryEngine(
                    warm_workers=self.config.query.warm_workers,
                    isolate_network=self.config.engine.isolate_network,
                    # The spark dialect: a Spark worker started by the first such query
                    # (Spark takes seconds to start), stopped with the DataFusion engine.
                    spark=SparkQueryEngine(
                        master=self.config.engine.spark_master,
                        isolate_network=self.config.engine.isolate_network,
                        driver_host=self.config.engine.driver_host,
                    ),
                ),
                self.config.query.limits(),
                max_sql_bytes=self.config.query.max_sql_bytes,
                replays=self.config.pipeline.replay,
            ),
        )

    def _stored_head(self, did: DatasetId) -> Multihash | None:
        """``did``'s head in the repository (None when it holds none)."""
        if not self.repo.contains(did.as_did_str()):
            return None
        return self.repo.open(did.as_did_str()).head()

    def _contains_block(self, did: DatasetId, block: Multihash) -> bool:
        """Whether ``did``'s stored chain holds ``block``."""
        if not self.repo.contains(did.as_did_str()):
            return False
        return self.repo.open(did.as_did_str()).blocks.contains(block)

    async def _stop_app(self) -> None:
        # Last to stop but the state and the workers: every pull was cancelled (and unwound)
        # with the gossip service; what a user-requested pull still runs is cancelled here.
        data = getattr(getattr(self, "app", None), "data", None)
        if data is not None and data.engine is not None:
            await data.engine.close()
        if hasattr(self, "transfer"):
            await self.transfer.close()
        if hasattr(self, "transfer_loop"):
            await asyncio.to_thread(self.transfer_loop.stop)

    # ---- gossip

    async def _start_gossip(self) -> None:
        from p2p.libp2p_host import Libp2pConfig
        from p2p.libp2p_process import Libp2pProcessTransport
        from p2p.service import GossipService

        p = self.config.p2p
        # The libp2p host runs in a process of its own: in a thread it held this interpreter's
        # lock for half of every second under load (docs/libp2p.md, "Process model").
        self._transport = Libp2pProcessTransport(
            Libp2pConfig(
                node_seed=self.node_key.seed(),
                listen_host=p.listen_host,
                listen_port=p.port,
                bootstrap=p.bootstrap,
                loopback_only=self.config.network.loopback_only,
                # Reachability behind NAT: open mode only (docs/nat.md).
                nat=not self.config.network.loopback_only,
                relay_service=p.relay_service,
                use_relays=p.use_relays,
                relay_max_reservations=p.relay_max_reservations,
                relay_max_reservations_per_ip=p.relay_max_reservations_per_ip,
                relay_max_circuits=p.relay_max_circuits,
                relay_circuit_duration_s=p.relay_circuit_duration_s,
                relay_circuit_bytes=p.relay_circuit_bytes,
                relay_max_circuits_per_peer=p.relay_max_circuits_per_peer,
                relay_peer_bytes=p.relay_peer_bytes,
                relay_total_bytes=p.relay_total_bytes,
                relay_bytes_window_s=p.relay_bytes_window_s,
                reachability_interval_s=p.reachability_interval_s,
                hole_punching=p.hole_punching,
                peers_high_water=p.peers_high_water,
                peers_low_water=p.peers_low_water,
                max_peers_per_ip=p.peers_per_ip_cap(self.config.network.loopback_only),
                conn_grace_s=p.conn_grace_s,
                dial_backoff_base_s=p.dial_backoff_base_s,
                dial_backoff_max_s=p.dial_backoff_max_s,
            )
        )
        self._transport.on_restart = self.metrics.gossip_restarts.inc
        await self._transport.start()
        core = ProtocolCore(
            CoreConfig(
                fetch_timeout_ns=int(p.fetch_timeout_s * 1e9),
                anti_entropy_interval_ns=int(p.anti_entropy_interval_s * 1e9),
                signer_rate_burst=p.signer_rate_burst,
                signer_rate_per_s=p.signer_rate_per_s,
            ),
            self.rng,
        )
        by_url: set[str] = set()
        for sub in await self.state.subscriptions():
            core.subscribe(DatasetId.parse(sub.did))
            if sub.source_url is not None:
                by_url.add(sub.did)
        for h in await asyncio.to_thread(self.repo.list):
            if self.owns(h.id):
                core.subscribe(h.id)
        for acc in await self.state.accepted_heads():
            if acc.did in by_url:
                # A head pulled from a source: its "announcement" is our own observation.
                did = DatasetId.parse(acc.did)
                source = self.follower.source_of(did)
                if source is not None:
                    core.follow_source(did, source, Multihash.from_multibase(acc.head))
                continue
            try:
                core.restore_accepted(acc.envelope)
            except Exception as e:
                log.warning("could not restore accepted head of %s: %s", acc.did, e)
        if p.serve_streams:
            from node.transfer.streams import PROTOCOL as STP_PROTOCOL

            self._transport.set_request_handler(STP_PROTOCOL, self._serve_stream)
        self._service = GossipService(core, self._transport, self.clock, self.fetcher, self.effects)
        # Every node has records of its own to gossip: its key's inception at least.
        self._has_own_key_records = True
        self._service.on_peer_change(self._on_peer_change)
        await self._service.start()
        if p.discovery:
            from p2p.discovery import PROVIDERS_PROTOCOL, Discovery

            subscribed = core.subscriptions
            self._discovery = discovery = Discovery(
                self._transport,
                self_record=self._peer_record,
                carries=lambda d: d in subscribed(),
                followed=lambda: [d for d in subscribed() if not self.owns(d)],
                connect_ipfs=self._discovered_ipfs,
                rng=self.rng,
                interval_s=p.discovery_interval_s,
                loopback_only=self.config.network.loopback_only,
                # Remembered, so a restarted node redials the peers it knew at once.
                on_record=self._remember_record,
            )
            self._transport.set_request_handler(PROVIDERS_PROTOCOL, discovery.serve)
            self._service.on_peer_change(
                lambda _peer, connected: discovery.trigger() if connected else None
            )
            self.group.spawn_restarting(discovery.run, "discovery")
        self.gossip = GossipAdapter(
            self._service,
            self._transport,
            advertise=self._advertised_gossip_addrs,
            on_follow=self._discovery.trigger if self._discovery is not None else None,
        )
        self.group.spawn_restarting(self._redial_known_peers, "peer-redial")
        if not self.config.network.loopback_only:
            self.group.spawn_restarting(self._watch_reachability, "reachability")
        self.group.spawn_restarting(self._record_peer_scores, "peer-scores")

    def _remember_record(self, rec: Any) -> None:
        async def store() -> None:
            await self.state.upsert_peer(rec.peer_id, list(rec.gossip), None, True)

        self._spawn(store())

    def _advertised_gossip_addrs(self) -> list[str]:
        direct = advertised_multiaddrs(
            list(self._transport.listen_addrs()),
            self.config.network.advertise_host,
            loopback_only=self.config.network.loopback_only,
        )
        reach = self.info.reachability
        relayed = [str(a) for a in reach.get("relayed_addrs", [])]
        # Behind NAT the direct addresses reach no one: peers dial the relayed ones first.
        return [*relayed, *direct] if reach.get("status") == "private" else [*direct, *relayed]

    async def _watch_reachability(self) -> None:
        """Follow the gossip host's AutoNAT verdict and relay reservations (docs/nat.md): into
        ``status`` (``p2p.reachability``), the log and ``node.reachability`` events; a private
        node that holds no relay slot says it is unreachable. Hole punching's outcomes too
        (:meth:`_poll_hole_punching`)."""
        last: dict[str, Any] | None = None
        punch_seq = 0
        while True:
            try:
                snap = await self._transport.reachability()
            except Exception as e:  # the gossip process restarting
                log.debug("reachability: %s", e)
                snap = None
            if snap is not None and snap != last:
                last = snap
                status = snap.get("status", "unknown")
                relayed = list(snap.get("relayed_addrs", []))
                unreachable = status == "private" and not relayed
                self.info.reachability = {**snap, "unreachable": unreachable}
                data: dict[str, Any] = {
                    "kind": "p2p-reachability",
                    "status": status,
                    "relayed_addrs": relayed,
                }
                if unreachable:
                    errors = snap.get("relay_errors") or {}
                    data["message"] = (
                        "behind NAT and no relay slot: peers cannot dial this node ("
                        + (
                            "; ".join(f"{a}: {e}" for a, e in errors.items())
                            if errors
                            else "no bootstrap peer offers a relay"
                            if self.config.p2p.use_relays
                            else "[p2p] use_relays is off"
                        )
                        + "); its subscribers pull from republishers"
                    )
                    data["setting"] = "[p2p] bootstrap (a peer with relay_service = true)"
                    log.warning("reachability: %s", data["message"])
                else:
                    log.info("reachability: %s%s", status, f" via {relayed}" if relayed else "")
                await self.state.log_event("node.reachability", None, data)
                if relayed and self._discovery is not None:
                    self._discovery.trigger()
            # With hole punching off too: status still says which peers are only relayed.
            punch_seq = await self._poll_hole_punching(punch_seq)
            await asyncio.sleep(_REACHABILITY_POLL_S)

    async def _poll_hole_punching(self, last_seq: int) -> int:
        """The gossip host's hole punching (``p2p/holepunch.py``, docs/nat.md): the kind of
        each connected peer's connection into ``status`` (``p2p.connections``), each new
        outcome into a ``p2p.hole_punch`` event and the log; the last outcome's ``seq``."""
        try:
            punch = await self._transport.hole_punching()
        except Exception as e:  # the gossip process restarting
            log.debug("hole punching: %s", e)
            return last_seq
        self.info.connections = dict(punch.get("connections") or {})
        outcomes = list(punch.get("outcomes") or [])
        if outcomes and outcomes[-1]["seq"] < last_seq:
            last_seq = 0  # a restarted gossip process counts from 1 again
        for o in outcomes:
            if o["seq"] <= last_seq:
                continue
            last_seq = o["seq"]
            data = {k: v for k, v in o.items() if k not in ("seq", "at_ns")}
            if o["result"] == "direct":
                log.info("hole punch with %s: direct (%s)", o["peer"], o["reason"])
            elif o.get("peer_connected") is False:
                # Nothing left to upgrade (the peer left): not a failure anyone acts on.
                log.info("hole punch with %s ended: %s", o["peer"], o["reason"])
            else:
                log.warning(
                    "hole punch with %s failed (%s): %s; the relay keeps carrying the connection",
                    o["peer"],
                    f"attempt {o['attempt']} of {o.get('max_attempts')}"
                    if o.get("attempt")
                    else "answering the peer's attempt",
                    o["reason"],
                )
            await self.state.log_event("p2p.hole_punch", None, data)
        return last_seq

    async def _stream_request(self, peer: str, protocol: str, data: bytes, timeout: float) -> bytes:
        """A request over the gossip host (``libp2p://`` pull sources)."""
        if self._transport is None:
            raise InvalidArgument("gossip is not running: no libp2p sources")
        result: bytes = await self._transport.request(peer, protocol, data, timeout)
        return result

    async def _serve_stream(self, peer: str, data: bytes) -> bytes:
        """``/odf/stp/1.0.0``: hosted datasets to connected peers (node/transfer/streams.py)."""
        from node.transfer.streams import serve

        return await asyncio.to_thread(serve, self.repo, self._served_head, data)

    def _stream_peers(self, did: DatasetId) -> list[str]:
        """Connected peers known (discovery) to carry ``did``: libp2p pull sources."""
        if self._discovery is None or self._transport is None:
            return []
        connected = set(self._transport.connected_peers())
        d = did.as_did_str()
        return [
            rec.peer_id
            for rec in self._discovery.providers()
            if d in rec.carries and rec.peer_id in connected
        ]

    def _peer_connected(self, peer: str) -> bool:
        """Whether the gossip host is connected to ``peer`` (a libp2p pull source)."""
        return self._transport is not None and peer in self._transport.connected_peers()

    def _peer_record(self) -> Any:
        """This node's record for ``/odf/providers/1.0.0``: where peers reach it."""
        from p2p.discovery import PeerRecord

        ipfs = self.ipfs.info() or {}
        http = self._http_base()
        return PeerRecord(
            peer_id=str(self._transport.peer_id),
            gossip=tuple(self._advertised_gossip_addrs()),
            ipfs=tuple(str(a) for a in _as_list(ipfs.get("addresses"))),
            http=http,
            ipfs_withheld=tuple(str(a) for a in _as_list(ipfs.get("withheld_addresses"))),
        )

    def _ipfs_hints(self, did: DatasetId) -> list[Any]:
        """Why the IPFS node may get nothing of ``did`` (discovery's view; for pull events)."""
        if self._discovery is None:
            return []
        failed, withheld = self._discovery.ipfs_problems(did)
        return ipfs_hints(failed, withheld)

    async def _warn_reachability(self) -> None:
        """Log, record and show (``status``) what keeps peers on other hosts from this node."""
        info = self.ipfs.info() if self.ipfs.api_url is not None else None
        warnings = start_warnings(
            open_mode=not self.config.network.loopback_only,
            ipfs_mode=self.config.ipfs.mode if info is not None else None,
            ipfs_advertised=[str(a) for a in _as_list((info or {}).get("addresses"))],
            ipfs_withheld=[str(a) for a in _as_list((info or {}).get("withheld_addresses"))],
            http_url=self._http_base(),
            gossip_advertised=(
                self._advertised_gossip_addrs() if self._transport is not None else None
            ),
        )
        self.info.warnings = warnings
        for w in warnings:
            log.warning("reachability: %s", w["message"])
            await self.state.log_event("node.reachability", None, w)

    async def _discovered_ipfs(self, multiaddr: str) -> None:
        """Connect the IPFS node to a provider's (only loopback ones in loopback-only mode)."""
        if self.config.network.loopback_only and not multiaddr.startswith("/ip4/127."):
            raise InvalidArgument(
                f"refusing non-loopback IPFS address {multiaddr!r}: "
                "[network] isolation is 'loopback-only'"
            )
        if self.ipfs.api_url is None:
            return
        await asyncio.wait_for(self.ipfs.connect(multiaddr), 15)

    async def _stop_gossip(self) -> None:
        if self._service is not None:
            await self._service.stop()
        if self._transport is not None:
            await self._transport.stop()

    def _move_peer_score(self, old_peer: str, new_peer: str) -> None:
        """A peer rotated its node key: its score follows it to its new peer id."""
        service = getattr(self, "_service", None)
        if service is not None:
            service.core.move_peer_score(old_peer, new_peer, self.clock())

    async def _ensure_inception(self) -> None:
        """Commit the node key to a next key if it has none (an upgraded node's first start,
        or a home made before inceptions): node/keyrotation.py's ensure_inception."""
        from node.keyrotation import MOVE_NEXT_KEY_ADVICE, ensure_inception

        made = await asyncio.to_thread(ensure_inception, self.home)
        if made is not None:
            log.warning(
                "node key %s now commits to its next key %s: %s",
                made.node_id,
                made.next_key,
                MOVE_NEXT_KEY_ADVICE,
            )

    async def _publish_own_key_records(self, delay_s: float) -> None:
        """Gossip this node's key inception, rotation and revocation records
        (node/keyrotation.py) on the node topic, ``delay_s`` after a peer connected (once it
        has learnt our topics). Read once: only ``key rotate`` / ``key revoke`` change them, and
        they need the daemon stopped."""
        from node.keyrotation import own_records
        from p2p.transport import NODE_TOPIC

        await asyncio.sleep(delay_s)
        records = getattr(self, "_own_key_records", None)
        if records is None:
            records = self._own_key_records = await asyncio.to_thread(own_records, self.home)
        for envelope in records:
            await self._service.publish_best_effort(NODE_TOPIC, envelope)

    def _on_peer_change(self, peer: str, connected: bool) -> None:
        if connected and self._has_own_key_records:
            self._spawn(self._publish_own_key_records(_KEY_RECORDS_DELAY_S))
        self.metrics.peers.set(self.gossip.peer_count())
        self.events.publish("peer.connected" if connected else "peer.disconnected", {"peer": peer})
        self._spawn(self._store_peer(peer, connected))

    async def _store_peer(self, peer: str, connected: bool) -> None:
        await self.state.upsert_peer(peer, None, None, connected)

    async def _record_peer_scores(self) -> None:
        while True:
            await asyncio.sleep(_PEER_SCORES_EVERY_S)
            for peer in self._service.connected_peers():
                await self.state.upsert_peer(peer, None, self.gossip.peer_score(peer), True)

    async def _redial_known_peers(self) -> None:
        bootstrap = set(self.config.p2p.bootstrap)
        connected = set(self._service.connected_peers())
        for p in await self.state.peers():
            for addr in p.addrs:
                if addr in bootstrap or p.peer_id in connected:
                    continue
                try:
                    await asyncio.wait_for(self.app.subscriptions.connect_peer(addr), 15)
                    log.info("reconnected to known peer %s", p.peer_id)
                    break
                except Exception as e:
                    log.info("known peer %s at %s unreachable: %s", p.peer_id, addr, e)
        await asyncio.Event().wait()  # done: stay parked so the supervisor does not restart it

    # ---- pipeline workers and housekeeping

    async def _start_pipeline(self) -> None:
        for i in range(self.config.pipeline.concurrency):
            self.group.spawn(self.app.work.worker(), f"worker-{i}")
        self.group.spawn_restarting(self.follower.run, "follow")
        self.group.spawn_restarting(self._housekeeping, "housekeeping")
        self.group.spawn_restarting(self._flows, "flows")
        self.group.spawn_restarting(
            lambda: watch_event_loop(self.metrics.loop_lag.observe), "loop-monitor"
        )

    async def _housekeeping(self) -> None:
        last_prune: int | None = None
        last_trim = self.clock()
        keep_ns = self.config.pipeline.keep_finished_work_days * 86_400 * 1_000_000_000
        prune_every_ns = (
            min(_PRUNE_EVERY_NS, max(5_000_000_000, int(keep_ns * _PRUNE_WINDOW_FRACTION)))
            if keep_ns > 0
            else _PRUNE_EVERY_NS
        )
        while True:
            self.metrics.sample_history(self.clock())
            pending = await self.state.pending_counts()
            for kind in ("verify", "publish", "dispute", POLL, TRANSFORM):
                self.metrics.queue_depth.labels(kind).set(pending.get(kind, 0))
            self.metrics.engine_running.set(1 if self._engine and self._engine.running else 0)
            if hasattr(self, "gc_pauses"):
                self.gc_pauses.maintain()
            await self.state.prune_events(100_000)
            await self.trust.tick()
            now = self.clock()
            if now - last_trim >= _TRIM_HEAP_EVERY_NS:
                # Off the loop: it walks the heap (a few ms); glibc serialises it per arena.
                await asyncio.to_thread(trim_heap)
                last_trim = now
            if last_prune is None or now - last_prune >= prune_every_ns:
                await prune_finished_work(
                    self.state, now, self.config.pipeline.keep_finished_work_days
                )
                last_prune = now
            await asyncio.sleep(5.0)

    async def _flows(self) -> None:
        """The flow scheduler (``docs/flows.md``): queue the flows that are due, every tick."""
        while True:
            try:
                await self.flows.tick()
            except OdfNodeError as e:  # a bad chain or state read: log it, try next tick
                log.warning("flow scheduler: %s", e)
            await asyncio.sleep(self.config.flows.tick_s)

    # ---- HTTP surface

    async def _start_http(self) -> None:
        from aiohttp import web

        from node.transfer.data_api import add_routes as add_data_api
        from node.transfer.server import make_app

        app = make_app(self.repo, served_head=self._served_head)
        app.router.add_get("/metrics", self._metrics_handler)
        app.router.add_get("/healthz", self._healthz_handler)
        app.router.add_get("/readyz", self._readyz_handler)
        # kamu's data API (/query, /verify, /{dataset}/tail, /{dataset}/metadata).
        add_data_api(
            app,
            lambda: self.app.query_api,
            public=self.config.query.public,
            max_sql_bytes=self.config.query.max_sql_bytes,
        )
        # keepalive_timeout also bounds a connection that never completes its request headers.
        self._http_runner = web.AppRunner(
            app, access_log=None, keepalive_timeout=self.config.http.idle_timeout_s
        )
        await self._http_runner.setup()
        port = 0 if self.ephemeral else self.config.http.port
        site = web.TCPSite(self._http_runner, self.config.http.host, port)
        await site.start()
        self.info.http_url = (
            f"http://{self.config.http.host}:{_bound_port(self._http_runner, port)}"
        )

    def _served_head(self, did: DatasetId) -> str | None:
        """The head the Simple Transfer Protocol serves of ``did`` (None: the stored one)."""
        return self.trust.served_head(did) if hasattr(self, "trust") else None

    async def _metrics_handler(self, request: Any) -> Any:
        from aiohttp import web

        body, content_type = self.metrics.render()
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def _healthz_handler(self, request: Any) -> Any:
        from aiohttp import web

        uptime = (self.clock() - self.info.started_at_ns) / 1e9 if self.info.started_at_ns else 0
        return web.json_response({"status": "ok", "uptime_s": round(uptime, 3)})

    async def _readyz_handler(self, request: Any) -> Any:
        from aiohttp import web

        ready, body = await self.readiness().report()
        return web.json_response(body, status=200 if ready else 503)

    def readiness(self) -> Readiness:
        """The checks of ``GET /readyz`` over this daemon (``node/daemon/health.py``)."""
        cfg = self.config

        def services() -> tuple[list[str], list[str]]:
            return [s.name for s in self.group.services], [s.name for s in self.group.started]

        async def write_probe() -> None:
            if self._threaded is None:
                raise RuntimeError("the state is not open")
            await self._threaded.write_probe()

        def engine_crashes(window_s: float) -> list[str]:
            engine = self._engine
            return list(engine.crash_reasons(window_s)) if engine is not None else []

        def peers() -> int | None:
            if cfg.network.loopback_only or not cfg.p2p.enabled:
                return None
            return self.gossip.peer_count()

        async def verify_backlog() -> int:
            return int((await self.state.pending_counts()).get("verify", 0))

        return Readiness(
            cfg.health,
            services,
            lambda: self.stopping,
            write_probe,
            engine_crashes,
            peers,
            verify_backlog,
        )

    async def _stop_http(self) -> None:
        await self._http_runner.cleanup()

    # ---- Arrow Flight SQL (node/transfer/flight_sql.py, docs/query.md)

    async def _start_flight_sql(self) -> None:
        from node.transfer.flight_sql import FlightSqlServer, start_in_thread

        q = self.config.query
        data = self.app.data
        if data is None:
            log.warning("flight-sql: the application has no data use case; not serving")
            return
        port = 0 if self.ephemeral else q.flight_sql_port
        loop = asyncio.get_running_loop()
        # gRPC binds and serves on its own threads; every call hands its query to this loop.
        self._flight_sql = await asyncio.to_thread(
            FlightSqlServer,
            data,
            loop,
            host=q.flight_sql_host,
            port=port,
            public=q.public,
            concurrency_per_client=q.concurrency_per_client,
            deadline_s=q.deadline_s,
            # The HTTP data API's slots: [query] concurrency_total bounds both surfaces.
            limiter=self.app.query_api.limiter,
            # Answers asked for and not yet fetched: at most what the running queries may hold.
            kept_bytes=q.concurrency_total * q.max_bytes,
            max_sql_bytes=q.max_sql_bytes,
        )
        self._flight_sql_thread = start_in_thread(self._flight_sql)
        self.info.flight_sql_url = self._flight_sql.url

    async def _stop_flight_sql(self) -> None:
        from node.transfer.flight_sql import stop

        if self._flight_sql is not None:
            # Waits for running calls, whose queries need this loop: off the loop. A client that
            # stops reading a stream would hold it forever: the daemon goes on after 15 s.
            try:
                await asyncio.wait_for(
                    asyncio.to_thread(stop, self._flight_sql, self._flight_sql_thread), 15.0
                )
            except TimeoutError:
                log.warning("flight-sql: calls still running after 15 s; stopping without them")
            self.info.flight_sql_url = None

    # ---- RPC

    async def _start_rpc(self) -> None:
        from node.daemon.rpc_api import start_rpc

        self._rpc = await start_rpc(
            self.app, self.events, self.home.path, self.config.rpc, self.ephemeral
        )
        self.info.rpc_url = self._rpc.url

    async def _stop_rpc(self) -> None:
        from node.daemon.rpc_api import stop_rpc

        await stop_rpc(self.home.path, self._rpc)


class _Late:
    """Forwards to ``daemon.<name>`` at call time: the IPFS and gossip adapters are created by
    services that start after the use cases that hold them are built."""

    def __init__(self, daemon: Daemon, name: str) -> None:
        self._daemon = daemon
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(getattr(self._daemon, self._name), attr)


async def _noop() -> None:
    return None


def _bound_port(runner: Any, fallback: int) -> int:
    addresses = runner.addresses  # (host, port, ...) of every bound socket
    return int(addresses[0][1]) if addresses else fallback


def install_signal_handlers(stop: asyncio.Event) -> None:
    """SIGINT / SIGTERM set ``stop`` (a second signal exits at once)."""
    loop = asyncio.get_running_loop()

    def handler() -> None:
        if stop.is_set():
            os._exit(130)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, handler)


__all__ = ["Daemon", "install_signal_handlers"]


def _as_list(value: object) -> list[object]:
    """``value`` if it is a JSON array, else empty (a status field that is absent or malformed)."""
    return value if isinstance(value, list) else []
