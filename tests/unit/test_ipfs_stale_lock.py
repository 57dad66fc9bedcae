"""A js-ipfs repo left locked by a killed daemon is unlocked before the next start.

js-ipfs takes its repo lock as a *directory* (``repo.lock/``, made with ``mkdir``); the first
version of the clean-up called ``unlink`` on it and the restarted daemon died with
``IsADirectoryError`` (seen in the three-daemon end-to-end test after a SIGKILL).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from node.daemon import ipfs_process


@pytest.mark.parametrize("as_directory", [True, False])
def test_a_stale_repo_lock_is_removed(tmp_path: Path, as_directory: bool) -> None:
    repo = tmp_path / "ipfs"
    repo.mkdir()
    lock = repo / "repo.lock"
    if as_directory:
        lock.mkdir()
        (lock / "inner").write_text("x")
    else:
        lock.write_text("123")
    # A PID file is left only by a daemon that did not stop cleanly; this PID is not js-ipfs.
    (tmp_path / "ipfs.pid").write_text("1\n")
    ipfs_process._end_stale(repo)
    assert not lock.exists()
    assert not (tmp_path / "ipfs.pid").exists()


def test_a_lock_is_kept_without_a_pid_file(tmp_path: Path) -> None:
    repo = tmp_path / "ipfs"
    (repo / "repo.lock").mkdir(parents=True)
    ipfs_process._end_stale(repo)  # a clean stop left no PID file: nothing is stale
    assert (repo / "repo.lock").is_dir()
