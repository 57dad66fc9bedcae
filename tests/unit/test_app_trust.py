"""Trust policies in the node: ``[trust]``, per-subscription overrides and the trust driver
(``node/app/trust.py``) on in-memory twins, with an injected clock (nothing sleeps)."""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, cast

import pytest

from coordinator.identity import DatasetId, generate_private_key
from coordinator.multiformats import Multihash
from node.adapters.state import InlineState
from node.app.events import EventBus
from node.app.ports import GossipPort, IpfsPort, StatePort
from node.app.subscriptions import SubscriptionUseCases
from node.app.trust import TrustDriver
from node.config import ConfigError, load_config
from node.state.store import NodeState
from p2p.trust import HEADS_PER_DATASET, SHOWN_DISPUTERS, Policy, TrustConfig, TrustConfigError
from p2p.wire import Verdict

T0 = 1_800_000_000 * 1_000_000_000
S = 1_000_000_000
OWNER = generate_private_key(b"\x01" * 32).dataset_id()
A, B, C, X = (generate_private_key(bytes([n]) * 32).dataset_id() for n in (2, 3, 4, 9))
H1 = Multihash.sha3_256(b"head-1")
H2 = Multihash.sha3_256(b"head-2")
DID = OWNER.as_did_str()


def _run(coro: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(coro())


# --------------------------------------------------------------------------- [trust]


def test_trust_section_is_read_through_the_policy_module(tmp_path: Path) -> None:
    f = tmp_path / "config.toml"
    f.write_text(
        '[trust]\npolicy = "quorum"\nk = 2\n'
        f'trusted_attesters = ["{A.as_did_key()}", "{B.as_did_key()}"]\n'
        "[pipeline]\nreplay = false\n"
    )
    cfg = load_config(f, environ={}).trust_config()
    assert cfg.policy is Policy.QUORUM and cfg.k == 2
    assert cfg.trusted_attesters == {A, B} and not cfg.can_replay
    assert load_config(None, environ={}).trust_config() == TrustConfig(can_replay=True)
    env = {"ODF_NODE_TRUST_POLICY": "quorum", "ODF_NODE_TRUST_K": "1",
           "ODF_NODE_TRUST_TRUSTED_ATTESTERS": A.as_did_key()}  # fmt: skip
    assert load_config(None, environ=env).trust_config().trusted_attesters == {A}


@pytest.mark.parametrize(
    ("text", "setting"),
    [
        ('[trust]\npolicy = "quorum"\n', "[trust] trusted_attesters"),
        ('[trust]\npolicy = "majority"\n', "[trust] policy"),
        (
            '[trust]\npolicy = "quorum"\nk = 2\ntrusted_attesters = ["did:key:nope"]\n',
            "[trust] trusted_attesters",
        ),
        ("[trust]\np = 1.5\n", "[trust] p"),
        ("[trust]\nfallback_verify_s = 0\n", "[trust] fallback_verify_s"),
    ],
)
def test_a_bad_trust_setting_is_refused_at_load_naming_it(
    tmp_path: Path, text: str, setting: str
) -> None:
    f = tmp_path / "config.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match="^" + re.escape(setting)):
        load_config(f, environ={})


# --------------------------------------------------------------------------- subscribe override


class _Gossip:
    followed: list[DatasetId]

    def __init__(self) -> None:
        self.followed = []

    async def follow(self, did: DatasetId) -> None:
        self.followed.append(did)


def _subs(state: StatePort, default: TrustConfig) -> tuple[SubscriptionUseCases, list[DatasetId]]:
    changed: list[DatasetId] = []

    async def on_change(did: DatasetId) -> None:
        changed.append(did)

    subs = SubscriptionUseCases(
        state,
        cast(GossipPort, _Gossip()),
        cast(IpfsPort, None),
        lambda _d: False,
        loopback_only=True,
        trust=default,
        on_trust_change=on_change,
    )
    return subs, changed


def test_subscribe_override_is_validated_over_trust_and_persisted(tmp_path: Path) -> None:
    async def scenario() -> None:
        path = tmp_path / "state.db"
        state = cast(StatePort, InlineState(NodeState.open(path, lambda: T0)))
        default = TrustConfig(trusted_attesters=frozenset({A, B, C}))
        subs, changed = _subs(state, default)
        with pytest.raises(TrustConfigError, match=r"^\[trust\] k: 4 exceeds the 3"):
            await subs.subscribe(DID, policy="quorum", k=4)
        assert await state.subscription(DID) is None  # refused before anything is stored
        row = await subs.subscribe(DID, policy="quorum", k=2)
        assert row.policy == {"policy": "quorum", "k": 2}
        assert changed == [OWNER]
        # A later subscribe changes only what it names; the override is checked merged.
        row = await subs.subscribe(DID, attesters=[A.as_did_key(), B.as_did_key()])
        assert row.policy == {
            "policy": "quorum",
            "k": 2,
            "trusted_attesters": [A.as_did_key(), B.as_did_key()],
        }
        with pytest.raises(TrustConfigError, match=r"^\[trust\] k"):
            await subs.subscribe(DID, attesters=[A.as_did_key()])
        state.close()  # type: ignore[attr-defined]
        reopened = cast(StatePort, InlineState(NodeState.open(path, lambda: T0)))
        sub = await reopened.subscription(DID)
        assert sub is not None and sub.override.policy == "quorum" and sub.override.k == 2
        assert sub.override.trusted_attesters == (A.as_did_key(), B.as_did_key())

    _run(scenario)


def test_quorum_override_without_trusted_attesters_is_refused() -> None:
    async def scenario() -> None:
        state = cast(StatePort, InlineState(NodeState.in_memory(lambda: T0)))
        subs, _ = _subs(state, TrustConfig())
        with pytest.raises(TrustConfigError, match=r"^\[trust\] trusted_attesters"):
            await subs.subscribe(DID, policy="quorum", k=1)
        with pytest.raises(TrustConfigError, match=r"^\[trust\] policy"):
            await subs.subscribe(DID, policy="majority")

    _run(scenario)


# --------------------------------------------------------------------------- the driver


class _Verify:
    """The verify pipeline's queue: records what the driver asked."""

    def __init__(self) -> None:
        self.queued: list[tuple[str, bool | None]] = []

    async def queue(
        self, did: DatasetId, head: Multihash, sequence: int, *, replay: bool | None = None
    ) -> None:
        self.queued.append((head.to_multibase(), replay))


class _Node:
    """A driver over an in-memory state, with a clock the test moves."""

    def __init__(self, default: TrustConfig, state: StatePort | None = None) -> None:
        self.now = T0
        self.state = state or cast(StatePort, InlineState(NodeState.in_memory(lambda: self.now)))
        self.verify = _Verify()
        self.bus = EventBus()
        self.published: list[tuple[str, dict[str, Any]]] = []
        self.bus.listen(lambda topic, data: self.published.append((topic, data)))
        self.republished: list[Multihash] = []
        self.stored_head: Multihash | None = None

        async def republish(did: DatasetId, head: Multihash) -> None:
            self.republished.append(head)

        self.driver = TrustDriver(
            default,
            self.state,
            self.bus,
            lambda: self.now,
            random.Random(0),
            self.verify,
            republish=republish,
            current_head=lambda _d: self.stored_head,
        )

    async def accept(self, head: Multihash, sequence: int = 1) -> None:
        """What the node does when the core accepted ``head``."""
        await self.state.record_accepted_head(DID, 0, sequence, head.to_multibase(), "", b"x")
        self.stored_head = head
        await self.driver.head_accepted(OWNER, head, sequence)

    async def row(self) -> Any:
        return await self.state.subscription(DID)

    def topics(self) -> list[str]:
        return [t for t, _ in self.published]


def _quorum(*, can_replay: bool, k: int = 2) -> TrustConfig:
    return TrustConfig(
        policy=Policy.QUORUM,
        k=k,
        trusted_attesters=frozenset({A, B, C}),
        can_replay=can_replay,
        fallback_verify_s=60,
    )


def test_verify_all_replays_every_head_and_gates_nothing() -> None:
    async def scenario() -> None:
        n = _Node(TrustConfig())
        await n.state.subscribe(DID)
        await n.driver.restore()
        await n.accept(H1)
        assert n.verify.queued == [(H1.to_multibase(), True)]  # today's verification, a replay
        assert n.driver.served_head(OWNER) is None  # served as soon as stored
        assert n.driver.may_republish(OWNER, H1)
        await n.driver.local_verdict(OWNER, H1, "verified", conclusive=True, evidence="")
        row = await n.row()
        assert row.trusted_head == H1.to_multibase()
        assert row.trust.state == "trusted" and row.trust.by == "local"
        assert n.topics() == ["head.trusted"]

    _run(scenario)


def test_light_node_trusts_by_quorum_naming_the_attesters() -> None:
    async def scenario() -> None:
        n = _Node(_quorum(can_replay=False))
        await n.state.subscribe(DID)
        await n.driver.restore()
        await n.accept(H1)
        assert n.verify.queued == [(H1.to_multibase(), False)]  # integrity checks only
        assert n.driver.served_head(OWNER) == ""  # nothing trusted yet: nothing served
        assert not n.driver.may_republish(OWNER, H1)
        assert n.driver.untrusted_input(OWNER) is not None
        # An integrity check of a derivative proves nothing either way.
        await n.driver.local_verdict(OWNER, H1, "verified", conclusive=False, evidence="")
        await n.driver.attestation(OWNER, H1, A, Verdict.VERIFIED)
        await n.driver.attestation(OWNER, H1, X, Verdict.VERIFIED)  # not a trusted attester
        await n.driver.attestation(OWNER, H2, B, Verdict.VERIFIED)  # another head
        await n.driver.attestation(OWNER, H1, B, Verdict.INTEGRITY_ONLY)  # not a replay
        assert n.topics() == [] and (await n.row()).trusted_head is None
        await n.driver.attestation(OWNER, H1, B, Verdict.VERIFIED)
        row = await n.row()
        assert row.trusted_head == H1.to_multibase()
        assert (row.trust.state, row.trust.by) == ("trusted", "quorum")
        assert set(row.trust.attesters) == {A.as_did_key(), B.as_did_key()}
        assert n.published == [
            (
                "head.trusted",
                {
                    "did": DID,
                    "head": H1.to_multibase(),
                    "by": "quorum",
                    "attesters": [A.as_did_key(), B.as_did_key()],
                },
            )
        ]
        logged = await n.state.events(0, 10, "head.trusted")
        assert [e.data["attesters"] for e in logged] == [[A.as_did_key(), B.as_did_key()]]
        assert n.driver.served_head(OWNER) == H1.to_multibase()
        assert n.republished == [H1]  # the quorum's head is republished now
        assert n.driver.untrusted_input(OWNER) is None
        # A newer head: the previous trusted head stays the served one until it is trusted.
        await n.accept(H2, 2)
        assert n.driver.served_head(OWNER) == H1.to_multibase()
        assert "not trusted yet" in (n.driver.untrusted_input(OWNER) or "")
        # Never a replay on a node with no engine, even past fallback_verify_s.
        n.now += 3600 * S
        await n.driver.tick()
        assert n.verify.queued == [(H1.to_multibase(), False), (H2.to_multibase(), False)]
        assert (await n.row()).trust.state == "pending"

    _run(scenario)


def test_a_trusted_attesters_dispute_blocks_and_makes_a_replaying_node_replay() -> None:
    async def scenario() -> None:
        n = _Node(_quorum(can_replay=True))
        await n.state.subscribe(DID)
        await n.driver.restore()
        await n.accept(H1)
        assert n.verify.queued == [(H1.to_multibase(), False)]
        await n.driver.dispute(OWNER, H1, X, "f1620" + "00" * 32)  # untrusted: recorded only
        assert n.verify.queued == [(H1.to_multibase(), False)]
        row = await n.row()
        assert row.trust.state == "pending" and row.trust.disputed_by == (X.as_did_key(),)
        await n.driver.dispute(OWNER, H1, C, "f1620" + "11" * 32)
        assert n.verify.queued[-1] == (H1.to_multibase(), True)  # replayed through verify
        row = await n.row()
        assert row.trust.state == "disputed" and row.trust.evidence == "f1620" + "11" * 32
        assert set(row.trust.disputed_by) == {X.as_did_key(), C.as_did_key()}
        assert n.published[-1][0] == "head.distrusted"
        assert n.published[-1][1]["disputer"] == C.as_did_key()
        # A quorum afterwards does not trust it; the node's own replay decides.
        await n.driver.attestation(OWNER, H1, A, Verdict.VERIFIED)
        await n.driver.attestation(OWNER, H1, B, Verdict.VERIFIED)
        assert (await n.row()).trust.state == "disputed"
        await n.driver.local_verdict(OWNER, H1, "failed", conclusive=True, evidence="mismatch")
        assert (await n.row()).trusted_head is None

    _run(scenario)


def test_a_head_pending_past_fallback_is_replayed_where_possible() -> None:
    async def scenario() -> None:
        n = _Node(_quorum(can_replay=True))
        await n.state.subscribe(DID)
        await n.driver.restore()
        await n.accept(H1)
        n.now += 59 * S
        await n.driver.tick()
        assert n.verify.queued == [(H1.to_multibase(), False)]
        n.now += 1 * S
        await n.driver.tick()
        assert n.verify.queued == [(H1.to_multibase(), False), (H1.to_multibase(), True)]
        replays = await n.state.events(0, 10, "trust.replay")
        assert [e.data["reason"] for e in replays] == ["fallback"]
        await n.driver.local_verdict(OWNER, H1, "verified", conclusive=True, evidence="")
        assert (await n.row()).trust.by == "local"

    _run(scenario)


def test_a_restart_neither_re_trusts_nor_forgets_a_dispute(tmp_path: Path) -> None:
    async def scenario() -> None:
        path = tmp_path / "state.db"
        first = _Node(_quorum(can_replay=False), InlineState(NodeState.open(path, lambda: T0)))  # type: ignore[arg-type]
        await first.state.subscribe(DID)
        await first.driver.restore()
        await first.accept(H1)
        for who in (A, B):
            envelope = b"attestation-by-" + who.as_did_key().encode()
            await first.state.add_attestation(
                DID, H1.to_multibase(), "verified", who.as_did_key(), envelope, False
            )
            await first.driver.attestation(OWNER, H1, who, Verdict.VERIFIED)
        await first.accept(H2, 2)
        await first.state.add_dispute(
            DID, H2.to_multibase(), "replay_mismatch", C.as_did_key(), b"dispute", False, "forged"
        )
        x = (await first.state.disputes(DID))[0]
        await first.driver.dispute(OWNER, H2, C, x.content_id)
        assert first.topics() == ["head.trusted", "head.distrusted"]
        first.state.close()  # type: ignore[attr-defined]

        again = _Node(_quorum(can_replay=False), InlineState(NodeState.open(path, lambda: T0)))  # type: ignore[arg-type]
        again.stored_head = H2
        await again.driver.restore()
        assert again.published == []  # nothing trusted or distrusted twice
        assert again.driver.served_head(OWNER) == H1.to_multibase()
        row = await again.row()
        assert row.trust.state == "disputed" and row.trust.head == H2.to_multibase()
        # The dispute still blocks: a quorum of H2 after the restart does not trust it.
        await again.driver.attestation(OWNER, H2, A, Verdict.VERIFIED)
        await again.driver.attestation(OWNER, H2, B, Verdict.VERIFIED)
        assert again.driver.served_head(OWNER) == H1.to_multibase()
        assert again.published == []

    _run(scenario)


def test_a_restart_does_not_take_an_integrity_check_for_a_replay(tmp_path: Path) -> None:
    """A light node's passing integrity check of a derivative's head proves nothing; rebuilt
    after a restart it must not trust the head, even once a redelivered dispute (gossip catching
    up after the start) makes the driver persist the rebuilt state."""

    async def scenario() -> None:
        path = tmp_path / "state.db"
        first = _Node(_quorum(can_replay=False), InlineState(NodeState.open(path, lambda: T0)))  # type: ignore[arg-type]
        await first.state.subscribe(DID)
        await first.driver.restore()
        await first.accept(H1)
        for who in (A, B):
            await first.driver.attestation(OWNER, H1, who, Verdict.VERIFIED)
        await first.accept(H2, 2)
        # The node's own check of H2 (integrity only: no engine) passed, as a forgery's does.
        await first.state.record_verification(DID, H2.to_multibase(), "verified", "", 0.1)
        await first.driver.local_verdict(OWNER, H2, "verified", conclusive=False, evidence="")
        await first.state.add_dispute(
            DID, H2.to_multibase(), "replay_mismatch", C.as_did_key(), b"dispute", False, "forged"
        )
        x = (await first.state.disputes(DID))[0]
        await first.driver.dispute(OWNER, H2, C, x.content_id)
        assert (await first.row()).trust.state == "disputed"
        first.state.close()  # type: ignore[attr-defined]

        again = _Node(_quorum(can_replay=False), InlineState(NodeState.open(path, lambda: T0)))  # type: ignore[arg-type]
        again.stored_head = H2
        await again.driver.restore()
        await again.driver.dispute(OWNER, H2, C, x.content_id)  # the same dispute, redelivered
        row = await again.row()
        assert row.trust.state == "disputed" and row.trust.head == H2.to_multibase()
        assert row.trusted_head == H1.to_multibase()
        assert again.driver.served_head(OWNER) == H1.to_multibase()
        assert again.published == []

    _run(scenario)


def test_a_restart_still_takes_the_nodes_own_replay_as_final(tmp_path: Path) -> None:
    async def scenario() -> None:
        path = tmp_path / "state.db"
        first = _Node(_quorum(can_replay=True), InlineState(NodeState.open(path, lambda: T0)))  # type: ignore[arg-type]
        await first.state.subscribe(DID)
        await first.driver.restore()
        await first.accept(H1)
        await first.state.record_verification(DID, H1.to_multibase(), "verified", "", 1.0)
        await first.driver.local_verdict(OWNER, H1, "verified", conclusive=True, evidence="")
        # The node's own attestation of its replay, as the verify pipeline publishes it.
        await first.state.add_attestation(
            DID, H1.to_multibase(), "verified", OWNER.as_did_key(), b"own", True
        )
        first.state.close()  # type: ignore[attr-defined]

        again = _Node(_quorum(can_replay=True), InlineState(NodeState.open(path, lambda: T0)))  # type: ignore[arg-type]
        again.stored_head = H1
        await again.driver.restore()
        await again.driver.dispute(OWNER, H1, C, "f1620" + "11" * 32)  # too late: replay is final
        row = await again.row()
        assert (row.trust.state, row.trust.by) == ("trusted", "local")
        assert again.verify.queued == [] and again.published == []

    _run(scenario)


def test_each_datasets_policy_remembers_a_bounded_number_of_heads() -> None:
    """A followed dataset's heads come for months: its policy forgets the oldest (the newest
    trusted head stays in the subscription), so memory does not grow with every head."""

    async def scenario() -> None:
        n = _Node(TrustConfig())
        await n.state.subscribe(DID)
        await n.driver.restore()
        heads = [Multihash.sha3_256(i.to_bytes(4, "big")) for i in range(3 * HEADS_PER_DATASET)]
        for seq, head in enumerate(heads, start=1):
            await n.accept(head, seq)
            await n.driver.local_verdict(OWNER, head, "verified", conclusive=True, evidence="")
        assert n.driver.heads_tracked() == HEADS_PER_DATASET
        assert (await n.row()).trusted_head == heads[-1].to_multibase()
        assert n.driver.served_head(OWNER) is None  # verify-all: served as stored

    _run(scenario)


# --------------------------------------------------------------------- under attack (issue 39)


def _stranger(i: int) -> DatasetId:
    return DatasetId(b"\xee" + i.to_bytes(31, "big"))


async def _stored_dispute(n: _Node, block: Multihash, who: DatasetId, tag: bytes) -> str:
    """A dispute as the effects store it; its content id (the evidence the driver is fed)."""
    await n.state.add_dispute(
        DID, block.to_multibase(), "replay_mismatch", who.as_did_key(), tag, False, ""
    )
    return next(x.content_id for x in await n.state.disputes_of_block(DID, block.to_multibase()))


def test_a_rebuild_reads_each_blocks_disputes_not_the_datasets_newest(tmp_path: Path) -> None:
    """Defect 2: the rebuild read the newest 1,000 disputes of the dataset before filtering by
    block, so strangers' disputes of random blocks (or of the same block) pushed the trusted
    attester's out, and the rebuilt policy trusted the disputed head by quorum."""

    async def scenario() -> None:
        path = tmp_path / "state.db"
        first = _Node(_quorum(can_replay=False), InlineState(NodeState.open(path, lambda: T0)))  # type: ignore[arg-type]
        await first.state.subscribe(DID)
        await first.driver.restore()
        await first.accept(H1)
        evidence = await _stored_dispute(first, H1, C, b"the trusted dispute")
        await first.driver.dispute(OWNER, H1, C, evidence)
        for i in range(1100):  # noise of random blocks, then of the disputed head itself
            block = Multihash.sha3_256(i.to_bytes(4, "big")) if i < 600 else H1
            await first.state.add_dispute(
                DID, block.to_multibase(), "replay_mismatch", _stranger(i).as_did_key(),
                b"noise-%d" % i, False, "",
            )  # fmt: skip
        first.state.close()  # type: ignore[attr-defined]

        again = _Node(_quorum(can_replay=False), InlineState(NodeState.open(path, lambda: T0)))  # type: ignore[arg-type]
        again.stored_head = H1
        await again.driver.restore()
        for who in (A, B):
            await again.driver.attestation(OWNER, H1, who, Verdict.VERIFIED)
        assert again.driver.served_head(OWNER) == ""  # never trusted by the quorum
        assert again.published == []
        row = await again.row()
        assert row.trust.state == "disputed" and row.trust.disputed_by[0] == C.as_did_key()

    _run(scenario)


def test_disputes_of_unknown_blocks_from_one_key_do_not_evict_the_disputed_head() -> None:
    """Defect 2, live: 16 disputes of unknown blocks from one key made the dataset's policy
    forget the disputed head (HEADS_PER_DATASET), and the operator saw ``pending`` with no
    disputer."""

    async def scenario() -> None:
        n = _Node(_quorum(can_replay=False))
        await n.state.subscribe(DID)
        await n.driver.restore()
        await n.accept(H1)
        await n.driver.dispute(OWNER, H1, C, "f1620" + "11" * 32)
        for i in range(4 * HEADS_PER_DATASET):
            await n.driver.dispute(OWNER, Multihash.sha3_256(i.to_bytes(4, "big")), X, f"n{i}")
        await n.driver.dispute(OWNER, H1, _stranger(1), "f1620" + "22" * 32)
        row = await n.row()
        assert row.trust.state == "disputed"
        assert row.trust.disputed_by == (C.as_did_key(), _stranger(1).as_did_key())
        for who in (A, B):
            await n.driver.attestation(OWNER, H1, who, Verdict.VERIFIED)
        assert n.driver.served_head(OWNER) == "" and (await n.row()).trust.state == "disputed"
        assert n.driver.heads_tracked() <= 3 * HEADS_PER_DATASET

    _run(scenario)


def test_a_dispute_costs_the_same_after_a_thousand(monkeypatch: pytest.MonkeyPatch) -> None:
    """Defect 3: each dispute re-encoded every disputer of the head as a did:key and rewrote
    them all (15.8 ms per dispute at first, 281 ms by the 1,024th)."""

    async def scenario() -> None:
        n = _Node(_quorum(can_replay=False))
        await n.state.subscribe(DID)
        await n.driver.restore()
        await n.accept(H1)
        for i in range(1000):
            await n.driver.dispute(OWNER, H1, _stranger(i), f"e{i}")
        encoded = 0
        real = DatasetId.as_did_key

        def counting(self: DatasetId) -> str:
            nonlocal encoded
            encoded += 1
            return real(self)

        monkeypatch.setattr(DatasetId, "as_did_key", counting)
        writes = 0
        record = n.state.record_trust

        async def counting_writes(*args: Any) -> Any:
            nonlocal writes
            writes += 1
            return await record(*args)

        monkeypatch.setattr(n.state, "record_trust", counting_writes, raising=False)
        await n.driver.dispute(OWNER, H1, _stranger(5000), "e5000")
        assert encoded <= 1 and writes == 0  # the new key once; nothing shown changed
        row = await n.row()
        assert len(row.trust.disputed_by) == SHOWN_DISPUTERS

    _run(scenario)


def test_an_identity_change_rebuilds_only_the_datasets_its_keys_signed_for() -> None:
    """Defect 2/3: any key rotation (a stranger's, between two fresh keys) rebuilt every
    policy from the state (2.2 s with 20 followed datasets)."""

    async def scenario() -> None:
        n = _Node(_quorum(can_replay=False))
        other = generate_private_key(b"\x05" * 32).dataset_id()
        for did in (DID, other.as_did_str()):
            await n.state.subscribe(did)
        await n.driver.restore()
        await n.accept(H1)
        await n.state.add_attestation(
            DID, H1.to_multibase(), "verified", A.as_did_key(), b"att-a", False
        )
        rebuilt: list[DatasetId] = []
        configure = n.driver.configure

        async def spy(did: DatasetId) -> None:
            rebuilt.append(did)
            await configure(did)

        n.driver.configure = spy  # type: ignore[method-assign]
        await n.driver.identities_changed(_stranger(1), _stranger(2))
        assert rebuilt == []  # fresh keys signed nothing: nothing to re-evaluate
        n.driver.identities.add_rotation(A, _stranger(3))
        await n.driver.identities_changed(A, _stranger(3))
        assert rebuilt == [OWNER]  # A attested OWNER's head only
        assert keys_named_of_rotation(A, _stranger(3)) == (A, _stranger(3))

    _run(scenario)


def test_a_strangers_rotation_rebuilds_nothing_its_keys_cannot_move() -> None:
    """A storm of rotations by fresh keys that had disputed a followed head rebuilt the
    dataset's policy once per rotation (~150 ms each over 1,500 stored disputes), in the serial
    queue of gossip decisions: a trusted attester's dispute behind 400 of them was stored
    50-60 s late. Under a quorum of listed attesters a stranger's key moves no decision."""

    async def scenario() -> None:
        n = _Node(_quorum(can_replay=False))
        await n.state.subscribe(DID)
        await n.driver.restore()
        await n.accept(H1)
        await _stored_dispute(n, H1, _stranger(7), b"d-7")
        await n.state.add_attestation(
            DID, H1.to_multibase(), "verified", A.as_did_key(), b"att-a", False
        )
        rebuilt: list[DatasetId] = []
        configure = n.driver.configure

        async def spy(did: DatasetId) -> None:
            rebuilt.append(did)
            await configure(did)

        n.driver.configure = spy  # type: ignore[method-assign]
        n.driver.identities.add_rotation(_stranger(7), _stranger(8))
        await n.driver.identities_changed(_stranger(7), _stranger(8))
        assert rebuilt == []  # it signed a dispute of OWNER's head, but counts for nothing
        n.driver.identities.add_rotation(A, _stranger(9))
        await n.driver.identities_changed(A, _stranger(9))
        assert rebuilt == [OWNER]  # a listed attester's rotation is re-evaluated

    _run(scenario)


def keys_named_of_rotation(old: DatasetId, new: DatasetId) -> tuple[DatasetId, ...]:
    """:func:`node.app.trust.keys_named` of a rotation record ``old`` -> ``new``."""
    from node.app.trust import keys_named
    from p2p.wire import KeyRotation

    record = KeyRotation(old, new, T0, b"\x00" * 16, b"\x00" * 64)
    return keys_named(record)


def test_a_rebuild_keeps_a_trusted_attestation_under_strangers_ones(tmp_path: Path) -> None:
    """The rebuild read the newest 100 attestations of the head: strangers' pushed a trusted
    attester's out, and the quorum it was one of was never reached after a restart."""

    async def scenario() -> None:
        path = tmp_path / "state.db"
        first = _Node(_quorum(can_replay=False), InlineState(NodeState.open(path, lambda: T0)))  # type: ignore[arg-type]
        await first.state.subscribe(DID)
        await first.driver.restore()
        await first.accept(H1)
        for i, who in enumerate([A, *(_stranger(i) for i in range(300))]):
            await first.state.add_attestation(
                DID, H1.to_multibase(), "verified", who.as_did_key(), b"att-%d" % i, False
            )
        first.state.close()  # type: ignore[attr-defined]

        again = _Node(_quorum(can_replay=False), InlineState(NodeState.open(path, lambda: T0)))  # type: ignore[arg-type]
        again.stored_head = H1
        await again.driver.restore()
        await again.driver.attestation(OWNER, H1, B, Verdict.VERIFIED)
        assert again.driver.served_head(OWNER) == H1.to_multibase()  # A's and B's quorum

    _run(scenario)


def test_a_head_over_a_block_a_trusted_attester_disputed_is_disputed_live() -> None:
    """A restart disputed the successor of a disputed block (its chain holds the block), but
    live the successor started clean and a colluding quorum trusted it."""

    async def scenario() -> None:
        n = _Node(_quorum(can_replay=False))
        chain: set[Multihash] = set()
        n.driver._contains_block = lambda _d, b: b in chain
        await n.state.subscribe(DID)
        await n.driver.restore()
        await n.accept(H1)
        chain.add(H1)
        evidence = await _stored_dispute(n, H1, C, b"the trusted dispute")
        await n.driver.dispute(OWNER, H1, C, evidence)
        await n.accept(H2, 2)
        chain.add(H2)
        for who in (A, B):
            await n.driver.attestation(OWNER, H2, who, Verdict.VERIFIED)
        assert n.driver.served_head(OWNER) == ""
        row = await n.row()
        assert (row.trust.head, row.trust.state) == (H2.to_multibase(), "disputed")
        assert row.trust.disputed_by == (C.as_did_key(),)

    _run(scenario)


def _any_attester() -> TrustConfig:
    return TrustConfig(
        policy=Policy.SAMPLE,
        p=0.0,
        k=2,
        trusted_attesters=frozenset({A, B, C}),
        any_attester=True,
        can_replay=False,
        fallback_verify_s=60,
    )


def test_strangers_rotations_under_any_attester_are_rebuilt_once_off_the_queue() -> None:
    """Under ``any_attester`` every stranger counts, so each of a storm of fresh keys' rotations
    rebuilt the dataset's policy at once, in the serial queue of gossip decisions (the open
    item of docs/trust.md "Rotation storms"). Now they are gathered for REBUILD_DELAY_S and the
    dataset rebuilt once, after identities_changed returned; a listed attester's rotation is
    still re-evaluated at once."""

    async def scenario() -> None:
        n = _Node(_any_attester())
        await n.state.subscribe(DID)
        await n.driver.restore()
        await n.accept(H1)
        for i in range(30):
            await _stored_dispute(n, H1, _stranger(100 + i), f"d-{i}".encode())
        rebuilt: list[DatasetId] = []
        configure = n.driver.configure

        async def spy(did: DatasetId) -> None:
            rebuilt.append(did)
            await configure(did)

        n.driver.configure = spy  # type: ignore[method-assign]
        for i in range(30):
            n.driver.identities.add_rotation(_stranger(100 + i), _stranger(1000 + i))
            await n.driver.identities_changed(_stranger(100 + i), _stranger(1000 + i))
        assert rebuilt == []  # none in the queue of gossip decisions
        await n.driver.settle()
        assert rebuilt == [OWNER]  # once for the 30
        await n.state.add_attestation(
            DID, H1.to_multibase(), "verified", A.as_did_key(), b"att-a", False
        )
        n.driver.identities.add_rotation(A, _stranger(9))
        await n.driver.identities_changed(A, _stranger(9))
        assert rebuilt == [OWNER, OWNER]  # a listed attester's: at once

    _run(scenario)


def test_a_rebuild_yields_to_the_loop_and_keeps_what_arrived_meanwhile() -> None:
    """A rebuild feeds the stored evidence in slices, letting the loop run between them (a
    status call is not held for the whole rebuild); a trusted attester's dispute arriving
    during it is carried out and also in the rebuilt policy."""
    from node.app.trust import REBUILD_SLICE

    async def scenario() -> None:
        n = _Node(_any_attester())
        await n.state.subscribe(DID)
        await n.driver.restore()
        await n.accept(H1)
        for i in range(3 * REBUILD_SLICE):
            await _stored_dispute(n, H1, _stranger(5000 + i), f"x-{i}".encode())
        ticks = 0

        async def other_work() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        other = asyncio.create_task(other_work())
        rebuild = asyncio.create_task(n.driver.configure(OWNER))
        while OWNER not in n.driver._live:
            await asyncio.sleep(0)
        evidence = await _stored_dispute(n, H1, C, b"d-c")
        await n.driver.dispute(OWNER, H1, C, evidence)
        await rebuild
        other.cancel()
        assert ticks >= 2  # the loop ran other work during the rebuild
        row = await n.row()
        assert C.as_did_key() in row.trust.disputed_by
        policy = n.driver._policies[OWNER]
        assert C in policy.status(OWNER, H1).disputed_by  # the rebuilt policy has it too

    _run(scenario)
