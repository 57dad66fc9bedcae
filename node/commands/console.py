"""The console's read models: RPC only, the console's pages call them."""

from __future__ import annotations

from typing import Any

from node.app import Application
from node.app.errors import InvalidArgument
from node.commands import spec
from node.commands.spec import Command, CommandParam, Context


def _console(app: Application) -> Any:
    if app.console is None:
        raise InvalidArgument("the console queries are not available on this node")
    return app.console


async def _console_datasets(app: Application, ctx: Context) -> Any:
    return await _console(app).datasets()


async def _console_dataset(app: Application, ctx: Context, ref: str) -> Any:
    return await _console(app).dataset(ref)


async def _console_preview(app: Application, ctx: Context, ref: str, limit: int = 20) -> Any:
    return await _console(app).preview(ref, limit)


async def _console_disputes(
    app: Application, ctx: Context, did: str | None = None, limit: int = 100
) -> Any:
    return await _console(app).disputes(did, limit)


async def _console_peers(app: Application, ctx: Context) -> Any:
    return await _console(app).peers()


async def _console_events(app: Application, ctx: Context, limit: int = 50) -> Any:
    return await _console(app).recent_events(limit)


async def _console_charts(app: Application, ctx: Context) -> Any:
    return await _console(app).charts()


CONSOLE_COMMANDS: tuple[Command, ...] = (
    Command(
        "console.datasets", "Stored and followed datasets.", _console_datasets, result=spec.ARRAY
    ),
    Command(
        "console.dataset",
        "One dataset in detail.",
        _console_dataset,
        (CommandParam("ref", spec.STR, True),),
    ),
    Command(
        "console.preview",
        "Last rows of the newest data slice.",
        _console_preview,
        (
            CommandParam("ref", spec.STR, True),
            CommandParam("limit", {"type": "integer", "minimum": 1, "maximum": 100}, False),
        ),
    ),
    Command(
        "console.disputes",
        "Disputes with their evidence.",
        _console_disputes,
        (CommandParam("did", spec.STR, False), CommandParam("limit", spec.LIMIT, False)),
        result=spec.ARRAY,
    ),
    Command("console.peers", "Peers, scores, graylist, penalties.", _console_peers),
    Command(
        "console.events",
        "The newest events.",
        _console_events,
        (CommandParam("limit", spec.LIMIT, False),),
        result=spec.ARRAY,
    ),
    Command("console.charts", "Data of the console's charts.", _console_charts),
)
"""In the order of ``rpc.discover``."""

__all__ = ["CONSOLE_COMMANDS"]
