"""Benchmark: the trust driver's cost per dispute under a sybil flood (issue 39, defect 3).

N disputes of one followed head, each signed by a fresh key, as the effects hand them to
:meth:`node.app.trust.TrustDriver.dispute` after storing them (a quorum policy, k = 2 of three
trusted attesters, on a light node; the state an on-disk SQLite database, run inline). Reports
the mean time of ``TrustDriver.dispute`` over the 16 disputes up to the 1st, 256th, 1,024th and
N-th, and the total. Before the fix each dispute re-encoded every earlier disputer as a did:key
and rewrote them all: 218.6 ms by the 1,024th on the 2-core development machine; the target is
a cost that does not grow with the number of earlier disputes.

Usage: .venv/bin/python tests/bench/bench_dispute_cost.py [N (default 2000)]
"""

from __future__ import annotations

import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import cast

from coordinator.identity import DatasetId, generate_private_key
from coordinator.multiformats import Multihash
from node.adapters.state import InlineState
from node.app.events import EventBus
from node.app.ports import StatePort
from node.app.trust import TrustDriver
from node.state.store import NodeState
from p2p.trust import Policy, TrustConfig

T0 = 1_800_000_000 * 1_000_000_000


class _Verify:
    async def queue(
        self, did: DatasetId, head: Multihash, sequence: int, *, replay: bool | None = None
    ) -> None:
        """Nothing to verify here: the driver's own cost is measured."""


async def measure(n: int) -> list[float]:
    """Seconds :meth:`TrustDriver.dispute` took for each of ``n`` fresh-key disputes."""
    owner = generate_private_key(b"\x01" * 32).dataset_id()
    trusted = frozenset(generate_private_key(bytes([i]) * 32).dataset_id() for i in (2, 3, 4))
    head, did = Multihash.sha3_256(b"head"), owner.as_did_str()
    with tempfile.TemporaryDirectory() as tmp:
        state = cast(StatePort, InlineState(NodeState.open(Path(tmp) / "state.db", lambda: T0)))
        config = TrustConfig(policy=Policy.QUORUM, k=2, trusted_attesters=trusted, can_replay=False)
        driver = TrustDriver(config, state, EventBus(), lambda: T0, random.Random(0), _Verify())
        await state.subscribe(did)
        await driver.restore()
        await state.record_accepted_head(did, 0, 1, head.to_multibase(), "", b"x")
        await driver.head_accepted(owner, head, 1)
        times: list[float] = []
        for i in range(n):
            key = generate_private_key(i.to_bytes(4, "big") + b"\x07" * 28).dataset_id()
            envelope = b"dispute-" + i.to_bytes(4, "big")
            await state.add_dispute(
                did, head.to_multibase(), "replay_mismatch", key.as_did_key(), envelope, False
            )
            t = time.perf_counter()
            await driver.dispute(owner, head, key, "f1620" + "00" * 32)
            times.append(time.perf_counter() - t)
        state.close()  # type: ignore[attr-defined]
    return times


def main() -> None:
    """Run and print the figures."""
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    times = asyncio.run(measure(n))
    for at in sorted({1, 256, 1024, n}):
        if at <= n:
            window = times[max(0, at - 16) : at]
            mean_ms = 1000 * sum(window) / len(window)
            print(f"dispute #{at}: {mean_ms:.2f} ms (mean of #{max(1, at - 15)}..#{at})")
    print(f"all {n}: {sum(times):.2f} s")


if __name__ == "__main__":
    main()
