"""The CLI's composition root: the daemon of a home, or the node's
:class:`~node.app.Application` over the home without one.

:func:`daemon_endpoint` finds the daemon running on a home (waiting for one that is starting)
and :func:`call_daemon` calls its JSON-RPC methods; the command layer reaches the RPC client,
the cookie and the home's lock only through here.

When no daemon runs on a home, the CLI runs a command's use case in its own process. This module
builds the same :class:`~node.app.Application` the daemon builds (``node/daemon/daemon.py``),
over the same adapters where they make sense without a daemon: the dataset repository, the
node's state database opened directly (on first use: a command that reads only datasets never
opens it), the transform engines started on demand (``--spark-master``,
``--engine-memory-limit``), pulls with the home's source policy, and IPFS only where a command
names an RPC API (``--ipfs-api``). Gossip is off, nothing runs in the background and no event
stream exists.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from coordinator.errors import OdfNodeError
from coordinator.identity import DatasetId, PrivateKey
from coordinator.storage.repository import DatasetRepository
from node.adapters.backup import HomeBackup
from node.adapters.gossip import NoGossip
from node.adapters.home_keys import HomeKeyStore
from node.adapters.ipfs import IpfsAdapter, NoIpfs
from node.adapters.query_engine import DataFusionQueryEngine
from node.adapters.spark_query import SparkQueryEngine
from node.adapters.state import InlineState
from node.adapters.transfer import TransferAdapter
from node.app import Application, NodeInfo
from node.app.console import ConsoleQueries
from node.app.data import VerifiedData
from node.app.datasets import CommitLocks, DatasetUseCases
from node.app.events import EventBus
from node.app.flows import FlowUseCases
from node.app.metrics import NodeMetrics
from node.app.node_keys import Incepted, NodeKeys, Revoked, Rotated
from node.app.polling import PollingOptions
from node.app.ports import EnginePort, IpfsPort, StatePort
from node.app.publish import PublishPipeline
from node.app.query_proofs import CommitmentSigner
from node.app.results import RestoreResult
from node.app.subscriptions import SubscriptionUseCases
from node.app.verify import VerifyPipeline
from node.app.work import RetryPolicy, WorkRunner
from node.config import NodeConfig, check_listeners
from node.home import NodeHome, default_home
from node.home_lock import HomeLock, HomeLocked
from node.state import NodeState

if TYPE_CHECKING:
    from node.engine_router import EngineRouter

T = TypeVar("T")

DAEMON_START_WAIT_S = 120.0
"""How long a CLI command waits for a starting daemon's RPC (its IPFS node may take a while)."""


class DaemonUnreachable(OdfNodeError):
    """A daemon holds the home but its RPC cannot be reached (not started in time, stopped,
    or its cookie is unusable)."""


def polling_options(config: NodeConfig, home: Path | None = None) -> PollingOptions:
    """The ``[ingest]`` bounds of polling-source runs (``home``: where podman keeps its images
    inside a user namespace unless ``[ingest] container_storage`` says)."""
    i = config.ingest
    storage = i.container_storage or (str(home / "containers") if home is not None else "")
    return PollingOptions(
        i.max_fetch_bytes,
        i.max_decompressed_bytes,
        i.allow_pipe,
        i.mqtt_max_records,
        i.mqtt_idle_timeout_s,
        i.mqtt_max_message_bytes,
        i.mqtt_max_poll_s,
        files_root=i.files_root or None,
        container_runtime=i.container_runtime,
        container_network=i.container_network,
        container_timeout_s=i.container_timeout_s,
        container_memory_bytes=i.container_memory_bytes,
        container_storage=storage,
        eth_node_urls=i.eth_node_urls,
        environ=dict(os.environ),
    )


def daemon_endpoint(home: Path) -> tuple[str, str] | None:
    """``(url, token)`` of the daemon running on ``home``, or None if none runs.

    A daemon that is starting holds the home's lock before its RPC is up: this waits for its
    cookie (typing a command right after ``odf-node run &``) rather than failing with "home in
    use". The Unix socket is preferred: it also reaches a daemon in another network namespace.
    """
    from node.rpc.cookie import cookie_path, read_cookie

    lock = HomeLock(home)
    if not lock.held_by_other():
        return None
    if not cookie_path(home).exists():
        if not lock.holder().startswith("daemon"):
            return None  # a CLI command holds it: the offline path reports the lock clearly
        print(f"waiting for the daemon on {home} to start its RPC ...", file=sys.stderr)
        deadline = time.monotonic() + DAEMON_START_WAIT_S
        while not cookie_path(home).exists():
            if time.monotonic() > deadline or not lock.held_by_other():
                raise DaemonUnreachable(
                    f"the daemon on {home} did not open its RPC within "
                    f"{DAEMON_START_WAIT_S:.0f} s (see its log), or it stopped"
                )
            time.sleep(0.2)
    try:
        url, token = read_cookie(home)
    except OdfNodeError as e:
        raise DaemonUnreachable(
            f"a daemon runs on {home} but its RPC cookie is unusable: {e}"
        ) from None
    sock = home / "rpc.sock"
    return (f"unix:{sock}" if sock.is_socket() else url), token


def call_daemon(endpoint: tuple[str, str], method: str, params: dict[str, Any] | None) -> Any:
    """Call ``method`` on the daemon at ``endpoint`` (an hour at most: ingests can be long)."""
    from node.rpc.client import call_sync

    return call_sync(endpoint[0], endpoint[1], method, params or None, timeout=3600)


@dataclass(frozen=True)
class OfflineOptions:
    """What a command line may say about the adapters of an offline run."""

    spark_master: str = "local[*]"
    engine_memory_limit: int = 0
    """MiB; 0: no bound."""
    ipfs_api: str | None = None
    ipfs_gateway: str | None = None


class _LazyState(InlineState):
    """The state port over the home's ``state.db``, opened on first use (synchronous calls)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._opened: NodeState | None = None

    @property
    def sync(self) -> NodeState:  # type: ignore[override]
        """The home's state, opened now if it was not yet."""
        if self._opened is None:
            self._opened = NodeState.open(self._path, time.time_ns)
        return self._opened

    def close(self) -> None:
        """Close the database if it was opened."""
        if self._opened is not None:
            self._opened.close()


def engine_router(
    config: NodeConfig,
    *,
    master: str,
    idle_timeout_s: float,
    memory_mib: int,
    isolate_network: bool = False,
    datafusion_workers: int | None = None,
) -> EngineRouter:
    """The transform engines of either root: the Spark worker (``master``) and DataFusion
    workers per pinned release, with the home's per-request CPU budget and driver host."""
    from node.engine_client import EngineClient
    from node.engine_router import EngineRouter

    e = config.engine
    memory = (memory_mib << 20) or None
    cpu = e.cpu_limit_s or None
    return EngineRouter(
        lambda: EngineClient(
            master=master,
            idle_timeout=idle_timeout_s,
            isolate_network=isolate_network,
            memory_limit=memory,
            cpu_limit=cpu,
            driver_host=e.driver_host,
        ),
        idle_timeout=idle_timeout_s,
        isolate_network=isolate_network,
        memory_limit=memory,
        cpu_limit=cpu,
        datafusion_workers=datafusion_workers,
    )


def verified_data(
    repo: DatasetRepository,
    state: StatePort,
    config: NodeConfig,
    *,
    warm_workers: int,
    spark_master: str,
) -> VerifiedData:
    """Reading what the node verified (SQL, tail, export): DataFusion query workers, started
    on the first query (``warm_workers`` then stay ready), and for the spark dialect a Spark
    worker started by the first such query (Spark takes seconds to start)."""
    isolate = config.engine.isolate_network
    return VerifiedData(
        repo,
        state,
        DataFusionQueryEngine(
            warm_workers=warm_workers,
            isolate_network=isolate,
            spark=SparkQueryEngine(
                master=spark_master,
                isolate_network=isolate,
                driver_host=config.engine.driver_host,
            ),
        ),
        config.query.limits(),
        max_sql_bytes=config.query.max_sql_bytes,
        replays=config.pipeline.replay,
    )


@dataclass
class _OfflineEngine:
    """The transform engines of an offline command, started on first use (idle: none)."""

    config: NodeConfig
    options: OfflineOptions
    router: EngineRouter | None = None

    def get(self) -> EnginePort:
        """The engine router, created now if no command step needed it before."""
        if self.router is None:
            # The home's config (and ODF_NODE_* variables): where a cluster reaches the
            # driver, the per-request CPU-time budget.
            self.router = engine_router(
                self.config,
                master=self.options.spark_master,
                idle_timeout_s=0,
                memory_mib=self.options.engine_memory_limit,
            )
        return self.router


@contextlib.contextmanager
def offline_application(home: NodeHome, options: OfflineOptions) -> Iterator[Application]:
    """The home's :class:`Application` without a daemon; closes the engine and state after."""
    config = home.config()
    state = _LazyState(home.path / "state.db")
    engines = _OfflineEngine(config, options)
    app = _offline(home, config, options, state, engines)
    try:
        yield app
    finally:
        if engines.router is not None:
            engines.router.close()
        if app.data is not None and app.data.engine is not None:
            _close_query_engine(app.data.engine)
        state.close()


def _offline(
    home: NodeHome,
    config: NodeConfig,
    options: OfflineOptions,
    ports: StatePort,
    engines: _OfflineEngine,
) -> Application:
    repo = home.repository()
    engine = engines.get
    ipfs: IpfsPort = IpfsAdapter(options.ipfs_api, {}) if options.ipfs_api else NoIpfs()
    gossip = NoGossip()
    metrics = NodeMetrics()
    key = home.node_key()
    info = NodeInfo(
        node_id=key.dataset_id().as_did_key(),
        home=str(home.path),
        spark_master=options.spark_master,
        block_version=config.metadata.apply(),
        live=False,
        config=config.to_dict(),
    )
    owns = DatasetUseCases(repo, engine).owns
    work = WorkRunner(ports, time.time_ns, RetryPolicy(), random.random)
    transfer = TransferAdapter(repo, lambda: options.ipfs_api, options.ipfs_gateway, config=config)
    locks = CommitLocks()
    datasets = DatasetUseCases(
        repo,
        engine,
        state=ports,
        transfer=transfer,
        locks=locks,
        polling=polling_options(config, home.path),
    )
    no_urls: Callable[[DatasetId], tuple[str, ...]] = lambda _did: ()  # noqa: E731
    return Application(
        info=info,
        clock=time.time_ns,
        repo=repo,
        state=ports,
        gossip=gossip,
        ipfs=ipfs,
        engine=lambda: engines.router,
        metrics=metrics,
        locks=locks,
        datasets=datasets,
        subscriptions=SubscriptionUseCases(
            ports,
            gossip,
            ipfs,
            owns,
            loopback_only=config.network.loopback_only,
            trust=config.trust_config(),
        ),
        publish=PublishPipeline(
            repo, ports, gossip, ipfs, EventBus(), time.time_ns, no_urls, work.kick
        ),
        verify=VerifyPipeline(
            repo,
            ports,
            gossip,
            ipfs,
            engine,
            EventBus(),
            metrics,
            time.time_ns,
            key,
            replay=config.pipeline.replay,
            republish=False,
            http_urls=no_urls,
            kick=work.kick,
        ),
        work=work,
        console=ConsoleQueries(repo, ports, gossip, metrics),
        backup_port=HomeBackup(home.path),
        # Triggers are set and listed here; only a daemon runs them.
        flows=FlowUseCases(repo, ports, time.time_ns, datasets),
        query_signer=CommitmentSigner(info.node_id, key.sign),
        # No warm workers without a daemon: a command runs one query and exits.
        data=verified_data(repo, ports, config, warm_workers=0, spark_master=options.spark_master),
    )


def _close_query_engine(engine: Any) -> None:
    """Stop the query workers an offline application started (a spark query's Spark worker
    lives until closed: a shell or a script opening one application per call would leave one
    per query). Closing kills processes by id, so it runs on a loop of its own in a thread:
    this context manager may exit inside or outside a running loop."""
    import asyncio
    import threading

    def run() -> None:
        with contextlib.suppress(Exception):
            asyncio.run(engine.close())

    thread = threading.Thread(target=run, name="close-query-engine")
    thread.start()
    thread.join(timeout=30)


__all__ = [
    "DAEMON_START_WAIT_S",
    "DaemonUnreachable",
    "HomeLock",
    "NodeHome",
    "OfflineOptions",
    "call_daemon",
    "check_listeners",
    "daemon_endpoint",
    "default_home",
    "offline_application",
    "serve_home",
]


# ---- the node key (node/app/node_keys.py): in-process only, the daemon stopped or starting


def _run_inline(coro: Coroutine[Any, Any, T]) -> T:
    """Run a use case over :class:`InlineState` to its end here (its awaits never suspend), so
    a synchronous caller may be inside a running event loop or not."""
    try:
        coro.send(None)
    except StopIteration as done:
        return cast(T, done.value)
    coro.close()
    raise RuntimeError("an inline use case suspended: it awaited something that is not inline")


@contextlib.contextmanager
def _node_keys(home: NodeHome, state: NodeState | None, clock_ns: int | None) -> Iterator[NodeKeys]:
    clock: Callable[[], int] = time.time_ns if clock_ns is None else (lambda: clock_ns)
    if state is not None:
        yield NodeKeys(HomeKeyStore(home), InlineState(state), clock)
        return
    with NodeState.open(home.path / "state.db", time.time_ns) as st:
        yield NodeKeys(HomeKeyStore(home), InlineState(st), clock)


def rotate_key(
    home: NodeHome, *, next_key: Path | None = None, clock_ns: int | None = None
) -> Rotated:
    """``key rotate``: :meth:`NodeKeys.rotate` under the home's lock (the daemon must be
    stopped: it runs with the key being replaced).

    Raises:
        KeyCommandError: see :meth:`NodeKeys.rotate`.
        HomeLocked: a daemon (or another command) uses the home.
    """
    with HomeLock(home.path), _node_keys(home, None, clock_ns) as keys:
        return _run_inline(keys.rotate(None if next_key is None else str(next_key)))


def revoke_key(
    home: NodeHome, node_id: str | None = None, *, clock_ns: int | None = None
) -> Revoked:
    """``key revoke``: :meth:`NodeKeys.revoke` under the home's lock.

    Raises:
        KeyCommandError: see :meth:`NodeKeys.revoke`.
        HomeLocked: a daemon (or another command) uses the home.
    """
    with HomeLock(home.path), _node_keys(home, None, clock_ns) as keys:
        return _run_inline(keys.revoke(node_id))


def ensure_inception(
    home: NodeHome, state: NodeState | None = None, *, clock_ns: int | None = None
) -> Incepted | None:
    """:meth:`NodeKeys.ensure_inception` over the home (its state opened unless given); does
    not take the home's lock (the caller holds it)."""
    with _node_keys(home, state, clock_ns) as keys:
        return _run_inline(keys.ensure_inception())


def init_inception(home: NodeHome) -> Incepted | None:
    """:func:`ensure_inception` for ``odf-node init``, under the home's lock; None when a
    daemon holds it (the daemon makes the record at its start)."""
    try:
        with HomeLock(home.path):
            return ensure_inception(home)
    except HomeLocked:
        return None


def own_records(home: NodeHome, state: NodeState | None = None) -> list[bytes]:
    """:meth:`NodeKeys.own_records` over the home (its state opened unless given)."""
    with _node_keys(home, state, None) as keys:
        return _run_inline(keys.own_records())


def retired_keys(home: NodeHome) -> list[PrivateKey]:
    """The node's retired keys, oldest first."""
    return HomeKeyStore(home).retired()


def committed_key_path(home: NodeHome) -> Path:
    """``keys/next.key``: the key the current node key committed to (see
    ``node/adapters/home_keys.py``)."""
    return Path(HomeKeyStore(home).committed_path())


def restore_home(archive: Path, target: Path) -> RestoreResult:
    """``restore``: a new home at ``target`` from a backup archive (docs/backup.md), through the
    backup port (in-process only: no daemon runs on a home that does not exist yet).

    Raises:
        BackupError: the archive is refused (malformed, a newer format) or ``target`` is not new.
    """
    return asyncio.run(HomeBackup(target).restore(str(archive)))


async def serve_home(home: NodeHome, host: str, port: int) -> None:
    """``serve-http``: the home's datasets read-only over the Simple Transfer Protocol on
    ``host:port``, without a daemon, until cancelled (the process interrupted)."""
    from aiohttp import web

    from node.transfer.server import make_app

    runner = web.AppRunner(make_app(home.repository()))
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
