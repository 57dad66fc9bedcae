"""Subscriptions by URL and witnessing with real daemons (``docs/follow.md``).

1. A DataFusion derivative and its input, written by an owner with the offline CLI and served by
   a plain ``odf-node serve-http`` (no owner daemon, no gossip): follower A subscribes by URL,
   pulls both, replays and attests. The owner appends offline; A's poll (short interval) reaches
   the new head within one interval; follower B, polling only every 10 minutes, reaches it
   within 5 s of A's signed observation.
2. A scripted HTTP server that shows one chain to A and a diverging one to B (it tells the two
   daemons apart by the process owning each connection): both heads are observed, signed and
   gossiped; A reports a split view holding its own observation and B's, two signers, two
   heads of which neither descends from the other; A's console (headless Chromium) lists it on
   the dataset's page with both observations.

Inside ``unshare -rn`` like every daemon test (the daemons refuse otherwise).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.daemon_harness import CITIES_SNAPSHOT, ROOT, NodeProcess

DERIVATIVE = (ROOT / "examples" / "big-cities-datafusion.yaml").read_text()
POLL_S = 4.0


def cli(*args: str) -> str:
    """The offline CLI (no daemon on the owner's home)."""
    r = subprocess.run(
        [sys.executable, "-m", "node.cli", *args],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def follower(tmp: Path, name: str, poll_s: float) -> NodeProcess:
    node = NodeProcess(
        tmp / name,
        name,
        config={
            "ipfs": {"mode": "none"},
            "follow": {"poll_interval_s": poll_s, "jitter": 0.0, "min_gap_s": 0.2},
        },
    )
    node.init()
    node.launch()
    return node


def accepted_at(node: NodeProcess, did: str, head: str) -> float | None:
    """When ``node`` accepted ``head`` (its event's timestamp, seconds), if it did."""
    for e in node.call("node.events", kind="head.accepted", limit=1000):
        if e["did"] == did and e["data"].get("head") == head:
            return float(e["at_ns"]) / 1e9
    return None


def own_attestation(node: NodeProcess, did: str, head: str) -> dict[str, Any] | None:
    rows = node.call("attestations.list", did=did, head=head)
    return next((a for a in rows if a["own"]), None)


@pytest.fixture
def nodes() -> Iterator[list[NodeProcess]]:
    started: list[NodeProcess] = []
    yield started
    for n in started:
        n.stop()


def _connect(a: NodeProcess, b: NodeProcess) -> None:
    addr = a.call("node.status")["p2p"]["listen_addrs"][0]
    b.call("peers.connect", multiaddr=addr)


def test_url_followed_derivative_is_verified_attested_and_followed(
    tmp_path: Path, nodes: list[NodeProcess]
) -> None:
    owner = tmp_path / "owner"
    cli("init", "--home", str(owner))
    snap = tmp_path / "snap.yaml"
    snap.write_text(CITIES_SNAPSHOT + DERIVATIVE)
    cli("dataset", "create", str(snap), "--home", str(owner))
    cli("dataset", "ingest", "cities", str(ROOT / "examples" / "cities.csv"), "--home", str(owner))
    cli("dataset", "transform", "big-cities-df", "--home", str(owner))
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "node.cli", "serve-http", "--home", str(owner), "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        a = follower(tmp_path, "a", POLL_S)
        nodes.append(a)
        b = follower(tmp_path, "b", 600.0)
        nodes.append(b)
        a.wait_ready()
        b.wait_ready()
        _connect(a, b)
        url = f"http://127.0.0.1:{port}/big-cities-df"
        sub = a.call("subscriptions.add", did=url)
        did, head = sub["did"], sub["accepted_head"] or ""
        assert sub["source"] == url
        row = a.wait_for(
            "A's attestation",
            lambda: next(
                (s for s in a.call("subscriptions.list") if s["did"] == did and s["verification"]),
                None,
            ),
            timeout=240,
        )
        assert row["verification"] == "verified", row
        head = row["accepted_head"]
        att = a.wait_for("A attests", lambda: own_attestation(a, did, head), timeout=60)
        assert att["verdict"] == "verified"
        assert b.call("subscriptions.add", did=did, source=url)["source"] == url

        # The owner appends offline; the server serves the new head at once.
        cli(
            "dataset",
            "ingest",
            "cities",
            str(ROOT / "examples" / "more-cities.csv"),
            "--home",
            str(owner),
        )
        cli("dataset", "transform", "big-cities-df", "--home", str(owner))
        t_commit = time.time()  # the transform's commit is its last step
        new_head = (owner / "datasets").glob("*/refs/head")
        heads = {p.read_text() for p in new_head}
        t_a = a.wait_for(
            "A reaches the new head",
            lambda: next((t for h in heads if (t := accepted_at(a, did, h))), None),
            timeout=60,
            every=0.2,
        )
        t_b = b.wait_for(
            "B reaches the new head",
            lambda: next((t for h in heads if (t := accepted_at(b, did, h))), None),
            timeout=60,
            every=0.2,
        )
        print(
            f"\nA after the owner's commit: {t_a - t_commit:.2f} s (poll interval {POLL_S} s);"
            f" B after A: {t_b - t_a:.2f} s"
        )
        assert t_a - t_commit <= POLL_S + 3  # one interval, plus the pull under load
        assert t_b - t_a <= 5.0
        new = next(s for s in a.call("subscriptions.list") if s["did"] == did)["accepted_head"]
        a.wait_for("A attests the new head", lambda: own_attestation(a, did, new), timeout=240)
    finally:
        server.terminate()
        server.wait(10)


# ---- split view


def _client_pid(port: int, pids: list[int]) -> int | None:
    """Which of ``pids`` holds the loopback TCP socket whose local port is ``port`` (the
    namespace's ``/proc/net/tcp`` names the socket's inode; the process's fds name it too)."""
    inode = None
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        if int(f[1].rsplit(":", 1)[1], 16) == port:
            inode = f[9]
            break
    if inode is None:
        return None
    target = f"socket:[{inode}]"
    for pid in pids:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    return pid
            except OSError:
                continue
    return None


class _Views:
    """What the scripted server shows: to each client process (by PID) the ``refs/head`` of
    its own chain; blocks of both chains to everyone (they are content-addressed)."""

    def __init__(self, a: Path, b: Path) -> None:
        self.roots = {"a": a, "b": b}
        self.view_of: dict[int, str] = {}

    def head_root(self, client_port: int) -> Path | None:
        pid = _client_pid(client_port, list(self.view_of))
        return self.roots[self.view_of[pid]] if pid is not None else None


def _serve(views: _Views) -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            rel = self.path.split("/ds/", 1)[-1]
            if rel == "refs/head":
                root = views.head_root(self.client_address[1])
                roots = [root] if root is not None else []
            else:
                roots = list(views.roots.values())
            for root in roots:
                p = root / rel
                if p.is_file():
                    body = p.read_bytes()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
            self.send_error(404)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/ds"


def test_source_showing_two_chains_is_reported_as_a_split_view(
    tmp_path: Path, nodes: list[NodeProcess]
) -> None:
    owner = tmp_path / "owner"
    cli("init", "--home", str(owner))
    snap = tmp_path / "snap.yaml"
    snap.write_text(CITIES_SNAPSHOT.rsplit("---", 1)[0])
    cli("dataset", "create", str(snap), "--home", str(owner))
    (ds_dir,) = [p for p in (owner / "datasets").iterdir() if p.is_dir()]
    fork = tmp_path / "fork"
    shutil.copytree(ds_dir, fork)
    cli("dataset", "ingest", "cities", str(ROOT / "examples" / "cities.csv"), "--home", str(owner))
    # The other history: the same dataset, other data at the same position.
    shutil.move(str(ds_dir), str(tmp_path / "chain-a"))
    shutil.copytree(fork, ds_dir)
    cli(
        "dataset",
        "ingest",
        "cities",
        str(ROOT / "examples" / "more-cities.csv"),
        "--home",
        str(owner),
    )
    views = _Views(tmp_path / "chain-a", ds_dir)
    head_a = (views.roots["a"] / "refs/head").read_text().strip()
    head_b = (ds_dir / "refs/head").read_text().strip()
    # Neither head descends from the other: each chain lacks the other's head block.
    assert head_a != head_b
    assert not (views.roots["a"] / "blocks" / head_b).exists()
    assert not (ds_dir / "blocks" / head_a).exists()
    server, url = _serve(views)
    try:
        a = follower(tmp_path, "a", 600.0)
        nodes.append(a)
        b = follower(tmp_path, "b", 600.0)
        nodes.append(b)
        assert a.proc is not None and b.proc is not None
        # The source shows A one chain and B the other, whenever each asks: A's polls (B's
        # observation makes A poll at once) never see B's chain, so only B's observation can
        # reveal the split to A.
        views.view_of = {a.proc.pid: "a", b.proc.pid: "b"}
        a.wait_ready()
        b.wait_ready()
        _connect(a, b)
        sub_a = a.call("subscriptions.add", did=url)
        did = sub_a["did"]
        sub_b = b.call("subscriptions.add", did=url)
        assert sub_b["did"] == did
        assert (sub_a["accepted_head"], sub_b["accepted_head"]) == (head_a, head_b)
        split = a.wait_for(
            "A's split view",
            lambda: next(
                (d for d in a.call("disputes.list", did=did) if d["kind"] == "split-view"), None
            ),
            timeout=60,
        )
        a_id, b_id = a.call("node.status")["node_id"], b.call("node.status")["node_id"]
        by_signer = {o["signer"]: o for o in split["observations"]}
        assert set(by_signer) == {a_id, b_id}, split  # A's own and B's: two different signers
        assert by_signer[a_id]["head"] == head_a and by_signer[a_id]["own"]
        assert by_signer[b_id]["head"] == head_b and not by_signer[b_id]["own"]
        assert len(a.call("disputes.list", did=did)) == 1  # no report from A's own polls
        assert any(
            e["kind"] == "source.split_view"
            for e in a.call("node.events", kind="source.split_view")
        )
        # The evidence is the signed observations themselves: each decodes and verifies.
        from p2p.wire import Observation, decode

        for o in split["observations"]:
            msg = decode(bytes.fromhex(o["envelope"]))
            assert isinstance(msg.message, Observation)  # type: ignore[union-attr]
            assert msg.message.head.to_multibase() == o["head"]  # type: ignore[union-attr]
        _console_shows_split_view(a, did, url, {(a_id, head_a), (b_id, head_b)}, tmp_path)
    finally:
        server.shutdown()
        server.server_close()


def _console_shows_split_view(
    node: NodeProcess, did: str, source: str, observed: set[tuple[str, str]], tmp: Path
) -> None:
    """The node's console (real headless Chromium) lists the split view on the dataset's page
    with both observations: signer and head of each, as the page's script rendered them."""
    from tests.browser import SCREENSHOTS, start_chromium

    driver = start_chromium(tmp / "chromium-profile")
    js = driver.execute_script
    try:
        driver.set_page_load_timeout(30)
        driver.get(node.call("console.login")["url"])
        node.wait_for(
            "the console's overview",
            lambda: js(
                "return document.body.dataset.page === 'overview' && document.body.dataset.ready"
            ),
            timeout=30,
            every=0.1,
        )
        driver.get(f"{node.url.removesuffix('/rpc')}/ui/dataset?id={did}")
        article = "article.split-view"
        node.wait_for(
            "the split view on the dataset page",
            lambda: js(f"return document.querySelector('{article}') !== null"),
            timeout=30,
            every=0.1,
        )
        rows = js(
            f"return [...document.querySelectorAll('{article} tr[data-signer]')]"
            ".map(r => [r.dataset.signer, r.dataset.head])"
        )
        assert {(s, h) for s, h in rows} == observed and len(rows) == 2
        assert js(f"return document.querySelector('{article}').dataset.source") == source
        assert js(f"return document.querySelector('{article} .kind').textContent") == "split-view"
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(SCREENSHOTS / "follow-split-view.png"))
    finally:
        driver.quit()
