"""What py-libp2p's gossipsub records for a feature the node turns off is dropped
(``p2p.libp2p_host.prune_unread_gossip_bookkeeping``), what its equivocation check keeps of
each message is a digest and the topic list, for as long as the seen cache remembers the
message (``slim_equivocation_records``), and what it keeps of departed peers goes once it no
longer counts (``prune_idle_peer_records``)."""

from __future__ import annotations

import time
from types import SimpleNamespace

from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import PROTOCOL_ID, GossipSub
from libp2p.pubsub.pb import rpc_pb2
from libp2p.rcmgr.rate_limiter import create_per_peer_rate_limiter

from p2p.libp2p_host import (
    SlimMessage,
    prune_idle_peer_records,
    prune_unread_gossip_bookkeeping,
    slim_equivocation_records,
)


def _router(adaptive: bool) -> GossipSub:
    return GossipSub(
        [PROTOCOL_ID], degree=6, degree_low=4, degree_high=12, adaptive_gossip_enabled=adaptive
    )


def test_message_times_are_dropped_when_adaptive_gossip_is_off() -> None:
    router = _router(adaptive=False)
    router.recent_message_deliveries["t"].extend([1.0, 2.0, 3.0])
    prune_unread_gossip_bookkeeping(router)
    assert dict(router.recent_message_deliveries) == {}


def test_adaptive_gossip_keeps_what_it_reads() -> None:
    router = _router(adaptive=True)
    router.recent_message_deliveries["t"].extend([1.0, 2.0])
    prune_unread_gossip_bookkeeping(router)
    assert router.recent_message_deliveries["t"] == [1.0, 2.0]


def _received(seqno: int, data: bytes, topics: list[str]) -> rpc_pb2.Message:
    """A message as the router gets it: parsed out of an RPC (sharing the RPC's arena)."""
    sent = rpc_pb2.RPC(
        publish=[
            rpc_pb2.Message(
                from_id=b"origin", seqno=seqno.to_bytes(8, "big"), data=data, topicIDs=topics
            )
        ]
    )
    rpc = rpc_pb2.RPC()
    rpc.ParseFromString(sent.SerializeToString())
    return rpc.publish[0]


def test_equivocation_records_become_slim_copies_and_the_check_is_unchanged() -> None:
    router = _router(adaptive=False)
    for i in range(5):
        assert router._check_equivocation(_received(i, b"head %d" % i, ["odf/ds/1/x"]))
    assert slim_equivocation_records(router) == 5
    kept = list(router.equivocation_detection.values())
    assert all(type(m) is SlimMessage for m in kept)
    assert [m.data for m in kept] == [b"head %d" % i for i in range(5)]
    # Only the new ones are copied: the walk stops at the first slim record from the end.
    assert router._check_equivocation(_received(5, b"head 5", ["odf/ds/1/x"]))
    assert slim_equivocation_records(router) == 1
    assert slim_equivocation_records(router) == 0
    # The same message again passes; the same (origin, seqno) with other data or another
    # topic list is equivocation, as with the protobuf records.
    assert router._check_equivocation(_received(3, b"head 3", ["odf/ds/1/x"]))
    assert not router._check_equivocation(_received(3, b"other", ["odf/ds/1/x"]))
    assert not router._check_equivocation(_received(3, b"head 3", ["odf/ds/1/y"]))
    assert not router._check_equivocation(_received(3, b"head 3", ["odf/ds/1/x", "z"]))


def test_a_slim_record_keeps_a_digest_not_the_payload() -> None:
    router = _router(adaptive=False)
    payload = b"x" * 600
    assert router._check_equivocation(_received(1, payload, ["t"]))
    slim_equivocation_records(router, now=10.0)
    (record,) = router.equivocation_detection.values()
    assert isinstance(record, SlimMessage) and record.at == 10.0
    assert not isinstance(record.data, bytes) and len(record.data.digest) == 32
    assert record.data == payload and record.data != payload + b"!"
    assert router._check_equivocation(_received(1, payload, ["t"]))
    assert not router._check_equivocation(_received(1, payload[:-1], ["t"]))


def test_records_older_than_the_seen_cache_go_and_newer_ones_stay() -> None:
    router = _router(adaptive=False)
    for i in range(3):
        router._check_equivocation(_received(i, b"old %d" % i, ["t"]))
    slim_equivocation_records(router, now=100.0, keep_s=600.0)
    for i in range(3, 5):
        router._check_equivocation(_received(i, b"new %d" % i, ["t"]))
    slim_equivocation_records(router, now=650.0, keep_s=600.0)
    assert len(router.equivocation_detection) == 5  # the old ones are 550 s old: kept
    # Not yet slim (just added) records are never dropped, whatever their neighbours' age.
    router._check_equivocation(_received(5, b"newest", ["t"]))
    slim_equivocation_records(router, now=701.0, keep_s=600.0)
    seqnos = [int.from_bytes(k[-8:], "big") for k in router.equivocation_detection]
    assert seqnos == [3, 4, 5]
    # A forgotten (origin, seqno) counts as new again, as it does for the seen cache.
    assert router._check_equivocation(_received(0, b"other", ["t"]))


def _peer(seed: int) -> ID:
    return ID.from_pubkey(create_new_key_pair(bytes([seed]) * 32).public_key)


def test_departed_peers_records_go_once_they_no_longer_count() -> None:
    limiter = create_per_peer_rate_limiter(refill_rate=1.0, capacity=10.0)
    stayed, left, drained = _peer(1), _peer(2), _peer(3)
    # py-libp2p stamps a new bucket with the wall clock: the test's times start after that.
    t0 = time.time() + 5.0
    for peer in (stayed, left):
        assert limiter.try_allow(peer_id=peer, current_time=t0)
    for _ in range(10):
        limiter.try_allow(peer_id=drained, current_time=t0)
    auto = SimpleNamespace(
        _recent_disconnects={left: t0 - 61.0, drained: t0 - 5.0}, _disconnect_backoff=60.0
    )
    network = SimpleNamespace(
        auto_connector=auto,
        _resource_manager=SimpleNamespace(connection_rate_limiter=limiter),
    )
    connected = {stayed.to_string()}
    # One second on: ``left`` is back to a full bucket (a new one is full too), ``drained``
    # is not; the connected peer's bucket stays whatever it holds; the disconnect older than
    # its backoff goes, the recent one stays.
    assert prune_idle_peer_records(network, connected, t0 + 1.0) == 2
    assert set(limiter._token_buckets) == {f"peer:{stayed}", f"peer:{drained}"}
    assert set(auto._recent_disconnects) == {drained}
    # Once refilled, the drained peer's bucket goes as well; a new one would be as full.
    assert prune_idle_peer_records(network, connected, t0 + 30.0) == 1
    assert set(limiter._token_buckets) == {f"peer:{stayed}"}
    assert f"peer:{drained}" not in limiter._last_request_times


def test_a_network_without_those_records_is_left_alone() -> None:
    assert prune_idle_peer_records(SimpleNamespace(), set(), 0.0) == 0
