"""One dispatcher: a command runs over the daemon's JSON-RPC when a daemon runs on the home, else
in-process on the home's offline :class:`~node.app.Application` — the same use case either way.

In-process, a command that changes the home takes the home's writer lock first, so a daemon
started meanwhile cannot write at the same time; if a daemon took the home after this command
looked for one, the command runs itself again (once), which then reaches the daemon's RPC.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from coordinator.errors import OdfNodeError
from node.app.errors import InvalidArgument, Unavailable
from node.commands.spec import Command, Context, run_command
from node.compose import (
    HomeLock,
    NodeHome,
    OfflineOptions,
    call_daemon,
    daemon_endpoint,
    offline_application,
)

REDIRECTED = "ODF_CLI_REDIRECTED"
"""Set when a command re-ran itself to reach a daemon that started meanwhile (at most once)."""


class DaemonRequired(Unavailable):
    """The command needs a running daemon and none runs on the home."""


def needs_daemon(home: Path) -> DaemonRequired:
    """The error of a command that needs a daemon on ``home`` when none runs."""
    return DaemonRequired(f"no daemon is running on {home}: start one with `odf-node run`")


def validate_params(command: Command, params: Mapping[str, Any]) -> None:
    """Check ``params`` against the declared schemas, as the RPC server does before a call."""
    from node.rpc.schema import ValidationError, validate

    declared = {p.name: p for p in command.rpc_params}
    for name, value in params.items():
        if name not in declared:
            raise InvalidArgument(f"unknown param {name!r}")
        try:
            validate(declared[name].schema, value, name)
        except ValidationError as e:
            raise InvalidArgument(f"invalid param {e.path!r}: {e.detail}") from None
    for p in command.rpc_params:
        if p.required and p.name not in params:
            raise InvalidArgument(f"missing required param {p.name!r}")


def dispatch(
    command: Command,
    home: Path,
    params: Mapping[str, Any],
    *,
    offline: OfflineOptions | None = None,
    context: Callable[[], AbstractContextManager[Context]] | None = None,
) -> Any:
    """Run ``command`` with JSON ``params`` on ``home``; its JSON result.

    ``params`` whose value is ``None`` are not sent (the use case's defaults apply). ``offline``
    configures the adapters of an in-process run; ``context`` makes the :class:`Context` of an
    in-process run (progress bars), entered only when the command runs here.
    """
    given = {k: v for k, v in params.items() if v is not None}
    if command.homeless is not None:
        # It reads nothing of a home: no home, daemon or Application is looked for.
        validate_params(command, given)
        with context() if context is not None else contextlib.nullcontext(Context()) as ctx:
            return asyncio.run(run_command(command, None, given, ctx))
    if command.in_process is None:
        endpoint = daemon_endpoint(home)
        if endpoint is not None:
            return call_daemon(endpoint, command.name, given)
    h = NodeHome(home).require()
    if command.daemon_only:
        raise needs_daemon(home)
    validate_params(command, given)
    with (
        write_lock(h) if command.write else contextlib.nullcontext(),
        offline_application(h, offline or OfflineOptions()) as app,
        context() if context is not None else contextlib.nullcontext(Context()) as ctx,
    ):
        return asyncio.run(run_command(command, app, given, ctx))


def run_on_home(
    command: Command,
    home: Path | None,
    params: Mapping[str, Any],
    *,
    context: Callable[[], AbstractContextManager[Context]] | None = None,
) -> Any:
    """Run a :attr:`~node.commands.spec.Command.home_only` command here, on ``home`` (None: the
    default home); its typed result (``to_json`` gives the JSON).

    Its params are checked against the declared schemas as any command's are. The runner takes
    the home's lock itself where it needs it (``key rotate`` refuses while a daemon runs).
    """
    given = {k: v for k, v in params.items() if v is not None}
    validate_params(command, given)

    async def main(ctx: Context) -> Any:
        return await command.run(home, ctx, **given)

    with context() if context is not None else contextlib.nullcontext(Context()) as ctx:
        return asyncio.run(main(ctx))


def call(home: Path, method: str, params: Mapping[str, Any] | None = None) -> Any:
    """Call any RPC ``method`` on the daemon of ``home`` (:class:`DaemonRequired` if none)."""
    endpoint = daemon_endpoint(home)
    if endpoint is None:
        NodeHome(home).require()
        raise needs_daemon(home)
    return call_daemon(endpoint, method, dict(params or {}))


@contextlib.contextmanager
def write_lock(h: NodeHome) -> Iterator[None]:
    """The home's writer lock for an in-process write; a clear error if it is taken."""
    lock = HomeLock(h.path)
    try:
        lock.acquire_cli()
    except OdfNodeError:
        if lock.holder().startswith("daemon") and os.environ.get(REDIRECTED) is None:
            # A daemon took the home after this command looked for one (typing a command right
            # after `odf-node run &`): run the command again, which now goes to its RPC. Once.
            print(f"a daemon is starting on {h.path}; sending the command to it", file=sys.stderr)
            sys.stdout.flush()
            os.environ[REDIRECTED] = "1"
            os.execv(sys.executable, [sys.executable, "-m", "node.cli", *sys.argv[1:]])
        raise
    try:
        yield
    finally:
        lock.release()


__all__ = [
    "REDIRECTED",
    "DaemonRequired",
    "call",
    "dispatch",
    "run_on_home",
    "validate_params",
    "write_lock",
]
