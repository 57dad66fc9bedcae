"""A real daemon process (no IPFS, no gossip: fast start) behind its JSON-RPC boundary.

Hostile and broken requests get the right JSON-RPC errors and the daemon keeps serving; the CLI
finds the daemon through the cookie; the home lock keeps a second writer out; SIGTERM shuts
down cleanly and removes the cookie.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import ROOT, NodeProcess

from node.rpc.client import RpcCallError, call_sync

pytestmark = pytest.mark.integration

FAST: dict[str, dict[str, Any]] = {"ipfs": {"mode": "none"}, "p2p": {"enabled": False}}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    n = NodeProcess(tmp_path_factory.mktemp("rpc") / "home", "rpc-node", config=FAST)
    n.init()
    n.launch()
    try:
        n.wait_ready(120)
        yield n
    finally:
        n.stop()


def raw_post(n: NodeProcess, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    h = {"Content-Type": "application/json", "Authorization": f"Bearer {n.token}"}
    h.update(headers or {})
    h = {k: v for k, v in h.items() if v}
    req = urllib.request.Request(n.url, data=body, method="POST", headers=h)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=10) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    return status, json.loads(raw) if raw else None


def req(method: str, params: Any = None, rid: int = 1) -> bytes:
    obj: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        obj["params"] = params
    return json.dumps(obj).encode()


@pytest.mark.parametrize(
    ("body", "headers", "code"),
    [
        (req("node.status"), {"Authorization": ""}, -32010),
        (req("node.status"), {"Authorization": "Bearer " + "0" * 64}, -32010),
        (req("node.status"), {"Origin": "http://evil.example"}, -32011),
        (req("node.status"), {"Host": "evil.example"}, -32011),
        (b'{"jsonrpc": "2.0", "id": 1, "method": ', {}, -32700),
        (b'{"jsonrpc": "1.0", "id": 1, "method": "node.status"}', {}, -32600),
        (req("node.nope"), {}, -32601),
        (req("subscriptions.add", {"did": 5}), {}, -32602),
        (req("subscriptions.add", {}), {}, -32602),
        (req("subscriptions.add", {"did": "did:odf:garbage"}), {}, -32002),
        (req("dataset.log", {"ref": "missing"}), {}, -32001),
        (b"[]", {}, -32600),
        (b"[" + b",".join([req("rpc.ping", rid=i) for i in range(60)]) + b"]", {}, -32013),
    ],
)
def test_bad_requests_get_the_right_error_and_the_daemon_keeps_serving(
    node: NodeProcess, body: bytes, headers: dict[str, str], code: int
) -> None:
    _, answer = raw_post(node, body, headers)
    assert answer["error"]["code"] == code, answer
    assert node.call("node.status")["node_id"].startswith("did:key:")


def test_oversized_body_is_refused(node: NodeProcess) -> None:
    big = req("subscriptions.add", {"did": "x" * 2_000_000})
    status, answer = raw_post(node, big)
    assert status == 413 and answer["error"]["code"] == -32012
    node.call("rpc.ping")  # raises if the daemon stopped answering
    assert node.call("node.status")["datasets"] == 0


def test_openrpc_document_lists_every_method(node: NodeProcess) -> None:
    from node.commands.catalog import COMMANDS

    doc = node.call("rpc.discover")
    names = {m["name"] for m in doc["methods"]}
    assert {c.name for c in COMMANDS} <= names
    sub = next(m for m in doc["methods"] if m["name"] == "subscriptions.add")
    # New parameters are appended, so positional calls of older clients keep their meaning.
    assert [p["name"] for p in sub["params"]] == [
        "did",
        "alias",
        "policy",
        "k",
        "attesters",
        "source",
    ]


def test_debug_memory_answers_native_figures_without_tracing(node: NodeProcess) -> None:
    """``node.debug_memory`` on a daemon without ``ODF_NODE_TRACEMALLOC``: no tracemalloc figures,
    the native allocators' (glibc's heap; Arrow's pool once Arrow is loaded)."""
    out = node.call("node.debug_memory")
    assert out["traced_mb"] is None and out["top_growth"] == []
    glibc = out["native"]["glibc"]
    assert glibc["in_use_mb"] > 1
    assert glibc["arena_mb"] >= glibc["in_use_mb"]
    arrow = out["native"]["arrow"]
    assert arrow is None or arrow["backend"] in {"mimalloc", "jemalloc", "system"}


def test_metrics_report_event_loop_lag(node: NodeProcess) -> None:
    """The loop monitor runs: its histogram counts observations (one per 0.5 s)."""
    import time

    http = node.call("node.status")["http_url"]
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def count() -> float:
        with opener.open(f"{http}/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("odf_event_loop_lag_seconds_count"):
                    return float(line.split()[-1])
        raise AssertionError("odf_event_loop_lag_seconds missing from /metrics")

    first = count()
    time.sleep(1.6)
    assert count() >= first + 2


def test_cli_talks_to_the_daemon_and_the_home_is_locked(node: NodeProcess) -> None:
    did = "did:odf:fed01" + "ab" * 32
    env = {k: v for k, v in os.environ.items() if not k.startswith("ODF_NODE_")}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "node.cli", *args, "--home", str(node.home)],
            check=False,
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=60,
        )

    sock = node.home / "rpc.sock"
    assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600  # the CLI uses it when present
    assert call_sync(f"unix:{sock}", node.token, "node.status", None, 10)["node_id"]
    with pytest.raises(RpcCallError) as e:
        call_sync(f"unix:{sock}", "0" * 64, "node.status", None, 10)
    assert e.value.code == -32010
    r = cli("subscribe", did, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["did"] == did
    listed = node.call("subscriptions.list")
    assert [s["did"] for s in listed] == [did]
    r = cli("status", "--json")
    assert json.loads(r.stdout)["subscriptions"] == 1  # live status came over RPC
    r = cli("events", "--kind", "subscribe", "--json")
    assert [(e["kind"], e["did"]) for e in json.loads(r.stdout)] == [("subscribe", did)], r.stderr
    # A second daemon on the same home is refused with a clear message.
    r = cli("run")
    assert r.returncode == 1 and "in use" in r.stderr
    r = cli("unsubscribe", did, "--json")
    assert json.loads(r.stdout)["removed"] is True
    with pytest.raises(RpcCallError) as e:
        call_sync(node.url, "f" * 64, "node.status", None, 5)
    assert e.value.code == -32010


def test_cli_ingests_linked_objects_through_the_daemon(node: NodeProcess, tmp_path: Path) -> None:
    """--link-column / --object reach the daemon's dataset.ingest (they once forced the offline
    path, which the daemon's lock then refused)."""
    from coordinator.multiformats import Multihash

    env = {k: v for k, v in os.environ.items() if not k.startswith("ODF_NODE_")}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "node.cli", *args, "--home", str(node.home), "--json"],
            check=False,
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=120,
        )

    snap = tmp_path / "photos.yaml"
    snap.write_text(
        "kind: DatasetSnapshot\nversion: 1\ncontent:\n  name: photos\n  kind: Root\n"
        "  metadata:\n    - kind: AddPushSource\n      sourceName: default\n"
        "      read: {kind: NdJson, schema: ['name STRING', 'image STRING']}\n"
        "      merge: {kind: Append}\n"
    )
    obj = tmp_path / "cat.jpg"
    obj.write_bytes(b"\xff\xd8 not really a jpeg")
    h = Multihash.sha3_256(obj.read_bytes()).to_multibase()
    rows = tmp_path / "rows.ndjson"
    rows.write_text(f'{{"name": "cat", "image": "{h}"}}\n')
    assert cli("dataset", "create", str(snap)).returncode == 0
    r = cli("dataset", "ingest", "photos", str(rows), "--link-column", "image")
    assert r.returncode == 1 and h in r.stderr, r.stderr  # the object is missing: refused
    r = cli(
        "dataset", "ingest", "photos", str(rows), "--link-column", "image", "--object", str(obj)
    )
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["linked_objects"] == {"num_objects_naive": 1, "size_naive": 20}
    assert isinstance(result["publish_work_id"], int)  # the daemon ran it: it queues publication


def test_cli_polls_an_http_source_through_the_daemon(node: NodeProcess, tmp_path: Path) -> None:
    """``dataset pull ALIAS`` of a root with a polling source runs on the daemon (its transfer
    loop fetches the URL), commits and queues publication; a 304 adds nothing; a 404 is a
    NOT_FOUND error and commits nothing."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    body = b"city,population\nA,1\nB,2\n"

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/cities.csv":
                self.send_error(404)
            elif self.headers.get("If-None-Match") == '"1"':
                self.send_response(304)
                self.end_headers()
            else:
                self.send_response(200)
                self.send_header("ETag", '"1"')
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ODF_NODE_")}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "node.cli", *args, "--home", str(node.home), "--json"],
            check=False,
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=120,
        )

    try:
        for name, path in (("polled", "cities.csv"), ("gone", "gone.csv")):
            snap = tmp_path / f"{name}.yaml"
            snap.write_text(
                f"kind: DatasetSnapshot\nversion: 1\ncontent:\n  name: {name}\n  kind: Root\n"
                "  metadata:\n    - kind: SetPollingSource\n"
                f"      fetch: {{kind: Url, url: '{base}/{path}'}}\n"
                "      read: {kind: Csv, header: true, schema: ['city STRING', 'population "
                "BIGINT']}\n      merge: {kind: Ledger, primaryKey: [city]}\n"
            )
            assert cli("dataset", "create", str(snap)).returncode == 0
        r = cli("dataset", "pull", "polled")
        assert r.returncode == 0, r.stderr
        result = json.loads(r.stdout)
        assert result["source"] == "polling" and result["records"] == 2
        assert isinstance(result["publish_work_id"], int)  # the daemon ran it
        r = cli("dataset", "pull", "polled")
        assert r.returncode == 0 and json.loads(r.stdout)["comparison"] == "equal", r.stderr
        r = cli("dataset", "pull", "gone")
        assert r.returncode == 1 and "HTTP 404" in r.stderr, r.stderr
        with pytest.raises(RpcCallError) as e:
            node.call("dataset.pull", url="gone")
        assert e.value.code == -32001  # NOT_FOUND
        (row,) = [d for d in node.call("dataset.list") if d["alias"] == "gone"]
        assert row["blocks"] == 2  # Seed + SetPollingSource: nothing committed
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_sigterm_stops_cleanly_and_removes_the_cookie(tmp_path: Path) -> None:
    n = NodeProcess(tmp_path / "home", "stopper", config=FAST)
    n.init()
    n.launch()
    try:
        n.wait_ready(120)
        assert n.proc is not None
        n.proc.send_signal(signal.SIGTERM)
        assert n.proc.wait(60) == 0
        assert not (n.home / "rpc.cookie").exists()
        assert "service state stopped" in n.tail()
    finally:
        n.stop()


def test_ephemeral_node_uses_a_temporary_home_and_removes_it(tmp_path: Path) -> None:
    import re
    import time

    env = {k: v for k, v in os.environ.items() if not k.startswith("ODF_NODE_")}
    log = tmp_path / "eph.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "node.cli", "run", "--ephemeral", "--ipfs", "none"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        home = None
        while time.monotonic() < deadline and home is None:
            m = re.search(r"odf-node ready: home=(\S+)", log.read_text())
            home = Path(m.group(1)) if m else None
            time.sleep(0.2)
        assert home is not None, log.read_text()[-3000:]
        from node.rpc.cookie import read_cookie

        url, token = read_cookie(home)
        assert ":7373/" not in url  # random ports, not the defaults
        assert call_sync(url, token, "node.status", None, 10)["home"] == str(home)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert not home.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
