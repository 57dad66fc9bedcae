"""One writer per home: the daemon, or a CLI command working on the home directly.

An exclusive ``flock`` on ``<home>/node.lock`` is held by the daemon for its whole life; CLI
commands that write take the same lock for their duration, so the two never write at once. The
kernel drops the lock when its holder dies (even by SIGKILL), so a crash never leaves it stale.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from coordinator.errors import CONFLICT, OdfNodeError


class HomeLocked(OdfNodeError):
    """Another process (a running daemon or a CLI command) holds the home's lock."""

    rpc_code = CONFLICT


class HomeLock:
    """The home's writer lock."""

    def __init__(self, home: Path) -> None:
        self.path = home / "node.lock"
        self._fd: int | None = None

    def _acquire(self, what: str) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode(errors="replace").strip()
            os.close(fd)
            raise HomeLocked(
                f"the node home {self.path.parent} is in use ({holder or 'another process'}); "
                "talk to the running daemon over RPC or stop it first"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{what} pid {os.getpid()}\n".encode())
        self._fd = fd

    def acquire_daemon(self) -> None:
        """Take the lock for the daemon's lifetime."""
        self._acquire("daemon")

    def acquire_cli(self) -> None:
        """Take the lock for one CLI command."""
        self._acquire("cli command")

    def held_by_other(self) -> bool:
        """Whether someone else holds the lock right now (does not take it)."""
        if not self.path.exists():
            return False
        fd = os.open(self.path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def holder(self) -> str:
        """Who holds (or last held) the lock, as recorded in the lock file ("" if unknown)."""
        try:
            return self.path.read_text(errors="replace").strip()
        except OSError:
            return ""

    def release(self) -> None:
        """Drop the lock."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> HomeLock:
        self.acquire_cli()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
