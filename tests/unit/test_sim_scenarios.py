"""Scenario files and the ``sim`` CLI (Typer's CliRunner; small virtual runs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sim.cli import sim_app
from sim.internet import is_internet
from sim.scenario import SCENARIO_DIR, ScenarioError, from_dict, load

# The internet scenario has its own file format (sim/internet.py; tests/unit/test_sim_internet.py).
_GOSSIP_SCENARIOS = sorted(p for p in SCENARIO_DIR.glob("*.toml") if not is_internet(p))


@pytest.mark.parametrize("path", _GOSSIP_SCENARIOS, ids=lambda p: p.stem)
def test_every_shipped_scenario_loads(path: Path) -> None:
    sc = load(path)
    assert sc.name == path.stem


def test_unknown_keys_and_bad_values_are_refused() -> None:
    with pytest.raises(ScenarioError, match=r"unknown key adversary\.sybil"):
        from_dict({"adversary": {"sybil": 3}})
    with pytest.raises(ScenarioError, match="wrong type"):
        from_dict({"nodes": "many"})
    with pytest.raises(ScenarioError, match="policy"):
        from_dict({"policy": {"name": "trust-me"}})
    with pytest.raises(ScenarioError, match="not found"):
        load("no-such-scenario")


def test_matrix_latency_file_is_read_relative_to_the_scenario() -> None:
    sc = load("regions")
    assert len(sc.latency.matrix) == 5 and sc.latency.matrix[0][2] == 40.0


def test_cli_run_writes_json_and_plot(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        sim_app,
        [
            "run",
            "baseline",
            "--seed",
            "7",
            "--json",
            "--out",
            str(tmp_path),
            "--set",
            "nodes=20",
            "--set",
            "duration_s=300",
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["seed"] == 7 and out["nodes"] == 20
    assert json.loads((tmp_path / "results.json").read_text())["heads"] == out["heads"]
    assert (tmp_path / "latency_cdf.png").stat().st_size > 1000


def test_cli_sweep_runs_the_grid_and_plots(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        sim_app,
        [
            "sweep",
            "malicious-10",
            "--param",
            "adversary.malicious_fraction=0.1,0.3",
            "--param",
            "policy.name=verify-all,sample",
            "--param",
            "nodes=20",
            "--param",
            "duration_s=400",
            "--out",
            str(tmp_path),
        ],
    )
    assert res.exit_code == 0, res.output
    rows = json.loads((tmp_path / "sweep.json").read_text())
    assert len(rows) == 4
    assert {r["policy"] for r in rows} == {"verify-all", "sample"}
    for name in ("detection_vs_malicious", "cost_vs_safety", "latency_cdf"):
        assert (tmp_path / f"{name}.png").stat().st_size > 1000


def test_cli_reports_a_bad_override() -> None:
    res = CliRunner().invoke(sim_app, ["run", "baseline", "--set", "gossip.DD=3"])
    assert res.exit_code == 2
