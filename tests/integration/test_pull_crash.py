"""Crash safety of pulls: SIGKILL at random points, restart, the store stays consistent.

The source is this node's own read-only HTTP server (in a subprocess, slowed down a little per
request so kills land mid-transfer). Each round extends the source, then forks a pull and kills
it with SIGKILL after a random delay, checks the store, and re-runs the pull to completion.
Pulls are forked from the test process (already imported), so a round costs well under a second.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from coordinator.metadata.timestamp import Timestamp
from coordinator.multiformats import Multihash
from coordinator.storage.dataset import Dataset
from coordinator.storage.repository import DatasetRepository
from coordinator.verify import verify_integrity
from node.transfer.pull import PullOptions, pull_url
from node.transfer.testing import add_data, new_dataset

pytestmark = pytest.mark.integration

ROUNDS = 24
MIN_KILLS = 20

_SERVER = """
import asyncio, sys
from pathlib import Path
from aiohttp import web
from coordinator.metadata.timestamp import Timestamp
from coordinator.storage.repository import DatasetRepository
from node.transfer.server import make_app

root, port = Path(sys.argv[1]), int(sys.argv[2])
repo = DatasetRepository(root / "datasets", root / "keys",
                         clock=lambda: Timestamp.parse("2024-01-01T00:00:00Z"), durable=False)
app = make_app(repo)

@web.middleware
async def slow(request, handler):
    await asyncio.sleep(0.01)
    return await handler(request)

app.middlewares.append(slow)
web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)
"""


def _clock() -> Timestamp:
    return Timestamp.parse("2024-06-01T00:00:00Z")


def _repo(path: Path) -> DatasetRepository:
    return DatasetRepository(path / "datasets", path / "keys", clock=_clock, durable=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _child_pull(dst: Path, url: str) -> None:
    """Body of a forked pull process (exits with 0 on success, 3 on error)."""
    try:
        asyncio.run(pull_url(_repo(dst), url, options=PullOptions(backoff_s=0.05)))
    except BaseException as e:  # pragma: no cover - reported through the exit status
        sys.stderr.write(f"pull failed: {e!r}\n")
        os._exit(3)
    os._exit(0)


def _fork_pull(dst: Path, url: str) -> int:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        _child_pull(dst, url)
    return pid


def _check_consistent(dst: Path) -> Multihash | None:
    """Every visible dataset verifies; every stored object (staging too) has its right name."""
    repo = _repo(dst)
    head = None
    for h in repo.list():
        ds = repo.open(h.alias)
        report = verify_integrity(ds)
        assert report.ok, report.problems
        head = ds.head()
    for d in (dst / "datasets").iterdir() if (dst / "datasets").exists() else ():
        for sub in ("data", "checkpoints", "blocks", "info/pull-cache/blocks"):
            folder = d / sub
            if not folder.is_dir():
                continue
            for f in folder.iterdir():
                if f.name.startswith("."):
                    continue
                assert Multihash.sha3_256(f.read_bytes()) == Multihash.from_multibase(f.name)
    return head


def test_sigkill_during_pull_then_restart(tmp_path: Path) -> None:
    src_home = tmp_path / "src"
    src_repo = _repo(src_home)
    probe = new_dataset(tmp_path / "probe")
    did = probe.state().dataset_id
    assert did is not None
    handle, _ = src_repo.create_empty(did, "ds")
    import shutil

    shutil.rmtree(handle.root)
    shutil.copytree(probe.layout.root, handle.root)
    (handle.root / "info" / "alias").write_text("ds")
    src = Dataset(handle.root, durable=False)
    rng = random.Random(1234)
    add_data(src, 20, 20_000, rng=rng)

    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", _SERVER, str(src_home), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}/ds"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{url}/refs/head", timeout=1).read()
                break
            except OSError:
                assert server.poll() is None, server.stderr.read() if server.stderr else ""
                assert time.monotonic() < deadline
                time.sleep(0.1)

        dst = tmp_path / "dst"
        kills = 0
        duration = 0.5
        for rnd in range(ROUNDS):
            if rnd:
                add_data(src, rng.randint(3, 8), rng.choice([2_000, 20_000, 60_000]), rng=rng)
            pid = _fork_pull(dst, url)
            time.sleep(rng.uniform(0.0, duration))
            done, status = os.waitpid(pid, os.WNOHANG)
            if done == 0:
                os.kill(pid, signal.SIGKILL)
                _, status = os.waitpid(pid, 0)
                kills += 1
            _check_consistent(dst)
            t0 = time.monotonic()
            pid = _fork_pull(dst, url)
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0, f"restart failed in round {rnd}"
            duration = max(0.15, time.monotonic() - t0)
            head = _check_consistent(dst)
            assert head == src.head(), f"round {rnd}: head differs after restart"
        assert kills >= MIN_KILLS, f"only {kills} pulls were killed mid-way"
        # Nothing but the dataset is left in the repository (no staging, no cache).
        names = [p.name for p in (dst / "datasets").iterdir()]
        assert names == [did.as_multibase()]
        assert not (dst / "datasets" / names[0] / "info" / "pull-cache").exists()
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(10)
