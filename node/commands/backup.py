"""``backup``: the node's keys, configuration and state (optionally its datasets) in one archive
(docs/backup.md; ``restore`` is a home command, ``node/commands/home.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from node.app import Application
from node.app.results import (
    BackupResult,
)
from node.commands import spec
from node.commands.params import absolute_file
from node.commands.spec import Cli, Command, CommandParam, Context, Output


async def _backup(
    app: Application, ctx: Context, file: str, datasets: bool = False
) -> BackupResult:
    return await app.backup(file, datasets)


def _render_backup(result: BackupResult, out: Output, opts: Mapping[str, Any]) -> None:
    stored = len(result.datasets)
    out.print(
        f"Backed up node {result.node_id} to [bold]{result.file}[/]: "
        f"{result.subscriptions} subscriptions, {result.attestations} attestations, "
        f"{result.disputes} disputes, {result.owned_dataset_keys} dataset keys"
        + (f", {stored} datasets" if stored else " (datasets not included: --datasets)")
        + f"; {result.files} files, {result.bytes} bytes in {result.seconds} s"
    )


BACKUP_COMMANDS: tuple[Command, ...] = (
    Command(
        "node.backup",
        "Back up the node: keys, config, state (attestations, disputes...), optionally datasets.",
        _backup,
        (
            CommandParam(
                "file",
                spec.STR,
                True,
                "The archive to write (never over an existing file).",
                Cli("argument", type=Path, to_wire=absolute_file, metavar="FILE"),
            ),
            CommandParam(
                "datasets",
                spec.BOOL,
                False,
                "Include every dataset (blocks, data, checkpoints).",
                Cli(),
            ),
        ),
        cli=("backup",),
        doc="Safe while the daemon runs. Restore with `odf-node restore FILE --home DIR`; the "
        "archive format: docs/backup.md.",
        result=spec.object_of(BackupResult),
        result_type=BackupResult,
        render=_render_backup,
        in_process="a read of the home beside the daemon (SQLite's online backup copies "
        "state.db while the daemon writes; dataset files are immutable once written), and the "
        "archive is written by the caller, where the caller sees FILE",
        parity="one command line cannot run on both homes (a backup never overwrites its "
        "file): the test backs each home up to its own file and compares the shapes",
    ),
)
"""In the order of ``rpc.discover``."""

__all__ = ["BACKUP_COMMANDS"]
