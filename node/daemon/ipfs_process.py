"""The daemon's embedded IPFS node (Helia), with recovery from a previous run that was killed.

The IPFS node runs in its own session so a terminal's Ctrl-C reaches only the daemon, which stops it
in order. If the daemon itself was SIGKILLed, the IPFS process it started dies with it (it holds
the daemon's lifeline, ``node/lifeline.py``) but leaves its repo lock behind. Its PID is recorded
next to the repo; the next start removes that stale lock and, should the process still run (a
node started by an older odf-node without a lifeline), ends it — and only it: the PID must still
run the IPFS node on this very repo — before starting afresh.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import time
from pathlib import Path

from node.ipfs.embedded import EmbeddedIpfs

log = logging.getLogger("odf_node.ipfs")


def _pid_file(repo: Path) -> Path:
    return repo.with_name(repo.name + ".pid")


def _is_our_ipfs(pid: int, repo: Path) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(b"ipfs" in a for a in cmdline) and f"IPFS_PATH={repo}".encode() in environ


def _end_stale(repo: Path) -> None:
    pid_file = _pid_file(repo)
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return
    if _is_our_ipfs(pid, repo):
        log.warning("ending the IPFS node (pid %d) left behind by a killed daemon", pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        for _ in range(50):
            if not _is_our_ipfs(pid, repo):
                break
            time.sleep(0.1)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
    # The PID file exists only between a start and a clean stop: its owner did not stop cleanly,
    # so the repo lock it may have left is stale (one daemon per home is enforced by node.lock).
    # js-ipfs (before Helia) locked with a *directory* (proper-lockfile's mkdir lock); Helia takes
    # no lock file (one daemon per home is enough), but a repo left by js-ipfs may hold one.
    lock = repo / "repo.lock"
    if lock.is_dir() and not lock.is_symlink():
        shutil.rmtree(lock, ignore_errors=True)
    else:
        lock.unlink(missing_ok=True)
    pid_file.unlink(missing_ok=True)


def start_embedded_ipfs(
    repo: Path,
    require_isolation: bool,
    *,
    swarm_host: str = "127.0.0.1",
    swarm_port: int = 0,
    announce: tuple[str, ...] = (),
) -> EmbeddedIpfs:
    """Start the IPFS node on ``repo`` (API on loopback, random ports unless ``swarm_port``) and
    record its PID."""
    _end_stale(repo)
    node = EmbeddedIpfs(
        repo,
        require_isolation=require_isolation,
        swarm_host=swarm_host,
        fixed_swarm_port=swarm_port,
        announce=announce,
    )
    node.start()
    assert node.process is not None
    _pid_file(repo).write_text(f"{node.process.pid}\n")
    return node


def stop_embedded_ipfs(node: EmbeddedIpfs, repo: Path) -> None:
    """Stop the node started by :func:`start_embedded_ipfs`."""
    node.stop()
    _pid_file(repo).unlink(missing_ok=True)
