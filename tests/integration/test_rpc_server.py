"""The JSON-RPC control server over real HTTP / WebSocket on 127.0.0.1.

Every refusal is checked for its HTTP status and JSON-RPC code, and after each one the same
server must still answer ``rpc.ping``: a bad request never takes the daemon down.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from coordinator.errors import BadInputData, DatasetNotFound
from node.rpc.client import RpcCallError, RpcClient, RpcConnectionError, call_sync
from node.rpc.cookie import read_cookie, write_cookie
from node.rpc.errors import RpcError
from node.rpc.registry import Param, RpcRegistry, validate_openrpc
from node.rpc.server import RpcServer
from node.transfer.errors import DivergedHeads, ObjectHashMismatch, SourceUnavailable

TOKEN = "t0ken-" + "ab" * 29


def _registry() -> RpcRegistry:
    reg = RpcRegistry()

    @reg.method(
        "math.add",
        params=[
            Param("a", {"type": "integer"}),
            Param("b", {"type": "integer", "minimum": 0}, required=False),
        ],
        result={"type": "integer"},
        summary="a + b",
    )
    async def add(a: int, b: int = 1) -> int:
        return a + b

    failures: dict[str, Exception] = {
        "not_found": DatasetNotFound("no dataset 'x'"),
        "bad_input": BadInputData("not a number", column="v", row=3),
        "diverged": DivergedHeads("local and remote diverged"),
        "tampered": ObjectHashMismatch("blocks/abc", "hash mismatch"),
        "offline": SourceUnavailable("refs/head", "timed out"),
        "custom": RpcError(-32050, "custom failure", {"k": 1}),
        "bug": KeyError("secret-internal-detail"),
    }

    @reg.method(
        "fail",
        params=[Param("kind", {"type": "string", "enum": sorted(failures)})],
        errors=[-32001, -32002, -32003, -32004, -32005],
    )
    async def fail(kind: str) -> None:
        raise failures[kind]

    @reg.method("not_json")
    async def not_json() -> Any:
        return object()

    return reg


@asynccontextmanager
async def serving(**kw: Any) -> AsyncIterator[RpcServer]:
    server = RpcServer(_registry(), token=TOKEN, **kw)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def run(fn: Callable[[RpcServer], Awaitable[None]], **kw: Any) -> None:
    async def go() -> None:
        async with serving(**kw) as server:
            await fn(server)

    asyncio.run(go())


AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def post(
    server: RpcServer, body: Any, *, headers: dict[str, str] | None = None, raw: bool = False
) -> tuple[int, Any]:
    data = body if raw else json.dumps(body).encode()
    async with (
        aiohttp.ClientSession() as s,
        s.post(server.url, data=data, headers=AUTH if headers is None else headers) as r,
    ):
        text = await r.read()
        return r.status, (json.loads(text) if text else None)


async def alive(server: RpcServer) -> None:
    status, resp = await post(server, {"jsonrpc": "2.0", "method": "rpc.ping", "id": 7})
    assert (status, resp) == (200, {"jsonrpc": "2.0", "result": "pong", "id": 7})


def code(resp: Any) -> int:
    return int(resp["error"]["code"])


def req(method: str, params: Any = None, rid: Any = 1) -> dict[str, Any]:
    r: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": rid}
    if params is not None:
        r["params"] = params
    return r


# -- auth, Host, Origin ----------------------------------------------------------------------


def test_token_required_and_checked() -> None:
    async def go(server: RpcServer) -> None:
        ping = req("rpc.ping")
        for headers in (
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": f"Bearer {TOKEN[:-1]}"},
            {"Authorization": f"Basic {TOKEN}"},
        ):
            status, resp = await post(server, ping, headers=headers)
            assert status == 401 and code(resp) == -32010 and resp["id"] is None
            await alive(server)
        # ?token= is for the WebSocket only; POST needs the header.
        async with aiohttp.ClientSession() as s, s.post(f"{server.url}?token={TOKEN}") as r:
            assert r.status == 401
        await alive(server)

    run(go)


def test_foreign_host_and_origin_refused() -> None:
    async def go(server: RpcServer) -> None:
        port = server.port
        ping = req("rpc.ping")
        for host in ("evil.example", f"evil.example:{port}", "127.0.0.1:1", f"10.0.0.1:{port}"):
            status, resp = await post(server, ping, headers={**AUTH, "Host": host})
            assert status == 403 and code(resp) == -32011
            await alive(server)
        for host in (f"localhost:{port}", f"[::1]:{port}", f"node.test:{port}", "node.test"):
            status, resp = await post(server, ping, headers={**AUTH, "Host": host})
            assert status == 200 and resp["result"] == "pong", host
        for origin in ("https://evil.example", "null", f"http://127.0.0.1:{port}"):
            status, resp = await post(server, ping, headers={**AUTH, "Origin": origin})
            assert status == 403 and code(resp) == -32011
            await alive(server)
        status, resp = await post(server, ping, headers={**AUTH, "Origin": "http://ui.test:3000/"})
        assert status == 200 and resp["result"] == "pong"
        # CORS for allowed origins only (the preflight carries no token).
        async with aiohttp.ClientSession() as s:
            pre = {"Origin": "http://ui.test:3000", "Access-Control-Request-Method": "POST"}
            async with s.options(server.url, headers=pre) as r:
                assert r.status == 204
                assert r.headers["Access-Control-Allow-Origin"] == "http://ui.test:3000"
                assert "Authorization" in r.headers["Access-Control-Allow-Headers"]
            pre["Origin"] = "https://evil.example"
            async with s.options(server.url, headers=pre) as r:
                assert r.status == 403 and "Access-Control-Allow-Origin" not in r.headers
            async with s.post(
                server.url, json=ping, headers={**AUTH, "Origin": "http://ui.test:3000"}
            ) as r:
                assert r.headers["Access-Control-Allow-Origin"] == "http://ui.test:3000"
        # Host/Origin are checked before the token: a rebinding page learns nothing more.
        status, resp = await post(server, ping, headers={"Origin": "https://evil.example"})
        assert status == 403

    run(go, allowed_hosts=["node.test"], allowed_origins=["http://ui.test:3000"])


# -- body size -------------------------------------------------------------------------------


def test_oversized_body_refused_without_reading_it() -> None:
    async def go(server: RpcServer) -> None:
        # Claim 100 MB, send 10 bytes, and expect the answer at once (no wait for the rest).
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(
            (
                f"POST /rpc HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
                f"Authorization: Bearer {TOKEN}\r\nContent-Length: {100 * 2**20}\r\n\r\n"
                '{"jsonrpc"'
            ).encode()
        )
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 413")
        length = int(
            next(
                line.split(b":")[1]
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
        )
        body = json.loads(await asyncio.wait_for(reader.readexactly(length), 5))
        assert code(body) == -32012
        writer.close()
        await alive(server)

        # No Content-Length (chunked): the read is capped.
        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(20):
                yield b" " * 1000

        async with (
            aiohttp.ClientSession() as s,
            s.post(server.url, data=chunks(), headers=AUTH) as r,
        ):
            assert r.status == 413 and code(await r.json()) == -32012
        await alive(server)
        # Just under the limit is served.
        small = json.dumps(req("rpc.ping")).encode()
        status, resp = await post(server, small.ljust(8192), raw=True)
        assert status == 200 and resp["result"] == "pong"

    run(go, max_body_bytes=8192)


def test_client_vanishing_mid_body_does_not_hurt() -> None:
    async def go(server: RpcServer) -> None:
        for _ in range(3):
            _, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(
                (
                    f"POST /rpc HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
                    f"Authorization: Bearer {TOKEN}\r\nContent-Length: 1000\r\n\r\n"
                    '{"jsonrpc": "2.0", '
                ).encode()
            )
            await writer.drain()
            writer.close()
            await alive(server)

    run(go)


# -- JSON-RPC level errors ----------------------------------------------------------------------


def test_malformed_and_invalid_requests() -> None:
    async def go(server: RpcServer) -> None:
        for raw in (b"{not json", b"", b"\xff\xfe{}", b'{"jsonrpc": "2.0", '):
            status, resp = await post(server, raw, raw=True)
            assert status == 200 and code(resp) == -32700 and resp["id"] is None
            await alive(server)
        invalid: list[Any] = [
            [],
            42,
            "rpc.ping",
            {"method": "rpc.ping", "id": 1},
            {"jsonrpc": "1.0", "method": "rpc.ping", "id": 1},
            {"jsonrpc": "2.0", "method": 5, "id": 1},
            {"jsonrpc": "2.0", "method": "rpc.ping", "params": "x", "id": 1},
            {"jsonrpc": "2.0", "method": "rpc.ping", "id": True},
            {"jsonrpc": "2.0", "method": "rpc.ping", "id": {"a": 1}},
        ]
        for bad in invalid:
            status, resp = await post(server, bad)
            assert status == 200 and code(resp) == -32600, bad
            await alive(server)
        # A valid id is echoed even when the request is otherwise invalid.
        _, resp = await post(server, {"jsonrpc": "1.0", "method": "rpc.ping", "id": "q"})
        assert resp["id"] == "q"

    run(go)


def test_unknown_method_and_bad_params() -> None:
    async def go(server: RpcServer) -> None:
        _, resp = await post(server, req("no.such.method", rid="abc"))
        assert code(resp) == -32601 and resp["id"] == "abc"
        await alive(server)
        cases = [
            ({}, "a"),
            ({"a": "1"}, "a"),
            ({"a": True}, "a"),
            ({"a": 1, "b": -1}, "b"),
            ({"a": 1, "c": 2}, "c"),
            ([1, 2, 3], None),
            (["x"], "a"),
        ]
        for params, name in cases:
            _, resp = await post(server, req("math.add", params))
            assert code(resp) == -32602, params
            if name is not None:
                assert repr(name) in resp["error"]["message"]
                assert resp["error"]["data"] == {"param": name}
            await alive(server)
        _, resp = await post(server, req("math.add", {"a": 2}))
        assert resp["result"] == 3
        _, resp = await post(server, req("math.add", [2, 5]))
        assert resp["result"] == 7
        # rpc.subscribe needs the socket.
        _, resp = await post(server, req("rpc.subscribe", {"topics": ["x"]}))
        assert code(resp) == -32601

    run(go)


def test_batches_and_notifications() -> None:
    async def go(server: RpcServer) -> None:
        status, resp = await post(server, [])
        assert status == 200 and isinstance(resp, dict) and code(resp) == -32600
        await alive(server)
        status, resp = await post(server, [req("rpc.ping", rid=i) for i in range(6)])
        assert isinstance(resp, dict) and code(resp) == -32013
        await alive(server)
        batch = [
            req("math.add", {"a": 1}, rid=1),
            {"jsonrpc": "2.0", "method": "math.add", "params": {"a": 1}},  # notification
            req("nope", rid=2),
            7,
            req("math.add", {"a": "x"}, rid=3),
        ]
        status, resp = await post(server, batch)
        assert status == 200 and isinstance(resp, list) and len(resp) == 4
        by_id = {r["id"]: r for r in resp if r["id"] is not None}
        assert by_id[1]["result"] == 2
        assert code(by_id[2]) == -32601 and code(by_id[3]) == -32602
        assert [code(r) for r in resp if r["id"] is None] == [-32600]
        # Only notifications (even failing ones): nothing to answer.
        notes = [
            {"jsonrpc": "2.0", "method": "rpc.ping"},
            {"jsonrpc": "2.0", "method": "nope"},
            {"jsonrpc": "2.0", "method": "fail", "params": {"kind": "bug"}},
        ]
        status, resp = await post(server, notes)
        assert (status, resp) == (204, None)
        status, resp = await post(server, notes[0])
        assert (status, resp) == (204, None)
        await alive(server)

    run(go, max_batch=5)


def test_handler_errors_are_mapped(caplog: pytest.LogCaptureFixture) -> None:
    expected = {
        "not_found": -32001,
        "bad_input": -32002,
        "diverged": -32003,
        "offline": -32004,
        "tampered": -32005,
        "custom": -32050,
    }

    async def go(server: RpcServer) -> None:
        for kind, want in expected.items():
            _, resp = await post(server, req("fail", {"kind": kind}))
            assert code(resp) == want, kind
            await alive(server)
        _, resp = await post(server, req("fail", {"kind": "not_found"}))
        assert resp["error"]["message"] == "no dataset 'x'"
        assert resp["error"]["data"] == {"type": "DatasetNotFound"}
        _, resp = await post(server, req("fail", {"kind": "custom"}))
        assert resp["error"] == {"code": -32050, "message": "custom failure", "data": {"k": 1}}
        with caplog.at_level(logging.ERROR, logger="node.rpc.errors"):
            for method, params in (("fail", {"kind": "bug"}), ("not_json", None)):
                _, resp = await post(server, req(method, params))
                assert resp["error"] == {"code": -32603, "message": "Internal error"}
                assert "secret" not in json.dumps(resp)
                await alive(server)
        assert "secret-internal-detail" in caplog.text  # logged, not sent

    run(go)


def test_discover_describes_every_method() -> None:
    async def go(server: RpcServer) -> None:
        _, resp = await post(server, req("rpc.discover"))
        doc = resp["result"]
        validate_openrpc(doc)
        methods = {m["name"]: m for m in doc["methods"]}
        assert set(methods) == {
            "math.add",
            "fail",
            "not_json",
            "rpc.discover",
            "rpc.ping",
            "rpc.subscribe",
            "rpc.unsubscribe",
        }
        add = methods["math.add"]
        assert [(p["name"], p["required"]) for p in add["params"]] == [("a", True), ("b", False)]
        assert add["params"][1]["schema"] == {"type": "integer", "minimum": 0}
        assert add["result"]["schema"] == {"type": "integer"}
        assert {e["code"] for e in methods["fail"]["errors"]} >= {-32001, -32005, -32602}

    run(go)


# -- clients -----------------------------------------------------------------------------------


def test_clients_and_cookie(tmp_path: Path) -> None:
    async def go(server: RpcServer) -> None:
        write_cookie(tmp_path, server.url, TOKEN)
        url, token = read_cookie(tmp_path)
        async with RpcClient(url, token) as c:
            assert await c.call("math.add", a=40, b=2) == 42
            assert await c.call("math.add", 1, 1) == 2
            with pytest.raises(RpcCallError) as ei:
                await c.call("fail", kind="not_found")
            assert ei.value.code == -32001
            out = await c.batch([("math.add", {"a": 1}), ("nope", None), ("math.add", [5])])
            assert out[0] == 2 and out[2] == 6
            assert isinstance(out[1], RpcCallError) and out[1].code == -32601
            await c.notify("rpc.ping")
        async with RpcClient(url, "wrong") as c:
            with pytest.raises(RpcCallError) as ei:
                await c.call("rpc.ping")
            assert ei.value.code == -32010
        # The synchronous CLI client, in a thread so the server's loop keeps running.
        assert await asyncio.to_thread(call_sync, url, token, "math.add", {"a": 1}) == 2
        assert await asyncio.to_thread(call_sync, url, token, "math.add", [3, 4]) == 7
        with pytest.raises(RpcCallError) as ei:
            await asyncio.to_thread(call_sync, url, "wrong", "rpc.ping")
        assert ei.value.code == -32010
        with pytest.raises(RpcCallError) as ei:
            await asyncio.to_thread(call_sync, url, token, "math.add", {"a": "x"})
        assert ei.value.code == -32602

    run(go)


def test_client_reports_unreachable_server() -> None:
    async def go() -> None:
        async with serving() as server:
            url = server.url
        # Stopped: nothing listens on the port any more.
        with pytest.raises(RpcConnectionError):
            await asyncio.to_thread(call_sync, url, TOKEN, "rpc.ping", None, 2.0)
        async with RpcClient(url, TOKEN, timeout=2.0) as c:
            with pytest.raises(RpcConnectionError):
                await c.call("rpc.ping")

    asyncio.run(go())


# -- WebSocket -----------------------------------------------------------------------------------


def test_websocket_auth_and_subscribe() -> None:
    async def go(server: RpcServer) -> None:
        ws_url = server.url + "/ws"
        async with aiohttp.ClientSession() as s:
            for url, headers, status in (
                (ws_url, {}, 401),
                (f"{ws_url}?token=wrong", {}, 401),
                (f"{ws_url}?token={TOKEN}", {"Origin": "https://evil.example"}, 403),
                (ws_url, {**AUTH, "Host": "evil.example"}, 403),
            ):
                with pytest.raises(aiohttp.WSServerHandshakeError) as ei:
                    await s.ws_connect(url, headers=headers)
                assert ei.value.status == status
                await alive(server)
            # ?token= works for the socket (browsers cannot set headers there).
            async with s.ws_connect(f"{ws_url}?token={TOKEN}") as ws:
                await ws.send_json(req("math.add", {"a": 9}, rid=5))
                assert await ws.receive_json(timeout=5) == {"jsonrpc": "2.0", "result": 10, "id": 5}
                await ws.send_str("{oops")
                assert code(await ws.receive_json(timeout=5)) == -32700
                await ws.send_json(req("rpc.subscribe", {"topics": "x"}, rid=6))
                assert code(await ws.receive_json(timeout=5)) == -32602
                await ws.send_json(req("rpc.subscribe", {"topics": ["b", "a"]}, rid=7))
                assert (await ws.receive_json(timeout=5))["result"] == {
                    "added": ["a", "b"],
                    "count": 2,
                }
                await ws.send_json(req("rpc.unsubscribe", {"topics": ["b", "z"]}, rid=8))
                assert (await ws.receive_json(timeout=5))["result"] == {
                    "removed": ["b"],
                    "count": 1,
                }
                assert await server.notify("b", {"n": 0}) == 0
                assert await server.notify("a", {"n": 1}) == 1
                assert await ws.receive_json(timeout=5) == {
                    "jsonrpc": "2.0",
                    "method": "event",
                    "params": {"topic": "a", "n": 1},
                }

        # The client's async iterator.
        async with RpcClient(server.url, TOKEN) as c:
            got: list[dict[str, Any]] = []

            async def consume() -> None:
                async for ev in c.subscribe(["dataset.updated"]):
                    got.append(ev)
                    if len(got) == 2:
                        return

            task = asyncio.create_task(consume())
            while not await server.notify("dataset.updated", {"seq": 0}):
                await asyncio.sleep(0.01)
            await server.notify("other", {"seq": -1})
            await server.notify("dataset.updated", {"seq": 1})
            await asyncio.wait_for(task, 5)
            # The probe events sent before the subscription answer may or may not arrive.
            assert got[-1] == {"topic": "dataset.updated", "seq": 1}
            assert all(e["topic"] == "dataset.updated" for e in got)
            with pytest.raises(RpcCallError):
                async for _ in c.subscribe([""]):
                    pass

    run(go)


async def _raw_ws_subscriber(port: int, topic: str) -> tuple[asyncio.StreamReader, Any]:
    """A WebSocket client that subscribes and then never reads (the slow consumer)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(
        (
            f"GET /rpc/ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            f"Sec-WebSocket-Version: 13\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
        ).encode()
    )
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101")
    payload = json.dumps(req("rpc.subscribe", {"topics": [topic]})).encode()
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    assert len(payload) < 126
    writer.write(struct.pack("!BB", 0x81, 0x80 | len(payload)) + mask + masked)
    await writer.drain()
    return reader, writer


def test_slow_websocket_client_is_dropped() -> None:
    async def go(server: RpcServer) -> None:
        _reader, writer = await _raw_ws_subscriber(server.port, "big")
        async with (
            aiohttp.ClientSession() as s,
            s.ws_connect(server.url + "/ws", headers=AUTH) as fast,
        ):
            await fast.send_json(req("rpc.subscribe", {"topics": ["big"]}))
            await fast.receive_json(timeout=5)
            while server.ws_client_count < 2 or not all(c.topics for c in server._clients):
                await asyncio.sleep(0.01)
            blob = "x" * 65536
            worst = 0.0
            # The slow client's socket buffers fill up, then its 8-slot queue: it is dropped.
            for i in range(400):
                t0 = time.perf_counter()
                await server.notify("big", {"i": i, "blob": blob})
                worst = max(worst, time.perf_counter() - t0)
                msg = await fast.receive_json(timeout=5)
                assert msg["params"]["i"] == i
                if server.ws_client_count == 1:
                    break
            assert server.ws_client_count == 1, "slow client was never dropped"
            assert worst < 0.5  # notify never waits for a client
            # The fast client keeps receiving, and the daemon keeps serving.
            await server.notify("big", {"i": -1})
            assert (await fast.receive_json(timeout=5))["params"]["i"] == -1
            await alive(server)
        writer.close()

    run(go, ws_queue_size=8)
