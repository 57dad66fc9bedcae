"""Benchmark: the trust driver's cost per dispute under a sybil flood (issue 39, defect 3).

N disputes of one followed head, each signed by a fresh key, as the effects hand them to
:meth:`node.app.trust.TrustDriver.dispute` after storing them (a quorum policy, k = 2 of three
trusted attesters, on a light node; the state an on-disk SQLite database, run inline). Reports
the mean time of ``TrustDriver.dispute`` over the 16 disputes up to the 1st, 256th, 1,024th and
N-th, and the total. Before the fix each dispute re-encoded every earlier disputer as a did:key
and rewrote them all: 218.6 ms by the 1,024th on the 2-core development machine; the target is
a cost that does not grow with the number of earlier disputes.

Then a stranger's key rotation (two fresh keys) on a driver following 20 datasets, each with
100 strangers' disputes and 100 attestations of its head: the median and max of 10
:meth:`TrustDriver.identities_changed` calls (before the fix every rotation rebuilt every
policy from the state: 303 ms median here).

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


async def measure_rotation() -> list[float]:
    """Seconds each of 10 strangers' rotations took to re-evaluate (20 followed datasets)."""
    trusted = frozenset(generate_private_key(bytes([i]) * 32).dataset_id() for i in (2, 3, 4))
    with tempfile.TemporaryDirectory() as tmp:
        state = cast(StatePort, InlineState(NodeState.open(Path(tmp) / "state.db", lambda: T0)))
        config = TrustConfig(policy=Policy.QUORUM, k=2, trusted_attesters=trusted, can_replay=False)
        driver = TrustDriver(config, state, EventBus(), lambda: T0, random.Random(0), _Verify())
        for i in range(20):
            did = generate_private_key(bytes([100 + i]) * 32).dataset_id().as_did_str()
            head = Multihash.sha3_256(b"h%d" % i).to_multibase()
            await state.subscribe(did)
            await state.record_accepted_head(did, 0, 1, head, "", b"x")
            for j in range(100):
                seed = i.to_bytes(2, "big") + j.to_bytes(2, "big") + b"\x09" * 28
                signer = generate_private_key(seed).dataset_id().as_did_key()
                tag = b"%d-%d" % (i, j)
                await state.add_dispute(did, head, "replay_mismatch", signer, b"d" + tag, False)
                await state.add_attestation(did, head, "verified", signer, b"a" + tag, False)
        await driver.restore()
        times: list[float] = []
        for r in range(10):
            old = generate_private_key(b"\x55" + r.to_bytes(31, "big")).dataset_id()
            new = generate_private_key(b"\x56" + r.to_bytes(31, "big")).dataset_id()
            driver.identities.add_rotation(old, new)
            t = time.perf_counter()
            await driver.identities_changed(old, new)
            times.append(time.perf_counter() - t)
        state.close()  # type: ignore[attr-defined]
    return sorted(times)


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
    rot = asyncio.run(measure_rotation())
    print(
        f"a stranger's rotation, 20 followed datasets: median {1000 * rot[5]:.2f} ms,"
        f" max {1000 * rot[-1]:.2f} ms"
    )


if __name__ == "__main__":
    main()
