"""Crash-safe file writes.

Every file the store writes goes through :func:`atomic_write_bytes`: the bytes go to a
``.pending-<random>`` file in the target directory, are fsynced, renamed over the target and the
directory is fsynced. A crash at any point leaves either the old file or the complete new one;
stray ``.pending-*`` files are ignored by readers and removed by :func:`remove_stale_pending`.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Final

PENDING_PREFIX: Final = ".pending-"


def fsync_dir(path: Path) -> None:
    """fsync a directory so a rename inside it is durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` atomically (temp file, fsync, rename, fsync dir)."""
    tmp = path.parent / f"{PENDING_PREFIX}{secrets.token_hex(8)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)


def remove_stale_pending(directory: Path) -> int:
    """Delete leftover ``.pending-*`` files (from a crash); returns how many were removed."""
    n = 0
    if directory.is_dir():
        for p in directory.iterdir():
            if p.name.startswith(PENDING_PREFIX):
                p.unlink(missing_ok=True)
                n += 1
    return n
