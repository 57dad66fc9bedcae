"""The Python API's own code (``node/api.py``): opening a home, a dataset's files as Arrow and
pandas, and running from inside an event loop; the spark dialect's refusals that need no Spark.
Reading a real home, with its trust rule and Spark, is ``tests/integration/test_api_spark.py``."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from node import api
from node.home import NodeHome


def _part(path: Path, start: int, cities: list[str]) -> str:
    n = len(cities)
    t = pa.table(
        {
            "offset": pa.array(range(start, start + n), pa.int64()),
            "op": pa.array([0] * n, pa.int32()),
            "system_time": pa.array([dt.datetime(2024, 1, 1)] * n, pa.timestamp("ms", tz="UTC")),
            "event_time": pa.array(
                [dt.datetime(2020, 1, 1 + i) for i in range(n)], pa.timestamp("ms", tz="UTC")
            ),
            "city": cities,
        }
    )
    pq.write_table(t, path)
    return str(path)


def _dataset(files: tuple[str, ...]) -> api.ReadableDataset:
    return api.ReadableDataset(
        name="covid19.cities",
        alias="covid19.cities",
        did="did:odf:fed01",
        head="f1620",
        sequence=4,
        trusted=True,
        trust="owned",
        records=3,
        files=files,
    )


def test_open_home_refuses_a_directory_that_is_not_a_home(tmp_path: Path) -> None:
    with pytest.raises(api.NotAHome, match="odf-node init"):
        api.open_home(tmp_path)


def test_open_home_defaults_to_the_clis_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    NodeHome(tmp_path / "h").init()
    monkeypatch.setenv("ODF_NODE_HOME", str(tmp_path / "h"))
    assert api.open_home().path == tmp_path / "h"
    assert api.open_home(str(tmp_path / "h")).path == tmp_path / "h"


def test_the_parts_are_read_in_place_oldest_first(tmp_path: Path) -> None:
    files = (_part(tmp_path / "a.parquet", 0, ["A", "B"]), _part(tmp_path / "b.parquet", 2, ["C"]))
    d = _dataset(files)
    ds = d.to_arrow_dataset()
    assert ds.files == list(files)  # the node's files themselves, nothing copied
    assert d.to_arrow().column("city").to_pylist() == ["A", "B", "C"]
    frame = d.to_pandas()
    assert list(frame["offset"]) == [0, 1, 2]
    assert str(frame["offset"].dtype) == "int64"
    assert str(frame["op"].dtype) == "int32"
    assert str(frame["event_time"].dtype).endswith(", UTC]")


def test_a_dataset_without_data_is_empty(tmp_path: Path) -> None:
    d = _dataset(())
    assert d.to_arrow().num_rows == 0
    assert d.to_pandas().empty


def test_calls_work_from_inside_a_running_event_loop() -> None:
    async def answer() -> int:
        return 42

    async def notebook_cell() -> int:
        # A Jupyter cell runs in an event loop: asyncio.run would refuse.
        return api._sync(answer)

    assert api._sync(answer) == 42
    assert asyncio.run(notebook_cell()) == 42


def test_the_spark_dialect_refuses_before_starting_spark(tmp_path: Path) -> None:
    from node.adapters.spark_query import SparkQueryEngine
    from node.app.errors import QueryTooLarge, Unavailable
    from node.app.ports import QueryLimits

    limits = QueryLimits(deadline_s=5.0, memory_bytes=1 << 29, max_rows=10, max_bytes=1 << 20)
    # A python that does not exist: any start would fail loudly.
    engine = SparkQueryEngine(python=str(tmp_path / "no-python"))

    async def go() -> None:
        with pytest.raises(QueryTooLarge, match=r"max_rows"):
            await engine.query("select 1", [], limits, "spark", limit=11)
        await engine.close()
        with pytest.raises(Unavailable, match="stopped"):
            await engine.query("select 1", [], limits, "spark")

    asyncio.run(go())
    assert engine.started == 0
