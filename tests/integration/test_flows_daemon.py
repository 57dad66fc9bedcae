"""Flows on a real daemon (``docs/flows.md``): datasets that update themselves, no command typed.

1. A root with a ``Url`` polling source (a local HTTP server whose file the test changes) is
   scheduled every 2 s, its derivative (DataFusion) on input: each change of the file becomes a
   new root head, a transform step of the derivative and an announcement of both heads, while
   the test only watches; an unchanged file (304) commits nothing.
2. A ``FilesGlob`` root picks up new files in name order, each once, across a daemon restart.

Runs in a loopback-only network namespace (``unshare -rn``); the daemon has no IPFS node.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import NodeProcess
from netns import require_loopback_only

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


class Served:
    """The served file: body and ETag, changed by the test; the requests' conditions."""

    def __init__(self) -> None:
        self.body = b""
        self.etag = '"0"'
        self.conditional: list[str | None] = []


@pytest.fixture
def server() -> Iterator[tuple[str, Served]]:
    served = Served()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            served.conditional.append(self.headers.get("If-None-Match"))
            if self.headers.get("If-None-Match") == served.etag:
                self.send_response(304)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("ETag", served.etag)
            self.send_header("Content-Length", str(len(served.body)))
            self.end_headers()
            self.wfile.write(served.body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", served
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeProcess]:
    require_loopback_only()
    p = NodeProcess(
        tmp_path / "node",
        "flows",
        config={"ipfs": {"mode": "none"}, "flows": {"tick_s": 0.2}},
    )
    p.init()
    p.launch()
    try:
        p.wait_ready()
        yield p
    finally:
        p.stop()


def snapshots(url: str) -> str:
    return f"""\
kind: DatasetSnapshot
version: 1
content:
  name: tides
  kind: Root
  metadata:
    - kind: SetPollingSource
      fetch:
        kind: Url
        url: {url}
      read:
        kind: Csv
        header: true
        schema: ["event_time TIMESTAMP", "port STRING", "height BIGINT"]
      merge:
        kind: Ledger
        primaryKey: [event_time, port]
---
kind: DatasetSnapshot
version: 1
content:
  name: high-tides
  kind: Derivative
  metadata:
    - kind: SetTransform
      inputs:
        - datasetRef: tides
      transform:
        kind: Sql
        engine: datafusion
        query: SELECT op, event_time, port, height FROM tides WHERE height > 100
"""


def rows(node: NodeProcess) -> dict[str, dict[str, Any]]:
    return {r["alias"]: r for r in node.call("dataset.list")}


def announced(node: NodeProcess, did: str) -> set[str]:
    events = node.call("node.events", kind="announce", limit=1000)
    return {e["data"]["head"] for e in events if e["did"] == did}


def test_url_root_and_its_derivative_update_and_publish_by_themselves(
    node: NodeProcess, server: tuple[str, Served]
) -> None:
    base, served = server
    served.body = b"event_time,port,height\n2050-01-01T00:00:00Z,A,120\n2050-01-01T00:00:00Z,B,90\n"
    served.etag = '"1"'
    created = node.call("dataset.create", snapshot_yaml=snapshots(f"{base}/tides.csv"))
    ids = {c["alias"]: c["id"] for c in created}
    s = node.call("dataset.schedule", ref="tides", every="2s")
    assert s["trigger"] == "every 2s" and s["next_run"]
    assert node.call("dataset.schedule", ref="high-tides", on_input=True)["trigger"] == "on input"

    def caught_up(tides: int, high: int) -> dict[str, dict[str, Any]] | None:
        r = rows(node)
        if r["tides"]["records"] != tides or r["high-tides"]["records"] != high:
            return None
        # Both new heads announced (published by the flows, no command typed).
        if r["tides"]["head"] not in announced(node, ids["tides"]):
            return None
        if r["high-tides"]["head"] not in announced(node, ids["high-tides"]):
            return None
        return r

    t0 = time.monotonic()
    first = node.wait_for("the first poll, transform and publications", lambda: caught_up(2, 1))
    first_s = time.monotonic() - t0

    # Unchanged: the next polls are answered 304 and commit nothing.
    n = len(served.conditional)
    node.wait_for("two more polls", lambda: len(served.conditional) >= n + 2, timeout=30)
    assert served.conditional[-1] == '"1"'
    assert rows(node)["tides"]["head"] == first["tides"]["head"]

    # The file changes: the root, the derivative and their announcements follow.
    served.body += b"2050-01-02T00:00:00Z,A,130\n"
    served.etag = '"2"'
    t1 = time.monotonic()
    second = node.wait_for("the change to flow through", lambda: caught_up(3, 2))
    change_s = time.monotonic() - t1
    assert second["high-tides"]["head"] != first["high-tides"]["head"]

    flows = node.call("flows.list")
    kinds = {(r["kind"], r["alias"]) for r in flows["runs"] if r["state"] == "done"}
    assert {("poll", "tides"), ("transform", "high-tides")} <= kinds
    assert not [r for r in flows["runs"] if r["state"] == "failed"]
    assert {s["alias"]: s["trigger"] for s in flows["schedules"]} == {
        "tides": "every 2s",
        "high-tides": "on input",
    }
    print(
        f"first poll to both announced: {first_s:.1f} s; a change to both: {change_s:.1f} s"
    )


GLOB = """\
kind: DatasetSnapshot
version: 1
content:
  name: readings
  kind: Root
  metadata:
    - kind: SetPollingSource
      fetch:
        kind: FilesGlob
        path: {dir}/readings-*.csv
      read:
        kind: Csv
        header: true
        schema: ["event_time TIMESTAMP", "v BIGINT"]
      merge:
        kind: Append
"""


def source_states(node: NodeProcess) -> list[str]:
    """The file names the root's AddData blocks recorded, oldest first."""
    log = node.call("dataset.log", ref="readings", limit=1000)
    out = []
    for e in reversed(log):
        ev = e["block"]["event"]
        if ev["kind"] == "AddData" and ev.get("newSourceState"):
            out.append(ev["newSourceState"]["value"])
    return out


def test_files_glob_root_takes_new_files_in_order_once_across_a_restart(
    node: NodeProcess, tmp_path: Path
) -> None:
    src = tmp_path / "src"
    src.mkdir()

    def drop(name: str, v: int) -> None:
        (src / name).write_text(f"event_time,v\n2050-01-01T00:00:00Z,{v}\n")

    # Out of name order on disk; ingested in name order.
    drop("readings-02.csv", 2)
    drop("readings-01.csv", 1)
    node.call("dataset.create", snapshot_yaml=GLOB.format(dir=src))
    node.call("dataset.schedule", ref="readings", every="1s")
    node.wait_for("two files", lambda: rows(node)["readings"]["records"] == 2, timeout=60)
    drop("readings-03.csv", 3)
    node.wait_for("the third file", lambda: rows(node)["readings"]["records"] == 3, timeout=60)

    node.stop()
    drop("readings-04.csv", 4)
    node.launch()
    node.wait_ready()
    node.wait_for("the file added while stopped", lambda: rows(node)["readings"]["records"] == 4)
    # Several more polls after the restart: nothing is taken twice.
    runs = len(node.call("flows.list", limit=1000)["runs"])
    node.wait_for(
        "more polls", lambda: len(node.call("flows.list", limit=1000)["runs"]) >= runs + 3
    )
    assert rows(node)["readings"]["records"] == 4
    assert source_states(node) == [f"readings-0{i}.csv" for i in (1, 2, 3, 4)]
