"""``GET /healthz`` and ``GET /readyz`` of a real daemon (no IPFS, no gossip: fast start).

``/readyz`` must fail, naming the check, while the state writer is blocked (a real SQLite write
lock held by another connection) and while the engine crash-loops (every DataFusion worker is a
"python" that exits at once, found through ``ODF_ENGINES_DIR``); ``/healthz`` stays 200.
"""

from __future__ import annotations

import json
import sqlite3
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import CITIES_SNAPSHOT, ROOT, NodeProcess

from coordinator.transform.engines import DATAFUSION_VERSIONS
from node.rpc.client import RpcCallError

pytestmark = pytest.mark.integration

DATAFUSION_DERIVATIVE = (ROOT / "examples" / "big-cities-datafusion.yaml").read_text()


def get(url: str) -> tuple[int, Any]:
    """Status and JSON body of a GET (no proxy)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    tmp = tmp_path_factory.mktemp("health")
    # An engine that exits at once: each pinned DataFusion release's "python" is `exit 3`.
    engines = tmp / "engines"
    for version in DATAFUSION_VERSIONS:
        python = engines / f"datafusion-{version}" / "bin" / "python"
        python.parent.mkdir(parents=True)
        python.write_text("#!/bin/sh\necho 'worker: refusing to start' >&2\nexit 3\n")
        python.chmod(0o755)
    n = NodeProcess(
        tmp / "home",
        "health-node",
        config={
            "ipfs": {"mode": "none"},
            "p2p": {"enabled": False},
            "health": {"max_write_delay_s": 0.5, "engine_crash_failures": 3},
        },
        env={"ODF_ENGINES_DIR": str(engines)},
    )
    n.init()
    n.launch()
    try:
        n.wait_ready(120)
        yield n
    finally:
        n.stop()


def http_base(n: NodeProcess) -> str:
    return str(n.call("node.status")["http_url"])


def test_ready_when_every_check_passes(node: NodeProcess) -> None:
    status, body = get(http_base(node) + "/healthz")
    assert status == 200 and body["status"] == "ok"
    status, body = get(http_base(node) + "/readyz")
    assert status == 200, body
    assert body["ready"] is True and body["failing"] == []
    assert set(body["checks"]) == {
        "services",
        "state_writer",
        "engine",
        "gossip_peers",
        "verify_backlog",
    }
    assert all(c["ok"] for c in body["checks"].values())


def test_blocked_state_writer_fails_readiness(node: NodeProcess) -> None:
    base = http_base(node)
    lock = sqlite3.connect(node.home / "state.db", isolation_level=None, timeout=10)
    try:
        lock.execute("BEGIN IMMEDIATE")  # the write lock: the daemon's writer now waits
        t0 = time.monotonic()
        status, body = get(base + "/readyz")
        took = time.monotonic() - t0
        assert status == 503, body
        assert body["failing"] == ["state_writer"]
        assert "has not committed within 0.5 s" in body["checks"]["state_writer"]["detail"]
        assert took < 5, took  # bounded by max_write_delay_s, not by the lock
        assert get(base + "/healthz")[0] == 200  # liveness is unaffected
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    # Released: the queued probe commits and readiness comes back.
    node.wait_for("ready again", lambda: get(base + "/readyz")[0] == 200, timeout=20)


def test_crash_looping_engine_fails_readiness(node: NodeProcess, tmp_path: Path) -> None:
    base = http_base(node)
    node.call("dataset.create", snapshot_yaml=CITIES_SNAPSHOT + DATAFUSION_DERIVATIVE)
    csv = tmp_path / "cities.csv"
    csv.write_text("event_time,city,population\n2020-01-01T00:00:00Z,A,1000\n")
    node.call("dataset.ingest", ref="cities", files=[str(csv)])
    for _ in range(3):  # each transform tries to start the worker once
        with pytest.raises(RpcCallError, match="did not start"):
            node.call("dataset.transform", ref="big-cities-df")
    status, body = get(base + "/readyz")
    assert status == 503, body
    assert body["failing"] == ["engine"]
    detail = body["checks"]["engine"]["detail"]
    assert detail.startswith("crash-looping:") and "refusing to start" in detail, detail
    assert get(base + "/healthz")[0] == 200
