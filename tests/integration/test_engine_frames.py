"""The node's framed protocol to a real DataFusion 51 worker (``protocol="frames"``).

* a replay's requests ask for Arrow IPC output: the worker writes no Parquet file, and the
  node's in-memory hash of the Arrow file is the published hash (the one of the owner's Parquet
  file); a request without the flag gets Parquet (DataFusion 51 and 41);
* several batches in flight: the worker killed (SIGKILL) mid-batch is restarted and every
  unanswered batch is sent again, each answered as if nothing happened; a crash inside a
  request (the worker's crash hook) likewise;
* a batch that crashes the worker twice fails with an internal error, the next one runs;
* a batch over the memory limit fails with ``TransformMemoryExceeded`` and stops the worker;
* a replay through a gRPC client (not the router's framed one) still verifies;
* a replay through the router still disputes a forged slice, with the evidence hashed from the
  file.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from coordinator.data import logical_hash
from coordinator.metadata import model as m
from coordinator.metadata.timestamp import Timestamp
from coordinator.multiformats import Multihash
from coordinator.storage.dataset import Dataset
from coordinator.transform import OutputPaths, TransformSuccess, commit_transform
from coordinator.transform.model import (
    TransformInternalError,
    TransformMemoryExceeded,
    TransformRequest,
    TransformResponse,
)
from coordinator.transform.output import (
    arrow_output_path,
    hash_arrow_output,
    read_arrow_output,
    write_parquet_output,
)
from coordinator.transform.plan import ChainCache, clear_outputs, plan_replay, plan_transform
from coordinator.transform.run import run_transform
from coordinator.transform.testing import StepClock, inputs_of, make_derivative, make_root, push_csv
from coordinator.transform.verify import ReplayVerdict, replay_transforms
from engine.worker import CRASH_ENV
from node.engine_client import EngineClient
from node.engine_router import EngineRouter, datafusion_python

pytestmark = pytest.mark.integration

QUERY = "SELECT op, event_time, upper(city) AS city, population * 10 AS p10 FROM cities"


def no_spark() -> EngineClient:
    raise AssertionError("Spark must not be started for DataFusion transforms")


def chain(tmp: Path, blocks: int) -> tuple[Dataset, Dataset, list[m.ExecuteTransform]]:
    """A root and a DataFusion derivative of ``blocks`` transforms (made by the router)."""
    clock = StepClock(Timestamp.parse("2026-02-01T00:00:00Z"))
    root = make_root(tmp, "root")
    der = make_derivative(tmp, "der", [(root, "cities")], [(None, QUERY)], engine="datafusion")
    router = EngineRouter(no_spark, idle_timeout=0, versions=("51.0.0",))
    events = []
    try:
        for k in range(blocks):
            rows = "".join(
                f"2020-01-{1 + k:02d}T00:00:0{i}Z,c{k}{i},{k * 10 + i}\n" for i in range(3)
            )
            push_csv(root, tmp / "in", "event_time,city,population\n" + rows, clock)
            res = run_transform(der, inputs_of(root), router, clock=clock)
            assert res is not None
            events.append(res.event)
    finally:
        router.close()
    return root, der, events


def replay_requests(
    tmp: Path, root: Dataset, der: Dataset, prefix: str = "r"
) -> list[TransformRequest]:
    """The replay's requests, outputs under ``tmp/<prefix><k>``."""
    cache = ChainCache()
    blocks = [
        b for _, b in reversed(list(der.iter_blocks())) if isinstance(b.event, m.ExecuteTransform)
    ]
    out = []
    for k, b in enumerate(blocks):
        paths = OutputPaths.under(tmp / f"{prefix}{k}")
        clear_outputs(paths)
        out.append(plan_replay(der, inputs_of(root), b, paths=paths, cache=cache).request)
    return out


def frames_client(**env: str) -> EngineClient:
    return EngineClient(
        engine="datafusion",
        python=str(datafusion_python("51.0.0")),
        idle_timeout=0,
        protocol="frames",
        env=env,
    )


def assert_reproduced(
    requests: list[TransformRequest],
    answers: list[TransformResponse],
    events: list[m.ExecuteTransform],
) -> None:
    assert len(answers) == len(requests) == len(events)
    for req, answer, event in zip(requests, answers, events, strict=True):
        assert isinstance(answer, TransformSuccess), answer
        assert req.arrow_output and answer.arrow_output and event.new_data is not None
        assert not req.new_data_path.exists()  # no Parquet file
        table = read_arrow_output(arrow_output_path(req.new_data_path))
        # The same hash as the node computed from the owner's Parquet file.
        assert hash_arrow_output(table) == event.new_data.logical_hash


def test_batches_in_flight_survive_a_worker_killed_mid_batch(tmp_path: Path) -> None:
    root, der, events = chain(tmp_path, 6)
    requests = replay_requests(tmp_path, root, der)
    client = frames_client()
    try:
        recovered = False
        for attempt in range(5):
            # A live worker first (after a previous attempt's kill, the next call starts one).
            assert_reproduced(requests, client.execute_transform_batch(requests), events)
            pid, starts = client.pid, client.starts
            assert pid is not None and starts == attempt + 1
            # Three batches in flight at once, the worker killed while it runs the first.
            batches = [replay_requests(tmp_path, root, der, f"a{attempt}b{i}-") for i in range(3)]
            futures = [client.submit_transform_batch(b) for b in batches]
            os.kill(pid, signal.SIGKILL)
            for batch, f in zip(batches, futures, strict=True):
                assert_reproduced(batch, f.result(timeout=120), events)
            if client.starts == starts + 1 and client.pid != pid:
                recovered = True  # restarted with batches in flight, every answer right
                break
            # No restart: the worker had answered all three before the kill landed (this
            # process was descheduled between the submits and the kill); nothing was in
            # flight to recover, so try again.
            assert client.starts == starts
        assert recovered, "the kill never landed while a batch was in flight in 5 attempts"
    finally:
        client.close()


def test_a_crash_inside_a_request_is_retried_once_then_fails_the_batch(tmp_path: Path) -> None:
    root, der, events = chain(tmp_path, 3)
    requests = replay_requests(tmp_path, root, der)
    crash = tmp_path / "crash"
    crash.write_text("1")  # the first request the worker runs kills it (partial output left)
    client = frames_client(**{CRASH_ENV: str(crash)})
    try:
        others = replay_requests(tmp_path, root, der, "s")
        first = client.submit_transform_batch(requests)
        second = client.submit_transform_batch(others)  # in flight behind the crash
        assert_reproduced(requests, first.result(timeout=120), events)
        assert_reproduced(others, second.result(timeout=120), events)
        assert client.starts == 2 and crash.read_text() == "0"
        crash.write_text("2")  # the batch kills the worker, and its retry too
        answers = client.execute_transform_batch(requests)
        assert all(isinstance(a, TransformInternalError) for a in answers)
        assert "engine failed" in answers[0].message  # type: ignore[union-attr]
        assert not any(r.new_data_path.exists() for r in requests)  # partial output removed
        assert_reproduced(requests, client.execute_transform_batch(requests), events)
        assert client.starts == 4
    finally:
        client.close()


def test_a_forged_slice_is_still_disputed_with_evidence_from_the_file(tmp_path: Path) -> None:
    root, der, _events = chain(tmp_path, 2)
    router = EngineRouter(no_spark, idle_timeout=0, versions=("51.0.0",))
    try:
        # The next step run for real, one value changed before commit (hashes consistent).
        clock = StepClock(Timestamp.parse("2026-02-03T00:00:00Z"))
        push_csv(
            root, tmp_path / "in", "event_time,city,population\n2020-02-01T00:00:00Z,z,7\n", clock
        )
        paths = OutputPaths.under(tmp_path / "forge")
        plan = plan_transform(der, inputs_of(root), system_time=clock(), paths=paths)
        assert plan is not None
        clear_outputs(paths)
        resp = router.execute_transform(plan.request)
        assert isinstance(resp, TransformSuccess) and not resp.arrow_output  # an owner's run
        honest = Multihash.from_multibase(logical_hash(paths.new_data_path))
        t = pq.read_table(paths.new_data_path)
        i = t.schema.get_field_index("city")
        pq.write_table(
            t.set_column(i, "city", pa.array(["FORGED"] * t.num_rows)), paths.new_data_path
        )
        assert commit_transform(der, plan, resp).new_head is not None
        forged_head = der.head()

        report = replay_transforms(der, inputs_of(root), router)
        assert report.verdict is ReplayVerdict.MISMATCH and report.blocks_replayed == 2
        assert report.mismatch is not None and report.mismatch.block_hash == forged_head
        actual = report.mismatch.actual.new_data
        assert actual is not None and actual.logical_hash == honest  # what the query yields
        assert any(d.startswith("new_data.logical_hash") for d in report.mismatch.differences)
    finally:
        router.close()


def test_a_grpc_worker_still_replays_through_submitted_batches(tmp_path: Path) -> None:
    """A DataFusion worker on kamu's gRPC protocol (not the router's): the replay submits its
    batches to the client, which runs them on a background thread."""
    root, der, _events = chain(tmp_path, 4)
    client = EngineClient(
        engine="datafusion", python=str(datafusion_python("51.0.0")), idle_timeout=0
    )
    try:
        report = replay_transforms(der, inputs_of(root), client)
        assert report.verdict is ReplayVerdict.OK and report.blocks_replayed == 4
        assert client.protocol == "grpc" and client.starts == 1
    finally:
        client.close()


def test_a_batch_over_the_memory_limit_fails_typed_and_stops_the_worker(tmp_path: Path) -> None:
    root, der, _events = chain(tmp_path, 2)
    requests = replay_requests(tmp_path, root, der)
    client = EngineClient(
        engine="datafusion",
        python=str(datafusion_python("51.0.0")),
        idle_timeout=0,
        protocol="frames",
        memory_limit=1 << 20,  # far below any Python process: every batch exceeds it
        memory_poll=0.05,
    )
    try:
        answers = client.execute_transform_batch(requests)
        assert all(isinstance(a, TransformMemoryExceeded) for a in answers), answers
        assert answers[0].peak_bytes > 1 << 20  # type: ignore[union-attr]
        assert not client.running and client.starts == 1  # stopped, not retried
        assert not any(r.new_data_path.exists() for r in requests)
    finally:
        client.close()


@pytest.mark.parametrize("version", ["51.0.0", "41.0.0"])
def test_a_replay_gets_arrow_output_hashed_as_the_parquet_file(
    tmp_path: Path, version: str
) -> None:
    root, der, events = chain(tmp_path, 3)
    client = EngineClient(
        engine="datafusion",
        python=str(datafusion_python(version)),
        idle_timeout=0,
        protocol="frames",
    )
    try:
        arrow = replay_requests(tmp_path, root, der, "a")
        assert_reproduced(arrow, client.execute_transform_batch(arrow), events)
        for k, req in enumerate(arrow):
            # The Parquet file the node writes from it (a mismatch's evidence) hashes alike.
            table = read_arrow_output(arrow_output_path(req.new_data_path))
            write_parquet_output(table, tmp_path / f"evidence{k}")
            new_data = events[k].new_data
            assert new_data is not None
            assert logical_hash(tmp_path / f"evidence{k}") == new_data.logical_hash.to_multibase()

        # Without the flag (an owner's run, kamu's protocol): Parquet, as always.
        plain = [replace(r, arrow_output=False) for r in replay_requests(tmp_path, root, der, "p")]
        answers = client.execute_transform_batch(plain)
        for req, answer, event in zip(plain, answers, events, strict=True):
            assert isinstance(answer, TransformSuccess) and not answer.arrow_output
            assert not arrow_output_path(req.new_data_path).exists()
            assert event.new_data is not None
            assert logical_hash(req.new_data_path) == event.new_data.logical_hash.to_multibase()
    finally:
        client.close()


RUN_IN_PROCESS = r"""
import pickle, sys
from engine.datafusion_engine import DataFusionEngine
engine = DataFusionEngine(arrow_max_bytes=int(sys.argv[2]))
for req in pickle.load(open(sys.argv[1], "rb")):
    print(engine.execute_transform(req).arrow_output)
"""


def test_an_output_over_the_arrow_limit_is_written_as_parquet(tmp_path: Path) -> None:
    root, der, events = chain(tmp_path, 2)
    requests = replay_requests(tmp_path, root, der)
    batch = tmp_path / "requests.pickle"
    batch.write_bytes(pickle.dumps(requests))
    run = subprocess.run(
        [str(datafusion_python("51.0.0")), "-c", RUN_IN_PROCESS, str(batch), "100"],
        cwd=Path(__file__).resolve().parents[2],
        check=True,
        capture_output=True,
        text=True,
    )
    assert run.stdout.split() == ["False", "False"]  # 3 rows are more than 100 bytes
    for req, event in zip(requests, events, strict=True):
        assert req.arrow_output and not arrow_output_path(req.new_data_path).exists()
        assert event.new_data is not None
        assert logical_hash(req.new_data_path) == event.new_data.logical_hash.to_multibase()


def test_a_long_replay_grows_a_second_worker_and_spreads_batches(tmp_path: Path) -> None:
    root, der, events = chain(tmp_path, 12)
    router = EngineRouter(no_spark, idle_timeout=0, versions=("51.0.0",), datafusion_workers=2)
    try:
        first_batch = replay_requests(tmp_path, root, der, "a")[:8]
        second_batch = replay_requests(tmp_path, root, der, "b")[:8]
        f1 = router.submit_transform_batch(first_batch)  # starts the first worker
        # A second batch while the first worker holds 8 requests (it has just got them): it
        # still goes to the first worker, and a second one starts in the background.
        f2 = router.submit_transform_batch(second_batch)
        first = router.datafusion_pool("51.0.0")[0]
        assert_reproduced(first_batch, f1.result(timeout=120), events[:8])
        assert_reproduced(second_batch, f2.result(timeout=120), events[:8])
        pool = router.datafusion_pool("51.0.0")
        assert len(pool) == 2 and pool[0] is first and first.batches_submitted == 2
        deadline = time.monotonic() + 60
        while not pool[1].ready:
            assert time.monotonic() < deadline, "the second worker never came up"
            time.sleep(0.05)
        # Both ready and idle: batches go to the one with fewer requests in flight.
        batches = [replay_requests(tmp_path, root, der, f"c{i}-") for i in range(4)]
        futures = [router.submit_transform_batch(b) for b in batches]
        for b, f in zip(batches, futures, strict=True):
            assert_reproduced(b, f.result(timeout=120), events)
        assert pool[1].batches_submitted >= 1 and first.batches_submitted >= 3
        assert pool[0].pid is not None and pool[1].pid is not None
        assert pool[0].pid != pool[1].pid  # two worker processes
        # A whole replay over the pool.
        report = replay_transforms(der, inputs_of(root), router)
        assert report.verdict is ReplayVerdict.OK and report.blocks_replayed == 12
        # Stopped (as idle workers are), the pool grows back the same way.
        router.stop()
        assert not any(c.running for c in pool)
        again = [replay_requests(tmp_path, root, der, f"d{i}-") for i in range(2)]
        futures = [router.submit_transform_batch(b) for b in again]
        for b, f in zip(again, futures, strict=True):
            assert_reproduced(b, f.result(timeout=120), events)
        deadline = time.monotonic() + 60
        while not pool[1].ready:
            assert time.monotonic() < deadline, "the second worker never came back"
            time.sleep(0.05)
        assert router.datafusion_pool("51.0.0") == pool and pool[1].starts == 2
    finally:
        router.close()


def test_a_short_replay_or_one_worker_never_starts_another(tmp_path: Path) -> None:
    root, der, _events = chain(tmp_path, 4)
    router = EngineRouter(no_spark, idle_timeout=0, versions=("51.0.0",), datafusion_workers=2)
    single = EngineRouter(no_spark, idle_timeout=0, versions=("51.0.0",), datafusion_workers=1)
    try:
        assert replay_transforms(der, inputs_of(root), router).verdict is ReplayVerdict.OK
        assert len(router.datafusion_pool("51.0.0")) == 1  # never 8 requests in flight
        batches = [replay_requests(tmp_path, root, der, f"s{i}-") for i in range(4)]
        for f in [single.submit_transform_batch(b) for b in batches]:
            f.result(timeout=120)
        assert len(single.datafusion_pool("51.0.0")) == 1
    finally:
        router.close()
        single.close()
