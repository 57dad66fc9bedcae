"""Fuzz: pulls from a scripted hostile HTTP source, through a real daemon's ``dataset.pull``.

The source is a plain HTTP server on 127.0.0.1 in this process that answers the Simple Transfer
Protocol paths (``refs/head``, ``blocks/<hash>``, ``data/…``) from a *script* drawn per example:
a real small dataset's files, then damaged — a head naming a block that is missing or garbage,
blocks swapped or truncated, a redirect to a refused address, a huge declared length, an HTML
error page, an endless chain of redirects. Whatever the script, ``dataset.pull`` must answer
with the pulled dataset or a typed JSON-RPC error (never ``-32603``), must not leave a partly
pulled dataset behind (the alias either names a complete chain or does not exist), and the
daemon must keep answering ``node.status``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import NodeProcess
from fuzz_profile import fuzz
from hypothesis import given
from hypothesis import strategies as st
from netns import require_loopback_only

from node.rpc.client import RpcCallError

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

SNAPSHOT = """\
kind: DatasetSnapshot
version: 1
content:
  name: src
  kind: Root
  metadata:
    - kind: AddPushSource
      sourceName: default
      read:
        kind: Csv
        header: true
        schema: ["city STRING", "population BIGINT"]
      merge:
        kind: Append
    - kind: SetInfo
      description: a source to damage
"""


ROOT = Path(__file__).resolve().parents[2]


def cli(home: Path, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "node.cli", *args, "--home", str(home)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return proc.stdout


class Script:
    """What the hostile server answers: path -> (status, headers, body)."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.overrides: dict[str, tuple[int, dict[str, str], bytes]] = {}


class HostileServer:
    def __init__(self) -> None:
        self.script = Script()
        script = self.script

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                path = self.path.split("/", 2)[-1] if self.path.count("/") >= 2 else ""
                if path in script.overrides:
                    status, headers, body = script.overrides[path]
                elif path in script.files:
                    status, headers, body = 200, {}, script.files[path]
                else:
                    status, headers, body = 404, {}, b"not found"
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                if "Content-Length" not in headers:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> HostileServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NodeProcess, HostileServer]]:
    require_loopback_only()
    base = tmp_path_factory.mktemp("fuzzpull")
    node = NodeProcess(base / "node", "fuzzpull", config={"ipfs": {"mode": "none"}})
    node.init()
    node.launch()
    try:
        # The source dataset lives in another home, built offline with the CLI.
        src_home = base / "src"
        snap = base / "src.yaml"
        snap.write_text(SNAPSHOT)
        csv = base / "rows.csv"
        csv.write_text("city,population\nA,1\nB,2\n")
        cli(src_home, "init")
        did = json.loads(cli(src_home, "dataset", "create", str(snap), "--json"))[0]["id"]
        cli(src_home, "dataset", "ingest", "src", str(csv))
        node.wait_ready()
        ds_dir = src_home / "datasets" / did.removeprefix("did:odf:")
        files = {
            str(p.relative_to(ds_dir)): p.read_bytes()
            for p in ds_dir.rglob("*")
            if p.is_file()
            and p.parts[len(ds_dir.parts)] in ("refs", "blocks", "data", "checkpoints")
        }
        with HostileServer() as server:
            server.script.files = files
            yield node, server
    finally:
        node.stop()


DAMAGES = [
    "garbage-head",
    "missing-block",
    "garbage-block",
    "truncated-block",
    "swapped-blocks",
    "redirect-metadata",
    "redirect-loop",
    "huge-length",
    "html-error",
    "missing-data",
    "truncated-data",
]


@st.composite
def damage(
    draw: st.DrawFn, files: dict[str, bytes]
) -> dict[str, tuple[int, dict[str, str], bytes]]:
    blocks = sorted(k for k in files if k.startswith("blocks/"))
    data = sorted(k for k in files if k.startswith("data/"))
    out: dict[str, tuple[int, dict[str, str], bytes]] = {}
    for kind in draw(st.lists(st.sampled_from(DAMAGES), min_size=1, max_size=3, unique=True)):
        b = draw(st.sampled_from(blocks))
        if kind == "garbage-head":
            out["refs/head"] = (200, {}, draw(st.binary(max_size=80)))
        elif kind == "missing-block":
            out[b] = (404, {}, b"")
        elif kind == "garbage-block":
            out[b] = (200, {}, draw(st.binary(max_size=300)))
        elif kind == "truncated-block":
            out[b] = (200, {}, files[b][: draw(st.integers(0, len(files[b]) - 1))])
        elif kind == "swapped-blocks" and len(blocks) > 1:
            other = draw(st.sampled_from([x for x in blocks if x != b]))
            out[b] = (200, {}, files[other])
        elif kind == "redirect-metadata":
            out[b] = (302, {"Location": "http://169.254.169.254/latest/meta-data/"}, b"")
        elif kind == "redirect-loop":
            out[b] = (302, {"Location": "/" + "x/" + b}, b"")
            out["x/" + b] = (302, {"Location": "/x/" + b}, b"")
        elif kind == "huge-length":
            out[b] = (200, {"Content-Length": str(1 << 40)}, b"\x00" * 64)
        elif kind == "html-error":
            out[b] = (500, {"Content-Type": "text/html"}, b"<html>oops</html>")
        elif kind == "missing-data" and data:
            out[draw(st.sampled_from(data))] = (404, {}, b"")
        elif kind == "truncated-data" and data:
            d = draw(st.sampled_from(data))
            out[d] = (200, {}, files[d][: len(files[d]) // 2])
    return out


def test_pull_from_a_hostile_source_is_complete_or_a_typed_error(
    setup: tuple[NodeProcess, HostileServer], tmp_path: Path
) -> None:
    node, server = setup
    counter = [0]

    @fuzz(60)
    @given(damage(server.script.files))
    def one(overrides: dict[str, tuple[int, dict[str, str], bytes]]) -> None:
        counter[0] += 1
        alias = "copy"  # one alias: once a pull succeeds, later ones update it (or are refused)
        server.script.overrides = overrides
        url = f"http://127.0.0.1:{server.port}/ds"
        try:
            node.call("dataset.pull", timeout=120, url=url, alias=alias)
            pulled = True
        except RpcCallError as e:
            assert e.code != -32603, (overrides.keys(), e)
            pulled = False
        rows = {r["alias"]: r for r in node.call("dataset.list")}
        if pulled:
            assert rows[alias]["error"] is None and rows[alias]["head"]
        else:
            assert alias not in rows or rows[alias]["error"] is None, rows.get(alias)
        node.call("node.status", timeout=30)

    one()
    server.script.overrides = {}
    pulled = node.call("dataset.pull", url=f"http://127.0.0.1:{server.port}/ds", alias="copy")
    assert pulled
    rows = {r["alias"]: r for r in node.call("dataset.list")}
    assert rows["copy"]["error"] is None and rows["copy"]["head"]
