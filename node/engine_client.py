"""The coordinator's side of one engine worker process (``engine.worker``: Spark, or one
DataFusion release; :mod:`node.engine_router` holds one client per engine and release).

:class:`EngineClient` implements the ``TransformEngine`` protocol of
:mod:`coordinator.transform.verify` by talking the ODF engine gRPC protocol to a worker process
it owns:

* the worker is started **lazily** on the first request and kept warm;
* it is stopped after ``idle_timeout`` seconds without requests;
* if it dies (or the connection breaks) during a request, it is restarted and the request is
  **retried once** after the partial output files are removed. The coordinator commits only
  after a ``Success``, so a crash never leaves a partial commit;
* each request is bounded by ``request_timeout`` seconds (the worker is killed on expiry);
* each request is bounded in memory by ``memory_limit`` bytes (optional): while a request
  runs, a watchdog samples the resident memory of the worker's whole process tree (the Python
  worker, its JVM and any Python helpers) every ``memory_poll`` seconds, and once more when
  the answer arrives. Over the limit, the worker's process group is killed and the request
  fails with :class:`~coordinator.transform.model.TransformMemoryExceeded` (not retried:
  the same request would exceed again); the next request starts a fresh worker. The JVM
  heap is capped separately by ``spark.driver.memory`` in ``spark_conf``; keep it well below
  ``memory_limit``, because a JVM does not give heap back to the system, so a worker whose
  heap grew past the limit would fail every request until restarted. ``setrlimit`` is not
  used: ``RLIMIT_AS``/``RLIMIT_DATA`` count the address space a JVM reserves up front, far
  beyond what it touches, and make the JVM fail to start rather than a request fail;
* optionally (``isolate_network=True``) the worker runs in a fresh network namespace with only
  loopback (``unshare -rn``), talking over a Unix socket;
* :meth:`EngineClient.execute_transform_batch` sends several requests in one round trip
  (odf-node's ``ExecuteTransformBatch``, ``engine/worker.py``) to a worker it spawned; the
  restart, retry, timeout (``request_timeout`` per request) and memory rules apply to the batch
  as a whole. A worker it does not own gets the requests one by one.

* with ``protocol="frames"`` (the node's DataFusion workers) the client speaks odf-node's
  framed protocol over the worker's Unix socket instead of gRPC
  (:mod:`coordinator.transform.frames`). :meth:`EngineClient.submit_transform_batch` then
  sends a batch at once and returns a future: several batches can be in flight, the worker
  answers them in order and never waits for the node between them. A reader thread completes
  the futures; when the worker dies it restarts it and sends every unanswered batch again, each
  batch at most once more (its partial outputs removed first), as for gRPC requests. The
  timeout counts from the moment a batch is the oldest unanswered one; the memory watchdog runs
  while any batch is in flight and fails the oldest on excess. For a replay's request the
  worker also returns the logical hash of the output, computed in memory, and writes the file
  only when it differs from the published one.

It can also connect to an engine it does not own (``spawn=False``), e.g. kamu's
``engine-spark`` container or a worker started by hand.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from coordinator.errors import UNAVAILABLE, OdfNodeError
from coordinator.transform.fbs import (
    decode_raw_query_response,
    decode_transform_response,
    encode_raw_query_request,
    encode_transform_request,
    unwrap_protobuf,
    unwrap_protobuf_many,
    wrap_protobuf,
    wrap_protobuf_many,
)
from coordinator.transform.frames import (
    ARROW_OUTPUT,
    TRANSFORM_ANSWERS,
    TRANSFORM_BATCH,
    ConnectionLost,
    FrameError,
    encode_frame,
    encode_request,
    read_frame,
)
from coordinator.transform.model import (
    CPU_LIMIT_SETTING,
    RawQueryRequest,
    RawQueryResponse,
    TransformCpuExceeded,
    TransformInternalError,
    TransformMemoryExceeded,
    TransformRequest,
    TransformResponse,
    TransformSuccess,
)
from coordinator.transform.output import remove_outputs
from node.lifeline import Lifeline

PROJECT_ROOT = Path(__file__).resolve().parents[1]
_R = TypeVar("_R")
WARM_UP_CONF = "spark.odf.warmUp"
"""``engine.spark_engine.WARM_UP_CONF`` (the node does not import the engine's modules): set on
every Spark worker this client spawns, unless ``spark_conf`` sets it."""
LOCAL_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"
"""JVM options of a spawned Spark worker on a ``local`` master: the C1 compiler only. Its JIT
threads then do not compete with the session's start on a small machine. Measured on the
2-core machine (load 1.5-2, a worker with the warm-up query, 8 transforms of 50,000-row
blocks, 4 interleaved runs): start 5.7-5.9 s against 7.6-7.8 s, first transform 0.8 s against
1.2-1.35 s, the other seven 3.6-3.8 s against 3.9-4.9 s. A ``-XX:TieredStopAtLevel=4`` in
``spark.driver.extraJavaOptions`` restores the full JIT."""


class EngineUnavailable(OdfNodeError):
    """The worker could not be started or reached."""

    rpc_code = UNAVAILABLE


_PAGE = os.sysconf("SC_PAGE_SIZE")


_TICK = os.sysconf("SC_CLK_TCK")


def process_tree_usage(pid: int) -> tuple[int, float]:
    """Resident bytes and CPU seconds of ``pid`` and all its descendants, read from ``/proc``
    (``(0, 0.0)`` if gone).

    CPU time is user + system time of every live process of the tree (all its threads: a JVM's
    compiler and GC threads count) plus that of the descendants they already waited for
    (``cutime``/``cstime``), so a helper process that burnt CPU and exited still counts.
    """
    children: dict[int, list[int]] = {}
    stats: dict[int, list[bytes]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        fields = stat.rsplit(b")", 1)[-1].split()
        if len(fields) > 14:
            child = int(entry.name)
            children.setdefault(int(fields[1]), []).append(child)
            stats[child] = fields
    rss = 0
    ticks = 0
    for p in walk_tree(pid, lambda p: children.get(p, ())):
        rss += process_rss(p)
        own = stats.get(p)
        if own is not None:
            # utime, stime, cutime, cstime: fields 14-17 of stat(5), 11-14 after the comm
            ticks += sum(int(x) for x in own[11:15])
    return rss, ticks / _TICK


def process_rss(pid: int) -> int:
    """Resident bytes of the one process ``pid``, read from ``/proc/PID/statm`` (0 if gone)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def walk_tree(pid: int, children: Callable[[int], Iterable[int]]) -> Iterator[int]:
    """``pid`` and its descendants as ``children`` names each process's children, depth first
    (how a tree is found differs: a scan of every process's ``stat``, or each thread's
    ``children`` file)."""
    stack = [pid]
    while stack:
        p = stack.pop()
        yield p
        stack.extend(children(p))


def process_tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants, read from ``/proc`` (0 if gone)."""
    return process_tree_usage(pid)[0]


def process_tree_cpu(pid: int) -> float:
    """CPU seconds used by ``pid`` and all its descendants (see :func:`process_tree_usage`)."""
    return process_tree_usage(pid)[1]


class _ResourceWatch:
    """Samples a worker's tree RSS and CPU time during a request; kills its process group when
    the memory limit or the CPU budget is exceeded.

    The CPU budget counts from a baseline: the tree's CPU time when the watch starts (its
    thread's first sample), or, on
    the framed protocol, when the next batch becomes the oldest in flight (:meth:`rebase`, to
    the latest sample; taken when the previous batch's answer arrived, so at most a poll
    interval's CPU is charged to the wrong batch).
    """

    def __init__(
        self,
        pid: int,
        limit: int | None,
        poll: float,
        *,
        cpu_limit: float | None = None,
        requests: int = 1,
    ) -> None:
        self.pid = pid
        self.limit = limit
        """Bytes of tree RSS (None: unbounded)."""
        self.cpu_limit = cpu_limit
        """CPU seconds per request (None: unbounded)."""
        self.poll = poll
        self.peak = 0
        self.exceeded = False
        self.cpu_exceeded = False
        """The budget, not the memory limit, was exceeded."""
        self.requests = requests
        self.cpu_used = 0.0
        self._cpu_now = 0.0
        self._cpu_base: float | None = None  # set by the first sample
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="engine-resource-watch", daemon=True)

    def __enter__(self) -> _ResourceWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()  # once more: memory and CPU taken since the last tick still count

    def rebase(self, requests: int) -> None:
        """Count the CPU budget of ``requests`` requests from the latest sample on."""
        with self._lock:
            if self._cpu_base is not None:
                self._cpu_base = self._cpu_now
            self.requests = requests

    def sample(self) -> None:
        """Measure now; on excess, kill the worker's process group (it leads its session)."""
        with self._lock:
            if self.exceeded:
                return
            rss, cpu = process_tree_usage(self.pid)
            self.peak = max(self.peak, rss)
            if cpu > 0:  # 0: the tree is gone (a restart rebases with a new watch)
                self._cpu_now = cpu
            if self._cpu_base is None:
                self._cpu_base = self._cpu_now
            used = self._cpu_now - self._cpu_base
            if self.limit is not None and rss > self.limit:
                self.exceeded = True
            elif self.cpu_limit is not None and used > self.cpu_limit * self.requests:
                self.exceeded = self.cpu_exceeded = True
                self.cpu_used = used
            else:
                return
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass

    def _run(self) -> None:
        if self.cpu_limit is not None:
            # The CPU baseline, taken here rather than by the caller: a /proc walk costs
            # ~3.5 ms, as much as a small DataFusion block, and the request need not wait.
            self.sample()
        while not self._stop.wait(self.poll):
            self.sample()

    def stop(self) -> None:
        """Stop sampling (no final sample)."""
        self._stop.set()

    def failure(self) -> TransformInternalError:
        """The typed response for an exceeded limit or budget."""
        if self.cpu_exceeded and self.cpu_limit is not None:
            budget = self.cpu_limit * self.requests
            per = f" ({self.requests} requests)" if self.requests > 1 else ""
            return TransformCpuExceeded(
                message=(
                    f"engine exceeded its CPU-time budget: {self.cpu_used:.1f} s of CPU, budget "
                    f"{budget:g} s{per}; the worker was stopped (raise {CPU_LIMIT_SETTING} "
                    "if this work is legitimate)"
                ),
                limit_seconds=budget,
                used_seconds=self.cpu_used,
            )
        return TransformMemoryExceeded(
            message=(
                f"engine exceeded its memory limit: {self.peak >> 20} MiB resident, limit "
                f"{(self.limit or 0) >> 20} MiB; the worker was stopped"
            ),
            limit_bytes=self.limit or 0,
            peak_bytes=self.peak,
        )


class CrashLog:
    """When a worker failed to start or died on its own, and why (the daemon's ``/readyz``
    reports an engine that does so repeatedly as crash-looping: restarting it cannot help).

    Thread-safe; keeps the newest :data:`CRASHES_KEPT` failures.
    """

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._failures: deque[tuple[float, str]] = deque(maxlen=CRASHES_KEPT)

    def note(self, reason: str) -> None:
        """Record one failure now."""
        with self._lock:
            self._failures.append((self._monotonic(), reason))

    def recent(self, window_s: float) -> list[str]:
        """The reasons of the failures of the last ``window_s`` seconds, oldest first."""
        since = self._monotonic() - window_s
        with self._lock:
            return [reason for t, reason in self._failures if t >= since]


CRASHES_KEPT = 32
"""Failures a :class:`CrashLog` remembers (a readiness window needs only a few)."""


def _check_options(
    *, engine: str, protocol: str, spawn: bool, driver_host: str, isolate_network: bool
) -> None:
    """Refuse an :class:`EngineClient`'s options that cannot work together."""
    if protocol not in ("grpc", "frames"):
        raise ValueError(f"unknown engine protocol {protocol!r}")
    if protocol == "frames" and (not spawn or engine != "datafusion"):
        raise ValueError("the framed protocol is for DataFusion workers this client spawns")
    if driver_host and isolate_network:
        raise EngineUnavailable(
            "a cluster driver host needs the network: isolate_network must be off"
        )


def _with_driver_host(driver_host: str, spark_conf: dict[str, str] | None) -> dict[str, str]:
    """``spark_conf`` with the driver bound to ``driver_host`` (an explicit setting wins)."""
    return {
        "spark.driver.host": driver_host,
        "spark.driver.bindAddress": driver_host,
        **(spark_conf or {}),
    }


class EngineClient:
    """A lazily started, idle-stopped, crash-restarted engine worker (Spark or DataFusion)."""

    def __init__(
        self,
        *,
        engine: str = "spark",
        address: str | None = None,
        master: str = "local[*]",
        spark_conf: dict[str, str] | None = None,
        idle_timeout: float = 300.0,
        start_timeout: float = 180.0,
        request_timeout: float = 3600.0,
        memory_limit: int | None = None,
        memory_poll: float = 0.2,
        cpu_limit: float | None = None,
        cpu_poll: float = 0.5,
        spawn: bool = True,
        isolate_network: bool = False,
        python: str = sys.executable,
        env: dict[str, str] | None = None,
        driver_host: str = "",
        protocol: str = "grpc",
    ) -> None:
        """``driver_host``: the address the Spark driver (the worker) binds and a cluster's
        executors connect back to ("" = 127.0.0.1, enough for ``local`` masters).
        ``protocol``: ``grpc`` (kamu's engine protocol) or ``frames`` (odf-node's own, for a
        DataFusion worker this client spawns on a Unix socket)."""
        _check_options(
            engine=engine,
            protocol=protocol,
            spawn=spawn,
            driver_host=driver_host,
            isolate_network=isolate_network,
        )
        self.driver_host = driver_host or "127.0.0.1"
        if driver_host:
            spark_conf = _with_driver_host(driver_host, spark_conf)
        self.engine = engine
        """The worker's engine: ``spark`` or ``datafusion`` (the release ``python`` imports)."""
        self._tmp = Path(tempfile.mkdtemp(prefix="odf-engine-"))
        self.address = address or f"unix:{self._tmp / 'engine.sock'}"
        self.protocol = protocol
        if protocol == "frames" and not self.address.startswith("unix:"):
            raise ValueError("the framed protocol runs over a unix: socket")
        self.master = master
        self.spark_conf = dict(spark_conf or {})
        self.idle_timeout = idle_timeout
        self.start_timeout = start_timeout
        self.request_timeout = request_timeout
        self.memory_limit = memory_limit
        """Bytes of resident memory the worker's process tree may use (None: unbounded).
        Enforced only for workers this client spawned."""
        self.memory_poll = memory_poll
        self.cpu_limit = cpu_limit
        """CPU seconds the worker's process tree may use per request (None: unbounded; a batch
        of n requests gets n times it). Enforced only for workers this client spawned."""
        self.cpu_poll = cpu_poll
        self.spawn = spawn
        self.isolate_network = isolate_network
        self.python = python
        self.env = dict(env or {})
        self.starts = 0
        """How many times a worker was started (tests and metrics)."""
        self.batches_submitted = 0
        """Batches given to :meth:`submit_transform_batch` (tests and metrics)."""
        self.crashes = CrashLog()
        """Failed starts and deaths of the worker that nobody asked for (not idle stops, not
        kills for a resource limit or a timeout)."""
        self._closed = False
        self._init_worker_state()

    def _init_worker_state(self) -> None:
        """No worker yet: no process, channel, connection, timers or batches in flight."""
        self._proc: subprocess.Popen[bytes] | None = None
        self._channel: Any = None
        self._transform_rpc: dict[str, Any] = {}
        self._rpc_channel: Any = None
        self._lock = threading.RLock()
        self._idle: threading.Timer | None = None
        self._lifeline: Lifeline | None = None
        # The framed protocol: the connection, its reader, the batches sent and not answered
        # (oldest first), when the oldest became the oldest, the memory watch while busy.
        self._conn: socket.socket | None = None
        self._inflight: deque[_Job] = deque()
        self._head_since = 0.0
        self._busy_watch: _ResourceWatch | None = None
        self._serial: ThreadPoolExecutor | None = None  # submitted gRPC batches

    # -- lifecycle ---------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether a worker process of ours is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The worker's pid, if running."""
        return self._proc.pid if self.running and self._proc is not None else None

    @property
    def ready(self) -> bool:
        """Whether a framed worker of ours is up and connected (a batch sent now does not wait
        for a start)."""
        return self._conn is not None and self.running

    @property
    def requests_in_flight(self) -> int:
        """Requests sent on the framed protocol and not answered yet."""
        return sum(len(job.requests) for job in list(self._inflight))

    def _command(self) -> list[str]:
        cmd = [self.python, "-m", "engine.worker", "--listen", self.address]
        if self.engine == "spark":
            cmd += ["--master", self.master]
            # The worker runs one tiny query before READY (engine/spark_engine.py
            # WARM_UP_CONF): its first request then costs ~1 s instead of ~4-10 s.
            conf = {WARM_UP_CONF: "true", **self.spark_conf}
            if self.master.strip().lower().startswith("local"):
                # A small local session: a C1-only JIT (see LOCAL_JAVA_OPTIONS); the
                # operator's options come after it and win (engine/spark_engine.py).
                key = "spark.driver.extraJavaOptions"
                conf[key] = f"{LOCAL_JAVA_OPTIONS} {conf.get(key, '')}".strip()
            for k, v in conf.items():
                cmd += ["--conf", f"{k}={v}"]
        else:
            cmd += ["--engine", self.engine]
            if self.protocol == "frames":
                cmd += ["--protocol", "frames"]
        if self.isolate_network:
            if not self.address.startswith("unix:"):
                raise EngineUnavailable("an isolated worker must listen on a unix: socket")
            prefix = ["unshare", "-rn", "sh", "-c", 'ip link set lo up 2>/dev/null; exec "$@"', "-"]
            cmd = prefix + cmd
        return cmd

    def start(self) -> None:
        """Start the worker (if not running) and wait until it serves."""
        import grpc

        with self._lock:
            if self._channel is not None and (not self.spawn or self.running):
                return
            if self._conn is not None and self.running:
                return
            self._teardown()
            if self.spawn:
                env = {**os.environ, **self.env, "SPARK_LOCAL_IP": self.driver_host}
                env["PYTHONPATH"] = os.pathsep.join(
                    [str(PROJECT_ROOT), *filter(None, [env.get("PYTHONPATH")])]
                )
                # The worker leads its own process group (its JVM joins it) and holds a
                # lifeline: it kills the group the instant this process dies, even mid-job or
                # while its Spark session is still being created (node/lifeline.py).
                self._lifeline = Lifeline()
                try:
                    self._proc = subprocess.Popen(  # type: ignore[call-overload]
                        self._command(),
                        stdout=subprocess.PIPE,
                        stderr=open(self._tmp / "worker.log", "ab"),  # noqa: SIM115
                        stdin=subprocess.DEVNULL,
                        cwd=str(PROJECT_ROOT),
                        start_new_session=True,
                        **self._lifeline.popen_kwargs(env),
                    )
                finally:
                    self._lifeline.spawned()
                self.starts += 1
                try:
                    self._wait_ready()
                except EngineUnavailable as e:
                    self.crashes.note(f"{self.engine} worker did not start: {_last_line(e)}")
                    raise
            if self.protocol == "frames":
                self._connect_frames()
                return
            import grpc.experimental

            self._channel = grpc.insecure_channel(
                self.address,
                options=[
                    ("grpc.max_receive_message_length", 64 << 20),
                    # A server-streaming call read on the caller's thread: without it every
                    # call starts a channel-spin thread (~1 ms a call on the 2-core machine).
                    (grpc.experimental.ChannelOptions.SingleThreadedUnaryStream, 1),
                ],
            )
            try:
                grpc.channel_ready_future(self._channel).result(timeout=self.start_timeout)
            except grpc.FutureTimeoutError:
                self._teardown()
                raise EngineUnavailable(f"engine at {self.address} is not reachable") from None

    def _wait_ready(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        deadline = time.monotonic() + self.start_timeout
        result: list[bytes] = []

        def read() -> None:
            assert self._proc is not None and self._proc.stdout is not None
            result.append(self._proc.stdout.readline())

        t = threading.Thread(target=read, daemon=True)
        t.start()
        t.join(max(0.0, deadline - time.monotonic()))
        if not result or not result[0].startswith(b"READY"):
            log = self.log_tail()
            self._teardown()
            raise EngineUnavailable(f"engine worker did not start:\n{log}")

    def worker_rss(self) -> int:
        """Resident bytes of the worker's process tree now (0 when not running)."""
        pid = self.pid
        return process_tree_rss(pid) if pid is not None else 0

    def _watch(self, requests: int = 1) -> _ResourceWatch | None:
        """A watch over the running worker for ``requests`` requests (None: nothing to watch)."""
        pid = self.pid
        if (self.memory_limit is None and self.cpu_limit is None) or pid is None:
            return None
        # CPU budgets are seconds to minutes: a coarser poll than memory's costs nothing.
        poll = self.memory_poll if self.memory_limit is not None else self.cpu_poll
        return _ResourceWatch(
            pid, self.memory_limit, poll, cpu_limit=self.cpu_limit, requests=requests
        )

    def log_tail(self, n: int = 4000) -> str:
        """The end of the worker's stderr log."""
        try:
            return (self._tmp / "worker.log").read_bytes()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def _teardown(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        conn, self._conn = self._conn, None
        if conn is not None:
            # Wakes the reader thread, which sees that its connection is no longer current.
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        proc, self._proc = self._proc, None
        lifeline, self._lifeline = self._lifeline, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if lifeline is not None:
            lifeline.cut()  # whatever survived the stop (the JVM) goes with it
        if proc is not None and proc.stdout is not None:
            proc.stdout.close()

    def warm(self) -> bool:
        """Start the worker now, ahead of a request expected soon, and arm its idle stop (a
        start that no request uses ends after ``idle_timeout``). Returns whether it runs; a
        failed start is only noted (:attr:`crashes`): the request tries again and reports it.
        Nothing after :meth:`close`."""
        if self.running and (self._channel is not None or self._conn is not None):
            return True
        with self._lock:
            if self._closed:
                return False
            try:
                self.start()
            except Exception:
                return False
            if not self._inflight:
                self._arm_idle()
            return True

    def stop(self) -> None:
        """Stop the worker (it is started again by the next request). Batches still in flight
        on the framed protocol are answered with an internal error."""
        with self._lock:
            if self._idle is not None:
                self._idle.cancel()
                self._idle = None
            self._teardown()
            jobs = list(self._inflight)
            self._inflight.clear()
            self._set_busy(False)
            for job in jobs:
                _clear_all(job.requests)
        for job in jobs:
            job.fail(TransformInternalError(message="engine stopped"))

    def close(self) -> None:
        """Stop the worker and remove the client's scratch directory."""
        self._closed = True  # a warm() still waiting for the lock starts nothing
        serial, self._serial = self._serial, None
        if serial is not None:
            serial.shutdown(wait=True)
        self.stop()
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> EngineClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _arm_idle(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
        if self.spawn and self.idle_timeout > 0:
            self._idle = threading.Timer(self.idle_timeout, self._on_idle)
            self._idle.daemon = True
            self._idle.start()

    def _on_idle(self) -> None:
        if self._lock.acquire(blocking=False):
            try:
                if self._inflight:
                    return  # busy again since the timer fired
                self._teardown()
            finally:
                self._lock.release()

    # -- requests ----------------------------------------------------------------------------------

    def _rpc(self, method: str) -> Any:
        """The channel's callable for ``method`` (made once per channel)."""
        assert self._channel is not None
        if self._rpc_channel is not self._channel:
            self._transform_rpc = {}
            self._rpc_channel = self._channel
        rpc = self._transform_rpc.get(method)
        if rpc is None:
            batch = method == "ExecuteTransformBatch"
            rpc = self._transform_rpc[method] = self._channel.unary_stream(
                f"/engine.Engine/{method}",
                request_serializer=wrap_protobuf_many if batch else wrap_protobuf,
                response_deserializer=unwrap_protobuf_many if batch else unwrap_protobuf,
            )
        return rpc

    def _call(self, payload: bytes) -> TransformResponse:
        import grpc

        rpc = self._rpc("ExecuteTransform")
        for message in rpc(payload, timeout=self.request_timeout):
            resp = decode_transform_response(message)
            if resp is not None:  # skip Progress, stop at the first final answer
                return resp
        raise grpc.RpcError("engine closed the stream without a response")

    def _call_batch(self, payloads: list[bytes]) -> list[TransformResponse]:
        import grpc

        rpc = self._rpc("ExecuteTransformBatch")
        for message in rpc(payloads, timeout=self.request_timeout * len(payloads)):
            out = [decode_transform_response(p) for p in message]
            if len(out) != len(payloads) or any(r is None for r in out):
                raise grpc.RpcError(
                    f"engine answered {len(out)} of {len(payloads)} batched requests"
                )
            return [r for r in out if r is not None]
        raise grpc.RpcError("engine closed the stream without a response")

    def _call_raw(self, req: RawQueryRequest) -> RawQueryResponse:
        import grpc

        assert self._channel is not None
        rpc = self._channel.unary_stream(
            "/engine.Engine/ExecuteRawQuery",
            request_serializer=wrap_protobuf,
            response_deserializer=unwrap_protobuf,
        )
        for payload in rpc(encode_raw_query_request(req), timeout=self.request_timeout):
            resp = decode_raw_query_response(payload)
            if resp is not None:
                return resp
        raise grpc.RpcError("engine closed the stream without a response")

    def execute_raw_query(self, request: RawQueryRequest) -> RawQueryResponse:
        """Run a raw query (ingest preprocessing); restart + one retry as for transforms."""
        result = self._attempts(
            lambda: _clear_path(request.output_data_path), lambda: self._call_raw(request), 1
        )
        return result if not isinstance(result, _Failed) else result.response

    def execute_transform(self, request: TransformRequest) -> TransformResponse:
        """Run one transform; restart the worker and retry once if it dies.

        Never raises for engine failures: they come back as ``TransformInternalError``.
        """
        if self.protocol == "frames":
            return self.submit_transform_batch([request]).result()[0]
        payload = encode_transform_request(request)  # before the lock: overlaps a running call
        result = self._attempts(lambda: _clear(request), lambda: self._call(payload), 1)
        return result if not isinstance(result, _Failed) else result.response

    def execute_transform_batch(
        self, requests: Sequence[TransformRequest]
    ) -> list[TransformResponse]:
        """Run ``requests`` in order in one round trip to a worker this client spawned.

        One answer per request, in order. A worker that dies mid-batch is restarted and the
        whole batch retried once (every request's partial output removed first); a failure of
        the batch call is every request's answer. A worker not spawned here (kamu's engine, or
        one started by hand) gets the requests one by one.
        """
        if self.protocol == "frames":
            return self.submit_transform_batch(requests).result()
        if not self.spawn or len(requests) <= 1:
            return [self.execute_transform(r) for r in requests]
        payloads = [encode_transform_request(r) for r in requests]

        def clear() -> None:
            for r in requests:
                _clear(r)

        result = self._attempts(clear, lambda: self._call_batch(payloads), len(payloads))
        return result if not isinstance(result, _Failed) else [result.response] * len(requests)

    def _attempts(
        self, clear: Callable[[], None], call: Callable[[], _R], requests: int
    ) -> _R | _Failed:
        """``call`` (of ``requests`` requests) on a started worker; on a crash: teardown,
        ``clear``, restart, retry once. Over the memory limit or the CPU budget: no retry."""
        import grpc

        with self._lock:
            if self._idle is not None:
                self._idle.cancel()
            try:
                last_error = ""
                for attempt in range(2):
                    clear()
                    watch: _ResourceWatch | None = None
                    started = False
                    try:
                        self.start()
                        started = True
                        watch = self._watch(requests)
                        with watch or _nothing():
                            resp = call()
                        if watch is None or not watch.exceeded:
                            return resp
                        raise EngineUnavailable("resource limit exceeded")
                    except (grpc.RpcError, EngineUnavailable) as e:
                        if watch is not None and watch.exceeded:
                            self._teardown()
                            clear()
                            return _Failed(watch.failure())
                        code = (
                            e.code()
                            if isinstance(e, grpc.RpcError) and hasattr(e, "code")
                            else None
                        )
                        last_error = f"{code}: {e}" if code else str(e)
                        deadline = code == grpc.StatusCode.DEADLINE_EXCEEDED
                        if started and not deadline:
                            self.crashes.note(f"{self.engine} worker died: {_last_line(e)}")
                        self._teardown()  # kill a hung or dead worker
                        clear()
                        if deadline or not self.spawn or attempt == 1:
                            break
                return _Failed(TransformInternalError(message=f"engine failed: {last_error}"))
            finally:
                self._arm_idle()

    # -- the framed protocol ----------------------------------------------------------------------

    def submit_transform_batch(
        self, requests: Sequence[TransformRequest]
    ) -> Future[list[TransformResponse]]:
        """Send ``requests`` as one batch now; the future gets one answer per request, in order.

        Never fails with an exception: engine failures are answers
        (``TransformInternalError``), as for :meth:`execute_transform`. On gRPC the batch runs
        on a background thread of this client (batches in submission order, one at a time).
        """
        if self.protocol != "frames":
            with self._lock:
                if self._serial is None:
                    self._serial = ThreadPoolExecutor(1, thread_name_prefix="odf-engine-call")
                serial = self._serial
            return serial.submit(self.execute_transform_batch, list(requests))
        self.batches_submitted += 1
        job = _Job(list(requests))
        if not job.requests:
            job.future.set_result([])
            return job.future
        with self._lock:
            if self._idle is not None:
                self._idle.cancel()
                self._idle = None
            _clear_all(job.requests)
            if not self._inflight:
                self._head_since = time.monotonic()
            self._inflight.append(job)
            try:
                if self._conn is None or not self.running:
                    self.start()  # connects and sends every batch in flight, this one included
                else:
                    self._send(job)
            except EngineUnavailable as e:
                self._inflight.remove(job)
                self._after_change()
                failure = TransformInternalError(message=f"engine failed: {e}")
            else:
                self._set_busy(True)
                return job.future
        job.fail(failure)
        return job.future

    def _send(self, job: _Job) -> None:
        """Write ``job``'s frame; a broken connection is left to the reader to notice."""
        assert self._conn is not None
        try:
            self._conn.sendall(job.frame)
        except OSError:
            pass

    def _connect_frames(self) -> None:
        """Connect to the worker's socket, start its reader, send the batches in flight."""
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self.address.removeprefix("unix:"))
        except OSError as e:
            conn.close()
            self._teardown()
            raise EngineUnavailable(f"engine at {self.address} is not reachable: {e}") from None
        self._conn = conn
        threading.Thread(
            target=self._read_answers, args=(conn,), name="engine-frames", daemon=True
        ).start()
        self._head_since = time.monotonic()
        for job in self._inflight:
            self._send(job)

    def _set_busy(self, busy: bool) -> None:
        """Run the resource watchdog exactly while batches are in flight (lock held); its CPU
        budget is the oldest batch's."""
        if busy and self._busy_watch is None:
            head = len(self._inflight[0].requests) if self._inflight else 1
            self._busy_watch = self._watch(head)
            if self._busy_watch is not None:
                self._busy_watch.__enter__()
        elif not busy and self._busy_watch is not None:
            watch, self._busy_watch = self._busy_watch, None
            watch.stop()  # no final sample: the work it watched is answered

    def _after_change(self) -> None:
        """Idle bookkeeping after the in-flight queue shrank (lock held)."""
        if not self._inflight:
            self._set_busy(False)
            self._arm_idle()
        else:
            self._head_since = time.monotonic()
            if self._busy_watch is not None:  # the CPU budget is the new oldest batch's
                self._busy_watch.rebase(len(self._inflight[0].requests))

    def _read_answers(self, conn: socket.socket) -> None:
        """The reader thread of one connection: completes futures in order; on a broken
        connection, a protocol error or a timeout, recovers (:meth:`_recover`)."""
        while True:
            with self._lock:
                if conn is not self._conn:
                    return
                head = self._inflight[0] if self._inflight else None
                wait = (
                    max(
                        0.0,
                        self._head_since
                        + self.request_timeout * len(head.requests)
                        - time.monotonic(),
                    )
                    if head is not None
                    else 1.0
                )
            try:
                ready, _, _ = select.select([conn], [], [], wait)
            except (OSError, ValueError):
                ready = [conn]  # closed under us: the read below says how
            if not ready:
                with self._lock:
                    if conn is not self._conn or not self._inflight:
                        continue
                    if time.monotonic() < self._head_since + self.request_timeout * len(
                        self._inflight[0].requests
                    ):
                        continue
                    done = self._recover("request timed out", deadline=True)
                _complete(done)
                return
            try:
                kind, parts = read_frame(conn)
                if kind != TRANSFORM_ANSWERS:
                    raise FrameError(
                        parts[0].decode("utf-8", "replace") if parts else f"frame kind {kind}"
                    )
                with self._lock:
                    if conn is not self._conn:
                        return
                    if not self._inflight:
                        raise FrameError("an answer nobody asked for")
                    answers = _decode_answers(parts, len(self._inflight[0].requests))
                    watch = self._busy_watch
                    if watch is not None:
                        if self.memory_limit is not None:
                            # Once more: memory taken since the last tick counts. Not for the
                            # CPU budget alone: a /proc walk costs ~3.5 ms, a small replay
                            # block ~25 ms, and a poll interval's CPU is noise in a budget.
                            watch.sample()
                        if watch.exceeded:
                            done = self._recover("resource limit exceeded", deadline=False)
                            break
                    job = self._inflight.popleft()
                    self._after_change()
                job.future.set_result(answers)
                continue
            except (ConnectionLost, FrameError, OSError) as e:
                with self._lock:
                    if conn is not self._conn:
                        return
                    done = self._recover(str(e), deadline=False)
                _complete(done)
                return
        _complete(done)  # the memory limit was exceeded (the loop's only break)

    def _recover(
        self, reason: str, *, deadline: bool
    ) -> list[tuple[_Job, list[TransformResponse]]]:
        """The worker died, broke the protocol or timed out (lock held): stop it, remove
        every batch's partial outputs, restart and send again the batches not retried yet.
        Returns the batches that end here, with their answers, for the caller to complete
        outside the lock."""
        watch = self._busy_watch
        exceeded = watch is not None and watch.exceeded
        if not exceeded and not deadline:
            self.crashes.note(f"{self.engine} worker died: {reason}")
        self._set_busy(False)
        self._teardown()
        ended: list[tuple[_Job, list[TransformResponse]]] = []
        for job in self._inflight:
            _clear_all(job.requests)
        if self._inflight and (exceeded or deadline):
            # The oldest batch was the one running: it is not retried (the same work would
            # exceed again), the others are.
            head = self._inflight.popleft()
            failure = (
                watch.failure()
                if exceeded and watch is not None
                else TransformInternalError(message=f"engine failed: {reason}")
            )
            ended.append((head, [failure] * len(head.requests)))
        retry: deque[_Job] = deque()
        for job in self._inflight:
            job.attempts += 1
            if job.attempts > 1:
                ended.append(
                    (
                        job,
                        [TransformInternalError(message=f"engine failed: {reason}")]
                        * len(job.requests),
                    )
                )
            else:
                retry.append(job)
        self._inflight = retry
        if retry:
            try:
                self.start()  # sends the retried batches
                self._set_busy(True)
            except EngineUnavailable as e:
                for job in retry:
                    ended.append(
                        (
                            job,
                            [TransformInternalError(message=f"engine failed: {e}")]
                            * len(job.requests),
                        )
                    )
                self._inflight.clear()
        self._after_change()
        return ended


def _last_line(error: BaseException) -> str:
    """The last non-empty line of an error's message (a worker's log tail ends with its cause)."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    return lines[-1].strip()[:300] if lines else type(error).__name__


class _Job:
    """One batch on the framed protocol: its requests, frame and future, tries so far."""

    __slots__ = ("attempts", "frame", "future", "requests")

    def __init__(self, requests: list[TransformRequest]) -> None:
        self.requests = requests
        self.frame = encode_frame(TRANSFORM_BATCH, [encode_request(r) for r in requests])
        self.future: Future[list[TransformResponse]] = Future()
        self.attempts = 0

    def fail(self, response: TransformResponse) -> None:
        """Answer every request with ``response``."""
        self.future.set_result([response] * len(self.requests))


def _complete(done: list[tuple[_Job, list[TransformResponse]]]) -> None:
    for job, answers in done:
        job.future.set_result(answers)


def _decode_answers(parts: list[bytes], n: int) -> list[TransformResponse]:
    """The answers of a ``TRANSFORM_ANSWERS`` frame for a batch of ``n`` requests."""
    if len(parts) != 2 * n:
        raise FrameError(f"engine answered {len(parts) // 2} of {n} batched requests")
    out: list[TransformResponse] = []
    for i in range(n):
        resp = decode_transform_response(parts[2 * i])
        if resp is None:
            raise FrameError("engine answered a batched request with Progress")
        form = parts[2 * i + 1]
        if form == ARROW_OUTPUT and isinstance(resp, TransformSuccess):
            resp = replace(resp, arrow_output=True)
        elif form:
            raise FrameError(f"engine answered with an unknown output form {form[:32]!r}")
        out.append(resp)
    return out


def _clear_all(requests: Sequence[TransformRequest]) -> None:
    for r in requests:
        _clear(r)


class _Failed:
    """A request (or batch) that ended without an engine answer: the response to give."""

    __slots__ = ("response",)

    def __init__(self, response: TransformInternalError) -> None:
        self.response = response


def _nothing() -> contextlib.nullcontext[None]:
    return contextlib.nullcontext()


def _clear_path(p: Path) -> None:
    if p.is_dir():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


def _clear(req: TransformRequest) -> None:
    remove_outputs(req.new_data_path, req.new_checkpoint_path)


__all__ = ["EngineClient", "EngineUnavailable", "process_tree_rss"]
