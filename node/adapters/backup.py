"""The backup port (``node/app/ports.py`` ``BackupPort``) over :mod:`node.backup`: the archive
is written on a worker thread, never on an event loop."""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from pathlib import Path

from node.app.results import BackupResult


class HomeBackup:
    """Backups of the node home at ``home``."""

    def __init__(self, home: Path) -> None:
        self._home = home

    async def create(self, file: str, *, datasets: bool) -> BackupResult:
        """Write a backup of the home to ``file`` (see :func:`node.backup.write_backup`)."""
        # Imported on use: an idle daemon does not load tarfile and the archive code.
        from node.backup import write_backup

        summary = await asyncio.to_thread(write_backup, self._home, Path(file), datasets=datasets)
        return BackupResult(**asdict(summary))


__all__ = ["HomeBackup"]
