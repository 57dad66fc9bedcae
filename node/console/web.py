"""The console's routes on the RPC server's listener (``/ui/...``) and their checks.

Every route checks ``Host`` exactly as the RPC does (DNS rebinding). Then:

* ``GET /ui/login``, ``/ui/static/*``: no session needed (the login page and its script).
* ``POST /ui/session``: exchanges a one-time login token for a session cookie
  (``HttpOnly; SameSite=Strict; Path=/ui``, named per port so two nodes on one host do not
  overwrite each other's). The token travels in the URL *fragment* (``/ui/login#<token>``),
  which a browser never sends to a server, puts in a ``Referer`` or a proxy log.
* the pages, ``POST /ui/rpc`` (JSON-RPC limited to :data:`CONSOLE_METHODS`) and
  ``GET /ui/ws`` (the event stream): a valid session cookie, else 401.

Requests that change something (``POST``) and the WebSocket handshake must carry an
``Origin`` equal to the page's own origin (``http://<Host>``) or one in ``[rpc]
allowed_origins``: a foreign page is refused with 403 even if the browser sent the cookie.
Every answer carries a strict Content-Security-Policy (only this node's own script, style and
connections; no inline script, no ``eval``, Trusted Types required) and headers that forbid
framing, sniffing and referrers.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from importlib import resources
from typing import Final

from aiohttp import web

from node.app.console import CONSOLE_PATH
from node.console.sessions import ConsoleSessions
from node.rpc.errors import FORBIDDEN, INVALID_REQUEST, UNAUTHORIZED, error_response
from node.rpc.server import RpcServer

UI: Final = CONSOLE_PATH
PAGES: Final = ("overview", "datasets", "dataset", "query", "peers", "work", "flows")
"""Each page is ``/ui/<name>`` (the overview also at ``/ui/``); the script renders it."""

CONSOLE_METHODS: Final = frozenset(
    {
        "node.status",
        "node.events",
        "peers.list",
        "subscriptions.list",
        "subscriptions.add",
        "subscriptions.remove",
        "dataset.list",
        "dataset.log",
        "dataset.verify",
        "dataset.publish",
        "work.list",
        "flows.list",
        "attestations.list",
        "disputes.list",
        "equivocations.list",
        "console.datasets",
        "console.dataset",
        "console.preview",
        "console.disputes",
        "console.peers",
        "console.events",
        "console.charts",
        # The query page and the dataset page's tail: read-only SQL in the query sandbox, at
        # trusted heads unless the page asks for untrusted ones (docs/query.md).
        "data.query",
        "data.tail",
        "data.tables",
        "data.query_api",
    }
)
"""What the pages may call: reads (queries included) and the four actions. Not
``dataset.create``/``ingest``/``pull`` (they name local files or URLs the node would read)
nor ``console.login``."""

CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; "
    "require-trusted-types-for 'script'; trusted-types 'none'"
)
_SECURITY_HEADERS: Final = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Cache-Control": "no-store",
}
_STATIC_TYPES: Final = {
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
    "login.js": "text/javascript; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
_SESSION_BODY_MAX: Final = 1024


def _read_static(name: str) -> bytes:
    return resources.files("node.console").joinpath("static", name).read_bytes()


class ConsoleWeb:
    """Mounts the console on an :class:`RpcServer` (call :meth:`attach` before it starts)."""

    def __init__(
        self,
        server: RpcServer,
        sessions: ConsoleSessions,
        *,
        allowed_origins: Iterable[str] = (),
    ) -> None:
        self._server = server
        self._sessions = sessions
        self._origins = frozenset(o.lower().rstrip("/") for o in allowed_origins)
        # Read once: the files are small and a request never touches the disk.
        self._static = {name: _read_static(name) for name in _STATIC_TYPES}
        self._shell = _read_static("page.html")
        self._login = _read_static("login.html")

    def attach(self) -> None:
        """Register the routes with the server (before it starts)."""
        self._server.mount(self._add_routes)

    def _add_routes(self, app: web.Application) -> None:
        r = app.router
        r.add_get(UI, self._redirect_root)
        r.add_get(f"{UI}/", self._page)
        for name in PAGES:
            r.add_get(f"{UI}/{name}", self._page)
        r.add_get(f"{UI}/login", self._login_page)
        r.add_get(UI + "/static/{name}", self._static_file)
        r.add_post(f"{UI}/session", self._session)
        r.add_post(f"{UI}/logout", self._logout)
        r.add_post(f"{UI}/rpc", self._rpc)
        r.add_get(f"{UI}/ws", self._ws)

    # ---- checks

    def cookie_name(self) -> str:
        """``odf_console_<port>``: cookies are shared by every port of a host."""
        return f"odf_console_{self._server.port}"

    def _same_origin(self, request: web.Request) -> bool:
        origin = request.headers.get("Origin")
        if origin is None:
            return False
        origin = origin.lower().rstrip("/")
        own = f"http://{request.headers.get('Host', '').lower()}"
        return origin == own or origin in self._origins

    def _session_ok(self, request: web.Request) -> bool:
        return self._sessions.check(request.cookies.get(self.cookie_name())) is not None

    def _guard(self, request: web.Request, *, session: bool, origin: bool) -> web.Response | None:
        if not self._server.host_ok(request):
            return _error(403, FORBIDDEN, "forbidden Host")
        if origin and not self._same_origin(request):
            return _error(403, FORBIDDEN, "forbidden Origin")
        # A present foreign Origin is refused on every route, not only on POST.
        if request.headers.get("Origin") is not None and not self._same_origin(request):
            return _error(403, FORBIDDEN, "forbidden Origin")
        if session and not self._session_ok(request):
            return _error(401, UNAUTHORIZED, "no console session: run `odf-node ui`")
        return None

    # ---- routes

    async def _redirect_root(self, request: web.Request) -> web.StreamResponse:
        refusal = self._guard(request, session=False, origin=False)
        if refusal is not None:
            return _secure(refusal)
        return _secure(web.Response(status=302, headers={"Location": f"{UI}/"}))

    async def _page(self, request: web.Request) -> web.StreamResponse:
        refusal = self._guard(request, session=True, origin=False)
        if refusal is not None:
            if refusal.status == 401:
                # A browser without a session sees the login page, which explains what to do.
                return _secure(web.Response(status=401, body=self._login, content_type="text/html"))
            return _secure(refusal)
        return _secure(web.Response(body=self._shell, content_type="text/html"))

    async def _login_page(self, request: web.Request) -> web.StreamResponse:
        refusal = self._guard(request, session=False, origin=False)
        if refusal is not None:
            return _secure(refusal)
        return _secure(web.Response(body=self._login, content_type="text/html"))

    async def _static_file(self, request: web.Request) -> web.StreamResponse:
        refusal = self._guard(request, session=False, origin=False)
        if refusal is not None:
            return _secure(refusal)
        name = request.match_info["name"]
        body = self._static.get(name)
        if body is None:
            return _secure(web.Response(status=404, text="not found"))
        resp = web.Response(body=body, headers={"Content-Type": _STATIC_TYPES[name]})
        return _secure(resp)

    async def _session(self, request: web.Request) -> web.StreamResponse:
        refusal = self._guard(request, session=False, origin=True)
        if refusal is not None:
            return _secure(refusal)
        if (request.content_length or 0) > _SESSION_BODY_MAX:
            return _secure(_error(413, INVALID_REQUEST, "body too large"))
        try:
            body = json.loads(await request.content.read(_SESSION_BODY_MAX))
            token = body["token"]
            if not isinstance(token, str):
                raise TypeError("token")
        except (ValueError, KeyError, TypeError):
            return _secure(_error(400, INVALID_REQUEST, 'expected {"token": "..."}'))
        session_id = self._sessions.redeem(token)
        if session_id is None:
            return _secure(_error(401, UNAUTHORIZED, "login token unknown, used or expired"))
        resp = web.json_response({"ok": True})
        resp.set_cookie(
            self.cookie_name(),
            session_id,
            path=UI,
            httponly=True,
            samesite="Strict",
        )
        return _secure(resp)

    async def _logout(self, request: web.Request) -> web.StreamResponse:
        refusal = self._guard(request, session=False, origin=True)
        if refusal is not None:
            return _secure(refusal)
        self._sessions.end(request.cookies.get(self.cookie_name()))
        resp = web.json_response({"ok": True})
        resp.del_cookie(self.cookie_name(), path=UI)
        return _secure(resp)

    async def _rpc(self, request: web.Request) -> web.StreamResponse:
        refusal = self._guard(request, session=True, origin=True)
        if refusal is not None:
            return _secure(refusal)
        # A cross-site form cannot send this type without a CORS preflight (never answered).
        if request.content_type != "application/json":
            return _secure(_error(415, INVALID_REQUEST, "Content-Type must be application/json"))
        body = await request.read()  # bounded by the application's client_max_size
        reply = await self._server.handle_payload(body, allowed=CONSOLE_METHODS)
        if reply is None:
            return _secure(web.Response(status=204))
        return _secure(web.Response(body=reply.encode(), content_type="application/json"))

    async def _ws(self, request: web.Request) -> web.StreamResponse:
        refusal = self._guard(request, session=True, origin=True)
        if refusal is not None:
            return _secure(refusal)
        return await self._server.serve_ws(request, allowed=CONSOLE_METHODS)


def _secure(resp: web.StreamResponse) -> web.StreamResponse:
    for k, v in _SECURITY_HEADERS.items():
        resp.headers.setdefault(k, v)
    return resp


def _error(status: int, code: int, message: str) -> web.Response:
    return web.Response(
        status=status,
        body=json.dumps(error_response(code, message)).encode(),
        content_type="application/json",
    )


__all__ = ["CONSOLE_METHODS", "CSP", "PAGES", "ConsoleWeb"]
