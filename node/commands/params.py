"""Parameters and CLI conversions that several command families share."""

from __future__ import annotations

from pathlib import Path

from node.commands import spec
from node.commands.spec import Cli, CommandParam


def ref_param(description: str = "Dataset alias or did:odf.") -> CommandParam:
    """The required ``ref`` argument: the dataset a command works on."""
    return CommandParam("ref", spec.STR, True, description, Cli("argument"))


def did_filter() -> CommandParam:
    """The optional ``did`` argument of a listing: only this dataset's rows."""
    return CommandParam("did", spec.STR, False, "Only this dataset.", Cli("argument"))


def absolute_paths(values: list[Path] | None) -> list[str] | None:
    """Input paths as absolute strings: the daemon resolves them in its own directory."""
    return [str(Path(v).resolve()) for v in values] if values else None


def absolute_file(value: Path) -> str:
    """A file to write as an absolute path string (written where the caller sees it)."""
    return str(Path(value).absolute())


__all__ = ["absolute_file", "absolute_paths", "did_filter", "ref_param"]
