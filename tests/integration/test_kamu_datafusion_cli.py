"""kamu-cli's DataFusion transform test (``test_engine_transform.rs`` at kamu-cli f955323,
``test_transform_with_engine_datafusion``) through the odf-node CLI, as real processes.

kamu's case: a root dataset ``root`` (CSV ``city STRING, population INT``, both required:
kamu's ``DataField::string``/``i32`` without ``.optional()``, here DDL ``NOT NULL``; Snapshot
merge on ``city``) and a derivative ``deriv`` with ``engine: datafusion`` and
``SELECT op, event_time, city, cast(population * 10 as int) as population_x10 FROM root``
(kamu's exact query: the cast makes ``population_x10`` INT32, as kamu expects; without it
DataFusion types ``Int32 * 10`` as Int64).

* round 1 (``A,10 B,20 C,30``): 4 blocks (Seed, SetTransform, SetDataSchema, ExecuteTransform),
  rows ``0..2`` op 0 with 100/200/300;
* round 2 (``A,10 C,35 D,40 E,50``): 5 blocks, rows ``3..7``: retract B, correct C 300 -> 350,
  append D and E;
* in both rounds the data file's full Parquet schema is kamu's (``assert_schema_eq``): names,
  physical and logical types and the ``REQUIRED`` repetition of every column, and the
  derivative's ``SetDataSchema`` records the same fields and nullability;
* ``dataset verify`` replays both blocks (recording the DataFusion release of each);
* the last block rewritten with equivalent data in another encoding still verifies; rewritten
  with different data (kamu drops the first row) it is a mismatch, the dispute case.

kamu's clock is a stub (2050-…); here the CLI reads the real clock, so times are checked
against the blocks' own system times: event times are the root ingest's system time (no
event-time column in the CSV), system times the transform's.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from coordinator.data import logical_hash, physical_hash
from coordinator.metadata import model as m
from coordinator.metadata.arrow_schema import decode_arrow_schema
from coordinator.metadata.timestamp import Timestamp
from coordinator.multiformats import Multihash
from coordinator.storage.dataset import HEAD_REF, Dataset
from coordinator.transform.testing import forge_block
from node.home import NodeHome

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
SNAPSHOTS = """\
kind: DatasetSnapshot
version: 1
content:
  name: root
  kind: Root
  metadata:
    - kind: AddPushSource
      sourceName: default
      read:
        kind: Csv
        header: true
        schema: ["city STRING NOT NULL", "population INT NOT NULL"]
      merge:
        kind: Snapshot
        primaryKey: [city]
---
kind: DatasetSnapshot
version: 1
content:
  name: deriv
  kind: Derivative
  metadata:
    - kind: SetTransform
      inputs:
        - datasetRef: root
      transform:
        kind: Sql
        engine: datafusion
        query: |
          SELECT
              op,
              event_time,
              city,
              cast(population * 10 as int) as population_x10
          FROM root
"""
# kamu's expected schema (the same in both rounds), as its test writes it.
KAMU_SCHEMA = """\
message arrow_schema {
  REQUIRED INT64 offset;
  REQUIRED INT32 op;
  REQUIRED INT64 system_time (TIMESTAMP(MILLIS,true));
  REQUIRED INT64 event_time (TIMESTAMP(MILLIS,true));
  REQUIRED BYTE_ARRAY city (STRING);
  REQUIRED INT32 population_x10;
}
"""
_UNITS = {"milliseconds": "MILLIS", "microseconds": "MICROS", "nanoseconds": "NANOS"}


def cli(home: Path, *args: str, ok: bool = True) -> Any:
    proc = subprocess.run(
        [sys.executable, "-m", "node.cli", *args, "--home", str(home), "--json"],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if ok:
        assert proc.returncode == 0, proc.stderr + proc.stdout
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else None


def ms(t: Timestamp) -> datetime:
    """``t`` as stored by the engine (milliseconds, UTC)."""
    return EPOCH + timedelta(milliseconds=t.epoch_ns // 1_000_000)


def blocks(ds: Dataset) -> list[m.MetadataBlock]:
    return [b for _, b in reversed(list(ds.iter_blocks()))]


def last_data(ds: Dataset) -> tuple[m.MetadataBlock, pa.Table, Path]:
    for _, b in ds.iter_blocks():
        if isinstance(b.event, m.ExecuteTransform | m.AddData) and b.event.new_data:
            path = ds.data.path_of(b.event.new_data.physical_hash)
            return b, pq.read_table(path), path
    raise AssertionError("no data")


def parquet_message(path: Path) -> str:
    """The file's Parquet schema in arrow-rs's ``print_schema`` form, as kamu's test prints it."""
    schema = pq.ParquetFile(path).schema
    lines = ["message arrow_schema {"]
    for i in range(len(schema)):
        c = schema.column(i)
        assert c.path == c.name and c.max_repetition_level == 0  # flat columns only
        repetition = "REQUIRED" if c.max_definition_level == 0 else "OPTIONAL"
        lt = json.loads(c.logical_type.to_json())
        if lt["Type"] == "None":
            logical = ""
        elif lt["Type"] == "String":
            logical = " (STRING)"
        elif lt["Type"] == "Timestamp":
            utc = str(lt["isAdjustedToUTC"]).lower()
            logical = f" (TIMESTAMP({_UNITS[lt['timeUnit']]},{utc}))"
        else:
            raise AssertionError(f"logical type {lt} not rendered")
        lines.append(f"  {repetition} {c.physical_type} {c.name}{logical};")
    return "\n".join([*lines, "}"]) + "\n"


def recorded_schema(ds: Dataset) -> list[tuple[str, str, bool]]:
    """Fields of the derivative's ``SetDataSchema``: name, Arrow type, nullable."""
    for _, b in ds.iter_blocks():
        if isinstance(b.event, m.SetDataSchema):
            schema = decode_arrow_schema(b.event.raw_arrow_schema)
            return [(f.name, str(f.type), f.nullable) for f in schema]
    raise AssertionError("no SetDataSchema")


KAMU_RECORDED = [
    ("offset", "int64", False),
    ("op", "int32", False),
    ("system_time", "timestamp[ms, tz=UTC]", False),
    ("event_time", "timestamp[ms, tz=UTC]", False),
    ("city", "string", False),
    ("population_x10", "int32", False),
]


def rewrite_last(ds: Dataset, tmp: Path, table: pa.Table, **write: Any) -> m.ExecuteTransform:
    """kamu's ``rewrite_last_data_block_with_different_encoding``: a new file, a new last block."""
    head = ds.head()
    assert head is not None
    orig = ds.get_block(head)
    assert isinstance(orig.event, m.ExecuteTransform) and orig.event.new_data is not None
    f = tmp / "rewritten.parquet"
    pq.write_table(table, f, **write)
    new = replace(
        orig.event.new_data,
        logical_hash=Multihash.from_multibase(logical_hash(f)),
        physical_hash=Multihash.from_multibase(physical_hash(f)),
        size=f.stat().st_size,
    )
    assert new.physical_hash != orig.event.new_data.physical_hash
    ds.data.insert_file(f, new.physical_hash)
    assert orig.prev_block_hash is not None
    ds.refs.set(HEAD_REF, orig.prev_block_hash, expected=head)
    event = replace(orig.event, new_data=new)
    forge_block(ds, event, system_time=orig.system_time)
    return event


def test_kamu_datafusion_transform_case_through_the_cli(tmp_path: Path) -> None:
    home = tmp_path / "home"
    cli(home, "init")
    snap = tmp_path / "snap.yaml"
    snap.write_text(SNAPSHOTS)
    created = cli(home, "dataset", "create", str(snap))[1]
    ids = {c["alias"]: c["id"] for c in created}
    repo = NodeHome(home).repository()
    data = tmp_path / "data.csv"

    # -- round 1
    data.write_text("city,population\nA,10\nB,20\nC,30\n")
    cli(home, "dataset", "ingest", "root", str(data))
    root = repo.open(ids["root"])
    t_root1 = blocks(root)[-1].system_time
    res = cli(home, "dataset", "transform", "deriv")[1]
    assert res["up_to_date"] is False and len(res["new_blocks"]) == 2
    deriv = repo.open(ids["deriv"])
    assert len(blocks(deriv)) == 4  # Seed, SetTransform, SetDataSchema, ExecuteTransform
    assert [type(b.event).__name__ for b in blocks(deriv)][2:] == [
        "SetDataSchema",
        "ExecuteTransform",
    ]
    block, table, path = last_data(deriv)
    st1, et1 = ms(block.system_time), ms(t_root1)
    assert table.to_pylist() == [
        {
            "offset": i,
            "op": 0,
            "system_time": st1,
            "event_time": et1,
            "city": c,
            "population_x10": p,
        }
        for i, (c, p) in enumerate([("A", 100), ("B", 200), ("C", 300)])
    ]
    assert parquet_message(path) == KAMU_SCHEMA
    assert recorded_schema(deriv) == KAMU_RECORDED
    assert cli(home, "dataset", "transform", "deriv")[1]["up_to_date"] is True

    # -- round 2
    data.write_text("city,population\nA,10\nC,35\nD,40\nE,50\n")
    cli(home, "dataset", "ingest", "root", str(data))
    t_root2 = ms(blocks(repo.open(ids["root"]))[-1].system_time)
    res = cli(home, "dataset", "transform", "deriv")[1]
    assert len(res["new_blocks"]) == 1 and res["offsets"] == [3, 7]
    deriv = repo.open(ids["deriv"])
    assert len(blocks(deriv)) == 5  # only one block this time
    block, table, path = last_data(deriv)
    st2 = ms(block.system_time)
    assert [tuple(r.values()) for r in table.to_pylist()] == [
        (3, 1, st2, et1, "B", 200),
        (4, 2, st2, et1, "C", 300),
        (5, 3, st2, t_root2, "C", 350),
        (6, 0, st2, t_root2, "D", 400),
        (7, 0, st2, t_root2, "E", 500),
    ]
    assert parquet_message(path) == KAMU_SCHEMA
    assert recorded_schema(deriv) == KAMU_RECORDED  # written once, in round 1

    # -- replay verify passes, each block's engine release recorded
    code, result = cli(home, "dataset", "verify", "deriv")
    assert code == 0 and result["ok"] is True
    replay = result["replay"]
    assert replay["verdict"] == "ok" and replay["blocks_replayed"] == replay["blocks_total"] == 2
    assert [(e["engine"], e["version"]) for e in replay["engines"]] == [
        ("datafusion", "51.0.0"),
        ("datafusion", "51.0.0"),
    ]

    # -- equivalent data, another encoding: still verifies
    forged_home = tmp_path / "forged"
    shutil.copytree(home, forged_home)
    fds = NodeHome(forged_home).repository().open(ids["deriv"])
    rewrite_last(fds, tmp_path, table, row_group_size=1, use_dictionary=["city"])
    code, result = cli(forged_home, "dataset", "verify", "deriv")
    assert code == 0 and result["ok"] is True, result

    # -- different data (the first row dropped, as kamu does): a mismatch, i.e. a dispute
    fds = NodeHome(forged_home).repository().open(ids["deriv"])
    forged = rewrite_last(fds, tmp_path, table.slice(1, table.num_rows - 1))
    code, result = cli(forged_home, "dataset", "verify", "deriv", ok=False)
    assert code == 2 and result["ok"] is False
    replay = result["replay"]
    assert replay["verdict"] == "mismatch"
    assert replay["version_sensitive_reasons"] == []
    assert replay["mismatch"]["block_hash"] == str(fds.head())
    assert replay["tried_versions"] == ["51.0.0", "41.0.0"]
    assert any(
        d.startswith("new_data.logical_hash") and str(forged.new_data.logical_hash) in d  # type: ignore[union-attr]
        for d in replay["mismatch"]["differences"]
    )
