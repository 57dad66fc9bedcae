"""Binds the commands (``node/commands/catalog.py``) to the JSON-RPC server; writes the cookie.

Every declared command is one RPC method: its use case on the daemon's
:class:`~node.app.Application`, its params validated against the declared schemas, its
result the typed result's JSON (what the CLI prints without a daemon too).

Errors get their JSON-RPC codes in :mod:`node.rpc.errors` (from each class's ``rpc_code``); the
event bus feeds the WebSocket ``event`` notifications.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from node.app import Application
from node.app.events import EventBus
from node.commands.catalog import COMMANDS
from node.commands.spec import Command, run_command
from node.config import RpcSection
from node.console.sessions import ConsoleSessions
from node.console.web import ConsoleWeb
from node.rpc.cookie import new_token, remove_cookie, write_cookie
from node.rpc.registry import RpcRegistry
from node.rpc.server import RpcServer

log = logging.getLogger("odf_node.rpc")


def build_registry(app: Application) -> RpcRegistry:
    """Every declared command registered as an RPC method running on ``app``."""
    registry = RpcRegistry()
    for command in COMMANDS:
        registry.add(
            command.name,
            _handler(command, app),
            params=command.rpc_params,
            result=command.result,
            summary=command.summary,
        )
    return registry


def _handler(command: Command, app: Application) -> Any:
    async def handler(**params: Any) -> Any:
        return await run_command(command, app, params)

    # The use case's own keywords (after ``app`` and the context): the registry checks at
    # registration that every declared param is one of them and that optional ones have
    # defaults, so a declaration and its use case cannot drift apart.
    keywords = list(inspect.signature(command.run).parameters.values())[2:]
    handler.__signature__ = inspect.Signature(keywords)  # type: ignore[attr-defined]
    return handler


@dataclass
class RpcHandle:
    """A running RPC server and the token its cookie holds."""

    server: RpcServer
    token: str

    @property
    def url(self) -> str:
        """The server's HTTP URL."""
        return self.server.url


async def start_rpc(
    app: Application,
    events: EventBus,
    home: Path,
    cfg: RpcSection,
    ephemeral: bool,
    sessions: ConsoleSessions,
) -> RpcHandle:
    """Start the RPC server for ``app`` and publish its URL and token in the home's cookie;
    the console's pages beside it redeem ``sessions``' logins (issued by ``console.login``)."""
    token = new_token()
    registry = build_registry(app)
    server = RpcServer(
        registry,
        token=token,
        host=cfg.host,
        port=0 if ephemeral else cfg.port,
        max_body_bytes=cfg.max_body_bytes,
        max_batch=cfg.max_batch,
        allowed_origins=cfg.allowed_origins,
        unix_path=home / "rpc.sock",
        idle_timeout_s=cfg.idle_timeout_s,
    )
    ConsoleWeb(server, sessions, allowed_origins=cfg.allowed_origins).attach()

    await server.start()
    write_cookie(home, server.url, token)
    tasks: set[asyncio.Task[Any]] = set()

    def forward(topic: str, payload: dict[str, Any]) -> None:
        task = asyncio.ensure_future(server.notify(topic, payload))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    events.listen(forward)
    return RpcHandle(server, token)


async def stop_rpc(home: Path, rpc: RpcHandle) -> None:
    """Remove the cookie (only if it is still ours) and stop serving."""
    remove_cookie(home, token=rpc.token)
    await rpc.server.stop()
