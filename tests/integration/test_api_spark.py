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
* :class:`~node.adapters.spark_query.SparkQueryEngine` answers a Spark SQL query over the head's
  files (dotted names quoted with backticks or double quotes, paging) and refuses hostile ones
  (a path-based relation, reflection, a table function) and stops one past its deadline.

Spark is slow to start here: the module starts one SparkSession (the user's, for ``to_spark``)
and one query worker, each shared by its tests. Run in a loopback-only namespace.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from daemon_harness import CITIES_SNAPSHOT, ROOT, NodeProcess
from netns import require_loopback_only

from node import api
from node.adapters.spark_query import SparkQueryEngine
from node.app.errors import HeadNotTrusted, QueryDeadlineExceeded, QueryRejected
from node.app.ports import QueryLimits, QueryTable

CSV = """event_time,city,population
2020-01-01T00:00:00Z,A,1000
2020-01-02T00:00:00Z,B,2000
2020-01-03T00:00:00Z,C,3000
"""
LIMITS = QueryLimits(deadline_s=120.0, memory_bytes=512 << 20, max_rows=1000, max_bytes=1 << 20)


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
            "query": {"flight_sql_enabled": False},
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
    """The user's own SparkSession (local, one core)."""
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[1]")
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


@pytest.fixture(scope="module")
def engine() -> Iterator[SparkQueryEngine]:
    """One Spark query worker for the module (started by its first query)."""
    e = SparkQueryEngine(master="local[1]", isolate_network=True)
    try:
        yield e
    finally:
        asyncio.run(e.close())


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    cols = ["offset", "op", "event_time", "city", "population"]
    return sorted(zip(*(table.column(c).to_pylist() for c in cols), strict=True))


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
    assert [r[3] for r in _rows(expected)] == ["A", "B", "C"]
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


def test_spark_dialect_query(node: NodeProcess, engine: SparkQueryEngine) -> None:
    d = api.open_home(node.home).dataset("cities")
    tables = [QueryTable("covid19.cities", d.did, d.head, d.files)]

    async def go() -> None:
        t = await engine.query(
            'select city, population from "covid19.cities" where population > 1000 order by city',
            tables,
            LIMITS,
            "spark",
        )
        assert t.to_pydict() == {"city": ["B", "C"], "population": [2000, 3000]}
        t = await engine.query(
            "select offset, op, event_time from `covid19.cities` order by offset",
            tables,
            LIMITS,
            "spark",
            skip=1,
            limit=1,
        )
        assert t.column("offset").to_pylist() == [1]
        assert t.schema.field("op").type == pa.int32()
        assert t.schema.field("event_time").type == pa.timestamp("us", tz="UTC")
        for hostile in (
            f"select * from parquet.`{d.files[0]}`",
            "select reflect('java.lang.System', 'getenv', 'HOME')",
            "select * from range(1000000000)",
            'select rand() from "covid19.cities"',
            "drop view `covid19.cities`",
        ):
            with pytest.raises(QueryRejected):
                await engine.query(hostile, tables, LIMITS, "spark")
        t0 = time.monotonic()
        big = ", ".join(f'"covid19.cities" t{i}' for i in range(24))
        with pytest.raises(QueryDeadlineExceeded):
            await engine.query(
                f"select count(*) from {big}",
                tables,
                QueryLimits(3.0, LIMITS.memory_bytes, LIMITS.max_rows, LIMITS.max_bytes),
                "spark",
            )
        assert time.monotonic() - t0 < 10
        # The killed worker is replaced for the next query.
        t = await engine.query('select count(*) as n from "covid19.cities"', tables, LIMITS)
        assert t.to_pydict() == {"n": [3]}
        assert engine.started == 2

    asyncio.run(go())
