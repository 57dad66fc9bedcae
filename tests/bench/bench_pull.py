"""Benchmark: pull of a dataset from IPFS, next to raw ``cat`` of the same bytes.

Builds a dataset with 1,000 blocks (Seed, SetDataSchema, 20 AddData blocks with 10 MB data
parts, 978 watermark-only AddData blocks), adds it to the embedded IPFS node as kamu does,
then, from that same daemon's RPC API:

* ``pull``: ``pull_url("ipfs://<cid>")`` into an empty store (walk, verify, parallel download
  with sha3-256 + size checks, fsync, commit) -- MB/s of data parts;
* ``cat``:  raw ``cat`` of the same 20 parts with the same parallelism, bytes discarded (the
  issue's yardstick: pull / cat is the headline ratio);
* ``raw-all``: every byte the pull reads, unverified and discarded (one ``dag/export`` of
  ``blocks/`` then ``cat`` of the parts) -- the verification and storage overhead;
* ``walk``: the metadata walk alone (``ls`` of the root, one ``dag/export`` of ``blocks/``,
  hash every leaf, decode, chain walk) -- blocks/s, the median of ``--walks`` (default 3)
  walks in a row, with the CPU time each process spent per walk (this one, all threads; the
  IPFS node, from ``/proc/<pid>/task/*/schedstat``): on a loaded machine the wall time mostly
  measures the scheduler, the CPU times what the walk costs.

``--rounds`` (default 3) repeats cat, pull and walk back to back against the same daemon and
prints the median of each figure and the 1-minute load average.

CPU accounting (from ``/proc/<pid>/stat`` of the IPFS node process and ``getrusage`` of this
one, all threads) shows where a pull's time can go on this machine: the least CPU any
verified pull needs is what the IPFS node spends serving every byte the pull reads (``raw-all``)
plus sha3-256 over the parts (timed here on one core); spread over all cores, that gives the
best pull / cat ratio the machine allows (``bound``), next to the measured one. That bound
leaves out two costs every pull also has: receiving the bytes (this process's CPU during ``cat``)
and storing them (``store``: the 1,000 block files and the parts written as the pull writes them,
flushed and renamed, timed in the same round); ``full bound`` counts them too.

Must run in a loopback-only namespace (the launcher refuses otherwise)::

    unshare -rn bash -c 'ip link set lo up; .venv/bin/python tests/bench/bench_pull.py'
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import hashlib
import importlib
import json
import os
import random
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from coordinator.metadata.timestamp import Timestamp
from coordinator.storage.dataset import Dataset
from coordinator.storage.objects import FsObjectRepository
from coordinator.storage.repository import DatasetRepository
from coordinator.verify import verify_integrity
from node.ipfs.client import IpfsClient
from node.ipfs.embedded import EmbeddedIpfs
from node.transfer.publish import publish_dataset
from node.transfer.pull import PullOptions, pull_url
from node.transfer.testing import add_data, new_dataset

pull_mod = importlib.import_module("node.transfer.pull")


def _repo(path: Path) -> DatasetRepository:
    return DatasetRepository(
        path / "datasets", path / "keys", clock=lambda: Timestamp.parse("2024-01-01T00:00:00Z")
    )


def _proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _proc_cpu_ns_s(pid: int) -> float:
    """CPU seconds of every thread of a process so far, to the nanosecond (schedstat)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return total / 1e9


def _self_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _self_sys_s() -> float:
    """System (kernel) CPU seconds of this process so far, all threads."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


def _store_cpu_s(src: Dataset, work: Path) -> float:
    """CPU seconds (this process, all threads) of storing a new dataset's files as a pull does:
    the block files (``_write_blocks``: pending names, renamed, one ``syncfs``), and each data
    part written with the pull's own writer (direct I/O where the filesystem allows it), fsynced
    and renamed into place. Everything is read beforehand."""
    from node.transfer.object_writer import open_object_writer

    hashes = list(src.blocks.iter_hashes())
    blocks = [src.blocks.path_of(h).read_bytes() for h in hashes]
    parts = [src.data.path_of(h).read_bytes() for h in src.data.iter_hashes()]
    out = work / "store"
    (out / "data").mkdir(parents=True)
    c0 = _self_cpu_s()
    pull_mod._write_blocks(FsObjectRepository(out / "blocks"), hashes, blocks, True)
    for i, data in enumerate(parts):
        w = open_object_writer(out / "data" / f".pending-{i}", len(data), direct=True)
        for k in range(0, len(data), 1 << 20):
            w.write(data[k : k + (1 << 20)])
        w.finish(durable=True)
        os.replace(out / "data" / f".pending-{i}", out / "data" / f"part-{i}")
    return _self_cpu_s() - c0


def _sha3_cpu_s(paths: list[Path]) -> float:
    """CPU seconds of sha3-256 over the files (one thread, files read beforehand)."""
    total = 0.0
    for p in paths:
        data = p.read_bytes()
        t0 = time.thread_time()
        hashlib.sha3_256(data).digest()
        total += time.thread_time() - t0
    return total


async def _cat_all(client: IpfsClient, paths: list[str], parallel: int) -> int:
    sem = asyncio.Semaphore(parallel)
    total = 0

    async def one(p: str) -> None:
        nonlocal total
        async with sem, client.open_stream(p) as chunks:
            async for c in chunks:
                total += len(c)

    await asyncio.gather(*(one(p) for p in paths))
    return total


async def _walk(api: str, cid: str, head_hex: str, ipfs_pid: int) -> tuple[float, float, float]:
    """One walk of a new dataset's chain: (blocks/s, CPU s of this process, of the IPFS node)."""
    from coordinator.multiformats import Multihash
    from node.transfer.sources import open_source

    src = open_source(f"ipfs://{cid}", ipfs_api=api)
    with tempfile.TemporaryDirectory() as d:
        f = pull_mod._Fetcher(src, PullOptions())
        cache = FsObjectRepository(Path(d), durable=False)
        c_ipfs, c_self = _proc_cpu_ns_s(ipfs_pid), _self_cpu_s()
        t0 = time.perf_counter()
        nothing = pull_mod._LocalChain(None, None)
        mem = await pull_mod._prefetch_blocks(f, cache, nothing)
        new, _ = await pull_mod._walk(f, cache, Multihash.from_multibase(head_hex), nothing, mem)
        dt = time.perf_counter() - t0
        cpu_self, cpu_ipfs = _self_cpu_s() - c_self, _proc_cpu_ns_s(ipfs_pid) - c_ipfs
    await src.close()
    return len(new) / dt, cpu_self, cpu_ipfs


async def bench(
    work: Path,
    parts: int,
    part_mb: int,
    blocks: int,
    parallel: int,
    rounds: int,
    walks: int = 3,
    profile: Path | None = None,
    durable: bool = True,
) -> list[dict[str, float]]:
    src = new_dataset(work / "src" / "ds", b"bench", durable=False)
    rng = random.Random(7)
    add_data(src, parts, part_mb * 1_000_000, rng=rng, checkpoint_every=0)
    add_data(src, blocks - parts - 2, 0, rng=rng, checkpoint_every=0)
    data_bytes = parts * part_mb * 1_000_000
    node = EmbeddedIpfs(work / "ipfs")
    node.start()
    try:
        async with IpfsClient(node.api_url, timeout_s=600) as client:
            t0 = time.perf_counter()
            pub = await publish_dataset(client, src)
            add_s = time.perf_counter() - t0
            print(f"published in {add_s:.1f} s", flush=True)
            part_paths = [f"/ipfs/{pub.cid}/data/{h}" for h in src.data.iter_hashes()]
            blocks_cid = next(
                str(e["Hash"]) for e in await client.ls(f"/ipfs/{pub.cid}") if e["Name"] == "blocks"
            )
            # Warm the daemon's caches equally for both measurements.
            await _cat_all(client, part_paths, parallel)
        head = src.head()
        assert head is not None
        assert node.process is not None
        ipfs_pid = node.process.pid
        part_files = [src.data.path_of(h) for h in src.data.iter_hashes()]
        cores = len(os.sched_getaffinity(0))
        out = []
        for i in range(rounds):
            # cat and pull back to back in each round, so both see the same machine load.
            async with IpfsClient(node.api_url, timeout_s=600) as client:
                c_ipfs, c_self = _proc_cpu_s(ipfs_pid), _self_cpu_s()
                t0 = time.perf_counter()
                n = await _cat_all(client, part_paths, parallel)
                cat_s = time.perf_counter() - t0
                cat_ipfs_cpu = _proc_cpu_s(ipfs_pid) - c_ipfs
                cat_self_cpu = _self_cpu_s() - c_self
                assert n == data_bytes
                # Every byte the pull reads, unverified and discarded: blocks/ in one
                # dag/export (as the pull reads it), then the parts.
                c_ipfs = _proc_cpu_s(ipfs_pid)
                t0 = time.perf_counter()
                async with client.open_dag_export(blocks_cid) as chunks:
                    async for _ in chunks:
                        pass
                n = await _cat_all(client, part_paths, parallel)
                raw_s = time.perf_counter() - t0
                raw_ipfs_cpu = _proc_cpu_s(ipfs_pid) - c_ipfs
            dst = _repo(work / f"dst{i}")
            prof = cProfile.Profile() if profile is not None and i == 0 else None
            c_ipfs, c_self, c_sys = _proc_cpu_s(ipfs_pid), _self_cpu_s(), _self_sys_s()
            t0 = time.perf_counter()
            if prof is not None:
                prof.enable()
            r = await pull_url(
                dst,
                pub.url,
                alias="ds",
                ipfs_api=node.api_url,
                options=PullOptions(parallel=parallel, durable=durable),
            )
            if prof is not None:
                prof.disable()
                prof.dump_stats(str(profile))
            pull_s = time.perf_counter() - t0
            pull_ipfs_cpu = _proc_cpu_s(ipfs_pid) - c_ipfs
            pull_self_cpu = _self_cpu_s() - c_self
            pull_self_sys = _self_sys_s() - c_sys
            sha3_cpu = _sha3_cpu_s(part_files)
            store_cpu = _store_cpu_s(src, work / f"dst{i}")
            floor_s = max(raw_s, (raw_ipfs_cpu + sha3_cpu) / cores)
            # The same, counting also what receiving (this process's CPU during ``cat``) and
            # storing the parts (written, fsynced and renamed as the pull does) cost here.
            floor_full_s = max(raw_s, (raw_ipfs_cpu + cat_self_cpu + sha3_cpu + store_cpu) / cores)
            assert r.new_head == head and r.new_blocks == blocks
            assert verify_integrity(dst.open("ds")).ok
            walk_rows = [
                await _walk(node.api_url, pub.cid, str(head), ipfs_pid) for _ in range(walks)
            ]
            walk_bps = statistics.median(w[0] for w in walk_rows)
            walk_self_ms = statistics.median(w[1] for w in walk_rows) * 1e3
            walk_ipfs_ms = statistics.median(w[2] for w in walk_rows) * 1e3
            row = {
                "blocks": blocks,
                "data_mb": data_bytes / 1e6,
                "add_s": add_s,
                "cat_mb_s": data_bytes / 1e6 / cat_s,
                "pull_mb_s": data_bytes / 1e6 / pull_s,
                "pull_s": pull_s,
                "ratio_pull_to_cat": cat_s / pull_s,
                "raw_all_s": raw_s,
                "ratio_pull_to_raw_all": raw_s / pull_s,
                "walk_blocks_s": walk_bps,
                "walk_self_cpu_ms": walk_self_ms,
                "walk_ipfs_cpu_ms": walk_ipfs_ms,
                "cat_ipfs_cpu_s": cat_ipfs_cpu,
                "cat_self_cpu_s": cat_self_cpu,
                "raw_all_ipfs_cpu_s": raw_ipfs_cpu,
                "pull_ipfs_cpu_s": pull_ipfs_cpu,
                "pull_self_cpu_s": pull_self_cpu,
                "pull_self_sys_s": pull_self_sys,
                "sha3_cpu_s": sha3_cpu,
                "cores": cores,
                "bound_pull_s": floor_s,
                "bound_ratio_pull_to_cat": cat_s / floor_s,
                "pull_of_bound": (cat_s / pull_s) / (cat_s / floor_s),
                "store_cpu_s": store_cpu,
                "bound_full_pull_s": floor_full_s,
                "pull_of_full_bound": floor_full_s / pull_s,
                "loadavg_1m": _loadavg(),
            }
            print(
                f"round {i + 1}: cat {row['cat_mb_s']:.0f} MB/s, pull {row['pull_mb_s']:.0f} "
                f"MB/s ({pull_s:.2f} s), ratio {row['ratio_pull_to_cat']:.2f}x, walk "
                f"{walk_bps:.0f} blocks/s (CPU ms this process/IPFS node {walk_self_ms:.1f}/"
                f"{walk_ipfs_ms:.1f}), raw-all {raw_s:.2f} s, CPU s (IPFS node/this process): "
                f"cat {cat_ipfs_cpu:.2f}/{cat_self_cpu:.2f}, pull {pull_ipfs_cpu:.2f}/"
                f"{pull_self_cpu:.2f} (sys {pull_self_sys:.2f}), sha3 {sha3_cpu:.2f}; bound "
                f"{cat_s / floor_s:.2f}x, of bound {row['pull_of_bound']:.2f} (with receiving "
                f"and storing: store {store_cpu:.2f} CPU s, of that bound "
                f"{row['pull_of_full_bound']:.2f}), "
                f"load {row['loadavg_1m']:.2f}",
                flush=True,
            )
            out.append(row)
    finally:
        node.stop()
        # The rounds' stores go only now: deleting a round's ~1,000 files just before the next
        # round's pull made that pull's file creations slower (ext4 without a journal, as on
        # the reference machine, skips inodes deleted in the last minute or more when it
        # allocates new ones, and scanning past them is kernel time of the pull process).
        for i in range(rounds):
            shutil.rmtree(work / f"dst{i}", ignore_errors=True)
    return out


def _loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def main() -> None:
    """Run once and print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", type=int, default=20)
    ap.add_argument("--part-mb", type=int, default=10)
    ap.add_argument("--blocks", type=int, default=1000)
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--walks", type=int, default=3, help="walks per round (their median)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--no-fsync", action="store_true", help="pull with durable=False (no fsync; diagnosis)"
    )
    ap.add_argument(
        "--profile",
        type=Path,
        help="cProfile the first round's pull (event-loop thread) into this file",
    )
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        rows = asyncio.run(
            bench(
                Path(d),
                a.parts,
                a.part_mb,
                a.blocks,
                a.parallel,
                max(1, a.rounds),
                max(1, a.walks),
                a.profile,
                not a.no_fsync,
            )
        )
    # Medians over the rounds (each figure separately), never the best round.
    res = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    res["rounds"] = len(rows)
    if a.json:
        print(json.dumps(res, indent=2))
        return
    print(f"medians of {len(rows)} rounds (load average 1 min: {res['loadavg_1m']:.2f}):")
    print(f"dataset: {res['blocks']} blocks, {res['data_mb']:.0f} MB in {a.parts} parts")
    print(f"publish (add -r, pin):   {res['add_s']:.1f} s")
    print(f"raw cat of the parts ({a.parallel} parallel): {res['cat_mb_s']:.1f} MB/s")
    print(f"pull ipfs:// (verified): {res['pull_mb_s']:.1f} MB/s ({res['pull_s']:.1f} s)")
    print(f"pull / cat:              {res['ratio_pull_to_cat']:.2f}x")
    print(
        f"unverified read of every byte the pull reads (dag/export blocks/ + cat parts): "
        f"{res['raw_all_s']:.2f} s; pull / that: {res['ratio_pull_to_raw_all']:.2f}x"
    )
    print(
        f"metadata walk:           {res['walk_blocks_s']:.0f} blocks/s; CPU per walk: this "
        f"process {res['walk_self_cpu_ms']:.1f} ms, IPFS node {res['walk_ipfs_cpu_ms']:.1f} ms"
    )
    print(
        f"CPU seconds, IPFS node / this process: cat {res['cat_ipfs_cpu_s']:.2f} / "
        f"{res['cat_self_cpu_s']:.2f}; raw-all IPFS node {res['raw_all_ipfs_cpu_s']:.2f}; pull "
        f"{res['pull_ipfs_cpu_s']:.2f} / {res['pull_self_cpu_s']:.2f}; sha3-256 of the parts "
        f"{res['sha3_cpu_s']:.2f}"
    )
    print(
        f"least a verified pull needs on {res['cores']:.0f} cores: {res['bound_pull_s']:.2f} s "
        f"(max of raw-all and (IPFS node raw-all CPU + sha3 CPU) / cores) -> best possible "
        f"pull / cat here: {res['bound_ratio_pull_to_cat']:.2f}x; the pull reaches "
        f"{res['pull_of_bound']:.2f} of it (median per round)"
    )
    print(
        f"counting also receiving the bytes (this process's CPU during cat: "
        f"{res['cat_self_cpu_s']:.2f} s) and storing them as the pull does (block files and "
        f"parts: write, flush, rename: {res['store_cpu_s']:.2f} CPU s): "
        f"{res['bound_full_pull_s']:.2f} s; the pull "
        f"reaches {res['pull_of_full_bound']:.2f} of that (median per round)"
    )


if __name__ == "__main__":
    main()
