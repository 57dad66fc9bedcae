"""The sans-IO DHT (``p2p/dht``): keys, the routing table's rules, lookups that converge and do
not wait on slow peers, and the provider store's bounds and expiry.

The network in these tests is a dictionary of routing tables answering at once (or never, for
a frozen peer), driven by hand: the same calls the daemon and the simulator make.
"""

from __future__ import annotations

import random

import pytest

from p2p.dht import (
    Lookup,
    LookupConfig,
    ProviderStore,
    Query,
    RecordLimits,
    RoutingTable,
    distance,
    key_of,
    shared_prefix_len,
)
from p2p.dht.keys import DhtKey
from p2p.dht.records import HOUR_NS, due_for_republish

S = 1_000_000_000


def peer(i: int) -> tuple[str, DhtKey]:
    name = f"12D3KooWpeer{i}"
    return name, key_of(name.encode())


def test_keys() -> None:
    a, b = key_of(b"a"), key_of(b"b")
    assert distance(a, a) == 0 and distance(a, b) == distance(b, a) > 0
    assert shared_prefix_len(a, a) == 256
    assert shared_prefix_len(DhtKey(0), DhtKey(1 << 255)) == 0
    assert shared_prefix_len(DhtKey(0), DhtKey(1)) == 255


def test_a_full_bucket_keeps_the_peers_that_work() -> None:
    own = DhtKey(0)
    table = RoutingTable(own, k=2)
    # Three peers in bucket 0 (top bit set): the third does not get in while two work.
    keys = [DhtKey((1 << 255) | i) for i in range(3)]
    assert table.seen("a", keys[0], 1) and table.seen("b", keys[1], 2)
    assert not table.seen("c", keys[2], 3)
    assert "c" not in table
    # Once "a" has failed twice in a row, "c" takes its place; "b" stays.
    table.failed("a", keys[0])
    assert not table.seen("c", keys[2], 4)
    table.failed("a", keys[0])
    assert table.seen("c", keys[2], 5)
    assert "a" not in table and "b" in table and "c" in table
    # Answering resets a peer's failures.
    table.failed("b", keys[1])
    table.seen("b", keys[1], 6)
    table.failed("b", keys[1])
    assert not table.seen("d", DhtKey((1 << 255) | 9), 7)


def test_a_flood_of_fresh_identities_cannot_push_known_peers_out() -> None:
    _, own = peer(0)
    table = RoutingTable(own)
    known = [peer(i) for i in range(1, 200)]
    for p, k in known:
        table.seen(p, k, 1)
    before = {p for p, _ in known if p in table}
    for i in range(10_000):
        name = f"sybil{i}"
        table.seen(name, key_of(name.encode()), 2)
    assert {p for p, _ in known if p in table} == before
    assert all(n <= table.k for n in table.bucket_sizes().values())
    assert len(table) <= table.k * len(table.bucket_sizes())


def network(n: int, seed: int = 1) -> dict[str, RoutingTable]:
    """``n`` peers, each knowing every other peer its buckets have room for."""
    rng = random.Random(seed)
    peers = [peer(i) for i in range(n)]
    tables = {p: RoutingTable(k) for p, k in peers}
    for p, _ in peers:
        order = peers[:]
        rng.shuffle(order)
        for q, qk in order:
            if q != p:
                tables[p].seen(q, qk, 0)
    return tables


def drive(
    lookup: Lookup,
    tables: dict[str, RoutingTable],
    *,
    frozen: frozenset[str] = frozenset(),
    providers: dict[str, list[str]] | None = None,
    genuine: frozenset[str] = frozenset(),
    latency_ns: int = 50_000_000,
    dial_ns: int | None = None,
) -> tuple[int, int]:
    """Run ``lookup`` over ``tables`` (answers after ``latency_ns``; ``frozen`` peers never
    answer; a named provider is dialled at once and confirmed after ``dial_ns``, default
    ``latency_ns``, when it is ``genuine``, failed otherwise); ``(virtual ns it took, most
    queries in flight at once)``."""
    dial_ns = latency_ns if dial_ns is None else dial_ns
    now = 0
    pending: list[tuple[int, Query]] = [(now + latency_ns, q) for q in lookup.start(now)]
    dials: list[tuple[int, str]] = []
    dialled: set[str] = set()
    peak = len(pending)
    while not lookup.done:
        answers = [a for a in pending if a[1].peer not in frozen]
        deadline = lookup.next_deadline(now)
        times = [t for t, _ in answers] + [t for t, _ in dials]
        due = min(times + ([deadline] if deadline is not None else []))
        now = due
        sent: list[Query] = []
        for t, q in [a for a in answers if a[0] <= now]:
            pending.remove((t, q))
            closer = tables[q.peer].closest(lookup.target)
            given = (providers or {}).get(q.peer, [])
            sent += lookup.on_response(q.peer, closer, given, now)
            for x in lookup.awaiting_confirmation:
                if x not in dialled:
                    dialled.add(x)
                    dials.append((now + dial_ns, x))
        for t, x in [d for d in dials if d[0] <= now]:
            dials.remove((t, x))
            if x in genuine:
                sent += lookup.on_provider_confirmed(x, now)
            else:
                sent += lookup.on_provider_failed(x, now)
        sent += lookup.poll(now)
        pending = [(t, q) for t, q in pending if not (q.peer in frozen and t <= now - 10 * S)]
        pending += [(now + latency_ns, q) for q in sent]
        in_flight = sum(1 for _, q in pending)
        peak = max(peak, in_flight)
        assert now < 3600 * S, "the lookup never ended"
    return now, peak


def test_a_lookup_finds_the_k_closest_peers() -> None:
    tables = network(400)
    names = list(tables)
    target = key_of(b"did:odf:fed01target")
    truth = sorted(names, key=lambda p: distance(key_of(p.encode()), target))[:20]
    start = tables[names[0]]
    lookup = Lookup(target, start.closest(target))
    took, peak = drive(lookup, tables)
    assert list(lookup.result().closest) == truth
    assert peak <= lookup.config.max_in_flight
    assert took < 2 * S  # a few hops of 50 ms


def test_frozen_peers_do_not_hold_a_lookup_up() -> None:
    tables = network(400, seed=2)
    names = list(tables)
    rng = random.Random(3)
    frozen = frozenset(rng.sample(names[1:], 40))  # 10 % never answer
    target = key_of(b"did:odf:fed01popular")
    carriers = [p for p in names if p not in frozen][-3:]
    providers = {
        p: carriers for p in sorted(names, key=lambda p: distance(key_of(p.encode()), target))[:20]
    }
    cfg = LookupConfig(want_providers=1)
    lookup = Lookup(target, tables[names[0]].closest(target), cfg)
    took, peak = drive(
        lookup, tables, frozen=frozen, providers=providers, genuine=frozenset(carriers)
    )
    found = lookup.result().confirmed
    assert found and set(found) <= set(carriers)
    # No round waited for a frozen peer's 10 s timeout: slow queries were overtaken at 1 s.
    assert took < cfg.query_timeout_ns
    assert peak <= cfg.max_in_flight


def test_providers_are_distinct_and_capped() -> None:
    lookup = Lookup(key_of(b"x"), [peer(1)], LookupConfig(max_providers=5))
    [q] = lookup.start(0)
    lookup.on_response(q.peer, [], ["p1"] * 20 + [f"p{i}" for i in range(50)], 1)
    assert lookup.result().providers == ("p1", "p0", "p2", "p3", "p4")


def test_a_sybil_answer_of_fake_providers_does_not_end_a_walk() -> None:
    """A Sybil first in the walk answers with 20 self-signed records of identities that carry
    nothing (and names only its friends as closer peers): the walk goes on to the honest peers
    and ends at the first provider a dial confirmed, not at the 20 it was told of."""
    tables = network(300, seed=4)
    names = list(tables)
    target = key_of(b"did:odf:fed01sybil")
    by_distance = sorted(names, key=lambda p: distance(key_of(p.encode()), target))
    carrier = by_distance[-1]  # a far node carries it; its record sits at the closest peers
    fakes = [f"12D3KooWfake{i}" for i in range(20)]
    sybil = by_distance[0]  # the closest to the key: asked first
    providers = {p: [carrier] for p in by_distance[1:21]}
    providers[sybil] = fakes
    tables[sybil] = RoutingTable(key_of(sybil.encode()))  # it names no one closer
    seeds = [(sybil, key_of(sybil.encode())), *tables[names[0]].closest(target)]
    cfg = LookupConfig(want_providers=1)

    # What go-libp2p-kad-dht's FindProvidersAsync(20) does: the Sybil's answer ends the walk.
    naive = Lookup(target, seeds, LookupConfig(want_providers=20, count_unconfirmed=True))
    assert sybil in {q.peer for q in naive.start(0)}
    naive.on_response(sybil, [], fakes, 1)
    assert naive.done and carrier not in naive.result().providers

    lookup = Lookup(target, seeds, cfg)
    sent = lookup.start(0)
    assert sybil in {q.peer for q in sent}
    lookup.on_response(sybil, [], fakes, 1)
    assert not lookup.done and set(lookup.awaiting_confirmation) == set(fakes)
    # All 20 fail their dials: still not done, and they never count.
    for f in fakes:
        lookup.on_provider_failed(f, 2)
    assert not lookup.done and lookup.result().providers == ()

    lookup = Lookup(target, seeds, cfg)
    drive(lookup, tables, providers=providers, genuine=frozenset({carrier}), dial_ns=S)
    res = lookup.result()
    assert res.confirmed == (carrier,) and lookup.done
    assert res.failed_providers == 20 and not set(res.providers) & set(fakes)


def test_a_walked_lookup_waits_for_the_dials_it_started() -> None:
    lookup = Lookup(key_of(b"x"), [peer(1)], LookupConfig(want_providers=1))
    [q] = lookup.start(0)
    assert lookup.on_response(q.peer, [], ["p1", "p2"], 1) == []
    # The walk is over (nobody left to ask) but two named providers await their dials.
    assert lookup.walked and not lookup.done
    lookup.on_provider_failed("p1", 2)
    assert not lookup.done
    lookup.on_provider_failed("p2", 3)
    assert lookup.done and lookup.result().confirmed == ()
    # A confirmation ends it at once; one more than wanted is not needed.
    other = Lookup(key_of(b"x"), [peer(1), peer(2)], LookupConfig(want_providers=1))
    sent = other.start(0)
    other.on_response(sent[0].peer, [], ["p1", "p2"], 1)
    assert other.on_provider_confirmed("p2", 2) == [] and other.done
    assert other.result().confirmed == ("p2",) and other.result().providers == ("p1", "p2")


def test_failed_providers_free_their_places() -> None:
    lookup = Lookup(key_of(b"x"), [peer(1), peer(2)], LookupConfig(max_providers=3))
    a, b = lookup.start(0)
    lookup.on_response(a.peer, [], ["f1", "f2", "f3"], 1)
    for f in ("f1", "f2", "f3"):
        lookup.on_provider_failed(f, 2)
    lookup.on_response(b.peer, [], ["f1", "real"], 3)  # a failed one is not taken again
    assert lookup.result().providers == ("real",)


def test_an_answer_nobody_asked_for_is_ignored() -> None:
    lookup = Lookup(key_of(b"x"), [peer(1)])
    lookup.start(0)
    lookup.on_response("stranger", [peer(7)], ["evil"], 1)
    assert lookup.result().providers == () and lookup.result().queried == 1


def test_a_lookup_with_no_one_to_ask_is_done() -> None:
    lookup = Lookup(key_of(b"x"), [])
    assert lookup.start(0) == [] and lookup.done
    lonely = Lookup(key_of(b"x"), [peer(1)])
    [q] = lonely.start(0)
    assert lonely.on_failure(q.peer, 1) == [] and lonely.done
    assert lonely.result().failed == 1


def test_provider_records_expire_and_are_republished_in_time() -> None:
    lim = RecordLimits()
    store = ProviderStore(lim)
    k = key_of(b"did:odf:fed01a")
    assert store.add(k, "p1", b"record", 0)
    assert [r.provider for r in store.providers(k, lim.ttl_ns - 1)] == ["p1"]
    assert store.providers(k, lim.ttl_ns) == []
    assert not due_for_republish(0, 21 * HOUR_NS, lim) and due_for_republish(0, 22 * HOUR_NS, lim)
    # A republish before the TTL keeps the record alive.
    assert store.add(k, "p1", b"record", 22 * HOUR_NS)
    assert store.expire(lim.ttl_ns) == 0 and len(store) == 1
    assert store.expire(22 * HOUR_NS + lim.ttl_ns) == 1 and len(store) == 0


def test_the_provider_store_is_bounded_under_a_flood() -> None:
    lim = RecordLimits(per_key=3, per_provider=2, max_records=10, max_record_bytes=8)
    store = ProviderStore(lim)
    k = key_of(b"did:odf:fed01a")
    assert not store.add(k, "big", b"x" * 9, 0)
    for i in range(3):
        assert store.add(k, f"p{i}", b"r", i)
    # A full key takes a new provider only in place of a record closer to expiry.
    assert store.add(k, "p3", b"r", 10)
    assert {r.provider for r in store.providers(k, 10)} == {"p1", "p2", "p3"}
    # One provider cannot fill the store with keys.
    assert store.add(key_of(b"k1"), "one", b"r", 11) and store.add(key_of(b"k2"), "one", b"r", 11)
    assert not store.add(key_of(b"k3"), "one", b"r", 11)
    # Many identities: the total stays bounded and a refused record is said to be refused.
    refused = sum(
        not store.add(key_of(f"k{i}".encode()), f"sybil{i}", b"r", 12) for i in range(10, 1000)
    )
    assert len(store) == 10 and refused == 990 - (10 - 5)  # 5 were stored before the flood


@pytest.mark.parametrize("seed", range(5))
def test_lookups_converge_for_any_start(seed: int) -> None:
    tables = network(200, seed=seed)
    names = list(tables)
    rng = random.Random(seed)
    target = key_of(f"t{seed}".encode())
    truth = sorted(names, key=lambda p: distance(key_of(p.encode()), target))[:20]
    start = rng.choice(names)
    lookup = Lookup(target, tables[start].closest(target))
    drive(lookup, tables)
    assert list(lookup.result().closest) == truth
