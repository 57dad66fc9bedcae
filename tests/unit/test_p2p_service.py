"""The asyncio driver over the in-memory transport: propagation, forgeries, proofs, catch-up."""

from __future__ import annotations

import asyncio
import itertools
import random

from coordinator.identity import generate_private_key
from coordinator.multiformats import Multihash
from p2p.core import (
    NS_PER_S,
    CoreConfig,
    Decision,
    HeadAccepted,
    Penalise,
    ProtocolCore,
    RequestFetch,
)
from p2p.service import GossipService
from p2p.transport import NODE_TOPIC, InMemoryNetwork, ValidationResult, dataset_topic
from p2p.wire import (
    FetchLocations,
    HeadAnnouncement,
    decode_heads_request,
    decode_heads_response,
    encode_heads_request,
    encode_heads_response,
    sign_message,
)

OWNER = generate_private_key(b"\x01" * 32)
MALLORY = generate_private_key(b"\x03" * 32)
DID = OWNER.dataset_id()
TOPIC = dataset_topic(DID.as_multibase())
T0 = 1_800_000_000 * NS_PER_S
_NONCE = itertools.count(1)


def ann(seq: int, head: str, key=OWNER) -> bytes:  # type: ignore[no-untyped-def]
    msg = HeadAnnouncement(
        DID,
        Multihash.sha3_256(head.encode()),
        seq,
        None,
        0,
        FetchLocations(),
        T0,
        next(_NONCE).to_bytes(16, "big"),
    )
    return sign_message(msg, key).envelope


class Cluster:
    def __init__(self, n: int, **core_kw: float) -> None:
        self.core_kw = core_kw
        self.now = T0
        self.net = InMemoryNetwork()
        self.owner = self.net.add("owner")
        self.fetches: dict[str, int] = {}
        self.services: dict[str, GossipService] = {}
        self.decisions: dict[str, list[Decision]] = {}
        for i in range(n):
            self.add(f"n{i}")
        names = ["owner", *self.services]
        for a, b in itertools.pairwise(names):  # a line: owner - n0 - n1 - ...
            self.net.link(a, b)

    def add(self, name: str) -> GossipService:
        core = ProtocolCore(CoreConfig(**self.core_kw), random.Random(name), [DID])  # type: ignore[arg-type]

        async def fetch(req: RequestFetch) -> bool:
            self.fetches[name] = self.fetches.get(name, 0) + 1
            return True

        svc = GossipService(core, self.net.add(name), lambda: self.now, fetch, tick_interval_s=60)
        self.decisions[name] = []
        svc.on_decision(self.decisions[name].append)
        self.services[name] = svc
        return svc

    async def start(self) -> None:
        for s in self.services.values():
            await s.start()
        await settle()  # the services join their topics in tasks of their own

    async def stop(self) -> None:
        for s in self.services.values():
            await s.stop()

    def accepted(self) -> dict[str, int | None]:
        out: dict[str, int | None] = {}
        for name, s in self.services.items():
            sm = s.core.accepted(DID)
            out[name] = None if sm is None else sm.message.sequence  # type: ignore[union-attr]
        return out


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_announcement_reaches_all_and_forgery_reaches_none() -> None:
    async def run() -> None:
        c = Cluster(6)
        await c.start()
        await c.owner.publish(TOPIC, ann(1, "h1", key=MALLORY))
        await settle()
        assert set(c.accepted().values()) == {None}
        # only the first hop saw (and punished) the forgery; it travelled no further
        assert any(isinstance(d, Penalise) for d in c.decisions["n0"])
        assert not c.decisions["n1"]
        assert c.services["n0"].core.peer_score("owner", c.now) < 0
        await c.owner.publish(TOPIC, ann(1, "h1"))
        await settle()
        assert set(c.accepted().values()) == {1}
        assert set(c.fetches.values()) == {1}
        await c.stop()

    asyncio.run(run())


def test_fast_owner_is_delayed_not_lost_and_delayed_heads_still_travel() -> None:
    async def run() -> None:
        c = Cluster(3, rate_burst=2.0, rate_per_s=1.0)
        await c.start()
        for seq in range(1, 11):  # ten heads at once: n0 has tokens for two
            await c.owner.publish(TOPIC, ann(seq, f"h{seq}"))
        await settle()
        assert c.accepted()["n0"] in (1, 2)  # the rest wait in its backlog
        assert c.services["n0"].core.peer_score("owner", c.now) > 0
        c.now += 5 * NS_PER_S
        for s in c.services.values():
            s.tick()
        await settle()
        for s in c.services.values():
            s.tick()
        await settle()
        # the newest head, delayed at n0, was decided on a tick and re-published by n0
        assert set(c.accepted().values()) == {10}, c.accepted()
        assert not any(isinstance(d, Penalise) for ds in c.decisions.values() for d in ds)
        await c.stop()

    asyncio.run(run())


def test_equivocation_proof_reaches_all() -> None:
    async def run() -> None:
        c = Cluster(5)
        await c.start()
        await c.owner.publish(TOPIC, ann(2, "a"))
        await settle()
        # the owner shows a fork to the far end of the line only
        c.net.link("owner", "n4")
        await c.owner.publish(TOPIC, ann(2, "b"))
        await settle()
        proofs = {n: s.core.equivocation_proof(DID) for n, s in c.services.items()}
        assert all(p is not None for p in proofs.values()), proofs
        await c.stop()

    asyncio.run(run())


def test_restarted_node_catches_up_through_anti_entropy_and_duplicates_do_no_work() -> None:
    async def run() -> None:
        c = Cluster(4)
        await c.start()
        await c.owner.publish(TOPIC, ann(3, "h3"))
        await settle()
        late = c.add("late")
        await late.start()
        c.net.link("n3", "late")
        c.now += 3600 * NS_PER_S  # much later: gossip of the old message would be expired
        late.peer_connected("n3")
        await settle()
        assert c.accepted()["late"] == 3
        # reconnects replay the same heads: no new fetch anywhere
        before = dict(c.fetches)
        for name in ("n0", "n1", "n2", "n3"):
            c.services[name].peer_connected("owner" if name == "n0" else "n0")
        late.peer_connected("n3")
        await settle()
        assert c.fetches == before
        assert sum(isinstance(d, HeadAccepted) for d in c.decisions["late"]) == 1
        await c.stop()

    asyncio.run(run())


def test_heads_exchange_codec_roundtrip() -> None:
    assert decode_heads_request(encode_heads_request([DID, MALLORY.dataset_id()])) == [
        DID,
        MALLORY.dataset_id(),
    ]
    envs = [ann(1, "x"), ann(2, "y")]
    assert decode_heads_response(encode_heads_response(envs)) == envs


def test_node_topic_is_joined() -> None:
    c = Cluster(1)
    assert c.services["n0"].topics() == [TOPIC, NODE_TOPIC]


def test_anti_entropy_for_many_datasets_is_split_into_wire_sized_requests() -> None:
    """A node following more datasets than one heads request may name asks in rounds."""
    from p2p.wire import MAX_HEADS_PER_EXCHANGE

    async def run() -> None:
        c = Cluster(2)
        await c.start()
        await c.owner.publish(TOPIC, ann(3, "h3"))
        await settle()
        late = c.add("late")
        late.core.unsubscribe(DID)
        for i in range(MAX_HEADS_PER_EXCHANGE + 44):
            key = generate_private_key((5000 + i).to_bytes(2, "big") * 16)
            late.core.subscribe(key.dataset_id())
        late.core.subscribe(DID)  # last: only the second request names it
        sizes: list[int] = []
        real_request = late.transport.request

        async def counting(peer: str, protocol: str, data: bytes, timeout_s: float) -> bytes:
            from p2p.wire import decode_heads_request

            sizes.append(len(decode_heads_request(data)))
            return await real_request(peer, protocol, data, timeout_s)

        late.transport.request = counting  # type: ignore[method-assign]
        await late.start()
        c.net.link("n1", "late")
        late.peer_connected("n1")
        await settle()
        assert sizes == [MAX_HEADS_PER_EXCHANGE, 45]
        assert c.accepted()["late"] == 3
        await c.stop()

    asyncio.run(run())


def test_following_many_datasets_asks_each_peer_once_per_batch() -> None:
    async def run() -> None:
        c = Cluster(1)
        await c.start()
        await c.owner.publish(TOPIC, ann(2, "h2"))
        await settle()
        net_node = c.net.add("late")
        late = GossipService(
            ProtocolCore(CoreConfig(), random.Random("late"), []),
            net_node,
            lambda: c.now,
            lambda req: asyncio.sleep(0, result=True),
            tick_interval_s=60,
            catch_up_delay_s=0,
        )
        requests: list[int] = []
        real_request = net_node.request

        async def counting(peer: str, protocol: str, data: bytes, timeout_s: float) -> bytes:
            from p2p.wire import decode_heads_request

            requests.append(len(decode_heads_request(data)))
            return await real_request(peer, protocol, data, timeout_s)

        net_node.request = counting  # type: ignore[method-assign]
        await late.start()
        c.net.link("n0", "late")
        others = [generate_private_key(bytes([0x70 + i]) * 32).dataset_id() for i in range(5)]
        for did in [*others, DID]:
            await late.follow(did)
        await settle()
        assert requests == [6]  # one request to the one peer, naming all six datasets
        assert late.core.accepted(DID) is not None  # and the head arrived through it
        await late.stop()
        await c.stop()

    asyncio.run(run())


def test_anti_entropy_reply_is_applied_in_slices_that_yield_to_the_loop() -> None:
    """A reply naming many heads is checked a slice at a time (the loop runs in between), and
    every head in it still counts."""
    from p2p.core import AntiEntropyReceived
    from p2p.service import _AE_SLICE

    owners = [generate_private_key((7000 + i).to_bytes(2, "big") * 16) for i in range(70)]

    def owner_ann(key) -> bytes:  # type: ignore[no-untyped-def]
        msg = HeadAnnouncement(
            key.dataset_id(),
            Multihash.sha3_256(b"h"),
            1,
            None,
            0,
            FetchLocations(),
            T0,
            next(_NONCE).to_bytes(16, "big"),
        )
        return sign_message(msg, key).envelope

    async def run() -> None:
        c = Cluster(0)
        late = c.add("late")
        for k in owners:
            late.core.subscribe(k.dataset_id())
        reply = encode_heads_response([owner_ann(k) for k in owners])
        sizes: list[int] = []
        turns: list[int] = []
        turn = [0]
        real_handle = late.core.handle

        def recording(event):  # type: ignore[no-untyped-def]
            if isinstance(event, AntiEntropyReceived):
                sizes.append(len(event.envelopes))
                turns.append(turn[0])
            return real_handle(event)

        async def ticker() -> None:
            while True:
                turn[0] += 1
                await asyncio.sleep(0)

        async def answer(peer: str, protocol: str, data: bytes, timeout_s: float) -> bytes:
            return reply

        late.core.handle = recording  # type: ignore[method-assign]
        late.transport.request = answer  # type: ignore[method-assign]
        await late.start()
        t = asyncio.create_task(ticker())
        late.peer_connected("owner")
        await settle()
        t.cancel()
        assert sizes == [_AE_SLICE, _AE_SLICE, 70 - 2 * _AE_SLICE]
        assert len(set(turns)) == 3, "other tasks ran between the slices"
        assert all(late.core.accepted(k.dataset_id()) is not None for k in owners)
        await late.stop()

    asyncio.run(run())


def test_validator_accepts_only_when_the_message_itself_is_forwarded() -> None:
    """A malformed message must not ride on the Forward of an older, delayed one."""

    async def run() -> None:
        now = [T0]
        core = ProtocolCore(
            CoreConfig(rate_burst=1, rate_per_s=1),
            random.Random(1),
            [DID],  # type: ignore[arg-type]
        )

        async def fetch(req: RequestFetch) -> bool:
            return True

        svc = GossipService(core, InMemoryNetwork().add("me"), lambda: now[0], fetch)
        assert await svc._validate("p", ann(1, "h1")) is ValidationResult.ACCEPT
        # No token left: the next head waits in the sender's backlog.
        assert await svc._validate("p", ann(2, "h2")) is ValidationResult.IGNORE
        now[0] += NS_PER_S  # one token again: the next event drains the backlog (h2 forwarded)
        verdict = await svc._validate("p", b"\x00not an envelope")
        assert verdict is ValidationResult.REJECT
        await settle()

    asyncio.run(run())


def test_in_memory_join_validates_and_forwards_but_delivers_nothing() -> None:
    async def main() -> None:
        net = InMemoryNetwork()
        a, b, c = net.add("a"), net.add("b"), net.add("c")
        net.link("a", "b")
        net.link("b", "c")  # a line: a -> b -> c
        seen: list[bytes] = []

        async def validate(peer: str, data: bytes) -> ValidationResult:
            seen.append(data)
            return ValidationResult.REJECT if data == b"bad" else ValidationResult.ACCEPT

        b.set_validator("t", validate)
        await b.join("t")
        at_c = c.subscribe("t")
        await a.publish("t", b"bad")
        await a.publish("t", b"good")
        got = await asyncio.wait_for(at_c.__anext__(), 1)
        assert got.data == b"good" and got.source == "b"
        assert seen == [b"bad", b"good"]
        assert "t" not in b._queues  # joined: nothing queued for delivery

    asyncio.run(main())
