"""The ``internet`` scenario's calibration mode (issue 43 item 5; ``sim/internet.py``): the lab's
network drawn from the seed, measured timings as parameters, deterministic figures."""

from __future__ import annotations

import dataclasses

import pytest

from sim.internet import InternetParams, lab_plan, mean_mesh_hops, simulate_internet
from sim.scenario import ScenarioError

LAB = InternetParams(
    nodes=12,
    datasets=1,
    follows=1,
    calibration=True,
    nat_nodes=6,
    light_nodes=5,
    heads=2,
    malicious_fraction=0.0,
    unresponsive=0.0,
    churn_per_hour=0.0,
    trusted_attesters=4,
    quorum_k=2,
    rtt_ms=0.3,
    relay_rtt_ms=0.4,
    discovery_interval_s=2.0,
    hop_ms=150.0,
    fetch_s=2.0,
    verify_s=0.6,
    seed=3,
)


def test_lab_plan_has_the_asked_roles_and_is_deterministic() -> None:
    plan = lab_plan(LAB)
    assert plan == lab_plan(LAB)
    assert not plan.nat[0] and not plan.light[0] and plan.follows[0] == ()
    assert sum(plan.nat) == 6 and sum(plan.light) == 5
    (owner,) = plan.owner
    assert owner != 0 and not plan.light[owner] and plan.follows[owner] == ()
    full = [i for i in range(12) if i not in (0, owner) and not plan.light[i]]
    for i in range(12):
        if plan.light[i]:
            assert plan.follows[i] == (0,)
            trusted = plan.trusted[(i, 0)]
            assert len(trusted) == 4 and set(trusted) <= set(full)
    assert lab_plan(dataclasses.replace(LAB, seed=4)) != plan


def test_calibration_run_measures_every_light_node_and_is_deterministic() -> None:
    a = simulate_internet(LAB)
    b = simulate_internet(LAB)
    a.pop("wall_s"), b.pop("wall_s")
    assert a == b
    c = a["calibration"]
    assert c["light_subscriptions"] == 5 and c["not_found"] == 0
    assert len(c["discovery_samples"]) == 5
    assert len(c["trusted_samples"]) == 5 * 2 and c["not_trusted"] == 0
    # first head received: at least a hop's processing and a pull; trusted: a pull and a replay
    assert min(c["discovery_samples"]) > 0.15
    assert min(c["trusted_samples"]) > 0.15


def test_measured_timings_move_the_figures() -> None:
    slow = simulate_internet(dataclasses.replace(LAB, verify_s=6.0, hop_ms=600.0))
    fast = simulate_internet(LAB)
    assert (
        slow["calibration"]["publish_to_trusted_s"]["p50"]
        > fast["calibration"]["publish_to_trusted_s"]["p50"]
    )


def test_exchange_dial_and_pull_costs_add_to_discovery_and_trust() -> None:
    base = simulate_internet(LAB)["calibration"]
    slow = simulate_internet(
        dataclasses.replace(LAB, exchange_ms=100.0, dial_ms=300.0, relay_dial_ms=200.0)
    )["calibration"]
    # every discovery asks the relay (an exchange), dials a carrier and asks it for its heads
    for a, b in zip(base["discovery_samples"], slow["discovery_samples"], strict=True):
        assert b >= a + 0.49  # 100 + 300 + 100 ms at least (samples rounded to 1 ms)
    later = simulate_internet(dataclasses.replace(LAB, full_fetch_s=5.0, full_fetch_sigma=0.0))[
        "calibration"
    ]
    assert min(later["trusted_samples"]) > 5.0 > max(base["trusted_samples"])
    assert later["discovery_samples"] == base["discovery_samples"]


def test_the_first_pull_has_its_own_parameter_used_by_discovery_only() -> None:
    base = simulate_internet(LAB)["calibration"]
    first = simulate_internet(dataclasses.replace(LAB, first_fetch_s=20.0, first_fetch_sigma=0.0))[
        "calibration"
    ]
    # the heads' pulls keep fetch_s (2 s): publish -> trusted does not move
    assert first["trusted_samples"] == base["trusted_samples"]
    assert min(first["discovery_samples"]) > 20.0 > max(base["discovery_samples"])


def test_measured_attestation_deliveries_are_drawn_for_the_light_nodes_receipt() -> None:
    base = simulate_internet(LAB)["calibration"]
    late = simulate_internet(dataclasses.replace(LAB, attestation_delivery_samples_s=(9.0,)))[
        "calibration"
    ]
    # every trusted attester's verdict reaches the light node 9 s after it was signed, and a
    # quorum needs one: publish -> trusted grows by about 9 s less the mesh's delivery
    assert min(late["trusted_samples"]) > 9.0 > max(base["trusted_samples"])
    # the announcement, the attesters' own receipt of the head and discovery keep hop_ms
    assert late["discovery_samples"] == base["discovery_samples"]
    with pytest.raises(ScenarioError):
        dataclasses.replace(LAB, attestation_delivery_samples_s=(-1.0,)).validate()


def test_a_head_trusted_after_a_newer_one_arrived_is_not_counted() -> None:
    # heads 1 s apart, attesters' replays ~60 s: every head but the last is trusted only after
    # the next one was accepted, and the daemon logs no head.trusted for it
    slow = dataclasses.replace(LAB, verify_s=60.0, verify_sigma=0.0)
    apart = simulate_internet(slow)["calibration"]
    close = simulate_internet(dataclasses.replace(slow, head_interval_s=1.0))["calibration"]
    assert apart["superseded"] == 0 and len(apart["trusted_samples"]) == 5 * 2
    assert close["superseded"] == 5 and len(close["trusted_samples"]) == 5
    pairs = close["trusted_pairs"]
    assert len(pairs) == 5 * 2
    assert all(q["superseded"] == (q["head"] == 0) for q in pairs)
    assert all((q["trusted_s"] is None) == q["superseded"] for q in pairs)
    # heads far apart: nothing superseded
    far = simulate_internet(dataclasses.replace(slow, head_interval_s=600.0))["calibration"]
    assert far["superseded"] == 0 and len(far["trusted_samples"]) == 5 * 2


def test_a_head_superseded_before_its_verification_started_is_never_attested() -> None:
    # three heads 1 s apart, replays of 60 s: every attester verifies head 0, head 1 waits
    # in its queue, and by the time the engine is free head 2 is current: head 1 is never
    # attested (node/app/verify.py verifies the dataset's current head), head 2 is
    three = dataclasses.replace(LAB, heads=3, verify_s=60.0, verify_sigma=0.0, head_interval_s=1.0)
    c = simulate_internet(three)["calibration"]
    assert c["not_trusted"] == 5  # head 1 at every light node: no attestation at all
    by_head = {k: [q for q in c["trusted_pairs"] if q["head"] == k] for k in range(3)}
    assert all(q["trusted_s"] is None and not q["superseded"] for q in by_head[1])
    assert all(q["superseded"] for q in by_head[0])  # trusted after head 1 was accepted
    assert all(q["trusted_s"] is not None and q["trusted_s"] > 118.0 for q in by_head[2])


def test_the_round_asks_the_dht_before_it_dials_a_named_carrier() -> None:
    # p2p/discovery.py run_once: ask around, then the DHT (no provider is connected yet), then
    # dial; the DHT lookup adds at least one query's exchange before the carrier's connection
    slow = dataclasses.replace(LAB, exchange_ms=1000.0, first_fetch_s=0.5, first_fetch_sigma=0.0)
    one_hop = simulate_internet(dataclasses.replace(slow, dht=False))["calibration"]
    with_dht = simulate_internet(slow)["calibration"]
    for a, b in zip(one_hop["discovery_samples"], with_dht["discovery_samples"], strict=True):
        assert b >= a + 0.99


def test_the_core_hears_of_a_new_connection_at_the_daemons_polls() -> None:
    # p2p/libp2p_host.py posts the connected peers every peer_watch_s, p2p/service.py turns
    # them into PeerConnected each tick_s (or once catch_up_s after a subscription): the head
    # request waits for that, the rest of the discovery does not move
    fixed = dataclasses.replace(LAB, first_fetch_s=0.5, first_fetch_sigma=0.0)
    base = simulate_internet(fixed)["calibration"]
    polled = simulate_internet(dataclasses.replace(fixed, peer_watch_s=0.5, tick_s=1.0))[
        "calibration"
    ]
    deltas = [
        b - a for a, b in zip(base["discovery_samples"], polled["discovery_samples"], strict=True)
    ]
    assert all(-0.01 <= x <= 1.51 for x in deltas) and sum(deltas) / len(deltas) > 0.2
    for k, d in zip(polled["head_known_samples"], polled["discovery_samples"], strict=True):
        assert abs(d - k - 0.5) < 0.002  # the first pull comes after the head is known
    # ticks far apart: the subscription's catch-up look at 2 s is what hears of the connection
    caught = simulate_internet(dataclasses.replace(fixed, tick_s=1000.0, catch_up_s=2.0))[
        "calibration"
    ]
    assert all(abs(k - 2.0) < 0.35 for k in caught["head_known_samples"])


def test_subscriptions_start_at_the_labs_gap() -> None:
    gap = simulate_internet(dataclasses.replace(LAB, subscribe_gap_s=8.0))["calibration"]
    assert gap["subscribe_at_s"] == [0.0, 8.0, 16.0, 24.0, 32.0]
    default = simulate_internet(LAB)["calibration"]
    assert default["subscribe_at_s"] == [0.0, 0.001, 0.002, 0.003, 0.004]
    # the simulator composes each subscription on its own: the schedule moves no sample
    assert gap["discovery_samples"] == default["discovery_samples"]


def test_discovery_replicates_estimate_the_same_percentiles_with_less_noise() -> None:
    one = simulate_internet(LAB)["calibration"]
    # one replicate: the single run's own percentiles, unrounded
    xs = sorted(one["discovery_samples"])
    assert one["discovery_replicates"] == {"n": 1, "p50": xs[2], "p99": xs[-1]}
    many = simulate_internet(dataclasses.replace(LAB, discovery_replicates=41))
    again = simulate_internet(dataclasses.replace(LAB, discovery_replicates=41))
    many.pop("wall_s"), again.pop("wall_s")
    assert many == again  # seeded per replicate: deterministic
    c = many["calibration"]
    # the first replicate is the single run: its samples and trust figures do not move
    assert c["discovery_samples"] == one["discovery_samples"]
    assert c["trusted_samples"] == one["trusted_samples"]
    assert c["discovery_replicates"]["n"] == 41
    # other replicates drew other pulls: the estimate is not the single run's max
    assert c["discovery_replicates"]["p99"] != one["discovery_replicates"]["p99"]
    assert c["discovery_replicates"]["p50"] <= c["discovery_replicates"]["p99"]
    other = simulate_internet(dataclasses.replace(LAB, discovery_replicates=41, seed=4))
    assert other["calibration"]["discovery_replicates"] != c["discovery_replicates"]


def test_validation() -> None:
    with pytest.raises(ScenarioError):
        dataclasses.replace(LAB, calibration=False).validate()  # 12 < 50 nodes
    with pytest.raises(ScenarioError):
        dataclasses.replace(LAB, light_nodes=10).validate()  # no room for a quorum
    with pytest.raises(ScenarioError):
        dataclasses.replace(LAB, discovery_interval_s=0.0).validate()
    with pytest.raises(ScenarioError):
        dataclasses.replace(LAB, relay_dial_ms=-1.0).validate()
    with pytest.raises(ScenarioError):
        dataclasses.replace(LAB, first_fetch_s=-1.0).validate()
    with pytest.raises(ScenarioError):
        dataclasses.replace(LAB, head_interval_s=-1.0).validate()
    with pytest.raises(ScenarioError):
        dataclasses.replace(LAB, subscribe_gap_s=-1.0).validate()
    with pytest.raises(ScenarioError):
        dataclasses.replace(LAB, discovery_replicates=0).validate()
    with pytest.raises(ScenarioError):
        dataclasses.replace(LAB, tick_s=-1.0).validate()
    with pytest.raises(ScenarioError):
        lab_plan(dataclasses.replace(LAB, calibration=False, nodes=100))


def test_mean_mesh_hops() -> None:
    assert mean_mesh_hops(1, 6) == 1.0
    assert 1.0 < mean_mesh_hops(23, 6) < 3.0
