"""``Mqtt`` polling sources under floods, against a real broker (Debian's ``mosquitto``) on
loopback, inside ``unshare -rn``: a broker that keeps sending a message a little more often than
the idle timeout, and a message far larger than anything a poll should hold in memory. The
fetch (node/transfer/mqtt_fetch.py) runs in-process; docs/ingest-polling.md has the figures."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from paho.mqtt import client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from coordinator.errors import FetchError
from node.transfer.mqtt_fetch import fetch_mqtt
from node.transfer.policy import SourcePolicy


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\nuser root\n"
        "log_dest none\n"
    )
    proc = subprocess.Popen(
        ["/usr/sbin/mosquitto", "-c", str(conf)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "no mosquitto"
                time.sleep(0.05)
        yield port
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


def _fetch(port: int, target: Path, **kw: object) -> tuple[int, int]:
    got = fetch_mqtt(
        host="127.0.0.1",
        port=port,
        topics=[("flood/#", 1)],
        client="flood-test",
        target=target,
        policy=SourcePolicy(),
        **{"max_bytes": 1 << 30, "idle_timeout_s": 0.3, **kw},  # type: ignore[arg-type]
    )
    return got.records, got.size


def _publisher(port: int) -> mqtt.Client:
    c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"pub-{time.time_ns()}")
    c.connect("127.0.0.1", port)
    c.loop_start()
    return c


def test_a_broker_that_never_goes_idle_is_read_for_max_poll_s(broker: int, tmp_path: Path) -> None:
    _fetch(broker, tmp_path / "first")  # the session (QoS 1) exists from here on
    stop = threading.Event()
    pub = _publisher(broker)
    sent = [0]

    def trickle() -> None:
        while not stop.is_set():
            pub.publish("flood/a", b'{"v": 1}', qos=1).wait_for_publish(5)
            sent[0] += 1
            time.sleep(0.1)  # more often than the 0.3 s idle timeout

    t = threading.Thread(target=trickle)
    t.start()
    try:
        time.sleep(0.5)
        t0 = time.monotonic()
        records, _ = _fetch(broker, tmp_path / "trickle", max_poll_s=2.0)
        took = time.monotonic() - t0
    finally:
        stop.set()
        t.join()
    # Before: read until max_records (10,000 messages 0.1 s apart: about 17 minutes).
    assert took < 4.0
    assert 5 <= records < 100
    # Nothing is lost: what the first poll did not take, the next one does.
    later, _ = _fetch(broker, tmp_path / "next", max_poll_s=5.0)
    assert records + later == sent[0]
    pub.loop_stop()


def test_an_oversized_message_is_refused_before_it_is_read(broker: int, tmp_path: Path) -> None:
    _fetch(broker, tmp_path / "first")
    pub = _publisher(broker)
    pub.publish("flood/big", b'"' + b"x" * (48 << 20) + b'"', qos=1).wait_for_publish(60)
    pub.loop_stop()
    tracemalloc.start()
    try:
        with pytest.raises(FetchError, match=r"ingest\.mqtt_max_message_bytes"):
            _fetch(broker, tmp_path / "big", max_message_bytes=1 << 20, idle_timeout_s=5.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Before: the whole 48 MiB packet was read (and copied) before anything looked at it.
    assert peak < 8 << 20
    # The message stays in the session: a poll that allows it takes it. Its idle timeout is
    # long enough for the broker to start sending 48 MiB on a loaded machine (at load 20 the
    # 0.3 s default ran out before the first byte and the poll took nothing).
    records, size = _fetch(
        broker, tmp_path / "allowed", max_message_bytes=64 << 20, idle_timeout_s=5.0
    )
    assert (records, size) == (1, (48 << 20) + 3)
