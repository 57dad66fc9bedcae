"""The readiness checks of ``/readyz`` (``node/daemon/health.py``) and the engine's crash log,
over fakes: each check fails alone and says why."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from node.config import HealthSection
from node.daemon.health import Readiness
from node.engine_client import CRASHES_KEPT, CrashLog

CFG = HealthSection(
    max_verify_backlog=10,
    max_write_delay_s=0.05,
    engine_crash_window_s=60.0,
    engine_crash_failures=3,
)


async def _committed() -> None:
    return None


def readiness(**overrides: Any) -> Readiness:
    async def backlog() -> int:
        return int(overrides.pop("backlog", 0))

    values: dict[str, Any] = {
        "config": CFG,
        "services": lambda: (["state", "http", "rpc"], ["state", "http", "rpc"]),
        "stopping": lambda: False,
        "write_probe": _committed,
        "engine_crashes": lambda window: [],
        "peers": lambda: None,
        "verify_backlog": backlog,
    }
    values.update({k: v for k, v in overrides.items() if k in values})
    return Readiness(**values)


def report(r: Readiness) -> tuple[bool, dict[str, Any]]:
    return asyncio.run(r.report())


def test_all_checks_pass() -> None:
    ready, body = report(readiness())
    assert ready and body["failing"] == []
    assert body["checks"]["services"] == {"ok": True, "detail": "3 started"}


def test_services_not_started_and_stopping() -> None:
    r = readiness(services=lambda: (["state", "http", "rpc"], ["state", "http"]))
    ready, body = report(r)
    assert not ready and body["failing"] == ["services"]
    assert body["checks"]["services"]["detail"] == "not started yet: rpc"
    _, body = report(readiness(stopping=lambda: True))
    assert body["checks"]["services"]["detail"] == "the daemon is shutting down"


def test_state_writer_that_does_not_commit() -> None:
    async def never() -> None:
        await asyncio.Event().wait()

    ready, body = report(readiness(write_probe=never))
    assert not ready and body["failing"] == ["state_writer"]
    assert "has not committed within 0.05 s" in body["checks"]["state_writer"]["detail"]


def test_state_writer_that_fails() -> None:
    async def locked() -> None:
        raise RuntimeError("database is locked")

    _, body = report(readiness(write_probe=locked))
    assert body["checks"]["state_writer"] == {
        "ok": False,
        "detail": "a write failed: database is locked",
    }


def test_engine_crash_loop_threshold() -> None:
    two = readiness(engine_crashes=lambda w: ["a", "b"])
    assert report(two)[0] is True
    windows: list[float] = []

    def three(window: float) -> list[str]:
        windows.append(window)
        return ["a", "b", "spark worker did not start: boom"]

    ready, body = report(readiness(engine_crashes=three))
    assert not ready and body["failing"] == ["engine"]
    assert windows == [60.0]
    assert body["checks"]["engine"]["detail"] == (
        "crash-looping: 3 worker failures in the last 60 s "
        "(the newest: spark worker did not start: boom)"
    )


def test_gossip_peers_only_when_required() -> None:
    assert report(readiness(peers=lambda: None))[0] is True
    ready, body = report(readiness(peers=lambda: 0))
    assert not ready and body["failing"] == ["gossip_peers"]
    assert report(readiness(peers=lambda: 2))[1]["checks"]["gossip_peers"]["detail"] == (
        "2 connected"
    )


@pytest.mark.parametrize(("backlog", "ready"), [(10, True), (11, False)])
def test_verify_backlog_bound(backlog: int, ready: bool) -> None:
    ok, body = report(readiness(backlog=backlog))
    assert ok is ready
    assert body["checks"]["verify_backlog"]["ok"] is ready


def test_crash_log_window_and_cap() -> None:
    now = [100.0]
    log = CrashLog(lambda: now[0])
    log.note("old")
    now[0] = 200.0
    log.note("new")
    assert log.recent(50.0) == ["new"]
    assert log.recent(150.0) == ["old", "new"]
    for i in range(CRASHES_KEPT + 5):
        log.note(str(i))
    assert len(log.recent(1e9)) == CRASHES_KEPT
