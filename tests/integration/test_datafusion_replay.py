"""Replay of DataFusion derivatives across pinned releases (real workers, real chains).

* a mixed chain: blocks made by DataFusion 41 then 51 with ``extract`` (double on 41, int32 on
  51, so the logical hashes differ) verifies, each block's release recorded — including a 41
  block stamped after kamu moved to 51 (found by trying the other release);
* a forged block of a version-sensitive query is *inconclusive* (never a mismatch), of a
  version-insensitive one a *mismatch* (a dispute);
* ``Transform.Sql.version`` picks the release first;
* a batch of requests in one round trip (``ExecuteTransformBatch``) answers each like a single
  request would, also across a worker crash (restart, retry of the unanswered requests) and
  with a refused query in the middle.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from coordinator.data import logical_hash
from coordinator.metadata import model as m
from coordinator.metadata.timestamp import Timestamp
from coordinator.storage.dataset import Dataset
from coordinator.transform import OutputPaths, TransformSuccess, commit_transform
from coordinator.transform.model import TransformInvalidQuery
from coordinator.transform.plan import ChainCache, clear_outputs, plan_replay, plan_transform
from coordinator.transform.run import run_transform
from coordinator.transform.testing import StepClock, inputs_of, make_derivative, make_root, push_csv
from coordinator.transform.verify import ReplayVerdict, verify_dataset
from engine.worker import CRASH_ENV
from node.engine_client import EngineClient
from node.engine_router import EngineRouter, datafusion_python

pytestmark = pytest.mark.integration

EXTRACT = "SELECT op, event_time, city, extract(year from event_time) AS y FROM cities"
PLAIN = "SELECT op, event_time, city, population * 10 AS p10 FROM cities"
CSV = [
    "event_time,city,population\n2020-01-01T00:00:00Z,A,10\n2021-01-02T00:00:00Z,B,20\n",
    "event_time,city,population\n2022-01-04T00:00:00Z,C,30\n",
    "event_time,city,population\n2023-01-05T00:00:00Z,D,40\n2023-02-05T00:00:00Z,E,50\n",
]


def no_spark() -> EngineClient:
    raise AssertionError("Spark must not be started for DataFusion transforms")


@pytest.fixture(scope="module")
def routers() -> Iterator[dict[str, EngineRouter]]:
    out = {
        "all": EngineRouter(no_spark, idle_timeout=0),
        "41.0.0": EngineRouter(no_spark, idle_timeout=0, versions=("41.0.0",)),
        "51.0.0": EngineRouter(no_spark, idle_timeout=0, versions=("51.0.0",)),
    }
    assert out["all"].pinned_versions("datafusion") == ("51.0.0", "41.0.0")
    yield out
    for r in out.values():
        r.close()


def chain(tmp: Path, query: str, version: str | None = None) -> tuple[Dataset, Dataset]:
    root = make_root(tmp, "root")
    der = make_derivative(
        tmp, "der", [(root, "cities")], [(None, query)], engine="datafusion", version=version
    )
    return root, der


def step(
    root: Dataset, der: Dataset, tmp: Path, router: EngineRouter, csv: str, at: str
) -> m.ExecuteTransform:
    clock = StepClock(Timestamp.parse(at))
    push_csv(root, tmp / "in", csv, clock)
    res = run_transform(der, inputs_of(root), router, clock=clock)
    assert res is not None and res.new_head is not None
    return res.event


def test_mixed_41_then_51_chain_verifies_with_each_release_recorded(
    tmp_path: Path, routers: dict[str, EngineRouter]
) -> None:
    root, der = chain(tmp_path, EXTRACT)
    e1 = step(root, der, tmp_path, routers["41.0.0"], CSV[0], "2025-06-01T00:00:00Z")
    # kamu-cli had moved to 51 by then, but this owner still ran 41 (an image override).
    e2 = step(root, der, tmp_path, routers["41.0.0"], CSV[1], "2026-02-01T00:00:00Z")
    e3 = step(root, der, tmp_path, routers["51.0.0"], CSV[2], "2026-03-01T00:00:00Z")
    f1 = der.data.path_of(e1.new_data.physical_hash)  # type: ignore[union-attr]
    f3 = der.data.path_of(e3.new_data.physical_hash)  # type: ignore[union-attr]
    assert pq.read_table(f1).schema.field("y").type == pa.float64()
    assert pq.read_table(f3).schema.field("y").type == pa.int32()
    assert e2.new_data is not None

    report = verify_dataset(der, inputs_of(root), routers["all"])
    assert report.ok, report.replay
    replay = report.replay
    assert replay is not None and replay.blocks_replayed == 3
    assert [(b.engine, b.version) for b in replay.block_engines] == [
        ("datafusion", "41.0.0"),
        ("datafusion", "41.0.0"),
        ("datafusion", "51.0.0"),
    ]
    assert replay.engines() == {"datafusion": ["41.0.0", "51.0.0"]}
    assert replay.to_dict()["engines"][2]["version"] == "51.0.0"


def forge_last(root: Dataset, der: Dataset, tmp: Path, router: EngineRouter, at: str) -> None:
    """The next step run for real, one value changed before commit (hashes consistent)."""
    clock = StepClock(Timestamp.parse(at))
    push_csv(root, tmp / "in", CSV[1], clock)
    paths = OutputPaths.under(tmp / "forge")
    plan = plan_transform(der, inputs_of(root), system_time=clock(), paths=paths)
    assert plan is not None
    clear_outputs(paths)
    resp = router.execute_transform(plan.request)
    assert isinstance(resp, TransformSuccess)
    t = pq.read_table(paths.new_data_path)
    i = t.schema.get_field_index("city")
    pq.write_table(t.set_column(i, "city", pa.array(["forged"] * t.num_rows)), paths.new_data_path)
    assert commit_transform(der, plan, resp).new_head is not None


def test_forged_block_of_a_version_sensitive_query_is_inconclusive(
    tmp_path: Path, routers: dict[str, EngineRouter]
) -> None:
    root, der = chain(tmp_path, EXTRACT)
    step(root, der, tmp_path, routers["51.0.0"], CSV[0], "2026-02-01T00:00:00Z")
    forge_last(root, der, tmp_path, routers["51.0.0"], "2026-02-02T00:00:00Z")
    report = verify_dataset(der, inputs_of(root), routers["all"])
    replay = report.replay
    assert replay is not None and not report.ok
    assert replay.verdict is ReplayVerdict.INCONCLUSIVE
    assert replay.tried_versions == ("51.0.0", "41.0.0")
    assert replay.blocks_replayed == 1
    assert "function extract()" in replay.version_sensitive_reasons
    assert replay.describe().startswith("inconclusive: engine version unknown at block")


def test_forged_block_of_a_version_insensitive_query_is_a_mismatch(
    tmp_path: Path, routers: dict[str, EngineRouter]
) -> None:
    root, der = chain(tmp_path, PLAIN)
    step(root, der, tmp_path, routers["41.0.0"], CSV[0], "2025-02-01T00:00:00Z")
    forge_last(root, der, tmp_path, routers["41.0.0"], "2025-02-02T00:00:00Z")
    forged_head = der.head()
    # An honest block after the forged one: the replay stops at the forgery (the run of the
    # next block, started ahead, is discarded along with the scratch directory).
    step(root, der, tmp_path, routers["41.0.0"], CSV[2], "2025-02-03T00:00:00Z")
    work = tmp_path / "replay-scratch"
    work.mkdir()
    report = verify_dataset(der, inputs_of(root), routers["all"], work_dir=work)
    replay = report.replay
    assert replay is not None and replay.version_sensitive_reasons == ()
    assert replay.blocks_total == 3 and replay.blocks_replayed == 1
    assert replay.mismatch is not None and replay.mismatch.block_hash == forged_head
    assert not any(p.is_file() for p in work.rglob("*"))  # no output left behind
    assert replay.verdict is ReplayVerdict.MISMATCH
    assert replay.tried_versions == ("41.0.0", "51.0.0")
    assert replay.mismatch is not None
    assert any(d.startswith("new_data.logical_hash") for d in replay.mismatch.differences)


def test_transform_version_is_tried_first(tmp_path: Path, routers: dict[str, EngineRouter]) -> None:
    # Stamped in kamu's 51 era, but the transform names engine image 0.8.1 (DataFusion 41).
    root, der = chain(tmp_path, EXTRACT, version="0.8.1")
    step(root, der, tmp_path, routers["all"], CSV[0], "2026-05-01T00:00:00Z")
    f = der.data.path_of(der.state().last_data_event.new_data.physical_hash)  # type: ignore[union-attr]
    assert pq.read_table(f).schema.field("y").type == pa.float64()  # the owner ran 41
    report = verify_dataset(der, inputs_of(root), routers["all"])
    assert report.ok
    assert report.replay is not None
    assert [b.version for b in report.replay.block_engines] == ["41.0.0"]


def test_a_batch_answers_each_request_across_a_crash_and_a_refusal(
    tmp_path: Path, routers: dict[str, EngineRouter]
) -> None:
    root, der = chain(tmp_path, PLAIN)
    published = [
        step(root, der, tmp_path, routers["51.0.0"], csv, f"2026-02-0{k + 1}T00:00:00Z")
        for k, csv in enumerate(CSV)
    ]
    cache = ChainCache()
    blocks = [
        b for _, b in reversed(list(der.iter_blocks())) if isinstance(b.event, m.ExecuteTransform)
    ]
    paths = [OutputPaths.under(tmp_path / f"r{k}") for k in range(len(blocks))]
    for p in paths:
        clear_outputs(p)
    requests = [
        plan_replay(der, inputs_of(root), b, paths=p, cache=cache).request
        for b, p in zip(blocks, paths, strict=True)
    ]
    crash = tmp_path / "crash"
    crash.write_text("1")  # the first request run by the worker kills it
    client = EngineClient(
        engine="datafusion",
        python=str(datafusion_python("51.0.0")),
        idle_timeout=0,
        env={CRASH_ENV: str(crash)},
    )
    try:
        answers = client.execute_transform_batch(requests)
        assert client.starts == 2 and crash.read_text() == "0"  # crashed once, retried
        assert all(isinstance(a, TransformSuccess) for a in answers)
        for req, event in zip(requests, published, strict=True):
            assert event.new_data is not None
            assert logical_hash(req.new_data_path) == event.new_data.logical_hash.to_multibase()
        # A refused query in the middle: that request alone fails, in its place.
        bad_transform = replace(
            requests[1].transform,
            queries=(m.SqlQueryStep(query="SELECT now() AS t, event_time FROM cities"),),
        )
        mixed = [requests[0], replace(requests[1], transform=bad_transform), requests[2]]
        answers = client.execute_transform_batch(mixed)
        assert [type(a) for a in answers] == [
            TransformSuccess,
            TransformInvalidQuery,
            TransformSuccess,
        ]
        assert "now" in answers[1].message  # type: ignore[union-attr]
        assert client.starts == 2
    finally:
        client.close()
