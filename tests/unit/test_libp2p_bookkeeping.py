"""What py-libp2p's gossipsub records for a feature the node turns off is dropped
(``p2p.libp2p_host.prune_unread_gossip_bookkeeping``)."""

from __future__ import annotations

from libp2p.pubsub.gossipsub import PROTOCOL_ID, GossipSub

from p2p.libp2p_host import prune_unread_gossip_bookkeeping


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
