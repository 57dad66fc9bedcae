"""The node daemon: gossip, IPFS, the engine, pipelines, RPC and HTTP as one asyncio process.

Service start order (stopped in reverse): state -> IPFS -> engine -> gossip -> pipeline workers
-> HTTP surface -> RPC. Everything the daemon must not forget lives in :class:`NodeState`
(SQLite): accepted heads are reinstalled into the protocol core at start-up, and work items
(verify, publish) claimed by a process that died are released and resumed.

Subscriber pipeline::

    announcement --core--> RequestFetch --pull (IPFS, then HTTP)--> ancestry check
      --core--> HeadAccepted --> work "verify" --> integrity + replay on the engine
      --> republish to IPFS --> signed Attestation (or Dispute with evidence) on the dataset topic

Owner pipeline::

    commit (ingest / transform via RPC) --> work "publish" --> IPFS add + pin
      --> signed HeadAnnouncement on the dataset topic
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import secrets
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from coordinator.errors import OdfNodeError, RefCASFailed
from coordinator.identity import DatasetId, PrivateKey, load_private_key
from coordinator.metadata import model as m
from coordinator.multiformats import Multihash
from coordinator.storage.dataset import Dataset
from coordinator.storage.repository import DatasetRepository
from node.config import NodeConfig
from node.daemon.events import EventBus
from node.daemon.lock import HomeLock
from node.daemon.loop_monitor import watch_event_loop
from node.daemon.metrics import NodeMetrics
from node.daemon.services import FunctionService, ServiceGroup
from node.home import NodeHome
from node.state import NodeState, VerificationOutcome, WorkItem, backoff_ns
from p2p.core import (
    Accept,
    CoreConfig,
    Decision,
    DisconnectPeer,
    EmitEquivocationProof,
    HeadAccepted,
    Ignore,
    Penalise,
    ProtocolCore,
    RejectHead,
    RequestFetch,
)
from p2p.transport import dataset_topic
from p2p.wire import (
    Attestation,
    Checks,
    Dispute,
    DisputeKind,
    EquivocationProof,
    Evidence,
    FetchLocations,
    HeadAnnouncement,
    SignedMessage,
    Verdict,
    decode_unverified,
    sign_message,
)

log = logging.getLogger("odf_node.daemon")

ENGINE_NAME = "odf-node-spark"
ENGINE_VERSION = "3.5"


class RetryLater(OdfNodeError):
    """A work item cannot proceed yet (input missing, source unavailable); retried later."""


class NotOwner(OdfNodeError):
    """This node does not hold the dataset's key, so it cannot announce it."""


_PRUNE_EVERY_NS = 600 * 1_000_000_000


def prune_finished_work(state: NodeState, now_ns: int, keep_days: float) -> int:
    """Delete work items finished more than ``keep_days`` ago (0: keep all); how many went."""
    if keep_days <= 0:
        return 0
    n = state.prune_work(now_ns - int(keep_days * 86_400 * 1_000_000_000))
    if n:
        log.info("pruned %d work items finished more than %g days ago", n, keep_days)
    return n


@dataclass
class Daemon:
    """One running node. Build with :meth:`create`, then ``await run(stop_event)``."""

    home: NodeHome
    config: NodeConfig
    clock: Callable[[], int] = time.time_ns
    rng: random.Random = field(default_factory=random.Random)
    ephemeral: bool = False

    repo: DatasetRepository = field(init=False)
    state: NodeState = field(init=False)
    node_key: PrivateKey = field(init=False)
    metrics: NodeMetrics = field(init=False)
    events: EventBus = field(init=False)
    group: ServiceGroup = field(init=False)
    ipfs_api: str | None = field(default=None, init=False)
    ipfs_info: dict[str, Any] = field(default_factory=dict, init=False)
    http_port: int | None = field(default=None, init=False)
    rpc_url: str | None = field(default=None, init=False)
    _engine: Any = field(default=None, init=False)
    gossip: Any = field(default=None, init=False)
    transport: Any = field(default=None, init=False)
    started_at_ns: int = field(default=0, init=False)
    _wake: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _ipfs_node: Any = field(default=None, init=False)
    _known_peers: set[str] = field(default_factory=set, init=False)
    _running_items: dict[int, str] = field(default_factory=dict, init=False)
    _commit_locks: dict[str, asyncio.Lock] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.repo = self.home.repository()
        self.node_key = self.home.node_key()
        self.metrics = NodeMetrics()
        self.events = EventBus()
        self.group = ServiceGroup()

    # ---- identity

    @property
    def node_id(self) -> str:
        """The node's ``did:key``."""
        return self.node_key.dataset_id().as_did_key()

    def owns(self, did: DatasetId) -> bool:
        """Whether this node holds the dataset key of ``did``."""
        return self.repo.key_path(did).is_file()

    # ---- lifecycle

    async def run(self, stop: asyncio.Event) -> None:
        """Start every service, run until ``stop`` is set or a task crashes, then stop."""
        lock = HomeLock(self.home.path)
        lock.acquire_daemon()
        try:
            self._build_services()
            await self.group.start()
            self.started_at_ns = self.clock()
            log.info(
                "odf-node ready: home=%s node_id=%s rpc=%s http=%s ipfs=%s",
                self.home.path,
                self.node_id,
                self.rpc_url,
                self.http_port,
                self.ipfs_api,
            )
            waiter = asyncio.ensure_future(stop.wait())
            failure = asyncio.ensure_future(self.group.wait_failure())
            done, _ = await asyncio.wait({waiter, failure}, return_when=asyncio.FIRST_COMPLETED)
            for t in (waiter, failure):
                t.cancel()
            log.info("odf-node stopping")
            await self.group.stop()
            if failure in done and not failure.cancelled():
                raise RuntimeError(f"a daemon task crashed: {failure.result()!r}")
        finally:
            lock.release()
            log.info("odf-node stopped")

    def _build_services(self) -> None:
        g = self.group
        g.add(FunctionService("state", self._start_state, self._stop_state))
        if self.config.ipfs.mode != "none":
            g.add(FunctionService("ipfs", self._start_ipfs, self._stop_ipfs))
        g.add(FunctionService("engine", self._start_engine, self._stop_engine))
        if self.config.p2p.enabled:
            g.add(FunctionService("gossip", self._start_gossip, self._stop_gossip))
        g.add(FunctionService("pipeline", self._start_pipeline, _noop))
        if self.config.http.enabled:
            g.add(FunctionService("http", self._start_http, self._stop_http))
        g.add(FunctionService("rpc", self._start_rpc, self._stop_rpc))

    # ---- state

    async def _start_state(self) -> None:
        self.state = NodeState.open(self.home.path / "state.db", self.clock)
        released = self.state.release_claims()
        if released:
            log.info("resuming %d work item(s) interrupted by the last shutdown", released)
        self.state.log_event("daemon.start", None, {"node_id": self.node_id})

    async def _stop_state(self) -> None:
        with contextlib.suppress(Exception):
            self.state.log_event("daemon.stop", None, {})
        self.state.close()

    # ---- IPFS

    async def _start_ipfs(self) -> None:
        from node.ipfs.client import IpfsClient

        cfg = self.config.ipfs
        if cfg.mode == "embedded":
            from node.daemon.ipfs_process import start_embedded_ipfs

            self._ipfs_node = await asyncio.to_thread(
                start_embedded_ipfs, self.home.path / "ipfs", self.config.network.loopback_only
            )
            self.ipfs_api = self._ipfs_node.api_url
        else:
            self.ipfs_api = cfg.api_url
        async with IpfsClient(self.ipfs_api) as client:
            ident = await client.id()
            self.ipfs_info = {
                "peer_id": ident.get("ID") or ident.get("id"),
                "addresses": ident.get("Addresses") or ident.get("addresses") or [],
                "api": self.ipfs_api,
                "mode": cfg.mode,
            }
            # Configured peers, then the ones an operator connected earlier (remembered).
            remembered = [
                str(e.data["multiaddr"])
                for e in self.state.events(0, 1000, "ipfs.connect")
                if "multiaddr" in e.data
            ]
            for addr in dict.fromkeys([*cfg.swarm_peers, *remembered]):
                try:
                    await asyncio.wait_for(client.swarm_connect(addr), 15)
                except Exception as e:  # a peer being down must not stop the node
                    log.warning("IPFS swarm connect to %s failed: %s", addr, e)

    async def _stop_ipfs(self) -> None:
        if self._ipfs_node is not None:
            from node.daemon.ipfs_process import stop_embedded_ipfs

            await asyncio.to_thread(stop_embedded_ipfs, self._ipfs_node, self.home.path / "ipfs")
            self._ipfs_node = None

    async def ipfs_connect(self, multiaddr: str) -> None:
        """Connect our IPFS node to another one (bitswap needs a connection)."""
        from node.ipfs.client import IpfsClient

        if self.ipfs_api is None:
            raise OdfNodeError("IPFS is disabled on this node")
        if self.config.network.loopback_only and not multiaddr.startswith("/ip4/127."):
            raise OdfNodeError(f"refusing non-loopback address {multiaddr!r} (loopback-only)")
        async with IpfsClient(self.ipfs_api) as client:
            await client.swarm_connect(multiaddr)
        self.state.log_event("ipfs.connect", None, {"multiaddr": multiaddr})

    # ---- engine

    @property
    def engine(self) -> Any:
        """The engine client, created on first use: its modules (gRPC, pyarrow) and its worker
        process (Spark) cost memory that an idle node should not pay."""
        if self._engine is None:
            from node.engine_client import EngineClient

            e = self.config.engine
            self._engine = EngineClient(
                master=e.spark_master,
                idle_timeout=float(e.idle_timeout_s),
                isolate_network=e.isolate_network,
                memory_limit=(e.memory_limit_mib << 20) or None,
            )
        return self._engine

    async def _start_engine(self) -> None:
        return None  # nothing to start: the worker starts on the first transform / verify

    async def _stop_engine(self) -> None:
        if self._engine is not None:
            await asyncio.to_thread(self._engine.close)

    # ---- gossip

    async def _start_gossip(self) -> None:
        from p2p.libp2p_host import Libp2pConfig, Libp2pTransport
        from p2p.service import GossipService

        p = self.config.p2p
        self.transport = Libp2pTransport(
            Libp2pConfig(
                node_seed=self.node_key.seed(),
                listen_host=p.listen_host,
                listen_port=p.port,
                bootstrap=p.bootstrap,
                loopback_only=self.config.network.loopback_only,
            )
        )
        await self.transport.start()
        core = ProtocolCore(CoreConfig(anti_entropy_interval_ns=15 * 1_000_000_000), self.rng)
        for sub in self.state.subscriptions():
            core.subscribe(DatasetId.parse(sub.did))
        for h in self.repo.list():
            if self.owns(h.id):
                core.subscribe(h.id)
        for acc in self.state.accepted_heads():
            try:
                core.restore_accepted(acc.envelope)
            except Exception as e:
                log.warning("could not restore accepted head of %s: %s", acc.did, e)
        self.gossip = GossipService(core, self.transport, self.clock, self._fetch)
        self.gossip.on_decision(self._on_decision)
        await self.gossip.start()
        self.group.spawn(self._watch_peers(), "peer-watch")
        self.group.spawn(self._redial_known_peers(), "peer-redial")

    async def _stop_gossip(self) -> None:
        if self.gossip is not None:
            await self.gossip.stop()
        if self.transport is not None:
            await self.transport.stop()

    async def follow(self, did: DatasetId) -> None:
        """Join ``did``'s topic and ask connected peers for its latest head."""
        if self.gossip is None:
            return
        await self.gossip.follow(did)

    async def connect_peer(self, multiaddr: str) -> str:
        """Dial a gossip peer; returns its peer id."""
        if self.transport is None:
            raise OdfNodeError("gossip is disabled on this node")
        peer: str = await self.transport.connect(multiaddr)
        self._peer_seen(peer)
        self.state.upsert_peer(peer, [multiaddr], None, True)  # redialled after a restart
        return peer

    async def _redial_known_peers(self) -> None:
        bootstrap = set(self.config.p2p.bootstrap)
        for p in self.state.peers():
            for addr in p.addrs:
                if addr in bootstrap or p.peer_id in self._known_peers:
                    continue
                try:
                    await asyncio.wait_for(self.connect_peer(addr), 15)
                    log.info("reconnected to known peer %s", p.peer_id)
                    break
                except Exception as e:
                    log.info("known peer %s at %s unreachable: %s", p.peer_id, addr, e)

    def _peer_seen(self, peer: str) -> None:
        if peer not in self._known_peers:
            self._known_peers.add(peer)
            self.gossip.peer_connected(peer)
            self.state.upsert_peer(peer, None, None, True)
            self.events.publish("peer.connected", {"peer": peer})

    async def _watch_peers(self) -> None:
        while True:
            connected = set(self.transport.connected_peers())
            for peer in connected - self._known_peers:
                self._peer_seen(peer)
            for peer in self._known_peers - connected:
                self._known_peers.discard(peer)
                self.state.upsert_peer(peer, None, None, False)
                self.events.publish("peer.disconnected", {"peer": peer})
            now = self.clock()
            for peer in connected:
                self.state.upsert_peer(peer, None, self.gossip.core.peer_score(peer, now), True)
            self.metrics.peers.set(len(connected))
            await asyncio.sleep(2.0)

    def _on_decision(self, d: Decision) -> None:
        match d:
            case Accept(message=SignedMessage(message=HeadAnnouncement())):
                self.metrics.announcements.labels("candidate", "").inc()
            case Accept(message=SignedMessage(message=Attestation() as a) as sm):
                self.state.add_attestation(
                    a.dataset.as_did_str(),
                    a.head.to_multibase(),
                    a.verdict.name.lower(),
                    a.node.as_did_key(),
                    sm.envelope,
                    False,
                )
                self.events.publish(
                    "attestation",
                    {"did": a.dataset.as_did_str(), "head": a.head.to_multibase(), "own": False},
                )
            case Accept(message=SignedMessage(message=Dispute() as x) as sm):
                self.state.add_dispute(
                    x.dataset.as_did_str(),
                    x.block.to_multibase(),
                    x.kind.name.lower(),
                    x.node.as_did_key(),
                    sm.envelope,
                    False,
                    x.detail,
                )
                self.events.publish(
                    "dispute",
                    {"did": x.dataset.as_did_str(), "block": x.block.to_multibase(), "own": False},
                )
            case Accept(message=EquivocationProof() as proof):
                self._store_proof(proof)
            case EmitEquivocationProof(proof=proof):
                self._store_proof(proof)
            case HeadAccepted():
                self._on_head_accepted(d)
            case RejectHead():
                self.metrics.announcements.labels("rejected", d.reason).inc()
                self.state.log_event(
                    "head.rejected",
                    d.dataset.as_did_str(),
                    {"head": d.head.to_multibase(), "reason": d.reason},
                )
                self.state.enqueue(
                    "dispute",
                    d.dataset.as_did_str(),
                    d.head.to_multibase(),
                    {"kind": "integrity", "detail": f"head is {d.reason} of the accepted head"},
                )
                self._wake.set()
            case Penalise():
                self.metrics.announcements.labels("penalised", d.reason).inc()
            case Ignore():
                self.metrics.announcements.labels("ignored", d.reason).inc()
            case DisconnectPeer():
                self.state.log_event("peer.graylisted", None, {"peer": d.peer, "score": d.score})
            case _:
                pass

    def _store_proof(self, proof: EquivocationProof) -> None:
        did = proof.first.message.dataset.as_did_str()
        if self.state.add_equivocation_proof(did, proof.envelope):
            self.state.log_event("equivocation", did, {})
            self.events.publish("equivocation", {"did": did})

    def _on_head_accepted(self, d: HeadAccepted) -> None:
        did = d.dataset.as_did_str()
        head = d.head.to_multibase()
        self.metrics.announcements.labels("accepted", "").inc()
        stored = self.state.record_accepted_head(
            did, d.epoch, d.sequence, head, "", d.announcement.envelope
        )
        if not stored:
            return
        self.state.log_event("head.accepted", did, {"head": head, "sequence": d.sequence})
        self.events.publish("head.accepted", {"did": did, "head": head, "sequence": d.sequence})
        if not self.owns(d.dataset):
            self.state.enqueue("verify", did, head, {"sequence": d.sequence})
            self._wake.set()

    # ---- fetch (called by the gossip service for RequestFetch)

    def local_alias_for(self, did: DatasetId) -> str:
        """The alias a pulled dataset is stored under (subscription alias, else the DID)."""
        try:
            return self.repo.resolve(did.as_did_str()).alias
        except OdfNodeError:
            pass
        sub = self.state.subscription(did.as_did_str())
        if sub is not None and sub.alias:
            return sub.alias
        return did.as_multibase()

    def _sources(self, locations: FetchLocations) -> list[str]:
        urls = [f"ipfs://{c}" for c in locations.ipfs_cids] if self.ipfs_api else []
        urls += [u.rstrip("/") for u in locations.http_urls]
        return urls

    async def _fetch(self, req: RequestFetch) -> bool:
        from node.transfer.errors import DivergedHeads, ObjectRejected, TransferError
        from node.transfer.pull import pull_url

        did = req.dataset
        alias = self.local_alias_for(did)
        sources = self._sources(req.locations)
        if not sources:
            raise RetryLater("the announcement names no source this node can use")
        errors: list[str] = []
        t0 = time.monotonic()
        async with self._commit_lock(did.as_did_str()):
            for url in sources:
                try:
                    result = await pull_url(self.repo, url, alias=alias, ipfs_api=self.ipfs_api)
                except DivergedHeads as e:
                    self.metrics.pulls.labels("diverged").inc()
                    log.warning("pull of %s from %s: %s", did, url, e)
                    return False
                except ObjectRejected as e:
                    self.metrics.pulls.labels("rejected").inc()
                    errors.append(f"{url}: {e}")
                    self.state.log_event(
                        "pull.rejected", did.as_did_str(), {"url": url, "error": str(e)}
                    )
                    continue
                except (TransferError, RefCASFailed, OSError) as e:
                    # RefCASFailed: our copy moved meanwhile (another pull); retried later.
                    self.metrics.pulls.labels("unavailable").inc()
                    errors.append(f"{url}: {e}")
                    continue
                self.metrics.pulls.labels("ok").inc()
                self.metrics.pull_seconds.observe(time.monotonic() - t0)
                self.state.log_event("pull.ok", did.as_did_str(), {"url": url, **result.to_dict()})
                return await asyncio.to_thread(
                    _descends, self.repo.open(did.as_did_str()), req.head, req.base
                )
        raise RetryLater("; ".join(errors) or "no source worked")

    # ---- pipeline workers

    def _commit_lock(self, did: str) -> asyncio.Lock:
        return self._commit_locks.setdefault(did, asyncio.Lock())

    async def _start_pipeline(self) -> None:
        for i in range(self.config.pipeline.concurrency):
            self.group.spawn(self._worker(i), f"worker-{i}")
        self.group.spawn(self._housekeeping(), "housekeeping")
        self.group.spawn(watch_event_loop(self.metrics.loop_lag.observe), "loop-monitor")

    def kick(self) -> None:
        """Wake the workers (new work was queued)."""
        self._wake.set()

    async def _worker(self, n: int) -> None:
        while True:
            busy = set(self._running_items.values())
            item = self.state.claim(self.clock(), exclude_dids=busy)
            if item is None:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), 1.0)
                continue
            self._running_items[item.id] = item.did
            try:
                await self._run_item(item)
            finally:
                self._running_items.pop(item.id, None)
                self._wake.set()

    async def _run_item(self, item: WorkItem) -> None:
        handlers = {
            "verify": self._do_verify,
            "publish": self._do_publish,
            "dispute": self._do_dispute,
        }
        handler = handlers.get(item.kind)
        if handler is None:
            self.state.fail(item.id, f"unknown work kind {item.kind!r}", None)
            return
        log.info("work #%d %s %s (attempt %d)", item.id, item.kind, item.did, item.attempts)
        try:
            await handler(item)
        except asyncio.CancelledError:
            raise  # shutdown: the claim is released at the next start
        except Exception as e:
            p = self.config.pipeline
            retry = None
            # Waiting (for an input, a source) is not failing: allow it many more rounds.
            limit = p.max_attempts * (4 if isinstance(e, RetryLater) else 1)
            if item.attempts < limit:
                retry = self.clock() + backoff_ns(
                    item.attempts, p.retry_base_s, p.retry_cap_s, rand=self.rng.random
                )
            msg = str(e) or type(e).__name__
            log.warning(
                "work #%d %s failed: %s (%s)",
                item.id,
                item.kind,
                msg,
                "will retry" if retry else "giving up",
            )
            self.state.fail(item.id, msg, retry)
            self.state.log_event(
                f"{item.kind}.error", item.did, {"error": msg, "final": retry is None}
            )
            return
        self.state.complete(item.id)
        log.info("work #%d %s %s done", item.id, item.kind, item.did)

    async def _housekeeping(self) -> None:
        last_prune: int | None = None
        while True:
            for kind in ("verify", "publish", "dispute"):
                self.metrics.queue_depth.labels(kind).set(self.state.pending_count(kind))
            self.metrics.engine_running.set(1 if self._engine and self._engine.running else 0)
            self.state.prune_events(100_000)
            now = self.clock()
            if last_prune is None or now - last_prune >= _PRUNE_EVERY_NS:
                prune_finished_work(self.state, now, self.config.pipeline.keep_finished_work_days)
                last_prune = now
            await asyncio.sleep(5.0)

    # ---- verify -> attest / dispute

    async def _do_verify(self, item: WorkItem) -> None:
        from coordinator.transform.verify import Verdict as ReplayVerdict
        from coordinator.transform.verify import verify_dataset

        did = DatasetId.parse(item.did)
        newer = [w for w in self.state.work(state="pending", did=item.did) if w.kind == "verify"]
        if newer:
            # A newer head is queued: verifying it covers this one (the chain includes it).
            self.state.log_event("verify.superseded", item.did, {"head": item.head})
            return
        ds = self.repo.open(item.did)
        chain = await asyncio.to_thread(ds.state)
        inputs: dict[DatasetId, Dataset] = {}
        replay = self.config.pipeline.replay
        if chain.dataset_kind == m.DatasetKind.DERIVATIVE and chain.set_transform and replay:
            missing = []
            for i in chain.set_transform.inputs:
                idid = DatasetId.parse(i.dataset_ref)
                if self.repo.contains(idid.as_did_str()):
                    inputs[idid] = self.repo.open(idid.as_did_str())
                else:
                    missing.append(idid)
            for idid in missing:
                # Inputs are pulled recursively: follow them like any subscription.
                self.state.subscribe(idid.as_did_str(), None, f"input of {item.did}")
                await self.follow(idid)
            if missing:
                raise RetryLater(f"waiting for {len(missing)} input dataset(s) to be pulled")
        head = chain.head
        assert head is not None
        self.state.log_event("verify.start", item.did, {"head": head.to_multibase()})
        self.events.publish("verify.started", {"did": item.did, "head": head.to_multibase()})
        t0 = time.monotonic()

        def progress(phase: str, done: int, total: int) -> None:
            self.events.publish_threadsafe(
                "verify.progress", {"did": item.did, "phase": phase, "done": done, "total": total}
            )

        report = await asyncio.to_thread(
            verify_dataset,
            ds,
            inputs,
            self.engine,
            integrity_only=not replay,
            listener=progress,
        )
        seconds = time.monotonic() - t0
        rp = report.replay
        if rp is not None and rp.verdict is ReplayVerdict.ERROR:
            # Usually a missing input slice or an engine failure: not a verdict on the data.
            self.metrics.verifications.labels("error").inc()
            raise RetryLater(f"replay could not run: {rp.error}")
        self.metrics.verify_seconds.observe(seconds)
        outcome: VerificationOutcome
        if report.ok:
            outcome = "verified"
        elif rp is not None and rp.verdict is ReplayVerdict.NOT_REPRODUCIBLE:
            outcome = "nondeterministic"
        else:
            outcome = "failed"
        self.metrics.verifications.labels(outcome).inc()
        problems = [*report.integrity.problems, *report.problems]
        detail = rp.mismatch.describe() if rp is not None and rp.mismatch else "; ".join(problems)
        self.state.record_verification(
            item.did, head.to_multibase(), outcome, detail[:2000], seconds
        )
        self.state.log_event(
            "verify." + outcome, item.did, {"head": head.to_multibase(), "seconds": seconds}
        )
        self.events.publish(
            "verify.finished", {"did": item.did, "head": head.to_multibase(), "outcome": outcome}
        )
        if outcome == "failed":
            await self._dispute_from_report(did, head, report)
            return
        locations = FetchLocations()
        if outcome == "verified" and self.config.pipeline.republish and self.ipfs_api:
            cid = await self._publish_ipfs(ds)
            locations = FetchLocations((cid,), self._http_urls(did))
            self.state.log_event("republish", item.did, {"head": head.to_multibase(), "cid": cid})
        checks = Checks.METADATA_INTEGRITY | Checks.DATA_INTEGRITY
        verdict = Verdict.INTEGRITY_ONLY
        if rp is not None:
            checks |= Checks.REPLAY
            verdict = Verdict.VERIFIED if outcome == "verified" else Verdict.UNVERIFIABLE
        elif chain.dataset_kind == m.DatasetKind.ROOT:
            verdict = Verdict.VERIFIED
        att = Attestation(
            node=self.node_key.dataset_id(),
            dataset=did,
            head=head,
            verdict=verdict,
            engine_name=ENGINE_NAME,
            engine_version=ENGINE_VERSION,
            checks=checks,
            locations=locations,
            issued_at_ns=self.clock(),
            nonce=secrets.token_bytes(16),
        )
        sm = sign_message(att, self.node_key)
        self.state.add_attestation(
            item.did, head.to_multibase(), verdict.name.lower(), self.node_id, sm.envelope, True
        )
        await self._gossip(sm.envelope, dataset_topic(did.as_multibase()))
        self.events.publish(
            "attestation", {"did": item.did, "head": head.to_multibase(), "own": True}
        )

    async def _dispute_from_report(self, did: DatasetId, head: Multihash, report: Any) -> None:
        rp = report.replay
        if rp is not None and rp.mismatch is not None:
            mm = rp.mismatch
            dispute = self._dispute(
                did,
                mm.block_hash,
                DisputeKind.REPLAY_MISMATCH,
                _evidence(mm.expected),
                _evidence(mm.actual),
                "; ".join(mm.differences),
            )
        else:
            problems = [*report.integrity.problems, *report.problems]
            dispute = self._dispute(
                did, head, DisputeKind.INTEGRITY, Evidence(), Evidence(), "; ".join(problems)
            )
        await self._send_dispute(did, dispute)

    def _dispute(
        self,
        did: DatasetId,
        block: Multihash,
        kind: DisputeKind,
        expected: Evidence,
        computed: Evidence,
        detail: str,
    ) -> SignedMessage:
        detail_b = detail.encode()[:250].decode(errors="ignore")
        return sign_message(
            Dispute(
                node=self.node_key.dataset_id(),
                dataset=did,
                block=block,
                kind=kind,
                expected=expected,
                computed=computed,
                detail=detail_b,
                issued_at_ns=self.clock(),
                nonce=secrets.token_bytes(16),
            ),
            self.node_key,
        )

    async def _send_dispute(self, did: DatasetId, sm: SignedMessage) -> None:
        x = sm.message
        assert isinstance(x, Dispute)
        self.state.add_dispute(
            did.as_did_str(),
            x.block.to_multibase(),
            x.kind.name.lower(),
            self.node_id,
            sm.envelope,
            True,
            x.detail,
        )
        await self._gossip(sm.envelope, dataset_topic(did.as_multibase()))
        self.events.publish(
            "dispute", {"did": did.as_did_str(), "block": x.block.to_multibase(), "own": True}
        )

    async def _do_dispute(self, item: WorkItem) -> None:
        did = DatasetId.parse(item.did)
        assert item.head is not None
        sm = self._dispute(
            did,
            Multihash.from_multibase(item.head),
            DisputeKind.INTEGRITY,
            Evidence(),
            Evidence(),
            str(item.payload.get("detail", "")),
        )
        await self._send_dispute(did, sm)

    async def _gossip(self, envelope: bytes, topic: str) -> None:
        if self.gossip is None:
            return
        try:
            await self.gossip.announce(envelope, topic)
        except Exception as e:  # no peers yet: anti-entropy and re-announcements cover it
            log.info("gossip publish on %s: %s", topic, e)

    # ---- owner: publish + announce

    def _http_urls(self, did: DatasetId) -> tuple[str, ...]:
        base = self.config.http.public_url.rstrip("/")
        if not base and self.config.http.enabled and self.http_port:
            base = f"http://{self.config.http.host}:{self.http_port}"
        return (f"{base}/{did.as_did_str()}",) if base else ()

    async def _publish_ipfs(self, ds: Dataset) -> str:
        from node.ipfs.client import IpfsClient
        from node.transfer.publish import publish_dataset

        assert self.ipfs_api is not None
        async with IpfsClient(self.ipfs_api) as client:
            result = await publish_dataset(client, ds)
        return result.cid

    def queue_publish(self, did: DatasetId) -> WorkItem:
        """Queue publication + announcement of the current head of an owned dataset."""
        if not self.owns(did):
            raise NotOwner(f"this node does not hold the key of {did.as_did_str()}")
        ds = self.repo.open(did.as_did_str())
        head = ds.head()
        item = self.state.enqueue("publish", did.as_did_str(), str(head) if head else None, {})
        self.kick()
        return item

    async def _do_publish(self, item: WorkItem) -> None:
        did = DatasetId.parse(item.did)
        ds = self.repo.open(item.did)
        chain = await asyncio.to_thread(ds.state)
        if chain.head is None:
            return
        cids: tuple[str, ...] = ()
        if self.ipfs_api:
            cids = (await self._publish_ipfs(ds),)
        key = load_private_key(self.repo.key_path(did))
        prev = self.state.accepted_head(item.did)
        ann = HeadAnnouncement(
            dataset=did,
            head=chain.head,
            sequence=chain.sequence_number,
            prev_head=Multihash.from_multibase(prev.head) if prev else None,
            epoch=0,
            locations=FetchLocations(cids, self._http_urls(did)),
            issued_at_ns=self.clock(),
            nonce=secrets.token_bytes(16),
        )
        sm = sign_message(ann, key)
        self.state.record_accepted_head(
            item.did, 0, chain.sequence_number, chain.head.to_multibase(), "self", sm.envelope
        )
        if self.gossip is not None:
            await self.follow(did)
            self.gossip.core.restore_accepted(sm.envelope)
        await self._gossip(sm.envelope, dataset_topic(did.as_multibase()))
        self.state.log_event(
            "announce", item.did, {"head": chain.head.to_multibase(), "cids": list(cids)}
        )
        self.events.publish(
            "announce", {"did": item.did, "head": chain.head.to_multibase(), "cids": list(cids)}
        )

    async def announce_envelope(self, did: DatasetId, envelope: bytes) -> None:
        """Gossip a pre-signed envelope on ``did``'s topic (tests and tools)."""
        decode_unverified(envelope)
        await self._gossip(envelope, dataset_topic(did.as_multibase()))

    # ---- HTTP surface

    async def _start_http(self) -> None:
        from aiohttp import web

        from node.transfer.server import make_app

        app = make_app(self.repo)
        app.router.add_get("/metrics", self._metrics_handler)
        self._http_runner = web.AppRunner(app, access_log=None)
        await self._http_runner.setup()
        port = 0 if self.ephemeral else self.config.http.port
        site = web.TCPSite(self._http_runner, self.config.http.host, port)
        await site.start()
        self.http_port = _bound_port(site, port)

    async def _metrics_handler(self, request: Any) -> Any:
        from aiohttp import web

        body, content_type = self.metrics.render()
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def _stop_http(self) -> None:
        await self._http_runner.cleanup()

    # ---- RPC

    async def _start_rpc(self) -> None:
        from node.daemon.rpc_api import start_rpc

        self._rpc = await start_rpc(self)

    async def _stop_rpc(self) -> None:
        from node.daemon.rpc_api import stop_rpc

        await stop_rpc(self, self._rpc)


async def _noop() -> None:
    return None


def _bound_port(site: Any, fallback: int) -> int:
    server = site._server
    sockets = getattr(server, "sockets", None) or []
    return int(sockets[0].getsockname()[1]) if sockets else fallback


def _evidence(e: m.ExecuteTransform) -> Evidence:
    nd = e.new_data
    wm = e.new_watermark
    return Evidence(
        logical_hash=nd.logical_hash if nd else None,
        physical_hash=nd.physical_hash if nd else None,
        offsets=(nd.offset_interval.start, nd.offset_interval.end) if nd else None,
        watermark_ns=wm.epoch_ns if wm is not None else None,
    )


def _descends(ds: Dataset, head: Multihash, base: Multihash | None) -> bool:
    """Whether the local chain contains ``head`` and ``head`` descends from ``base``."""
    found = False
    for h, _ in ds.iter_blocks(verify=False):
        if h == head:
            found = True
            if base is None:
                return True
        if found and h == base:
            return True
    return False


def install_signal_handlers(stop: asyncio.Event) -> None:
    """SIGINT / SIGTERM set ``stop`` (a second signal exits at once)."""
    loop = asyncio.get_running_loop()

    def handler() -> None:
        if stop.is_set():
            os._exit(130)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, handler)


__all__ = ["Daemon", "NotOwner", "RetryLater", "install_signal_handlers"]
