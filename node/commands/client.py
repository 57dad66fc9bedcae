"""The command line's own clients of the daemon: ``rpc`` (any method) and ``sql`` (``data.query``
with an interactive shell). Home commands (``node/commands/home.py``): they run in the CLI's
process and are not RPC methods themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from coordinator.errors import OdfNodeError
from node.app.errors import InvalidArgument
from node.commands import spec
from node.commands.spec import Cli, Command, CommandParam, Context
from node.commands.spec import Output as Out
from node.compose import NodeHome, default_home

# ---- rpc


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as e:
        raise InvalidArgument(f"params are not JSON: {e}") from None
    if not isinstance(value, dict):
        raise InvalidArgument("params must be a JSON object")
    return value


async def _rpc(home: Path | None, context: Context, method: str, params: str = "{}") -> Any:
    from node.commands.dispatch import call

    return call(home or default_home(), method, _json_object(params))


def _render_json(result: Any, out: Out, cli: Mapping[str, Any]) -> None:
    out.raw(json.dumps(result, indent=2, default=str) + "\n")


# ---- sql


async def _sql(
    home: Path | None,
    context: Context,
    query: str | None = None,
    untrusted: bool = False,
    engine: str = "datafusion",
    limit: int | None = None,
    skip: int = 0,
) -> Any:
    """One query: ``data.query``'s JSON; none: the interactive shell (prints as it goes)."""
    from node.commands.catalog import BY_NAME, render_rows
    from node.commands.cli import RichOutput
    from node.commands.dispatch import dispatch

    where = home or default_home()
    NodeHome(where).require()  # before the shell starts, not at its first query

    def run_one(text: str) -> Any:
        params: dict[str, Any] = {"sql": text, "untrusted": untrusted, "engine": engine}
        if skip:
            params["skip"] = skip
        if limit is not None:
            params["limit"] = limit
        return dispatch(BY_NAME["data.query"], where, params)

    # The dispatcher runs an event loop of its own offline: in a thread, not inside this one.
    if query is not None:
        return await asyncio.to_thread(run_one, query)
    await asyncio.to_thread(
        _sql_shell, where, untrusted, lambda text: render_rows(run_one(text), RichOutput(), {})
    )
    return None


def _render_sql(result: Any, out: Out, cli: Mapping[str, Any]) -> None:
    from node.commands.catalog import render_rows

    if result is not None:  # None: the shell printed its answers itself
        render_rows(result, out, cli)


def _sql_shell(home: Path, untrusted: bool, run_one: Callable[[str], None]) -> None:
    """Read queries until EOF or \\q; one failing query prints its error and the shell goes on."""
    from node.commands.catalog import BY_NAME
    from node.commands.cli import err, out
    from node.commands.dispatch import dispatch

    history = Path(home) / ".sql_history"
    try:
        import readline

        with contextlib.suppress(OSError):
            readline.read_history_file(str(history))
    except ImportError:  # pragma: no cover - readline is part of CPython on Linux
        readline = None  # type: ignore[assignment]

    def tables() -> None:
        rows = dispatch(BY_NAME["data.tables"], home, {"untrusted": untrusted})
        out.print(f"{len(rows)} readable table(s):")
        for r in rows:
            mark = "" if r["trusted"] else " [yellow](untrusted)[/]"
            out.print(f'  "{r["name"]}"  {r["records"]} records, {r["trust"]}{mark}')

    def attempt(action: Callable[[], None], prefix: str = "") -> None:
        try:
            action()
        except OdfNodeError as e:
            err.print(f"{prefix}{e}", markup=False)

    attempt(tables)
    err.print("Type SQL ending with ; (\\d tables, \\q quit).", markup=False)
    buffer: list[str] = []
    while True:
        try:
            line = input("sql> " if not buffer else "...> ")
        except (EOFError, KeyboardInterrupt):
            break
        stripped = line.strip()
        if not buffer and stripped in ("\\q", "quit", "exit"):
            break
        if not buffer and stripped in ("\\d", ".tables"):
            attempt(tables)
            continue
        if not stripped:
            continue
        buffer.append(line)
        if not stripped.endswith(";"):
            continue
        text = "\n".join(buffer)
        buffer = []
        attempt(functools.partial(run_one, text), "error: ")
    if readline is not None:
        with contextlib.suppress(OSError):
            readline.write_history_file(str(history))


CLIENT_COMMANDS: tuple[Command, ...] = (
    Command(
        "node.rpc",
        "Call any RPC method and print the JSON result (see `odf-node rpc rpc.discover`).",
        _rpc,
        (
            CommandParam(
                "method",
                spec.STR,
                True,
                "JSON-RPC method, e.g. node.status.",
                Cli("argument", type=str),
            ),
            CommandParam(
                "params",
                spec.STR,
                description="Params as a JSON object.",
                cli=Cli("argument", default="{}"),
            ),
        ),
        cli=("rpc",),
        result={},
        render=_render_json,
        home_only="the command line's own client of the daemon's RPC",
    ),
    Command(
        "data.sql",
        "Run read-only SQL over the datasets this node verified (dataset aliases are tables).",
        _sql,
        (
            CommandParam(
                "query",
                spec.STR,
                description="The query; none: an interactive shell.",
                cli=Cli("argument", type=str),
            ),
            CommandParam(
                "untrusted",
                spec.BOOL,
                description="Read untrusted heads too (the answer says so).",
                cli=Cli(),
            ),
            CommandParam(
                "engine",
                spec.STR,
                description="datafusion (default) or spark.",
                cli=Cli(type=str, default="datafusion"),
            ),
            CommandParam(
                "limit",
                spec.INT,
                description="At most this many rows (page with --skip).",
                cli=Cli(type=int),
            ),
            CommandParam(
                "skip",
                spec.INT,
                description="Skip this many rows first.",
                cli=Cli(type=int, default=0),
            ),
        ),
        cli=("sql",),
        doc="Quote names with dots or dashes as kamu's examples do: select * from \"covid19."
        'canada". Only trusted heads are read unless --untrusted (docs/query.md). Without a '
        "query: an interactive shell (history; \\d lists the tables, \\q quits).",
        result={},
        render=_render_sql,
        home_only="data.query (daemon or in-process) with the command line's interactive shell",
    ),
)
"""``rpc`` and ``sql``, in the order of the CLI's help."""

__all__ = ["CLIENT_COMMANDS"]
