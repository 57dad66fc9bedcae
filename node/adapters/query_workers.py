"""What the two query engines' workers share (``node/adapters/query_engine.py`` for DataFusion,
``node/adapters/spark_query.py`` for Spark): starting a worker process in a session of its own,
tied to this process by a lifeline (it dies with the node), optionally in a loopback-only
network namespace; waiting for an answer line under the query's deadline and memory bound; and
turning a worker's refusal into the error the caller acts on.

A worker speaks one JSON line per request on stdin and one JSON line per answer (or streamed
part) on stdout, after a first ``READY`` line (``engine/query_worker.py``,
``engine/spark_query_worker.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
from asyncio import FIRST_COMPLETED
from dataclasses import dataclass
from pathlib import Path

from node.app.errors import QueryDeadlineExceeded, QueryError, QueryRejected, QueryTooLarge
from node.app.ports import QueryLimits
from node.engine_client import PROJECT_ROOT
from node.lifeline import Lifeline

# A worker in a loopback-only namespace (``[engine] isolate_network``): it can read the files it
# is given and nothing on any network.
_ISOLATE = ["unshare", "-rn", "sh", "-c", 'ip link set lo up 2>/dev/null; exec "$@"', "-"]


@dataclass
class QueryWorker:
    """One worker process, the directory its answers are written to, and what it served."""

    proc: asyncio.subprocess.Process
    lifeline: Lifeline
    dir: Path
    served: int = 0
    healthy: bool = True

    def kill(self) -> None:
        """Kill the worker's whole session (a Spark worker's JVM with it)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.lifeline.cut()

    def discard(self) -> None:
        """Kill it and remove its answers."""
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def log_tail(self, chars: int) -> str:
        """The end of what the worker wrote to its log (for an error message)."""
        return (self.dir / "worker.log").read_text(errors="replace")[-chars:].strip()


async def start_worker(
    cmd: list[str],
    work: Path,
    *,
    isolate: bool,
    start_timeout_s: float,
    what: str,
    env: dict[str, str] | None = None,
) -> QueryWorker:
    """Start ``cmd`` (a worker module) with ``work`` as its directory and wait for ``READY``;
    :class:`~node.app.errors.Unavailable` naming ``what`` and its log if it does not come."""
    from node.app.errors import Unavailable

    if isolate:
        cmd = [*_ISOLATE, *cmd]
    environment = dict(os.environ if env is None else env)
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(PROJECT_ROOT), *filter(None, [environment.get("PYTHONPATH")])]
    )
    lifeline = Lifeline()
    try:
        proc = await asyncio.create_subprocess_exec(
            *cmd,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=open(work / "worker.log", "ab"),  # noqa: SIM115 - the child keeps it
            cwd=str(PROJECT_ROOT),
            start_new_session=True,
            **lifeline.popen_kwargs(environment),  # type: ignore[arg-type]
        )
    finally:
        lifeline.spawned()
    worker = QueryWorker(proc, lifeline, work)
    assert proc.stdout is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), start_timeout_s)
    except TimeoutError:
        line = b""
    except BaseException:
        worker.discard()
        raise
    if line.strip() != b"READY":
        log = worker.log_tail(500)
        worker.discard()
        raise Unavailable(f"{what} did not start: {log or 'no output'}")
    return worker


async def answer_line(
    worker: QueryWorker,
    limits: QueryLimits,
    deadline: float,
    watch: asyncio.Task[None],
    *,
    what: str = "the query",
) -> dict[str, object]:
    """The worker's next line on stdout (a part or the answer), or the error that ended it: its
    memory passed the bound (``watch`` returned) or ``deadline`` (the loop's time) passed; the
    worker is killed then. ``what`` names the query in the messages."""
    proc = worker.proc
    assert proc.stdout is not None
    loop = asyncio.get_running_loop()
    read = loop.create_task(proc.stdout.readline())
    timeout = max(0.0, deadline - loop.time())
    done, _ = await asyncio.wait({read, watch}, timeout=timeout, return_when=FIRST_COMPLETED)
    if watch in done:
        read.cancel()
        worker.kill()
        raise QueryTooLarge(
            f"{what} needed more than {limits.memory_bytes} bytes of memory "
            "([query] memory_bytes) and was stopped: narrow it or raise the setting"
        )
    if read not in done:
        read.cancel()
        worker.kill()
        raise QueryDeadlineExceeded(
            f"the query ran longer than {limits.deadline_s:g} s ([query] deadline_s) "
            "and was stopped"
        )
    line = read.result()
    if not line:
        raise QueryError(f"{what} worker ended without an answer: {worker.log_tail(300)}")
    message: dict[str, object] = json.loads(line)
    if "part" not in message:
        worker.healthy = True  # it answered: it waits for the next request
    return message


def raise_refusal(answer: dict[str, object], limits: QueryLimits) -> None:
    """Raise the error a worker's refusal answer stands for (nothing if it answered rows)."""
    if answer.get("ok"):
        return
    kind, message = str(answer.get("kind")), str(answer.get("message"))
    if kind == "rejected":
        raise QueryRejected(message)
    if kind == "too_large":
        raise QueryTooLarge(message)
    if kind == "out_of_memory":
        raise QueryTooLarge(
            f"the query needed more than {limits.memory_bytes} bytes of memory "
            f"([query] memory_bytes): {message}"
        )
    raise QueryError(message)
