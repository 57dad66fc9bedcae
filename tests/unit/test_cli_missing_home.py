"""A ``--home`` that is not a node home: only ``init``, ``run`` and ``restore`` make one.

A mistyped ``--home DIR`` used to become a new, empty node for any command (``status``,
``subscribe``, ``sql``...). Now every other command fails with one line naming the path and the
command that makes a home there, and creates nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from node.cli import app

DID = "did:odf:fed01" + "00" * 32

COMMANDS = [
    ("status",),
    ("subscribe", DID),
    ("subscriptions",),
    ("sql", "SELECT 1"),
    ("dataset", "list"),
    ("peers",),
    ("events",),
    ("work",),
    ("connect", "/ip4/127.0.0.1/tcp/1/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"),
    ("rpc", "rpc.discover"),
    ("backup", "out.tar"),
    ("key", "rotate"),
    ("key", "revoke"),
    ("serve-http",),
]


def run(home: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, [*args, "--home", str(home)])
    return result.exit_code, result.output


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_a_command_on_a_missing_home_fails_naming_it_and_creates_nothing(
    tmp_path: Path, args: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "typo"
    code, text = run(home, *args)
    assert code != 0, text
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    assert f"no odf-node home at {home}" in lines[0], text
    assert f"odf-node init --home {home}" in lines[0], text
    assert not home.exists()
    assert not (tmp_path / "out.tar").exists()


def test_a_directory_that_is_not_a_home_is_left_as_it_is(tmp_path: Path) -> None:
    code, text = run(tmp_path, "dataset", "list")
    assert code != 0 and f"odf-node init --home {tmp_path}" in text, text
    assert list(tmp_path.iterdir()) == []


def test_init_makes_the_home_the_others_then_use(tmp_path: Path) -> None:
    home = tmp_path / "home"
    code, text = run(home, "init", "--json")
    assert code == 0, text
    assert json.loads(text)["created"] is True
    code, text = run(home, "dataset", "list", "--json")
    assert code == 0 and json.loads(text) == [], text


def test_run_still_makes_the_home_on_its_first_start(tmp_path: Path) -> None:
    """``run`` creates a home that does not exist yet (``make run`` on a fresh machine); a bad
    option then stops it before the daemon starts, so no daemon runs here."""
    home = tmp_path / "fresh"
    code, text = run(home, "run", "--log-format", "bogus")
    assert code != 0 and "log_format" in text, text
    assert (home / "config.toml").is_file() and (home / "keys" / "node.key").is_file()
