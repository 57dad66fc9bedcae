"""The local JSON-RPC 2.0 control server: ``POST /rpc`` and ``GET /rpc/ws`` on aiohttp.

Security model (see ``docs/rpc.md``): the server binds to 127.0.0.1 by default; every request
must carry the node's token (``Authorization: Bearer <token>``; the WebSocket may pass
``?token=`` because browsers cannot set headers on a WebSocket); the ``Host`` header must name a
loopback address with our port (or a configured name) and a present ``Origin`` must be
allow-listed, which defeats DNS rebinding and cross-site requests from a browser. Checks run in
the order Host/Origin -> token -> size, each before any body is read. Access logging is off so a
``?token=`` query never reaches a log.

Everything else is a JSON-RPC error at HTTP 200, except transport-level refusals, which use the
matching HTTP status with a JSON-RPC error body: 401 (-32010), 403 (-32011), 413 (-32012).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import math
import os
import re
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from aiohttp import WSMsgType, web

from node.rpc.errors import (
    BATCH_TOO_LARGE,
    FORBIDDEN,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    PAYLOAD_TOO_LARGE,
    UNAUTHORIZED,
    RpcError,
    TooManyTopics,
    error_object,
    error_response,
)
from node.rpc.http_body import read_bounded
from node.rpc.registry import MethodSpec, Param, RpcRegistry, openrpc_document

_log = logging.getLogger(__name__)

RPC_PATH: Final = "/rpc"
WS_PATH: Final = "/rpc/ws"
EVENT_METHOD: Final = "event"
"""The ``method`` of every server -> client notification; ``params.topic`` says which."""
WS_CLOSE_TOO_SLOW: Final = 4000
"""WebSocket close code sent to a client whose send queue overflowed."""
_LOOPBACK_NAMES: Final = ("127.0.0.1", "localhost", "[::1]")
_JSON_HEADERS: Final = {"Content-Type": "application/json"}
_PARSE_INLINE_BYTES: Final = 65536
_ALWAYS_ALLOWED: Final = frozenset({"rpc.ping", "rpc.subscribe", "rpc.unsubscribe"})
MAX_JSON_DEPTH: Final = 64
"""Deepest nesting of arrays/objects a request may have (no method takes more than a few)."""
MAX_WS_TOPICS: Final = 64
"""Default limit of topics one WebSocket may subscribe to (the console uses 12): the set is kept
per socket and checked on every event, so a client must not grow it without bound."""
MAX_WS_CLIENTS: Final = 64
"""Default limit of WebSockets open at once (the console holds one per browser tab): each has a
send task, a queue and a topic set, and every event is checked against every socket, so an
authenticated client looping on connects must not grow them without bound."""
MAX_TOPIC_LENGTH: Final = 128
"""Longest topic name ``rpc.subscribe``/``rpc.unsubscribe`` accept, in characters."""
_TOPICS_SCHEMA: Final = {
    "type": "array",
    "items": {"type": "string", "minLength": 1, "maxLength": MAX_TOPIC_LENGTH},
}


def _topics_changed_schema(changed: str) -> dict[str, Any]:
    """The result schema of ``rpc.subscribe`` (``changed="added"``) or ``rpc.unsubscribe``
    (``"removed"``): the topics changed and how many the socket now has."""
    return {
        "type": "object",
        "required": [changed, "count"],
        "properties": {
            changed: {"type": "array", "items": {"type": "string"}},
            "count": {"type": "integer", "minimum": 0},
        },
    }


@dataclass(eq=False)
class _WsClient:
    """One connected WebSocket: its topics and bounded outgoing queue."""

    ws: web.WebSocketResponse
    request: web.Request
    queue: asyncio.Queue[str]
    topics: set[str] = field(default_factory=set)
    dropped: bool = False
    allowed: frozenset[str] | None = None
    """Methods this socket may call (``None``: every method; the console gets a list)."""
    sender: asyncio.Task[None] | None = None


class RpcServer:
    """Serves an :class:`RpcRegistry` over HTTP POST and WebSocket on a local port.

    ``port=0`` picks a free port (read :attr:`port` / :attr:`url` after :meth:`start`).
    ``allowed_hosts`` adds Host names (``"name"`` allows ``name:<port>``; ``"name:port"`` is
    taken literally); ``allowed_origins`` lists full origins such as ``"http://localhost:3000"``.
    ``ws_queue_size`` bounds each WebSocket client's pending messages: a client that falls that
    far behind is disconnected (close code 4000) rather than slowing the daemon.
    ``max_ws_topics`` bounds the topics of each WebSocket (:class:`TooManyTopics` beyond it).
    ``max_ws_clients`` bounds the WebSockets open at once: one more is answered HTTP 503 (with
    ``Retry-After``) before the upgrade.
    """

    def __init__(
        self,
        registry: RpcRegistry,
        *,
        token: str,
        host: str = "127.0.0.1",
        port: int = 0,
        max_body_bytes: int = 1_048_576,
        max_batch: int = 50,
        allowed_hosts: Iterable[str] | None = None,
        allowed_origins: Iterable[str] = (),
        ws_queue_size: int = 256,
        version: str = "0.1.0",
        unix_path: Path | None = None,
        idle_timeout_s: float = 10.0,
        max_ws_topics: int = MAX_WS_TOPICS,
        max_ws_clients: int = MAX_WS_CLIENTS,
    ) -> None:
        if not token:
            raise ValueError("an RPC token is required")
        self._registry = registry
        self._token = token.encode()
        self._host = host
        self._requested_port = port
        self._max_body = max_body_bytes
        self._max_batch = max_batch
        self._extra_hosts = tuple(h.lower() for h in (allowed_hosts or ()))
        self._origins = frozenset(o.lower().rstrip("/") for o in allowed_origins)
        self._ws_queue_size = ws_queue_size
        self._max_ws_topics = max_ws_topics
        self._max_ws_clients = max_ws_clients
        # Also served on a Unix socket (mode 0600): it reaches a daemon running in another
        # network namespace (`make run` isolates the node with `unshare -rn`).
        self._unix_path = unix_path
        self._version = version
        # A connection that has not sent a complete request (headers and body) within this time
        # is closed: half-open and trickling clients cannot hold sockets for ever.
        self._idle_timeout = idle_timeout_s
        self._port: int | None = None
        self._runner: web.AppRunner | None = None
        self._clients: set[_WsClient] = set()
        # Strong references to fire-and-forget drop tasks (the loop only keeps weak ones).
        self._tasks: set[asyncio.Task[None]] = set()
        self._mounts: list[Callable[[web.Application], None]] = []
        self._builtins = self._builtin_registry()

    def _builtin_registry(self) -> RpcRegistry:
        """The methods the server answers itself: ``rpc.ping``, ``rpc.discover``,
        ``rpc.subscribe`` and ``rpc.unsubscribe``."""
        builtins = RpcRegistry()
        builtins.add("rpc.ping", self._ping, summary="Liveness check", _builtin=True)
        builtins.add(
            "rpc.discover",
            self._discover,
            summary="The OpenRPC document of this server",
            result={"type": "object", "required": ["openrpc", "info", "methods"]},
            _builtin=True,
        )
        # The answers say what changed and how many topics the socket has: echoing the whole
        # set made every call's reply as large as everything subscribed so far.
        builtins.add(
            "rpc.subscribe",
            self._subscribe_stub,
            params=[
                Param(
                    "topics",
                    _TOPICS_SCHEMA,
                    description=(
                        "Event topics to receive as `event` notifications (at most "
                        f"{MAX_WS_TOPICS} per socket by default, each at most "
                        f"{MAX_TOPIC_LENGTH} characters)"
                    ),
                )
            ],
            result=_topics_changed_schema("added"),
            summary=(
                "WebSocket only: receive `event` notifications for these topics; answers the "
                "topics newly added and how many the socket now has"
            ),
            _builtin=True,
        )
        builtins.add(
            "rpc.unsubscribe",
            self._subscribe_stub,
            params=[Param("topics", _TOPICS_SCHEMA)],
            result=_topics_changed_schema("removed"),
            summary=(
                "WebSocket only: stop receiving these topics; answers the topics removed and "
                "how many the socket still has"
            ),
            _builtin=True,
        )
        return builtins

    # -- lifecycle -------------------------------------------------------------------------

    def mount(self, add_routes: Callable[[web.Application], None]) -> None:
        """Have ``add_routes(app)`` add routes of its own when the server starts (the console).

        They share the listener, so they are never on a public port unless the RPC is.
        """
        if self._runner is not None:
            raise RuntimeError("mount() must be called before start()")
        self._mounts.append(add_routes)

    async def start(self) -> None:
        """Bind and start serving."""
        app = web.Application(client_max_size=self._max_body)
        app.router.add_post(RPC_PATH, self._handle_post)
        app.router.add_route("OPTIONS", RPC_PATH, self._handle_preflight)
        app.router.add_get(WS_PATH, self._handle_ws)
        for add_routes in self._mounts:
            add_routes(app)
        runner = web.AppRunner(
            app,
            access_log=None,
            handle_signals=False,
            shutdown_timeout=1.0,
            # aiohttp arms this timer when a connection opens and keeps it while the request
            # line and headers arrive, so it bounds silent and trickling clients too.
            keepalive_timeout=self._idle_timeout,
            # After an early answer (413, 408) aiohttp drains the unread body for this long;
            # a trickling client must not stretch that beyond the idle bound.
            lingering_time=self._idle_timeout,
        )
        await runner.setup()
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self._host, self._requested_port))
            sock.setblocking(False)
            site = web.SockSite(runner, sock)
            await site.start()
        except BaseException:
            sock.close()
            await runner.cleanup()
            raise
        self._port = sock.getsockname()[1]
        self._runner = runner
        if self._unix_path is not None:
            self._unix_path.unlink(missing_ok=True)
            old_umask = os.umask(0o177)  # the socket file is created 0600, never wider
            try:
                await web.UnixSite(runner, str(self._unix_path)).start()
            finally:
                os.umask(old_umask)

    async def stop(self) -> None:
        """Close every WebSocket (1001 going away) and stop listening."""
        await asyncio.gather(
            *(
                self._drop(c, code=1001, message=b"server shutting down")
                for c in list(self._clients)
            ),
            *list(self._tasks),
        )
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._unix_path is not None:
            self._unix_path.unlink(missing_ok=True)

    @property
    def port(self) -> int:
        """The bound port (after :meth:`start`)."""
        if self._port is None:
            raise RuntimeError("server not started")
        return self._port

    @property
    def url(self) -> str:
        """``http://<host>:<port>/rpc``, the POST endpoint (the WebSocket is ``<url>/ws``)."""
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}{RPC_PATH}"

    @property
    def ws_client_count(self) -> int:
        """WebSocket clients currently connected."""
        return len(self._clients)

    # -- notifications ---------------------------------------------------------------------

    async def notify(self, topic: str, params: dict[str, Any]) -> int:
        """Queue ``{"method": "event", "params": {"topic": topic, **params}}`` for subscribers.

        Never waits on a client: a subscriber whose queue is full is dropped. Returns the number
        of clients the event was queued for.
        """
        subscribers = [c for c in self._clients if topic in c.topics and not c.dropped]
        if not subscribers:
            return 0
        text = json.dumps(
            {"jsonrpc": "2.0", "method": EVENT_METHOD, "params": {**params, "topic": topic}}
        )
        sent = 0
        for client in subscribers:
            if self._enqueue(client, text):
                sent += 1
        return sent

    def _enqueue(self, client: _WsClient, text: str) -> bool:
        try:
            client.queue.put_nowait(text)
        except asyncio.QueueFull:
            _log.warning("RPC WebSocket client too slow; dropping it")
            client.dropped = True
            task = asyncio.get_running_loop().create_task(
                self._drop(client, code=WS_CLOSE_TOO_SLOW, message=b"send queue overflow")
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return False
        return True

    async def _drop(self, client: _WsClient, *, code: int, message: bytes) -> None:
        client.dropped = True
        self._clients.discard(client)
        if client.sender is not None and client.sender is not asyncio.current_task():
            client.sender.cancel()
        # A slow client may never read our close frame: bound the polite close, then abort.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.ws.close(code=code, message=message), 1.0)
        transport = client.request.transport
        if transport is not None and not transport.is_closing():
            transport.abort()

    # -- checks ----------------------------------------------------------------------------

    def host_ok(self, request: web.Request) -> bool:
        """Whether ``Host`` names this server (loopback with our port, or a configured name)."""
        host = request.headers.get("Host", "").lower()
        port = self.port
        allowed = {f"{name}:{port}" for name in _LOOPBACK_NAMES}
        transport = request.transport
        if transport is not None and isinstance(transport.get_extra_info("sockname"), str):
            allowed.add("localhost")  # the Unix socket: no port in the Host header
        for extra in self._extra_hosts:
            allowed.add(extra)
            allowed.add(f"{extra}:{port}")
        return host in allowed

    def _origin_ok(self, request: web.Request) -> bool:
        origin = request.headers.get("Origin")
        return origin is None or origin.lower().rstrip("/") in self._origins

    def _token_ok(self, request: web.Request, *, allow_query: bool) -> bool:
        given = ""
        auth = request.headers.get("Authorization", "")
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer":
            given = value.strip()
        elif allow_query:
            given = request.query.get("token", "")
        try:
            given_bytes = given.encode("utf-8")
        except UnicodeEncodeError:  # aiohttp keeps undecodable header bytes as surrogates
            return False
        return hmac.compare_digest(given_bytes, self._token)

    def _refuse(self, request: web.Request, *, allow_query: bool) -> web.Response | None:
        if not self.host_ok(request) or not self._origin_ok(request):
            return _http_error(403, FORBIDDEN)
        if not self._token_ok(request, allow_query=allow_query):
            resp = _http_error(401, UNAUTHORIZED)
            resp.headers["WWW-Authenticate"] = "Bearer"
            return resp
        return None

    # -- HTTP ------------------------------------------------------------------------------

    def _cors(self, request: web.Request, resp: web.StreamResponse) -> web.StreamResponse:
        # Only reached once the Origin passed the allow-list: a browser page from an allowed
        # origin may read the answer; every other origin has already been refused with 403.
        origin = request.headers.get("Origin")
        if origin is not None:
            resp.headers["Access-Control-Allow-Origin"] = origin
            resp.headers["Vary"] = "Origin"
        return resp

    async def _handle_preflight(self, request: web.Request) -> web.StreamResponse:
        # CORS preflight carries no credentials, so only Host and Origin are checked.
        if not self.host_ok(request) or not self._origin_ok(request):
            return _http_error(403, FORBIDDEN)
        resp = web.Response(status=204)
        resp.headers["Access-Control-Allow-Methods"] = "POST"
        resp.headers["Access-Control-Allow-Headers"] = "Authorization, Content-Type"
        resp.headers["Access-Control-Max-Age"] = "600"
        return self._cors(request, resp)

    async def _handle_post(self, request: web.Request) -> web.StreamResponse:
        refusal = self._refuse(request, allow_query=False)
        if refusal is not None:
            return refusal
        return self._cors(request, await self._serve_post(request))

    async def _serve_post(self, request: web.Request) -> web.StreamResponse:
        length = request.content_length
        if length is not None and length > self._max_body:
            return _too_large()
        # Content-Length may be absent (chunked): cap the read ourselves, and bound its time.
        try:
            async with asyncio.timeout(self._idle_timeout):
                body = await read_bounded(request.content, self._max_body)
        except TimeoutError:
            resp = _http_error(408, INVALID_REQUEST, "request body not received in time")
            resp.force_close()
            return resp
        if len(body) > self._max_body:
            return _too_large()
        reply = await self._handle_payload(bytes(body))
        if reply is None:
            return web.Response(status=204)
        return web.Response(body=reply.encode(), headers=_JSON_HEADERS)

    async def handle_payload(
        self, body: bytes, *, allowed: frozenset[str] | None = None
    ) -> str | None:
        """Answer a JSON-RPC payload received by another route, which did its own checks.

        Only methods in ``allowed`` may be called (``rpc.ping`` always); the console's POST
        endpoint uses it with the methods its pages need.
        """
        return await self._handle_payload(body, None, allowed)

    async def serve_ws(
        self, request: web.Request, *, allowed: frozenset[str] | None = None
    ) -> web.StreamResponse:
        """The event-stream WebSocket for a request another route authenticated itself."""
        return await self._serve_ws(request, allowed)

    async def _handle_payload(
        self,
        body: bytes,
        client: _WsClient | None = None,
        allowed: frozenset[str] | None = None,
    ) -> str | None:
        """Answer one JSON-RPC payload (single or batch); ``None`` when nothing is due."""
        if client is not None:
            allowed = client.allowed
        # A large body takes tens of milliseconds to scan and decode. The worker thread does not
        # free the event loop for that time (``re`` and ``json`` hold the GIL); what bounds the
        # pause is that every step is linear in the body (docs/rpc.md, "Security").
        if len(body) > _PARSE_INLINE_BYTES:
            payload, problem = await asyncio.to_thread(parse_json_body, body)
        else:
            payload, problem = parse_json_body(body)
        if problem is not None:
            return json.dumps(error_response(PARSE_ERROR, f"Parse error: {problem}"))
        if isinstance(payload, list):
            if not payload:
                return json.dumps(error_response(INVALID_REQUEST, "empty batch"))
            if len(payload) > self._max_batch:
                return json.dumps(
                    error_response(
                        BATCH_TOO_LARGE,
                        f"batch of {len(payload)} exceeds the limit of {self._max_batch}",
                    )
                )
            answers = await asyncio.gather(
                *(self._answer(item, client, allowed) for item in payload)
            )
            parts = [a for a in answers if a is not None]
            return f"[{','.join(parts)}]" if parts else None
        return await self._answer(payload, client, allowed)

    async def _answer(
        self, req: Any, client: _WsClient | None, allowed: frozenset[str] | None = None
    ) -> str | None:
        """One request object -> its serialised response, or None for a notification."""
        if not isinstance(req, dict):
            return json.dumps(error_response(INVALID_REQUEST, "request must be an object"))
        rid = req.get("id")
        id_ok = (
            rid is None
            or isinstance(rid, str)
            or (isinstance(rid, int | float) and not isinstance(rid, bool) and math.isfinite(rid))
        )
        if not id_ok:
            return json.dumps(error_response(INVALID_REQUEST, "id must be a string or number"))
        method = req.get("method")
        params = req.get("params")
        problem = None
        if req.get("jsonrpc") != "2.0":
            problem = 'jsonrpc must be "2.0"'
        elif not isinstance(method, str):
            problem = "method must be a string"
        elif params is not None and not isinstance(params, (list, dict)):
            problem = "params must be an array or an object"
        if problem is not None:
            return json.dumps(error_response(INVALID_REQUEST, problem, id=rid))
        assert isinstance(method, str)
        if not _valid_unicode(params):
            why = "params hold a string that is not valid Unicode"
            return json.dumps(error_response(INVALID_PARAMS, why, id=rid))
        is_notification = "id" not in req
        try:
            if allowed is not None and method not in allowed and method not in _ALWAYS_ALLOWED:
                raise RpcError(METHOD_NOT_FOUND, f"method not found: {method}")
            result = await self._dispatch(method, params, client)
            if is_notification:
                return None
            return json.dumps({"jsonrpc": "2.0", "result": result, "id": rid})
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if is_notification:
                error_object(exc, method=method)  # still logged when unexpected
                return None
            return json.dumps(
                {"jsonrpc": "2.0", "error": error_object(exc, method=method), "id": rid}
            )

    async def _dispatch(self, method: str, params: Any, client: _WsClient | None) -> Any:
        if method in ("rpc.subscribe", "rpc.unsubscribe"):
            if client is None:
                raise RpcError(METHOD_NOT_FOUND, f"{method} is only available over {WS_PATH}")
            spec = self._builtins.get(method)
            assert spec is not None
            given = params.get("topics") if isinstance(params, dict) else params and params[0]
            if (
                method == "rpc.subscribe"
                and isinstance(given, list)
                and len(given) > self._max_ws_topics
            ):
                # Refused before each item is validated: a flood costs its decoding only.
                raise TooManyTopics(self._max_ws_topics, len(client.topics), len(given))
            topics = set(spec.bind(params)["topics"])
            if method == "rpc.unsubscribe":
                removed = topics & client.topics
                client.topics -= removed
                return {"removed": sorted(removed), "count": len(client.topics)}
            added = topics - client.topics
            if len(client.topics) + len(added) > self._max_ws_topics:
                raise TooManyTopics(self._max_ws_topics, len(client.topics), len(added))
            client.topics |= added
            return {"added": sorted(added), "count": len(client.topics)}
        spec = self._lookup(method)
        kwargs = spec.bind(params)
        result = await spec.handler(**kwargs)
        # Serialise here so a non-JSON result is an internal error, not a broken response.
        try:
            json.dumps(result, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise RuntimeError(f"{method} returned a non-JSON result") from exc
        return result

    def _lookup(self, method: str) -> MethodSpec:
        spec = self._builtins.get(method) or self._registry.get(method)
        if spec is None:
            raise RpcError(METHOD_NOT_FOUND, f"method not found: {method}")
        return spec

    # -- built-in methods ------------------------------------------------------------------

    async def _ping(self) -> str:
        return "pong"

    async def _discover(self) -> dict[str, Any]:
        # Method names never collide: the registry refuses the builtins' ``rpc.`` prefix.
        methods = [*self._builtins, *self._registry]
        return openrpc_document(methods, title="odf-node JSON-RPC", version=self._version)

    async def _subscribe_stub(self, topics: list[str]) -> dict[str, Any]:
        # Dispatch handles the subscription methods itself (they need the client).
        raise RpcError(INVALID_PARAMS, "unreachable")  # pragma: no cover

    # -- WebSocket -------------------------------------------------------------------------

    async def _handle_ws(self, request: web.Request) -> web.StreamResponse:
        refusal = self._refuse(request, allow_query=True)
        if refusal is not None:
            return refusal
        return await self._serve_ws(request, None)

    async def _serve_ws(
        self, request: web.Request, allowed: frozenset[str] | None
    ) -> web.StreamResponse:
        if len(self._clients) >= self._max_ws_clients:
            # Refused before the upgrade: a plain HTTP answer every WebSocket client reports.
            return web.json_response(
                {
                    "error": "too many WebSockets",
                    "limit": self._max_ws_clients,
                    "message": (
                        f"this node serves at most {self._max_ws_clients} WebSockets at once "
                        "(constant node.rpc.server.MAX_WS_CLIENTS); close one and retry"
                    ),
                },
                status=503,
                headers={"Retry-After": "5"},
            )
        ws = web.WebSocketResponse(max_msg_size=self._max_body, heartbeat=30.0)
        await ws.prepare(request)
        client = _WsClient(ws, request, asyncio.Queue(self._ws_queue_size), allowed=allowed)
        self._clients.add(client)
        client.sender = asyncio.get_running_loop().create_task(self._send_loop(client))
        try:
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    reply = await self._handle_payload(msg.data.encode(), client)
                elif msg.type == WSMsgType.BINARY:
                    reply = await self._handle_payload(msg.data, client)
                else:
                    break
                if reply is not None and not client.dropped:
                    self._enqueue(client, reply)
                if client.dropped:
                    break
        finally:
            if not client.dropped:
                self._clients.discard(client)
                if client.sender is not None:
                    client.sender.cancel()
        return ws

    async def _send_loop(self, client: _WsClient) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            while True:
                text = await client.queue.get()
                await client.ws.send_str(text)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# The nesting check runs on request bodies from any client, so it must be linear in the body and
# must not backtrack. (The former pattern ``"(?:[^"\\]|\\.)*"`` failed on an unterminated string
# and was retried from each later quote: quadratic, a 40 KB body of escaped quotes held the event
# loop for 9 s.) Strings are found without any regex: see :func:`nested_too_deep`.
_NOT_BRACKET = re.compile(r"[^\[\]{}]++")


def _within_depth(limit: int) -> re.Pattern[str]:
    """A pattern over brackets only: top-level groups whose brackets are at most ``limit`` deep.

    Group ``k`` is ``[`` then groups of level ``k - 1`` then ``]`` (or the end of the text: a
    truncated body is not *deep*, only invalid). The innermost level admits no ``[``, so a match
    stops exactly at the top-level group holding a bracket ``limit + 1`` deep, or at a ``]`` that
    closes nothing; the bracket kinds are not paired (the decoder checks that).
    """
    pattern = ""
    for _ in range(limit):
        pattern = rf"(?:[\[{{]{pattern}(?:[\]}}]|\Z))*+"
    return re.compile(pattern)


_WITHIN_MAX_DEPTH: Final = _within_depth(MAX_JSON_DEPTH)


def nested_too_deep(text: str) -> bool:
    """Whether some array/object in ``text`` is nested deeper than :data:`MAX_JSON_DEPTH`.

    Exact for valid JSON (brackets inside strings do not count); on other text it may answer
    either way, the decoder refuses it anyway. Without recursion (the JSON decoder itself would
    raise ``RecursionError`` thousands of levels deep) and in C, in time linear in ``text``: in
    valid JSON a backslash only occurs in a string and starts a two-character escape, so removing
    the ``\\\\`` pairs and then the ``\\"`` pairs leaves strings with no quote inside; splitting
    on ``"`` then puts the strings' contents at the odd places (an unterminated string runs to
    the end). What is left outside is reduced to its brackets, and one match of
    :data:`_WITHIN_MAX_DEPTH` walks them.
    """
    unescaped = text.replace("\\\\", "").replace('\\"', "")
    outside = "".join(unescaped.split('"')[::2])
    brackets = _NOT_BRACKET.sub("", outside)
    match = _WITHIN_MAX_DEPTH.match(brackets)
    assert match is not None  # the pattern matches the empty prefix
    end = match.end()
    return end < len(brackets) and brackets[end] in "[{"


def parse_json_body(body: bytes) -> tuple[Any, str | None]:
    """Decode a request body: ``(payload, None)`` or ``(None, why it is not acceptable)``.

    Strict where :func:`json.loads` is lenient: UTF-8 only (no UTF-16/32 detection), no
    ``NaN``/``Infinity`` (they could not be echoed back as JSON), at most
    :data:`MAX_JSON_DEPTH` levels of nesting.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None, "the body is not UTF-8"
    # Counting brackets is cheap and excludes ordinary requests from the full scan.
    opened = text.count("[") + text.count("{")
    if opened > MAX_JSON_DEPTH and nested_too_deep(text):
        return None, f"nested deeper than {MAX_JSON_DEPTH} levels"
    try:
        return json.loads(text, parse_constant=_refuse_constant), None
    except (ValueError, RecursionError) as exc:
        return None, str(exc).split(":")[0] if isinstance(exc, ValueError) else "too deep"


def _valid_unicode(value: Any) -> bool:
    """Whether every string (and key) in a decoded JSON value encodes as UTF-8."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return False
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
    return True


def _http_error(status: int, code: int, message: str | None = None) -> web.Response:
    return web.Response(
        status=status,
        body=json.dumps(error_response(code, message)).encode(),
        headers=_JSON_HEADERS,
    )


def _too_large() -> web.Response:
    resp = _http_error(413, PAYLOAD_TOO_LARGE)
    # The rest of the body is not read: the connection cannot be reused.
    resp.force_close()
    return resp


__all__ = [
    "EVENT_METHOD",
    "INTERNAL_ERROR",
    "MAX_JSON_DEPTH",
    "MAX_TOPIC_LENGTH",
    "MAX_WS_CLIENTS",
    "MAX_WS_TOPICS",
    "RPC_PATH",
    "WS_PATH",
    "RpcServer",
    "nested_too_deep",
    "parse_json_body",
]
