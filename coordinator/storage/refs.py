"""Named references (``refs/head``) with compare-and-swap updates.

A ref file holds the multibase block hash with no trailing newline (69 bytes), as kamu writes
it. Updates are atomic renames, so a crash leaves either the old or the new value.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from coordinator.errors import RefCASFailed, RefNotFound
from coordinator.multiformats import Multihash
from coordinator.storage.fs import atomic_write_bytes


class RefRepository(Protocol):
    """Named pointers to block hashes."""

    def get(self, name: str) -> Multihash | None:
        """The ref's value, or None if it is not set."""
        ...

    def set(self, name: str, value: Multihash, *, expected: Multihash | None = ...) -> None:
        """Set a ref; if ``expected`` is passed, the current value must equal it (CAS)."""
        ...


_NO_CHECK = object()


class InMemoryRefRepository:
    """In-memory twin of :class:`FsRefRepository`."""

    def __init__(self) -> None:
        self._refs: dict[str, Multihash] = {}

    def get(self, name: str) -> Multihash | None:
        """The ref's value."""
        return self._refs.get(name)

    def set(self, name: str, value: Multihash, *, expected: object = _NO_CHECK) -> None:
        """Set a ref with optional CAS."""
        if expected is not _NO_CHECK and self._refs.get(name) != expected:
            raise RefCASFailed(f"ref {name} is {self._refs.get(name)}, expected {expected}")
        self._refs[name] = value


class FsRefRepository:
    """Refs as files under ``refs/``."""

    def __init__(self, directory: Path, *, durable: bool = True) -> None:
        self.directory = directory
        self.durable = durable

    def get(self, name: str) -> Multihash | None:
        """The ref's value, or None if the file does not exist."""
        try:
            text = (self.directory / name).read_text(encoding="ascii")
        except FileNotFoundError:
            return None
        try:
            return Multihash.from_multibase(text.strip())
        except Exception as e:
            raise RefNotFound(f"ref {name} in {self.directory} is malformed: {text[:80]!r}") from e

    def set(self, name: str, value: Multihash, *, expected: object = _NO_CHECK) -> None:
        """Atomically set a ref; with ``expected``, fail if the current value differs."""
        if expected is not _NO_CHECK and self.get(name) != expected:
            raise RefCASFailed(f"ref {name} is {self.get(name)}, expected {expected}")
        self.directory.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(
            self.directory / name, value.to_multibase().encode("ascii"), durable=self.durable
        )
