"""Several engine workers behind one ``TransformEngine``: Spark, and DataFusion per release.

A request goes to the worker of its transform's engine (``Transform.Sql.engine``). DataFusion
requests also pick a release: the one ``Transform.Sql.version`` names (the replay sets it to
each candidate in turn, see :mod:`coordinator.transform.verify`), else the newest pinned one
(an owner's ``dataset transform``). Each worker is an :class:`~node.engine_client.EngineClient`
started lazily and stopped when idle; a DataFusion worker runs on the Python of its own
virtual environment (``<engines dir>/datafusion-<version>/bin/python``, created by
``make setup``; ``ODF_ENGINES_DIR`` overrides the directory). A release whose environment is
missing is simply not available.

The router starts its DataFusion workers on odf-node's framed protocol
(:mod:`coordinator.transform.frames`) rather than gRPC, and offers
:meth:`EngineRouter.submit_transform_batch` so that a replay keeps several batches in flight;
the Spark worker (and any kamu engine) keeps kamu's gRPC protocol.

**Several workers per release for long replays.** A DataFusion worker runs one request at a
time on one core (``target_partitions = 1``, as kamu, for its row order), and a replay's node
side waits for it most of the time. So a release may have up to ``datafusion_workers`` workers
(default: two on a machine with two cores or more): single requests (an owner's transform, a
replay's retry on another release) go to the first; a submitted batch goes to the ready worker
with the fewest requests in flight. Another worker is started, in the background, only when
every ready one already has :data:`GROW_AT_REQUESTS` requests in flight (a replay with that
much work queued; a start costs ~0.6 s, about 120 small blocks): a short replay never starts
one. Each worker has its own idle timeout and memory limit.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path

from coordinator.transform.engines import (
    DATAFUSION,
    DATAFUSION_VERSIONS,
    SPARK,
    SPARK_VERSION,
    datafusion_core,
    normalize_engine,
)
from coordinator.transform.model import (
    RawQueryRequest,
    RawQueryResponse,
    TransformInternalError,
    TransformRequest,
    TransformResponse,
)
from node.engine_client import PROJECT_ROOT, EngineClient

ENGINES_DIR_ENV = "ODF_ENGINES_DIR"
GROW_AT_REQUESTS = 8
"""Requests in flight on every ready DataFusion worker of a release before another is started
(see the module docstring)."""


def engines_dir() -> Path:
    """Where the per-release virtual environments live."""
    raw = os.environ.get(ENGINES_DIR_ENV)
    return Path(raw) if raw else PROJECT_ROOT / ".venv" / "engines"


def datafusion_python(version: str, root: Path | None = None) -> Path:
    """The Python of the DataFusion ``version`` environment."""
    return (root or engines_dir()) / f"datafusion-{version}" / "bin" / "python"


class EngineRouter:
    """Dispatches requests by engine name and version; see the module docstring."""

    def __init__(
        self,
        spark: Callable[[], EngineClient],
        *,
        root: Path | None = None,
        idle_timeout: float = 300.0,
        isolate_network: bool = False,
        memory_limit: int | None = None,
        cpu_limit: float | None = None,
        versions: tuple[str, ...] = DATAFUSION_VERSIONS,
        datafusion_workers: int | None = None,
    ) -> None:
        """``versions``: the pinned DataFusion releases to use (those installed).
        ``datafusion_workers``: the most workers per release (``None``: two if the machine
        has two cores or more, else one). ``memory_limit``, ``cpu_limit``: the per-request
        bounds of every DataFusion worker (see :class:`~node.engine_client.EngineClient`)."""
        self._make_spark = spark
        self._spark: EngineClient | None = None
        self._root = root or engines_dir()
        self._idle = idle_timeout
        self._isolate = isolate_network
        self._memory = memory_limit
        self._cpu = cpu_limit
        self._versions = tuple(v for v in versions if datafusion_python(v, self._root).is_file())
        self._datafusion: dict[str, list[EngineClient]] = {}
        self._datafusion_raw: dict[str, EngineClient] = {}  # gRPC workers for raw queries
        self._pool_size = max(
            1, datafusion_workers if datafusion_workers is not None else min(2, os.cpu_count() or 1)
        )
        self._lock = threading.Lock()
        self._warming: set[EngineClient] = set()  # being started in the background
        self._prestarting: set[EngineClient] = set()  # see prestart()
        self._closed = False

    # -- capabilities -----------------------------------------------------------------------

    def pinned_versions(self, engine: str) -> tuple[str, ...]:
        """The versions of ``engine`` this node can run now (newest first; empty: none).

        Asked only on the way to a replay: the verify pipeline asks it of a derivative's
        engine at its first attempt (``node/app/verify.py`` ``_missing_engine``), before it
        waits for the inputs to be pulled; the replay plan asks it again. So it also starts
        that engine's worker in the background (:meth:`prestart`): the start (a JVM and a
        warm-up query for Spark, seconds) overlaps with the pull of the inputs instead of
        following it.
        """
        name = normalize_engine(engine)
        if name == SPARK:
            self.prestart(SPARK)
            return (SPARK_VERSION,)
        if name == DATAFUSION:
            if self._versions:
                self.prestart(DATAFUSION)
            return self._versions
        return ()

    def prestart(self, engine: str, version: str | None = None) -> bool:
        """Start the worker of ``engine`` (the DataFusion ``version``, else the newest) in the
        background, ahead of a request expected soon; the worker stops when idle as after a
        request. Returns whether a start was begun (not if it runs, is being started, the
        engine is not available here or the router is closed)."""
        name = normalize_engine(engine)
        if self._closed:
            return False
        if name == SPARK:
            client = self.spark()
        elif name == DATAFUSION and self._versions:
            v = datafusion_core(version) if version else self._versions[0]
            client = self.datafusion(v if v in self._versions else self._versions[0])
        else:
            return False
        with self._lock:
            if client.running or client in self._prestarting:
                return False
            self._prestarting.add(client)
        threading.Thread(
            target=self._prestart, args=(client,), name="odf-engine-prestart", daemon=True
        ).start()
        return True

    def _prestart(self, client: EngineClient) -> None:
        try:
            if not self._closed:
                client.warm()
        finally:
            with self._lock:
                self._prestarting.discard(client)

    # -- workers ----------------------------------------------------------------------------

    def spark(self) -> EngineClient:
        """The Spark worker's client (created on first use)."""
        with self._lock:
            if self._spark is None:
                self._spark = self._make_spark()
            return self._spark

    def datafusion(self, version: str) -> EngineClient:
        """The client of the first DataFusion ``version`` worker (created on first use)."""
        with self._lock:
            pool = self._datafusion.get(version)
            if not pool:
                pool = self._datafusion[version] = [self._new_datafusion(version)]
            return pool[0]

    def datafusion_pool(self, version: str) -> list[EngineClient]:
        """The clients of every DataFusion ``version`` worker (tests, benchmarks)."""
        self.datafusion(version)
        with self._lock:
            return list(self._datafusion[version])

    def _new_datafusion(self, version: str, protocol: str = "frames") -> EngineClient:
        """A DataFusion ``version`` worker's client: framed for transform batches, ``grpc`` for
        raw queries (see :meth:`execute_raw_query`)."""
        return EngineClient(
            engine=DATAFUSION,
            python=str(datafusion_python(version, self._root)),
            idle_timeout=self._idle,
            isolate_network=self._isolate,
            memory_limit=self._memory,
            cpu_limit=self._cpu,
            start_timeout=60.0,
            protocol=protocol,
        )

    def _for_batch(self, version: str) -> EngineClient:
        """The DataFusion ``version`` worker a submitted batch goes to (see the module
        docstring); may start another one in the background."""
        first = self.datafusion(version)
        if self._pool_size == 1:
            return first
        with self._lock:
            pool = self._datafusion[version]
            ready = [c for c in pool if c.ready]
            if not ready:
                return first  # it starts on this batch, as a single worker would
            target = min(ready, key=lambda c: c.requests_in_flight)
            if target.requests_in_flight >= GROW_AT_REQUESTS and not self._warming:
                # A worker of the pool that stopped (idle, or the router stopped) starts again;
                # else a new one, up to the pool size.
                extra = next((c for c in pool if not c.ready), None)
                if extra is None and len(pool) < self._pool_size:
                    extra = self._new_datafusion(version)
                    pool.append(extra)
                if extra is not None:
                    self._warming.add(extra)
                    threading.Thread(
                        target=self._warm,
                        args=(version, extra),
                        name="odf-engine-warm",
                        daemon=True,
                    ).start()
            return target

    def _warm(self, version: str, client: EngineClient) -> None:
        """Start ``client``; one that cannot start leaves the pool."""
        try:
            client.start()
        except Exception:
            with self._lock:
                pool = self._datafusion.get(version, [])
                if client in pool[1:]:  # the first stays: single requests go to it
                    pool.remove(client)
            client.close()
        finally:
            with self._lock:
                self._warming.discard(client)

    def _clients(self) -> list[EngineClient]:
        with self._lock:
            pools = [c for pool in self._datafusion.values() for c in pool]
            pools += self._datafusion_raw.values()
            return [c for c in (self._spark, *pools) if c is not None]

    @property
    def running(self) -> bool:
        """Whether any worker process is up."""
        return any(c.running for c in self._clients())

    @property
    def starts(self) -> int:
        """How many times workers were started, all engines together."""
        return sum(c.starts for c in self._clients())

    def crash_reasons(self, window_s: float) -> list[str]:
        """Why workers failed to start or died on their own in the last ``window_s`` seconds
        (every engine and release together, oldest first per worker)."""
        return [r for c in self._clients() for r in c.crashes.recent(window_s)]

    def stop(self) -> None:
        """Stop every worker (they start again on demand)."""
        for c in self._clients():
            c.stop()

    def close(self) -> None:
        """Stop every worker and remove their scratch directories."""
        self._closed = True
        for c in self._clients():
            c.close()

    # -- requests ---------------------------------------------------------------------------

    def _target(self, request: TransformRequest | RawQueryRequest) -> str | TransformInternalError:
        """``spark``, the DataFusion release ``request`` runs on, or why there is none."""
        name = normalize_engine(request.transform.engine)
        if name == SPARK:
            return SPARK
        if name == DATAFUSION:
            if not self._versions:
                return TransformInternalError(
                    message="no DataFusion engine environment is installed (run make setup)"
                )
            wanted = datafusion_core(request.transform.version)
            return wanted if wanted in self._versions else self._versions[0]
        return TransformInternalError(
            message=f"engine {request.transform.engine!r} is not available"
        )

    def _client_for(self, request: TransformRequest) -> EngineClient | TransformInternalError:
        """The worker ``request`` goes to alone, or why there is none."""
        target = self._target(request)
        if isinstance(target, TransformInternalError):
            return target
        return self.spark() if target == SPARK else self.datafusion(target)

    def execute_transform(self, request: TransformRequest) -> TransformResponse:
        """Run ``request`` on the worker of its engine (and DataFusion release)."""
        client = self._client_for(request)
        if isinstance(client, TransformInternalError):
            return client
        return client.execute_transform(request)

    def execute_transform_batch(
        self, requests: Sequence[TransformRequest]
    ) -> list[TransformResponse]:
        """Run ``requests`` in order; consecutive requests for one worker go as one batch."""
        out: list[TransformResponse] = []
        i = 0
        while i < len(requests):
            client = self._client_for(requests[i])
            if isinstance(client, TransformInternalError):
                out.append(client)
                i += 1
                continue
            j = i + 1
            while j < len(requests) and self._client_for(requests[j]) is client:
                j += 1
            out.extend(client.execute_transform_batch(requests[i:j]))
            i = j
        return out

    def submit_transform_batch(
        self, requests: Sequence[TransformRequest]
    ) -> Future[list[TransformResponse]]:
        """Send ``requests`` now, without waiting; the future gets their answers in order.

        Consecutive requests for one worker go as one batch. A DataFusion worker gets them on
        the framed protocol at once (several batches may be in flight); a gRPC worker (Spark)
        gets them from a background thread of its client, in submission order.
        """
        parts: list[Future[list[TransformResponse]]] = []
        i = 0
        while i < len(requests):
            target = self._target(requests[i])
            if isinstance(target, TransformInternalError):
                parts.append(_done([target]))
                i += 1
                continue
            j = i + 1
            while j < len(requests) and self._target(requests[j]) == target:
                j += 1
            client = self.spark() if target == SPARK else self._for_batch(target)
            parts.append(client.submit_transform_batch(requests[i:j]))
            i = j
        return _gather(parts)

    def execute_raw_query(self, request: RawQueryRequest) -> RawQueryResponse:
        """A raw query (ingest preprocessing) on the engine its transform names.

        DataFusion raw queries go to a worker of their own that speaks gRPC (the framed
        protocol carries transform batches only); it starts on the first preprocess and stops
        when idle, like the others.
        """
        target = self._target(request)
        if isinstance(target, TransformInternalError):
            return target
        if target == SPARK:
            return self.spark().execute_raw_query(request)
        with self._lock:
            client = self._datafusion_raw.get(target)
            if client is None:
                client = self._datafusion_raw[target] = self._new_datafusion(target, "grpc")
        return client.execute_raw_query(request)


def _done(answers: list[TransformResponse]) -> Future[list[TransformResponse]]:
    f: Future[list[TransformResponse]] = Future()
    f.set_result(answers)
    return f


def _gather(parts: list[Future[list[TransformResponse]]]) -> Future[list[TransformResponse]]:
    """One future for the concatenated answers of ``parts`` (in order)."""
    if len(parts) == 1:
        return parts[0]
    out: Future[list[TransformResponse]] = Future()
    lock = threading.Lock()
    remaining = [len(parts)]

    def one_done(_: Future[list[TransformResponse]]) -> None:
        with lock:
            remaining[0] -= 1
            last = remaining[0] == 0
        if not last:
            return
        failed = next((p.exception() for p in parts if p.exception() is not None), None)
        if failed is not None:
            out.set_exception(failed)
        else:
            out.set_result([a for p in parts for a in p.result()])

    if not parts:
        out.set_result([])
    for p in parts:
        p.add_done_callback(one_done)
    return out


__all__ = ["ENGINES_DIR_ENV", "EngineRouter", "datafusion_python", "engines_dir"]
