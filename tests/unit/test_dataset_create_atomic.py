"""``dataset create`` with several snapshot documents: all or none.

Once, a file whose first document was valid and second invalid exited 1 naming only the second
error, yet created the first dataset, so fixing the file and retrying failed with "already
exists". Every document is now checked before anything is created. An empty snapshot file is
an error, and a file that is not UTF-8 a one-line error, not a traceback.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from factories import T0

from coordinator.errors import DatasetAlreadyExists, DecodeError, InvalidSnapshot
from coordinator.identity import generate_private_key
from coordinator.storage.repository import DatasetRepository
from node.app.datasets import DatasetUseCases

ROOT_DIR = Path(__file__).resolve().parents[2]

CITIES = """\
kind: DatasetSnapshot
version: 1
content:
  name: cities
  kind: Root
  metadata:
  - kind: AddPushSource
    sourceName: default
    read:
      kind: Csv
      schema: ["city STRING", "population BIGINT"]
    merge:
      kind: Append
"""


def derivative(name: str, input_ref: str) -> str:
    return f"""\
kind: DatasetSnapshot
version: 1
content:
  name: {name}
  kind: Derivative
  metadata:
  - kind: SetTransform
    inputs:
    - datasetRef: {input_ref}
    transform:
      kind: Sql
      engine: spark
      query: SELECT * FROM {input_ref}
"""


def stream(*docs: str) -> str:
    return "---\n".join(docs)


def use_cases(tmp_path: Path) -> DatasetUseCases:
    counter = iter(range(1, 1000))
    repo = DatasetRepository(
        tmp_path / "datasets",
        tmp_path / "keys",
        clock=lambda: T0,
        key_source=lambda: generate_private_key(bytes([next(counter)]) * 32),
        durable=False,
    )
    return DatasetUseCases(repo, lambda: None)  # type: ignore[arg-type,return-value]


def stored(uc: DatasetUseCases, tmp_path: Path) -> tuple[list[str], list[Path]]:
    """Aliases of the datasets and the key files (no leftovers of a rolled-back creation)."""
    keys = sorted((tmp_path / "keys").glob("*")) if (tmp_path / "keys").exists() else []
    return [h.alias for h in uc.repo.list()], keys


def test_invalid_second_document_creates_nothing_and_a_retry_succeeds(tmp_path: Path) -> None:
    uc = use_cases(tmp_path)
    with pytest.raises(InvalidSnapshot, match=r"nothing was created: document 2 \('big'\)"):
        asyncio.run(uc.create(stream(CITIES, derivative("big", "nope"))))
    assert stored(uc, tmp_path) == ([], [])
    created = asyncio.run(uc.create(stream(CITIES, derivative("big", "cities"))))
    assert [c.alias for c in created] == ["cities", "big"]
    assert stored(uc, tmp_path)[0] == ["big", "cities"]


def test_every_invalid_document_is_reported(tmp_path: Path) -> None:
    uc = use_cases(tmp_path)
    text = stream(derivative("a", "nope1"), CITIES, derivative("b", "nope2"), CITIES)
    with pytest.raises(InvalidSnapshot) as info:
        asyncio.run(uc.create(text))
    message = str(info.value)
    assert "document 1 ('a')" in message and "nope1" in message
    assert "document 3 ('b')" in message and "nope2" in message
    assert "document 4 ('cities'): the name 'cities' is used by an earlier document" in message
    assert stored(uc, tmp_path) == ([], [])


def test_a_name_already_taken_creates_nothing(tmp_path: Path) -> None:
    uc = use_cases(tmp_path)
    asyncio.run(uc.create(CITIES))
    before = stored(uc, tmp_path)
    with pytest.raises(DatasetAlreadyExists, match="document 2 \\('cities'\\)"):
        asyncio.run(uc.create(stream(derivative("big", "cities"), CITIES)))
    assert stored(uc, tmp_path) == before


def test_a_failure_while_creating_rolls_back_earlier_documents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uc = use_cases(tmp_path)
    original = uc.repo.create_from_snapshot
    calls = []

    def failing_second(snapshot, **options):  # type: ignore[no-untyped-def]
        calls.append(snapshot.name)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return original(snapshot, **options)

    monkeypatch.setattr(uc.repo, "create_from_snapshot", failing_second)
    with pytest.raises(OSError, match="No space"):
        asyncio.run(uc.create(stream(CITIES, derivative("big", "cities"))))
    assert calls == ["cities", "big"]
    assert stored(uc, tmp_path) == ([], [])


@pytest.mark.parametrize("text", ["", "# only a comment\n", "\n"])
def test_empty_snapshot_is_an_error(tmp_path: Path, text: str) -> None:
    with pytest.raises(DecodeError, match="no DatasetSnapshot"):
        asyncio.run(use_cases(tmp_path).create(text))


# -- the CLI, as a user runs it (a fresh process, no daemon) -----------------------------------


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "node.cli", *args, "--home", str(home)],
        check=False,
        cwd=ROOT_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_create_is_all_or_none(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert cli(home, "init").returncode == 0
    snap = tmp_path / "s.yaml"
    snap.write_text(stream(CITIES, derivative("big", "nope")))
    proc = cli(home, "dataset", "create", str(snap))
    assert proc.returncode == 1
    assert "nothing was created" in proc.stderr and "Traceback" not in proc.stderr
    assert cli(home, "dataset", "list", "--json").stdout.strip() == "[]"
    snap.write_text(stream(CITIES, derivative("big", "cities")))
    proc = cli(home, "dataset", "create", str(snap))
    assert proc.returncode == 0, proc.stderr
    assert "created cities" in proc.stdout and "created big" in proc.stdout


def test_cli_refuses_empty_non_utf8_and_deep_snapshots(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert cli(home, "init").returncode == 0
    cases = {
        "empty.yaml": b"# nothing here\n",
        "latin1.yaml": CITIES.replace("cities", "caf\xe9").encode("latin-1"),
        "deep.yaml": b"[" * 30_000,
    }
    expected = {
        "empty.yaml": "no DatasetSnapshot",
        "latin1.yaml": "not UTF-8",
        "deep.yaml": "nested deeper than 128",
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        proc = cli(home, "dataset", "create", str(tmp_path / name))
        assert proc.returncode == 1, (name, proc.returncode, proc.stderr)
        assert expected[name] in proc.stderr, (name, proc.stderr)
        assert "Traceback" not in proc.stderr
