"""Matplotlib plots of simulation results (Agg backend: files only, no display)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # (after use("Agg"): the backend must be chosen first)

_LATENCY_AXES = ("delivery latency (ms)", "fraction of (node, head) deliveries")
"""The axes of a delivery latency CDF (the simulator's and the real cluster's)."""


def _finish(fig: Any, ax: Any, path: Path, xlabel: str, ylabel: str, title: str) -> None:
    """Label a one-panel chart (grid, legend) and write it to ``path``."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    _save(fig, path)


def _save(fig: Any, path: Path) -> None:
    """Write a chart to ``path`` (the figure is closed: pyplot keeps every open one alive)."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def latency_cdf(results: list[dict[str, Any]], path: Path, title: str = "") -> None:
    """Delivery latency CDF of each result against its ideal (shortest-path) CDF."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in results:
        label = r.get("label") or r["scenario"]
        if r.get("latency_cdf_ms"):
            xs, ys = zip(*r["latency_cdf_ms"], strict=True)
            ax.plot(xs, ys, label=f"{label} (gossip)")
        if r.get("ideal_cdf_ms"):
            xs, ys = zip(*r["ideal_cdf_ms"], strict=True)
            ax.plot(xs, ys, linestyle="--", label=f"{label} (ideal)")
    # cut the x axis after the 98th percentiles: rare lazy-gossip recoveries would squash the rest
    p98 = [
        pts[int(0.98 * (len(pts) - 1))][0]
        for r in results
        for pts in (r.get("latency_cdf_ms"), r.get("ideal_cdf_ms"))
        if pts
    ]
    if p98:
        ax.set_xlim(0, 1.5 * max(p98))
    _finish(
        fig,
        ax,
        path,
        *_LATENCY_AXES,
        title or "Announcement delivery latency",
    )


def _malicious(r: dict[str, Any]) -> float:
    """The configured malicious fraction (sweep parameter) or the realised one."""
    v = r.get("params", {}).get("adversary.malicious_fraction")
    return float(v) if v is not None else r["malicious_nodes"] / r["nodes"]


def _by_policy(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        out[r["policy"]].append(r)
    return out


def detection_vs_malicious(rows: list[dict[str, Any]], path: Path) -> None:
    """Median and p90 fraud detection time (s) against the malicious fraction, per policy."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for policy, rs in sorted(_by_policy(rows).items()):
        pts = sorted(
            (_malicious(r), r["fraud_detection_s"]) for r in rs if r.get("fraud_detection_s")
        )
        if pts:
            (line,) = ax.plot(
                [p[0] for p in pts], [p[1]["p50"] for p in pts], marker="o", label=policy
            )
            ax.plot(
                [p[0] for p in pts],
                [p[1]["p90"] for p in pts],
                marker=".",
                linestyle=":",
                color=line.get_color(),
                label=f"{policy} p90",
            )
    _finish(
        fig,
        ax,
        path,
        "malicious fraction of nodes",
        "time to detect a spoofed head (s)",
        "Fraud detection time (honest nodes, p50 solid / p90 dotted)",
    )


def cost_vs_safety(rows: list[dict[str, Any]], path: Path) -> None:
    """Engine seconds per trusted head against P(accept bad), one point per run."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for policy, rs in sorted(_by_policy(rows).items()):
        xs = [r["engine_s_per_trusted_head"] or 0.0 for r in rs]
        ys = [r["bad_accept_probability"] for r in rs]
        ax.scatter(xs, ys, label=policy)
        for r, x, y in zip(rs, xs, ys, strict=True):
            ax.annotate(f"{_malicious(r):.0%}", (x, y), fontsize=6)
    _finish(
        fig,
        ax,
        path,
        "engine seconds per trusted head (honest nodes)",
        "P(honest node trusts a spoofed head)",
        "Cost vs safety across trust policies (labels: malicious fraction)",
    )


def cluster_cdf(cluster: dict[str, Any], path: Path) -> None:
    """Real-cluster latency CDF against the simulator's for the same scenario and seed."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, label in (
        ("latency_cdf_ms", "real processes"),
        ("sim_latency_cdf_ms", "simulator"),
    ):
        if cluster.get(key):
            xs, ys = zip(*cluster[key], strict=True)
            ax.plot(xs, ys, label=label)
    _finish(
        fig,
        ax,
        path,
        *_LATENCY_AXES,
        f"Real cluster vs simulator ({cluster['scenario']}, seed {cluster['seed']})",
    )


def policy_sweep(summary: list[dict[str, Any]], path: Path) -> None:
    """The Spark sweep (``sim/spark_sweep.py``): fooled fraction, replays per node and median
    time to trust against the colluders inside the trusted set, one line per policy and
    malicious fraction, error bars the 95 % confidence interval over seeds."""
    panels = (
        ("fooled", "fooled fraction (spoofed receipts trusted)"),
        ("replays_per_node", "replays per node"),
        ("time_to_trust_p50_s", "time to trust, p50 (s)"),
    )
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    lines: dict[tuple[str, float], list[dict[str, Any]]] = defaultdict(list)
    for s in summary:
        lines[(s["policy"], s["malicious"])].append(s)
    for ax, (key, label) in zip(axes, panels, strict=True):
        for (policy, malicious), rs in sorted(lines.items()):
            pts = sorted((r["inside"], r[key]) for r in rs if r[key] is not None)
            if not pts:
                continue
            ax.errorbar(
                [p[0] for p in pts],
                [p[1][0] for p in pts],
                yerr=[0.0 if p[1][1] != p[1][1] else p[1][1] for p in pts],  # NaN: one seed
                marker="o",
                capsize=3,
                linestyle="-" if malicious < 0.2 else "--",
                label=f"{policy}, {malicious:.0%} malicious",
            )
        ax.set_xticks(sorted({s["inside"] for s in summary}))
        ax.set_xlabel("colluders inside the trusted set")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=6)
    fig.suptitle("Trust policies (mean and 95 % CI over seeds)")
    _save(fig, path)
