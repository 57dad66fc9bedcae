"""What a node keeps per followed dataset stays bounded and small while following many datasets
(``make bench-soak``: 1,000 followed datasets): the protocol core's last 16 announcements and the
trust policy's last 16 heads of each."""

from __future__ import annotations

import gc
import random
import tracemalloc

from coordinator.identity import generate_private_key
from coordinator.multiformats import Multihash
from p2p.core import CoreConfig, FetchCompleted, MessageReceived, ProtocolCore
from p2p.core.config import NS_PER_S
from p2p.trust import (
    HEADS_PER_DATASET,
    HeadSeen,
    LocalVerdict,
    Outcome,
    TrustConfig,
    dataset_policy,
)
from p2p.wire import FetchLocations, HeadAnnouncement, sign_message

T0 = 1_800_000_000 * NS_PER_S


def test_history_keeps_envelopes_within_its_bound() -> None:
    """50 datasets, 40 heads each: every dataset remembers ``history_per_dataset`` slots, kept as
    envelopes, and once the histories are full the core costs well under the ~1.3 KB a decoded
    announcement took (seen-cache entry included)."""
    cfg = CoreConfig()
    keys = [generate_private_key(bytes([i]) * 32) for i in range(50)]
    dids = [k.dataset_id() for k in keys]
    core = ProtocolCore(cfg, random.Random(1), dids)
    rounds = 40
    signed = []
    for r in range(rounds):
        row = []
        for k, d in zip(keys, dids, strict=True):
            head = Multihash.sha3_256(f"{d}/{r}".encode())
            a = HeadAnnouncement(
                dataset=d,
                head=head,
                sequence=r + 1,
                prev_head=None,
                epoch=0,
                locations=FetchLocations((), (f"http://127.0.0.1:8080/{d.as_did_str()}",)),
                issued_at_ns=T0 + r * NS_PER_S,
                nonce=bytes(16),
            )
            row.append((d, head, sign_message(a, k).envelope))
        signed.append(row)
    t = T0
    gc.collect()
    tracemalloc.start()
    try:
        for r, row in enumerate(signed):
            if r == cfg.history_per_dataset:
                gc.collect()
                full = tracemalloc.get_traced_memory()[0]
            for i, (d, head, env) in enumerate(row):
                t += NS_PER_S // 50
                core.handle(MessageReceived(f"p{i % 5}", env, t))
                core.handle(FetchCompleted(d, head, True, t))
        gc.collect()
        end = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    for d in dids:
        history = core._datasets[d].history
        assert len(history) == cfg.history_per_dataset
        assert all(isinstance(v, bytes) for v in history.values())
        assert max(history) == (0, rounds)  # the newest slots are the ones kept
    # Past the bound only the seen-cache grows (its own bound is the message lifetime).
    per_message_after_full = (end - full) / ((rounds - cfg.history_per_dataset) * len(dids))
    assert per_message_after_full < 400, per_message_after_full
    assert full / (cfg.history_per_dataset * len(dids)) < 800


def test_trust_heads_bounded_and_small_without_attestations() -> None:
    """200 datasets, 30 heads each seen and verified locally (no other node's attestation): each
    policy remembers at most ``HEADS_PER_DATASET`` heads, and a head record without attestations
    or disputes costs well under the ~0.8 KB it took with its five empty containers."""
    keys = [generate_private_key(bytes([i % 256, i // 256]) * 16) for i in range(200)]
    dids = [k.dataset_id() for k in keys]
    rng = random.Random(1)
    policies = {d: dataset_policy(TrustConfig(), rng) for d in dids}
    heads = [[Multihash.sha3_256(f"{d}/{r}".encode()) for d in dids] for r in range(30)]
    t = T0
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for row in heads:
            for d, h in zip(dids, row, strict=True):
                t += NS_PER_S // 50
                policies[d].handle(HeadSeen(d, h, t))
                policies[d].handle(LocalVerdict(d, h, Outcome.VERIFIED, t))
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert all(p.head_count() == HEADS_PER_DATASET for p in policies.values())
    per_head = used / (HEADS_PER_DATASET * len(dids))
    assert per_head < 600, per_head
