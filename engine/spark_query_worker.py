"""A Spark query worker: read-only Spark SQL over dataset tables, in the transforms' Spark sandbox.

``python -m engine.spark_query_worker [--master M] [--conf k=v ...]`` runs under the node's own
Python (the main environment has PySpark). It starts one SparkSession (``local[*]`` or the
configured standalone master, with the transforms' settings, :func:`engine.spark_engine.
create_spark_session`), runs a small query to warm the JVM, prints ``READY`` and then answers
requests on stdin one at a time, each in a fresh ``newSession()`` (its temp views die with it),
until stdin closes. Spark takes seconds to start, so the node starts this worker on the first
Spark query and keeps it; it kills it (the JVM too: the worker leads its own process group) when
a query passes its deadline or its memory bound, and starts another on the next query.

The protocol is the DataFusion query worker's (``engine/query_worker.py``). Request (one JSON
line)::

    {"sql": "...", "tables": [{"name": "covid19.canada", "files": ["/abs/part.parquet", ...]}],
     "max_rows": N, "max_bytes": N, "skip": 0, "limit": null, "out": "/private/dir/answer.arrow"}

Answer (one JSON line): ``{"ok": true, "rows": N}`` with the rows in ``out`` as an Arrow IPC
file, or ``{"ok": false, "kind": K, "message": M}`` with ``K`` one of ``rejected`` (the sandbox
refused the SQL), ``too_large`` (over ``max_rows``/``max_bytes``) or ``failed`` (the query does
not analyse or run).

Each table is a temp view over its parquet parts, read in place (``spark.read.parquet``). Table
names are quoted in Spark SQL with backticks (```covid19.canada```); double quotes work as
well (``"covid19.canada"``, as in DataFusion and kamu's examples): the sessions run with
``spark.sql.ansi.doubleQuotedIdentifiers``, so ``"..."`` is an identifier and string literals
take single quotes, as in standard SQL.

The sandbox is the transforms' (:func:`engine.sandbox.check_query`): a SELECT over the request's
views and nothing else (no commands, no ``parquet.`/path```, no table functions, no reflection,
UDFs or XML functions), decided on Spark's parsed and analysed plans before anything runs. As in
the DataFusion dialect, the random, current-time and session functions are refused too
(:func:`engine.sandbox.nondeterminism`): an answer must be reproducible by another node.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from engine.errors import SandboxViolation, WorkerRefusal
from engine.lifeline import watch_lifeline
from engine.query_lines import serve_lines
from engine.sandbox import check_query, nondeterminism

QUERY_SPARK_CONF: dict[str, str] = {
    # "covid19.canada" is an identifier, as in DataFusion and kamu's examples.
    "spark.sql.ansi.doubleQuotedIdentifiers": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
}
"""Settings of the query worker's session on top of the transforms' (``SPARK_DEFAULTS``)."""

_IRREPRODUCIBLE = ("random function", "current time function", "session-dependent function")
"""Reasons of :func:`engine.sandbox.nondeterminism` that refuse a query (its other reasons,
aggregations and joins, only make row order unspecified, which a query's ORDER BY settles)."""


_NOT_A_QUERY = ("cannot parse the query", "query does not analyse")
"""How :func:`engine.sandbox.check_query` words SQL that is wrong rather than refused."""


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:500] if text else type(e).__name__


def run(spark: Any, request: dict[str, Any]) -> int:
    """Answer ``request`` in a new session of ``spark``; the number of rows written.

    Raises:
        WorkerRefusal: the answer is a refusal or an error (see the module docstring).
    """
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    sql = str(request["sql"]).strip().rstrip(";")
    max_rows = int(request["max_rows"])
    max_bytes = int(request["max_bytes"])
    skip = int(request.get("skip") or 0)
    limit = request.get("limit")
    session = spark.newSession()
    # The parser reads its settings (double-quoted identifiers) from the JVM thread's active
    # session: the sandbox parses the query as it will run.
    session._jvm.org.apache.spark.sql.SparkSession.setActiveSession(session._jsparkSession)
    views: set[str] = set()
    try:
        for t in request["tables"]:
            files = [str(f) for f in t["files"]]
            if not files:
                continue  # a dataset with no data yet: its name stays unknown to the query
            name = str(t["name"])
            # Backticks keep a dotted alias or a DID one name (``createOrReplaceTempView``
            # parses its argument as a multi-part identifier).
            quoted = "`" + name.replace("`", "``") + "`"
            session.read.parquet(*files).createOrReplaceTempView(quoted)
            views.add(name)
        try:
            check_query(session, sql, views)
        except SandboxViolation as e:
            reason = e.reason.replace("is not an input of the transform", "is not a dataset table")
            # SQL that does not parse or analyse (an unknown column) is the user's mistake,
            # not a refusal: the DataFusion worker answers it as "failed" too.
            kind = "failed" if reason.startswith(_NOT_A_QUERY) else "rejected"
            raise WorkerRefusal(kind, reason) from None
        for reason in nondeterminism(session, sql):
            if reason in _IRREPRODUCIBLE:
                raise WorkerRefusal(
                    "rejected", f"{reason}s are not allowed: another node could not reproduce it"
                )
        try:
            frame = session.sql(sql)
            # One row more than allowed tells "exactly max_rows" from "more than max_rows".
            want = max_rows + 1 if limit is None else min(int(limit), max_rows + 1)
            if skip:
                frame = frame.offset(skip)
            frame = frame.limit(want)
            schema = to_arrow_schema(frame.schema)
            batches = frame._collect_as_arrow()
        except Exception as e:
            raise WorkerRefusal("failed", _first_line(e)) from None
        rows = int(sum(b.num_rows for b in batches))
        if rows > max_rows:
            raise WorkerRefusal(
                "too_large",
                f"the answer has more than {max_rows} rows ([query] max_rows): "
                "narrow the query or page with skip/limit",
            )
        if sum(b.nbytes for b in batches) > max_bytes:
            raise WorkerRefusal(
                "too_large",
                f"the answer is over {max_bytes} bytes ([query] max_bytes): "
                "select fewer columns or page with skip/limit",
            )
        with pa.ipc.new_file(str(request["out"]), schema) as writer:
            for b in batches:
                writer.write_batch(b.cast(schema) if b.schema != schema else b)
        return rows
    finally:
        for name in views:
            try:
                session.catalog.dropTempView(name)
            except Exception:
                pass


def _warm_up(spark: Any) -> None:
    """One small query the way requests run, before ``READY``: the first query of a JVM pays
    for class loading, the parquet reader, the sandbox's plan walker and codegen (seconds on a
    loaded machine, which would otherwise count against a user's deadline)."""
    import tempfile

    import pyarrow as pa
    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory(prefix="odf-spark-warm-") as tmp:
        part = os.path.join(tmp, "part.parquet")
        pq.write_table(pa.table({"offset": pa.array([0, 1], pa.int64()), "v": ["a", "b"]}), part)
        run(
            spark,
            {
                "sql": 'select v, count(*) as n from "warm.up" where offset >= 0 group by v',
                "tables": [{"name": "warm.up", "files": [part]}],
                "max_rows": 10,
                "max_bytes": 1 << 20,
                "out": os.path.join(tmp, "answer.arrow"),
            },
        )


def main(argv: list[str] | None = None) -> int:
    """Start Spark, then serve requests from stdin until it closes (see the module docstring)."""
    watch_lifeline()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--master", default="local[*]", help="spark.master (sc:// is refused)")
    p.add_argument("--conf", action="append", default=[], help="extra Spark setting key=value")
    args = p.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from engine.spark_engine import CONNECT_REFUSAL, create_spark_session, is_connect_master

    if is_connect_master(args.master):
        print(f"odf spark query worker: {CONNECT_REFUSAL}", file=sys.stderr, flush=True)
        return 2
    extra = {**QUERY_SPARK_CONF, **dict(kv.split("=", 1) for kv in args.conf)}
    spark = create_spark_session(args.master, extra)
    _warm_up(spark)
    print("READY", flush=True)
    serve_lines(lambda request: run(spark, request))
    try:
        spark.stop()
    finally:
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["QUERY_SPARK_CONF", "main", "run"]
