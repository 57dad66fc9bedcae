"""The query engine adapter: read-only SQL over dataset tables in sandboxed DataFusion workers.

:class:`DataFusionQueryEngine` implements :class:`~node.app.ports.QueryEnginePort`. Each query
runs in a worker process of its own (``engine/query_worker.py``, under the DataFusion release's
Python): the transform sandbox, DataFusion's memory pool of ``[query] memory_bytes``, at most
``max_rows`` rows and ``max_bytes`` bytes in the answer. The adapter keeps ``[query]
warm_workers`` workers started in advance (a DataFusion import takes ~0.3 s, far more than a
small query), so a query never waits for a process to start. A worker serves one query at a
time, so the adapter can kill it when the query passes its deadline or its resident memory
passes the bound (``memory_bytes`` and some slack for the interpreter) without harming any other
query; a worker that answered goes back to the idle ones (up to ``warm_workers``, and at most
:data:`QUERIES_PER_WORKER` queries), so its warm caches serve the next query.

Nothing here blocks the event loop: workers are asyncio subprocesses; an answer of up to
:data:`INLINE_READ_BYTES` comes inline after the worker's answer line (an Arrow IPC stream on its
stdout), a larger one as an Arrow IPC file in a private temporary directory, read in a thread.

:class:`InMemoryQueryEngine` is the in-memory twin for unit tests of the use cases.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import tempfile
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from node.adapters.query_answers import (
    TableStream,
    read_answer,
    read_answer_part,
    watch_memory,
)
from node.adapters.query_workers import QueryWorker, answer_line, raise_refusal, start_worker
from node.app.errors import (
    QueryDeadlineExceeded,
    QueryError,
    QueryRejected,
    QueryTooLarge,
    Unavailable,
)
from node.app.ports import (
    AnswerStream,
    QueryDialect,
    QueryEnginePort,
    QueryLimits,
    QueryTable,
)
from node.engine_client import process_rss, process_tree_rss, walk_tree
from node.engine_router import datafusion_python

if TYPE_CHECKING:
    import pyarrow as pa

QUERY_DATAFUSION_VERSION = "51.0.0"
"""The DataFusion release queries run on (the newest pinned one: ``make setup`` builds it)."""
MEMORY_SLACK_BYTES = 512 * 1024 * 1024
"""Resident memory a worker may use beyond its DataFusion pool (the interpreter, DataFusion's
own structures, batches being written) before it is killed."""
MEMORY_POLL_S = 0.05
INLINE_READ_BYTES = 1 << 20
"""Answers up to this size come inline on the worker's stdout and are read on the event loop;
larger ones are files, read in a thread."""
SHM_MIN_FREE_BYTES = 1 << 30
"""Workers' directories go to ``/dev/shm`` only when it has this much room (see ``_work_root``)."""
QUERIES_PER_WORKER = 200
"""A worker is replaced after this many queries (whatever its allocator kept is given back)."""


# A DataFusion import takes ~0.3 s; a loaded machine may take far longer.
_START_TIMEOUT_S = 60.0


class DataFusionQueryEngine:
    """Sandboxed DataFusion query workers (see the module docstring).

    ``max_sql_bytes`` (``[query] max_sql_bytes``), when given, refuses a longer text before a
    worker is asked; ``spark`` answers the ``spark`` dialect; ``stream_part_bytes`` is the size
    of a streamed answer's parts (default: the worker's, 8 MiB).
    """

    def __init__(
        self,
        *,
        warm_workers: int = 1,
        isolate_network: bool = False,
        python: Path | None = None,
        spark: QueryEnginePort | None = None,
        max_sql_bytes: int | None = None,
        stream_part_bytes: int | None = None,
    ) -> None:
        self._max_sql_bytes = max_sql_bytes
        self._part_bytes = stream_part_bytes
        self._warm = max(0, warm_workers)
        self._isolate = isolate_network
        self._python = python or datafusion_python(QUERY_DATAFUSION_VERSION)
        self._spark = spark
        self._idle: list[QueryWorker] = []
        self._starting: set[asyncio.Task[None]] = set()
        self._reaping: set[asyncio.Task[int]] = set()
        self._closed = False
        self.started = 0
        """Workers started (tests)."""

    # -- workers -------------------------------------------------------------------------

    async def _spawn(self) -> QueryWorker:
        if not self._python.exists():
            raise Unavailable(
                f"the query engine's DataFusion environment is missing ({self._python}); "
                "run `make setup`"
            )
        work = Path(tempfile.mkdtemp(prefix="odf-query-", dir=_work_root()))
        worker = await start_worker(
            [str(self._python), "-m", "engine.query_worker"],
            work,
            isolate=self._isolate,
            start_timeout_s=_START_TIMEOUT_S,
            what="the query worker",
        )
        self.started += 1
        return worker

    def _refill(self) -> None:
        if self._closed:
            return
        while len(self._idle) + len(self._starting) < self._warm:
            task = asyncio.get_running_loop().create_task(self._prestart())
            self._starting.add(task)
            task.add_done_callback(self._starting.discard)

    async def _prestart(self) -> None:
        try:
            worker = await self._spawn()
        except Exception:
            return
        if self._closed:
            worker.discard()
        else:
            self._idle.append(worker)

    async def _take(self) -> QueryWorker:
        while self._idle:
            worker = self._idle.pop()
            if worker.proc.returncode is None:
                return worker
            worker.discard()
        return await self._spawn()

    def _reap(self, worker: QueryWorker) -> None:
        """Wait for a killed worker on this loop (:meth:`close` waits for the last ones)."""
        task = asyncio.get_running_loop().create_task(worker.proc.wait())
        self._reaping.add(task)
        task.add_done_callback(self._reaping.discard)

    # -- the port ------------------------------------------------------------------------

    async def query(
        self,
        sql: str,
        tables: Sequence[QueryTable],
        limits: QueryLimits,
        dialect: QueryDialect = "datafusion",
        *,
        skip: int = 0,
        limit: int | None = None,
    ) -> pa.Table:
        """See :class:`~node.app.ports.QueryEnginePort`."""
        if dialect == "spark":
            return await self._spark_engine().query(
                sql, tables, limits, dialect, skip=skip, limit=limit
            )
        self._check(sql)
        if limit is not None and limit > limits.max_rows:
            raise QueryTooLarge(
                f"limit {limit} is over [query] max_rows ({limits.max_rows}): page with skip"
            )
        worker = await self._take()
        # The worker makes this directory only if it writes the answer there (not inline).
        here = worker.dir / f"q{worker.served}"
        try:
            out = here / "answer.arrow"
            await self._send(worker, here, sql, tables, limits, skip, limit, stream=False)
            deadline = asyncio.get_running_loop().time() + limits.deadline_s
            watch = self._watch(worker, limits)
            try:
                answer = await answer_line(worker, limits, deadline, watch)
                size = answer.get("inline")
                if isinstance(size, int):
                    return read_inline(await _inline_bytes(worker, size, deadline, limits))
            finally:
                watch.cancel()
            raise_refusal(answer, limits)
            if out.stat().st_size <= INLINE_READ_BYTES:
                # A small answer (an aggregation's) reads in microseconds: a thread hand-over
                # would cost more than the read (milliseconds when the machine is loaded).
                return read_answer(out)
            return await asyncio.to_thread(read_answer, out)
        finally:
            shutil.rmtree(here, ignore_errors=True)
            await self._release(worker)

    async def query_stream(
        self,
        sql: str,
        tables: Sequence[QueryTable],
        limits: QueryLimits,
        dialect: QueryDialect = "datafusion",
    ) -> AnswerStream:
        """See :class:`~node.app.ports.QueryEnginePort`: the worker writes the answer in parts
        (``engine/query_worker.py``), given on as they come."""
        if dialect == "spark":
            # The Spark worker answers whole: its answer is given on as one stream.
            return TableStream(await self._spark_engine().query(sql, tables, limits, dialect))
        self._check(sql)
        worker = await self._take()
        here = worker.dir / f"q{worker.served}"  # made by the worker with the first part
        stream = _WorkerStream(self, worker, here, limits)
        try:
            await self._send(worker, here, sql, tables, limits, 0, None, stream=True)
            stream.started()
            await stream.first_part()
        except BaseException:
            await stream.close()
            raise
        return stream

    def _spark_engine(self) -> QueryEnginePort:
        if self._spark is None:
            raise QueryRejected(
                "the spark dialect is not available on this node (no Spark query engine "
                "is configured): use the datafusion dialect"
            )
        return self._spark

    def _check(self, sql: str) -> None:
        if self._closed:
            raise Unavailable("the query engine is stopped")
        if self._max_sql_bytes is not None:
            # Before anything parses it, also when a caller forgot the use case's own check.
            _check_size(sql, self._max_sql_bytes)

    async def _send(
        self,
        worker: QueryWorker,
        here: Path,
        sql: str,
        tables: Sequence[QueryTable],
        limits: QueryLimits,
        skip: int,
        limit: int | None,
        *,
        stream: bool,
    ) -> None:
        # Until the answer is read, the worker is not reusable (a cancelled or failed exchange
        # leaves it mid-request).
        worker.healthy = False
        request = {
            "sql": sql,
            "tables": [{"name": t.name, "files": list(t.files)} for t in tables],
            "memory_bytes": limits.memory_bytes,
            "max_rows": limits.max_rows,
            "max_bytes": limits.max_bytes,
            "skip": skip,
            "limit": limit,
            "max_sql_bytes": self._max_sql_bytes,
            "out": str(here / "answer.arrow"),
            # Made by the worker when it registers tables there (no kept session).
            "scratch": str(here / "tables"),
            # The worker keeps a session per set of tables here (its own directory, removed
            # with it): a dashboard's next query on the same heads skips their registration.
            "tables_dir": str(worker.dir / "tables"),
            "stream": stream,
            "part_bytes": self._part_bytes,
            "inline_bytes": 0 if stream else INLINE_READ_BYTES,
        }
        proc = worker.proc
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(request).encode() + b"\n")
        await proc.stdin.drain()

    @staticmethod
    def _watch(worker: QueryWorker, limits: QueryLimits) -> asyncio.Task[None]:
        bound = limits.memory_bytes + MEMORY_SLACK_BYTES
        return asyncio.get_running_loop().create_task(
            watch_memory(worker.proc.pid, bound, MEMORY_POLL_S, tree_rss=worker_tree_rss)
        )

    async def _release(self, worker: QueryWorker) -> None:
        """Give a worker back after a query: to the idle ones if it answered and may serve
        more, else killed; a replacement starts once this query is answered."""
        worker.served += 1
        if (
            worker.healthy
            and not self._closed
            and worker.served < QUERIES_PER_WORKER
            and len(self._idle) < self._warm
        ):
            self._idle.append(worker)
        else:
            worker.discard()
            if self._warm:
                self._reap(worker)
            else:
                # No warm workers (a CLI command, a script): the loop may end right after
                # this answer, so the killed worker is reaped before it is given.
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(worker.proc.wait(), 5.0)
        # After the answer: a DataFusion import takes both cores for ~0.3 s, which would
        # otherwise be taken from the query.
        self._refill()

    async def close(self) -> None:
        """Stop the idle workers (a running query's worker is killed when it returns)."""
        self._closed = True
        for task in list(self._starting):
            task.cancel()
        if self._starting:
            await asyncio.gather(*self._starting, return_exceptions=True)
        idle, self._idle = self._idle, []
        for worker in idle:
            worker.discard()
        # Reap them on this loop: a subprocess transport left to the garbage collector after
        # its loop closed complains ("Event loop is closed").
        for worker in idle:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(worker.proc.wait(), 5.0)
        if self._reaping:
            await asyncio.wait(set(self._reaping), timeout=5.0)
        if self._spark is not None:
            await self._spark.close()


class _WorkerStream:
    """A streamed answer read part by part from its worker (see ``engine/query_worker.py``).

    A task reads the worker's lines as they come, whoever consumes the answer and however
    slowly: ``[query] deadline_s`` and ``memory_bytes`` bound the query's computation, and a
    query that finished is not killed because its client reads slowly.
    """

    def __init__(
        self, engine: DataFusionQueryEngine, worker: QueryWorker, here: Path, limits: QueryLimits
    ) -> None:
        self._engine = engine
        self._worker = worker
        self._here = here
        self._limits = limits
        self._lines: asyncio.Queue[dict[str, object] | BaseException] = asyncio.Queue()
        self._pending: deque[pa.RecordBatch] = deque()
        self._schema: pa.Schema | None = None
        self._done = False
        self._closed = False
        self._pump: asyncio.Task[None] | None = None

    def started(self) -> None:
        """The request was sent: the worker's lines are read from now on."""
        self._pump = asyncio.get_running_loop().create_task(self._read_lines())

    async def _read_lines(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._limits.deadline_s
        watch = DataFusionQueryEngine._watch(self._worker, self._limits)
        try:
            while True:
                try:
                    message = await answer_line(self._worker, self._limits, deadline, watch)
                except Exception as e:  # the worker was killed or ended: the consumer learns it
                    self._lines.put_nowait(e)
                    return
                self._lines.put_nowait(message)
                if "part" not in message:
                    return
        finally:
            watch.cancel()

    async def first_part(self) -> None:
        """Wait until the schema is known (the first part, or a refusal)."""
        while self._schema is None:
            await self._advance()

    @property
    def schema(self) -> pa.Schema:
        """See :class:`~node.app.ports.AnswerStream`."""
        assert self._schema is not None, "first_part() was not awaited"
        return self._schema

    async def _advance(self) -> None:
        item = await self._lines.get()
        if isinstance(item, BaseException):
            self._done = True
            raise item
        if "part" in item:
            path = self._here / f"answer.arrow.{item['part']}"
            table = read_answer_part(path)
            path.unlink()
            if self._schema is None:
                self._schema = table.schema
            self._pending.extend(table.to_batches())
            return
        self._done = True
        raise_refusal(item, self._limits)

    async def next_batch(self) -> pa.RecordBatch | None:
        """See :class:`~node.app.ports.AnswerStream`."""
        while not self._pending:
            if self._done or self._closed:
                return None
            await self._advance()
        return self._pending.popleft()

    async def close(self) -> None:
        """See :class:`~node.app.ports.AnswerStream`."""
        if self._closed:
            return
        self._closed = True
        self._pending.clear()
        if self._pump is not None and not self._pump.done():
            # Still computing: the worker is mid-request, so it is killed, not reused.
            self._pump.cancel()
            self._worker.healthy = False
            self._worker.kill()
        shutil.rmtree(self._here, ignore_errors=True)
        await self._engine._release(self._worker)


async def _inline_bytes(
    worker: QueryWorker, size: int, deadline: float, limits: QueryLimits
) -> bytes:
    """The ``size`` bytes of an inline answer that follow the worker's answer line
    (``engine/query_lines.py``), within the query's deadline."""
    proc = worker.proc
    assert proc.stdout is not None
    worker.healthy = False  # mid-answer until its last byte is read
    try:
        async with asyncio.timeout_at(deadline):
            data = await proc.stdout.readexactly(size)
    except TimeoutError:
        worker.kill()
        raise QueryDeadlineExceeded(
            f"the query ran longer than {limits.deadline_s:g} s ([query] deadline_s) "
            "and was stopped"
        ) from None
    except asyncio.IncompleteReadError:
        raise QueryError(
            f"the query worker ended before its answer was read: {worker.log_tail(300)}"
        ) from None
    worker.healthy = True
    return data


def read_inline(data: bytes) -> pa.Table:
    """An inline answer (an Arrow IPC stream) as a table, its buffers views of ``data``."""
    import pyarrow as pa

    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


_CHILDREN_FILES = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")
"""Whether this kernel lists a thread's children in ``/proc`` (``CONFIG_PROC_CHILDREN``)."""


def worker_tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and its descendants (0 if it is gone), as
    :func:`node.engine_client.process_tree_rss` counts them, found through each thread's
    ``children`` file in ``/proc`` instead of reading every process's ``stat``: a worker's
    memory is polled every :data:`MEMORY_POLL_S` on the event loop while it runs a query, and on
    the development machine (~100 processes) the whole scan took 0.7-1 ms a poll, this 0.02 ms.
    A kernel without those files gets the whole scan."""
    if not _CHILDREN_FILES:
        return process_tree_rss(pid)
    return sum(process_rss(p) for p in walk_tree(pid, _thread_children))


def _thread_children(pid: int) -> list[int]:
    """The children of ``pid``'s threads, from each thread's ``children`` file in ``/proc``
    (those read before the process or one of its threads ended meanwhile)."""
    found: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children", "rb") as f:
                found.extend(int(c) for c in f.read().split())
    except (OSError, ValueError):
        pass
    return found


def _work_root() -> str | None:
    """Where workers' private directories go: ``/dev/shm`` when writable with at least
    :data:`SHM_MIN_FREE_BYTES` free, else the default temporary directory.

    A query on tables without a kept session makes directories (its tables' symbolic links),
    and an answer over :data:`INLINE_READ_BYTES` is written there and removed: on the
    development machine's ext4 ``/tmp`` that churn took ~6 ms a query, on tmpfs 0.03 ms. An
    answer (within ``[query] max_bytes``) stays there only until the node reads it, into memory
    anyway.
    """
    shm = Path("/dev/shm")
    try:
        st = os.statvfs(shm)
    except OSError:
        return None
    # A container's /dev/shm is often small (Docker's default: 64 MiB, [query] max_bytes'
    # default too): an answer must never fail for want of room there.
    if st.f_bavail * st.f_frsize < SHM_MIN_FREE_BYTES or not os.access(shm, os.W_OK | os.X_OK):
        return None
    return str(shm)


def _check_size(sql: str, max_sql_bytes: int) -> None:
    """``engine.query_sandbox.check_size`` on the node's side (the node never imports the
    engine package: pyproject.toml's import contracts); the worker checks again."""
    # Characters never outnumber bytes: a text with more characters than the bound is refused
    # without encoding it.
    size = len(sql) if len(sql) > max_sql_bytes else len(sql.encode("utf-8", "surrogatepass"))
    if size > max_sql_bytes:
        raise QueryRejected(
            f"the query is over {max_sql_bytes} bytes ([query] max_sql_bytes): send a shorter query"
        )


@dataclass
class InMemoryQueryEngine:
    """The in-memory twin of :class:`DataFusionQueryEngine` for unit tests of use cases.

    ``answer`` computes the result from the SQL and the tables (default: every row of the one
    table named in the SQL, read with pyarrow); ``calls`` records each query.
    """

    answer: Callable[[str, Sequence[QueryTable]], pa.Table] | None = None
    calls: list[tuple[str, tuple[QueryTable, ...], QueryDialect]] = field(default_factory=list)
    closed: bool = False

    async def query(
        self,
        sql: str,
        tables: Sequence[QueryTable],
        limits: QueryLimits,
        dialect: QueryDialect = "datafusion",
        *,
        skip: int = 0,
        limit: int | None = None,
    ) -> pa.Table:
        """See :class:`~node.app.ports.QueryEnginePort`."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.calls.append((sql, tuple(tables), dialect))
        if self.answer is not None:
            table = self.answer(sql, tables)
        else:
            named = [t for t in tables if f'"{t.name}"' in sql or t.name in sql.split()]
            if not named:
                raise QueryError(f"no known table in {sql!r}")
            parts = [pq.read_table(f) for f in named[0].files]
            table = pa.concat_tables(parts) if parts else pa.table({})
        table = table.slice(skip, limit if limit is not None else None)
        if table.num_rows > limits.max_rows:
            raise QueryTooLarge(f"more than {limits.max_rows} rows ([query] max_rows)")
        return table

    async def query_stream(
        self,
        sql: str,
        tables: Sequence[QueryTable],
        limits: QueryLimits,
        dialect: QueryDialect = "datafusion",
    ) -> AnswerStream:
        """:meth:`query`'s answer as a stream."""
        return TableStream(await self.query(sql, tables, limits, dialect))

    async def close(self) -> None:
        """Nothing to stop."""
        self.closed = True


__all__ = [
    "QUERY_DATAFUSION_VERSION",
    "DataFusionQueryEngine",
    "InMemoryQueryEngine",
]
