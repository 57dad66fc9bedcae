"""The backup port (``node/app/ports.py`` ``BackupPort``) over the archive format
(:mod:`node.adapters.backup_archive`, docs/backup.md): archives are written and read on a worker
thread, never on an event loop."""

from __future__ import annotations

import asyncio
from pathlib import Path

from node.app.results import BackupResult, RestoreResult


class HomeBackup:
    """Backups of the node home at ``home``, and restores into it."""

    def __init__(self, home: Path) -> None:
        self._home = home

    async def create(self, file: str, *, datasets: bool) -> BackupResult:
        """Write a backup of the home to ``file`` (see ``backup_archive.write_backup``)."""
        # Imported on use: an idle daemon does not load tarfile and the archive code.
        from node.adapters.backup_archive import write_backup

        return await asyncio.to_thread(write_backup, self._home, Path(file), datasets=datasets)

    async def restore(self, archive: str) -> RestoreResult:
        """Make the home (new or empty) from ``archive`` (see ``backup_archive.restore_backup``)."""
        from node.adapters.backup_archive import restore_backup

        return await asyncio.to_thread(restore_backup, Path(archive), self._home)


__all__ = ["HomeBackup"]
