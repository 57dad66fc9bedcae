"""Regression cases of the RPC boundary found by the hostile-input review.

Each case once misbehaved: deeply nested JSON answered HTTP 500 in plain text (the WebSocket
dropped with 1006), a non-UTF-8 ``Authorization`` header gave HTTP 500 and a logged traceback
before authentication, integers beyond 64 bits and lone surrogates reached the handlers and came
back as -32603, ``NaN``/``Infinity`` ids were echoed as invalid JSON, UTF-16/32 bodies were
accepted although only UTF-8 is documented, and half-open connections were held for ever.
Each test runs a real :class:`RpcServer` on 127.0.0.1 and checks that it still answers after.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest

from node.rpc.errors import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, UNAUTHORIZED
from node.rpc.registry import Param, RpcRegistry
from node.rpc.server import (
    MAX_JSON_DEPTH,
    MAX_TOPIC_LENGTH,
    MAX_WS_TOPICS,
    RpcServer,
    parse_json_body,
)

TOKEN = "t0ken-" + "cd" * 29
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _registry() -> RpcRegistry:
    reg = RpcRegistry()

    @reg.method("echo", params=[Param("value", {}, required=False)])
    async def echo(value: Any = None) -> Any:
        return value

    @reg.method("events", params=[Param("after_id", {"type": "integer", "minimum": 0})])
    async def events(after_id: int) -> int:
        return after_id

    @reg.method("name", params=[Param("s", {"type": "string"})])
    async def name(s: str) -> int:
        return len(s.encode("utf-8"))  # raised UnicodeEncodeError (-32603) for "\ud800"

    return reg


@asynccontextmanager
async def serving(**kw: Any) -> AsyncIterator[RpcServer]:
    server = RpcServer(_registry(), token=TOKEN, **kw)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def post(server: RpcServer, body: bytes, headers: dict[str, str] | None = None) -> Any:
    async with (
        aiohttp.ClientSession() as s,
        s.post(server.url, data=body, headers=AUTH if headers is None else headers) as r,
    ):
        raw = await r.read()
        return r.status, json.loads(raw)  # strict: NaN / Infinity would not parse


async def alive(server: RpcServer) -> None:
    status, reply = await post(server, b'{"jsonrpc": "2.0", "method": "rpc.ping", "id": 1}')
    assert (status, reply["result"]) == (200, "pong")


def run(coro_fn: Any, **kw: Any) -> None:
    async def go() -> None:
        async with serving(**kw) as server:
            await coro_fn(server)
            await alive(server)

    asyncio.run(go())


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"jsonrpc": "2.0", "id": 1, "method": "echo", "params": {"value": '
        + b"[" * 5_000
        + b"]" * 5_000
        + b"}}",
    ],
)
def test_deep_nesting_is_a_parse_error(body: bytes) -> None:
    async def go(server: RpcServer) -> None:
        status, reply = await post(server, body)
        assert status == 200
        assert reply["error"]["code"] == PARSE_ERROR
        assert "nested deeper" in reply["error"]["message"]

    run(go)


def test_deep_nesting_over_the_websocket_keeps_the_connection() -> None:
    async def go(server: RpcServer) -> None:
        ws_url = server.url.replace("http://", "ws://") + "/ws"
        async with aiohttp.ClientSession() as s, s.ws_connect(ws_url, headers=AUTH) as ws:
            await ws.send_str("[" * 50_000)
            reply = json.loads((await ws.receive(timeout=10)).data)
            assert reply["error"]["code"] == PARSE_ERROR
            await ws.send_str('{"jsonrpc": "2.0", "method": "rpc.ping", "id": 2}')
            assert json.loads((await ws.receive(timeout=10)).data)["result"] == "pong"

    run(go)


def test_moderate_nesting_still_parses() -> None:
    value = json.loads("[" * (MAX_JSON_DEPTH - 3) + "]" * (MAX_JSON_DEPTH - 3))
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "echo", "params": {"value": value}})

    async def go(server: RpcServer) -> None:
        _, reply = await post(server, body.encode())
        assert reply["result"] == value

    run(go)


def test_non_utf8_authorization_header_is_401_not_500() -> None:
    async def go(server: RpcServer) -> None:
        host, port = "127.0.0.1", server.port
        reader, writer = await asyncio.open_connection(host, port)
        body = b'{"jsonrpc": "2.0", "method": "rpc.ping", "id": 1}'
        writer.write(
            b"POST /rpc HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAuthorization: Bearer \xff\xfe\xc3\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
            % (port, len(body))
            + body
        )
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        status_line, _, rest = raw.partition(b"\r\n")
        assert b" 401 " in status_line, raw[:200]
        assert json.loads(rest.partition(b"\r\n\r\n")[2])["error"]["code"] == UNAUTHORIZED

    run(go)


@pytest.mark.parametrize("after_id", [2**63, 2**64, 10**30, -(2**63) - 1])
def test_integers_beyond_64_bits_are_invalid_params(after_id: int) -> None:
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "events", "params": {"after_id": after_id}}
    )

    async def go(server: RpcServer) -> None:
        _, reply = await post(server, body.encode())
        assert reply["error"]["code"] == INVALID_PARAMS

    run(go)


@pytest.mark.parametrize(
    "body",
    [
        b'{"jsonrpc": "2.0", "id": 1, "method": "name", "params": {"s": "\\ud800"}}',
        b'{"jsonrpc": "2.0", "id": 1, "method": "echo", "params": {"value": {"\\udfff": 1}}}',
        b'{"jsonrpc": "2.0", "id": 1, "method": "echo", "params": [["\\ud800x"]]}',
    ],
)
def test_lone_surrogates_are_invalid_params(body: bytes) -> None:
    async def go(server: RpcServer) -> None:
        _, reply = await post(server, body)
        assert reply["error"]["code"] == INVALID_PARAMS

    run(go)


@pytest.mark.parametrize("rid", [b"NaN", b"Infinity", b"-Infinity", b"1e400"])
def test_non_finite_ids_are_refused_and_never_echoed(rid: bytes) -> None:
    body = b'{"jsonrpc": "2.0", "id": ' + rid + b', "method": "rpc.ping"}'

    async def go(server: RpcServer) -> None:
        _, reply = await post(server, body)  # json.loads in post() is strict
        assert reply["error"]["code"] in (PARSE_ERROR, INVALID_REQUEST)
        assert reply["id"] is None

    run(go)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32", "utf-32-be"])
def test_bodies_that_are_not_utf8_are_a_parse_error(encoding: str) -> None:
    body = '{"jsonrpc": "2.0", "id": 1, "method": "rpc.ping"}'.encode(encoding)

    async def go(server: RpcServer) -> None:
        _, reply = await post(server, body)
        assert reply["error"]["code"] == PARSE_ERROR

    run(go)


def test_parse_json_body_is_linear_and_exact() -> None:
    assert parse_json_body(b'{"a": "[[[[", "b": [1]}') == ({"a": "[[[[", "b": [1]}, None)
    assert parse_json_body(b'["\\\\", "\\"[[["]') == (["\\", '"[[['], None)
    payload, why = parse_json_body(b"[" * 10**6)
    assert payload is None and why is not None and "nested deeper" in why


def test_half_open_and_trickling_connections_are_closed() -> None:
    """Silent, partial-header and trickling clients are disconnected after the idle timeout."""

    async def go(server: RpcServer) -> None:
        async def held(first: bytes, trickle: bytes | None) -> float:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            t0 = time.monotonic()
            writer.write(first)

            async def drip() -> None:
                while trickle is not None:
                    await asyncio.sleep(0.2)
                    writer.write(trickle)

            dripper = asyncio.create_task(drip())
            try:
                await asyncio.wait_for(reader.read(), 15)
            except ConnectionResetError:
                # Closed all the same: a socket closed with the client's unread bytes in its
                # receive buffer (the trickle) ends with a RST, not a FIN (TCP, RFC 2525).
                pass
            finally:
                dripper.cancel()
                writer.close()
            return time.monotonic() - t0

        host = f"Host: 127.0.0.1:{server.port}\r\n".encode()
        post_head = (
            b"POST /rpc HTTP/1.1\r\n"
            + host
            + AUTH["Authorization"].join([b"Authorization: ".decode(), "\r\n"]).encode()
        )
        times = await asyncio.gather(
            held(b"", None),
            held(b"POST /rpc HTTP/1.1\r\n" + host, None),
            held(b"POST /rpc HTTP/1.1\r\n", b"X-Slow: 1\r\n"),
            held(post_head + b"Content-Length: 1000\r\n\r\n{", b" "),
        )
        assert all(t < 5.0 for t in times), times

    run(go, idle_timeout_s=1.0)


async def _ws_call(ws: aiohttp.ClientWebSocketResponse, method: str, topics: Any) -> Any:
    await ws.send_json({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"topics": topics}})
    msg = await ws.receive(timeout=10)
    assert msg.type == aiohttp.WSMsgType.TEXT, msg
    return len(msg.data), json.loads(msg.data)


def test_topics_per_websocket_are_limited_and_a_refusal_adds_nothing() -> None:
    """Issue 26: 30 messages of 70,000 topics each grew one socket's set (and each reply) without
    bound. Now a socket has at most ``max_ws_topics``; a call that would pass it is refused
    whole with a typed error naming the limit."""

    async def go(server: RpcServer) -> None:
        ws_url = server.url.replace("http://", "ws://") + "/ws"
        async with aiohttp.ClientSession() as s, s.ws_connect(ws_url, headers=AUTH) as ws:
            _, r = await _ws_call(ws, "rpc.subscribe", ["t0", "t1", "t2", "t3", "t4"])
            assert r["result"] == {"added": ["t0", "t1", "t2", "t3", "t4"], "count": 5}
            _, r = await _ws_call(ws, "rpc.subscribe", ["t3", "t4", "t5", "t6", "t7"])
            assert r["result"] == {"added": ["t5", "t6", "t7"], "count": 8}
            _, r = await _ws_call(ws, "rpc.subscribe", ["t0", "t8"])
            assert r["error"]["code"] == INVALID_PARAMS
            assert r["error"]["data"] == {
                "type": "TooManyTopics",
                "param": "topics",
                "limit": 8,
                "subscribed": 8,
                "requested": 1,
            }
            assert "at most 8 topics" in r["error"]["message"]
            assert await server.notify("t8", {}) == 0  # refused whole: t8 was not added
            _, r = await _ws_call(ws, "rpc.subscribe", ["t0"])  # already there: no growth
            assert r["result"] == {"added": [], "count": 8}
            _, r = await _ws_call(ws, "rpc.unsubscribe", ["t0", "t1", "nope"])
            assert r["result"] == {"removed": ["t0", "t1"], "count": 6}
            _, r = await _ws_call(ws, "rpc.subscribe", ["t8", "t9"])
            assert r["result"] == {"added": ["t8", "t9"], "count": 8}
            assert await server.notify("t8", {}) == 1

    run(go, max_ws_topics=8)


async def _ws_ping(ws: aiohttp.ClientWebSocketResponse) -> Any:
    await ws.send_json({"jsonrpc": "2.0", "id": 1, "method": "rpc.ping"})
    return json.loads((await ws.receive(timeout=10)).data)["result"]


def test_websockets_open_at_once_are_limited_and_a_closed_one_frees_its_place() -> None:
    """An authenticated client looping on connects grew the sockets (a send task, a queue and a
    topic set each, every event checked against all of them) without bound. One more than
    ``max_ws_clients`` is answered HTTP 503 naming the limit, before the upgrade."""

    async def go(server: RpcServer) -> None:
        ws_url = server.url.replace("http://", "ws://") + "/ws"
        async with aiohttp.ClientSession() as s:
            held = [await s.ws_connect(ws_url, headers=AUTH) for _ in range(3)]
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await s.ws_connect(ws_url, headers=AUTH)
            assert refused.value.status == 503
            async with s.get(
                ws_url,
                headers={
                    **AUTH,
                    "Connection": "Upgrade",
                    "Upgrade": "websocket",
                    "Sec-WebSocket-Version": "13",
                    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
                },
            ) as r:
                body = await r.json()
                assert (r.status, r.headers["Retry-After"], body["limit"]) == (503, "5", 3)
                assert "MAX_WS_CLIENTS" in body["message"]
            assert await _ws_ping(held[0]) == "pong"  # the open ones are untouched
            await held.pop().close()
            for _ in range(100):  # the server sees the close a moment later
                try:
                    held.append(await s.ws_connect(ws_url, headers=AUTH))
                    break
                except aiohttp.WSServerHandshakeError:
                    await asyncio.sleep(0.02)
            assert len(held) == 3
            assert await _ws_ping(held[-1]) == "pong"
            for ws in held:
                await ws.close()
        await alive(server)

    run(go, max_ws_clients=3)


@pytest.mark.parametrize(
    ("method", "topic"), [("rpc.subscribe", "x" * 129), ("rpc.unsubscribe", "y" * 100_000)]
)
def test_topic_names_are_limited_in_length(method: str, topic: str) -> None:
    async def go(server: RpcServer) -> None:
        ws_url = server.url.replace("http://", "ws://") + "/ws"
        async with aiohttp.ClientSession() as s, s.ws_connect(ws_url, headers=AUTH) as ws:
            _, r = await _ws_call(ws, method, [topic])
            assert r["error"]["code"] == INVALID_PARAMS
            assert r["error"]["data"]["param"].startswith("topics")
            _, r = await _ws_call(ws, "rpc.subscribe", ["x" * MAX_TOPIC_LENGTH])
            assert r["result"] == {"added": ["x" * MAX_TOPIC_LENGTH], "count": 1}

    run(go)


def test_a_topic_flood_gets_small_answers_and_holds_nothing() -> None:
    """The issue's flood (70,000 topics per message) at the default limit: each answer is a
    short error, the socket keeps the topics it had, and re-subscribing answers only changes."""

    async def go(server: RpcServer) -> None:
        ws_url = server.url.replace("http://", "ws://") + "/ws"
        first = [f"topic.{i}" for i in range(MAX_WS_TOPICS)]
        async with aiohttp.ClientSession() as s, s.ws_connect(ws_url, headers=AUTH) as ws:
            size, r = await _ws_call(ws, "rpc.subscribe", first)
            assert r["result"]["count"] == MAX_WS_TOPICS
            for round_ in range(5):
                flood = [f"f{round_}.{i}" for i in range(70_000)]  # about 700 KB
                size, r = await _ws_call(ws, "rpc.subscribe", flood)
                assert r["error"]["data"]["type"] == "TooManyTopics"
                assert r["error"]["data"]["requested"] == 70_000
                assert size < 400, size
                size, r = await _ws_call(ws, "rpc.subscribe", first)
                assert r["result"] == {"added": [], "count": MAX_WS_TOPICS}
                assert size < 100, size
            (client,) = server._clients
            assert client.topics == set(first)

    run(go)
