"""Hostile inputs of issue 39, defects 6-9, measured in-process (no daemon, no network).

Each case runs in its own child process, so that its peak RSS (``ru_maxrss``) is its own:

* ``restore-sparse``: a backup with a GNU sparse member that expands to 2 GiB (the issue's
  10 KB archive): bytes written, outcome;
* ``manifest-tiny-objects`` / ``manifest-deep`` / ``manifest-files``: 48 MB manifests of tiny
  objects (the issue's 1.3 GB), of nesting, and (55 MB) of 300,000 well-formed entries, each
  beside its ``-before`` twin parsed with ``json.loads`` as the restore did before;
* ``schedules``: ``--every 107000d`` refused; a row stored with that period by an older version
  beside 50 good schedules, ticked 20 times: runs queued for the good ones;
* ``split-view``: a source that stays diverged, and one naming two forks within each poll, each
  polled 100 times: records, their counter, our observations;
* ``intoto-reseal``: a peer's attestation re-sealed by a stranger with an added predicate field,
  verified 1,000 times.

Prints one JSON object per case. ``python tests/bench/bench_hostile_inputs.py [--only CASE]``
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "unit")]


def _written() -> int:
    """Bytes this process has passed to write(2) so far (``wchar`` of /proc/self/io)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    return -1


def restore_sparse(tmp: Path) -> dict[str, Any]:
    import test_backup as tb

    from node.adapters.backup_archive import MalformedArchive, restore_backup, write_backup

    src = tb.make_home(tmp / "src", subscriptions=2)
    write_backup(src.path, tmp / "b.tar", datasets=True)
    bad = tmp / "sparse.tar"
    tb.insert_before_manifest(
        tmp / "b.tar", bad, tb.gnu_sparse_header("datasets/s", 512, 2 << 30) + bytes(512)
    )
    out = tmp / "out"
    out.mkdir()
    w0 = _written()
    t = time.monotonic()
    try:
        restore_backup(bad, out / "dst")
        outcome = "restored"
    except MalformedArchive as e:
        outcome = f"refused: {e}"
    return {
        "archive_bytes": bad.stat().st_size,
        "declared_bytes": 2 << 30,
        "bytes_written": _written() - w0,
        "seconds": round(time.monotonic() - t, 3),
        "outcome": outcome[:160],
    }


def _maxrss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _manifest(tmp: Path, chunks: Iterator[str], old: bool) -> dict[str, Any]:
    """Parse a manifest written chunk by chunk to a file and read back (so building it does not
    set the peak RSS): with the restore's parser, or (``old``) ``json.loads`` as before."""
    from node.adapters.backup_archive import MalformedArchive, _parse_manifest

    path = tmp / "manifest.json"
    with path.open("w") as f:
        for c in chunks:
            f.write(c)
    text = path.read_text()
    before = _maxrss_mb()
    t = time.monotonic()
    try:
        if old:
            json.loads(text)
            outcome = "json.loads returned"
        else:
            _, files = _parse_manifest(text)
            outcome = f"parsed: {len(files or {})} files"
    except MalformedArchive as e:
        outcome = f"refused: {e}"
    except RecursionError as e:
        outcome = f"RecursionError: {e}"
    return {
        "parser": "json.loads (before)" if old else "_parse_manifest",
        "manifest_bytes": len(text),
        "seconds": round(time.monotonic() - t, 3),
        "rss_before_parse_mb": before,
        "outcome": outcome[:160],
    }


def _tiny(n: int = 16_000_000) -> Iterator[str]:
    yield '{"files": ['
    for i in range(0, n, 100_000):
        yield ",".join(["{}"] * min(100_000, n - i)) + ("," if i + 100_000 < n else "")
    yield "]}"


def _deep(n: int = 24_000_000) -> Iterator[str]:
    yield '{"files": '
    for _ in range(n // 1_000_000):
        yield "[" * 1_000_000
    for _ in range(n // 1_000_000):
        yield "]" * 1_000_000
    yield "}"


def _files(n: int = 300_000) -> Iterator[str]:
    entry = '{"path": "datasets/x/blocks/%064x", "size": 1, "sha256": "%064x"}'
    yield '{"files": ['
    yield ",".join(entry % (i, i) for i in range(n))
    yield "]}"


def manifest_tiny_objects(tmp: Path, old: bool = False) -> dict[str, Any]:
    return _manifest(tmp, _tiny(), old)


def manifest_deep(tmp: Path, old: bool = False) -> dict[str, Any]:
    return _manifest(tmp, _deep(), old)


def manifest_files(tmp: Path, old: bool = False) -> dict[str, Any]:
    return _manifest(tmp, _files(), old)


def schedules(tmp: Path) -> dict[str, Any]:
    import test_flows as tf

    from node.app.errors import InvalidArgument
    from node.app.flows import POLL, parse_every

    try:
        parse_every("107000d")
        refused = "accepted"
    except InvalidArgument as e:
        refused = str(e)
    n = tf.Node(tmp)
    bad = n.create(tf.ROOT.format(name="bad"))
    # The row an older version stored: the first tick overflowed SQLite and stopped them all.
    n.sync.set_schedule(bad, every_s=107000 * 86400.0, next_ns=n.clock.now)
    good = {n.create(tf.ROOT.format(name=f"g{i}")) for i in range(50)}
    for i in range(50):
        asyncio.run(n.flows.schedule(f"g{i}", every="10s"))
    queued = 0
    t = time.monotonic()
    for _ in range(20):
        queued += sum(1 for kind, did in n.tick() if kind == POLL and did in good)
        while (item := n.sync.claim(n.clock.now, kinds=[POLL])) is not None:
            n.sync.complete(item.id)
        n.clock.now += 10 * tf.S
    rows = asyncio.run(n.flows.flows()).schedules
    return {
        "every_107000d": refused[:120],
        "good_schedules": len(good),
        "ticks": 20,
        "good_runs_queued": queued,
        "bad_row_error": next(s.error for s in rows if s.id == bad),
        "seconds": round(time.monotonic() - t, 3),
    }


def split_view(tmp: Path) -> dict[str, Any]:
    import test_follow_split_views as ts

    out: dict[str, Any] = {}
    for name, diverged in (("diverged", True), ("two_heads_per_poll", False)):
        w = ts.World(tmp / name)
        w.source.heads = [w.theirs]
        w.pull.diverged = diverged
        t = time.monotonic()
        w.poll(100)
        views = w.sync.split_views()
        out[name] = {
            "polls": 100,
            "records": len(views),
            "seen": [v.seen for v in views],
            "own_observations": len(w.sync.observations(w.did.as_did_str())),
            "ms_per_poll": round((time.monotonic() - t) * 10, 2),
        }
    return out


def intoto_reseal(tmp: Path) -> dict[str, Any]:
    from coordinator.identity import PrivateKey
    from p2p import vectors
    from p2p.errors import EnvelopeError
    from p2p.intoto import seal, statement, verify_envelope
    from p2p.wire import sign_message

    _, node_key, _ = vectors.keys()
    stmt = statement(sign_message(vectors.attestation(), node_key))
    stmt["predicate"]["trustedBy"] = ["did:key:z6MkEveryone"]
    stranger = PrivateKey.from_seed(b"\x5a" * 32)
    env = seal(stmt, stranger.dataset_id().as_did_key(), stranger.sign)
    refused = 0
    problem = ""
    t = time.monotonic()
    for _ in range(1000):
        try:
            verify_envelope(env)
        except EnvelopeError as e:
            refused += 1
            problem = str(e)
    return {
        "verified": 1000,
        "refused": refused,
        "problem": problem[:120],
        "us_per_verify": round((time.monotonic() - t) * 1000, 1),
        "payload_fields": sorted(json.loads(base64.b64decode(env["payload"]))["predicate"]),
    }


CASES: dict[str, Callable[[Path], dict[str, Any]]] = {
    "restore-sparse": restore_sparse,
    "manifest-tiny-objects": manifest_tiny_objects,
    "manifest-tiny-objects-before": lambda tmp: manifest_tiny_objects(tmp, old=True),
    "manifest-deep": manifest_deep,
    "manifest-deep-before": lambda tmp: manifest_deep(tmp, old=True),
    "manifest-files": manifest_files,
    "manifest-files-before": lambda tmp: manifest_files(tmp, old=True),
    "schedules": schedules,
    "split-view": split_view,
    "intoto-reseal": intoto_reseal,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", action="append", choices=sorted(CASES), help="run these cases")
    ap.add_argument("--case", choices=sorted(CASES), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.case:  # the child: one case, its own peak RSS
        with tempfile.TemporaryDirectory() as tmp:
            result = CASES[args.case](Path(tmp))
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({"case": args.case, **result, "peak_rss_mb": round(rss / 1024, 1)}))
        return
    for case in args.only or list(CASES):
        done = subprocess.run(
            [sys.executable, __file__, "--case", case],
            capture_output=True,
            text=True,
            check=False,
        )
        line = done.stdout.strip().splitlines()[-1:] or [
            json.dumps({"case": case, "error": done.stderr.strip()[-400:]})
        ]
        print(cast(str, line[0]), flush=True)


if __name__ == "__main__":
    main()
