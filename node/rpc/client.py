"""Clients of the control server: async :class:`RpcClient` (aiohttp) and :func:`call_sync`.

``url`` is the POST endpoint as the cookie stores it (``http://127.0.0.1:<port>/rpc``); the
WebSocket endpoint is ``<url>/ws``. Errors arrive as :class:`RpcCallError` with the server's
code, message and data; failing to reach the server at all is :class:`RpcConnectionError`
(a subclass, code -32004). aiohttp is imported only when the async client is used, so that
``call_sync`` in the CLI starts fast. Neither client uses proxy settings from the environment:
the control endpoint is local and the token must never go through a proxy.
"""

from __future__ import annotations

import http.client
import itertools
import json
import socket
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from coordinator.errors import OdfNodeError
from node.rpc.errors import INTERNAL_ERROR, UNAVAILABLE

if TYPE_CHECKING:
    import aiohttp

Params = Mapping[str, Any] | Sequence[Any] | None


class RpcCallError(OdfNodeError):
    """The server answered a call with a JSON-RPC error."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"[{code}] {message}")
        self.code = code
        self.message = message
        self.data = data


class RpcConnectionError(RpcCallError):
    """The server could not be reached or answered with something that is not JSON-RPC."""

    def __init__(self, message: str) -> None:
        super().__init__(UNAVAILABLE, message)


def _request(method: str, params: Params, rid: int | None) -> dict[str, Any]:
    req: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        req["params"] = dict(params) if isinstance(params, Mapping) else list(params)
    if rid is not None:
        req["id"] = rid
    return req


def _unwrap(resp: Any) -> Any:
    if not isinstance(resp, dict):
        raise RpcConnectionError(f"not a JSON-RPC response: {resp!r:.200}")
    if "error" in resp:
        err = resp["error"]
        if not isinstance(err, dict):
            raise RpcConnectionError(f"malformed JSON-RPC error: {err!r:.200}")
        return RpcCallError(
            int(err.get("code", INTERNAL_ERROR)), str(err.get("message", "")), err.get("data")
        )
    if "result" not in resp:
        raise RpcConnectionError(f"JSON-RPC response without result: {resp!r:.200}")
    return resp["result"]


def _raise_or_return(resp: Any) -> Any:
    value = _unwrap(resp)
    if isinstance(value, RpcCallError):
        raise value
    return value


class RpcClient:
    """Async client; use as ``async with RpcClient(url, token) as c: await c.call("rpc.ping")``."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 30.0,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.url = url
        self.ws_url = url.rstrip("/") + "/ws"
        import aiohttp  # deferred: see the module docstring

        self._token = token
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session = session
        self._own_session = session is None
        self._ids = itertools.count(1)

    async def __aenter__(self) -> RpcClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the HTTP session if this client created it."""
        if self._session is not None and self._own_session:
            await self._session.close()
            self._session = None

    def _sess(self) -> aiohttp.ClientSession:
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout, trust_env=False)
        return self._session

    async def _post(self, payload: Any) -> Any:
        import aiohttp

        headers = {"Authorization": f"Bearer {self._token}"}
        try:
            async with self._sess().post(self.url, json=payload, headers=headers) as r:
                if r.status == 204:
                    return None
                body = await r.read()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise RpcConnectionError(f"{self.url}: {exc}") from exc
        try:
            return json.loads(body)
        except ValueError:
            raise RpcConnectionError(f"{self.url}: HTTP {r.status}, non-JSON body") from None

    async def call(self, method: str, /, *args: Any, **params: Any) -> Any:
        """Call ``method`` with params by name (or by position via ``*args``); its result."""
        if args and params:
            raise TypeError("pass params either by position or by name, not both")
        p: Params = list(args) if args else (params or None)
        return _raise_or_return(await self._post(_request(method, p, next(self._ids))))

    async def notify(self, method: str, /, **params: Any) -> None:
        """Send a notification (no id; the server sends no answer)."""
        await self._post(_request(method, params or None, None))

    async def batch(self, calls: Sequence[tuple[str, Params]]) -> list[Any]:
        """Send ``[(method, params), ...]`` as one batch; results in call order.

        A failed call's slot holds its :class:`RpcCallError` (returned, not raised); an error
        for the batch as a whole (e.g. too many calls) is raised.
        """
        ids = [next(self._ids) for _ in calls]
        resp = await self._post([_request(m, p, i) for (m, p), i in zip(calls, ids, strict=True)])
        if isinstance(resp, dict):
            _raise_or_return(resp)
            raise RpcConnectionError("batch answered with a single response")
        if not isinstance(resp, list):
            raise RpcConnectionError(f"not a JSON-RPC batch response: {resp!r:.200}")
        by_id = {r.get("id"): r for r in resp if isinstance(r, dict)}
        out: list[Any] = []
        for i in ids:
            if i not in by_id:
                raise RpcConnectionError(f"batch response lacks id {i}")
            out.append(_unwrap(by_id[i]))
        return out

    async def subscribe(self, topics: Sequence[str]) -> AsyncIterator[dict[str, Any]]:
        """Yield the ``params`` of every ``event`` notification for ``topics``.

        Opens a WebSocket, subscribes (errors raise :class:`RpcCallError`), then yields until
        the server closes the socket; closing the generator closes the socket.
        """
        import aiohttp

        headers = {"Authorization": f"Bearer {self._token}"}
        try:
            ws = await self._sess().ws_connect(self.ws_url, headers=headers)
        except aiohttp.WSServerHandshakeError as exc:
            raise RpcConnectionError(
                f"{self.ws_url}: handshake refused (HTTP {exc.status})"
            ) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise RpcConnectionError(f"{self.ws_url}: {exc}") from exc
        try:
            rid = next(self._ids)
            await ws.send_json(_request("rpc.subscribe", {"topics": list(topics)}, rid))
            subscribed = False
            async for msg in ws:
                if msg.type != aiohttp.WSMsgType.TEXT:
                    break
                obj = json.loads(msg.data)
                if not subscribed and isinstance(obj, dict) and obj.get("id") == rid:
                    _raise_or_return(obj)
                    subscribed = True
                elif isinstance(obj, dict) and obj.get("method") == "event":
                    params = obj.get("params")
                    if isinstance(params, dict):
                        yield params
        finally:
            await ws.close()


def call_sync(
    url: str,
    token: str,
    method: str,
    params: Params = None,
    timeout: float = 10.0,
) -> Any:
    """One blocking call with :mod:`urllib` (for the CLI: no event loop, fast import)."""
    body = json.dumps(_request(method, params, 1)).encode()
    req = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    if url.startswith("unix:"):
        return _call_unix(url.removeprefix("unix:"), token, body, timeout)
    # An empty ProxyHandler: never route the token through an http_proxy from the environment.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=timeout) as r:
            raw = r.read()
    except urllib.error.HTTPError as exc:
        # 401/403/413 still carry a JSON-RPC error body.
        raw = exc.read()
        exc.close()
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise RpcConnectionError(f"{url}: {exc}") from exc
    try:
        resp = json.loads(raw)
    except ValueError:
        raise RpcConnectionError(f"{url}: non-JSON answer") from None
    return _raise_or_return(resp)


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


def _call_unix(path: str, token: str, body: bytes, timeout: float) -> Any:
    """:func:`call_sync` over the daemon's Unix socket (``unix:/path/rpc.sock``)."""
    conn = _UnixConnection(path, timeout)
    try:
        conn.request(
            "POST",
            "/rpc",
            body=body,
            headers={
                "Authorization": f"Bearer {token}",
                "Content-Type": "application/json",
                "Host": "localhost",
            },
        )
        raw = conn.getresponse().read()
    except (OSError, http.client.HTTPException) as exc:
        raise RpcConnectionError(f"unix:{path}: {exc}") from exc
    finally:
        conn.close()
    try:
        resp = json.loads(raw)
    except ValueError:
        raise RpcConnectionError(f"unix:{path}: non-JSON answer") from None
    return _raise_or_return(resp)
