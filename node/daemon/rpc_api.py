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
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from node.app import Application
from node.app.events import EventBus
from node.commands.catalog import COMMANDS
from node.commands.spec import Command, run_command
from node.config import RpcSection
from node.console.sessions import ConsoleSessions
from node.console.web import UI, ConsoleWeb
from node.rpc.cookie import new_token, remove_cookie, write_cookie
from node.rpc.registry import Param, RpcRegistry
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
    app: Application, events: EventBus, home: Path, cfg: RpcSection, ephemeral: bool
) -> RpcHandle:
    """Start the RPC server for ``app`` and publish its URL and token in the home's cookie."""
    token = new_token()
    registry = build_registry(app)
    sessions = ConsoleSessions(app.clock)
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

    async def console_login() -> dict[str, Any]:
        # Only over the token-authenticated RPC (the CLI): never callable from a console page.
        login, ttl = sessions.issue_login()
        base = server.url.removesuffix("/rpc")
        return {"url": f"{base}{UI}/login#{login}", "expires_in_s": ttl}

    registry.add(
        "console.login",
        console_login,
        result={"type": "object", "required": ["url", "expires_in_s"]},
        summary="A one-time URL that logs a browser into the node console",
    )
    _add_debug_memory(registry)
    await server.start()
    write_cookie(home, server.url, token)
    tasks: set[asyncio.Task[Any]] = set()

    def forward(topic: str, payload: dict[str, Any]) -> None:
        task = asyncio.ensure_future(server.notify(topic, payload))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    events.listen(forward)
    return RpcHandle(server, token)


def _add_debug_memory(registry: RpcRegistry) -> None:
    """``node.debug_memory``: the native allocators' figures always, tracemalloc's growth on a
    daemon started with ``ODF_NODE_TRACEMALLOC`` (procutil/memdebug.py)."""

    def answer(baseline: bool) -> dict[str, Any]:
        # tracemalloc is imported only by a daemon asked to trace, and by this call.
        from procutil.memdebug import debug_memory, native_memory

        traced = sys.modules.get("tracemalloc")
        if traced is not None and traced.is_tracing():
            return debug_memory(baseline)
        return {"traced_mb": None, "native": native_memory(), "top_growth": []}

    async def handler(baseline: bool = False) -> dict[str, Any]:
        # A snapshot of a busy daemon takes a while: off the event loop.
        return await asyncio.to_thread(answer, baseline)

    registry.add(
        "node.debug_memory",
        handler,
        params=[Param("baseline", {"type": "boolean"}, False, "Take a new baseline snapshot.")],
        result={"type": "object", "required": ["traced_mb", "native", "top_growth"]},
        summary="Native allocators (Arrow's pool, glibc's heap); with ODF_NODE_TRACEMALLOC=1 "
        "also the allocation sites that grew most since the baseline",
    )


async def stop_rpc(home: Path, rpc: RpcHandle) -> None:
    """Remove the cookie (only if it is still ours) and stop serving."""
    remove_cookie(home, token=rpc.token)
    await rpc.server.stop()
