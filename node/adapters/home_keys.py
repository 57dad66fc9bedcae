"""The node's keys on disk (``<home>/keys/``): :class:`~node.app.ports.NodeKeyStore` for key
rotation, revocation and inception (``node/app/node_keys.py``), and its in-memory twin.

Layout: ``node.key`` (the current node key), ``next.key`` (the key it committed to: written by
``key rotate`` and inception, read only by ``key rotate`` and ``key revoke``, never by the
daemon; keep a copy offline), ``retired/<did:odf multibase>.key`` (former node keys, so the node
can revoke them), and during a rotation ``node.key.next`` / ``next.key.next`` (its staged keys).
Every key file is owner-only (mode 0600), ``retired/`` too (0700).
"""

from __future__ import annotations

import os
from pathlib import Path

from coordinator.identity import PrivateKey, load_private_key, save_private_key
from node.home import NodeHome


class HomeKeyStore:
    """:class:`~node.app.ports.NodeKeyStore` over a home's ``keys/`` directory."""

    def __init__(self, home: NodeHome) -> None:
        self._home = home

    @property
    def _committed(self) -> Path:
        return self._home.path / "keys" / "next.key"

    @property
    def _retired_dir(self) -> Path:
        return self._home.path / "keys" / "retired"

    @property
    def _staged_node(self) -> Path:
        return self._home.node_key_path.with_name("node.key.next")

    @property
    def _staged_committed(self) -> Path:
        return self._committed.with_name("next.key.next")

    def node_key(self) -> PrivateKey:
        """The current node key."""
        return self._home.node_key()

    def retired(self) -> list[PrivateKey]:
        """The retired keys, oldest first (by file modification time)."""
        d = self._retired_dir
        paths = sorted(d.glob("*.key"), key=lambda p: p.stat().st_mtime) if d.is_dir() else []
        return [load_private_key(p) for p in paths]

    def committed_path(self, path: str | None = None) -> str:
        """``path``, else ``keys/next.key``."""
        return path if path is not None else str(self._committed)

    def read_committed(self, path: str | None = None) -> PrivateKey | None:
        """The committed key (from ``path`` when given); None when the file is missing."""
        p = Path(self.committed_path(path))
        return load_private_key(p) if p.is_file() else None

    def write_committed(self, key: PrivateKey) -> None:
        """Write ``keys/next.key`` (mode 0600)."""
        save_private_key(self._committed, key)

    def remove_committed(self) -> None:
        """Remove ``keys/next.key``."""
        self._committed.unlink(missing_ok=True)

    def staged(self) -> PrivateKey | None:
        """``keys/node.key.next``, if a rotation staged it."""
        p = self._staged_node
        return load_private_key(p) if p.exists() else None

    def stage(self, old: PrivateKey, new: PrivateKey, after: PrivateKey) -> None:
        """``node.key.next``, ``next.key.next`` and ``retired/<old>.key``, in that order."""
        save_private_key(self._staged_node, new)
        save_private_key(self._staged_committed, after)
        save_private_key(self._retired_dir / f"{old.dataset_id().as_multibase()}.key", old)
        os.chmod(self._retired_dir, 0o700)

    def discard_staged(self) -> None:
        """Remove ``node.key.next`` and ``next.key.next``."""
        self._staged_node.unlink(missing_ok=True)
        self._staged_committed.unlink(missing_ok=True)

    def finish(self) -> None:
        """``next.key.next`` -> ``next.key``, then ``node.key.next`` -> ``node.key`` (each one
        rename: a crash between them leaves a rotation the next ``key rotate`` completes)."""
        if self._staged_committed.exists():
            os.replace(self._staged_committed, self._committed)
        os.replace(self._staged_node, self._home.node_key_path)


class MemoryKeyStore:
    """The in-memory twin of :class:`HomeKeyStore` (unit tests)."""

    def __init__(self, node_key: PrivateKey) -> None:
        self.current = node_key
        self.retired_keys: list[PrivateKey] = []
        self.files: dict[str, PrivateKey] = {}
        """Committed keys by path (``keys/next.key`` and any a test passes by path)."""
        self.staged_keys: tuple[PrivateKey, PrivateKey] | None = None

    def node_key(self) -> PrivateKey:
        """The current node key."""
        return self.current

    def retired(self) -> list[PrivateKey]:
        """The retired keys, oldest first."""
        return list(self.retired_keys)

    def committed_path(self, path: str | None = None) -> str:
        """``path``, else ``keys/next.key``."""
        return path if path is not None else "keys/next.key"

    def read_committed(self, path: str | None = None) -> PrivateKey | None:
        """The key stored under that path, if any."""
        return self.files.get(self.committed_path(path))

    def write_committed(self, key: PrivateKey) -> None:
        """Store ``keys/next.key``."""
        self.files["keys/next.key"] = key

    def remove_committed(self) -> None:
        """Forget ``keys/next.key``."""
        self.files.pop("keys/next.key", None)

    def staged(self) -> PrivateKey | None:
        """The staged node key, if any."""
        return self.staged_keys[0] if self.staged_keys is not None else None

    def stage(self, old: PrivateKey, new: PrivateKey, after: PrivateKey) -> None:
        """Stage ``new`` and ``after``; retire ``old``."""
        self.staged_keys = (new, after)
        if old not in self.retired_keys:
            self.retired_keys.append(old)

    def discard_staged(self) -> None:
        """Forget the staged keys."""
        self.staged_keys = None

    def finish(self) -> None:
        """Make the staged keys current."""
        assert self.staged_keys is not None
        new, after = self.staged_keys
        self.files["keys/next.key"] = after
        self.current = new
        self.staged_keys = None
