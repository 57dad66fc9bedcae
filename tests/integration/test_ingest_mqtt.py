"""``Mqtt`` polling sources against a real broker (Debian's ``mosquitto``, ``make test-deps``).

The broker is started by the test on a random loopback port with a generated configuration
(no persistence, listening on 127.0.0.1 only) and stopped by its PID; the test runs in a
loopback-only network namespace (``unshare -rn``). Messages are published with paho-mqtt, the
node's own client library, and ingested by ``odf-node dataset pull ALIAS`` (no daemon), as
kamu-cli's MQTT fetch does (kamu-cli, ``src/infra/core/src/services/ingest/fetch_service/mqtt.rs``):
the messages of the dataset's persistent session since the last poll.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from paho.mqtt import publish
from typer.testing import CliRunner

from coordinator.metadata import model as m
from coordinator.metadata.timestamp import Timestamp
from coordinator.storage.repository import DatasetRepository
from node.cli import app


def _mosquitto() -> str:
    found = shutil.which("mosquitto") or (
        "/usr/sbin/mosquitto" if os.access("/usr/sbin/mosquitto", os.X_OK) else None
    )
    if found is None:
        pytest.fail("mosquitto is not installed: `make test-deps` (apt-get install mosquitto)")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[int]:
    port = _free_port()
    conf = tmp_path / "mosquitto.conf"
    # `user root`: in the test's user namespace we are uid 0, and the default would drop to a
    # `mosquitto` user that is not mapped there.
    conf.write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\nuser root\n"
        "log_dest none\n"
    )
    proc = subprocess.Popen(
        [_mosquitto(), "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    err = proc.stderr.read().decode() if proc.stderr else ""
                    pytest.fail(f"mosquitto did not start: {err}")
                time.sleep(0.05)
        yield port
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.stderr:
            proc.stderr.close()


def run(home: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, [*args, "--home", str(home)])
    return result.exit_code, result.output


def make_home(tmp: Path, **ingest: object) -> Path:
    home = tmp / "home"
    home.mkdir()
    # A short idle timeout keeps each poll quick (a loopback broker answers at once).
    settings = {"mqtt_idle_timeout_s": 0.3, **ingest}
    (home / "config.toml").write_text(
        "[ingest]\n" + "".join(f"{k} = {v!r}\n" for k, v in settings.items())
    )
    code, text = run(home, "init")  # keeps that config.toml, adds the node key
    assert code == 0, text
    return home


def create(
    home: Path,
    tmp: Path,
    name: str,
    port: int,
    topic: str = "sensors/+/temp",
    host: str = "127.0.0.1",
) -> tuple[int, str]:
    snap = tmp / f"{name}.yaml"
    snap.write_text(
        f"""\
kind: DatasetSnapshot
version: 1
content:
  name: {name}
  kind: Root
  metadata:
    - kind: SetPollingSource
      fetch:
        kind: Mqtt
        host: {host}
        port: {port}
        topics:
          - path: {topic}
            qos: AtLeastOnce
      read:
        kind: NdJson
        schema: ["event_time TIMESTAMP", "sensor STRING", "value DOUBLE"]
      merge:
        kind: Ledger
        primaryKey: [event_time, sensor]
"""
    )
    return run(home, "dataset", "create", str(snap))


def pull(home: Path, alias: str) -> tuple[int, dict[str, object] | str]:
    code, text = run(home, "dataset", "pull", alias, "--json")
    if code != 0:
        return code, text
    return code, json.loads(text)


def send(port: int, *messages: tuple[str, object], retain: bool = False) -> None:
    publish.multiple(
        [
            {
                "topic": t,
                "payload": p if isinstance(p, str) else json.dumps(p),
                "qos": 1,
                "retain": retain,
            }
            for t, p in messages
        ],
        hostname="127.0.0.1",
        port=port,
    )


def reading(sensor: str, minute: int, value: float) -> tuple[str, dict[str, object]]:
    return (
        f"sensors/{sensor}/temp",
        {"event_time": f"2050-01-01T12:{minute:02d}:00Z", "sensor": sensor, "value": value},
    )


def rows(home: Path, alias: str) -> list[dict[str, object]]:
    repo = DatasetRepository(
        home / "datasets", home / "keys", clock=lambda: Timestamp.parse("2050-01-01T00:00:00Z")
    )
    ds = repo.open(alias)
    out: list[dict[str, object]] = []
    blocks = [b.event for _, b in ds.iter_blocks()]
    for e in reversed(blocks):
        if isinstance(e, m.AddData) and e.new_data is not None:
            out += pq.read_table(ds.data.path_of(e.new_data.physical_hash)).to_pylist()
    return out


def test_mqtt_source_ingests_the_messages_since_the_last_poll(tmp_path: Path, broker: int) -> None:
    home = make_home(tmp_path)
    # A retained message published before the dataset exists: the first subscription gets it.
    send(broker, reading("a", 0, 20.5), retain=True)
    assert create(home, tmp_path, "temp", broker)[0] == 0

    code, out = pull(home, "temp")
    assert code == 0 and isinstance(out, dict), out
    assert out["source"] == "polling" and out["comparison"] == "local-behind"
    assert out["records"] == 1 and out["new_blocks"] == 2  # SetDataSchema + AddData
    assert out["source_state"] is None  # kamu records none: the broker's session resumes

    # Published while no poll is connected: the broker keeps them for the dataset's session
    # (QoS 1, persistent session); the retained message is not delivered again.
    send(broker, reading("a", 1, 21.0), reading("b", 1, 18.25), ("sensors/b/humidity", "{}"))
    send(broker, reading("b", 2, 18.5))
    code, out = pull(home, "temp")
    assert code == 0 and isinstance(out, dict), out
    assert out["records"] == 3 and out["new_blocks"] == 1
    assert out["watermark"] == "2050-01-01T12:02:00Z"

    code, out = pull(home, "temp")
    assert code == 0 and isinstance(out, dict)
    assert out["comparison"] == "equal" and out["records"] == 0 and out["new_blocks"] == 0

    got = rows(home, "temp")
    assert [(r["offset"], r["sensor"], r["value"]) for r in got] == [
        (0, "a", 20.5),
        (1, "a", 21.0),
        (2, "b", 18.25),
        (3, "b", 18.5),
    ]
    assert {r["op"] for r in got} == {0}
    code, text = run(home, "dataset", "verify", "temp", "--json")
    assert code == 0 and json.loads(text)["ok"], text


def test_a_poll_takes_at_most_mqtt_max_records_and_the_rest_waits(
    tmp_path: Path, broker: int
) -> None:
    home = make_home(tmp_path, mqtt_max_records=2)
    assert create(home, tmp_path, "temp", broker)[0] == 0
    code, out = pull(home, "temp")  # subscribes; nothing yet
    assert code == 0 and isinstance(out, dict) and out["records"] == 0

    send(broker, *(reading("a", i, float(i)) for i in range(5)))
    counts = []
    for _ in range(3):
        code, out = pull(home, "temp")
        assert code == 0 and isinstance(out, dict), out
        counts.append(out["records"])
    # The message after the second is not acknowledged: the broker delivers it next time.
    assert counts == [2, 2, 1]
    assert [r["value"] for r in rows(home, "temp")] == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_bad_mqtt_sources_are_refused_and_commit_nothing(tmp_path: Path, broker: int) -> None:
    home = make_home(tmp_path)

    # A message that does not match the schema: named; nothing committed.
    assert create(home, tmp_path, "temp", broker)[0] == 0
    assert pull(home, "temp")[0] == 0
    send(broker, reading("a", 0, 1.0), ("sensors/a/temp", '{"event_time": "x", "value": 1}'))
    code, text = pull(home, "temp")
    assert code == 1 and "event_time" in str(text), text
    assert rows(home, "temp") == []

    # A broker nobody runs.
    assert create(home, tmp_path, "down", _free_port())[0] == 0
    code, text = pull(home, "down")
    assert code == 1 and "MQTT broker" in str(text) and "cannot connect" in str(text), text

    # An address the source policy refuses (loopback-only by default): no connection tried.
    assert create(home, tmp_path, "far", broker, host="192.0.2.1")[0] == 0
    code, text = pull(home, "far")
    assert code == 1 and "192.0.2.1" in str(text) and "refused" in str(text), text

    # A topic filter MQTT does not allow: kamu's add accepts it, its pull refuses it; so here.
    assert create(home, tmp_path, "badtopic", broker, topic="sensors/#/temp")[0] == 0
    code, text = pull(home, "badtopic")
    assert code == 1 and "not a valid topic filter" in str(text), text
    assert rows(home, "badtopic") == []
