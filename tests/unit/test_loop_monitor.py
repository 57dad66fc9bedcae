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


def test_gc_pauses_are_timed_by_generation_until_uninstalled() -> None:
    import gc

    from node.daemon.loop_monitor import GcPauses

    seen: list[tuple[int, float]] = []
    pauses = GcPauses(lambda gen, s: seen.append((gen, s)))
    pauses.install(freeze=False)
    pauses.install(freeze=False)  # once only
    try:
        assert gc.callbacks.count(pauses) == 1
        gc.collect(2)
        assert any(gen == 2 and s >= 0 for gen, s in seen)
    finally:
        pauses.uninstall()
    n = len(seen)
    gc.collect(2)
    assert len(seen) == n and pauses not in gc.callbacks


def test_gc_survivors_of_a_full_collection_are_frozen_and_all_collected_periodically() -> None:
    import gc

    from node.daemon.loop_monitor import GcPauses

    now = [1000.0]
    pauses = GcPauses(lambda gen, s: None, full_every_s=3600, monotonic=lambda: now[0])
    try:
        gc.unfreeze()
        pauses(phase="start", info={"generation": 1})
        pauses(phase="stop", info={"generation": 1})
        pauses.maintain()
        assert gc.get_freeze_count() == 0, "only a full collection leads to a freeze"
        pauses("start", {"generation": 2})
        pauses("stop", {"generation": 2})
        assert pauses.full_since_freeze
        pauses.maintain()
        assert not pauses.full_since_freeze and gc.get_freeze_count() > 0
        # Cyclic garbage among frozen objects survives until the periodic full collection.
        gc.unfreeze()

        class Node:
            ref: object = None

        a, b = Node(), Node()
        a.ref, b.ref = b, a
        gc.freeze()
        alive = [a]
        del a, b
        import weakref

        probe = weakref.ref(alive.pop())
        gc.collect()
        assert probe() is not None, "frozen: not collected"
        now[0] += 3600
        pauses.maintain()
        assert probe() is None, "the periodic full collection reclaimed it"
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
