"""The ``internet`` scenario (``sim/internet.py``): deterministic per seed, the product's DHT,
one-hop exchange, core and trust policy under NAT, churn, light and malicious nodes; no forged
head is ever trusted; the CLI runs it from ``sim/scenarios/internet.toml``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from sim.cli import sim_app
from sim.internet import InternetParams, is_internet, load_params, simulate_internet
from sim.scenario import SCENARIO_DIR, ScenarioError

SMALL = InternetParams(nodes=300, datasets=300, subscriptions=40, trust_samples=20, seed=5)


def _figures(res: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in res.items() if k not in ("wall_s", "max_rss_mb")}


def test_deterministic_per_seed() -> None:
    a, b = simulate_internet(SMALL), simulate_internet(SMALL)
    assert json.dumps(_figures(a), sort_keys=True) == json.dumps(_figures(b), sort_keys=True)
    other = simulate_internet(dataclasses.replace(SMALL, seed=6))
    assert _figures(other) != _figures(a)


def test_dht_finds_carriers_and_no_forged_head_is_trusted() -> None:
    res = simulate_internet(SMALL)
    disc = res["discovery"]
    assert disc["subscriptions"] == 40
    assert disc["dht"]["found_within_deadline"] >= disc["one_hop_only"]["found_within_deadline"]
    assert disc["dht"]["found_within_deadline"] >= 0.9
    tr = res["trust"]
    assert tr["forged_heads_sent"] > 0 and tr["forged_heads_trusted"] == 0
    assert tr["trusted_within_run"] > 0.5
    assert res["population"]["behind_nat"] > res["nodes"] // 2
    assert res["bytes_per_node_per_hour"]["total"] > 0


def test_one_hop_only_run_has_no_dht_figures() -> None:
    res = simulate_internet(dataclasses.replace(SMALL, dht=False))
    assert "dht" not in res["discovery"] and "dht" not in res["bytes_per_node_per_hour"]
    assert res["counters"]["dht_find_queries"] == 0
    assert 0.0 <= res["discovery"]["one_hop_only"]["found_within_deadline"] <= 1.0


def test_poisoning_servers_are_caught_and_searches_end() -> None:
    res = simulate_internet(
        dataclasses.replace(SMALL, malicious_fraction=0.3, subscriptions=30, trust_samples=10)
    )
    dht = res["discovery"]["dht"]
    assert 0.0 <= dht["found_within_deadline"] <= 1.0
    assert res["trust"]["forged_heads_trusted"] == 0


def test_scenario_file_and_overrides() -> None:
    assert is_internet("internet") and not is_internet("baseline")
    p = load_params("internet", {"internet.nodes": 500, "seed": 3})
    assert p.nodes == 500 and p.seed == 3 and p.datasets == 10_000
    assert all(is_internet(x) == (x.stem == "internet") for x in SCENARIO_DIR.glob("*.toml"))
    with pytest.raises(ScenarioError, match=r"unknown key internet\.nodez"):
        load_params("internet", {"internet.nodez": 5})
    with pytest.raises(ScenarioError, match="wrong type"):
        load_params("internet", {"internet.dht": 1})
    with pytest.raises(ScenarioError, match="not an internet scenario"):
        load_params("baseline")


def test_cli_run_internet(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        sim_app,
        [
            "run",
            "internet",
            "--nodes",
            "200",
            "--datasets",
            "100",
            "--seed",
            "2",
            "--no-dht",
            "--set",
            "internet.subscriptions=10",
            "--set",
            "internet.trust_samples=5",
            "--json",
            "--out",
            str(tmp_path),
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["nodes"] == 200 and out["params"]["dht"] is False and out["seed"] == 2
    assert json.loads((tmp_path / "results.json").read_text())["datasets"] == 100
