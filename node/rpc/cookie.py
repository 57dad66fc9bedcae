"""The RPC cookie: how the CLI finds the running daemon's endpoint and token.

The daemon writes ``<home>/rpc.cookie`` (JSON ``{"url": ..., "token": ...}``) with mode 0600 when
it starts serving and removes it on shutdown. The file is created under a temporary name with
``O_EXCL`` and mode 0600 from the first byte, then renamed into place, so it is never readable
by others, even briefly, and a reader never sees a half-written file. Readers refuse a cookie
that is group/world accessible or owned by another user.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Final

from coordinator.errors import OdfNodeError

COOKIE_NAME: Final = "rpc.cookie"
TOKEN_BYTES: Final = 32


class CookieError(OdfNodeError):
    """The RPC cookie is unreadable, malformed or has unsafe permissions."""


class CookieNotFound(CookieError):
    """No RPC cookie: the daemon is not running (or uses another home)."""


def cookie_path(home: Path) -> Path:
    """``<home>/rpc.cookie``."""
    return Path(home) / COOKIE_NAME


def new_token(rng: Callable[[int], bytes] = secrets.token_bytes) -> str:
    """A fresh token: 32 random bytes from ``rng``, hex-encoded (64 characters)."""
    raw = rng(TOKEN_BYTES)
    if len(raw) != TOKEN_BYTES:
        raise ValueError(f"rng returned {len(raw)} bytes, expected {TOKEN_BYTES}")
    return raw.hex()


def write_cookie(home: Path, url: str, token: str) -> Path:
    """Atomically (re)write ``<home>/rpc.cookie`` with mode 0600; returns its path."""
    home = Path(home)
    home.mkdir(parents=True, exist_ok=True)
    target = cookie_path(home)
    tmp = home / f".{COOKIE_NAME}.{secrets.token_hex(8)}.tmp"
    data = json.dumps({"url": url, "token": token}).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        # The umask can only clear bits; fchmod makes 0600 exact whatever it is.
        os.fchmod(fd, 0o600)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    os.close(fd)
    try:
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    dfd = os.open(home, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return target


def read_cookie(home: Path) -> tuple[str, str]:
    """``(url, token)`` from ``<home>/rpc.cookie``.

    Raises :class:`CookieNotFound` when absent and :class:`CookieError` when it is not a regular
    file, is group/world accessible, belongs to another user, or is malformed.
    """
    path = cookie_path(home)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise CookieNotFound(f"{path}: no RPC cookie (is the daemon running?)") from None
    except OSError as exc:
        raise CookieError(f"{path}: cannot open: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CookieError(f"{path}: not a regular file")
        if st.st_mode & 0o077:
            raise CookieError(
                f"{path}: mode {stat.S_IMODE(st.st_mode):04o} is accessible to others; "
                "refusing it (expected 0600)"
            )
        if st.st_uid != os.geteuid():
            raise CookieError(f"{path}: owned by uid {st.st_uid}, not by this user")
        raw = b""
        while chunk := os.read(fd, 65536):
            raw += chunk
            if len(raw) > 65536:
                raise CookieError(f"{path}: too large")
    finally:
        os.close(fd)
    try:
        obj = json.loads(raw)
        url, token = obj["url"], obj["token"]
    except (ValueError, KeyError, TypeError):
        raise CookieError(f"{path}: malformed RPC cookie") from None
    if not isinstance(url, str) or not isinstance(token, str) or not url or not token:
        raise CookieError(f"{path}: malformed RPC cookie")
    return url, token


def remove_cookie(home: Path, *, token: str | None = None) -> bool:
    """Delete ``<home>/rpc.cookie``; returns whether a file was removed.

    With ``token``, only a cookie holding that token is removed, so a daemon shutting down never
    deletes the cookie of a newer daemon that replaced it.
    """
    path = cookie_path(home)
    if token is not None:
        try:
            _, current = read_cookie(home)
        except CookieError:
            return False
        if current != token:
            return False
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True
