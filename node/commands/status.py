"""The node's own state: ``status``, its configuration and its event log."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from node.app import Application
from node.app.results import (
    EventRow,
    NodeStatus,
)
from node.commands import spec
from node.commands.spec import Cli, Command, CommandParam, Context, Output


async def _status(app: Application, ctx: Context) -> NodeStatus:
    return await app.status()


def _render_status(status: NodeStatus, out: Output, opts: Mapping[str, Any]) -> None:
    out.fields(status.to_json())
    if status.uptime_s is None:
        # The empty live fields alone did not say why (a stopped daemon, or a mistyped --home).
        out.error(
            f"no daemon runs on {status.home}: these are the figures its files hold, "
            "the live ones empty; start it with `odf-node run`"
        )


async def _config(app: Application, ctx: Context) -> dict[str, Any]:
    return dict(app.info.config)


async def _events(
    app: Application, ctx: Context, after_id: int = 0, limit: int = 100, kind: str | None = None
) -> list[EventRow]:
    return await app.queries.events(after_id, limit, kind)


STATUS_COMMANDS: tuple[Command, ...] = (
    Command(
        "node.status",
        "Identity, uptime, addresses, counts and queue depths.",
        _status,
        cli=("status",),
        doc="Without a daemon: what the home stores, the live fields null.",
        result=spec.object_of(NodeStatus),
        result_type=NodeStatus,
        render=_render_status,
    ),
    Command("node.config", "The effective configuration.", _config),
    Command(
        "node.events",
        "The event log, oldest first.",
        _events,
        (
            CommandParam(
                "after_id", spec.INT, False, "Only events after this id.", Cli(flags=("--after",))
            ),
            CommandParam(
                "limit", spec.LIMIT, False, "At most this many events.", Cli(type=int, default=100)
            ),
            CommandParam(
                "kind",
                spec.STR,
                False,
                "Only events of this kind (e.g. head.repaired).",
                Cli(type=str),
            ),
        ),
        cli=("events",),
        result=spec.array_of(EventRow),
        columns=("id", "kind", "did", "data"),
    ),
)
"""In the order of ``rpc.discover``."""

__all__ = ["STATUS_COMMANDS"]
