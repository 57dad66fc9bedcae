"""The Python API and the "spark" query dialect on a real home (issue 40 item 5).

One daemon (no IPFS, no gossip) owns ``cities`` (three rows ingested: trusted, the node holds
its key) and holds ``remote``, pulled from another home's copy of the dataset by path (not
owned, not followed: no trusted head). While the daemon runs, :mod:`node.api` opens the same
home:

* ``datasets()`` lists ``cities`` as owned and trusted, and ``remote`` only with
  ``untrusted=True``; ``dataset("remote")`` is :class:`HeadNotTrusted` without the flag;
* the dataset's Arrow dataset, pandas frame (``offset`` int64, ``op`` int32, times UTC) and
  PySpark DataFrame (local Spark, reading the head's parquet parts in place) hold exactly the
  dataset's rows;
* ``data.query`` with ``engine="spark"`` runs on the daemon's Spark query worker
  (``node/adapters/spark_query.py``, the DataFusion engine's spark delegate): the right rows,
  paging and Arrow types, alias and DID table names in backticks or double quotes, the
  untrusted dataset only with ``untrusted``; hostile queries (a path-based relation,
  reflection, a table function, a random function, a command) are refused by the Spark
  sandbox, and an exploding cross join is killed at ``[query] deadline_s`` while
  ``node.status`` stays fast, the next query getting a new worker;
* ``queryDialect: SqlSpark`` on the HTTP data API: the answer with its proof, which ``/verify``
  reproduces on Spark.

Spark is slow to start here: the module has one SparkSession (the user's, for ``to_spark``) and
the daemon's one Spark query worker, each shared by its tests. Run in a loopback-only namespace.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from daemon_harness import CITIES_SNAPSHOT, ROOT, NodeProcess
from netns import require_loopback_only

from node import api
from node.app.errors import HeadNotTrusted
from node.rpc.client import RpcCallError

CSV = """event_time,city,population
2020-01-01T00:00:00Z,A,1000
2020-01-02T00:00:00Z,B,2000
2020-01-03T00:00:00Z,C,3000
"""


def _cli(home: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "node.cli", *args, "--home", str(home)],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    return done.stdout


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    require_loopback_only()
    base = tmp_path_factory.mktemp("api")
    csv = base / "cities.csv"
    csv.write_text(CSV)
    snapshot = base / "cities.yaml"
    snapshot.write_text(CITIES_SNAPSHOT.removesuffix("---\n"))
    # Another home's copy of a dataset, pulled by path below: held but not trusted.
    other = base / "other"
    _cli(other, "init")
    _cli(other, "dataset", "create", str(snapshot))
    _cli(other, "dataset", "ingest", "cities", str(csv))
    [source] = list((other / "datasets").iterdir())
    n = NodeProcess(
        base / "node",
        "api",
        config={
            "ipfs": {"mode": "none"},
            "p2p": {"enabled": False},
            "query": {"flight_sql_enabled": False, "deadline_s": 8.0},
        },
    )
    n.init()
    n.launch()
    try:
        n.wait_ready()
        n.call("dataset.create", snapshot_yaml=CITIES_SNAPSHOT.removesuffix("---\n"))
        n.call("dataset.ingest", ref="cities", files=[str(csv)])
        n.call("dataset.pull", url=str(source), alias="remote")
        yield n
    finally:
        n.stop()


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """The user's own SparkSession (local, one core).

    Its JVM is the pytest process's for good (a later SparkSession in this process reuses it),
    so it starts with the engine's JVM options: the sandbox tests that run after this module
    check them on that JVM (tests/unit/test_sandbox_corpus.py)."""
    from pyspark.sql import SparkSession

    from engine.spark_engine import XML_JAVA_OPTIONS

    session = (
        SparkSession.builder.master("local[1]")
        .config("spark.driver.extraJavaOptions", XML_JAVA_OPTIONS)
        .appName("odf-node-api-test")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    try:
        yield session
    finally:
        session.stop()


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    """The rows, sorted, with every time as a naive UTC datetime (Spark's ``toPandas`` gives
    the session's time zone, UTC here, without a zone)."""

    def utc(v: Any) -> Any:
        if isinstance(v, dt.datetime) and v.tzinfo is not None:
            return v.astimezone(dt.UTC).replace(tzinfo=None)
        return v

    cols = ["offset", "op", "system_time", "event_time", "city", "population"]
    columns = [[utc(v) for v in table.column(c).to_pylist()] for c in cols]
    return sorted(zip(*columns, strict=True))


def test_datasets_with_trust_state(node: NodeProcess) -> None:
    home = api.open_home(node.home)
    listed = {d.name: d for d in home.datasets()}
    assert "remote" not in listed
    cities = listed["cities"]
    assert (cities.trusted, cities.trust, cities.records) == (True, "owned", 3)
    [row] = [d for d in node.call("dataset.list") if d["alias"] == "cities"]
    assert (cities.did, cities.head) == (row["id"], row["head"])
    everything = {d.name: d for d in home.datasets(untrusted=True)}
    assert everything["remote"].trusted is False
    assert everything["remote"].trust == "untrusted"
    with pytest.raises(HeadNotTrusted):
        home.dataset("remote")
    assert home.dataset("remote", untrusted=True).records == 3


def test_arrow_and_pandas_read_the_heads_files_in_place(node: NodeProcess) -> None:
    d = api.open_home(node.home).dataset("cities")
    data_dir = node.home / "datasets"
    assert d.files and all(Path(f).is_relative_to(data_dir) for f in d.files)
    expected = pa.concat_tables([pq.read_table(f) for f in d.files])
    assert _rows(d.to_arrow_dataset().to_table()) == _rows(expected)
    assert [r[4] for r in _rows(expected)] == ["A", "B", "C"]
    frame = d.to_pandas()
    assert str(frame["offset"].dtype) == "int64"
    assert str(frame["op"].dtype) == "int32"
    for col in ("system_time", "event_time"):
        dtype = str(frame[col].dtype)
        assert dtype.startswith("datetime64[") and dtype.endswith(", UTC]"), (col, dtype)
    assert sorted(frame["population"]) == [1000, 2000, 3000]


def test_a_pyspark_dataframe_equals_the_datasets_rows(node: NodeProcess, spark: Any) -> None:
    d = api.open_home(node.home).dataset("cities")
    df = d.to_spark(spark)
    assert sorted(df.inputFiles()) == sorted(f"file://{f}" for f in d.files)
    got = pa.Table.from_pandas(df.toPandas(), preserve_index=False)
    assert df.count() == d.records == 3
    assert _rows(got) == _rows(d.to_arrow())
    # The user's own Spark SQL over it: a dotted alias is one backticked name.
    df.createOrReplaceTempView("`covid19.cities`")
    total = spark.sql("select sum(population) as s from `covid19.cities`").collect()
    assert total[0]["s"] == 6000


def _sql(node: NodeProcess, sql: str, **params: Any) -> dict[str, Any]:
    answer: dict[str, Any] = node.call("data.query", sql=sql, engine="spark", **params)
    return answer


def test_spark_dialect_query(node: NodeProcess) -> None:
    # The daemon's Spark query worker starts on the first query and serves the others.
    answer = _sql(
        node, 'select city, population from "cities" where population > 1000 order by city'
    )
    assert answer["rows"] == [["B", 2000], ["C", 3000]]
    assert [i["name"] for i in answer["inputs"]] == ["cities"]
    assert answer["inputs"][0]["trusted"] is True
    answer = _sql(node, "select offset, op from `cities` order by offset", skip=1, limit=1)
    assert answer["rows"] == [[1, 0]]
    assert answer["types"] == ["int64", "int32"]
    # A dataset's DID is a table name too (backticked or double-quoted).
    did = api.open_home(node.home).dataset("cities").did
    assert _sql(node, f"select count(*) as n from `{did}`")["rows"] == [[3]]
    # The untrusted dataset is not read without the flag, and says so with it.
    with pytest.raises(RpcCallError, match="trusted"):
        _sql(node, 'select count(*) from "remote"')
    answer = _sql(node, 'select count(*) as n from "remote"', untrusted=True)
    assert answer["rows"] == [[3]] and answer["inputs"][0]["trusted"] is False


def test_spark_dialect_refuses_hostile_queries(node: NodeProcess) -> None:
    files = api.open_home(node.home).dataset("cities").files
    for hostile, reason in (
        (f"select * from parquet.`{files[0]}`", "path-based relations are not allowed"),
        ("select reflect('java.lang.System', 'getenv', 'HOME')", "reflect() is not allowed"),
        ("select * from range(1000000000)", "not allowed"),
        ('select rand() from "cities"', "random functions are not allowed"),
        ('drop view "cities"', "only SELECT queries are allowed"),
    ):
        with pytest.raises(RpcCallError, match=re.escape(reason)):
            _sql(node, hostile)
    # An exploding cross join is killed at [query] deadline_s (8 s here) ...
    joined = ", ".join(f'"cities" t{i}' for i in range(24))
    t0 = time.monotonic()
    with pytest.raises(RpcCallError, match=re.escape("[query] deadline_s")):
        _sql(node, f"select count(*) from {joined}")
    assert time.monotonic() - t0 < 20
    # ... the daemon stays responsive and the next Spark query gets a new worker.
    t0 = time.monotonic()
    node.call("node.status")
    assert time.monotonic() - t0 < 1.0
    assert _sql(node, 'select count(*) as n from "cities"')["rows"] == [[3]]


def _post(url: str, body: Any) -> tuple[int, Any]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_sqlspark_on_the_http_data_api_with_a_proof_verify_reproduces(node: NodeProcess) -> None:
    base = node.call("node.status")["http_url"]
    query = {
        "query": 'select city, population from "cities" order by city desc',
        "queryDialect": "SqlSpark",
        "include": ["proof"],
    }
    status, answer = _post(base + "/query", query)
    assert status == 200, answer
    assert answer["output"]["data"] == [
        {"city": "C", "population": 3000},
        {"city": "B", "population": 2000},
        {"city": "A", "population": 1000},
    ]
    assert answer["input"]["queryDialect"] == "SqlSpark"
    request = {k: v for k, v in answer.items() if k != "output"}
    # /verify runs the query again, on Spark, and gets the same output hash.
    assert _post(base + "/verify", request) == (200, {"ok": True})
    status, refused = _post(base + "/query", {**query, "query": "select reflect('a', 'b')"})
    assert status == 400 and "reflect() is not allowed" in json.dumps(refused), refused
