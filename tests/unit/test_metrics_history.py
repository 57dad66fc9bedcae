"""The console's rate-chart samples (``NodeMetrics.sample_history`` / ``history_json``)."""

from __future__ import annotations

import tracemalloc

from node.app.metrics import HISTORY_SAMPLES, NodeMetrics


def test_samples_keep_each_total_and_outcomes_that_appear_later() -> None:
    m = NodeMetrics()
    m.sample_history(1)
    m.announcements.labels("accepted", "").inc(3)
    m.pulls.labels("ok").inc()
    m.sample_history(2)
    m.verifications.labels("failed").inc(2)
    m.announcements.labels("accepted", "").inc()
    m.sample_history(3)
    assert m.history_json() == [
        {"at_ns": 1, "totals": {"announcements": {}, "verifications": {}, "pulls": {}}},
        {
            "at_ns": 2,
            "totals": {
                "announcements": {"accepted": 3.0},
                "verifications": {},
                "pulls": {"ok": 1.0},
            },
        },
        {
            "at_ns": 3,
            "totals": {
                "announcements": {"accepted": 4.0},
                "verifications": {"failed": 2.0},
                "pulls": {"ok": 1.0},
            },
        },
    ]


def test_an_hour_of_samples_is_bounded_and_small() -> None:
    m = NodeMetrics()
    for outcome in ("accepted", "ignored", "rejected", "candidate", "penalised"):
        m.announcements.labels(outcome, "r").inc()
    for outcome in ("verified", "failed", "unverifiable"):
        m.verifications.labels(outcome).inc()
    for outcome in ("ok", "failed", "abandoned"):
        m.pulls.labels(outcome).inc()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for i in range(2 * HISTORY_SAMPLES):
            m.sample_history(i)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    assert len(m.history_json()) == HISTORY_SAMPLES
    # ~250 bytes a sample with 11 outcomes (a dict of dicts per sample took ~1,070).
    assert grown / HISTORY_SAMPLES < 400, grown
