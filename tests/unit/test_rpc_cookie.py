"""The RPC cookie: 0600 from creation, atomic replace, refusal of unsafe permissions."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from node.rpc.cookie import (
    CookieError,
    CookieNotFound,
    cookie_path,
    new_token,
    read_cookie,
    remove_cookie,
    write_cookie,
)


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_write_read_remove(tmp_path: Path) -> None:
    home = tmp_path / "home"
    old = os.umask(0)  # the most permissive umask must still give 0600
    try:
        path = write_cookie(home, "http://127.0.0.1:5/rpc", "tok")
    finally:
        os.umask(old)
    assert path == cookie_path(home) == home / "rpc.cookie"
    assert _mode(path) == 0o600
    assert read_cookie(home) == ("http://127.0.0.1:5/rpc", "tok")
    write_cookie(home, "http://127.0.0.1:6/rpc", "tok2")
    assert read_cookie(home) == ("http://127.0.0.1:6/rpc", "tok2")
    assert sorted(p.name for p in home.iterdir()) == ["rpc.cookie"]  # no temp files left
    assert not remove_cookie(home, token="tok")  # someone else's cookie stays
    assert remove_cookie(home, token="tok2")
    assert not remove_cookie(home)
    with pytest.raises(CookieNotFound):
        read_cookie(home)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o606])
def test_refuses_group_or_world_accessible(tmp_path: Path, mode: int) -> None:
    path = write_cookie(tmp_path, "http://127.0.0.1:5/rpc", "tok")
    path.chmod(mode)
    with pytest.raises(CookieError, match="refusing"):
        read_cookie(tmp_path)


def test_refuses_malformed_and_symlinked(tmp_path: Path) -> None:
    path = cookie_path(tmp_path)
    for text in ("", "{}", "not json", '{"url": "", "token": "t"}', '{"url": 1, "token": "t"}'):
        path.write_text(text)
        path.chmod(0o600)
        with pytest.raises(CookieError, match="malformed"):
            read_cookie(tmp_path)
    path.unlink()
    target = tmp_path / "elsewhere"
    write_cookie(target, "http://127.0.0.1:5/rpc", "tok")
    path.symlink_to(cookie_path(target))
    with pytest.raises(CookieError):
        read_cookie(tmp_path)


def test_new_token_uses_injected_randomness() -> None:
    assert new_token(lambda n: bytes(range(n))) == bytes(range(32)).hex()
    assert len(new_token()) == 64 and new_token() != new_token()
    with pytest.raises(ValueError):
        new_token(lambda n: b"short")
