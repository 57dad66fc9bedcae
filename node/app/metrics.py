"""Prometheus metrics of one daemon (its own registry, served at ``/metrics``)."""

from __future__ import annotations

from array import array
from collections import deque
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

HISTORY_SAMPLES = 720
"""Samples the console's charts keep: one hour at the daemon's 5 s housekeeping interval."""
_DURATION_BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


class NodeMetrics:
    """The counters, gauges and histograms the daemon updates."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.announcements = Counter(
            "odf_announcements",
            "Gossip messages by outcome (candidate/accepted/rejected/ignored/penalised) and reason",
            ["outcome", "reason"],
            registry=r,
        )
        self.anti_entropy_repairs = Counter(
            "odf_anti_entropy_repairs",
            "Announcements first learned from an anti-entropy reply (gossip never brought them)",
            registry=r,
        )
        self.pulls = Counter("odf_pulls", "Dataset pulls by outcome", ["outcome"], registry=r)
        self.source_polls = Counter(
            "odf_source_polls",
            "Polls of sources followed by URL, by outcome (docs/follow.md)",
            ["outcome"],
            registry=r,
        )
        self.pull_seconds = Histogram(
            "odf_pull_seconds",
            "Duration of successful pulls",
            buckets=_DURATION_BUCKETS,
            registry=r,
        )
        self.verifications = Counter(
            "odf_verifications", "Verifications by outcome", ["outcome"], registry=r
        )
        self.verify_seconds = Histogram(
            "odf_verify_seconds", "Duration of verifications", buckets=_DURATION_BUCKETS, registry=r
        )
        self.engine_running = Gauge(
            "odf_engine_running", "1 while the Spark engine worker runs", registry=r
        )
        self.peers = Gauge("odf_peers", "Connected gossip peers", registry=r)
        self.gossip_restarts = Counter(
            "odf_gossip_process_restarts",
            "Times the libp2p process died and was started again",
            registry=r,
        )
        self.queue_depth = Gauge(
            "odf_work_queue_depth", "Pending work items by kind", ["kind"], registry=r
        )
        self.loop_lag = Histogram(
            "odf_event_loop_lag_seconds",
            "How late a 0.5 s timer of the daemon's event loop ran (blocked loop: slow RPC/gossip)",
            buckets=(0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30),
            registry=r,
        )
        self.gc_pause = Histogram(
            "odf_gc_pause_seconds",
            "Cyclic garbage collections by generation (every thread stops while one runs)",
            ["generation"],
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1),
            registry=r,
        )
        self.rpc_requests = Counter(
            "odf_rpc_requests",
            "JSON-RPC calls by method and outcome",
            ["method", "outcome"],
            registry=r,
        )

        # What the console's rate charts draw: (at_ns, running totals), each total at the index
        # of its (family, outcome) in ``_history_keys`` (a sample taken before a key first
        # appeared is shorter). A flat array, not a dict of dicts per sample: ~150 bytes a
        # sample instead of ~1 KB, so the hour of samples costs ~0.1 MB, not ~0.8 MB, and the
        # daemon's memory does not climb through its first hour for it (make bench-longrun).
        self.history: deque[tuple[int, array[float]]] = deque(maxlen=HISTORY_SAMPLES)
        self._history_keys: list[tuple[str, str]] = []
        self._history_index: dict[tuple[str, str], int] = {}

    def totals(self) -> dict[str, dict[str, float]]:
        """Running totals by outcome of announcements, verifications and pulls."""
        out: dict[str, dict[str, float]] = {}
        for family, counter in (
            ("announcements", self.announcements),
            ("verifications", self.verifications),
            ("pulls", self.pulls),
        ):
            by_outcome: dict[str, float] = {}
            for metric in counter.collect():
                for sample in metric.samples:
                    if sample.name.endswith("_total"):
                        k = sample.labels.get("outcome", "")
                        by_outcome[k] = by_outcome.get(k, 0.0) + sample.value
            out[family] = by_outcome
        return out

    def sample_history(self, now_ns: int) -> None:
        """Remember the current totals (called every few seconds by the daemon)."""
        values: list[float] = [0.0] * len(self._history_keys)
        for family, by_outcome in self.totals().items():
            for outcome, total in by_outcome.items():
                i = self._history_index.get((family, outcome))
                if i is None:
                    i = self._history_index[(family, outcome)] = len(self._history_keys)
                    self._history_keys.append((family, outcome))
                    values.append(0.0)
                values[i] = total
        self.history.append((now_ns, array("d", values)))

    def history_json(self) -> list[dict[str, Any]]:
        """The remembered samples, oldest first, JSON-friendly:
        ``{"at_ns": …, "totals": {family: {outcome: running total}}}``."""
        out: list[dict[str, Any]] = []
        for at, values in self.history:
            totals: dict[str, dict[str, float]] = {
                "announcements": {},
                "verifications": {},
                "pulls": {},
            }
            for (family, outcome), total in zip(self._history_keys, values, strict=False):
                totals[family][outcome] = total
            out.append({"at_ns": at, "totals": totals})
        return out

    def render(self) -> tuple[bytes, str]:
        """The text exposition and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
