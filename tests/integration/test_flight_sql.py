"""Arrow Flight SQL on a real daemon, driven by real third-party clients (issue 40 item 4).

One daemon (no IPFS, no gossip) owns ``cities`` with three ingested rows; its Flight SQL address
comes from ``odf-node status --json``. The ADBC Flight SQL driver and kamu's Python client (PyPI
``kamu``) run ``select 1``, list the node's tables and read the dataset into pandas with the
dtypes kamu's client gives; pandas ``read_sql`` runs over ADBC; a closed connection raises the
driver's own error; a query the sandbox refuses is a Flight error naming the reason.
Run in a loopback-only namespace (``make test`` does).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import adbc_driver_flightsql.dbapi as flightsql
import adbc_driver_manager
import kamu
import pandas as pd
import pyarrow.flight as fl
import pytest
from daemon_harness import CITIES_SNAPSHOT, ROOT, NodeProcess
from netns import require_loopback_only

from node.transfer.flight_sql import pack_any

CSV = """event_time,city,population
2020-01-01T00:00:00Z,A,1000
2020-01-02T00:00:00Z,B,2000
2020-01-03T00:00:00Z,C,3000
"""


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NodeProcess, str]]:
    require_loopback_only()
    base = tmp_path_factory.mktemp("flight")
    n = NodeProcess(
        base / "node",
        "flight",
        config={"ipfs": {"mode": "none"}, "p2p": {"enabled": False}},
    )
    n.init()
    n.launch()
    try:
        n.wait_ready()
        csv = base / "cities.csv"
        csv.write_text(CSV)
        n.call("dataset.create", snapshot_yaml=CITIES_SNAPSHOT.rstrip().removesuffix("---"))
        n.call("dataset.ingest", ref="cities", files=[str(csv)])
        status = subprocess.run(
            [sys.executable, "-m", "node.cli", "status", "--json", "--home", str(n.home)],
            check=True,
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        url = json.loads(status.stdout)["flight_sql_url"]
        assert url.startswith("grpc://127.0.0.1:"), url
        yield n, url
    finally:
        n.stop()


def _adbc(url: str) -> adbc_driver_manager.dbapi.Connection:
    # As kamu's examples connect: basic auth as 'anonymous' gets a session token.
    return flightsql.connect(
        url,
        db_kwargs={
            adbc_driver_manager.DatabaseOptions.USERNAME.value: "anonymous",
            adbc_driver_manager.DatabaseOptions.PASSWORD.value: "anonymous",
        },
        autocommit=True,
    )


def _check_dtypes(df: pd.DataFrame) -> None:
    assert sorted(df["city"]) == ["A", "B", "C"]
    assert str(df["offset"].dtype) == "int64"
    assert str(df["op"].dtype) == "int32"
    for col in ("system_time", "event_time"):
        assert str(df[col].dtype).startswith("datetime64[") and str(df[col].dtype).endswith(
            ", UTC]"
        ), (col, df[col].dtype)
    assert sorted(df["event_time"])[0] == pd.Timestamp("2020-01-01", tz="UTC")


def test_adbc_driver(node: tuple[NodeProcess, str]) -> None:
    _, url = node
    with _adbc(url) as con:
        with con.cursor() as cur:
            cur.execute("select 1")
            assert cur.fetchall() == [(1,)]
        objects = con.adbc_get_objects(depth="all").read_all().to_pylist()
        [catalog] = objects
        [schema] = catalog["catalog_db_schemas"]
        assert (catalog["catalog_name"], schema["db_schema_name"]) == ("kamu", "kamu")
        [table] = schema["db_schema_tables"]
        assert table["table_name"] == "cities"
        columns = [c["column_name"] for c in table["table_columns"]]
        assert {"offset", "op", "system_time", "event_time", "city", "population"} <= set(columns)
        # pandas read_sql over ADBC (pandas' own ADBC support).
        _check_dtypes(pd.read_sql("select * from cities", con))
        df = pd.read_sql('select city, population from "cities" order by city', con)
        assert list(df["population"]) == [1000, 2000, 3000]
    with pytest.raises(adbc_driver_manager.ProgrammingError):
        con.cursor()  # closed: the driver's own error


def test_kamu_client(node: tuple[NodeProcess, str]) -> None:
    _, url = node
    con = kamu.connect(url)
    with con:
        assert con.query("select 1 as value")["value"].tolist() == [1]
        assert con.query("show tables")["table_name"].tolist() == ["cities"]
        _check_dtypes(con.query('select * from "cities"'))
    con.close()
    with pytest.raises(adbc_driver_manager.Error):
        con.query("select 1")


def test_refusals_are_flight_errors(node: tuple[NodeProcess, str]) -> None:
    _, url = node
    with _adbc(url) as con, con.cursor() as cur:
        with pytest.raises(
            adbc_driver_manager.ProgrammingError, match=r"QueryRejected: .*read_csv"
        ) as refused:
            cur.execute("select * from read_csv('/etc/passwd')")
        assert "PERMISSION_DENIED" in str(refused.value) or "UNAUTHORIZED" in str(refused.value)
        assert "Traceback" not in str(refused.value)
        # A file path as a table name is no table of the node.
        with pytest.raises(adbc_driver_manager.Error, match="not found"):
            cur.execute("select * from '/etc/passwd'")
        # An unknown table names itself; the session still works afterwards.
        with pytest.raises(adbc_driver_manager.Error, match="nosuch"):
            cur.execute("select * from nosuch")
        cur.execute("select count(*) as n from cities")
        assert cur.fetchall() == [(3,)]
    client = fl.FlightClient(url)
    try:
        cmd = fl.FlightDescriptor.for_command(pack_any("CommandStatementQuery", [(1, "select 1")]))
        with pytest.raises(fl.FlightUnauthenticatedError, match="anonymous"):
            client.get_flight_info(cmd)
    finally:
        client.close()
