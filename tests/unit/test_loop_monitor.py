"""The event-loop lag monitor, on a fake clock (no real sleeping)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from node.daemon.loop_monitor import watch_event_loop


class FakeTime:
    """A monotonic clock whose ``sleep`` advances it by the interval plus a scripted lag."""

    def __init__(self, lags: list[float]) -> None:
        self.now = 100.0
        self.lags = lags

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        if not self.lags:
            raise asyncio.CancelledError
        self.now += seconds + self.lags.pop(0)


def test_reports_lag_and_warns_once_per_period(caplog: pytest.LogCaptureFixture) -> None:
    t = FakeTime([0.0, 0.2, 3.0, 5.0, 0.0])
    seen: list[float] = []

    async def run() -> None:
        with pytest.raises(asyncio.CancelledError):
            await watch_event_loop(
                seen.append, interval_s=0.5, warn_s=1.0, monotonic=t.monotonic, sleep=t.sleep
            )

    with caplog.at_level(logging.WARNING, logger="node.daemon.loop_monitor"):
        asyncio.run(run())
    assert seen == pytest.approx([0.0, 0.2, 3.0, 5.0, 0.0])
    warnings = [r.getMessage() for r in caplog.records]
    # 3.0 s warns at once; 5.0 s comes within the minute and is held back.
    assert len(warnings) == 1 and "3.00 s late" in warnings[0]


def test_warns_again_after_the_period_with_the_worst_lag(
    caplog: pytest.LogCaptureFixture,
) -> None:
    t = FakeTime([2.0, 4.0, 60.0, 1.5])
    seen: list[float] = []

    async def run() -> None:
        with pytest.raises(asyncio.CancelledError):
            await watch_event_loop(
                seen.append, interval_s=0.5, monotonic=t.monotonic, sleep=t.sleep
            )

    with caplog.at_level(logging.WARNING, logger="node.daemon.loop_monitor"):
        asyncio.run(run())
    warnings = [r.getMessage() for r in caplog.records]
    # 2.0 warns; 4.0 is held back; 60.0 comes after the minute and reports the worst (60.0);
    # 1.5 is held back again.
    assert len(warnings) == 2
    assert "2.00 s late" in warnings[0] and "60.00 s late" in warnings[1]
