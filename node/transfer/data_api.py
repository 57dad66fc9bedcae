"""kamu-node's REST data API on the node's HTTP listener (``docs/query.md``, "HTTP data API").

``GET /query`` (query string) and ``POST /query`` (JSON body), ``POST /verify``,
``GET /{dataset}/tail`` and ``GET /{dataset}/metadata`` (``{dataset}``: a local alias or
``did:odf:…``; an ``account/name`` alias also as ``/{account}/{name}/tail``, as kamu-node's
multi-tenant routes have it), beside the Simple Transfer Protocol's ``/{dataset}/refs/head``,
``/{dataset}/blocks/…`` and ``/metrics``: no route shadows another (theirs have three
segments and other literals).

The use case is :class:`~node.app.query_api.QueryApi`; this module only maps HTTP to it:

* Only loopback clients unless ``[query] public = true``; others get 403 naming the setting.
* A request body is read up to ``[query] max_sql_bytes`` + 1 MiB (413 past it).
* Errors are kamu's ``{"message": ...}`` (plus our ``kind``: the error's class) with kamu's
  status codes where kamu has one (400 bad request, 404 unknown dataset or block, 501 no
  signing key) and ours otherwise: 409 no trusted head yet, 429 the client's
  ``concurrency_per_client`` is in use, 503 ``concurrency_total``, 504 ``deadline_s``.
* ``/verify`` answers 200 ``{"ok": true}`` or 400 ``{"ok": false, "error": {...}}``.
"""

from __future__ import annotations

import ipaddress
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

from aiohttp import web

from coordinator.errors import DatasetNotFound, OdfNodeError
from node.app.errors import (
    HeadNotTrusted,
    InvalidArgument,
    QueryBusy,
    QueryDeadlineExceeded,
    QueryError,
    Unavailable,
)
from node.app.query_api import (
    PinnedBlockNotFound,
    QueryApi,
    ResponseSigningNotConfigured,
    response_json,
)
from node.rpc.http_body import read_bounded

log = logging.getLogger("odf_node.data_api")

ApiGetter = Callable[[], QueryApi]
"""The node's :class:`QueryApi` (looked up per request: the application starts after the
listener is configured)."""

_BODY_SLACK: Final = 1 << 20


def add_routes(app: web.Application, api: ApiGetter, *, public: bool, max_sql_bytes: int) -> None:
    """Mount the data API on ``app`` (the ``[http]`` listener's application)."""
    limit = max_sql_bytes + _BODY_SLACK
    guard = _Guard(api, public=public, body_limit=limit)
    app.router.add_get("/query", guard.wrap(_query_get))
    app.router.add_post("/query", guard.wrap(_query_post))
    app.router.add_post("/verify", guard.wrap(_verify))
    app.router.add_get("/{dataset}/tail", guard.wrap(_tail))
    app.router.add_get("/{dataset}/metadata", guard.wrap(_metadata))
    app.router.add_get("/{account}/{name}/tail", guard.wrap(_tail))
    app.router.add_get("/{account}/{name}/metadata", guard.wrap(_metadata))


RouteHandler = Callable[[QueryApi, web.Request, "_Guard"], Awaitable[web.StreamResponse]]


class _Guard:
    """Loopback check, body bound and error mapping around every handler."""

    def __init__(self, api: ApiGetter, *, public: bool, body_limit: int) -> None:
        self.api = api
        self.public = public
        self.body_limit = body_limit

    def wrap(self, handler: RouteHandler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def run(request: web.Request) -> web.StreamResponse:
            if not self.public and not _loopback(request.remote):
                return _error(
                    403,
                    "Forbidden",
                    "the data API answers loopback clients only; set [query] public = true "
                    "to open it to others",
                )
            try:
                return await handler(self.api(), request, self)
            except OdfNodeError as e:
                return _error_of(e)
            except web.HTTPException:
                raise
            except Exception:  # a bug: kamu's error shape, the traceback only in the log
                log.exception("data API: %s %s failed", request.method, request.path)
                return _error(500, "InternalError", "internal error (see the node's log)")

        return run

    async def body(self, request: web.Request) -> Any:
        """The request's JSON body, bounded by ``body_limit``.

        Raises:
            web.HTTPRequestEntityTooLarge: past the bound.
            InvalidArgument: not JSON.
        """
        if request.content_length is not None and request.content_length > self.body_limit:
            raise _too_large(request.content_length, self.body_limit)
        data = await read_bounded(request.content, self.body_limit)
        if len(data) > self.body_limit:
            raise _too_large(len(data), self.body_limit)
        try:
            return json.loads(bytes(data))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise InvalidArgument(f"Failed to parse the request body as JSON: {e}") from e


def _too_large(size: int, limit: int) -> web.HTTPRequestEntityTooLarge:
    body = json.dumps(
        {
            "message": f"the request body is over {limit} bytes ([query] max_sql_bytes + 1 MiB)",
            "kind": "RequestTooLarge",
        }
    )
    return web.HTTPRequestEntityTooLarge(
        max_size=limit, actual_size=size, text=body, content_type="application/json"
    )


def _loopback(remote: str | None) -> bool:
    if not remote:
        return False
    try:
        addr = ipaddress.ip_address(remote.split("%")[0])
    except ValueError:
        return False
    mapped = getattr(addr, "ipv4_mapped", None)
    return bool(addr.is_loopback or (mapped is not None and mapped.is_loopback))


def _client(request: web.Request) -> str:
    return request.remote or "unknown"


def _json(body: Any, status: int = 200) -> web.Response:
    return _json_text(response_json(body), status)


def _json_text(text: str, status: int = 200) -> web.Response:
    return web.Response(text=text, status=status, content_type="application/json")


def _error(status: int, kind: str, message: str) -> web.Response:
    return _json({"message": message, "kind": kind}, status)


def _error_of(e: OdfNodeError) -> web.Response:
    status = 500
    if isinstance(e, PinnedBlockNotFound) and e.untrusted_here:
        status = 409  # on the chain, past the head this node trusts
    elif isinstance(e, DatasetNotFound | PinnedBlockNotFound):
        status = 404
    elif isinstance(e, HeadNotTrusted):
        status = 409
    elif isinstance(e, QueryBusy):
        status = 503 if getattr(e, "total", False) else 429
    elif isinstance(e, QueryDeadlineExceeded):
        status = 504
    elif isinstance(e, ResponseSigningNotConfigured):
        status = 501
    elif isinstance(e, QueryError | InvalidArgument):
        status = 400
    elif isinstance(e, Unavailable):
        status = 503
    if status == 500:
        log.warning("data API: %s: %s", type(e).__name__, e)
    return _error(status, type(e).__name__, str(e))


async def _query_get(api: QueryApi, request: web.Request, guard: _Guard) -> web.StreamResponse:
    req = api.parse_get(dict(request.query))
    return _json_text(await api.query_json(req, client=_client(request)))


async def _query_post(api: QueryApi, request: web.Request, guard: _Guard) -> web.StreamResponse:
    body = await guard.body(request)
    return _json_text(await api.query_json(body, client=_client(request)))


async def _verify(api: QueryApi, request: web.Request, guard: _Guard) -> web.StreamResponse:
    body = await guard.body(request)
    result = await api.verify(body, client=_client(request))
    return _json(result, 200 if result.get("ok") else 400)


def _ref(request: web.Request) -> str:
    m = request.match_info
    return m["dataset"] if "dataset" in m else f"{m['account']}/{m['name']}"


async def _tail(api: QueryApi, request: web.Request, guard: _Guard) -> web.StreamResponse:
    return _json(await api.tail(_ref(request), dict(request.query), client=_client(request)))


async def _metadata(api: QueryApi, request: web.Request, guard: _Guard) -> web.StreamResponse:
    return _json(await api.metadata(_ref(request), dict(request.query)))


__all__ = ["add_routes"]
