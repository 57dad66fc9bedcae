"""The shared decision executor: exhaustive dispatch, fetch cancellation, late completions."""

from __future__ import annotations

import asyncio
import random
import typing

from p2p import core as core_mod
from p2p.core import (
    NS_PER_S,
    AbandonFetch,
    CoreConfig,
    Decision,
    FetchCompleted,
    HeadAccepted,
    Ignore,
    ProtocolCore,
    PublishAttestation,
    PublishDispute,
    RequestFetch,
    Tick,
    VerificationCompleted,
)
from p2p.executor import DecisionEffects, NullEffects, execute
from p2p.service import GossipService
from p2p.transport import InMemoryNetwork
from p2p.wire import HeadAnnouncement
from tests.unit.test_p2p_core import DID, T0, ann, recv


class Recorder(NullEffects):
    """Records the name of the effect method each decision reached."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Decision]] = []

    def __getattribute__(self, name: str) -> typing.Any:
        attr = object.__getattribute__(self, name)
        if name in DecisionEffects.__dict__ and callable(attr) and not name.startswith("_"):

            def record(d: Decision) -> None:
                object.__getattribute__(self, "calls").append((name, d))

            return record
        return attr


def test_every_decision_type_reaches_exactly_one_effect() -> None:
    decision_types = typing.get_args(core_mod.Decision)
    effect_methods = {
        n for n, v in DecisionEffects.__dict__.items() if callable(v) and not n.startswith("_")
    }
    assert len(effect_methods) == len(decision_types)
    reached: dict[type, str] = {}
    for cls in decision_types:
        rec = Recorder()
        d = cls.__new__(cls)  # field values are irrelevant to the dispatch
        execute(d, rec)
        assert len(rec.calls) == 1, cls
        reached[cls] = rec.calls[0][0]
    assert set(reached.values()) == effect_methods  # a distinct effect per decision type


def test_late_fetch_completion_is_accepted_when_still_newest() -> None:
    c = ProtocolCore(CoreConfig(fetch_timeout_ns=10 * NS_PER_S), random.Random(1), [DID])
    sm = ann(1)
    assert any(isinstance(d, RequestFetch) for d in recv(c, sm))
    out = c.handle(Tick(T0 + 11 * NS_PER_S))
    assert any(isinstance(d, AbandonFetch) for d in out)
    msg = sm.message
    assert isinstance(msg, HeadAnnouncement)
    # The pull committed anyway (its commit could not be undone): the head must be accepted.
    done = c.handle(FetchCompleted(DID, msg.head, True, T0 + 12 * NS_PER_S))
    assert [type(d) for d in done] == [HeadAccepted]
    assert c.accepted(DID) is not None


def test_late_fetch_completion_of_superseded_head_is_ignored() -> None:
    c = ProtocolCore(CoreConfig(fetch_timeout_ns=10 * NS_PER_S), random.Random(1), [DID])
    first, second = ann(1), ann(2)
    recv(c, first)
    c.handle(Tick(T0 + 11 * NS_PER_S))  # abandon the fetch of head 1
    recv(c, second, t=T0 + 11 * NS_PER_S)
    m2 = second.message
    assert isinstance(m2, HeadAnnouncement)
    c.handle(FetchCompleted(DID, m2.head, True, T0 + 12 * NS_PER_S))
    m1 = first.message
    assert isinstance(m1, HeadAnnouncement)
    late = c.handle(FetchCompleted(DID, m1.head, True, T0 + 13 * NS_PER_S))
    assert [d.reason for d in late if isinstance(d, Ignore)] == ["unexpected-fetch"]
    accepted = c.accepted(DID)
    assert accepted is not None and accepted.message == m2


def test_verification_completed_decides_attest_or_dispute_for_the_accepted_head() -> None:
    c = ProtocolCore(CoreConfig(), random.Random(1), [DID])
    sm = ann(1)
    recv(c, sm)
    msg = sm.message
    assert isinstance(msg, HeadAnnouncement)
    c.handle(FetchCompleted(DID, msg.head, True, T0))
    ok = c.handle(VerificationCompleted(DID, msg.head, True, T0))
    bad = c.handle(VerificationCompleted(DID, msg.head, False, T0))
    assert [type(d) for d in ok] == [PublishAttestation]
    assert [type(d) for d in bad] == [PublishDispute]
    other = ann(2).message
    assert isinstance(other, HeadAnnouncement)
    assert c.handle(VerificationCompleted(DID, other.head, True, T0)) == []


def test_service_cancels_the_pull_the_core_abandons() -> None:
    async def run() -> None:
        now = [T0]
        started = asyncio.Event()
        cancelled = asyncio.Event()

        async def slow_fetch(req: RequestFetch) -> bool:
            started.set()
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.set()
                raise
            return True

        net = InMemoryNetwork()
        c = ProtocolCore(CoreConfig(fetch_timeout_ns=10 * NS_PER_S), random.Random(1), [DID])
        svc = GossipService(c, net.add("n0"), lambda: now[0], slow_fetch, tick_interval_s=3600)
        seen: list[Decision] = []
        svc.on_decision(seen.append)
        await svc.start()
        await svc._validate("p1", ann(1).envelope)
        await asyncio.wait_for(started.wait(), 5)
        assert svc.fetches_running() == 1
        now[0] = T0 + 11 * NS_PER_S
        svc._apply(Tick(now[0]))
        await asyncio.wait_for(cancelled.wait(), 5)
        assert svc.fetches_running() == 0
        assert any(isinstance(d, AbandonFetch) for d in seen)
        assert c.accepted(DID) is None  # nothing was reported for the cancelled pull
        await svc.stop()

    asyncio.run(run())


def test_node_effects_receive_every_decision_after_the_network_part() -> None:
    async def run() -> None:
        rec = Recorder()
        net = InMemoryNetwork()
        c = ProtocolCore(CoreConfig(), random.Random(1), [DID])

        async def fetch(req: RequestFetch) -> bool:
            return True

        svc = GossipService(c, net.add("n0"), lambda: T0, fetch, rec, tick_interval_s=3600)
        await svc.start()
        await svc._validate("p1", ann(1).envelope)
        for _ in range(10):
            await asyncio.sleep(0)
        names = [n for n, _ in rec.calls]
        assert names == ["accepted", "forward", "fetch", "head_accepted"]
        msg = ann(1).message
        assert isinstance(msg, HeadAnnouncement)
        svc.verification_completed(DID, msg.head, True)
        assert rec.calls[-1][0] == "attest"
        await svc.stop()

    asyncio.run(run())
