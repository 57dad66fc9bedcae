"""Reading verified data through a real daemon (issue 40 item 1): ``odf-node sql``,
``dataset tail``, ``dataset export`` and the RPC methods behind them.

One daemon (no IPFS, no gossip) owns ``cities`` (one slice) and ``towns`` (two slices); a copy
of ``cities`` pulled from another home's directory is stored but not trusted (not owned, not
followed, not verified here). Run in a loopback-only namespace (``make test`` does).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from daemon_harness import CITIES_SNAPSHOT, ROOT, NodeProcess
from netns import require_loopback_only

from coordinator.data.hashing import logical_hash
from coordinator.storage.dataset import Dataset

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

CSV = """event_time,city,population
2020-01-01T00:00:00Z,A,1000
2020-01-02T00:00:00Z,B,2000
2020-01-03T00:00:00Z,C,3000
"""
TOWNS = CITIES_SNAPSHOT.rstrip().removesuffix("---").replace("name: cities", "name: towns")


def cli(home: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "node.cli", *args, "--home", str(home)],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    if ok:
        assert proc.returncode == 0, proc.stderr + proc.stdout
    return proc


def cli_json(home: Path, *args: str) -> Any:
    return json.loads(cli(home, *args, "--json").stdout)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    require_loopback_only()
    base = tmp_path_factory.mktemp("data")
    # Another home makes the dataset the daemon's home then pulls (stored, not trusted).
    other = base / "other"
    cli(other, "init")
    snap = base / "cities.yaml"
    snap.write_text(CITIES_SNAPSHOT.rstrip().removesuffix("---"))
    csv = base / "cities.csv"
    csv.write_text(CSV)
    cli(other, "dataset", "create", str(snap))
    cli(other, "dataset", "ingest", "cities", str(csv))
    did = cli_json(other, "dataset", "list")[0]["id"]
    n = NodeProcess(
        base / "node", "data", config={"ipfs": {"mode": "none"}, "p2p": {"enabled": False}}
    )
    n.init()
    n.launch()
    try:
        n.wait_ready()
        n.call("dataset.create", snapshot_yaml=CITIES_SNAPSHOT.rstrip().removesuffix("---"))
        n.call("dataset.ingest", ref="cities", files=[str(csv)])
        n.call("dataset.create", snapshot_yaml=TOWNS)
        for k in range(2):
            part = base / f"towns{k}.csv"
            part.write_text(
                "event_time,city,population\n"
                + "".join(
                    f"2021-0{k + 1}-{d + 10}T00:00:00Z,T{k}{d},{k * 10 + d}\n" for d in range(5)
                )
            )
            n.call("dataset.ingest", ref="towns", files=[str(part)])
        source = other / "datasets" / did.removeprefix("did:odf:")
        cli(n.home, "dataset", "pull", str(source), "--as", "copy")
        yield n
    finally:
        n.stop()


def test_sql_over_the_daemon_reads_owned_datasets(node: NodeProcess) -> None:
    value = cli_json(
        node.home, "sql", 'select city, population from "cities" order by population desc'
    )
    assert value["columns"] == ["city", "population"]
    assert value["rows"] == [["C", 3000], ["B", 2000], ["A", 1000]]
    [inp] = value["inputs"]
    assert inp["alias"] == "cities" and inp["trusted"] and inp["trust"] == "owned"
    # The same over RPC, by DID, and a join of two datasets.
    did = inp["did"]
    rpc = node.call("data.query", sql=f'select count(*) as n from "{did}"')
    assert rpc["rows"] == [[3]]
    joined = node.call(
        "data.query",
        sql='select count(*) as n from "cities" c cross join "towns" t',
    )
    assert joined["rows"] == [[30]] and {i["alias"] for i in joined["inputs"]} == {
        "cities",
        "towns",
    }
    # Paging: skip and limit.
    page = cli_json(
        node.home, "sql", 'select city from "towns" order by city', "--skip", "2", "--limit", "3"
    )
    assert page["rows"] == [["T02"], ["T03"], ["T04"]]


def test_untrusted_heads_are_read_only_when_asked(node: NodeProcess) -> None:
    refused = cli(node.home, "sql", 'select * from "copy"', ok=False)
    assert refused.returncode == 1
    assert "no trusted head" in refused.stderr and "--untrusted" in refused.stderr
    assert cli(node.home, "dataset", "tail", "copy", ok=False).returncode == 1
    got = cli(node.home, "sql", 'select count(*) as n from "copy"', "--untrusted")
    assert "UNTRUSTED" in got.stderr
    value = cli_json(node.home, "sql", 'select count(*) as n from "copy"', "--untrusted")
    assert value["rows"] == [[3]]
    assert value["inputs"][0]["trusted"] is False and value["inputs"][0]["trust"] == "untrusted"
    tables = node.call("data.tables")
    assert {t["alias"] for t in tables} == {"cities", "towns"}
    assert "copy" in {t["alias"] for t in node.call("data.tables", untrusted=True)}


def test_tail_reads_the_last_records_across_slices(node: NodeProcess) -> None:
    value = cli_json(node.home, "dataset", "tail", "towns", "-n", "7")
    offsets = [r[value["columns"].index("offset")] for r in value["rows"]]
    assert offsets == list(range(3, 10))
    cities = [r[value["columns"].index("city")] for r in value["rows"]]
    assert cities[-1] == "T14"
    # Event times are RFC 3339 in UTC.
    event_time = value["rows"][-1][value["columns"].index("event_time")]
    assert event_time == "2021-02-14T00:00:00Z"


def test_export_round_trips_the_logical_hash(node: NodeProcess, tmp_path: Path) -> None:
    out = tmp_path / "cities.parquet"
    result = cli_json(node.home, "dataset", "export", "cities", str(out))
    assert result["rows"] == 3 and result["trusted"] is True
    ds = Dataset(node.home / "datasets" / result["did"].removeprefix("did:odf:"), durable=False)
    last = ds.state().last_data_event
    assert last is not None and last.new_data is not None
    assert logical_hash(str(out)) == last.new_data.logical_hash.to_multibase()
    # Never over a file; csv and ndjson of a two-slice dataset hold every record.
    again = cli(node.home, "dataset", "export", "cities", str(out), ok=False)
    assert again.returncode == 1 and "exists" in again.stderr
    csv = tmp_path / "towns.csv"
    cli(node.home, "dataset", "export", "towns", str(csv), "--format", "csv")
    assert len(csv.read_text().splitlines()) == 1 + 10
    nd = tmp_path / "towns.ndjson"
    cli(node.home, "dataset", "export", "towns", str(nd), "--format", "ndjson")
    rows = [json.loads(line) for line in nd.read_text().splitlines()]
    assert [r["offset"] for r in rows] == list(range(10))
    # --as-of the first block with data: only the first slice.
    blocks = cli_json(node.home, "dataset", "log", "towns")
    first_data = next(
        b["hash"]
        for b in sorted(blocks, key=lambda b: b["block"]["sequenceNumber"])
        if b["block"]["event"]["kind"] == "AddData"
    )
    early = tmp_path / "towns-early.parquet"
    cli(node.home, "dataset", "export", "towns", str(early), "--as-of", first_data)
    assert pq.read_table(early).num_rows == 5


def test_the_same_json_with_and_without_a_daemon(node: NodeProcess) -> None:
    # The other home (no daemon: the CLI runs the use case in-process) owns a cities dataset
    # with the same records; only the heads, DIDs and system times differ.
    other = node.home.parent / "other"
    sql = 'select offset, op, event_time, city, population from "cities" order by offset'
    for args in (("sql", sql), ("dataset", "tail", "cities", "-n", "2")):
        offline, daemon = cli_json(other, *args), cli_json(node.home, *args)
        assert set(offline) == set(daemon) == {"columns", "types", "rows", "inputs", "truncated"}
        strip = [c for c in offline["columns"] if c != "system_time"]
        for value in (offline, daemon):
            keep = [value["columns"].index(c) for c in strip]
            value["rows"] = [[r[k] for k in keep] for r in value["rows"]]
            value["types"] = [value["types"][k] for k in keep]
            [inp] = value.pop("inputs")
            assert (inp["alias"], inp["trust"], inp["trusted"]) == ("cities", "owned", True)
        assert offline["rows"] and offline == daemon


def test_an_unknown_table_lists_the_readable_ones(node: NodeProcess) -> None:
    got = cli(node.home, "sql", 'select * from "nope"', ok=False)
    assert got.returncode == 1
    assert 'Readable tables: "cities", "towns"' in got.stderr
    assert '(read with --untrusted): "copy"' in got.stderr
    # An unquoted dotted name is read by the engine as schema.table: the error says to quote.
    dotted = cli(node.home, "sql", "select * from cities.towns", ok=False)
    assert dotted.returncode == 1 and "not found here" in dotted.stderr


def test_the_shell_lists_tables_and_runs_queries(node: NodeProcess) -> None:
    script = '\\d\nselect count(*) as n\nfrom "towns";\nselect * from "nope";\n\\q\n'
    proc = subprocess.run(
        [sys.executable, "-m", "node.cli", "sql", "--home", str(node.home)],
        input=script,
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    # The tables on start and on \d; a query over two lines; a failing one does not end it.
    assert proc.stdout.count("2 readable table(s):") == 2
    assert '"towns"  10 records, owned' in proc.stdout
    assert "│ 10 │" in proc.stdout
    assert "table 'nope' not found here" in proc.stderr
