"""ChangelogStream and UpsertStream roots (spec v0.37) end to end through the app layer.

``dataset create`` (DatasetSnapshot YAML with the merge strategy as kamu-cli HEAD writes it) and
``dataset ingest`` through :class:`node.app.datasets.DatasetUseCases`, as the CLI and the RPC
reach them; a DataFusion derivative over each root runs on the real engine after every ingest,
and ``dataset verify`` replays its whole chain (the retractions and corrections the merges wrote
go through the derivative's query) and checks the root's integrity. Run in both write forms:
v0.34 blocks (the default) and kamu-cli HEAD's current form (ODF ``SetDataSchema``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from coordinator.metadata import model as m
from coordinator.metadata import set_write_form
from coordinator.metadata.timestamp import Timestamp
from coordinator.storage.repository import DatasetRepository
from node.app.datasets import DatasetUseCases
from node.engine_client import EngineClient
from node.engine_router import EngineRouter

pytestmark = pytest.mark.integration

T0 = Timestamp.parse("2026-06-01T00:00:00Z")


def snapshots(merge: str) -> str:
    return f"""\
kind: DatasetSnapshot
version: 1
content:
  name: cities
  kind: Root
  metadata:
    - kind: AddPushSource
      sourceName: default
      read:
        kind: Csv
        header: true
        schema: ["op INT", "event_time TIMESTAMP", "city STRING", "population BIGINT"]
      merge:
        kind: {merge}
        primaryKey: [city]
---
kind: DatasetSnapshot
version: 1
content:
  name: cities-x10
  kind: Derivative
  metadata:
    - kind: SetTransform
      inputs:
        - datasetRef: cities
      transform:
        kind: Sql
        engine: datafusion
        query: SELECT op, event_time, city, population * 10 AS p10 FROM cities
"""


HEADER = "op,event_time,city,population\n"
# Per strategy: the files ingested one after the other, and the root's rows afterwards
# (offset order: op, city, population).
CASES = {
    "ChangelogStream": (
        [
            "0,2020-01-01T00:00:00Z,B,2\n0,2020-01-01T00:00:00Z,A,1\n",
            "2,2020-01-01T00:00:00Z,A,1\n3,2020-02-01T00:00:00Z,A,5\n1,2020-01-01T00:00:00Z,B,2\n",
        ],
        [(0, "A", 1), (0, "B", 2), (2, "A", 1), (3, "A", 5), (1, "B", 2)],
    ),
    "UpsertStream": (
        [
            "0,2020-01-01T00:00:00Z,B,2\n0,2020-01-01T00:00:00Z,A,1\n",
            # A changes (twice: the last row counts), B is deleted, C is new, Q (unknown) is
            # deleted: ignored.
            "0,2020-02-01T00:00:00Z,A,4\n0,2020-02-01T00:00:00Z,A,5\n"
            "1,2020-02-01T00:00:00Z,B,0\n0,2020-02-01T00:00:00Z,C,3\n"
            "1,2020-02-01T00:00:00Z,Q,0\n",
        ],
        [(0, "A", 1), (0, "B", 2), (2, "A", 1), (3, "A", 5), (1, "B", 2), (0, "C", 3)],
    ),
}


def no_spark() -> EngineClient:
    raise AssertionError("Spark must not be started for DataFusion transforms")


@pytest.fixture(params=["v0.34", "current"])
def write_form(request: pytest.FixtureRequest) -> Iterator[str]:
    set_write_form(request.param)
    try:
        yield request.param
    finally:
        set_write_form("v0.34")


def table_rows(repo: DatasetRepository, ref: str, *cols: str) -> list[tuple[object, ...]]:
    ds = repo.open(ref)
    out: list[tuple[object, ...]] = []
    for _, block in reversed(list(ds.iter_blocks())):
        e = block.event
        nd = getattr(e, "new_data", None)
        if isinstance(e, m.AddData | m.ExecuteTransform) and nd is not None:
            for r in pq.read_table(ds.data.path_of(nd.physical_hash)).to_pylist():
                out.append(tuple(r[c] for c in cols))
    return out


@pytest.mark.parametrize("merge", sorted(CASES))
def test_stream_root_ingests_and_its_derivative_replays(
    tmp_path: Path, merge: str, write_form: str
) -> None:
    files, expected = CASES[merge]
    repo = DatasetRepository(
        tmp_path / "datasets", tmp_path / "keys", clock=lambda: T0, durable=False
    )
    router = EngineRouter(no_spark, idle_timeout=0)
    uc = DatasetUseCases(repo, lambda: router)

    async def run() -> None:
        created = await uc.create(snapshots(merge))
        assert [c.alias for c in created] == ["cities", "cities-x10"]
        for i, body in enumerate(files):
            f = tmp_path / f"{i}.csv"
            f.write_text(HEADER + body)
            res = await uc.ingest("cities", [f], publish=False)
            assert not res.up_to_date
            tr = await uc.transform("cities-x10", publish=False)
            assert not tr.up_to_date
        root = await uc.verify("cities")
        assert root.ok, root.problems
        der = await uc.verify("cities-x10")
        assert der.ok, der.problems
        assert der.replay is not None and der.replay["blocks_replayed"] == len(files)

    try:
        asyncio.run(run())
    finally:
        router.close()
    assert table_rows(repo, "cities", "op", "city", "population") == expected
    assert table_rows(repo, "cities-x10", "op", "city", "p10") == [
        (o, c, p * 10) for o, c, p in expected
    ]
    schema_events = [
        b.event
        for _, b in repo.open("cities").iter_blocks()
        if isinstance(b.event, m.SetDataSchema)
    ]
    (ev,) = schema_events
    assert (ev.schema is not None) == (write_form == "current")
