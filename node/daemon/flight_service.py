"""The daemon's Arrow Flight SQL server (``[query] flight_sql_*``; node/transfer/flight_sql.py,
docs/query.md), as the ``flight-sql`` service.

gRPC binds and serves on threads of its own; every call hands its query to the daemon's loop,
so the service starts after the application and stops before it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from node.app import Application, NodeInfo
from node.config import NodeConfig

log = logging.getLogger("odf_node.daemon")

# A client that stops reading a stream would hold the server's stop forever.
_STOP_WAIT_S = 15.0


@dataclass(eq=False, kw_only=True)
class FlightSqlService:
    """The ``flight-sql`` service (see the module docstring)."""

    name = "flight-sql"

    config: NodeConfig
    info: NodeInfo
    app: Callable[[], Application]
    ephemeral: bool
    _server: Any = field(init=False, default=None)
    _thread: Any = field(init=False, default=None)

    async def start(self) -> None:
        """Bind and serve; ``NodeInfo.flight_sql_url`` says where."""
        from node.transfer.flight_sql import FlightSqlServer, start_in_thread

        q = self.config.query
        app = self.app()
        if app.data is None:
            log.warning("flight-sql: the application has no data use case; not serving")
            return
        port = 0 if self.ephemeral else q.flight_sql_port
        self._server = await asyncio.to_thread(
            FlightSqlServer,
            app.data,
            asyncio.get_running_loop(),
            host=q.flight_sql_host,
            port=port,
            public=q.public,
            concurrency_per_client=q.concurrency_per_client,
            deadline_s=q.deadline_s,
            # The HTTP data API's slots: [query] concurrency_total bounds both surfaces.
            limiter=app.query_api.limiter,
            # Answers asked for and not yet fetched: at most what the running queries may hold.
            kept_bytes=q.concurrency_total * q.max_bytes,
            max_sql_bytes=q.max_sql_bytes,
        )
        self._thread = start_in_thread(self._server)
        self.info.flight_sql_url = self._server.url

    async def stop(self) -> None:
        """Stop serving, waiting for running calls at most :data:`_STOP_WAIT_S`."""
        from node.transfer.flight_sql import stop

        if self._server is None:
            return
        # Waits for running calls, whose queries need this loop: off the loop.
        try:
            await asyncio.wait_for(
                asyncio.to_thread(stop, self._server, self._thread), _STOP_WAIT_S
            )
        except TimeoutError:
            log.warning("flight-sql: calls still running after 15 s; stopping without them")
        self.info.flight_sql_url = None
