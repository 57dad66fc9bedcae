"""The node's part of protocol-core decisions, on in-memory twins."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from coordinator.identity import generate_private_key
from coordinator.multiformats import Multihash
from node.adapters.state import InlineState
from node.app.effects import NodeEffects
from node.app.events import EventBus
from node.app.metrics import NodeMetrics
from node.app.ports import StatePort
from node.app.verify import VerifyPipeline
from node.state.store import NodeState
from p2p.core import Accept
from p2p.wire import FetchLocations, HeadAnnouncement, SignedMessage, sign_message

T0 = 1_800_000_000 * 1_000_000_000
OWNER = generate_private_key(b"\x05" * 32)


def _announcement(seq: int) -> SignedMessage:
    return sign_message(
        HeadAnnouncement(
            dataset=OWNER.dataset_id(),
            head=Multihash.sha3_256(f"head-{seq}".encode()),
            sequence=seq,
            prev_head=None,
            epoch=0,
            locations=FetchLocations(ipfs_cids=("bafyexample",)),
            issued_at_ns=T0,
            nonce=seq.to_bytes(16, "big"),
        ),
        OWNER,
    )


def test_a_head_anti_entropy_brought_is_logged_and_counted() -> None:
    async def scenario() -> None:
        state = cast(StatePort, InlineState(NodeState.in_memory(lambda: T0)))
        metrics = NodeMetrics()
        tasks: set[asyncio.Task[Any]] = set()
        effects = NodeEffects(
            state,
            cast(VerifyPipeline, None),  # announcements never reach verification here
            EventBus(),
            metrics,
            lambda coro: tasks.add(asyncio.ensure_future(coro)),  # type: ignore[func-returns-value]
            lambda did: False,
            lambda: None,
        )
        gossiped, repaired = _announcement(1), _announcement(2)
        effects.accepted(Accept("p1", gossiped))
        effects.accepted(Accept("p2", repaired, via_anti_entropy=True))
        await effects.flush()
        events = await state.events(0, 100, "head.repaired")
        assert [(e.did, e.data) for e in events] == [
            (
                OWNER.dataset_id().as_did_str(),
                {"head": repaired.message.head.to_multibase(), "sequence": 2, "peer": "p2"},
            )
        ]
        assert metrics.anti_entropy_repairs._value.get() == 1
        for t in tasks:
            t.cancel()

    asyncio.run(scenario())
