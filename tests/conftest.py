"""Shared pytest configuration: make the test helpers (factories, strategies) importable."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# A test process holds gRPC channels (engine clients, Flight SQL) and later starts Spark in
# process: pyspark launches its JVM with Popen(preexec_fn=...), a real fork(), which runs
# gRPC's fork handlers while its poller threads are live. A fresh-clone CI run lost a whole
# module that way ("epoll_wait error: Bad file descriptor", then "Java gateway process exited
# before sending its port number"; the module alone passes). Nothing in a test process uses
# gRPC in a forked child (every child execs), so the handlers are switched off before gRPC
# first reads its configuration. (The engine worker starts Spark before its gRPC server, and
# the node starts children without preexec_fn: neither forks with gRPC live.)
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def block_reads(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every block hash ``Dataset.get_block`` reads from now on, in order (clear it to reset)."""
    from coordinator.storage.dataset import Dataset

    reads: list[object] = []
    original = Dataset.get_block

    def counting(self: Dataset, h: object, *, verify: bool = True) -> object:
        reads.append(h)
        return original(self, h, verify=verify)  # type: ignore[arg-type]

    monkeypatch.setattr(Dataset, "get_block", counting)
    return reads
