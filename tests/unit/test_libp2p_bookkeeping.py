"""What py-libp2p's gossipsub records for a feature the node turns off is dropped
(``p2p.libp2p_host.prune_unread_gossip_bookkeeping``), and what its equivocation check keeps of
each message is a plain copy of the two fields it reads (``slim_equivocation_records``)."""

from __future__ import annotations

from libp2p.pubsub.gossipsub import PROTOCOL_ID, GossipSub
from libp2p.pubsub.pb import rpc_pb2

from p2p.libp2p_host import (
    SlimMessage,
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
