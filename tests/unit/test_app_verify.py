"""The verify pipeline on in-memory twins: unverifiable engines, coalescing, the core's verdict."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any, cast

import pytest

from coordinator.identity import DatasetId, generate_private_key
from node.adapters.gossip import NoGossip
from node.adapters.ipfs import NoIpfs
from node.adapters.state import InlineState
from node.app.datasets import DatasetUseCases
from node.app.errors import RetryLater
from node.app.events import EventBus
from node.app.metrics import NodeMetrics
from node.app.ports import GossipPort, StatePort, VerificationVerdict
from node.app.verify import VerifyPipeline
from node.app.work import RetryPolicy, WorkRunner
from node.state.store import NodeState
from tests.factories import pull_repo

T0 = 1_800_000_000 * 1_000_000_000

SNAPSHOTS = """\
kind: DatasetSnapshot
version: 1
content:
  name: cities
  kind: Root
  metadata:
    - kind: AddPushSource
      sourceName: default
      read:
        kind: Csv
        schema: ["city STRING", "population BIGINT"]
      merge:
        kind: Append
---
kind: DatasetSnapshot
version: 1
content:
  name: big-cities
  kind: Derivative
  metadata:
    - kind: SetTransform
      inputs:
        - datasetRef: cities
      transform:
        kind: Sql
        engine: ENGINE
        query: SELECT * FROM cities WHERE population > 1000000
"""


class Node:
    """The verify pipeline wired as the daemon wires it, over in-memory twins."""

    def __init__(self, root: Path, gossip: GossipPort | None = None) -> None:
        self.repo = pull_repo(root)
        self.state = cast(StatePort, InlineState(NodeState.in_memory(lambda: T0)))
        self.engine_requests = 0
        self.tasks: set[asyncio.Task[None]] = set()
        self.work = WorkRunner(self.state, lambda: T0, RetryPolicy(), random.Random(1).random)
        gossip = gossip or NoGossip()
        self.verify = VerifyPipeline(
            self.repo,
            self.state,
            gossip,
            NoIpfs(),
            self._engine,
            EventBus(),
            NodeMetrics(),
            lambda: T0,
            generate_private_key(b"\x09" * 32),
            replay=True,
            republish=True,
            http_urls=lambda did: (),
            kick=self.work.kick,
        )
        self.work.handle("verify", self.verify.run)

    def _spawn(self, coro: Any) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        return task

    def _engine(self) -> Any:
        self.engine_requests += 1
        raise AssertionError("the engine must not be started for an engine this node lacks")

    async def run_pending(self) -> None:
        while (item := await self.state.claim(T0)) is not None:
            await self.work.run_item(item)


def _create(node: Node, engine: str) -> DatasetId:
    uc = DatasetUseCases(node.repo, lambda: None)  # type: ignore[arg-type, return-value]
    created = asyncio.run(uc.create(SNAPSHOTS.replace("ENGINE", engine)))
    return DatasetId.parse(created[1].id)


@pytest.mark.parametrize("engine", ["flink", "risingwave"])
def test_derivative_of_an_engine_we_cannot_run_is_attested_unverifiable_at_once(
    tmp_path: Path, engine: str
) -> None:
    node = Node(tmp_path)
    did = _create(node, engine)
    head = node.repo.open(did.as_did_str()).head()
    assert head is not None

    async def run() -> None:
        await node.verify.queue(did, head, 1)
        await node.run_pending()

    asyncio.run(run())
    state = cast(Any, node.state).sync
    ver = state.verification(did.as_did_str(), head.to_multibase())
    assert ver is not None and ver.outcome == "unverifiable"
    assert ver.detail == f"unverifiable: engine {engine}"
    atts = state.attestations(did=did.as_did_str())
    assert [(a.verdict, a.own) for a in atts] == [("unverifiable", True)]
    assert [w.state for w in state.work(did=did.as_did_str())] == ["done"]  # one attempt
    assert node.engine_requests == 0


def test_superseded_heads_of_one_dataset_coalesce_into_one_pending_item(tmp_path: Path) -> None:
    node = Node(tmp_path)
    did = _create(node, "datafusion")
    head = node.repo.open(did.as_did_str()).head()
    assert head is not None

    async def run() -> None:
        for seq in range(1, 6):
            await node.verify.queue(did, head, seq)

    asyncio.run(run())
    state = cast(Any, node.state).sync
    assert len(state.work(state="pending", did=did.as_did_str())) == 1
    assert [e.kind for e in state.events(0, 100, "verify.coalesced")] == ["verify.coalesced"] * 4


def _replay_report(verdict: Any, versions: list[str]) -> Any:
    from coordinator.multiformats import Multihash
    from coordinator.transform.verify import BlockEngine, ReplayReport, VerificationReport
    from coordinator.verify import IntegrityReport

    h = Multihash.from_multibase("f1620" + "ab" * 32)
    rp = ReplayReport(verdict=verdict, tried_versions=("51.0.0", "41.0.0"))
    rp.version_sensitive_reasons = ("function extract()",)
    rp.block_engines = [
        BlockEngine(block_hash=h, sequence_number=i, engine="datafusion", version=v)
        for i, v in enumerate(versions)
    ]
    return VerificationReport(integrity=IntegrityReport(), replay=rp)


def test_inconclusive_replay_is_recorded_and_attested_unverifiable(tmp_path: Path) -> None:
    from coordinator.transform.verify import ReplayVerdict
    from node.app.verify import attested_engine

    node = Node(tmp_path)
    report = _replay_report(ReplayVerdict.INCONCLUSIVE, ["41.0.0"])
    outcome, detail = node.verify._judge(report)
    assert outcome == "inconclusive"  # not "failed": the core never disputes it
    assert detail.startswith("inconclusive: engine version unknown")
    assert "51.0.0, 41.0.0" in detail
    assert attested_engine(report, outcome) == ("odf-node-datafusion", "unknown")


def test_attestation_names_the_releases_that_reproduced_the_blocks(tmp_path: Path) -> None:
    from coordinator.transform.verify import ReplayVerdict
    from node.app.verify import attested_engine

    node = Node(tmp_path)
    report = _replay_report(ReplayVerdict.OK, ["51.0.0", "41.0.0", "51.0.0"])
    assert node.verify._judge(report) == ("verified", "")
    assert attested_engine(report, "verified") == ("odf-node-datafusion", "41.0.0+51.0.0")
    assert attested_engine(None, "unverifiable") == ("odf-node-spark", "3.5")


class _NoReleases:
    """An engine router with no DataFusion environment installed (runs nothing)."""

    running = False
    starts = 0

    def pinned_versions(self, engine: str) -> tuple[str, ...]:
        return ("3.5",) if engine == "spark" else ()

    def execute_transform(self, request: Any) -> Any:
        raise AssertionError("nothing may run")

    def close(self) -> None:
        pass


def test_datafusion_without_an_installed_release_is_unverifiable_not_retried(
    tmp_path: Path,
) -> None:
    node = Node(tmp_path)
    node.verify._engine = _NoReleases  # type: ignore[assignment]
    did = _create(node, "datafusion")
    head = node.repo.open(did.as_did_str()).head()
    assert head is not None

    async def run() -> None:
        await node.verify.queue(did, head, 1)
        await node.run_pending()

    asyncio.run(run())
    state = cast(Any, node.state).sync
    ver = state.verification(did.as_did_str(), head.to_multibase())
    assert ver is not None and (ver.outcome, ver.detail) == (
        "unverifiable",
        "unverifiable: engine datafusion",
    )
    assert [w.state for w in state.work(did=did.as_did_str())] == ["done"]


class SupersededGossip(NoGossip):
    """A core that had accepted a newer head by the time the verification finished."""

    def __init__(self) -> None:
        self.reported: list[tuple[DatasetId, bool]] = []

    def verification_completed(self, did: DatasetId, head: Any, ok: bool) -> VerificationVerdict:
        self.reported.append((did, ok))
        return None


def test_a_verdict_of_none_publishes_nothing_and_the_item_still_finishes(tmp_path: Path) -> None:
    """The pipeline carries out the verdict the port returns: a superseded head is recorded
    as verified here but neither attested nor disputed."""
    gossip = SupersededGossip()
    node = Node(tmp_path, gossip)
    did = _create(node, "flink")
    head = node.repo.open(did.as_did_str()).head()
    assert head is not None

    async def run() -> None:
        await node.verify.queue(did, head, 1)
        await node.run_pending()

    asyncio.run(run())
    state = cast(Any, node.state).sync
    assert gossip.reported == [(did, True)]
    assert state.verification(did.as_did_str(), head.to_multibase()).outcome == "unverifiable"
    assert state.attestations(did=did.as_did_str()) == []
    assert state.disputes(did=did.as_did_str()) == []
    assert [w.state for w in state.work(did=did.as_did_str())] == ["done"]


def test_a_missing_input_is_followed_and_told_to_the_fetcher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # node/app/fetch.py's ChainFetcher.note_input: the peer the derivative came from becomes a
    # source of its input before discovery has a provider record for it (docs/nat.md).
    node = Node(tmp_path)
    told: list[tuple[DatasetId, DatasetId]] = []
    node.verify.input_missing = lambda of, input_did: told.append((of, input_did))
    did = _create(node, "datafusion")
    chain = node.repo.open(did.as_did_str()).state()
    assert chain.set_transform is not None
    (inp,) = chain.set_transform.inputs
    root = DatasetId.parse(inp.dataset_ref)
    present = node.repo.contains
    monkeypatch.setattr(node.repo, "contains", lambda d: d != root.as_did_str() and present(d))

    with pytest.raises(RetryLater, match="waiting for 1 input dataset"):
        asyncio.run(node.verify._inputs(did.as_did_str(), chain, True))
    assert told == [(did, root)]
    sub = asyncio.run(node.state.subscription(root.as_did_str()))
    assert sub is not None
    # Without replay no input is wanted, and nothing is told.
    told.clear()
    assert asyncio.run(node.verify._inputs(did.as_did_str(), chain, False)) == {}
    assert told == []
