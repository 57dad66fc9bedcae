"""The declaration types of the command layer: a command is data, declared once.

A :class:`Command` names its JSON-RPC method (``dataset.list``), its CLI path
(``dataset list``), its typed parameters, the use case it runs on an
:class:`~node.app.Application` and how a person reads its result. From the declarations:

* the CLI (``node/commands/cli.py``) generates one typer command each;
* the dispatcher (``node/commands/dispatch.py``) runs a command over the daemon's JSON-RPC when
  one runs on the home, else in-process on the offline :class:`~node.app.Application`
  (``node/compose.py``) — the same use case, so the same JSON;
* the daemon (``node/daemon/rpc_api.py``) registers one RPC method each, validated against the
  parameters' JSON schemas and published by ``rpc.discover``;
* the parity test (``tests/integration/test_cli_rpc_parity.py``) runs every data-printing
  command with and without a daemon.

This module imports no CLI toolkit and no adapter: the daemon loads it at start-up.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from node.app import Application
from node.rpc.schema import Param, Schema

if TYPE_CHECKING:
    from coordinator.ingest.push import IngestProgress  # pyarrow: not at the daemon's start

STR: Schema = {"type": "string"}
INT: Schema = {"type": "integer", "minimum": 0}
BOOL: Schema = {"type": "boolean"}
STRS: Schema = {"type": "array", "items": {"type": "string"}}
LIMIT: Schema = {"type": "integer", "minimum": 1, "maximum": 1000}
OBJECT: Schema = {"type": "object"}
ARRAY: Schema = {"type": "array"}


def object_of(result: type) -> Schema:
    """The JSON schema of a typed result (a dataclass): an object with its fields."""
    return {"type": "object", "required": [f.name for f in fields(result)]}


def array_of(result: type) -> Schema:
    """The JSON schema of a list of typed results."""
    return {"type": "array", "items": object_of(result)}


Role = Literal["use_case", "offline", "cli"]
"""Where a parameter goes: the use case (and the RPC method), the offline composition root
(an :class:`~node.compose.OfflineOptions` field of the same name), or only the CLI (a
``prepare`` hook or the rendering reads it)."""


@dataclass(frozen=True)
class Cli:
    """How a parameter appears on the command line.

    ``flags``: an option's names (default ``--<name-with-dashes>``); ``type``: its Python type
    there (default: from the schema); ``to_wire``: turns the CLI value into the JSON value
    (e.g. a ``Path`` into an absolute path string; may raise an ``OdfNodeError``); ``metavar``:
    the name the help shows (default: the parameter's).
    """

    kind: Literal["argument", "option"] = "option"
    flags: tuple[str, ...] = ()
    type: Any = None
    default: Any = None
    envvar: str | None = None
    to_wire: Callable[[Any], Any] | None = None
    metavar: str | None = None


@dataclass(frozen=True, slots=True)
class CommandParam(Param):
    """A command's parameter: the RPC method's :class:`~node.rpc.registry.Param` (name, JSON
    schema, whether it is required, description) and its command-line form (if any).

    Optional unless said otherwise (a command's flags mostly are); ``role`` says where the
    value goes (:data:`Role`).
    """

    required: bool = False
    cli: Cli | None = None
    role: Role = "use_case"


@dataclass
class Context:
    """What the caller lends a use case while it runs (progress reporting)."""

    ingest_progress: Callable[[IngestProgress], None] | None = None
    """Bytes read per file (the offline progress bar)."""
    verify_listener: Callable[[str, int, int], None] | None = None
    """``listener(phase, done, total)`` from a worker thread (the offline progress bar)."""


class Output(Protocol):
    """Where a rendering writes: rich markup on stdout, errors on stderr, tables, raw text."""

    def print(self, text: str) -> None:
        """A line of rich markup on standard output."""
        ...

    def error(self, text: str) -> None:
        """A line of rich markup on standard error."""
        ...

    def table(
        self, columns: Sequence[str], rows: Sequence[Sequence[str]], *, markup: bool = True
    ) -> None:
        """A table on standard output; ``markup=False``: the cells are data, shown as they are
        (a value such as ``[trust] k`` or ``[/x]`` is text, not a style tag)."""
        ...

    def fields(self, value: Mapping[str, Any]) -> None:
        """``key: value`` lines on standard output, the values as data (objects as JSON)."""
        ...

    def raw(self, text: str) -> None:
        """Text written as is to standard output."""
        ...


Runner = Callable[..., Awaitable[Any]]
"""``await run(app, context, **params)``: the use case call; returns a typed result (with
``to_json``), a list of them, or a JSON value."""
Renderer = Callable[[Any, Output, Mapping[str, Any]], None]
"""``render(result, out, cli_values)``: the human form of a result, the typed result when the
command declares a :attr:`Command.result_type` (its JSON otherwise)."""


class FromJson(Protocol):
    """A typed result's class: built back from the JSON its ``to_json`` gives."""

    @classmethod
    def from_json(cls, value: Any) -> Any:
        """The typed result of the JSON ``value``."""
        ...


@dataclass(frozen=True)
class Command:
    """One user-facing command; see the module docstring.

    Attributes:
        name: the JSON-RPC method name.
        summary: one line (RPC summary, CLI help's first line).
        run: the use case call (:data:`Runner`).
        params: in RPC positional order.
        cli: the CLI path (``("dataset", "list")``); ``None``: RPC only.
        doc: the CLI help after the summary.
        result: the JSON schema of the result.
        render: the human form; ``None``: a table of ``columns`` (lists) or key: value lines.
        result_type: the typed result's class (``from_json``, element-wise for a list): the CLI
            gives ``render`` and ``exit_code`` the typed result built from the command's JSON,
            the same JSON whether a daemon answered it or it ran in-process; ``None``: they get
            the JSON.
        columns: the table columns of the default rendering (default: every key).
        write: runs offline under the home's write lock (it changes the home).
        daemon_only: needs a running daemon (offline: a clear error naming ``odf-node run``).
        in_process: why the command runs in-process even when a daemon runs (``None``: it goes
            to the daemon when one runs).
        progress: the offline progress bar: ``bytes`` of input files or verification ``phases``.
        exit_code: the exit status for a (typed) result (``dataset verify``: 2 when it failed).
        prepare: checks and folds the CLI values before dispatch (may raise ``OdfNodeError``).
        alternate: ``(flag, help, command name)``: a CLI flag that runs another declaration
            with the same parameters (``connect --ipfs`` runs ``ipfs.connect``).
        parity: why the parity test cannot compare this command's JSON with and without a
            daemon (``None``: it does).
        home_only: why the command runs on the home directory in the CLI's process, never on
            an Application nor over the RPC (``node/commands/home.py``: ``init``, ``run``...);
            its runner is ``await run(home, context, **params)``, ``home`` the ``--home``
            given (None: the default).
        homeless: why the command reads nothing of a node home (a check of the given bytes
            alone): in the CLI it runs in its own process with no home and no Application
            (its runner gets ``app=None``), so it works on a machine with no node; over the RPC
            it runs on the daemon's Application as any command does. Goes with ``in_process``.
    """

    name: str
    summary: str
    run: Runner
    params: tuple[CommandParam, ...] = ()
    cli: tuple[str, ...] | None = None
    doc: str = ""
    result: Schema = field(default_factory=lambda: OBJECT)
    render: Renderer | None = None
    result_type: type[FromJson] | None = None
    columns: tuple[str, ...] | None = None
    write: bool = False
    daemon_only: bool = False
    in_process: str | None = None
    progress: Literal["bytes", "phases"] | None = None
    exit_code: Callable[[Any], int] | None = None
    prepare: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    alternate: tuple[str, str, str] | None = None
    parity: str | None = None
    home_only: str | None = None
    homeless: str | None = None

    @property
    def rpc_params(self) -> tuple[CommandParam, ...]:
        """The parameters of the use case: the RPC method's."""
        return tuple(p for p in self.params if p.role == "use_case")


def from_json(command: Command, value: Any) -> Any:
    """``command``'s typed result from its JSON ``value``: :attr:`Command.result_type`'s
    ``from_json``, element-wise for a list; the JSON itself when it declares none."""
    kind = command.result_type
    if kind is None or value is None:
        return value
    if isinstance(value, list):
        return [kind.from_json(v) for v in value]
    return kind.from_json(value)


def to_json(result: Any) -> Any:
    """A use case's result as JSON: ``to_json()`` of a typed result (a dataclass without one:
    its fields), element-wise for lists."""
    if isinstance(result, list):
        return [to_json(r) for r in result]
    to = getattr(result, "to_json", None)
    if callable(to):
        return to()
    if is_dataclass(result) and not isinstance(result, type):
        return asdict(result)
    return result


async def run_command(
    command: Command,
    app: Application | None,
    params: Mapping[str, Any],
    context: Context | None = None,
) -> Any:
    """Run ``command``'s use case on ``app`` with JSON ``params``; its JSON result (``app``
    is ``None`` only for a :attr:`Command.homeless` command run where no home exists)."""
    return to_json(await command.run(app, context or Context(), **params))


__all__ = [
    "ARRAY",
    "BOOL",
    "INT",
    "LIMIT",
    "OBJECT",
    "STR",
    "STRS",
    "Cli",
    "Command",
    "CommandParam",
    "Context",
    "FromJson",
    "Output",
    "Renderer",
    "Runner",
    "Schema",
    "array_of",
    "from_json",
    "object_of",
    "run_command",
    "to_json",
]
