"""Benchmark: ``state.db`` growth and forwarding under a dispute flood (issue 39, defect 5).

The flood: 20,000 disputes signed by one key (each of another block, so all are new) and 2,000
disputes each signed by a fresh key, of one followed dataset; first, one dispute by a trusted
attester of the dataset. Each is a real signed envelope (~1.4 KB), stored as the node's effects
store a gossiped dispute (:meth:`node.state.store.NodeState.add_dispute`, on disk, WAL,
``synchronous=FULL``, 100 per transaction as the writer thread groups them) and fed to the
protocol core by 50 peers at 500 messages a second (virtual time).

Reported for the state, twice: with no caps (what the code before issue 39 stored) and with the
default ``[storage]`` caps: ``state.db`` size (with its WAL, after a checkpoint) before and after
the flood, the disputes stored, whether the trusted attester's dispute is still there, and the
insert time (mean, p99). For the core, with the default ``[p2p]`` signer budget and with none
(a budget no flood reaches, as before): the messages forwarded.

Usage: .venv/bin/python tests/bench/bench_evidence_flood.py [--one-key N] [--fresh N]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from coordinator.identity import PrivateKey, generate_private_key
from coordinator.multiformats import Multihash
from node.app.rows import EvidenceCaps
from node.state.store import NodeState
from p2p.core import NS_PER_S, CoreConfig, Forward, MessageReceived, ProtocolCore
from p2p.wire import Dispute, DisputeKind, Evidence, SignedMessage, sign_message

T0 = 1_800_000_000 * NS_PER_S
OWNER = generate_private_key(b"\x51" * 32)
DID = OWNER.dataset_id()
MALLORY = generate_private_key(b"\x52" * 32)
TRUSTED = generate_private_key(b"\x53" * 32)
BATCH = 100


def _h(label: str) -> Multihash:
    return Multihash.sha3_256(label.encode())


def _dispute(key: PrivateKey, i: int) -> SignedMessage:
    return sign_message(
        Dispute(
            node=key.dataset_id(),
            dataset=DID,
            block=_h(f"block-{i}"),
            kind=DisputeKind.REPLAY_MISMATCH,
            expected=Evidence(logical_hash=_h(f"x{i}"), offsets=(0, 99)),
            computed=Evidence(logical_hash=_h(f"y{i}"), offsets=(0, 99)),
            detail="replay of the transform computed another logical hash " * 4,
            issued_at_ns=T0,
            nonce=i.to_bytes(16, "big"),
        ),
        key,
    )


def _flood(one_key: int, fresh: int) -> list[SignedMessage]:
    """The trusted dispute, then the fresh keys' interleaved with Mallory's."""
    msgs = [_dispute(TRUSTED, 0)]
    mallory = [_dispute(MALLORY, i) for i in range(1, one_key + 1)]
    strangers = [
        _dispute(generate_private_key(i.to_bytes(32, "big")), one_key + i)
        for i in range(1, fresh + 1)
    ]
    step = max(1, len(mallory) // max(1, len(strangers)))
    for i, sm in enumerate(mallory):
        msgs.append(sm)
        if i % step == 0 and strangers:
            msgs.append(strangers.pop())
    return msgs + strangers


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def _store_run(msgs: list[SignedMessage], caps: EvidenceCaps | None) -> dict[str, object]:
    trusted = (TRUSTED.dataset_id().as_did_key(),)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "state.db"
        st = NodeState.open(path, time.time_ns)
        st.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        before = _size(path)
        times: list[float] = []
        for start in range(0, len(msgs), BATCH):
            t = time.perf_counter()
            with st.batch():
                for sm in msgs[start : start + BATCH]:
                    d = sm.message
                    assert isinstance(d, Dispute)
                    args = (
                        DID.as_did_str(),
                        d.block.to_multibase(),
                        "replay_mismatch",
                        d.node.as_did_key(),
                        sm.envelope,
                        False,
                        d.detail,
                    )
                    if caps is None:  # the call as the code before issue 39 made it
                        st.add_dispute(*args)
                    else:
                        st.add_dispute(*args, trusted=trusted, caps=caps)
            times.append((time.perf_counter() - t) / BATCH)
        st.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        after = _size(path)
        stored = st.conn.execute("SELECT count(*) FROM disputes").fetchone()[0]
        kept = st.disputes_of_block(DID.as_did_str(), _h("block-0").to_multibase(), trusted, 0)
        st.close()
    times.sort()
    return {
        "before": before,
        "after": after,
        "stored": stored,
        "trusted_kept": bool(kept),
        "mean_ms": statistics.fmean(times) * 1e3,
        "p99_ms": times[int(len(times) * 0.99)] * 1e3,
    }


def _forwarded(msgs: list[SignedMessage], config: CoreConfig) -> int:
    core = ProtocolCore(config, random.Random(1), [DID])
    n = 0
    for i, sm in enumerate(msgs):
        now = T0 + i * NS_PER_S // 500  # 44 s for 22,001: within the message age bound
        out = core.handle(MessageReceived(f"peer-{i % 50}", sm.envelope, now))
        n += sum(isinstance(d, Forward) for d in out)
    return n


def main() -> None:
    """Run both configurations and print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--one-key", type=int, default=20_000)
    ap.add_argument("--fresh", type=int, default=2_000)
    ap.add_argument(
        "--before",
        action="store_true",
        help="only the uncapped state run (runs on the code before issue 39 too, e.g. with"
        " PYTHONPATH at an export of it)",
    )
    args = ap.parse_args()
    msgs = _flood(args.one_key, args.fresh)
    size = statistics.fmean(len(m.envelope) for m in msgs)
    print(
        f"flood: {args.one_key:,} disputes from one key + {args.fresh:,} from fresh keys"
        f" + 1 trusted ({size:,.0f} B per envelope)"
    )
    caps = EvidenceCaps()
    runs: list[tuple[str, EvidenceCaps | None]] = [("no caps", None)]
    if not args.before:
        runs.append((f"default caps {caps}", caps))
    for label, c in runs:
        r = _store_run(msgs, c)
        print(
            f"state.db, {label}: {r['before']:,} B -> {r['after']:,} B"
            f" (+{(int(r['after']) - int(r['before'])) / 1e6:.1f} MB), {r['stored']:,} disputes"
            f" stored, trusted dispute kept: {r['trusted_kept']},"
            f" insert mean {r['mean_ms']:.3f} ms p99 {r['p99_ms']:.3f} ms"
        )
    if args.before:
        return
    unlimited = CoreConfig(signer_rate_burst=1e9, signer_rate_per_s=1e9)
    default = CoreConfig()
    for label, cfg in (
        ("no signer budget (before)", unlimited),
        ("default signer budget", default),
    ):
        print(f"core, {label}: {_forwarded(msgs, cfg):,} of {len(msgs):,} forwarded")


if __name__ == "__main__":
    main()
