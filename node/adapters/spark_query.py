"""The "spark" query dialect: read-only Spark SQL over dataset tables in the node's Spark worker.

:class:`SparkQueryEngine` implements :class:`~node.app.ports.QueryEnginePort` for ``dialect=
"spark"`` (``queryDialect: SqlSpark`` on the HTTP data API, ``odf-node sql --engine spark``);
the DataFusion engine (:class:`~node.adapters.query_engine.DataFusionQueryEngine`) hands it
those queries as its ``spark`` delegate. Queries run in one worker process,
``python -m engine.spark_query_worker`` under the node's own Python (which has PySpark): a
SparkSession on ``local[*]`` or the standalone master of ``[engine] spark_master``, with the
transforms' settings and Spark sandbox (``engine/sandbox.py``), its JVM heap bounded by
``[query] memory_bytes``.

Spark takes seconds to start (~10 s on a small machine), so the worker starts on the first
Spark query, not with the node, and stays for the next ones; queries take turns on it (one at a
time: a Spark query uses every core already). The worker leads its own process group, so the
adapter can kill it, JVM included, when a query passes ``[query] deadline_s`` (waiting for
another query counts, Spark's start does not) or its resident memory passes the bound; the
next query starts a new one. With ``isolate_network`` (and a local master) the worker runs in
a network namespace of its own (``unshare -rn``), as the transform workers do.

Nothing here blocks the event loop: the worker is an asyncio subprocess and the answer (an
Arrow IPC file in a private temporary directory) is read in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from node.adapters.query_answers import TableStream, read_answer, watch_memory
from node.adapters.query_workers import QueryWorker, answer_line, raise_refusal, start_worker
from node.app.errors import (
    QueryDeadlineExceeded,
    QueryTooLarge,
    Unavailable,
)
from node.app.ports import AnswerStream, QueryDialect, QueryLimits, QueryTable

if TYPE_CHECKING:
    import pyarrow as pa

START_TIMEOUT_S = 180.0
"""How long the worker may take to start Spark and print ``READY``."""
JVM_SLACK_BYTES = 1024 * 1024 * 1024
"""Resident memory the worker may use beyond its JVM heap (``[query] memory_bytes``): the JVM's
own structures, code cache and threads, and the Python side, before it is killed."""
MIN_HEAP_MIB = 512
"""The JVM heap is never set below this: Spark does not start in much less."""
MEMORY_POLL_S = 0.1


class SparkQueryEngine:
    """Spark SQL queries in a lazily started, sandboxed Spark worker (see the module docstring)."""

    def __init__(
        self,
        *,
        master: str = "local[*]",
        spark_conf: Mapping[str, str] | None = None,
        isolate_network: bool = False,
        driver_host: str = "",
        python: str | None = None,
    ) -> None:
        """``master``: the ``[engine] spark_master``; ``driver_host``: where a cluster's
        executors reach the driver (as for the transform worker; "" = loopback)."""
        self._master = master
        conf = dict(spark_conf or {})
        if driver_host:
            conf = {
                "spark.driver.host": driver_host,
                "spark.driver.bindAddress": driver_host,
                **conf,
            }
        self._conf = conf
        # A cluster's executors must reach the driver: no namespace then.
        self._isolate = isolate_network and master.startswith("local") and not driver_host
        self._python = python or sys.executable
        self._worker: QueryWorker | None = None
        self._lock = asyncio.Lock()
        self._closed = False
        self.started = 0
        """Workers started (tests)."""

    # -- the worker ------------------------------------------------------------------------

    async def _spawn(self, limits: QueryLimits) -> QueryWorker:
        work = Path(tempfile.mkdtemp(prefix="odf-spark-query-"))
        heap = max(MIN_HEAP_MIB, limits.memory_bytes >> 20)
        cmd = [self._python, "-m", "engine.spark_query_worker", "--master", self._master]
        for k, v in {"spark.driver.memory": f"{heap}m", **self._conf}.items():
            cmd += ["--conf", f"{k}={v}"]
        env = dict(os.environ)
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        worker = await start_worker(
            cmd,
            work,
            isolate=self._isolate,
            start_timeout_s=START_TIMEOUT_S,
            what="the Spark query worker",
            env=env,
        )
        self.started += 1
        return worker

    # -- the port --------------------------------------------------------------------------

    async def query(
        self,
        sql: str,
        tables: Sequence[QueryTable],
        limits: QueryLimits,
        dialect: QueryDialect = "spark",
        *,
        skip: int = 0,
        limit: int | None = None,
    ) -> pa.Table:
        """See :class:`~node.app.ports.QueryEnginePort` (any ``dialect`` given runs on Spark).

        The deadline counts from the call (waiting for another query is part of it), except
        that a query that had to start Spark gets its whole deadline once Spark is up.
        """
        if self._closed:
            raise Unavailable("the Spark query engine is stopped")
        if limit is not None and limit > limits.max_rows:
            raise QueryTooLarge(
                f"limit {limit} is over [query] max_rows ({limits.max_rows}): page with skip"
            )
        deadline = time.monotonic() + limits.deadline_s
        try:
            async with asyncio.timeout(limits.deadline_s):
                await self._lock.acquire()
        except TimeoutError:
            raise QueryDeadlineExceeded(
                f"the query waited longer than {limits.deadline_s:g} s ([query] deadline_s) "
                "for the Spark worker"
            ) from None
        try:
            if self._worker is None or self._worker.proc.returncode is not None:
                if self._worker is not None:
                    self._worker.discard()
                    self._worker = None
                self._worker = await self._spawn(limits)
                # Spark's start (seconds, bounded by START_TIMEOUT_S) is the node's cost, not
                # the query's: the query still gets its whole deadline.
                deadline = time.monotonic() + limits.deadline_s
            return await self._ask(
                self._worker, sql, tables, limits, skip, limit, deadline - time.monotonic()
            )
        finally:
            self._lock.release()

    async def _ask(
        self,
        worker: QueryWorker,
        sql: str,
        tables: Sequence[QueryTable],
        limits: QueryLimits,
        skip: int,
        limit: int | None,
        remaining: float,
    ) -> pa.Table:
        here = worker.dir / f"q{worker.served}"
        worker.served += 1
        here.mkdir()
        out = here / "answer.arrow"
        request = {
            "sql": sql,
            "tables": [{"name": t.name, "files": list(t.files)} for t in tables],
            "max_rows": limits.max_rows,
            "max_bytes": limits.max_bytes,
            "skip": skip,
            "limit": limit,
            "out": str(out),
        }
        proc = worker.proc
        assert proc.stdin is not None
        loop = asyncio.get_running_loop()
        answered = False
        try:
            proc.stdin.write(json.dumps(request).encode() + b"\n")
            await proc.stdin.drain()
            bound = max(MIN_HEAP_MIB << 20, limits.memory_bytes) + JVM_SLACK_BYTES
            watch = loop.create_task(watch_memory(proc.pid, bound, MEMORY_POLL_S, in_thread=True))
            try:
                answer = await answer_line(
                    worker, limits, loop.time() + remaining, watch, what="the Spark query"
                )
            finally:
                watch.cancel()
            answered = True
            raise_refusal(answer, limits)
            return await asyncio.to_thread(read_answer, out)
        finally:
            if not answered:
                # Killed mid-query (deadline, memory, cancellation): the next query starts
                # another worker.
                worker.discard()
                if self._worker is worker:
                    self._worker = None
            shutil.rmtree(here, ignore_errors=True)

    async def query_stream(
        self,
        sql: str,
        tables: Sequence[QueryTable],
        limits: QueryLimits,
        dialect: QueryDialect = "spark",
    ) -> AnswerStream:
        """:meth:`query`'s answer given on as a stream (the Spark worker answers whole)."""
        return TableStream(await self.query(sql, tables, limits, dialect))

    async def close(self) -> None:
        """Stop the worker (a running query is killed)."""
        self._closed = True
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.discard()
            # Reap it on this loop: its pipes' transports belong to it.
            with contextlib.suppress(TimeoutError, ProcessLookupError):
                await asyncio.wait_for(worker.proc.wait(), 10.0)


__all__ = ["JVM_SLACK_BYTES", "SparkQueryEngine"]
