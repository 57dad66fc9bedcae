"""systemd notifications (``node/daemon/sdnotify.py``) to real Unix datagram sockets: a
filesystem path and an abstract ``@`` name; the watchdog interval from ``$WATCHDOG_USEC``."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from pathlib import Path

from node.daemon.sdnotify import Notifier, ping_watchdog


def receiver(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.settimeout(5)
    return sock


def test_no_socket_no_op() -> None:
    n = Notifier({})
    assert not n.enabled and n.watchdog_interval_s is None
    assert n.ready("x") is False


def test_path_socket(tmp_path: Path) -> None:
    path = str(tmp_path / "notify.sock")
    with receiver(path) as r:
        n = Notifier({"NOTIFY_SOCKET": path})
        assert n.ready("ready: node x")
        assert r.recv(4096) == b"READY=1\nSTATUS=ready: node x"
        assert n.stopping()
        assert r.recv(4096) == b"STOPPING=1\nSTATUS=stopping"
        n.close()


def test_abstract_socket() -> None:
    name = f"odf-node-test-{uuid.uuid4().hex}"
    with receiver("\0" + name) as r:
        n = Notifier({"NOTIFY_SOCKET": "@" + name})
        assert n.status("starting gossip")
        assert r.recv(4096) == b"STATUS=starting gossip"
        n.close()


def test_unreachable_socket_does_not_raise(tmp_path: Path) -> None:
    n = Notifier({"NOTIFY_SOCKET": str(tmp_path / "nobody.sock")})
    assert n.enabled and n.send("READY=1") is False


def test_watchdog_interval_is_half_and_only_for_this_pid() -> None:
    env = {"NOTIFY_SOCKET": "@x", "WATCHDOG_USEC": "30000000"}
    assert Notifier(env).watchdog_interval_s == 15.0
    assert Notifier({**env, "WATCHDOG_PID": str(os.getpid())}).watchdog_interval_s == 15.0
    assert Notifier({**env, "WATCHDOG_PID": str(os.getpid() + 1)}).watchdog_interval_s is None
    assert Notifier({**env, "WATCHDOG_USEC": "junk"}).watchdog_interval_s is None
    assert Notifier({"WATCHDOG_USEC": "30000000"}).watchdog_interval_s is None


def test_ping_watchdog_sends_every_interval() -> None:
    name = f"odf-node-test-{uuid.uuid4().hex}"
    slept: list[float] = []

    async def fake_sleep(s: float) -> None:
        slept.append(s)
        if len(slept) == 3:
            raise asyncio.CancelledError

    with receiver("\0" + name) as r:
        n = Notifier({"NOTIFY_SOCKET": "@" + name})
        try:
            asyncio.run(ping_watchdog(n, 0.25, fake_sleep))
        except asyncio.CancelledError:
            pass
        assert [r.recv(64) for _ in range(3)] == [b"WATCHDOG=1"] * 3
        assert slept == [0.25] * 3
        n.close()


def test_systemd_unit_waits_for_ready_and_watches_the_loop() -> None:
    unit = (Path(__file__).resolve().parents[2] / "deploy" / "odf-node.service").read_text()
    settings = dict(
        line.split("=", 1) for line in unit.splitlines() if "=" in line and line[:1] != "#"
    )
    assert settings["Type"] == "notify"
    assert settings["NotifyAccess"] == "main"
    assert int(settings["WatchdogSec"]) >= 10  # well above a full GC pause or a busy moment
    assert settings["Restart"] == "on-failure"  # a watchdog kill is a failure: restarted
