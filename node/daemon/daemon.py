"""The composition root: builds the services in dependency order, runs them, stops them.

Read top down: this module -> the services (``node/daemon/*_service.py``, ``gossip_runtime.py``,
``http_surface.py``, ``reachability_watch.py``, ``housekeeping.py``) and the wiring of the use
cases (``node/daemon/wiring.py``) -> use cases (``node/app``) -> ports (``node/app/ports.py``)
-> adapters (``node/adapters``, ``node/state``, ``p2p``, ``node/ipfs``, ``node/transfer``,
``node/engine_client.py``). Nothing here decides anything about datasets or gossip: it only
creates objects and starts/stops them.

Service start order (stopped in reverse): state -> IPFS -> engine -> application (the use
cases, wired) -> gossip -> pipeline workers -> HTTP surface -> Flight SQL -> reachability ->
RPC. Every service is an object built once, here, with what it needs; the state is opened first
because every other one holds it. Accepted heads are reinstalled into the protocol core at
start-up, and work items claimed by a process that died are released and resumed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any

from coordinator.identity import DatasetId
from node.adapters.gossip import GossipSlot
from node.app import NodeInfo
from node.app.datasets import CommitLocks
from node.app.events import EventBus
from node.app.metrics import NodeMetrics
from node.config import NodeConfig
from node.console.sessions import ConsoleSessions
from node.daemon.addresses import advertised_http_url
from node.daemon.engine_service import EngineService
from node.daemon.flight_service import FlightSqlService
from node.daemon.gossip_runtime import GossipRuntime, GossipUse, peer_hooks
from node.daemon.health import Readiness
from node.daemon.housekeeping import Pipeline
from node.daemon.http_surface import HttpSurface
from node.daemon.ipfs_service import IpfsService
from node.daemon.loop_monitor import GcPauses
from node.daemon.reachability_watch import ReachabilityWatch
from node.daemon.sdnotify import Notifier, ping_watchdog
from node.daemon.services import FunctionService, ServiceGroup
from node.daemon.state_service import StateService
from node.daemon.wiring import ApplicationService, Inputs
from node.home import NodeHome
from node.home_lock import HomeLock

log = logging.getLogger("odf_node.daemon")

# The daemon runs four busy threads (this loop, the libp2p thread, the transfer loop, the state
# writer). Each time this loop wakes (a socket ready, a result handed over) it needs the GIL,
# and with Python's default 5 ms switch interval it waits up to that long behind a thread that
# computes; an RPC call wakes it a dozen times. 1 ms keeps that wait short at little cost.
GIL_SWITCH_INTERVAL_S = 0.001


class Daemon:
    """One running node. ``await run(stop_event)`` starts everything and runs until stopped."""

    def __init__(
        self,
        home: NodeHome,
        config: NodeConfig,
        *,
        clock: Callable[[], int] = time.time_ns,
        rng: random.Random | None = None,
        ephemeral: bool = False,
    ) -> None:
        self.home = home
        self.config = config
        self.clock = clock
        self.rng = rng if rng is not None else random.Random()
        self.ephemeral = ephemeral
        self.repo = home.repository()
        self.node_key = home.node_key()
        self.metrics = NodeMetrics()
        self.events = EventBus()
        self.locks = CommitLocks()
        self.gossip = GossipSlot()
        self.engine = EngineService(config)
        self.info = NodeInfo(
            node_id=self.node_key.dataset_id().as_did_key(),
            home=str(home.path),
            spark_master=config.engine.spark_master,
            block_version=config.metadata.apply(),
            config=config.to_dict(),
        )
        self.gc_pauses = GcPauses(lambda gen, s: self.metrics.gc_pause.labels(str(gen)).observe(s))

    @property
    def node_id(self) -> str:
        """The node's ``did:key``."""
        return self.info.node_id

    def owns(self, did: DatasetId) -> bool:
        """Whether this node holds the dataset key of ``did``."""
        return self.repo.key_path(did).is_file()

    def http_urls(self, did: DatasetId) -> tuple[str, ...]:
        """Where peers can pull ``did`` from this node over HTTP (announced in gossip)."""
        base = self.http_base()
        return (f"{base}/{did.as_did_str()}",) if base else ()

    def http_base(self) -> str:
        """The HTTP base URL peers pull from ("" without an HTTP surface or public URL)."""
        return advertised_http_url(
            self.config.http.public_url,
            (self.info.http_url or "") if self.config.http.enabled else "",
            self.config.network.advertise_host,
        )

    # ---- lifecycle

    async def run(self, stop: asyncio.Event) -> None:
        """Start every service, run until ``stop`` is set or a task crashes, then stop."""
        if os.environ.get("ODF_NODE_TRACEMALLOC", "0") != "0":
            from procutil.memdebug import start_if_requested

            start_if_requested()
        lock = HomeLock(self.home.path)
        lock.acquire_daemon()
        sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
        notifier = Notifier()
        # As sd_notify(unset_environment=1): child processes (libp2p, IPFS, engine workers) must
        # not inherit the socket or the watchdog and speak for the node.
        for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
            os.environ.pop(name, None)
        state: StateService | None = None
        try:
            state = await StateService.open(self.home.path / "state.db", self.clock, self.node_id)
            running = _Running(self, state, lambda name: notifier.status(f"starting {name}"))
            await running.serve(stop, notifier, self.gc_pauses)
        finally:
            if state is not None:
                await state.stop()
            notifier.close()
            self.gc_pauses.uninstall()
            lock.release()
            log.info("odf-node stopped")


class _Running:
    """The services of one run, built in dependency order over the opened state."""

    def __init__(
        self, d: Daemon, state: StateService, on_starting: Callable[[str], object]
    ) -> None:
        self.d = d
        self.group = group = ServiceGroup(on_starting=on_starting)
        self.state = state
        self.stopping = False
        cfg = d.config
        self.ipfs = IpfsService(config=cfg, home=d.home, state=state.state)
        self.application = ApplicationService(self._inputs)
        self.gossip = self._gossip_runtime() if cfg.p2p.enabled else None
        self.reachability = ReachabilityWatch(
            config=cfg,
            info=d.info,
            state=state.state,
            group=group,
            gossip=self.gossip,
            ipfs=lambda: self.ipfs.port,
            http_base=d.http_base,
        )
        group.add(state)
        if cfg.ipfs.mode != "none":
            group.add(self.ipfs)
        group.add(d.engine)
        group.add(self.application)
        if self.gossip is not None:
            group.add(self.gossip)
        group.add(
            Pipeline(
                config=cfg,
                group=group,
                state=state.state,
                metrics=d.metrics,
                clock=d.clock,
                engine=d.engine,
                gc_pauses=d.gc_pauses,
                wiring=lambda: self.application.wiring,
            )
        )
        self._add_surfaces()
        group.add(self.reachability)
        self._rpc: Any = None
        # One-time console logins: issued by the console.login use case, redeemed by the
        # console's pages served beside the RPC.
        self.sessions = ConsoleSessions(d.clock)
        group.add(FunctionService("rpc", self._start_rpc, self._stop_rpc))

    def _gossip_runtime(self) -> GossipRuntime:
        d = self.d
        return GossipRuntime(
            config=d.config,
            home=d.home,
            node_key=d.node_key,
            repo=d.repo,
            state=self.state.state,
            ipfs=lambda: self.ipfs.port,
            metrics=d.metrics,
            events=d.events,
            clock=d.clock,
            rng=d.rng,
            info=d.info,
            group=self.group,
            slot=d.gossip,
            owns=d.owns,
            http_base=d.http_base,
            use=self._gossip_use,
        )

    def _add_surfaces(self) -> None:
        """The HTTP listener and the Flight SQL server, when configured."""
        d = self.d
        if d.config.http.enabled:
            self.group.add(
                HttpSurface(
                    config=d.config,
                    repo=d.repo,
                    metrics=d.metrics,
                    info=d.info,
                    clock=d.clock,
                    served_head=self._served_head,
                    query_api=lambda: self.application.wiring.app.query_api,
                    readiness=self.readiness,
                    ephemeral=d.ephemeral,
                )
            )
        if d.config.query.flight_sql_enabled:
            self.group.add(
                FlightSqlService(
                    config=d.config,
                    info=d.info,
                    app=lambda: self.application.wiring.app,
                    ephemeral=d.ephemeral,
                )
            )

    async def serve(self, stop: asyncio.Event, notifier: Notifier, gc_pauses: GcPauses) -> None:
        """Start the group, report ready, wait for ``stop`` or a crashed task, stop the group."""
        d = self.d
        await self.group.start()
        d.info.started_at_ns = d.clock()
        await self.reachability.warn_at_start()
        gc_pauses.install(freeze=True)
        # systemd (Type=notify): every service is up. The watchdog pings from this loop.
        notifier.ready(f"ready: node {d.node_id}")
        interval = notifier.watchdog_interval_s
        if interval is not None:
            self.group.spawn_restarting(
                lambda: ping_watchdog(notifier, interval), "systemd-watchdog"
            )
        log.info(
            "odf-node ready: home=%s node_id=%s rpc=%s http=%s ipfs=%s",
            d.home.path,
            d.node_id,
            d.info.rpc_url,
            d.info.http_url,
            self.ipfs.api_shown,
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

    def _inputs(self) -> Inputs:
        d = self.d
        g = self.gossip
        return Inputs(
            home=d.home,
            config=d.config,
            repo=d.repo,
            node_key=d.node_key,
            info=d.info,
            state=self.state.state,
            clock=d.clock,
            rng=d.rng,
            metrics=d.metrics,
            events=d.events,
            locks=d.locks,
            gossip=d.gossip,
            ipfs=self.ipfs.port,
            engine=d.engine.get,
            engine_created=lambda: d.engine.created,
            http_urls=d.http_urls,
            owns=d.owns,
            spawn=self._spawn,
            peers=peer_hooks(g),
            logins=self.sessions,
        )

    def _gossip_use(self) -> GossipUse:
        w = self.application.wiring
        return GossipUse(
            fetcher=w.fetcher,
            effects=w.effects,
            follower=w.follower,
            connect_peer=w.app.subscriptions.connect_peer,
            served_head=self._served_head,
        )

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        return self.group.spawn(coro, "effect")

    def _served_head(self, did: DatasetId) -> str | None:
        """The head the Simple Transfer Protocol serves of ``did`` (None: the stored one)."""
        if not self.application.started:
            return None
        return self.application.wiring.trust.served_head(did)

    def readiness(self) -> Readiness:
        """The checks of ``GET /readyz`` over this run (``node/daemon/health.py``)."""
        cfg = self.d.config
        engine = self.d.engine
        state = self.state.state

        def services() -> tuple[list[str], list[str]]:
            return [s.name for s in self.group.services], [s.name for s in self.group.started]

        def engine_crashes(window_s: float) -> list[str]:
            router = engine.created
            return list(router.crash_reasons(window_s)) if router is not None else []

        def peers() -> int | None:
            if cfg.network.loopback_only or not cfg.p2p.enabled:
                return None
            return self.d.gossip.peer_count()

        async def verify_backlog() -> int:
            return int((await state.pending_counts()).get("verify", 0))

        return Readiness(
            cfg.health,
            services,
            lambda: self.stopping,
            state.write_probe,
            engine_crashes,
            peers,
            verify_backlog,
        )

    async def _start_rpc(self) -> None:
        from node.daemon.rpc_api import start_rpc

        d = self.d
        self._rpc = await start_rpc(
            self.application.wiring.app,
            d.events,
            d.home.path,
            d.config.rpc,
            d.ephemeral,
            self.sessions,
        )
        d.info.rpc_url = self._rpc.url

    async def _stop_rpc(self) -> None:
        from node.daemon.rpc_api import stop_rpc

        await stop_rpc(self.d.home.path, self._rpc)


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
