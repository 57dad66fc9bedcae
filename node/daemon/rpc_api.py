"""Binds :class:`~node.daemon.api.NodeApi` to the JSON-RPC server and writes the cookie.

Daemon-specific exceptions get their JSON-RPC codes here, at the boundary; the event bus feeds
the WebSocket ``event`` notifications.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from node.daemon.api import METHODS, InvalidArgument, NodeApi
from node.rpc.cookie import new_token, remove_cookie, write_cookie
from node.rpc.errors import CONFLICT, INVALID_INPUT, UNAVAILABLE, register_error
from node.rpc.registry import Param, RpcRegistry
from node.rpc.server import RpcServer

if TYPE_CHECKING:
    from node.daemon.daemon import Daemon

log = logging.getLogger("odf_node.rpc")


def build_registry(api: NodeApi) -> RpcRegistry:
    """Every :data:`~node.daemon.api.METHODS` entry registered against ``api``."""
    from node.config import ConfigError
    from node.daemon.daemon import NotOwner, RetryLater
    from node.daemon.lock import HomeLocked
    from node.ipfs.client import IpfsError

    register_error(InvalidArgument, INVALID_INPUT)
    register_error(ConfigError, INVALID_INPUT)
    register_error(NotOwner, CONFLICT)
    register_error(HomeLocked, CONFLICT)
    register_error(RetryLater, UNAVAILABLE)
    register_error(IpfsError, UNAVAILABLE)
    registry = RpcRegistry()
    for spec in METHODS:
        registry.add(
            spec.name,
            getattr(api, spec.attr),
            params=[Param(p.name, p.schema, p.required, p.description) for p in spec.params],
            result=spec.result,
            summary=spec.summary,
        )
    return registry


async def start_rpc(daemon: Daemon) -> RpcServer:
    """Start the RPC server for ``daemon`` and publish its URL and token in the cookie."""
    cfg = daemon.config.rpc
    token = new_token()
    server = RpcServer(
        build_registry(NodeApi(daemon)),
        token=token,
        host=cfg.host,
        port=0 if daemon.ephemeral else cfg.port,
        max_body_bytes=cfg.max_body_bytes,
        max_batch=cfg.max_batch,
        allowed_origins=cfg.allowed_origins,
        unix_path=daemon.home.path / "rpc.sock",
    )
    await server.start()
    daemon.rpc_url = server.url
    write_cookie(daemon.home.path, server.url, token)
    tasks: set[asyncio.Task[Any]] = set()

    def forward(topic: str, payload: dict[str, Any]) -> None:
        task = asyncio.ensure_future(server.notify(topic, payload))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    daemon.events.listen(forward)
    server._odf_token = token  # type: ignore[attr-defined]  # for remove_cookie at stop
    return server


async def stop_rpc(daemon: Daemon, server: RpcServer) -> None:
    """Stop serving and remove the cookie (only if it is still ours)."""
    remove_cookie(daemon.home.path, token=getattr(server, "_odf_token", None))
    await server.stop()
