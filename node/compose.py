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

import contextlib
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator.errors import OdfNodeError
from node.adapters.backup import HomeBackup
from node.adapters.gossip import NoGossip
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
from node.app.polling import PollingOptions
from node.app.ports import EnginePort, IpfsPort, StatePort
from node.app.publish import PublishPipeline
from node.app.query_proofs import CommitmentSigner
from node.app.subscriptions import SubscriptionUseCases
from node.app.verify import VerifyPipeline
from node.app.work import RetryPolicy, WorkRunner
from node.config import NodeConfig
from node.home import NodeHome, default_home
from node.home_lock import HomeLock
from node.state import NodeState

DAEMON_START_WAIT_S = 120.0
"""How long a CLI command waits for a starting daemon's RPC (its IPFS node may take a while)."""


class DaemonUnreachable(OdfNodeError):
    """A daemon holds the home but its RPC cannot be reached (not started in time, stopped,
    or its cookie is unusable)."""


def polling_options(config: NodeConfig) -> PollingOptions:
    """The ``[ingest]`` bounds of polling-source runs."""
    i = config.ingest
    return PollingOptions(
        i.max_fetch_bytes,
        i.max_decompressed_bytes,
        i.allow_pipe,
        i.mqtt_max_records,
        i.mqtt_idle_timeout_s,
        i.mqtt_max_message_bytes,
        i.mqtt_max_poll_s,
        files_root=i.files_root or None,
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


@contextlib.contextmanager
def offline_application(home: NodeHome, options: OfflineOptions) -> Iterator[Application]:
    """The home's :class:`Application` without a daemon; closes the engine and state after."""
    config = home.config()
    repo = home.repository()
    state = _LazyState(home.path / "state.db")
    engines: list[EnginePort] = []

    def engine() -> EnginePort:
        if not engines:
            from node.engine_client import EngineClient
            from node.engine_router import EngineRouter

            memory = (options.engine_memory_limit << 20) or None
            # The home's config (and ODF_NODE_* variables): where a cluster reaches the driver,
            # the per-request CPU-time budget.
            driver_host = config.engine.driver_host
            cpu = config.engine.cpu_limit_s or None
            engines.append(
                EngineRouter(
                    lambda: EngineClient(
                        master=options.spark_master,
                        idle_timeout=0,
                        memory_limit=memory,
                        cpu_limit=cpu,
                        driver_host=driver_host,
                    ),
                    idle_timeout=0,
                    memory_limit=memory,
                    cpu_limit=cpu,
                )
            )
        return engines[0]

    ports: StatePort = state
    ipfs: IpfsPort = IpfsAdapter(options.ipfs_api, {}) if options.ipfs_api else NoIpfs()
    gossip = NoGossip()
    events = EventBus()
    metrics = NodeMetrics()
    locks = CommitLocks()
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
    datasets = DatasetUseCases(
        repo,
        engine,
        state=ports,
        transfer=transfer,
        locks=locks,
        polling=polling_options(config),
    )
    app = Application(
        info=info,
        clock=time.time_ns,
        repo=repo,
        state=ports,
        gossip=gossip,
        ipfs=ipfs,
        engine=lambda: engines[0] if engines else None,
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
            repo, ports, gossip, ipfs, events, time.time_ns, lambda _did: (), work.kick
        ),
        verify=VerifyPipeline(
            repo,
            ports,
            gossip,
            ipfs,
            engine,
            events,
            metrics,
            time.time_ns,
            key,
            replay=config.pipeline.replay,
            republish=False,
            http_urls=lambda _did: (),
            kick=work.kick,
        ),
        work=work,
        console=ConsoleQueries(repo, ports, gossip, metrics),
        backup_port=HomeBackup(home.path),
        # Triggers are set and listed here; only a daemon runs them.
        flows=FlowUseCases(repo, ports, time.time_ns, datasets),
        query_signer=CommitmentSigner(key.dataset_id().as_did_key(), key.sign),
        data=VerifiedData(
            repo,
            ports,
            # No warm workers without a daemon: a command runs one query and exits.
            DataFusionQueryEngine(
                warm_workers=0,
                isolate_network=config.engine.isolate_network,
                # The spark dialect: a Spark worker started by the first such query.
                spark=SparkQueryEngine(
                    master=options.spark_master,
                    isolate_network=config.engine.isolate_network,
                    driver_host=config.engine.driver_host,
                ),
            ),
            config.query.limits(),
            max_sql_bytes=config.query.max_sql_bytes,
            replays=config.pipeline.replay,
        ),
    )
    try:
        yield app
    finally:
        for e in engines:
            e.close()
        if app.data is not None and app.data.engine is not None:
            _close_query_engine(app.data.engine)
        state.close()


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
    "daemon_endpoint",
    "default_home",
    "offline_application",
]
