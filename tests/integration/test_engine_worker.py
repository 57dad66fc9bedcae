"""The engine worker process over the ODF engine gRPC protocol, driven by ``EngineClient``.

One worker (one warm JVM) serves the module; crash tests make it die mid-request through the
worker's fault-injection hook and check the restart + single retry, and that nothing partial is
ever committed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from coordinator.metadata import model as m  # noqa: E402
from coordinator.transform.model import (  # noqa: E402
    RawQueryRequest,
    RawQuerySuccess,
    TransformInternalError,
    TransformInvalidQuery,
)
from coordinator.transform.plan import OutputPaths, clear_outputs, plan_transform  # noqa: E402
from coordinator.transform.run import run_transform  # noqa: E402
from coordinator.transform.testing import (  # noqa: E402
    StepClock,
    inputs_of,
    make_derivative,
    make_root,
    push_csv,
)
from coordinator.transform.verify import verify_dataset  # noqa: E402
from node.engine_client import EngineClient  # noqa: E402

pytestmark = pytest.mark.integration

QUERIES = [
    ("big", "SELECT * FROM `cities` WHERE population > 100"),
    (None, "SELECT op, event_time, city, population * 2 AS pop2 FROM big"),
]
CSV1 = "event_time,city,population\n2020-01-01T00:00:00Z,A,1000\n2020-01-02T00:00:00Z,B,20\n"
CSV2 = "event_time,city,population\n2020-01-03T00:00:00Z,C,3000\n"


@pytest.fixture(scope="module")
def crash_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("crash") / "crash"
    p.write_text("0")
    return p


@pytest.fixture(scope="module")
def client(crash_file: Path) -> Iterator[EngineClient]:
    c = EngineClient(
        master="local[2]",
        idle_timeout=600,
        env={"ODF_ENGINE_CRASH_FILE": str(crash_file)},
    )
    yield c
    c.close()


def test_lazy_start_transform_and_verify_over_grpc(tmp_path: Path, client: EngineClient) -> None:
    assert not client.running and client.starts == 0  # nothing started until needed
    clock = StepClock()
    root = make_root(tmp_path, "root")
    push_csv(root, tmp_path / "in", CSV1, clock)
    der = make_derivative(tmp_path, "der", [(root, "cities")], QUERIES)
    r1 = run_transform(der, inputs_of(root), client, clock=clock)
    assert r1 is not None and client.running and client.starts == 1
    push_csv(root, tmp_path / "in", CSV2, clock)
    r2 = run_transform(der, inputs_of(root), client, clock=clock)
    assert r2 is not None and r2.event.new_data is not None
    assert r2.event.new_data.offset_interval == m.OffsetInterval(start=1, end=1)
    report = verify_dataset(der, inputs_of(root), client)
    assert report.ok and report.replay is not None and report.replay.blocks_replayed == 2
    assert client.starts == 1  # one warm worker for everything


def test_raw_query_over_grpc(tmp_path: Path, client: EngineClient) -> None:
    """``ExecuteRawQuery`` (ingest preprocessing): query over ``input``, one file out."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"a": [1, 2, 3], "b": ["x", "y", "z"]}), src)
    starts = client.starts

    def req(q: str, out: str) -> RawQueryRequest:
        return RawQueryRequest(
            input_data_paths=(src,),
            transform=m.TransformSql(
                engine="spark",
                queries=(
                    m.SqlQueryStep(alias="f", query="SELECT * FROM input WHERE a > 1"),
                    m.SqlQueryStep(query=q),
                ),
            ),
            output_data_path=tmp_path / out,
        )

    resp = client.execute_raw_query(req("SELECT a * 10 AS a10, b FROM f", "out1"))
    assert resp == RawQuerySuccess(num_records=2)
    assert pq.read_table(tmp_path / "out1").to_pylist() == [
        {"a10": 20, "b": "y"},
        {"a10": 30, "b": "z"},
    ]
    bad = client.execute_raw_query(req("SELECT * FROM text.`/etc/passwd`", "out2"))
    assert isinstance(bad, TransformInvalidQuery) and "not an input" in bad.message
    assert not (tmp_path / "out2").exists()
    assert client.starts == max(starts, 1)


def test_crash_mid_request_restarts_and_retries_once(
    tmp_path: Path, client: EngineClient, crash_file: Path
) -> None:
    clock = StepClock()
    root = make_root(tmp_path, "root")
    push_csv(root, tmp_path / "in", CSV1, clock)
    der = make_derivative(tmp_path, "der", [(root, "cities")], QUERIES)
    client.start()
    starts, pid = client.starts, client.pid
    crash_file.write_text("1")
    result = run_transform(der, inputs_of(root), client, clock=clock)
    assert crash_file.read_text() == "0"  # the worker did crash once
    assert client.starts == starts + 1 and client.pid != pid
    assert result is not None and result.event.new_data is not None
    assert len([b for _, b in der.iter_blocks() if isinstance(b.event, m.ExecuteTransform)]) == 1
    assert verify_dataset(der, inputs_of(root), client).ok


def test_two_crashes_give_up_and_commit_nothing(
    tmp_path: Path, client: EngineClient, crash_file: Path
) -> None:
    clock = StepClock()
    root = make_root(tmp_path, "root")
    push_csv(root, tmp_path / "in", CSV1, clock)
    der = make_derivative(tmp_path, "der", [(root, "cities")], QUERIES)
    head = der.head()
    paths = OutputPaths.under(tmp_path / "w")
    plan = plan_transform(der, inputs_of(root), system_time=clock(), paths=paths)
    assert plan is not None
    clear_outputs(paths)
    starts = client.starts
    crash_file.write_text("2")
    resp = client.execute_transform(plan.request)
    assert isinstance(resp, TransformInternalError) and "engine failed" in resp.message
    assert crash_file.read_text() == "0"  # exactly one retry: two attempts, two crashes
    assert not paths.new_data_path.exists()  # partial output removed
    assert der.head() == head and not any(der.layout.data_dir.iterdir())
    assert client.starts == starts + 1  # the first attempt used the running worker


def test_idle_worker_is_stopped_and_restarted_lazily(tmp_path: Path, client: EngineClient) -> None:
    clock = StepClock()
    root = make_root(tmp_path, "root")
    push_csv(root, tmp_path / "in", CSV1, clock)
    der = make_derivative(tmp_path, "der", [(root, "cities")], QUERIES)
    client.idle_timeout = 0.5
    client.start()
    assert run_transform(der, inputs_of(root), client, clock=clock) is not None
    for _ in range(100):
        if not client.running:
            break
        time.sleep(0.1)
    assert not client.running


def test_isolated_worker_has_no_network(tmp_path: Path) -> None:
    """``isolate_network=True``: the worker runs in its own namespace with only loopback."""
    clock = StepClock()
    root = make_root(tmp_path, "root")
    push_csv(root, tmp_path / "in", CSV1, clock)
    der = make_derivative(tmp_path, "der", [(root, "cities")], QUERIES)
    with EngineClient(master="local[1]", isolate_network=True, idle_timeout=0) as c:
        assert run_transform(der, inputs_of(root), c, clock=clock) is not None
        assert c.pid is not None
        lines = Path(f"/proc/{c.pid}/net/dev").read_text().splitlines()[2:]
        assert [ln.split(":")[0].strip() for ln in lines] == ["lo"]
        assert Path(f"/proc/{c.pid}/ns/net").resolve() != Path("/proc/self/ns/net").resolve()
    assert verify_dataset(der, inputs_of(root), None, integrity_only=True).ok
