"""Content-addressed object repositories (blocks, data parts, checkpoints).

Objects are named by the multibase sha3-256 multihash of their bytes (``f1620…``), exactly as
kamu names files under ``blocks/``, ``data/`` and ``checkpoints/``. Inserting verifies the name
against the bytes; reading can re-verify (always done for bytes from an untrusted source).
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

from coordinator.errors import BlockNotFound, HashMismatch
from coordinator.multiformats import Multihash
from coordinator.storage.fs import PENDING_PREFIX, atomic_write_bytes, fsync_dir

_COPY_CHUNK = 1 << 20


class ObjectRepository(Protocol):
    """A store of immutable objects keyed by their sha3-256 multihash."""

    def contains(self, h: Multihash) -> bool:
        """Whether the object is present."""
        ...

    def get_bytes(self, h: Multihash, *, verify: bool = False) -> bytes:
        """The bytes; ``verify`` re-checks the hash. Raises BlockNotFound / HashMismatch."""
        ...

    def insert_bytes(self, data: bytes, expected: Multihash | None = None) -> Multihash:
        """Store ``data``; if ``expected`` is given it must be the data's hash."""
        ...

    def iter_hashes(self) -> Iterator[Multihash]:
        """All stored object hashes (no particular order)."""
        ...

    def size(self, h: Multihash) -> int:
        """Object size in bytes."""
        ...


def _check(data: bytes, expected: Multihash | None) -> Multihash:
    actual = Multihash.sha3_256(data)
    if expected is not None and actual != expected:
        raise HashMismatch(f"object bytes hash to {actual}, expected {expected}")
    return actual


class InMemoryObjectRepository:
    """In-memory twin of :class:`FsObjectRepository` for unit tests."""

    def __init__(self) -> None:
        self._objects: dict[Multihash, bytes] = {}

    def contains(self, h: Multihash) -> bool:
        """Whether the object is present."""
        return h in self._objects

    def get_bytes(self, h: Multihash, *, verify: bool = False) -> bytes:
        """The object's bytes."""
        try:
            data = self._objects[h]
        except KeyError as e:
            raise BlockNotFound(f"object not found: {h}") from e
        if verify:
            _check(data, h)
        return data

    def insert_bytes(self, data: bytes, expected: Multihash | None = None) -> Multihash:
        """Store ``data`` after checking its hash."""
        h = _check(bytes(data), expected)
        self._objects[h] = bytes(data)
        return h

    def iter_hashes(self) -> Iterator[Multihash]:
        """All stored hashes."""
        return iter(list(self._objects))

    def size(self, h: Multihash) -> int:
        """Object size in bytes."""
        return len(self.get_bytes(h))


class FsObjectRepository:
    """Objects as files ``<dir>/<multibase hash>``; writes are atomic and durable."""

    def __init__(self, directory: Path, *, durable: bool = True) -> None:
        self.directory = directory
        self.durable = durable

    def path_of(self, h: Multihash) -> Path:
        """Where the object with hash ``h`` lives."""
        return self.directory / h.to_multibase()

    def contains(self, h: Multihash) -> bool:
        """Whether the object is present."""
        return self.path_of(h).is_file()

    def get_bytes(self, h: Multihash, *, verify: bool = False) -> bytes:
        """The object's bytes."""
        try:
            data = self.path_of(h).read_bytes()
        except FileNotFoundError as e:
            raise BlockNotFound(f"object not found: {h} in {self.directory}") from e
        if verify:
            _check(data, h)
        return data

    def insert_bytes(self, data: bytes, expected: Multihash | None = None) -> Multihash:
        """Store ``data`` (idempotent) after checking its hash."""
        h = _check(bytes(data), expected)
        path = self.path_of(h)
        if not path.exists():
            self.directory.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(path, data, durable=self.durable)
        return h

    def insert_file(self, src: BinaryIO | Path, expected: Multihash) -> Multihash:
        """Stream a file into the store, hashing on the way; refuse it if the hash differs."""
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.path_of(expected)
        if path.exists():
            return expected
        import secrets

        tmp = self.directory / f"{PENDING_PREFIX}{secrets.token_hex(8)}"
        hasher = hashlib.sha3_256()
        try:
            with open(tmp, "wb") as out:
                f: BinaryIO = open(src, "rb") if isinstance(src, Path) else src  # noqa: SIM115
                try:
                    while chunk := f.read(_COPY_CHUNK):
                        hasher.update(chunk)
                        out.write(chunk)
                finally:
                    if isinstance(src, Path):
                        f.close()
                out.flush()
                if self.durable:
                    import os

                    os.fsync(out.fileno())
            actual = Multihash(expected.code, hasher.digest())
            if actual != expected:
                raise HashMismatch(f"file hashes to {actual}, expected {expected}")
            tmp.replace(path)
            if self.durable:
                fsync_dir(self.directory)
        finally:
            tmp.unlink(missing_ok=True)
        return expected

    def iter_hashes(self) -> Iterator[Multihash]:
        """All stored hashes (files whose names are valid multihashes)."""
        if not self.directory.is_dir():
            return
        for p in self.directory.iterdir():
            if p.name.startswith(PENDING_PREFIX) or not p.is_file():
                continue
            try:
                yield Multihash.from_multibase(p.name)
            except Exception:
                continue

    def size(self, h: Multihash) -> int:
        """Object size in bytes."""
        try:
            return self.path_of(h).stat().st_size
        except FileNotFoundError as e:
            raise BlockNotFound(f"object not found: {h}") from e

    def copy_out(self, h: Multihash, dst: Path) -> None:
        """Copy an object to ``dst``."""
        shutil.copyfile(self.path_of(h), dst)
