"""Verification through a Spark standalone cluster on other hosts of the test network.

A master and two workers from the pyspark distribution (``spark-class ...Master`` /
``...Worker``) run as separate processes on lab hosts 2 and 3 (``sim.netlab``); the node's
engine (the ``odf-node dataset verify`` CLI on host 1, its Spark driver bound to host 1's
address) verifies a derivative through ``spark://10.77.0.12:7077``. The executors ran on both
workers (their work directories and the master's JSON API say so), the verdict equals the
local-mode one, and a forged block is still disputed. The lab hosts share this machine's file
system, so the executors read the inputs' parquet files at the same paths as the driver: the
"same path on shared storage" deployment of docs/spark-engine.md.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pyspark
import pytest
from daemon_harness import CITIES_SNAPSHOT, ROOT, descendants
from multihost import lab_network
from netns import require_loopback_only

from sim.netlab import NetLab

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

SPARK_HOME = Path(pyspark.__file__).resolve().parent
MASTER_HOST, WORKER_HOSTS, DRIVER_HOST = 2, (2, 3), 1
SNAPSHOTS = (
    CITIES_SNAPSHOT
    + """\
kind: DatasetSnapshot
version: 1
content:
  name: big-cities
  kind: Derivative
  metadata:
    - kind: SetTransform
      inputs:
        - datasetRef: cities
      transform:
        kind: Sql
        engine: spark
        queries:
          - query: >-
              SELECT op, event_time, city, population * 2 AS pop2
              FROM cities WHERE population > 100
"""
)
CSV = (
    "event_time,city,population\n"
    "2020-01-01T00:00:00Z,A,1000\n2020-01-02T00:00:00Z,B,2000\n2020-01-03T00:00:00Z,C,30\n"
)
CSV2 = "event_time,city,population\n2020-01-04T00:00:00Z,D,4000\n"


class SparkCluster:
    """A standalone master and workers on lab hosts; every process ended by PID."""

    def __init__(self, lab: NetLab, base: Path) -> None:
        self.lab, self.base = lab, base
        self.procs: list[subprocess.Popen[bytes]] = []
        self.work_dirs: dict[int, Path] = {}
        self.master_url = f"spark://{lab.address(MASTER_HOST)}:7077"

    def _spark_class(self, k: int, name: str, args: list[str]) -> None:
        env = {
            **os.environ,
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_LOCAL_IP": self.lab.address(k),
            "SPARK_NO_DAEMONIZE": "1",
        }
        with open(self.base / f"{name}.log", "ab") as log:
            self.procs.append(
                self.lab.popen(
                    k,
                    [str(SPARK_HOME / "bin" / "spark-class"), *args],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            )

    def start(self) -> None:
        host = self.lab.address(MASTER_HOST)
        self._spark_class(
            MASTER_HOST,
            "master",
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                host,
                "--port",
                "7077",
                "--webui-port",
                "8080",
            ],
        )
        for i, k in enumerate(WORKER_HOSTS):
            work = self.base / f"worker{i}"
            work.mkdir()
            self.work_dirs[k] = work
            self._spark_class(
                k,
                f"worker{i}",
                [
                    "org.apache.spark.deploy.worker.Worker",
                    self.master_url,
                    "--host",
                    self.lab.address(k),
                    "--cores",
                    "1",
                    "--memory",
                    "1g",
                    "--work-dir",
                    str(work),
                    "--webui-port",
                    str(8081 + i),
                ],
            )

    def master_state(self) -> dict[str, Any]:
        """The master's JSON API, read from the driver's host."""
        url = f"http://{self.lab.address(MASTER_HOST)}:8080/json/"
        code = (
            "import urllib.request,sys;"
            "o=urllib.request.build_opener(urllib.request.ProxyHandler({}));"
            f"sys.stdout.write(o.open({url!r},timeout=10).read().decode())"
        )
        out = self.lab.run(DRIVER_HOST, [sys.executable, "-c", code])
        return json.loads(out.stdout) if out.returncode == 0 else {}

    def wait_workers(self, n: int, timeout: float = 180.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"a Spark process exited:\n{self.tail()}")
            state = self.master_state()
            if sum(w.get("state") == "ALIVE" for w in state.get("workers", [])) >= n:
                return state
            time.sleep(1)
        raise RuntimeError(f"{n} Spark workers not registered after {timeout} s:\n{self.tail()}")

    def executors_ran(self) -> dict[int, list[str]]:
        """Per worker host, the executor directories its work dir holds (app-*/<id>/)."""
        return {
            k: sorted(str(p.relative_to(d)) for p in d.glob("app-*/*") if p.is_dir())
            for k, d in self.work_dirs.items()
        }

    def tail(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}"
            for p in sorted(self.base.glob("*.log"))
        )

    def stop(self) -> None:
        for p in self.procs:
            kids = descendants(p.pid)  # executors the workers launched
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
            for pid in kids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    require_loopback_only()
    base = tmp_path_factory.mktemp("spark")
    with lab_network(3) as lab:
        c = SparkCluster(lab, base)
        try:
            c.start()  # the JVMs start while the test builds its datasets
            yield c
        finally:
            c.stop()


def _cli(*args: str, home: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "node.cli", *args, "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        check=False,
    )


def _verify_on_cluster(c: SparkCluster, home: Path, ref: str) -> tuple[dict[str, Any], float]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("ODF_NODE_")},
        "ODF_NODE_NETWORK_ISOLATION": "open",
        "ODF_NODE_ENGINE_DRIVER_HOST": c.lab.address(DRIVER_HOST),
    }
    t0 = time.monotonic()
    out = c.lab.run(
        DRIVER_HOST,
        [
            sys.executable,
            "-m",
            "node.cli",
            "dataset",
            "verify",
            ref,
            "--spark-master",
            c.master_url,
            "--home",
            str(home),
            "--json",
        ],
        timeout=600,
        env=env,
        cwd=ROOT,
    )
    took = time.monotonic() - t0
    assert out.stdout, out.stderr
    return json.loads(out.stdout), took


def _forge(home: Path, scratch: Path, engine: Any) -> str:
    """A malicious owner: the real transform, then tampered output, committed."""
    from coordinator.transform import OutputPaths, TransformSuccess, commit_transform
    from coordinator.transform.plan import clear_outputs, plan_transform, resolve_inputs
    from node.home import NodeHome, system_clock

    repo = NodeHome(home).repository()
    der = repo.open("big-cities")
    paths = OutputPaths.under(scratch)
    plan = plan_transform(
        der, resolve_inputs(der, repo.open), system_time=system_clock(), paths=paths
    )
    assert plan is not None
    clear_outputs(paths)
    resp = engine.execute_transform(plan.request)
    assert isinstance(resp, TransformSuccess), resp
    table = pq.read_table(paths.new_data_path)
    i = table.schema.get_field_index("pop2")
    table = table.set_column(i, "pop2", pa.array([7] * table.num_rows, pa.int64()))
    pq.write_table(table, paths.new_data_path)
    result = commit_transform(der, plan, resp)
    assert result.new_head is not None
    return str(result.new_head)


def _verdict(result: dict[str, Any]) -> dict[str, Any]:
    replay = result["replay"]
    return {
        "problems": result["problems"],
        "mismatch": replay and replay["mismatch"],
        "error": replay and replay["error"],
        "not_reproducible": replay and replay.get("not_reproducible"),
    }


def test_verify_through_a_standalone_cluster(cluster: SparkCluster, tmp_path: Path) -> None:
    """One honest transform step, then a forged one, on a local engine; the cluster's verify
    replays both (the honest one matches, the forged one is the mismatch) exactly as local
    mode does."""
    from node.app.datasets import DatasetUseCases
    from node.engine_client import EngineClient
    from node.home import NodeHome

    home = tmp_path / "owner"
    assert _cli("init", home=home).returncode == 0
    (tmp_path / "s.yaml").write_text(SNAPSHOTS)
    (tmp_path / "c.csv").write_text(CSV)
    (tmp_path / "c2.csv").write_text(CSV2)
    for args in (
        ("dataset", "create", str(tmp_path / "s.yaml")),
        ("dataset", "ingest", "cities", str(tmp_path / "c.csv")),
    ):
        out = _cli(*args, home=home)
        assert out.returncode == 0, out.stdout + out.stderr
    with EngineClient(master="local[1]", idle_timeout=0) as engine:
        uc = DatasetUseCases(NodeHome(home).repository(), lambda: engine)
        honest = asyncio.run(uc.transform("big-cities", publish=False))
        assert honest.new_head is not None
        out = _cli("dataset", "ingest", "cities", str(tmp_path / "c2.csv"), home=home)
        assert out.returncode == 0, out.stderr
        forged = _forge(home, tmp_path / "forge", engine)
        engine.start()  # warm, so the local figure below is the verify alone
        t0 = time.monotonic()
        local = asyncio.run(uc.verify("big-cities")).to_json()
        local_s = time.monotonic() - t0

    # Like for like with the cluster run below: a CLI process that starts its own driver.
    t0 = time.monotonic()
    cli_local = _cli(
        "dataset", "verify", "big-cities", "--spark-master", "local[1]", "--json", home=home
    )
    cli_local_s = time.monotonic() - t0
    assert _verdict(json.loads(cli_local.stdout)) == _verdict(local)
    cluster.wait_workers(2)
    clustered, cluster_s = _verify_on_cluster(cluster, home, "big-cities")
    print(
        f"verify of a 2-step derivative: local[1] warm engine {local_s:.1f} s, local[1] CLI "
        f"(JVM started) {cli_local_s:.1f} s; spark standalone with 2 workers, CLI (driver and "
        f"executors started) {cluster_s:.1f} s"
    )
    mismatch = clustered["replay"]["mismatch"]
    assert mismatch is not None and mismatch["block_hash"] == forged, clustered
    assert _verdict(clustered) == _verdict(local)

    # The executors ran on both workers, and the master saw the application.
    ran = cluster.executors_ran()
    assert all(ran[k] for k in WORKER_HOSTS), ran
    state = cluster.master_state()
    apps = state.get("completedapps", []) + state.get("activeapps", [])
    assert any(a.get("name") == "odf-engine-spark" for a in apps), apps
