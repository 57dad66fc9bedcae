"""Discovery over /odf/providers/1.0.0 (p2p/discovery.py) on an in-memory network of fakes."""

from __future__ import annotations

import asyncio
import logging
import random

import pytest

from coordinator.identity.keys import generate_private_key
from p2p.discovery import (
    PROVIDERS_PROTOCOL,
    Discovery,
    PeerRecord,
    decode_providers_request,
    decode_providers_response,
    encode_providers_request,
    encode_providers_response,
)
from p2p.errors import WireDecodeError
from p2p.transport import TransportError, dataset_topic

X = generate_private_key(bytes([7]) * 32).dataset_id()
Y = generate_private_key(bytes([8]) * 32).dataset_id()


class Net:
    """Links between fake transports; a dial works only to a listed address."""

    def __init__(self) -> None:
        self.nodes: dict[str, Fake] = {}
        self.links: set[frozenset[str]] = set()

    def link(self, a: str, b: str) -> None:
        self.links.add(frozenset((a, b)))

    def unlink(self, a: str, b: str) -> None:
        self.links.discard(frozenset((a, b)))


class Fake:
    """A transport: peers it is linked to, the topics each node joined (gossipsub's view)."""

    def __init__(self, net: Net, peer_id: str, topics: set[str]) -> None:
        self.net, self._id, self.topics = net, peer_id, topics
        self.discovery: Discovery | None = None
        net.nodes[peer_id] = self

    @property
    def peer_id(self) -> str:
        return self._id

    def connected_peers(self) -> list[str]:
        return sorted(p for link in self.net.links if self._id in link for p in link - {self._id})

    async def connect(self, addr: str) -> str:
        peer = addr.rsplit("/p2p/", 1)[1]
        if peer not in self.net.nodes or addr != f"/mem/{peer}/p2p/{peer}":
            raise TransportError(f"cannot dial {addr}")
        self.net.link(self._id, peer)
        return peer

    async def request(self, peer: str, protocol: str, data: bytes, timeout_s: float) -> bytes:
        assert protocol == PROVIDERS_PROTOCOL
        if peer not in self.connected_peers():
            raise TransportError("not connected")
        other = self.net.nodes[peer].discovery
        assert other is not None
        return await other.serve(self._id, data)

    async def topic_peers(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for p in self.connected_peers():
            for t in self.net.nodes[p].topics:
                out.setdefault(t, set()).add(p)
        return out


def _node(
    net: Net, name: str, follows: list, owns: list, *, loopback_only: bool = False
) -> tuple[Fake, Discovery, list[str]]:
    topics = {dataset_topic(d.as_multibase()) for d in [*follows, *owns]}
    t = Fake(net, name, topics)
    ipfs_dials: list[str] = []

    async def connect_ipfs(addr: str) -> None:
        ipfs_dials.append(addr)

    d = Discovery(
        t,
        self_record=lambda: PeerRecord(
            name, gossip=(f"/mem/{name}/p2p/{name}",), ipfs=(f"/mem/ipfs-{name}",), http=""
        ),
        carries=lambda did: did in follows or did in owns,
        followed=lambda: list(follows),
        connect_ipfs=connect_ipfs,
        rng=random.Random(1),
        loopback_only=loopback_only,
    )
    t.discovery = d
    return t, d, ipfs_dials


def test_a_subscriber_finds_the_owner_through_the_bootstrap_node() -> None:
    async def main() -> None:
        net = Net()
        owner_t, owner, _ = _node(net, "owner", [], [X])
        _, boot, _ = _node(net, "boot", [], [])
        sub_t, sub, sub_ipfs = _node(net, "sub", [X], [])
        net.link("owner", "boot")
        net.link("sub", "boot")
        # The bootstrap node learns the owner's own record (its addresses) from the owner.
        recorded: list[PeerRecord] = []
        boot._on_record = recorded.append
        report = await boot.run_once()
        assert report.asked == 2
        # It remembers each peer's own addresses (to redial them after a restart).
        assert {(r.peer_id, r.gossip) for r in recorded} == {
            ("owner", ("/mem/owner/p2p/owner",)),
            ("sub", ("/mem/sub/p2p/sub",)),
        }
        await owner.run_once()
        # The subscriber asks the bootstrap node who carries X, dials the owner, connects IPFS.
        report = await sub.run_once()
        assert report.dialled == ["owner"]
        assert "owner" in sub_t.connected_peers()
        assert sub_ipfs == ["/mem/ipfs-owner"]
        assert [p.peer_id for p in sub.providers()] == ["owner"]
        # A partition drops the owner; the next round redials it from the record it kept,
        # with the bootstrap node gone as well.
        net.unlink("sub", "owner")
        net.unlink("sub", "boot")
        del net.nodes["owner"]  # unreachable while partitioned
        report = await sub.run_once()
        assert report.dialled == [] and report.unreachable == ["owner"]
        net.nodes["owner"] = owner_t  # healed
        report = await sub.run_once()
        assert report.dialled == ["owner"]

    asyncio.run(main())


def test_the_response_lists_only_topic_peers_and_says_what_they_carry() -> None:
    async def main() -> None:
        net = Net()
        _node(net, "a", [X], [])
        _node(net, "b", [Y], [])
        _, hub, _ = _node(net, "hub", [], [])
        net.link("a", "hub")
        net.link("b", "hub")
        await hub.run_once()
        got = decode_providers_response(await hub.serve("c", encode_providers_request([X])))
        assert [(r.peer_id, r.carries) for r in got] == [("hub", ()), ("a", (X.as_did_str(),))]
        # An empty request gets the responder's own record only.
        got = decode_providers_response(await hub.serve("c", encode_providers_request([])))
        assert [r.peer_id for r in got] == ["hub"]
        # Garbage gets an empty answer, never an exception.
        assert decode_providers_response(await hub.serve("c", b"\xff")) == []

    asyncio.run(main())


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        b'{"records": [{"peer_id": 1}]}',
        b'{"records": [{"peer_id": "p", "http": "file:///etc/passwd"}]}',
        b'{"records": [{"peer_id": "p", "gossip": ["a", "b", "c", "d", "e"]}]}',
        b'{"records": [{"peer_id": "p\\n"}]}',
        b'{"records": ' + b"[" + b",".join([b'{"peer_id": "p"}'] * 33) + b"]}",
        b" " * (256 * 1024 + 1),
    ],
)
def test_hostile_responses_are_refused(body: bytes) -> None:
    with pytest.raises(WireDecodeError):
        decode_providers_response(body)


def test_request_round_trip_and_limits() -> None:
    assert decode_providers_request(encode_providers_request([X, Y])) == [X, Y]
    with pytest.raises(WireDecodeError):
        decode_providers_request(b'{"dids": ["not-a-did"]}')
    with pytest.raises(WireDecodeError):
        decode_providers_request(b'{"dids": ' + str(["x"] * 257).replace("'", '"').encode() + b"}")
    rec = PeerRecord("p", gossip=("/ip4/10.0.0.1/tcp/1/p2p/p",), http="http://10.0.0.1:1")
    assert decode_providers_response(encode_providers_response([rec])) == [rec]


def test_loopback_only_dials_no_discovered_non_loopback_address() -> None:
    async def main() -> None:
        net = Net()
        _node(net, "owner", [], [X])  # its record names /mem/... addresses, not 127.x
        _, boot, _ = _node(net, "boot", [], [])
        sub_t, sub, sub_ipfs = _node(net, "sub", [X], [], loopback_only=True)
        net.link("owner", "boot")
        net.link("sub", "boot")
        await boot.run_once()
        report = await sub.run_once()
        assert report.learned == 1  # it heard of the owner...
        assert report.dialled == [] and sub_ipfs == []  # ...and dialled none of its addresses
        assert sub_t.connected_peers() == ["boot"]

    asyncio.run(main())


def test_failed_ipfs_connects_and_withheld_addresses_are_named_per_dataset() -> None:
    """A pull asks discovery why its IPFS source may get nothing: the providers' IPFS addresses
    the last connect failed on, and the loopback ones a provider listens on but withholds."""

    async def main() -> None:
        net = Net()
        _node(net, "owner", [], [X])
        # A second provider offers no IPFS address, only withheld loopback ones.
        lone_t = Fake(net, "lone", {dataset_topic(X.as_multibase())})
        lone = Discovery(
            lone_t,
            self_record=lambda: PeerRecord(
                "lone",
                gossip=("/mem/lone/p2p/lone",),
                ipfs_withheld=("/ip4/127.0.0.1/tcp/4001/p2p/QmLone",),
            ),
            carries=lambda did: did == X,
            followed=lambda: [],
            connect_ipfs=None,
            rng=random.Random(1),
        )
        lone_t.discovery = lone
        sub_t = Fake(net, "sub", {dataset_topic(X.as_multibase())})

        async def refuse(addr: str) -> None:
            raise RuntimeError("HTTP 500: connection refused")

        sub = Discovery(
            sub_t,
            self_record=lambda: PeerRecord("sub"),
            carries=lambda did: did == X,
            followed=lambda: [X],
            connect_ipfs=refuse,
            rng=random.Random(1),
            loopback_only=False,
        )
        sub_t.discovery = sub
        net.link("sub", "owner")
        net.link("sub", "lone")
        await sub.run_once()
        failed, withheld = sub.ipfs_problems(X)
        assert failed == [("/mem/ipfs-owner", "HTTP 500: connection refused")]
        assert withheld == ["/ip4/127.0.0.1/tcp/4001/p2p/QmLone"]
        assert sub.ipfs_problems(Y) == ([], [])

    asyncio.run(main())


def test_a_withheld_address_survives_the_wire_and_old_records_still_decode() -> None:
    rec = PeerRecord("p", ipfs_withheld=("/ip4/127.0.0.1/tcp/1/p2p/Qm",), carries=("d",))
    assert decode_providers_response(encode_providers_response([rec])) == [rec]
    # A record of a node that predates the field has none.
    old = b'{"records": [{"peer_id": "p", "gossip": [], "ipfs": [], "http": "", "carries": []}]}'
    assert decode_providers_response(old)[0].ipfs_withheld == ()
    assert "ipfs_withheld" not in PeerRecord("p").to_json()


def test_a_round_reports_how_long_each_answered_request_took(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each answered providers request is timed on the round's own clock (the log gives the
    median: what one exchange with a neighbour costs); a failed request adds no duration."""

    async def main() -> None:
        net = Net()
        _node(net, "owner", [], [X])
        _, boot, _ = _node(net, "boot", [], [])
        sub_t, sub, _ = _node(net, "sub", [X], [])
        now = [100.0]
        sub._clock = lambda: now[0]
        answer = sub_t.request

        async def slow(peer: str, protocol: str, data: bytes, timeout_s: float) -> bytes:
            now[0] += 0.03 if peer == "boot" else 0.0
            return await answer(peer, protocol, data, timeout_s)

        sub_t.request = slow  # type: ignore[method-assign]
        net.link("owner", "boot")
        net.link("sub", "boot")
        await boot.run_once()
        with caplog.at_level(logging.INFO, logger="p2p.discovery"):
            report = await sub.run_once()
        # its own record from the new peer, then who carries X: two requests, 30 ms each
        assert report.asked == 2 and report.request_s == pytest.approx([0.03, 0.03])
        assert report.dialled == ["owner"]
        assert "asked 2 (median 30 ms)" in caplog.text

    asyncio.run(main())
