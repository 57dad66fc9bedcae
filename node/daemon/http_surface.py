"""The daemon's HTTP listener (``[http]``): the Simple Transfer Protocol peers pull from,
``/metrics``, ``/healthz`` and ``/readyz``, and kamu's data API (``/query``, ``/verify``,
``/{dataset}/tail``, ``/{dataset}/metadata``; docs/query.md).

:class:`HttpSurface` is the ``http`` service; it binds on start and fills
``NodeInfo.http_url`` with the bound address.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from coordinator.identity import DatasetId
from coordinator.storage.repository import DatasetRepository
from node.app import NodeInfo
from node.app.metrics import NodeMetrics
from node.config import NodeConfig
from node.daemon.health import Readiness

if TYPE_CHECKING:
    from aiohttp import web

    from node.app.query_api import QueryApi


class HttpSurface:
    """The ``http`` service (see the module docstring)."""

    name = "http"

    def __init__(
        self,
        *,
        config: NodeConfig,
        repo: DatasetRepository,
        metrics: NodeMetrics,
        info: NodeInfo,
        clock: Callable[[], int],
        served_head: Callable[[DatasetId], str | None],
        query_api: Callable[[], QueryApi],
        readiness: Callable[[], Readiness],
        ephemeral: bool,
    ) -> None:
        self._config = config
        self._repo = repo
        self._metrics = metrics
        self._info = info
        self._clock = clock
        self._served_head = served_head
        self._query_api = query_api
        self._readiness = readiness
        self._ephemeral = ephemeral
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        """Bind the listener and serve every route."""
        from aiohttp import web

        from node.transfer.data_api import add_routes as add_data_api
        from node.transfer.server import make_app

        app = make_app(self._repo, served_head=self._served_head)
        app.router.add_get("/metrics", self._metrics_handler)
        app.router.add_get("/healthz", self._healthz_handler)
        app.router.add_get("/readyz", self._readyz_handler)
        add_data_api(
            app,
            self._query_api,
            public=self._config.query.public,
            max_sql_bytes=self._config.query.max_sql_bytes,
        )
        # keepalive_timeout also bounds a connection that never completes its request headers.
        self._runner = web.AppRunner(
            app, access_log=None, keepalive_timeout=self._config.http.idle_timeout_s
        )
        await self._runner.setup()
        port = 0 if self._ephemeral else self._config.http.port
        site = web.TCPSite(self._runner, self._config.http.host, port)
        await site.start()
        bound = self._runner.addresses  # (host, port, ...) of every bound socket
        self._info.http_url = (
            f"http://{self._config.http.host}:{int(bound[0][1]) if bound else port}"
        )

    async def stop(self) -> None:
        """Close the listener and its connections."""
        if self._runner is not None:
            await self._runner.cleanup()

    async def _metrics_handler(self, request: web.Request) -> web.Response:
        from aiohttp import web

        body, content_type = self._metrics.render()
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def _healthz_handler(self, request: web.Request) -> web.Response:
        from aiohttp import web

        started = self._info.started_at_ns
        uptime = (self._clock() - started) / 1e9 if started else 0
        return web.json_response({"status": "ok", "uptime_s": round(uptime, 3)})

    async def _readyz_handler(self, request: web.Request) -> web.Response:
        from aiohttp import web

        ready, body = await self._readiness().report()
        return web.json_response(body, status=200 if ready else 503)
