"""The discovery simulation (``sim/discovery.py``) over the product's DHT code: deterministic per
seed, finds carriers where they exist, and ends when half the network never answers."""

from __future__ import annotations

from sim.discovery import DiscoveryParams, simulate_discovery


def _figures(res: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in res.items() if k not in ("wall_s", "max_rss_mb")}


def test_deterministic_per_seed_and_finds_the_carriers() -> None:
    p = DiscoveryParams(nodes=300, datasets=300, subscriptions=60, seed=7)
    a, b = simulate_discovery(p), simulate_discovery(p)
    assert _figures(a) == _figures(b)
    dht = a["dht"]
    assert isinstance(dht, dict) and dht["found_within_deadline"] == 1.0
    other = simulate_discovery(DiscoveryParams(nodes=300, datasets=300, subscriptions=60, seed=8))
    assert _figures(other) != _figures(a)


def test_a_network_where_half_never_answers_still_ends() -> None:
    res = simulate_discovery(
        DiscoveryParams(nodes=200, datasets=50, subscriptions=40, unresponsive=0.5, seed=3)
    )
    dht = res["dht"]
    assert isinstance(dht, dict) and 0.0 <= float(dht["found_within_deadline"]) <= 1.0
    one_hop = res["one_hop_only"]
    assert isinstance(one_hop, dict) and 0.0 <= float(one_hop["found"]) <= 1.0
