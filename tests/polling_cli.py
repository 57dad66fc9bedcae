"""The offline CLI as the polling-source tests drive it (``odf-node dataset ...`` on a home, in
this process): one command, a pull's JSON, a dataset's head. Shared by
``tests/integration/test_pull_polling.py`` and the ``test_fetch_*`` files."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from node.cli import app


def run(home: Path, *args: str) -> tuple[int, str]:
    """``odf-node ARGS --home HOME``: its exit code and output."""
    result = CliRunner().invoke(app, [*args, "--home", str(home)])
    return result.exit_code, result.output


def new_home(path: Path) -> Path:
    """``odf-node init --home PATH`` (a command on a path that is not a home fails); ``path``."""
    code, text = run(path, "init")
    assert code == 0, text
    return path


def create_from(home: Path, path: Path, snapshot: str) -> None:
    """Write ``snapshot`` to ``path`` and ``dataset create`` it (it must succeed)."""
    path.write_text(snapshot)
    code, text = run(home, "dataset", "create", str(path))
    assert code == 0, text


def pull(home: Path, alias: str) -> tuple[int, dict[str, object] | str]:
    """``dataset pull ALIAS --json``: the parsed result, or the error text when it fails."""
    code, text = run(home, "dataset", "pull", alias, "--json")
    if code != 0:
        return code, text
    return code, json.loads(text)


def head_of(home: Path, alias: str) -> str | None:
    """The dataset's head as ``dataset list`` shows it."""
    code, text = run(home, "dataset", "list", "--json")
    assert code == 0, text
    (row,) = [r for r in json.loads(text) if r["alias"] == alias]
    return row["head"]  # type: ignore[no-any-return]
