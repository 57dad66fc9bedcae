"""The daemon's transform engines (``[engine]``), as the ``engine`` service.

The engine router is created on first use: its modules (gRPC, pyarrow) and its worker processes
(Spark, DataFusion per release) cost memory that an idle node should not pay. Stopping the
service stops whatever workers run.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from node.compose import engine_router
from node.config import NodeConfig

if TYPE_CHECKING:
    from node.engine_router import EngineRouter


class EngineService:
    """The ``engine`` service (see the module docstring)."""

    name = "engine"

    def __init__(self, config: NodeConfig) -> None:
        self._config = config
        self._router: EngineRouter | None = None

    def get(self) -> EngineRouter:
        """The engine router, created on first use."""
        if self._router is None:
            e = self._config.engine
            self._router = engine_router(
                self._config,
                master=e.spark_master,
                idle_timeout_s=float(e.idle_timeout_s),
                memory_mib=e.memory_limit_mib,
                isolate_network=e.isolate_network,
                datafusion_workers=e.datafusion_workers or None,
            )
        return self._router

    @property
    def created(self) -> EngineRouter | None:
        """The router if a transform or verification created it, else None (no workers)."""
        return self._router

    async def start(self) -> None:
        """Nothing to start: the router is created on first use."""

    async def stop(self) -> None:
        """Stop the engine workers that run."""
        if self._router is not None:
            await asyncio.to_thread(self._router.close)
