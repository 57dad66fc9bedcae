"""The node's own commands that need its daemon: the console's login and memory diagnostics.

Both run on the daemon's :class:`~node.app.Application` (the console's sessions live there; the
memory figures are the daemon process's), so they are ``daemon_only``: without a daemon they
fail with one line naming ``odf-node run``.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from node.app import Application
from node.app.errors import Unavailable
from node.app.results import ConsoleLogin
from node.commands import spec
from node.commands.spec import Cli, Command, CommandParam, Context, Output

# ---- console.login (odf-node ui)


async def _console_login(app: Application, context: Context) -> ConsoleLogin:
    return await app.console_login()


def _render_login(login: ConsoleLogin, out: Output, cli: Mapping[str, Any]) -> None:
    out.print(login.url)
    port = urlsplit(login.url).port
    out.error(
        f"one-time login link, valid {login.expires_in_s:.0f} s; from another machine: "
        f"ssh -L {port}:127.0.0.1:{port} HOST, then open it there (see the README)"
    )
    if cli.get("open"):
        import webbrowser

        if not webbrowser.open(login.url):
            raise Unavailable("no web browser could be started; open the URL above yourself")


# ---- node.debug_memory


def _memory(baseline: bool) -> dict[str, Any]:
    # tracemalloc is imported only by a daemon asked to trace, and by this call.
    from procutil.memdebug import debug_memory, native_memory

    traced = sys.modules.get("tracemalloc")
    if traced is not None and traced.is_tracing():
        return debug_memory(baseline)
    return {"traced_mb": None, "native": native_memory(), "top_growth": []}


async def _debug_memory(
    app: Application, context: Context, baseline: bool = False
) -> dict[str, Any]:
    # A snapshot of a busy daemon takes a while: off the event loop.
    return await asyncio.to_thread(_memory, baseline)


NODE_COMMANDS: tuple[Command, ...] = (
    Command(
        "console.login",
        "A one-time URL that logs a browser into the node console (valid 2 minutes).",
        _console_login,
        (
            CommandParam(
                "open",
                spec.BOOL,
                description="Also open the URL in a web browser.",
                cli=Cli(),
                role="cli",
            ),
        ),
        cli=("ui",),
        result=spec.object_of(ConsoleLogin),
        result_type=ConsoleLogin,
        render=_render_login,
        daemon_only=True,
        parity="the console runs only in the daemon: offline it names `odf-node run`",
    ),
    Command(
        "node.debug_memory",
        "Native allocators (Arrow's pool, glibc's heap); with ODF_NODE_TRACEMALLOC=1 also the "
        "allocation sites that grew most since the baseline",
        _debug_memory,
        (CommandParam("baseline", spec.BOOL, description="Take a new baseline snapshot."),),
        result={"type": "object", "required": ["traced_mb", "native", "top_growth"]},
        daemon_only=True,
    ),
)
"""In the order of ``rpc.discover``."""

__all__ = ["NODE_COMMANDS"]
