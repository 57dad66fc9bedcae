"""The typer commands, generated from the declarations (``node/commands/catalog.py``).

typer reads a function's ``__signature__``: each declaration becomes a function whose
signature holds one ``Annotated[type, typer.Argument | typer.Option]`` parameter per declared
CLI parameter, plus ``--home`` and ``--json``. Calling it prepares the values (checks, file
reads), dispatches the command (daemon or in-process, ``node/commands/dispatch.py``) and prints
the result as JSON or in its human rendering. Failures print one line and exit with status 1.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from coordinator.errors import OdfNodeError
from node.commands.catalog import BY_NAME, COMMANDS
from node.commands.dispatch import dispatch, run_on_home
from node.commands.spec import Command, CommandParam, Context, from_json, to_json
from node.compose import OfflineOptions, default_home

if TYPE_CHECKING:
    from coordinator.ingest.push import IngestProgress

out = Console(emoji=False, highlight=False, soft_wrap=True)
err = Console(stderr=True, emoji=False, highlight=False, soft_wrap=True)

HomeOpt = Annotated[
    Path | None,
    typer.Option("--home", envvar="ODF_NODE_HOME", help="Node home directory."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")]

_SCHEMA_TYPES: dict[str, Any] = {"string": str, "integer": int, "boolean": bool}


def fail(message: str) -> NoReturn:
    """Print ``error: message`` on standard error and exit with status 1."""
    err.print(f"[bold red]error:[/] {escape(message)}")  # "[trust] k: …" is text, not markup
    raise typer.Exit(1)


class RichOutput:
    """:class:`~node.commands.spec.Output` on the terminal (rich)."""

    def print(self, text: str) -> None:
        """A line of markup on standard output."""
        out.print(text)

    def error(self, text: str) -> None:
        """A line of markup on standard error."""
        err.print(text)

    def table(
        self, columns: Sequence[str], rows: Sequence[Sequence[str]], *, markup: bool = True
    ) -> None:
        """A table on standard output (cells as data when ``markup`` is false)."""
        table = Table(*columns)
        for row in rows:
            table.add_row(*(row if markup else [Text(cell) for cell in row]))
        out.print(table)

    def fields(self, value: Mapping[str, Any]) -> None:
        """``key: value`` lines, the keys aligned, the values as data."""
        width = max([16, *(len(k) for k in value)])  # "verification_detail" is 19
        for k, v in value.items():
            out.print(f"[bold]{k:>{width}}[/]: {escape(_cell(v))}")

    def raw(self, text: str) -> None:
        """Text as is on standard output."""
        sys.stdout.write(text)


def emit(value: Any, as_json: bool, columns: Sequence[str] | None = None) -> None:
    """Print ``value`` as JSON, a table (list of objects) or key: value lines."""
    if as_json:
        sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")
    elif isinstance(value, list):
        if not value:
            out.print("(none)")
            return
        cols = list(columns or value[0].keys())
        RichOutput().table(cols, [[_cell(row.get(c)) for c in cols] for row in value], markup=False)
    elif isinstance(value, dict):
        RichOutput().fields(value)
    else:
        out.print(str(value))


def _cell(v: Any) -> str:
    if isinstance(v, dict | list):
        return json.dumps(v, default=str)
    return "" if v is None else str(v)


def help_text(text: str) -> str:
    """``text`` shown as written by typer's rich help, which parses help as rich markup with
    emoji codes: ``[trust] k`` lost its ``[trust]`` and ``did:key:…`` showed a key emoji.
    Tags are escaped, and a word joiner (U+2060, zero width) after each colon that precedes a
    letter keeps ``:key:`` from being an emoji code; the declarations' text stays plain (it is
    also the RPC methods' OpenRPC description)."""
    escaped = escape(text)
    chars: list[str] = []
    for i, ch in enumerate(escaped):
        chars.append(ch)
        if ch == ":" and escaped[i + 1 : i + 2].isalpha():
            chars.append("\u2060")
    return "".join(chars)


def _type_of(p: CommandParam) -> Any:
    assert p.cli is not None
    t = p.cli.type
    if t is None:
        kind = p.schema.get("type")
        t = list[str] if kind == "array" else _SCHEMA_TYPES.get(str(kind), str)
    if p.cli.default is None and not p.required and t is not bool:
        return t | None
    return t


def _parameter(p: CommandParam) -> inspect.Parameter:
    assert p.cli is not None
    c = p.cli
    info: Any
    if c.kind == "argument":
        info = typer.Argument(help=help_text(p.description), metavar=c.metavar)
    else:
        flags = c.flags or ("--" + p.name.replace("_", "-"),)
        info = typer.Option(*flags, help=help_text(p.description), envvar=c.envvar)
    default: Any = c.default
    if default is None and _type_of(p) is bool:
        default = False
    if p.required:
        default = inspect.Parameter.empty
    return inspect.Parameter(
        p.name,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        default=default,
        annotation=Annotated[_type_of(p), info],
    )


def typer_function(command: Command) -> Any:
    """The typer command function of ``command`` (a generated ``__signature__``)."""
    params = [p for p in command.params if p.cli is not None]
    arguments = [_parameter(p) for p in params if p.cli and p.cli.kind == "argument"]
    options = [_parameter(p) for p in params if p.cli and p.cli.kind == "option"]
    if command.alternate is not None:
        flag, alt_help, _ = command.alternate
        options.append(
            inspect.Parameter(
                "alternate",
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=False,
                annotation=Annotated[bool, typer.Option(flag, help=help_text(alt_help))],
            )
        )
    for name, annotation in (("home", HomeOpt), ("as_json", JsonOpt)):
        options.append(
            inspect.Parameter(
                name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=False if name == "as_json" else None,
                annotation=annotation,
            )
        )

    def run(**values: Any) -> None:
        invoke(command, values)

    run.__signature__ = inspect.Signature([*arguments, *options])  # type: ignore[attr-defined]
    run.__name__ = "_".join(command.cli or (command.name,)).replace("-", "_")
    run.__doc__ = help_text(command.summary + (f"\n\n{command.doc}" if command.doc else ""))
    return run


def invoke(command: Command, values: dict[str, Any]) -> None:
    """Prepare the CLI ``values``, dispatch ``command``, print its result, set the exit code."""
    given_home = values.pop("home", None)
    home = given_home or default_home()
    as_json = bool(values.pop("as_json", False))
    if values.pop("alternate", False) and command.alternate is not None:
        command = BY_NAME[command.alternate[2]]
    try:
        if command.prepare is not None:
            values = command.prepare(dict(values))
        declared = {p.name: p for p in command.params}
        params: dict[str, Any] = {}
        offline: dict[str, Any] = {}
        opts: dict[str, Any] = {}
        for name, given in values.items():
            p = declared[name]
            wire = p.cli.to_wire if p.cli is not None else None
            value = wire(given) if wire is not None and given is not None else given
            {"use_case": params, "offline": offline, "cli": opts}[p.role][name] = value
        if opts.get("output_format") == "json":
            as_json = True
        progress = lambda: _progress(command, params, as_json)  # noqa: E731
        if command.home_only is not None:
            typed = run_on_home(command, given_home, params, context=progress)
            result = to_json(typed)
        else:
            result = dispatch(
                command,
                home,
                params,
                offline=OfflineOptions(**{k: v for k, v in offline.items() if v is not None}),
                context=progress,
            )
            # The same JSON from the daemon or in-process: the renderer reads the typed result.
            typed = from_json(command, result)
        if typed is None and command.home_only is not None:
            pass  # the command printed as it went (the SQL shell)
        elif as_json:
            emit(result, True)
        elif command.render is not None:
            command.render(typed, RichOutput(), opts)
        else:
            emit(result, False, command.columns)
    except (OdfNodeError, ValueError) as e:
        fail(str(e))
    code = command.exit_code(typed) if command.exit_code is not None else 0
    if code:
        raise typer.Exit(code)


@contextlib.contextmanager
def _progress(command: Command, params: dict[str, Any], as_json: bool) -> Iterator[Context]:
    """The progress bar of an in-process run: input bytes (ingest) or verification phases."""
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    if command.progress == "bytes":
        bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=err,
            disable=as_json or not sys.stderr.isatty(),
        )
        total = sum(Path(f).stat().st_size for f in params.get("files") or [])
        task = bar.add_task("ingest", total=total)
        done: dict[int, int] = {}

        def on_bytes(p: IngestProgress) -> None:
            done[p.file_index] = p.bytes_read
            name = p.file.name if p.file is not None else ""
            bar.update(task, completed=sum(done.values()), description=f"{p.stage} {name}")

        with bar:
            yield Context(ingest_progress=on_bytes)
    elif command.progress == "phases":
        phases = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            console=err,
            disable=as_json,
            transient=True,
        )
        tasks: dict[str, Any] = {}

        def on_phase(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = phases.add_task(phase, total=total)
            phases.update(tasks[phase], completed=done, total=total)

        with phases:
            yield Context(verify_listener=on_phase)
    else:
        yield Context()


def add_commands(
    app: typer.Typer, groups: dict[str, typer.Typer], commands: Sequence[Command] = COMMANDS
) -> None:
    """Add a typer command for every declaration with a CLI path."""
    for command in commands:
        if command.cli is None:
            continue
        *group, name = command.cli
        target = groups[group[0]] if group else app
        target.command(name)(typer_function(command))


__all__ = ["HomeOpt", "JsonOpt", "RichOutput", "add_commands", "emit", "fail", "invoke"]
