"""Fuzz: the JSON-RPC API of a real daemon, driven by its own OpenRPC document.

One daemon (IPFS off, gossip on) runs for the module. Every method ``rpc.discover`` lists is
called with generated parameters: well-typed values, wrong types, hostile strings (lone
surrogates, NUL, huge, paths of devices and FIFOs, odd URL schemes), integers beyond 64 bits,
deep nesting. Raw bodies are fuzzed too (random bytes, UTF-16, ``NaN`` ids, deep arrays), and
the adversarial bodies of the nesting scan (``tests/hostile_bodies.py``, issue 26: unterminated
strings of escaped quotes and the like, up to 64 KiB here) over POST and the WebSocket, each
answered within a loose time bound.

Every answer must be a JSON-RPC response whose error, if any, is a *typed* error — never
``-32603`` (internal error, reserved for bugs) — and after every call ``node.status`` must still
answer: a hostile caller never takes the daemon down. The worst ``node.status`` latency seen
is printed; the figure the resource budget promises (250 ms) is measured by
``tests/bench`` scripts, this test only bounds it loosely to stay robust on a busy machine.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from daemon_harness import NodeProcess
from fuzz_profile import fuzz
from hostile_bodies import SHAPES, adversarial_bodies, adversarial_body
from hypothesis import given
from hypothesis import strategies as st
from netns import require_loopback_only

from node.rpc.client import RpcCallError

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

INTERNAL_ERROR = -32603
SKIP_METHODS = {"node.shutdown"}  # would end the daemon under test by design

HOSTILE_STRINGS = [
    "",
    "/",
    "\x00",
    "\ud800",
    "a" * 100_000,
    "ftp://127.0.0.1/x",
    "did:odf:",
    "did:odf:fed01" + "00" * 32,
    "did:odf:zzz",
    "file:///dev/zero",
    "/dev/zero",
    "/proc/self/mem",
    "http://169.254.169.254/latest/meta-data/",
    "http://127.0.0.1:1/",
    "/ip4/127.0.0.1/tcp/1/p2p/QmNotAPeer",
    "/ip4/10.0.0.1/tcp/4001",
    "../../etc/passwd",
    "[" * 5_000,
    "kind: DatasetSnapshot\nversion: 1\ncontent: " + "[" * 30_000,
]
HOSTILE_INTS = [-1, 0, 2**31, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**30]

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from(HOSTILE_INTS),
    st.integers(),
    st.floats(allow_nan=False),
    st.sampled_from(HOSTILE_STRINGS),
    st.text(max_size=50),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    require_loopback_only()
    node = NodeProcess(
        tmp_path_factory.mktemp("fuzz") / "node", "fuzz", config={"ipfs": {"mode": "none"}}
    )
    node.init()
    node.launch()
    try:
        node.wait_ready()
        yield node
    finally:
        node.stop()


@pytest.fixture(scope="module")
def methods(daemon: NodeProcess) -> list[dict[str, Any]]:
    doc = daemon.call("rpc.discover")
    found = [m for m in doc["methods"] if m["name"] not in SKIP_METHODS]
    assert len(found) >= 15
    return found


def raw_post(
    node: NodeProcess, body: bytes, content_type: str = "application/json"
) -> tuple[int, bytes]:
    req = urllib.request.Request(
        node.url,
        data=body,
        method="POST",
        headers={"Authorization": f"Bearer {node.token}", "Content-Type": content_type},
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read()


WORST_STATUS_S = [0.0]


def still_alive(node: NodeProcess) -> None:
    assert node.proc is not None and node.proc.poll() is None, node.tail()
    t0 = time.perf_counter()
    node.call("node.status", timeout=30)
    WORST_STATUS_S[0] = max(WORST_STATUS_S[0], time.perf_counter() - t0)
    assert WORST_STATUS_S[0] < 5.0


@st.composite
def calls(draw: st.DrawFn, methods: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    method = draw(st.sampled_from(methods))
    params: dict[str, Any] = {}
    for p in method.get("params", []):
        if not p.get("required", False) and draw(st.booleans()):
            continue
        schema = p.get("schema", {})
        typed: st.SearchStrategy[Any]
        if schema.get("type") == "string":
            typed = st.sampled_from(HOSTILE_STRINGS) | st.text(max_size=30)
        elif schema.get("type") == "integer":
            typed = st.sampled_from(HOSTILE_INTS) | st.integers()
        elif schema.get("type") == "array":
            typed = st.lists(st.sampled_from(HOSTILE_STRINGS), max_size=3)
        else:
            typed = json_value
        params[p["name"]] = draw(typed | json_value if draw(st.integers(0, 3)) == 0 else typed)
    if draw(st.integers(0, 9)) == 0:
        params[draw(st.text(min_size=1, max_size=8))] = draw(json_value)  # unknown parameter
    return method["name"], params


def test_every_method_answers_hostile_params_with_a_typed_error(
    daemon: NodeProcess, methods: list[dict[str, Any]]
) -> None:
    seen: set[str] = set()

    @fuzz(250)
    @given(calls(methods))
    def one(call: tuple[str, dict[str, Any]]) -> None:
        name, params = call
        seen.add(name)
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": name, "params": params}).encode(
            "utf-8", "surrogatepass"
        )
        status, raw = raw_post(daemon, body)
        reply = json.loads(raw)
        assert reply.get("jsonrpc") == "2.0", (name, params, status, raw[:300])
        if "error" in reply:
            assert reply["error"]["code"] != INTERNAL_ERROR, (name, params, reply)
        still_alive(daemon)

    one()
    assert len(seen) >= len(methods) // 2
    print(f"worst node.status latency during the RPC fuzz: {WORST_STATUS_S[0] * 1000:.0f} ms")


def test_every_string_param_of_every_method_with_every_hostile_string(
    daemon: NodeProcess, methods: list[dict[str, Any]]
) -> None:
    """The deterministic sweep that found ``dataset.ingest`` (a 100,000-character file name) and
    ``peers.connect`` (an unparsable multiaddr) answering -32603: each hostile string in each
    string-typed parameter, the other required parameters given plain values."""
    plain = {"string": "x", "integer": 1, "boolean": False, "array": [], "object": {}}
    calls = 0
    for method in methods:
        params = method.get("params", [])
        for target in params:
            if target.get("schema", {}).get("type") not in ("string", "array"):
                continue
            for hostile in HOSTILE_STRINGS:
                args: dict[str, Any] = {
                    p["name"]: plain.get(p.get("schema", {}).get("type", "string"), "x")
                    for p in params
                    if p.get("required", False)
                }
                is_array = target["schema"]["type"] == "array"
                args[target["name"]] = [hostile] if is_array else hostile
                body = json.dumps(
                    {"jsonrpc": "2.0", "id": 1, "method": method["name"], "params": args}
                ).encode("utf-8", "surrogatepass")
                _, raw = raw_post(daemon, body)
                reply = json.loads(raw)
                if "error" in reply:
                    assert reply["error"]["code"] != INTERNAL_ERROR, (method["name"], args, reply)
                calls += 1
        still_alive(daemon)
    assert calls > 100


RAW_BODIES = [
    b"",
    b"{",
    b"[" * 100_000 + b"]" * 100_000,
    b'{"jsonrpc": "2.0", "id": NaN, "method": "node.status"}',
    b'{"jsonrpc": "2.0", "id": Infinity, "method": "node.status"}',
    '{"jsonrpc": "2.0", "id": 1, "method": "node.status"}'.encode("utf-16"),
    '{"jsonrpc": "2.0", "id": 1, "method": "node.status"}'.encode("utf-32"),
    b'{"jsonrpc": "2.0", "id": 1, "method": "node.events", '
    b'"params": {"after_id": 9223372036854775808}}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "subscriptions.add", "params": {"did": "\\ud800"}}',
    b"[]",
    b"[1, 2, 3]",
    b'"just a string"',
]


@fuzz(150)
@given(st.sampled_from(RAW_BODIES) | st.binary(max_size=512))
def test_raw_bodies_get_a_json_rpc_answer(daemon: NodeProcess, body: bytes) -> None:
    status, raw = raw_post(daemon, body)
    assert status < 500, (status, body[:100], raw[:300])
    if raw:
        reply = json.loads(raw)  # strict: NaN/Infinity would fail here
        replies = reply if isinstance(reply, list) else [reply]
        for r in replies:
            if "error" in r:
                assert r["error"]["code"] != INTERNAL_ERROR, (body[:100], r)
    still_alive(daemon)


@fuzz(60)
@given(adversarial_bodies(max_size=65_536))
def test_adversarial_bodies_are_answered_quickly(daemon: NodeProcess, body: bytes) -> None:
    """The former scanner took 40 s for 64 KiB of escaped quotes; now milliseconds. The bound is
    loose (a busy machine); ``tests/integration/test_daemon_hostile_bodies.py`` holds the
    100 ms one at 1 MiB."""
    t0 = time.perf_counter()
    status, raw = raw_post(daemon, body)
    took = time.perf_counter() - t0
    assert status == 200, (status, body[:100], raw[:300])
    replies = json.loads(raw)
    for r in replies if isinstance(replies, list) else [replies]:
        if "error" in r:
            assert r["error"]["code"] != INTERNAL_ERROR, (body[:100], r)
    assert took < 1.0, (took, body[:100])
    still_alive(daemon)


def test_adversarial_bodies_over_the_websocket(daemon: NodeProcess) -> None:
    """Every shape at 64 KiB on one socket: answered in order, and the socket stays usable."""

    async def go() -> None:
        ws_url = daemon.url.replace("http://", "ws://") + "/ws"
        headers = {"Authorization": f"Bearer {daemon.token}"}
        async with aiohttp.ClientSession() as s, s.ws_connect(ws_url, headers=headers) as ws:
            for shape in sorted(SHAPES):
                t0 = time.perf_counter()
                await ws.send_str(adversarial_body(shape, 65_536).decode())
                reply = json.loads((await ws.receive(timeout=30)).data)
                assert time.perf_counter() - t0 < 1.0, shape
                assert reply["error"]["code"] != INTERNAL_ERROR, (shape, reply)
            await ws.send_str('{"jsonrpc": "2.0", "id": 7, "method": "rpc.ping"}')
            assert json.loads((await ws.receive(timeout=30)).data)["result"] == "pong"

    asyncio.run(go())
    still_alive(daemon)


def test_the_daemon_survived(daemon: NodeProcess, tmp_path: Path) -> None:
    try:
        daemon.call("node.status")
    except RpcCallError as e:  # pragma: no cover - the assertion message is the point
        pytest.fail(f"daemon stopped answering: {e}\n{daemon.tail()}")
