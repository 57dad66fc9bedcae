"""The ODF transform on Spark, record-for-record what kamu-engine-spark 0.23.1 does.

See ``docs/spark-engine.md`` (what kamu-engine-spark's ``Transform.scala`` does). In short:

* inputs: the listed parquet files, rows with offset in ``[start, end]`` (none without an
  interval), ``coalesce(1)`` then sorted by offset, registered as `` `queryAlias` `` (the
  reference also caches them; see :data:`CACHE_INPUTS` for why this engine does not);
* each query step becomes a temp view (``__output__`` for the step without alias), after the
  sandbox (:mod:`engine.sandbox`) accepted it;
* checks: no offset/system_time in the output, event time TIMESTAMP or DATE, ``op`` INT;
* ``op`` passes through (literal 0 when dropped); ``offset`` = ``row_number() over (order by
  monotonically_increasing_id()) + (nextOffset - 1)`` as **bigint**; ``system_time`` the
  request's time; columns ``offset, op, system_time, <query columns>``;
* one snappy parquet file at ``newDataPath`` (nothing for empty output);
* watermark per input = max explicit watermark, else the one in the previous checkpoint; the
  output watermark is the minimum; the checkpoint is a tar of ``<did multibase>.watermark``.

One warm root ``SparkSession`` per process; each request runs in ``newSession()``.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
import traceback
from pathlib import Path
from typing import Any

from coordinator.errors import OdfNodeError
from coordinator.metadata import model as m
from coordinator.metadata.timestamp import Timestamp
from coordinator.transform import model as tm
from engine.errors import InvalidQuery, SandboxViolation
from engine.sandbox import VerdictCache, nondeterminism

XML_JAVA_OPTIONS = (
    "-Djavax.xml.accessExternalDTD= "
    "-Djavax.xml.accessExternalSchema= "
    "-Djavax.xml.accessExternalStylesheet= "
    "-Djdk.xml.entityExpansionLimit=2000 "
    "-Djdk.xml.totalEntitySizeLimit=1000000"
)
"""JVM system properties of the engine's driver and executors: the JDK's XML parsers (the
``DocumentBuilderFactory`` behind Spark's ``xpath_*`` functions) may open no external DTD,
schema or stylesheet, over any protocol (``file:``, ``http:``, ``jar:``…), and expand few
entities. The sandbox refuses the XML functions; this holds should one get past it. Measured
with JDK 17 and Spark 3.5: without ``accessExternalDTD=`` (empty: no protocol allowed) a
``<!DOCTYPE a SYSTEM "file:///…">`` or ``"http://…"`` is read and its entities returned;
with it the parse fails before the file is opened or the connection made. External general and
parameter entities are already off in Spark's own parser (``UDFXPathUtil``); the entity limits
bound an internal "billion laughs" expansion."""
_JAVA_OPTION_KEYS = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")

SPARK_DEFAULTS: dict[str, str] = {
    # kamu-engine-spark image/spark-defaults.conf
    "spark.sql.ansi.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MILLIS",
    "spark.sql.legacy.timeParserPolicy": "EXCEPTION",
    "spark.serializer": "org.apache.spark.serializer.KryoSerializer",
    # sandbox and loopback-only operation
    "spark.sql.runSQLOnFiles": "false",
    # `${env:HOME}`, `${system:user.name}`, `${spark.app.id}` in a query's text would be replaced
    # by the verifier's values before the sandbox parses it
    "spark.sql.variable.substitute": "false",
    "spark.driver.extraJavaOptions": XML_JAVA_OPTIONS,
    "spark.executor.extraJavaOptions": XML_JAVA_OPTIONS,
    "spark.ui.enabled": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
}
CACHE_INPUTS = False
"""Cache each input view, as the reference does (``df.cache()``). Off: the output is the same
without it, since each input is read from immutable files, filtered and sorted by offset into
one partition, so a recomputation yields the same rows in the same order (the benchmark checks
every replayed block's logical hash). An input is used once per request in a map/filter, so
the cache is built for a single scan: building the in-memory columnar copy, unpersisting it
afterwards and a plan that cannot prune columns or push filters into the parquet scan cost
~0.05-0.1 s per 1,000-row block. Interleaved A/B on one 30-block history, in-process engine,
5 rounds at load 1.7-3.0: median 0.509 s/block cached vs 0.416 uncached (direct SQL 0.400);
faster uncached in all 5 rounds."""
WARM_UP_CONF = "spark.odf.warmUp"
"""A Spark setting of odf-node's own: ``true`` makes :class:`SparkEngine` run one tiny query
before serving (:meth:`SparkEngine.warm_up`). The node's engine worker gets it (see
``node/engine_client.py``): a first transform on a fresh JVM otherwise pays for loading the
parquet, SQL and codegen classes and for the JIT (measured: worker start 2.8 s, first tiny
transform 4.2 s, the next 0.4-0.6 s); paid while the worker starts, that cost overlaps the
pull of the inputs when the worker is started ahead of its first request."""
SESSION_SQL_CONF = (
    "spark.sql.ansi.enabled",
    "spark.sql.session.timeZone",
    "spark.sql.parquet.outputTimestampType",
    "spark.sql.legacy.timeParserPolicy",
    "spark.sql.runSQLOnFiles",
    "spark.sql.variable.substitute",
)


CONNECT_REFUSAL = (
    "Spark Connect (sc://) is refused: the SQL sandbox decides on Spark's parsed and analysed "
    "plans, which it reads from the driver JVM through py4j, and a Connect client has no JVM. "
    "Over Connect, spark.sql(text) is executed by the server, commands included (SET, ADD "
    "JAR, CREATE VIEW …), before any client-side check could see a plan, and explain() gives "
    "only text. Untrusted SQL therefore never goes to a Connect server; use a local or "
    "cluster master (local[N], spark://…, k8s://…), where the driver runs in the worker."
)


class SandboxUnavailable(OdfNodeError):
    """The session gives the SQL sandbox no access to Spark's plans (Spark Connect)."""


def is_connect_master(master: str) -> bool:
    """Whether ``master`` names a Spark Connect server (``sc://host:port``)."""
    return master.strip().lower().startswith("sc://")


def create_spark_session(master: str = "local[*]", extra: dict[str, str] | None = None) -> Any:
    """Start (or get) the process's root SparkSession with the reference defaults.

    With ``sc://…`` the session is a Spark Connect client session
    (``SparkSession.builder.remote(url)``; it needs pyspark's ``connect`` extras: pandas,
    grpcio-status, googleapis-common-protos). Only the per-session SQL settings are sent:
    the others (serializer, UI, driver address) are the server's own and cannot be set by a
    client. :class:`SparkEngine` refuses such a session (see :data:`CONNECT_REFUSAL`).
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("odf-engine-spark")
    if is_connect_master(master):
        builder = builder.remote(master)
        for k in SESSION_SQL_CONF:
            builder = builder.config(k, SPARK_DEFAULTS[k])
        for k, v in (extra or {}).items():
            builder = builder.config(k, v)
        return builder.getOrCreate()
    builder = builder.master(master)
    extra = extra or {}
    conf = {**SPARK_DEFAULTS, **extra}
    for k in _JAVA_OPTION_KEYS:
        if extra.get(k):
            # The operator's options come after ours (a later -D wins: their choice).
            conf[k] = f"{XML_JAVA_OPTIONS} {extra[k]}"
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _ts(t: Timestamp) -> Any:
    return t.to_datetime()


def _instant(t: Timestamp) -> str:
    """``java.time.Instant.toString`` form (what the Scala engine writes)."""
    return t.to_rfc3339()


def read_checkpoint(path: Path | None) -> dict[str, Timestamp]:
    """Per-input watermarks from a kamu Spark checkpoint tar (``<id>.watermark`` files)."""
    if path is None or not path.is_file():
        return {}
    out: dict[str, Timestamp] = {}
    with tarfile.open(path) as tar:
        for member in tar.getmembers():
            name = Path(member.name).name
            if member.isfile() and name.endswith(".watermark"):
                f = tar.extractfile(member)
                if f is not None:
                    out[name.removesuffix(".watermark")] = Timestamp.parse(
                        f.read().decode().strip()
                    )
    return out


def write_checkpoint(path: Path, watermarks: dict[str, Timestamp]) -> None:
    """A deterministic tar of ``<id multibase>.watermark`` files (mtime 0, sorted)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for key in sorted(watermarks):
            data = _instant(watermarks[key]).encode()
            info = tarfile.TarInfo(f"{key}.watermark")
            info.size = len(data)
            info.mtime = 0
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buf.getvalue())


def _schema_key(df: Any) -> str:
    """The DataFrame's schema as Spark's JSON (two py4j calls; part of sandbox cache keys)."""
    return str(df._jdf.schema().json())


class SparkEngine:
    """Executes :class:`TransformRequest` values in one warm SparkSession."""

    def __init__(self, spark: Any) -> None:
        """Wrap a classic (py4j) SparkSession.

        Raises:
            SandboxUnavailable: ``spark`` is a Spark Connect session.
        """
        if getattr(spark, "_jsparkSession", None) is None:
            raise SandboxUnavailable(CONNECT_REFUSAL)
        self.spark = spark
        self.sandbox = VerdictCache()
        """Accepted sandbox verdicts (see :class:`engine.sandbox.VerdictCache`)."""
        if str(spark.sparkContext.getConf().get(WARM_UP_CONF, "false")).lower() == "true":
            self.warm_up()

    def warm_up(self) -> bool:
        """Run one tiny query as a transform does (parquet in, sandboxed SQL steps, the offset
        window, one parquet file out) so that a fresh JVM's first request finds its classes
        loaded and compiled. Never raises: a failed warm-up costs only its time (``False``)."""
        import pyarrow as pa
        import pyarrow.parquet as pq
        from pyspark.sql import functions as F  # noqa: N812
        from pyspark.sql.window import Window

        tmp = Path(tempfile.mkdtemp(prefix="odf-warm-up-"))
        try:
            table = pa.table(
                {
                    "offset": pa.array([0, 1, 2], pa.int64()),
                    "op": pa.array([0, 0, 0], pa.int32()),
                    "event_time": pa.array([0, 1000, 2000], pa.timestamp("ms", tz="UTC")),
                    "city": ["a", "b", "c"],
                    "population": pa.array([10, 200, 3000], pa.int64()),
                }
            )
            pq.write_table(table, tmp / "in.parquet")
            steps = (
                m.SqlQueryStep(alias="big", query="SELECT * FROM input WHERE population > 100"),
                m.SqlQueryStep(query="SELECT op, event_time, city, population * 2 AS p FROM big"),
            )
            session = self._session()
            views: set[str] = set()
            try:
                df = session.read.parquet(str(tmp / "in.parquet")).coalesce(1).orderBy("offset")
                df.createOrReplaceTempView("input")
                views.add("input")
                transform = m.TransformSql(engine="spark", queries=steps)
                self._run_steps(session, transform, views, (("input", _schema_key(df)),))
                out = session.sql("SELECT * FROM __output__").withColumn(
                    "offset",
                    F.row_number().over(Window.orderBy(F.monotonically_increasing_id())),
                )
                return self._write(out, tmp / "out.parquet") == 2
            finally:
                self._cleanup(session, [], views)
        except Exception:
            return False
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def nondeterminism(self, transform: m.TransformSql) -> tuple[str, ...]:
        """Why ``transform`` may not replay deterministically (from Spark's parsed plans)."""
        reasons: list[str] = []
        for step in transform.queries or ():
            for r in nondeterminism(self.spark, step.query):
                if r not in reasons:
                    reasons.append(r)
        return tuple(reasons)

    def execute_transform(self, req: tm.TransformRequest) -> tm.TransformResponse:
        """Run the request; never raises for query or engine failures (they are responses)."""
        session = self._session()
        cached: list[Any] = []
        views: set[str] = set()
        try:
            return self._execute(session, req, cached, views)
        except Exception as e:
            return _failure(e)
        finally:
            self._cleanup(session, cached, views)

    def execute_raw_query(self, req: tm.RawQueryRequest) -> tm.RawQueryResponse:
        """Run a raw query over ``input`` (the given parquet files); one parquet file out."""
        session = self._session()
        views: set[str] = set()
        try:
            if not req.transform.queries:
                raise InvalidQuery("the transform has no queries")
            if not req.input_data_paths:
                raise InvalidQuery("no input data")
            df = session.read.parquet(*[str(p) for p in req.input_data_paths])
            df.createOrReplaceTempView("input")
            views.add("input")
            self._run_steps(session, req.transform, views, (("input", _schema_key(df)),))
            count = self._write(session.sql("SELECT * FROM __output__"), req.output_data_path)
            return tm.RawQuerySuccess(num_records=count)
        except Exception as e:
            return _failure(e)
        finally:
            self._cleanup(session, [], views)

    def _session(self) -> Any:
        session = self.spark.newSession()
        for key in SESSION_SQL_CONF:
            session.conf.set(key, SPARK_DEFAULTS[key])
        return session

    @staticmethod
    def _cleanup(session: Any, cached: list[Any], views: set[str] | None = None) -> None:
        """Unpersist cached inputs (the cache manager is shared) and drop the request's views.

        Views are dropped by name: ``catalog.listTables()`` costs ~0.2 s per call.
        """
        for df in cached:
            try:
                df.unpersist()
            except Exception:
                pass
        for name in views or ():
            try:
                session.catalog.dropTempView(name)
            except Exception:
                pass

    def _execute(
        self, spark: Any, req: tm.TransformRequest, cached: list[Any], views: set[str]
    ) -> tm.TransformResponse:
        from pyspark.sql import functions as F  # noqa: N812
        from pyspark.sql.window import Window

        if not isinstance(req.transform, m.TransformSql) or not req.transform.queries:
            raise InvalidQuery("the transform has no queries")
        if req.transform.engine.lower() != "spark":
            raise InvalidQuery(f"engine {req.transform.engine!r} is not supported, only spark")
        schemas: list[tuple[str, str]] = []
        for inp in req.query_inputs:
            paths = [str(p) for p in inp.data_paths]
            if not paths and inp.schema_file is not None:
                paths = [str(inp.schema_file)]
            if not paths:
                raise InvalidQuery(f"input {inp.query_alias!r} has no data and no schema")
            df = spark.read.parquet(*paths)
            off = F.col(f"`{inp.vocab.offset_column}`")
            if inp.offset_interval is not None:
                df = df.filter(
                    (off >= inp.offset_interval.start) & (off <= inp.offset_interval.end)
                )
            else:
                df = df.filter(F.lit(False))
            df = df.coalesce(1).orderBy(off)
            if CACHE_INPUTS:
                df = df.cache()
                cached.append(df)
            df.createOrReplaceTempView(f"`{inp.query_alias}`")
            views.add(inp.query_alias)
            schemas.append((inp.query_alias, _schema_key(df)))

        self._run_steps(spark, req.transform, views, tuple(schemas))
        result = spark.sql("SELECT * FROM __output__")

        vocab = req.vocab
        cols = result.columns
        for sys_col in (vocab.offset_column, vocab.system_time_column):
            if sys_col in cols:
                raise InvalidQuery(
                    f"transformed data contains a column that conflicts with the system column "
                    f"name: {sys_col}"
                )
        types = dict(result.dtypes)
        if vocab.event_time_column not in cols:
            raise InvalidQuery(f"event time column {vocab.event_time_column!r} was not found")
        if types[vocab.event_time_column] not in ("timestamp", "date"):
            raise InvalidQuery(
                f"event time column {vocab.event_time_column!r} must be TIMESTAMP or DATE, "
                f"found {types[vocab.event_time_column]}"
            )
        op = vocab.operation_type_column
        if op in cols:
            if types[op] != "int":
                raise InvalidQuery(f"operation type column {op!r} must be INT, found {types[op]}")
        else:
            result = result.withColumn(op, F.lit(0).cast("int"))
        result = result.withColumn(
            vocab.offset_column,
            F.row_number().over(Window.orderBy(F.monotonically_increasing_id())).cast("bigint")
            + F.lit(req.next_offset - 1).cast("bigint"),
        ).withColumn(vocab.system_time_column, F.lit(_ts(req.system_time)).cast("timestamp"))
        data_cols = [c for c in cols if c != op]
        ordered = [vocab.offset_column, op, vocab.system_time_column, *data_cols]
        result = result.select(*[F.col(f"`{c}`") for c in ordered])

        # Watermarks and checkpoint.
        prev = read_checkpoint(req.prev_checkpoint_path)
        marks: dict[str, Timestamp] = {}
        for inp in req.query_inputs:
            key = inp.dataset_id.as_multibase()
            if inp.explicit_watermarks:
                marks[key] = max(w.event_time for w in inp.explicit_watermarks)
            elif key in prev:
                marks[key] = prev[key]
            else:
                # The reference engine's map lookup throws here: an internal error.
                raise RuntimeError(f"input {inp.query_alias!r} has no watermark")
        new_wm = min(marks.values())

        # Output.
        count = self._write(result, req.new_data_path)
        write_checkpoint(req.new_checkpoint_path, marks)
        interval = (
            m.OffsetInterval(start=req.next_offset, end=req.next_offset + count - 1)
            if count
            else None
        )
        return tm.TransformSuccess(new_offset_interval=interval, new_watermark=new_wm)

    def _run_steps(
        self,
        spark: Any,
        transform: m.TransformSql,
        views: set[str],
        schemas: tuple[tuple[str, str], ...],
    ) -> None:
        """Check each step in the sandbox, then register it as a view (``__output__`` last).

        The sandbox verdict of a step depends only on its text and on the schemas of the views
        it can see: the input views' schemas plus the preceding steps (whose schemas follow
        from the same inputs), so those form the verdict cache's context.
        """
        before: list[tuple[str | None, str]] = []
        for step in transform.queries or ():
            self.sandbox.check(spark, step.query, views, (schemas, tuple(before)))
            name = step.alias if step.alias is not None else "__output__"
            spark.sql(step.query).createOrReplaceTempView(f"`{name}`")
            views.add(name)
            before.append((step.alias, step.query))

    @staticmethod
    def _write(df: Any, target: Path) -> int:
        import pyarrow.parquet as pq

        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=target.parent))
        try:
            out = tmp / "out"
            df.write.parquet(str(out))
            files = sorted(out.glob("*.snappy.parquet"))
            if len(files) != 1:
                raise RuntimeError(f"expected exactly one output part, got {len(files)}")
            rows = pq.ParquetFile(files[0]).metadata.num_rows
            if rows:
                os.replace(files[0], target)
            return int(rows)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def _failure(e: Exception) -> tm.TransformInvalidQuery | tm.TransformInternalError:
    """A failed transform or raw query as its response (call it in the ``except`` block: the
    backtrace is the one being handled): our own refusals and Spark's analysis and parse errors
    are invalid queries (their first line), anything else an internal error."""
    if isinstance(e, InvalidQuery | SandboxViolation):
        return tm.TransformInvalidQuery(message=str(e))
    kind = type(e).__name__
    first = str(e).splitlines()[0] if str(e) else ""
    if kind in ("AnalysisException", "ParseException"):
        return tm.TransformInvalidQuery(message=first)
    return tm.TransformInternalError(message=f"{kind}: {first}", backtrace=traceback.format_exc())


__all__ = [
    "CONNECT_REFUSAL",
    "SESSION_SQL_CONF",
    "SPARK_DEFAULTS",
    "WARM_UP_CONF",
    "XML_JAVA_OPTIONS",
    "SandboxUnavailable",
    "SparkEngine",
    "create_spark_session",
    "is_connect_master",
    "read_checkpoint",
    "write_checkpoint",
]
