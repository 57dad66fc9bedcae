"""The node's home directory: config, keys and the dataset repository.

Layout::

    <home>/config.toml               node configuration (see config/default.toml)
    <home>/keys/node.key             the node's own ed25519 key (mode 0600)
    <home>/keys/datasets/<did>.key   keys of datasets this node owns (mode 0600)
    <home>/datasets/<did>/...        datasets in kamu's layout (coordinator.storage)

The default home is ``$ODF_NODE_HOME``, else ``$XDG_DATA_HOME/odf-node``, else
``~/.local/share/odf-node``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator.errors import OdfNodeError
from coordinator.identity import (
    PrivateKey,
    generate_private_key,
    load_private_key,
    save_private_key,
)
from coordinator.metadata.timestamp import Timestamp
from coordinator.storage.repository import DatasetRepository
from node.config import NodeConfig, default_config_text, load_config


def default_home() -> Path:
    """Where the node keeps its state unless told otherwise."""
    if env := os.environ.get("ODF_NODE_HOME"):
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(xdg) / "odf-node"


class NotAHome(OdfNodeError):
    """The path is not an initialised node home (no ``config.toml`` or node key)."""


def system_clock() -> Timestamp:
    """The real wall clock (the only place the node reads it; everything else is injected)."""
    return Timestamp(time.time_ns())


@dataclass
class NodeHome:
    """An initialised node home directory."""

    path: Path

    @property
    def config_path(self) -> Path:
        """``config.toml``."""
        return self.path / "config.toml"

    @property
    def node_key_path(self) -> Path:
        """``keys/node.key``."""
        return self.path / "keys" / "node.key"

    @property
    def datasets_path(self) -> Path:
        """``datasets/``."""
        return self.path / "datasets"

    @property
    def dataset_keys_path(self) -> Path:
        """``keys/datasets/``."""
        return self.path / "keys" / "datasets"

    @property
    def initialized(self) -> bool:
        """Whether ``init`` has run here."""
        return self.config_path.is_file() and self.node_key_path.is_file()

    def require(self) -> NodeHome:
        """This home, if ``init`` has run here.

        Only ``init``, ``run`` and ``restore`` make a home: any other command on a path that
        is not one (a mistyped ``--home``) fails, creating nothing, rather than starting a new,
        empty node there.

        Raises:
            NotAHome: naming the path and the command that makes a home there.
        """
        if not self.initialized:
            where = "" if self.path == default_home() else f" --home {self.path}"
            raise NotAHome(
                f"no odf-node home at {self.path}: create one with `odf-node init{where}`"
            )
        return self

    def init(self, key: PrivateKey | None = None) -> bool:
        """Create config, node key and directories if missing; True if anything was created."""
        created = False
        self.path.mkdir(parents=True, exist_ok=True)
        os.chmod(self.path, 0o700)
        if not self.config_path.exists():
            self.config_path.write_text(default_config_text(), encoding="utf-8")
            created = True
        if not self.node_key_path.exists():
            save_private_key(self.node_key_path, key or generate_private_key())
            created = True
        self.datasets_path.mkdir(parents=True, exist_ok=True)
        self.dataset_keys_path.mkdir(parents=True, exist_ok=True)
        # Keys are 0600 already; closing the directories too hides which datasets we own.
        os.chmod(self.path / "keys", 0o700)
        os.chmod(self.dataset_keys_path, 0o700)
        return created

    def config(self, overrides: Mapping[str, Mapping[str, Any]] | None = None) -> NodeConfig:
        """The validated config: defaults, then ``config.toml``, env, then ``overrides``."""
        return load_config(self.config_path, overrides=overrides)

    def node_key(self) -> PrivateKey:
        """The node's own key."""
        return load_private_key(self.node_key_path)

    def repository(self) -> DatasetRepository:
        """The dataset repository in this home."""
        return DatasetRepository(self.datasets_path, self.dataset_keys_path, clock=system_clock)
