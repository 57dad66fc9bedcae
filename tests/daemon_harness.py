"""Run real ``odf-node run`` daemons as child processes and talk to them over JSON-RPC.

Used by the end-to-end tests and the soak benchmark. Every daemon gets its own home, its own
embedded IPFS node and random loopback ports; it must run inside a loopback-only namespace (the
daemon itself refuses otherwise). Only processes started here are ever signalled, by PID.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from node.rpc.client import RpcCallError, call_sync
from node.rpc.cookie import cookie_path, read_cookie

ROOT = Path(__file__).resolve().parents[1]

CITIES_SNAPSHOT = """\
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
        schema: ["event_time TIMESTAMP", "city STRING", "population BIGINT"]
      merge:
        kind: Append
    - kind: SetVocab
      eventTimeColumn: event_time
---
"""
"""The root dataset the daemon tests publish (``cities``), ending with a document separator so
that a test appends its derivative's snapshot."""

BIG_CITIES_DF_SNAPSHOTS = (
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
        engine: datafusion
        query: |
          SELECT op, event_time, city, population * 2 AS pop2
          FROM cities WHERE population > 100
"""
)
"""``cities`` and a DataFusion derivative of it, ``big-cities`` (the trust and key-rotation
tests: a light node trusts or disputes its heads)."""

FAR_SNAPSHOT = """\
kind: DatasetSnapshot
version: 1
content:
  name: far
  kind: Root
  metadata:
    - kind: AddPushSource
      sourceName: default
      read:
        kind: Csv
        header: true
        schema: ["city STRING", "population BIGINT"]
      merge:
        kind: Append
"""
"""A root dataset without an event time, ``far``: the DHT tests' owner publishes it to a
subscriber that has to find the owner through the DHT."""

TEST_CONFIG: dict[str, dict[str, Any]] = {
    "rpc": {"port": 0},
    "http": {"port": 0},
    "p2p": {"port": 0},
    "engine": {"spark_master": "local[1]", "idle_timeout_s": 600},
    "pipeline": {"concurrency": 2, "retry_base_s": 1.0, "retry_cap_s": 5.0},
}


def forge_next_step(
    owner_home: Path, alias: str, scratch: Path, engine: Any, *, expect_rows: int | None = None
) -> str:
    """Act as a malicious owner: run the real transform of ``alias`` on ``engine`` (an engine
    client), set every ``pop2`` of its output to 123456 and commit it. Returns the new head."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from coordinator.transform import OutputPaths, TransformSuccess, commit_transform
    from coordinator.transform.plan import clear_outputs, plan_transform, resolve_inputs
    from node.home import NodeHome, system_clock

    repo = NodeHome(owner_home).repository()
    der = repo.open(alias)
    inputs = resolve_inputs(der, repo.open)
    paths = OutputPaths.under(scratch)
    plan = plan_transform(der, inputs, system_time=system_clock(), paths=paths)
    assert plan is not None
    clear_outputs(paths)
    resp = engine.execute_transform(plan.request)
    assert isinstance(resp, TransformSuccess), resp
    table = pq.read_table(paths.new_data_path)
    if expect_rows is not None:
        assert table.num_rows == expect_rows
    i = table.schema.get_field_index("pop2")
    forged = pa.array([123_456] * table.num_rows, pa.int64())
    pq.write_table(table.set_column(i, table.schema.field(i), forged), paths.new_data_path)
    result = commit_transform(der, plan, resp)
    assert result.new_head is not None
    return str(result.new_head)


def _toml(config: dict[str, dict[str, Any]]) -> str:
    lines = []
    for section, values in config.items():
        lines.append(f"[{section}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def descendants(pid: int) -> list[int]:
    """PIDs of every live descendant of ``pid`` (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out: list[int] = []
    stack = [pid]
    while stack:
        for c in children.get(stack.pop(), []):
            out.append(c)
            stack.append(c)
    return out


def node_pids(pid: int) -> dict[str, int]:
    """The node's own processes: the daemon and its libp2p process (``p2p.libp2p_child``).

    The IPFS node and the engine worker are services the daemon runs, measured on their own.
    """
    out = {"daemon": pid}
    for child in descendants(pid):
        if b"p2p.libp2p_child" in _cmdline(child):
            out["libp2p"] = child
    return out


def node_rss_mb(pid: int) -> dict[str, float]:
    """VmRSS (MiB) of each of the node's own processes and their ``total``."""
    out: dict[str, float] = {}
    for name, p in node_pids(pid).items():
        for line in Path(f"/proc/{p}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                out[name] = round(int(line.split()[1]) / 1024, 1)
    out["total"] = round(sum(out.values()), 1)
    return out


def node_cpu_s(pid: int) -> float:
    """CPU seconds used so far by the node's own processes together."""
    total = 0.0
    for p in node_pids(pid).values():
        fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


class NodeProcess:
    """One daemon process on its own home."""

    def __init__(
        self,
        home: Path,
        name: str,
        *,
        config: dict[str, dict[str, Any]] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.home = home
        self.name = name
        self.env = dict(env or {})
        """Extra environment variables of the daemon (``NOTIFY_SOCKET``, ``ODF_ENGINES_DIR``)."""
        self.config = {s: dict(v) for s, v in TEST_CONFIG.items()}
        for section, values in (config or {}).items():
            self.config.setdefault(section, {}).update(values)
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.token = ""
        self.log_path = home.with_name(home.name + ".log")
        self._orphans: list[int] = []

    def init(self) -> None:
        """Create the home and a test config (random ports, small Spark)."""
        subprocess.run(
            [sys.executable, "-m", "node.cli", "init", "--home", str(self.home)],
            check=True,
            capture_output=True,
            cwd=ROOT,
        )
        self.init_config()

    def init_config(self) -> None:
        """(Re)write the home's config from :attr:`config` (takes effect at the next start)."""
        (self.home / "config.toml").write_text(_toml(self.config))

    def launch(self) -> None:
        """Start the daemon without waiting."""
        cookie_path(self.home).unlink(missing_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("ODF_NODE_")}
        env.update(self.env)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "node.cli", "run", "--home", str(self.home)],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def wait_ready(self, timeout: float = 180.0) -> None:
        """Wait until the RPC cookie exists and ``rpc.ping`` answers."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited during start-up:\n{self.tail()}")
            if cookie_path(self.home).exists():
                self.url, self.token = read_cookie(self.home)
                try:
                    call_sync(self.url, self.token, "rpc.ping", None, 5)
                    return
                except RpcCallError as e:
                    if "Network is unreachable" in str(e):
                        # A bare `unshare -rn` leaves the loopback interface down: the daemon
                        # is up but nobody can reach it. Say so now, not after the timeout.
                        raise RuntimeError(
                            f"{self.name}: 127.0.0.1 is unreachable (the loopback interface is "
                            "down): run the tests as make test does, "
                            "unshare -rn bash -c 'ip link set lo up && exec ...'"
                        ) from e
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} not ready after {timeout:.0f} s:\n{self.tail()}")

    def call(self, method: str, timeout: float = 300.0, **params: Any) -> Any:
        """One JSON-RPC call."""
        return call_sync(self.url, self.token, method, params or None, timeout)

    def console_headers(self, timeout: float = 30.0) -> dict[str, str]:
        """Headers of a console page's ``POST /ui/rpc`` on a fresh session: ``console.login``'s
        one-time token redeemed at ``/ui/session`` for the session cookie."""
        base = self.url.removesuffix("/rpc")
        token = self.call("console.login")["url"].split("#", 1)[1]
        u = urllib.parse.urlsplit(base)
        conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port or 80, timeout=timeout)
        try:
            conn.request(
                "POST",
                "/ui/session",
                json.dumps({"token": token}).encode(),
                {"Content-Type": "application/json", "Origin": base},
            )
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                raise AssertionError(f"{self.name}: /ui/session answered {r.status}")
            cookie = (r.getheader("Set-Cookie") or "").split(";", 1)[0]
        finally:
            conn.close()
        return {"Cookie": cookie, "Origin": base, "Content-Type": "application/json"}

    def wait_for(
        self, what: str, probe: Callable[[], Any], timeout: float = 300.0, every: float = 0.5
    ) -> Any:
        """Poll ``probe`` until it returns a truthy value."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = probe()
            if value:
                return value
            time.sleep(every)
        raise AssertionError(f"{self.name}: timed out waiting for {what}\n{self.tail()}")

    def create_and_transform(
        self, snapshots: str, csv: Path, derivative: str = "big-cities"
    ) -> tuple[dict[str, str], str]:
        """As an owner: create the datasets of ``snapshots``, ingest ``csv`` into ``cities``,
        transform ``derivative`` and wait until the queued publications are done. Returns the
        DIDs by alias and the derivative's new head."""
        created = self.call("dataset.create", snapshot_yaml=snapshots)
        self.call("dataset.ingest", ref="cities", files=[str(csv)])
        tr = self.call("dataset.transform", ref=derivative)
        assert tr["up_to_date"] is False
        self.wait_for(
            "publications",
            lambda: (
                not self.call("work.list", state="pending")
                and not self.call("work.list", state="claimed")
            ),
        )
        assert not self.call("work.list", state="failed")
        return {c["alias"]: c["id"] for c in created}, str(tr["new_head"])

    def kill(self) -> None:
        """SIGKILL the daemon (children it started are ended after it, by PID)."""
        assert self.proc is not None
        self._orphans = descendants(self.proc.pid)
        workers = [pid for pid in self._orphans if b"engine.worker" in _cmdline(pid)]
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        # The engine worker holds the node's lifeline (node/lifeline.py) and ends itself and its
        # JVM the instant the node dies: nothing of it may remain 10 s later.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_cmdline(p) for p in workers):
            time.sleep(0.2)
        outlived = [p for p in workers if _cmdline(p)]
        self._end_orphans(keep_ipfs=True)
        if outlived:
            raise AssertionError(f"engine worker(s) {outlived} outlived their killed node")

    def _end_orphans(self, *, keep_ipfs: bool) -> None:
        for pid in self._orphans:
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            # The daemon itself must recover a left-behind IPFS node; the test checks that.
            if keep_ipfs and b"ipfs" in cmd:
                continue
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM, wait, then SIGKILL stragglers (ours only)."""
        if self.proc is None:
            return
        kids = descendants(self.proc.pid)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._orphans += kids
        self._end_orphans(keep_ipfs=False)
        self.proc = None

    def tail(self, n: int = 4000) -> str:
        """The end of the daemon's log."""
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""
