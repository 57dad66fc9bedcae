"""Hostile-input benchmark: does one daemon stay responsive while strangers feed it every bad case?

Acceptance point measured: *a daemon that is fed every hostile case over RPC, pulls and gossip
keeps answering ``node.status`` within 250 ms throughout and is never restarted.*

Inside a private loopback-only namespace (the script re-executes itself under ``unshare -rn``;
IPFS off, empty bootstrap, everything bound to 127.0.0.1):

1. starts one real daemon (``odf-node run`` through ``tests/daemon_harness.NodeProcess``, gossip
   on) and records its PID and kernel start time;
2. a sampler thread calls ``node.status`` every 100 ms on its own keep-alive HTTP connection and
   records each call's latency, the daemon's ``uptime_s`` (a restart would reset it) and RSS;
3. feeds the hostile cases group by group, in sequence, each call under its own timeout:

   * ``rpc-raw``: the raw bodies of ``tests/fuzz/test_fuzz_rpc.py`` (``RAW_BODIES``: 100k-deep
     nesting, ``NaN``/``Infinity`` ids, UTF-16/32, ``after_id`` 2^63, a lone surrogate, ...);
   * ``rpc-auth``: ``Authorization`` headers that are not UTF-8 (raw socket requests);
   * ``rpc-methods``: every method ``rpc.discover`` lists (but ``node.shutdown``) with each
     ``HOSTILE_STRINGS`` value in all its string parameters (and as the element of its array
     parameters); methods without such parameters once, bare;
   * ``yaml``: ``dataset.create`` with ``[`` x 30,000, ``{a: `` x 30,000, a billion-laughs alias
     snapshot, and a two-document snapshot whose second document is invalid (the first must not
     be left behind);
   * ``bodies-64k``, ``bodies-1m``: the adversarial bodies of the nesting scan
     (``tests/hostile_bodies.py``, issue 26: unterminated strings of escaped quotes, backslash
     runs, brackets in strings, 2^20 opening brackets, ...) at 64 KiB and at 1 MiB minus one byte
     (the largest every transport admits), each over HTTP POST, the WebSocket and the console's
     ``/ui/rpc`` (session from ``console.login``); the detail line gives each transport's slowest
     answer;
   * ``ws-topics``: the topic flood of issue 26 on one WebSocket, 30 ``rpc.subscribe`` messages of
     70,000 topics each (refused whole past the 64-topic limit), then the socket's own topics
     again; the detail line gives the largest reply and the daemon's RSS before and after;
   * ``half-open``: 200 TCP connections on the RPC port and 200 on the HTTP port, half silent and
     half with a partial request head, held until the daemon closes them (or 30 s);
   * ``pull``: ``dataset.pull`` from a hostile HTTP server run by this script: an honest control,
     a source trickling one byte per second, a redirect to 169.254.169.254, a huge
     ``Content-Length`` (on ``refs/head`` and on a block), and FlatBuffers shared-offset
     amplification blocks (``tests/hostile_flatbuffers.py``) served under their own sha3-256
     multihash name;
   * ``gossip``: from libp2p hosts started here, on the topics of datasets the daemon follows:
     validly signed head announcements whose ``http_urls`` point at the hostile server (trickle,
     amplified block, huge block, redirect) and at 169.254.169.254 (one dataset each, so they do
     not count as equivocations), then random bytes and truncated valid envelopes from another
     host (whose score they ruin). Outcomes are the daemon's Prometheus counter deltas
     (``odf_announcements_total``, ``odf_pulls_total``) and its ``pull.*``/``head.*`` events,
     read once no fetch has been running for a few seconds (at most 100 s).

4. prints one row per group: inputs, outcomes (typed JSON-RPC error codes / ``accepted`` / what
   the connection saw), max and p99 ``node.status`` latency while the group ran; then the detail
   of each pull and YAML case, overall p50/p99/max, samples over 250 ms, failed samples, whether
   the daemon's PID and start time stayed the same and its ``uptime_s`` never went back, and its
   peak RSS (``VmHWM``).

Exit status 1 if the daemon died or was restarted (the latency verdict is printed, not enforced:
it depends on the machine). Runs in about 3-4 minutes (the trickling source alone holds a pull for
``[transfer] deadline_base_s``, 60 s by default).

Usage: .venv/bin/python tests/bench/bench_hostile.py [--only bodies,topics]
(``--only`` runs some of: rpc, bodies, topics, half-open, pull, gossip; all by default.)
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import http.client
import itertools
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "fuzz"))

SNAPSHOT = """\
kind: DatasetSnapshot
version: 1
content:
  name: {name}
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
      description: a dataset served by the hostile benchmark
"""

BILLION_LAUGHS = (
    "kind: DatasetSnapshot\nversion: 1\n"
    + 'a0: &a0 "lol"\n'
    + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 10))
    + "content: *a9\n"
)
INVALID_SECOND_DOC = (
    SNAPSHOT.format(name="first-of-two")
    + "---\nkind: DatasetSnapshot\nversion: 1\ncontent:\n  name: second\n  kind: NoSuchKind\n"
)
METADATA_URL = "http://169.254.169.254/latest/meta-data/"
SAMPLE_EVERY_S = 0.1
BUDGET_MS = 250.0


# ---------------------------------------------------------------- measurement


@dataclass
class Sample:
    t: float  # monotonic start of the call
    ms: float
    ok: bool
    uptime_s: float | None
    rss_mb: float


@dataclass
class Group:
    name: str
    start: float = 0.0
    end: float = 0.0
    inputs: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    details: list[str] = field(default_factory=list)


def proc_status(pid: int, key: str) -> float:
    """A ``/proc/<pid>/status`` memory line in MiB (0 when the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def start_time(pid: int) -> int | None:
    """The kernel start time of ``pid`` (clock ticks since boot), ``None`` if it is gone."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except OSError:
        return None


class Sampler(threading.Thread):
    """``node.status`` every 100 ms on one keep-alive connection of its own."""

    def __init__(self, url: str, token: str, pid: int) -> None:
        super().__init__(daemon=True, name="status-sampler")
        u = urllib.parse.urlsplit(url)
        self.host, self.port, self.path = u.hostname or "127.0.0.1", u.port or 80, u.path or "/"
        self.token = token
        self.pid = pid
        self.samples: list[Sample] = []
        self.errors: Counter[str] = Counter()
        self.stop_event = threading.Event()

    def run(self) -> None:
        conn: http.client.HTTPConnection | None = None
        n = 0
        next_t = time.monotonic()
        while not self.stop_event.is_set():
            n += 1
            body = json.dumps({"jsonrpc": "2.0", "id": n, "method": "node.status"}).encode()
            t0 = time.monotonic()
            ok, uptime = False, None
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
                conn.request(
                    "POST",
                    self.path,
                    body,
                    {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
                )
                reply = json.loads(conn.getresponse().read())
                uptime = reply["result"]["uptime_s"]
                ok = True
            except Exception as e:  # recorded: a failed sample is a failure of the acceptance
                self.errors[type(e).__name__] += 1
                if conn is not None:
                    conn.close()
                conn = None
            ms = (time.monotonic() - t0) * 1000
            self.samples.append(Sample(t0, ms, ok, uptime, proc_status(self.pid, "VmRSS")))
            next_t = max(next_t + SAMPLE_EVERY_S, time.monotonic())
            self.stop_event.wait(next_t - time.monotonic())
        if conn is not None:
            conn.close()


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


# ---------------------------------------------------------------- RPC helpers


def post(
    url: str,
    token: str,
    body: bytes,
    timeout: float = 90.0,
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    """One POST on a fresh connection (``headers`` instead of the token's); (status, body)."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port or 80, timeout=timeout)
    try:
        conn.request(
            "POST",
            u.path or "/",
            body,
            headers or {"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


async def ws_exchange(
    url: str, token: str, bodies: list[bytes], timeout: float = 90.0
) -> list[tuple[str, str]]:
    """Send each body on one WebSocket and read its answer: ``(outcome, answer text)`` each."""
    import aiohttp

    ws_url = url.replace("http://", "ws://") + "/ws"
    out: list[tuple[str, str]] = []
    async with (
        aiohttp.ClientSession() as s,
        s.ws_connect(ws_url, headers={"Authorization": f"Bearer {token}"}) as ws,
    ):
        for body in bodies:
            await ws.send_str(body.decode())
            msg = await ws.receive(timeout=timeout)
            if msg.type != aiohttp.WSMsgType.TEXT:
                out.append((f"ws closed {msg.data}", ""))
                break
            out.append((classify(200, msg.data.encode())[0], msg.data))
    return out


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name} in a reply")


def classify(status: int, raw: bytes) -> tuple[str, str]:
    """(outcome, message) of one HTTP answer of the RPC endpoint."""
    if not raw:
        return f"http {status} empty", ""
    try:
        reply = json.loads(raw, parse_constant=_refuse_constant)
    except ValueError as e:
        return f"http {status} not JSON", str(e)[:100]
    replies = reply if isinstance(reply, list) else [reply]
    outs, msgs = [], []
    for r in replies:
        if not isinstance(r, dict):
            outs.append("bad reply")
        elif isinstance(r.get("error"), dict):
            code = r["error"].get("code")
            outs.append("INTERNAL -32603" if code == -32603 else f"error {code}")
            msgs.append(str(r["error"].get("message", ""))[:120])
        elif "result" in r:
            outs.append("accepted")
        else:
            outs.append("bad reply")
    return (", ".join(sorted(set(outs))) or "empty batch"), "; ".join(msgs)


def guarded(fn: Callable[[], tuple[str, str]]) -> tuple[str, str, float]:
    """Run one hostile input; any exception becomes its outcome."""
    t0 = time.monotonic()
    try:
        out, msg = fn()
    except TimeoutError:
        out, msg = "timeout (ours)", ""
    except (ConnectionError, http.client.HTTPException, OSError) as e:
        out, msg = f"connection: {type(e).__name__}", str(e)[:100]
    except Exception as e:  # recorded, never fatal: the script must reach its report
        out, msg = f"script error: {type(e).__name__}", str(e)[:100]
    return out, msg, time.monotonic() - t0


def rpc(url: str, token: str, method: str, params: dict[str, Any], timeout: float = 90.0) -> Any:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    return classify(*post(url, token, body.encode("utf-8", "surrogatepass"), timeout))


def raw_request(port: int, head: bytes, timeout: float = 30.0) -> tuple[str, str]:
    """Send ``head`` on a raw socket; the outcome is the status line of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(head)
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    line = data.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split(" ", 2)
    return (f"http {parts[1]}" if len(parts) > 1 else "closed without answer"), line[:80]


# ---------------------------------------------------------------- the hostile HTTP source


Responder = Callable[[BaseHTTPRequestHandler, str], None]


class HostileServer:
    """``/<case>/<dataset>/<rel>``: each case answers the Simple Transfer Protocol its own way."""

    def __init__(self) -> None:
        self.cases: dict[str, Responder] = {}
        self.hits: Counter[str] = Counter()
        self.closing = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                parts = self.path.lstrip("/").split("/", 2)
                case = parts[0]
                rel = parts[2] if len(parts) == 3 else ""
                server.hits[case] += 1
                responder = server.cases.get(case)
                try:
                    if responder is None:
                        send(self, 404, {}, b"no such case")
                    else:
                        responder(self, rel)
                except (BrokenPipeError, ConnectionResetError, TimeoutError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, case: str) -> str:
        return f"http://127.0.0.1:{self.port}/{case}/ds"

    def close(self) -> None:
        self.closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    # Responders

    def files(
        self, files: dict[str, bytes], overrides: dict[str, Responder] | None = None
    ) -> Responder:
        def respond(h: BaseHTTPRequestHandler, rel: str) -> None:
            if overrides and rel in overrides:
                overrides[rel](h, rel)
            elif rel in files:
                send(h, 200, {}, files[rel])
            else:
                send(h, 404, {}, b"not found")

        return respond

    def trickle(self, h: BaseHTTPRequestHandler, rel: str) -> None:
        """200, a declared 4 KiB, then one byte a second (for at most 300 s)."""
        h.send_response(200)
        h.send_header("Content-Length", "4096")
        h.end_headers()
        for _ in range(300):
            if self.closing.wait(1.0):
                return
            h.wfile.write(b"f")
            h.wfile.flush()

    def huge(self, h: BaseHTTPRequestHandler, rel: str) -> None:
        """200 with Content-Length 2^40, then zeros as fast as taken (at most 256 MiB)."""
        h.send_response(200)
        h.send_header("Content-Length", str(1 << 40))
        h.end_headers()
        chunk = bytes(1 << 16)
        for _ in range(4096):
            if self.closing.is_set():
                return
            h.wfile.write(chunk)

    @staticmethod
    def redirect(location: str) -> Responder:
        def respond(h: BaseHTTPRequestHandler, rel: str) -> None:
            send(h, 302, {"Location": location}, b"")

        return respond


def send(h: BaseHTTPRequestHandler, status: int, headers: dict[str, str], body: bytes) -> None:
    h.send_response(status)
    for k, v in headers.items():
        h.send_header(k, v)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


def dataset_files(root: Path) -> dict[str, bytes]:
    """The files of a dataset directory a Simple Transfer Protocol server would serve."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and p.relative_to(root).parts[0] in ("refs", "blocks", "data", "checkpoints")
    }


@functools.cache
def amplified_blocks() -> dict[str, bytes]:
    """FlatBuffers blocks whose offsets share one object (empty if the builder is missing)."""
    try:
        from hostile_flatbuffers import flat_keywords_block, nested_temporal_tables_block
    except ImportError:
        return {}
    return {
        # 1,000,000 offsets to one 1 KiB keyword: a 4 MiB block naming ~1 GiB of text.
        "amplified-flat": flat_keywords_block(1_000_000, 1024),
        # 2,000 temporal tables x 2,000 primary-key columns: 4,000,000 strings from ~16 KiB.
        "amplified-nested": nested_temporal_tables_block(2_000, 2_000),
    }


# ---------------------------------------------------------------- the benchmark


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.groups: list[Group] = []
        self.current: Group | None = None

    def begin(self, name: str) -> Group:
        g = Group(name, start=time.monotonic())
        self.groups.append(g)
        self.current = g
        print(f"[{time.strftime('%H:%M:%S')}] {name} ...", file=sys.stderr, flush=True)
        return g

    def end(self, g: Group) -> None:
        """Close the group's window (at least 1 s, so that ~10 status samples fall in it)."""
        time.sleep(max(0.0, g.start + 1.0 - time.monotonic()))
        g.end = time.monotonic()

    def feed(self, g: Group, label: str, fn: Callable[[], tuple[str, str]]) -> str:
        out, msg, took = guarded(fn)
        g.inputs += 1
        g.outcomes[out] += 1
        suspicious = ("INTERNAL", "timeout", "connection", "script", "http 5", "bad")
        if out.startswith(suspicious) or g.name in ("yaml", "pull"):
            g.details.append(f"{label}: {out} ({took:.1f} s) {msg}")
        return out

    def run(self) -> int:
        from daemon_harness import NodeProcess

        work = Path(tempfile.mkdtemp(prefix="odf-hostile-"))
        node = NodeProcess(
            work / "node",
            "hostile",
            config={"ipfs": {"mode": "none"}, "p2p": {"bootstrap": []}},
        )
        server = HostileServer()
        sampler: Sampler | None = None
        verdict = 1
        try:
            node.init()
            node.launch()
            node.wait_ready(180)
            assert node.proc is not None
            pid = node.proc.pid
            started = start_time(pid)
            status = node.call("node.status")
            sampler = Sampler(node.url, node.token, pid)
            sampler.start()
            time.sleep(2)  # a quiet baseline
            baseline = self.begin("baseline (idle)")
            time.sleep(3)
            self.end(baseline)

            only = set(self.args.only.split(",")) if self.args.only else None
            if only is None or "rpc" in only:
                self.rpc_groups(node)
            if only is None or "bodies" in only:
                self.body_groups(node)
            if only is None or "topics" in only:
                self.topic_group(node, pid)
            if only is None or "half-open" in only:
                self.half_open(node, status)
            if only is None or "pull" in only or "gossip" in only:
                publisher = self.pull_group(node, server, work)
                if only is None or "gossip" in only:
                    asyncio.run(self.gossip_group(node, server, publisher, status))

            time.sleep(1)
            sampler.stop_event.set()
            sampler.join(15)
            alive = node.proc is not None and node.proc.poll() is None
            same = alive and start_time(pid) == started
            uptimes = [s.uptime_s for s in sampler.samples if s.uptime_s is not None]
            monotonic_uptime = all(b >= a for a, b in itertools.pairwise(uptimes))
            hwm = proc_status(pid, "VmHWM")
            self.report(sampler, pid, alive, same, monotonic_uptime, hwm, server)
            for line, n in log_exceptions(node.tail(1 << 26)).most_common():
                print(f"daemon log: {n} x traceback ending in: {line[:140]}")
            verdict = 0 if (alive and same and monotonic_uptime) else 1
            if verdict:
                print(node.tail(), file=sys.stderr)
            return verdict
        finally:
            if sampler is not None:
                sampler.stop_event.set()
            node.stop()
            server.close()
            if self.args.keep:
                print(f"work directory kept: {work}", file=sys.stderr)
            else:
                shutil.rmtree(work, ignore_errors=True)

    # ---- RPC

    def rpc_groups(self, node: Any) -> None:
        from test_fuzz_rpc import HOSTILE_STRINGS, RAW_BODIES, SKIP_METHODS

        url, token = node.url, node.token
        g = self.begin("rpc-raw")
        for i, body in enumerate(RAW_BODIES):
            self.feed(g, f"raw[{i}]", lambda b=body: classify(*post(url, token, b)))
        self.end(g)

        g = self.begin("rpc-auth")
        u = urllib.parse.urlsplit(url)
        port = u.port or 80
        body = b'{"jsonrpc": "2.0", "id": 1, "method": "node.status"}'
        for label, auth in [
            ("valid token (control)", b"Bearer " + token.encode()),
            ("latin-1 bytes", b"Bearer \xff\xfe\xfd" + token.encode()),
            ("invalid utf-8 token", b"Bearer " + token.encode()[:8] + b"\xc3\x28"),
            ("lone continuation", b"\x80\x80\x80"),
        ]:
            head = (
                (
                    f"POST {u.path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                    "Content-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n"
                ).encode()
                + b"Authorization: "
                + auth
                + b"\r\n\r\n"
                + body
            )
            self.feed(g, label, lambda h=head: raw_request(port, h))
        self.end(g)

        g = self.begin("rpc-methods")
        methods = [m for m in node.call("rpc.discover")["methods"] if m["name"] not in SKIP_METHODS]
        for m in methods:
            params = m.get("params", [])
            strings = [p["name"] for p in params if p.get("schema", {}).get("type") == "string"]
            arrays = [p["name"] for p in params if p.get("schema", {}).get("type") == "array"]
            if not strings and not arrays:
                self.feed(g, m["name"], lambda n=m["name"]: rpc(url, token, n, {}))
                continue
            for i, s in enumerate(HOSTILE_STRINGS):
                call = {**{p: s for p in strings}, **{p: [s] for p in arrays}}
                self.feed(
                    g,
                    f"{m['name']} hostile[{i}]",
                    lambda n=m["name"], c=call: rpc(url, token, n, c, self.args.call_timeout),
                )
        self.end(g)

        g = self.begin("yaml")
        for label, text in [
            ("'[' x 30,000", "[" * 30_000),
            ("'{a: ' x 30,000", "kind: DatasetSnapshot\nversion: 1\ncontent: " + "{a: " * 30_000),
            ("billion laughs (10^9 aliases)", BILLION_LAUGHS),
            ("two documents, 2nd invalid", INVALID_SECOND_DOC),
        ]:
            self.feed(
                g,
                label,
                lambda t=text: rpc(url, token, "dataset.create", {"snapshot_yaml": t}),
            )
        names = {r.get("alias") or r.get("name") for r in node.call("dataset.list")}
        g.details.append(
            "first document of the invalid pair left behind: "
            + ("YES (not all-or-none)" if "first-of-two" in names else "no")
        )
        self.end(g)

    def body_groups(self, node: Any) -> None:
        from hostile_bodies import SHAPES, adversarial_body

        url, token = node.url, node.token
        ui_url, ui_headers = node.url.removesuffix("/rpc") + "/ui/rpc", node.console_headers()
        for label, size in (("bodies-64k", 64 << 10), ("bodies-1m", (1 << 20) - 1)):
            g = self.begin(label)
            slowest: dict[str, float] = {}
            for shape in sorted(SHAPES):
                body = adversarial_body(shape, size)
                for transport, send in (
                    ("http", lambda b=body: classify(*post(url, token, b))),
                    ("ws", lambda b=body: asyncio.run(ws_exchange(url, token, [b]))[0]),
                    ("ui", lambda b=body: classify(*post(ui_url, "", b, headers=ui_headers))),
                ):
                    out, msg, took = guarded(send)
                    g.inputs += 1
                    g.outcomes[out] += 1
                    slowest[transport] = max(slowest.get(transport, 0.0), took)
                    if out.startswith(("INTERNAL", "timeout", "connection", "script", "http 5")):
                        g.details.append(f"{transport} {shape}: {out} ({took:.1f} s) {msg}")
            g.details.append(
                "slowest answer: "
                + ", ".join(f"{t} {v * 1000:.0f} ms" for t, v in sorted(slowest.items()))
            )
            self.end(g)

    def topic_group(self, node: Any, pid: int) -> None:
        g = self.begin("ws-topics")
        rss_before = proc_status(pid, "VmRSS")
        own = [f"topic.{i}" for i in range(8)]
        messages = [own] + [[f"f{r}.{i}" for i in range(70_000)] for r in range(30)] + [own]
        bodies = [
            json.dumps(
                {"jsonrpc": "2.0", "id": i, "method": "rpc.subscribe", "params": {"topics": t}}
            ).encode()
            for i, t in enumerate(messages)
        ]
        results, msg, took = guarded(
            lambda: ("ok", json.dumps(asyncio.run(ws_exchange(node.url, node.token, bodies))))
        )
        if results != "ok":
            g.inputs += len(bodies)
            g.outcomes[results] += 1
            g.details.append(f"{results} ({took:.1f} s) {msg}")
        else:
            largest = 0
            for out, text in json.loads(msg):
                g.inputs += 1
                g.outcomes[out] += 1
                largest = max(largest, len(text))
            g.details.append(
                f"{len(bodies)} messages ({sum(map(len, bodies)) / 1e6:.0f} MB) in {took:.1f} s; "
                f"largest reply {largest} bytes; daemon RSS {rss_before:.0f} MiB before, "
                f"{proc_status(pid, 'VmRSS'):.0f} MiB after"
            )
        self.end(g)

    def half_open(self, node: Any, status: dict[str, Any]) -> None:
        g = self.begin("half-open")
        rpc_port = urllib.parse.urlsplit(node.url).port
        http_port = urllib.parse.urlsplit(status["http_url"]).port
        socks: list[tuple[str, socket.socket]] = []
        for label, port in (("rpc", rpc_port), ("http", http_port)):
            for i in range(self.args.half_open):
                try:
                    s = socket.create_connection(("127.0.0.1", port), timeout=10)
                except OSError as e:
                    g.inputs += 1
                    g.outcomes[f"{label}: connect failed ({type(e).__name__})"] += 1
                    continue
                if i % 2:
                    s.sendall(b"POST /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10")
                s.setblocking(False)
                socks.append((label, s))
        opened = time.monotonic()
        closed_at: dict[int, float] = {}
        deadline = opened + self.args.half_open_hold
        while time.monotonic() < deadline and len(closed_at) < len(socks):
            for idx, (_, s) in enumerate(socks):
                if idx in closed_at:
                    continue
                try:
                    if s.recv(4096) == b"":
                        closed_at[idx] = time.monotonic() - opened
                except BlockingIOError:
                    pass
                except OSError:
                    closed_at[idx] = time.monotonic() - opened
            time.sleep(0.2)
        for idx, (label, s) in enumerate(socks):
            g.inputs += 1
            if idx in closed_at:
                g.outcomes[f"{label}: closed by daemon"] += 1
            else:
                g.outcomes[f"{label}: still open at {self.args.half_open_hold:.0f} s"] += 1
            s.close()
        if closed_at:
            g.details.append(
                f"closed after {min(closed_at.values()):.1f}-{max(closed_at.values()):.1f} s"
            )
        self.end(g)

    # ---- pulls

    def pull_group(self, node: Any, server: HostileServer, work: Path) -> Any:
        from coordinator.metadata.snapshot import snapshots_from_yaml
        from coordinator.metadata.timestamp import Timestamp
        from coordinator.multiformats import Multihash
        from coordinator.storage.repository import DatasetRepository

        clock = [1_700_000_000_000_000_000]

        def tick() -> Timestamp:
            clock[0] += 1_000_000
            return Timestamp(clock[0])

        repo = DatasetRepository(
            work / "pub" / "datasets", work / "pub" / "keys", clock=tick, durable=False
        )
        honest = repo.create_from_snapshot(snapshots_from_yaml(SNAPSHOT.format(name="honest"))[0])
        ds = repo.open(honest.id.as_did_str())
        files = dataset_files(ds.layout.root)
        head = str(ds.head())
        server.cases["honest"] = server.files(files)
        server.cases["trickle"] = server.trickle
        server.cases["redirect"] = server.redirect(METADATA_URL)
        server.cases["huge-head"] = server.huge
        server.cases["huge-block"] = server.files(files, {f"blocks/{head}": server.huge})
        amplified = amplified_blocks()
        for name, block in amplified.items():
            h = str(Multihash.sha3_256(block))
            server.cases[name] = server.files({"refs/head": h.encode(), f"blocks/{h}": block})

        g = self.begin("pull")
        url, token = node.url, node.token
        cases = ["honest", "trickle", "redirect", "huge-head", "huge-block", *amplified]
        for case in cases:
            self.feed(
                g,
                case,
                lambda c=case: rpc(
                    url,
                    token,
                    "dataset.pull",
                    {"url": server.url(c), "alias": f"pulled-{c}"},
                    self.args.pull_timeout,
                ),
            )
        if not amplified:
            g.details.append("amplification: tests/hostile_flatbuffers.py missing, not fed")
        rows = {r.get("alias"): r for r in node.call("dataset.list")}
        left = sorted(a for a in rows if a and a.startswith("pulled-") and a != "pulled-honest")
        g.details.append(f"hostile pulls left a dataset behind: {left or 'none'}")
        self.end(g)
        return repo

    # ---- gossip

    async def gossip_group(
        self, node: Any, server: HostileServer, repo: Any, status: dict[str, Any]
    ) -> None:
        from coordinator.identity import load_private_key
        from coordinator.metadata.snapshot import snapshots_from_yaml
        from coordinator.multiformats import Multihash
        from p2p.libp2p_host import Libp2pConfig, Libp2pTransport
        from p2p.transport import dataset_topic
        from p2p.wire import FetchLocations, HeadAnnouncement, sign_message

        g = self.begin("gossip")
        amplified = amplified_blocks()
        amp_name = next(iter(amplified), None)
        targets: dict[str, tuple[str, Multihash | None]] = {
            "ann->trickle": (server.url("trickle"), None),
            "ann->huge-block": (server.url("huge-block"), None),
            "ann->redirect": (server.url("redirect"), None),
            "ann->169.254.169.254": (METADATA_URL, None),
        }
        if amp_name:
            targets["ann->amplified"] = (
                server.url(amp_name),
                Multihash.sha3_256(amplified[amp_name]),
            )
        owned = []
        for label in targets:
            snap = snapshots_from_yaml(SNAPSHOT.format(name="g-" + label.replace(">", "")))[0]
            h = repo.create_from_snapshot(snap)
            owned.append((label, h, load_private_key(repo.key_path(h.id))))
            await asyncio.to_thread(node.call, "subscriptions.add", did=h.id.as_did_str())

        http_url = status["http_url"]
        before = await asyncio.to_thread(metrics, http_url)
        after_id = await asyncio.to_thread(last_event_id, node)

        addr = status["p2p"]["listen_addrs"][0]
        honest_host = Libp2pTransport(Libp2pConfig(node_seed=bytes([0x51]) * 32))
        garbage_host = Libp2pTransport(Libp2pConfig(node_seed=bytes([0x52]) * 32))
        hosts = [honest_host, garbage_host]
        try:
            for t in hosts:
                await t.start()
                await t.connect(addr)
            await asyncio.sleep(5)  # gossipsub exchanges the topic subscriptions
            valid_env = b""
            for label, h, key in owned:
                ds = repo.open(h.id.as_did_str())
                st = ds.state()
                url, amp_head = targets[label]
                ann = HeadAnnouncement(
                    dataset=h.id,
                    head=amp_head or Multihash.sha3_256(label.encode()),
                    sequence=st.sequence_number + 1,
                    prev_head=st.head,
                    epoch=0,
                    locations=FetchLocations((), (url,)),
                    issued_at_ns=time.time_ns(),
                    nonce=secrets.token_bytes(16),
                )
                env = sign_message(ann, key).envelope
                valid_env = valid_env or env
                g.inputs += 1
                try:
                    await honest_host.publish(dataset_topic(h.id.as_multibase()), env)
                    g.outcomes["signed announcement published"] += 1
                except Exception as e:
                    g.outcomes[f"publish failed: {type(e).__name__}"] += 1
            await asyncio.sleep(2)
            topic = dataset_topic(owned[0][1].id.as_multibase())
            # Up to 4,096 bytes: the publishing transport itself refuses larger gossip messages.
            garbage = [os.urandom(n) for n in (1, 7, 64, 200, 512, 1024, 2048, 4000, 4096)]
            garbage += [os.urandom(100) for _ in range(11)]
            cuts = sorted({1, 4, 16, 32, 64, len(valid_env) // 2, len(valid_env) - 64})
            garbage += [valid_env[:c] for c in cuts if 0 < c < len(valid_env)]
            garbage += [valid_env[:-1], valid_env + b"\x00", valid_env[:40] + os.urandom(40)]
            for data in garbage:
                g.inputs += 1
                try:
                    await garbage_host.publish(topic, data)
                    g.outcomes["garbage published"] += 1
                except Exception as e:  # the publisher's own refusal, not the daemon's
                    g.outcomes[f"publish failed: {type(e).__name__}"] += 1
                    g.details.append(f"garbage of {len(data)} bytes not sent: {str(e)[:100]}")
                await asyncio.sleep(0.05)
            # Wait until the daemon has no fetch running for 5 s (at most gossip_wait s).
            quiet_since, end = None, time.monotonic() + self.args.gossip_wait
            while time.monotonic() < end:
                st_now = await asyncio.to_thread(node.call, "node.status")
                if st_now["p2p"]["fetches_running"] == 0:
                    quiet_since = quiet_since or time.monotonic()
                    if time.monotonic() - quiet_since >= 5:
                        break
                else:
                    quiet_since = None
                await asyncio.sleep(1)
            after = await asyncio.to_thread(metrics, http_url)
            for k, v in sorted(after.items()):
                delta = v - before.get(k, 0.0)
                if delta and k.startswith(("odf_announcements_total", "odf_pulls_total")):
                    g.details.append(f"{k} +{delta:.0f}")
            events = await asyncio.to_thread(
                node.call, "node.events", after_id=after_id, limit=1000
            )
            kinds = Counter(e.get("kind") for e in events or [])
            g.details.append(f"daemon events: {dict(kinds)}")
            reasons = Counter(
                f"{e.get('kind')}: {str((e.get('data') or {}).get('error', e.get('data')))[:150]}"
                for e in events or []
                if str(e.get("kind", "")).startswith(("pull.", "head."))
            )
            for reason, n in reasons.most_common():
                g.details.append(f"  {n} x {reason}")
        finally:
            for t in hosts:
                try:
                    await t.stop()
                except Exception as e:
                    g.details.append(f"libp2p host stop: {type(e).__name__}")
            self.end(g)

    # ---- report

    def report(
        self,
        sampler: Sampler,
        pid: int,
        alive: bool,
        same: bool,
        monotonic_uptime: bool,
        hwm: float,
        server: HostileServer,
    ) -> None:
        samples = sampler.samples
        print()
        header = f"{'group':<17} {'inputs':>6} {'max ms':>8} {'p99 ms':>8}  outcomes"
        print(header)
        print("-" * len(header) + "-" * 40)
        for g in self.groups:
            # A sample belongs to every group its call overlapped.
            during = [s for s in samples if s.t <= g.end and s.t + s.ms / 1000 >= g.start]
            ms = [s.ms for s in during]
            failed = sum(1 for s in during if not s.ok)
            outs = ", ".join(f"{k} x{v}" for k, v in g.outcomes.most_common())
            if failed:
                outs += f"  [{failed} node.status samples FAILED]"
            worst, p99 = max(ms, default=0), pct(ms, 0.99)
            print(f"{g.name:<17} {g.inputs:>6} {worst:>8.1f} {p99:>8.1f}  {outs}")
        print()
        for g in self.groups:
            for d in g.details:
                print(f"{g.name}: {d}")
        ms = [s.ms for s in samples]
        over = sum(1 for m in ms if m > BUDGET_MS)
        failed = sum(1 for s in samples if not s.ok)
        print()
        print(
            f"node.status samples: {len(ms)} every {SAMPLE_EVERY_S * 1000:.0f} ms; "
            f"p50 {pct(ms, 0.5):.1f} ms, p99 {pct(ms, 0.99):.1f} ms, "
            f"max {max(ms, default=0):.1f} ms; "
            f"over {BUDGET_MS:.0f} ms: {over}; failed: {failed} {dict(sampler.errors) or ''}"
        )
        print(
            f"daemon PID {pid}: alive at end {alive}; same process (start time) {same}; "
            f"uptime_s never went back {monotonic_uptime}"
        )
        rss = [s.rss_mb for s in samples if s.rss_mb]
        print(
            f"daemon RSS: peak (VmHWM) {hwm:.0f} MiB; sampled max {max(rss, default=0):.0f} MiB, "
            f"final {rss[-1] if rss else 0:.0f} MiB"
        )
        print(f"hostile server requests by case: {dict(server.hits)}")
        ok = alive and same and monotonic_uptime and failed == 0 and over == 0
        print(
            f"acceptance (status within {BUDGET_MS:.0f} ms throughout, never restarted): "
            + ("MET" if ok else "NOT MET")
        )


def log_exceptions(text: str) -> Counter[str]:
    """The exception line ending each traceback in the daemon's log, counted."""
    found: Counter[str] = Counter()
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("Traceback (most recent call last):"):
            continue
        for nxt in lines[i + 1 :]:
            if nxt and not nxt[0].isspace():
                found[nxt.strip()] += 1
                break
    return found


def last_event_id(node: Any) -> int:
    """The id of the daemon's newest event (the log is paged oldest first)."""
    last = 0
    while True:
        page = node.call("node.events", after_id=last, limit=1000)
        if not page:
            return last
        last = page[-1]["id"]


def metrics(url: str) -> dict[str, float]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"{url}/metrics", timeout=30) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--half-open", type=int, default=200, help="connections per port")
    p.add_argument("--half-open-hold", type=float, default=30.0, help="seconds, at most")
    p.add_argument("--call-timeout", type=float, default=90.0, help="per hostile RPC call")
    p.add_argument("--pull-timeout", type=float, default=150.0, help="per dataset.pull")
    p.add_argument("--gossip-wait", type=float, default=100.0, help="for fetches to settle")
    p.add_argument("--keep", action="store_true", help="keep the work directory (daemon log)")
    p.add_argument(
        "--only", default="", help="comma list of: rpc, bodies, topics, half-open, pull, gossip"
    )
    args = p.parse_args()
    if os.environ.get("ODF_HOSTILE_IN_NETNS") != "1":
        cmd = "ip link set lo up && exec " + " ".join([sys.executable, *sys.argv])
        env = {**os.environ, "ODF_HOSTILE_IN_NETNS": "1"}
        sys.exit(subprocess.call(["unshare", "-rn", "bash", "-c", cmd], env=env))
    sys.exit(Bench(args).run())


if __name__ == "__main__":
    main()
