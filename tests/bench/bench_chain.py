"""Benchmark: decode + hash + validate of a long metadata chain, next to raw sha3-256.

Builds a chain of N blocks (default 100,000: Seed, SetDataSchema, then AddData blocks with data
slices, watermarks and a checkpoint every 10th block, i.e. realistic ~300-byte blocks), then, in
one run and alternating the two measurements to share the machine's noise:

* ours: for every block, ``block_hash`` (sha3-256 multihash) + ``decode_block`` (full typed
  decode) + ``validate_append`` (every chain rule), oldest first;
* raw:  ``hashlib.sha3_256`` over the same block bytes.

Reports the median of ``--repeats`` runs as blocks/s and MiB/s, and the ratio. Single thread
(one core). Target of issue 44: >= 50,000 blocks/s for ours. Also reports which block decoder ran:
``compiled`` (native/odf_chain.c, built by ``make setup``) or ``python`` (not built, or
``ODF_NATIVE_CHAIN=0``, which measures the Python decoder alone).

Usage: .venv/bin/python tests/bench/bench_chain.py [--blocks N] [--repeats R] [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))

from factories import SCHEMA_BYTES, T0, data_slice, mh

from coordinator.chain.validation import ChainState, validate_append
from coordinator.identity import DatasetId
from coordinator.metadata import block_hash, decode_block, encode_block, flatbuffers_serde
from coordinator.metadata import model as m
from coordinator.metadata.timestamp import Timestamp


def build_chain(n: int) -> list[bytes]:
    """Encode a valid root chain of ``n`` blocks (oldest first)."""
    out: list[bytes] = []
    head = None

    def add(event: m.MetadataEvent) -> None:
        nonlocal head
        b = m.MetadataBlock(
            system_time=Timestamp(T0.epoch_ns + len(out)),
            prev_block_hash=head,
            sequence_number=len(out),
            event=event,
        )
        data = encode_block(b)
        out.append(data)
        head = block_hash(data)

    add(m.Seed(dataset_id=DatasetId.new_seeded_ed25519(b"bench"), dataset_kind=m.DatasetKind.ROOT))
    add(m.SetDataSchema(raw_arrow_schema=SCHEMA_BYTES))
    prev_offset: int | None = None
    checkpoint: m.Checkpoint | None = None
    while len(out) < n:
        i = len(out)
        start = 0 if prev_offset is None else prev_offset + 1
        new_cp = m.Checkpoint(physical_hash=mh(f"cp{i}"), size=1000) if i % 10 == 0 else checkpoint
        add(
            m.AddData(
                prev_checkpoint=checkpoint.physical_hash if checkpoint else None,
                prev_offset=prev_offset,
                new_data=data_slice(start, start + 99),
                new_checkpoint=new_cp,
                new_watermark=Timestamp(T0.epoch_ns + i * 1_000_000),
            )
        )
        checkpoint = new_cp
        prev_offset = start + 99
    return out


def run_ours(blocks: list[bytes]) -> float:
    t0 = time.perf_counter()
    state = ChainState()
    for data in blocks:
        state = validate_append(state, decode_block(data), block_hash(data))
    elapsed = time.perf_counter() - t0
    assert state.sequence_number == len(blocks) - 1
    return elapsed


def run_raw(blocks: list[bytes]) -> float:
    t0 = time.perf_counter()
    for data in blocks:
        hashlib.sha3_256(data).digest()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--blocks", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    t0 = time.perf_counter()
    blocks = build_chain(args.blocks)
    build_s = time.perf_counter() - t0
    total_bytes = sum(map(len, blocks))
    ours, raw = [], []
    for _ in range(args.repeats):
        ours.append(run_ours(blocks))
        raw.append(run_raw(blocks))
    ours_s, raw_s = statistics.median(ours), statistics.median(raw)
    n = len(blocks)
    decoder = "python" if flatbuffers_serde.NATIVE_DECODER is None else "compiled"
    result = {
        "decoder": decoder,
        "blocks": n,
        "bytes": total_bytes,
        "mean_block_bytes": total_bytes / n,
        "repeats": args.repeats,
        "encode_blocks_per_s": n / build_s,
        "ours_median_s": ours_s,
        "ours_blocks_per_s": n / ours_s,
        "ours_mib_per_s": total_bytes / ours_s / 2**20,
        "raw_sha3_median_s": raw_s,
        "raw_sha3_blocks_per_s": n / raw_s,
        "raw_sha3_mib_per_s": total_bytes / raw_s / 2**20,
        "ratio_ours_vs_raw": raw_s / ours_s,
        "target_blocks_per_s": 50_000,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"chain: {n} blocks, {total_bytes / 2**20:.1f} MiB, mean {total_bytes / n:.0f} B/block")
    print(f"(encoding the chain: {n / build_s:,.0f} blocks/s)")
    print(f"median of {args.repeats} runs, one thread, {decoder} block decoder:")
    ours_mib, raw_mib = result["ours_mib_per_s"], result["raw_sha3_mib_per_s"]
    print(f"  decode+hash+validate : {n / ours_s:>12,.0f} blocks/s  {ours_mib:8.1f} MiB/s")
    print(f"  raw sha3-256         : {n / raw_s:>12,.0f} blocks/s  {raw_mib:8.1f} MiB/s")
    print(f"  ratio ours/raw       : {raw_s / ours_s:.3f}x   target: >= 50,000 blocks/s")


if __name__ == "__main__":
    main()
