"""The application layer: the node's use cases, written against ports.

Read the daemon top down:

1. The composition roots: ``node/daemon/daemon.py`` builds the adapters, wires them into an
   :class:`Application`, starts and stops the services in order; ``node/compose.py`` builds the
   same :class:`Application` over a home without gossip or IPFS (the CLI without a daemon).
2. ``node/commands/`` — every user-facing command declared once (parameters, use case, typed
   result, rendering); the CLI and the JSON-RPC methods are generated from the declarations.
3. ``node/app/`` (this package) — use cases: datasets (create, ingest, transform, verify, pull,
   log, list), subscriptions, the owner's publish pipeline, the subscriber's verify pipeline,
   the work runner and its retry policy, the node's part of every protocol-core decision.
4. ``node/app/ports.py`` — the typed async ports the use cases need (state, gossip, IPFS,
   transfer, engine, events, clock).
5. ``node/adapters/`` and the infrastructure packages — SQLite state with its own writer
   thread (``node/state``), the libp2p gossip service (``p2p``), the embedded IPFS node
   (Helia) or kubo (``node/ipfs``), pulls (``node/transfer``), the Spark engine worker
   (``node/engine_client``), and the JSON-RPC server (``node/rpc``).

The application layer imports no network, database or engine library (aiohttp, libp2p, trio,
sqlite3, grpc, pyspark): an import-linter contract enforces it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from coordinator.storage.repository import DatasetRepository
from node.app.console import CONSOLE_PATH, ConsoleQueries
from node.app.data import VerifiedData
from node.app.datasets import CommitLocks, DatasetUseCases
from node.app.errors import InvalidArgument, Unavailable
from node.app.flows import FlowUseCases
from node.app.intoto import AttestationExport
from node.app.metrics import NodeMetrics
from node.app.ports import (
    BackupPort,
    Clock,
    ConsoleLoginPort,
    EnginePort,
    EventSink,
    GossipPort,
    IpfsPort,
    StatePort,
)
from node.app.publish import PublishPipeline
from node.app.queries import NodeQueries
from node.app.query_api import ApiSettings, QueryApi
from node.app.query_proofs import CommitmentSigner
from node.app.results import BackupResult, ConsoleLogin, NodeStatus
from node.app.subscriptions import SubscriptionUseCases
from node.app.verify import VerifyPipeline
from node.app.work import WorkRunner
from p2p.dht.stats import status_row


@dataclass
class NodeInfo:
    """Facts about the running node the composition root fills in as services start."""

    node_id: str
    home: str
    spark_master: str
    block_version: int = 2
    live: bool = True
    """False for the Application the CLI builds without a daemon (nothing runs)."""
    started_at_ns: int = 0
    rpc_url: str | None = None
    http_url: str | None = None
    flight_sql_url: str | None = None
    """Where the Arrow Flight SQL server listens (``grpc://host:port``; None: not running)."""
    config: dict[str, Any] = field(default_factory=dict)
    warnings: list[dict[str, Any]] = field(default_factory=list)
    """Reachability problems found at start (``status``' ``warnings``)."""
    reachability: dict[str, Any] = field(default_factory=dict)
    """The gossip host's reachability behind NAT (``status``' ``p2p.reachability``)."""
    connections: dict[str, str] = field(default_factory=dict)
    """Per connected peer, ``direct`` or ``relayed`` (``status``' ``p2p.connections``; open
    mode with ``[p2p] hole_punching``, else empty)."""
    dht: dict[str, int | bool] = field(default_factory=status_row)
    """The odf DHT's counters (``status``' ``p2p.dht``, :func:`p2p.dht.stats.status_row`;
    ``running`` false and zeros when it does not run, so ``status`` has one shape): lookups,
    records stored and refused, rate limits answered and met (``p2p/dht_service.py``)."""


@dataclass
class Application:
    """Every use case of one node, over its adapters (built by the composition root)."""

    info: NodeInfo
    clock: Clock
    repo: DatasetRepository
    state: StatePort
    gossip: GossipPort
    ipfs: IpfsPort
    engine: Callable[[], EnginePort | None]  # the engine, if it was ever started
    metrics: NodeMetrics
    locks: CommitLocks
    datasets: DatasetUseCases
    subscriptions: SubscriptionUseCases
    publish: PublishPipeline
    verify: VerifyPipeline
    work: WorkRunner
    console: ConsoleQueries | None = None
    events: EventSink | None = None
    backup_port: BackupPort | None = None
    flows: FlowUseCases | None = None
    query_signer: CommitmentSigner | None = None
    """Signs the HTTP data API's query commitments with the node key (None: no proofs)."""
    data: VerifiedData | None = None
    """Reading what the node verified: SQL, tail, export (``node/app/data.py``)."""
    logins: ConsoleLoginPort | None = None
    """The console's one-time login tokens (the daemon's; None offline: no console runs)."""

    async def backup(self, file: str, datasets: bool = False) -> BackupResult:
        """Write a backup of the node to ``file`` (an absolute path; never over a file).

        Runs beside a running daemon: the state database is copied with SQLite's online backup
        and dataset files are immutable once written (docs/backup.md).
        """
        if self.backup_port is None:
            raise Unavailable("backups are not available in this context")
        if not file.startswith("/"):
            raise InvalidArgument(f"the backup file must be an absolute path, got {file!r}")
        # No event is logged: beside a daemon this runs in the CLI, which only reads the home.
        return await self.backup_port.create(file, datasets=datasets)

    async def console_login(self) -> ConsoleLogin:
        """A one-time URL that logs a browser into the node console (``odf-node ui``).

        The console is served beside the RPC (``<rpc>/ui``); only the token-authenticated RPC
        reaches this use case, never a console page.
        """
        if self.logins is None or not self.info.rpc_url:
            raise Unavailable("the node console runs only in the daemon: start `odf-node run`")
        token, ttl = self.logins.issue_login()
        base = self.info.rpc_url.removesuffix("/rpc")
        return ConsoleLogin(url=f"{base}{CONSOLE_PATH}/login#{token}", expires_in_s=ttl)

    @property
    def queries(self) -> NodeQueries:
        """Read models over the state: peers, events, work items, trust evidence."""
        return NodeQueries(self.state, self.gossip)

    @property
    def exports(self) -> AttestationExport:
        """The node's attestations and disputes as in-toto/DSSE envelopes, and their check."""
        return AttestationExport(self.state, self.repo, self.verify.node_id, self.verify.seal)

    @cached_property
    def query_api(self) -> QueryApi:
        """kamu's HTTP data API over :attr:`data` (``/query``, ``/verify``, tail, metadata),
        one per node: it holds the per-client query slots (``node/app/query_api.py``)."""
        data = self.data
        if data is None:
            raise Unavailable("the verified-data reader (Application.data) is not wired")
        exports = self.exports
        return QueryApi(
            data,
            self.repo,
            self.query_signer,
            ApiSettings.from_config(self.info.config.get("query", {})),
            attestations=lambda did, block: exports.attestations(
                did, block, limit=1000, received=True
            ),
        )

    async def status(self) -> NodeStatus:
        """Identity, uptime, addresses, counts and queue depths (``None``: not running)."""
        engine: EnginePort | None = self.engine()
        st = self.state
        info = self.info
        now = self.clock()
        # Counts only, in one read (listing 1,000 subscriptions, then three queue counts one
        # after another, took seconds under load), on the state's status reader. The dataset
        # count is one directory listing (os.scandir, no stat per entry): cheaper here than a
        # hand-over to another thread on a busy machine.
        subscriptions, pending = await st.status_counts()
        datasets = self.repo.count()
        return NodeStatus(
            node_id=info.node_id,
            home=info.home,
            block_version=info.block_version,
            uptime_s=(
                round((now - info.started_at_ns) / 1e9, 3)
                if info.started_at_ns
                else (0.0 if info.live else None)
            ),
            rpc_url=info.rpc_url,
            http_url=info.http_url,
            flight_sql_url=info.flight_sql_url,
            p2p={
                "peer_id": self.gossip.peer_id(),
                "listen_addrs": list(self.gossip.listen_addrs()),
                "peers": self.gossip.peer_count(),
                "fetches_running": self.gossip.fetches_running(),
                "reachability": dict(info.reachability) or None,
                "connections": dict(info.connections),
                "dht": dict(info.dht),
            },
            ipfs=self.ipfs.info(),
            engine={
                "running": bool(engine and engine.running),
                "starts": engine.starts if engine else 0,
                "spark_master": info.spark_master,
            },
            datasets=datasets,
            subscriptions=subscriptions,
            work={k: pending.get(k, 0) for k in ("verify", "publish", "dispute")},
            running_work=len(self.work.running),
            warnings=[dict(w) for w in info.warnings],
        )


__all__ = ["Application", "NodeInfo"]
