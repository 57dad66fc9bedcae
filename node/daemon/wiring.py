"""The daemon's use cases, built once, in dependency order: :func:`wire_application`.

Every object gets what it needs through its constructor. The order (each line needs only what
is above it):

1. the work runner and the publish pipeline;
2. the trust driver, over a :class:`~node.app.verify.VerifyQueue` and a
   :class:`~node.app.verify.Republisher` (what it asks of verification: queue a replay,
   republish a trusted head), so it exists before the verify pipeline that reports verdicts to
   it: the one cycle of the graph (trust <-> verify) is cut there;
3. the key records; the transfer adapter on its own loop thread; the source follower (told
   heads by the trust driver); the chain fetcher;
4. the verify pipeline (told the trust driver, the follower's ``follow_input`` and the
   fetcher's ``note_input``); datasets, flows, effects (whose witness is the follower),
   subscriptions;
5. the :class:`~node.app.Application` the RPC, HTTP and Flight SQL surfaces serve.

The gossip port is the daemon's :class:`~node.adapters.gossip.GossipSlot`: the gossip service
needs the fetcher and the effects built here, and fills the slot when it starts.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from coordinator.identity import DatasetId, PrivateKey
from coordinator.multiformats import Multihash
from coordinator.storage.repository import DatasetRepository
from node.adapters.backup import HomeBackup
from node.adapters.home_keys import HomeKeyStore
from node.adapters.loop_thread import LoopThread
from node.adapters.transfer import TransferAdapter
from node.app import Application, NodeInfo
from node.app.console import ConsoleQueries
from node.app.datasets import CommitLocks, DatasetUseCases
from node.app.effects import NodeEffects
from node.app.events import EventBus
from node.app.fetch import ChainFetcher, IpfsHint
from node.app.flows import POLL, TRANSFORM, FlowUseCases
from node.app.follow import FollowSettings, SourceFollower
from node.app.identities import NodeIdentities
from node.app.keys import NodeKeyRecords
from node.app.metrics import NodeMetrics
from node.app.node_keys import MOVE_NEXT_KEY_ADVICE, NodeKeys
from node.app.ports import ConsoleLoginPort, EnginePort, GossipPort, IpfsPort, StatePort
from node.app.publish import PublishPipeline
from node.app.query_proofs import CommitmentSigner
from node.app.subscriptions import SubscriptionUseCases
from node.app.trust import TrustDriver
from node.app.verify import Republisher, VerifyPipeline, VerifyQueue
from node.app.work import RetryPolicy, WorkRunner
from node.compose import polling_options, verified_data
from node.config import NodeConfig
from node.home import NodeHome

log = logging.getLogger("odf_node.daemon")


@dataclass(frozen=True)
class PeerHooks:
    """What the use cases ask of the gossip host (the gossip service answers; before it runs,
    as a node without gossip)."""

    stream_request: Callable[[str, str, bytes, float], Awaitable[bytes]]
    stream_peers: Callable[[DatasetId], list[str]]
    peer_connected: Callable[[str], bool]
    ipfs_hints: Callable[[DatasetId], list[IpfsHint]]
    move_peer_score: Callable[[str, str], None]


@dataclass(frozen=True)
class Inputs:
    """What the daemon has before the use cases exist."""

    home: NodeHome
    config: NodeConfig
    repo: DatasetRepository
    node_key: PrivateKey
    info: NodeInfo
    state: StatePort
    clock: Callable[[], int]
    rng: random.Random
    metrics: NodeMetrics
    events: EventBus
    locks: CommitLocks
    gossip: GossipPort
    ipfs: IpfsPort
    engine: Callable[[], EnginePort]
    engine_created: Callable[[], EnginePort | None]
    http_urls: Callable[[DatasetId], tuple[str, ...]]
    owns: Callable[[DatasetId], bool]
    spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]]
    peers: PeerHooks
    logins: ConsoleLoginPort


@dataclass(frozen=True)
class Wiring:
    """The use cases the daemon's services run, beside the application they make up."""

    app: Application
    trust: TrustDriver
    follower: SourceFollower
    fetcher: ChainFetcher
    effects: NodeEffects
    flows: FlowUseCases
    transfer: TransferAdapter
    transfer_loop: LoopThread

    async def close(self) -> None:
        """Stop the query workers and the transfer loop (what a pull still runs is cancelled)."""
        data = self.app.data
        if data is not None and data.engine is not None:
            await data.engine.close()
        await self.transfer.close()
        await asyncio.to_thread(self.transfer_loop.stop)


@dataclass(frozen=True)
class _Core:
    work: WorkRunner
    publish: PublishPipeline
    trust: TrustDriver
    keys: NodeKeyRecords


async def wire_application(i: Inputs) -> Wiring:
    """Build every use case in dependency order (the module docstring) and restore what the
    last run left: key records, trust evidence, followed sources."""
    core = await _trust_core(i)
    work, trust = core.work, core.trust
    # Pulls run on their own loop thread: at 50 announcements/s they held this loop for over
    # half its time, so RPC calls and gossip validation waited behind them.
    transfer_loop = LoopThread("transfer")
    transfer_loop.start()
    transfer = TransferAdapter(
        i.repo,
        lambda: i.ipfs.api_url,
        config=i.config,
        loop_thread=transfer_loop,
        p2p_request=i.peers.stream_request,
    )
    follower = _follower(i, transfer, trust)
    fetcher = _fetcher(i, transfer)
    verify = _verify(i, work, trust, follower, fetcher)
    work.handle("verify", verify.run)
    work.handle("publish", core.publish.run)
    work.handle("dispute", verify.run_rejected_head)
    datasets = DatasetUseCases(
        i.repo,
        i.engine,
        state=i.state,
        transfer=transfer,
        on_commit=core.publish.queue_id,
        locks=i.locks,
        polling=polling_options(i.config, i.home.path),
        untrusted_input=trust.untrusted_input,
    )
    flows = FlowUseCases(
        i.repo, i.state, i.clock, datasets, kick=work.kick, untrusted_input=trust.untrusted_input
    )
    work.handle(POLL, flows.run_poll)
    work.handle(TRANSFORM, flows.run_transform)
    effects = NodeEffects(
        i.state,
        verify,
        i.events,
        i.metrics,
        i.spawn,
        i.owns,
        work.kick,
        trust,
        core.keys,
        i.config.storage.evidence_caps(),
        witness=follower,
    )
    # Evidence of keys trusted since it was stored ([trust] changed) is kept from now on.
    await effects.keep_trusted(DatasetId.parse(s.did) for s in await i.state.subscriptions())

    async def trust_changed(did: DatasetId) -> None:
        await trust.configure(did)
        await effects.keep_trusted((did,))  # its newly trusted keys' evidence

    subs = SubscriptionUseCases(
        i.state,
        i.gossip,
        i.ipfs,
        i.owns,
        loopback_only=i.config.network.loopback_only,
        trust=i.config.trust_config(),
        on_trust_change=trust_changed,
        follower=follower,
    )
    await follower.restore()
    app = _application(i, datasets, subs, core.publish, verify, work, flows)
    return Wiring(app, trust, follower, fetcher, effects, flows, transfer, transfer_loop)


async def _trust_core(i: Inputs) -> _Core:
    """The work runner, the publish pipeline, the trust driver and the key records, with the
    trust evidence and key records of the last run restored."""
    p = i.config.pipeline
    work = WorkRunner(
        i.state,
        i.clock,
        RetryPolicy(p.max_attempts, p.retry_base_s, p.retry_cap_s),
        i.rng.random,
    )
    publish = PublishPipeline(
        i.repo, i.state, i.gossip, i.ipfs, i.events, i.clock, i.http_urls, work.kick
    )
    caps = i.config.storage.evidence_caps()
    # Strangers' key records are held in memory under the state's cap (issue 39).
    identities = NodeIdentities(cap=caps.key_records)
    trust = TrustDriver(
        i.config.trust_config(),
        i.state,
        i.events,
        i.clock,
        i.rng,
        VerifyQueue(i.state, work.kick),
        republish=Republisher(i.repo, i.state, i.ipfs, enabled=p.republish).republish,
        current_head=lambda did: _stored_head(i.repo, did),
        contains_block=lambda did, block: _contains_block(i.repo, did, block),
        identities=identities,
    )
    keys = NodeKeyRecords(
        i.state,
        identities,
        i.events,
        trust=trust,
        move_peer_score=i.peers.move_peer_score,
        cap=caps.key_records,
        trusted_nodes=lambda: trust.default.trusted_attesters,
    )
    await _ensure_inception(i)
    await keys.load()
    await trust.restore()
    return _Core(work, publish, trust, keys)


def _fetcher(i: Inputs, transfer: TransferAdapter) -> ChainFetcher:
    """Pulls of announced heads: IPFS, HTTP and libp2p sources (the gossip host's)."""
    return ChainFetcher(
        i.repo,
        i.state,
        transfer,
        i.locks,
        i.metrics,
        ipfs_enabled=lambda: i.ipfs.api_url is not None,
        events=i.events,
        ipfs_hints=i.peers.ipfs_hints,
        stream_peers=i.peers.stream_peers,
        peer_connected=i.peers.peer_connected,
    )


def _verify(
    i: Inputs,
    work: WorkRunner,
    trust: TrustDriver,
    follower: SourceFollower,
    fetcher: ChainFetcher,
) -> VerifyPipeline:
    """The verify pipeline, telling the trust driver its verdicts, the follower the inputs to
    follow beside a source, and the fetcher the inputs a replay waits for."""
    p = i.config.pipeline
    return VerifyPipeline(
        i.repo,
        i.state,
        i.gossip,
        i.ipfs,
        i.engine,
        i.events,
        i.metrics,
        i.clock,
        i.node_key,
        replay=p.replay,
        republish=p.republish,
        http_urls=i.http_urls,
        kick=work.kick,
        trust=trust,
        follow_input=follower.follow_input,
        input_missing=fetcher.note_input,
    )


def _follower(i: Inputs, transfer: TransferAdapter, trust: TrustDriver) -> SourceFollower:
    f = i.config.follow
    return SourceFollower(
        i.repo,
        i.state,
        transfer,
        transfer,
        i.gossip,
        i.locks,
        i.metrics,
        i.events,
        i.clock,
        i.node_key,
        trust.head_accepted,  # as for an announced head: the trust policy decides
        settings=FollowSettings(
            poll_interval_s=f.poll_interval_s,
            jitter=f.jitter,
            backoff_max_s=f.backoff_max_s,
            min_gap_s=f.min_gap_s,
            concurrency=f.max_connections,
        ),
        http_urls=i.http_urls,
        rng=i.rng.random,
        spawn=i.spawn,
    )


def _application(
    i: Inputs,
    datasets: DatasetUseCases,
    subs: SubscriptionUseCases,
    publish: PublishPipeline,
    verify: VerifyPipeline,
    work: WorkRunner,
    flows: FlowUseCases,
) -> Application:
    c = i.config
    return Application(
        info=i.info,
        clock=i.clock,
        repo=i.repo,
        state=i.state,
        gossip=i.gossip,
        ipfs=i.ipfs,
        engine=i.engine_created,
        metrics=i.metrics,
        locks=i.locks,
        datasets=datasets,
        subscriptions=subs,
        publish=publish,
        verify=verify,
        work=work,
        console=ConsoleQueries(i.repo, i.state, i.gossip, i.metrics),
        events=i.events,
        backup_port=HomeBackup(i.home.path),
        flows=flows,
        query_signer=CommitmentSigner(i.info.node_id, i.node_key.sign),
        logins=i.logins,
        data=verified_data(
            i.repo,
            i.state,
            c,
            warm_workers=c.query.warm_workers,
            spark_master=c.engine.spark_master,
        ),
    )


def _stored_head(repo: DatasetRepository, did: DatasetId) -> Multihash | None:
    """``did``'s head in the repository (None when it holds none)."""
    if not repo.contains(did.as_did_str()):
        return None
    return repo.open(did.as_did_str()).head()


def _contains_block(repo: DatasetRepository, did: DatasetId, block: Multihash) -> bool:
    """Whether ``did``'s stored chain holds ``block``."""
    if not repo.contains(did.as_did_str()):
        return False
    return repo.open(did.as_did_str()).blocks.contains(block)


async def _ensure_inception(i: Inputs) -> None:
    """Commit the node key to a next key if it has none (an upgraded node's first start, or a
    home made before inceptions): node/app/node_keys.py."""
    made = await NodeKeys(HomeKeyStore(i.home), i.state, i.clock).ensure_inception()
    if made is not None:
        log.warning(
            "node key %s now commits to its next key %s: %s",
            made.node_id,
            made.next_key,
            MOVE_NEXT_KEY_ADVICE,
        )


class ApplicationService:
    """The ``application`` service: wires the use cases when it starts (after the state, IPFS
    and the engine exist), closes what they hold open when it stops."""

    name = "application"

    def __init__(self, inputs: Callable[[], Inputs]) -> None:
        self._inputs = inputs
        self._wiring: Wiring | None = None

    @property
    def wiring(self) -> Wiring:
        """The wired use cases (the services after this one start once it has)."""
        if self._wiring is None:
            raise RuntimeError("the application service has not started")
        return self._wiring

    @property
    def started(self) -> bool:
        """Whether the use cases are wired."""
        return self._wiring is not None

    async def start(self) -> None:
        """Wire the use cases (:func:`wire_application`)."""
        self._wiring = await wire_application(self._inputs())

    async def stop(self) -> None:
        """Stop the query workers and the transfer loop."""
        if self._wiring is not None:
            await self._wiring.close()
