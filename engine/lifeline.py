"""The child side of a lifeline: exit, with every process we started, the moment our parent dies.

The node hands each long-lived child (the engine worker, js-ipfs) the read end of a pipe whose
write end only the node holds (``ODF_LIFELINE_FD`` names the descriptor). Nobody ever writes to
it; when the node process ends for any reason — including SIGKILL — the kernel closes its write
end and a blocking read here returns end-of-file. That works from the first instant of the
child's life (a node that died before we even started leaves the pipe already at EOF), unlike
polling ``getppid()`` once a Spark session exists, and unlike ``PR_SET_PDEATHSIG``, which the
kernel clears when ``unshare -r`` changes our credentials and which fires when the *thread* that
forked us ends rather than the node.

On EOF the process group is killed with SIGKILL when we lead it (the node starts the worker in
its own session, so the group is the worker, its Spark JVM and the JVM's Python workers);
otherwise our descendants are killed one by one. Nothing graceful happens on purpose: the node
that would receive the results is gone, and a JVM stuck in a job would never notice a softer stop.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

LIFELINE_ENV = "ODF_LIFELINE_FD"


def _descendants(pid: int) -> list[int]:
    out: list[int] = []
    stack = [pid]
    while stack:
        p = stack.pop()
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                kids = [int(c) for c in task.read_text().split()]
            except OSError:
                continue
            out += kids
            stack += kids
    return out


def die_with_children() -> None:
    """SIGKILL everything we started, then ourselves."""
    me = os.getpid()
    if os.getpgrp() == me:
        os.killpg(me, signal.SIGKILL)
    for pid in reversed(_descendants(me)):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    os._exit(70)


def watch_lifeline() -> bool:
    """Start the watcher thread if the node gave us a lifeline; whether it did."""
    raw = os.environ.pop(LIFELINE_ENV, None)
    if not raw:
        return False
    fd = int(raw)

    def wait_for_eof() -> None:
        try:
            while os.read(fd, 64):
                pass  # the node never writes; ignore anything anyway
        except OSError:
            pass
        die_with_children()

    threading.Thread(target=wait_for_eof, name="lifeline", daemon=True).start()
    return True
