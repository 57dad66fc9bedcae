"""Provider discovery at internet scale, simulated over the product's own DHT code (``p2p/dht``).

A first slice of issue 43's ``internet`` scenario, about one question: can a subscriber find a
node that carries its dataset? ``N`` nodes, ``M`` datasets whose popularity follows Zipf's law
(exponent 1.0), a few carriers per dataset, a fraction of nodes that never answer. Each carrier
provides its datasets (a lookup of the dataset's key, then a provider record at the closest
nodes that answered); each measured subscription runs a provider lookup from a random node.
Lookups are driven event by event in virtual time over a latency model (each answer arrives
one round trip after its query; a frozen node never answers), with the same :class:`Lookup`,
:class:`RoutingTable` and :class:`ProviderStore` objects the daemon is to drive.

The one-hop exchange the node runs today (``p2p/discovery.py``: connected peers answer with their
own records and their connected peers') is evaluated on the same network for comparison.

Routing tables: each node knows the ``k`` nodes nearest to it in key order (a self-lookup's
result) and a random sample of others, kept by the table's own rules (``k`` per bucket).
Not modelled here: churn, NAT and relays, malicious answers, bandwidth; the ``internet`` scenario
(``sim/internet.py``, ``odf-node sim run internet``) adds them over the same DHT objects.

Run: ``odf-node sim discovery --nodes 10000 --datasets 10000 --seed 1 --json``.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
import resource
import statistics
import time
from dataclasses import dataclass

from p2p.dht import Lookup, LookupConfig, ProviderStore, Query, RoutingTable, key_of
from p2p.dht.keys import DhtKey

S = 1_000_000_000
MS = 1_000_000


@dataclass(frozen=True)
class DiscoveryParams:
    """One run's parameters."""

    nodes: int = 10_000
    datasets: int = 10_000
    carriers: int = 5
    """Carriers per dataset (its owner and followers that verified it)."""
    subscriptions: int = 2_000
    """Subscriptions measured (each from a random node, datasets drawn by Zipf popularity)."""
    unresponsive: float = 0.10
    """Fraction of nodes that never answer a query (frozen, gone, behind a dead relay)."""
    random_contacts: int = 60
    """Random others each node has met (besides its nearest), offered to its routing table."""
    connections: int = 50
    """Connected peers per node for the one-hop exchange."""
    rtt_ms: float = 80.0
    """Median round trip; each query's is log-normal around it (sigma 0.5)."""
    deadline_s: float = 60.0
    seed: int = 1


def zipf_cdf(m: int, s: float = 1.0) -> list[float]:
    """The cumulative popularity of ``m`` items ranked by Zipf's law with exponent ``s``."""
    weights = [1.0 / (i + 1) ** s for i in range(m)]
    total = sum(weights)
    acc, out = 0.0, []
    for w in weights:
        acc += w / total
        out.append(acc)
    return out


class _Network:
    def __init__(self, p: DiscoveryParams, rng: random.Random) -> None:
        self.p = p
        self.rng = rng
        self.names = [f"12D3KooWsim{i}" for i in range(p.nodes)]
        self.keys = [key_of(n.encode()) for n in self.names]
        self.index = {n: i for i, n in enumerate(self.names)}
        frozen_count = int(p.nodes * p.unresponsive)
        self.frozen = set(rng.sample(range(p.nodes), frozen_count))
        self.tables = [RoutingTable(k) for k in self.keys]
        self.stores: dict[int, ProviderStore] = {}
        order = sorted(range(p.nodes), key=lambda i: self.keys[i])
        for pos, i in enumerate(order):
            near = order[max(0, pos - 20) : pos + 21]
            met = rng.sample(range(p.nodes), min(p.random_contacts, p.nodes))
            for j in [*near, *met]:
                if j != i:
                    self.tables[i].seen(self.names[j], self.keys[j], 0)

    def rtt_ns(self) -> int:
        return int(self.p.rtt_ms * MS * math.exp(self.rng.gauss(0.0, 0.5)))

    def run(self, start: int, target: DhtKey, cfg: LookupConfig, want: int) -> tuple[Lookup, int]:
        """A lookup from node ``start``; its end and the virtual ns it took (or the deadline)."""
        lookup = Lookup(target, self.tables[start].closest(target), cfg)
        answers: list[tuple[int, int, str]] = []  # (arrival, tie-break, peer)

        def send(queries: list[Query], now: int) -> None:
            for q in queries:
                if self.index[q.peer] not in self.frozen:  # a frozen node never answers
                    heapq.heappush(answers, (now + self.rtt_ns(), len(answers), q.peer))

        now = 0
        send(lookup.start(now), now)
        deadline = int(self.p.deadline_s * S)
        while not lookup.done and now < deadline:
            wake = lookup.next_deadline(now)
            if answers and (wake is None or answers[0][0] <= wake):
                now, _, peer = heapq.heappop(answers)
                j = self.index[peer]
                store = self.stores.get(j)
                providers = (
                    [r.provider for r in store.providers(target, now, want or None)]
                    if store is not None
                    else []
                )
                send(lookup.on_response(peer, self.tables[j].closest(target), providers, now), now)
            elif wake is not None:
                now = wake
                send(lookup.poll(now), now)
            else:
                break
        return lookup, min(now, deadline)

    def provide(self, carrier: int, target: DhtKey, now_ns: int) -> None:
        lookup, _ = self.run(carrier, target, LookupConfig(), 0)
        for peer in lookup.result().closest:
            j = self.index[peer]
            self.stores.setdefault(j, ProviderStore()).add(
                target, self.names[carrier], b"peer record", now_ns
            )

    def one_hop(self, start: int, carriers: set[int], conns: list[list[int]]) -> bool:
        """Today's exchange: a connected peer answers with its own records and its connected
        peers' (one hop of records beyond the neighbours)."""
        for a in conns[start]:
            if a in self.frozen:
                continue
            if a in carriers or any(b in carriers for b in conns[a]):
                return True
        return False


def simulate_discovery(p: DiscoveryParams) -> dict[str, object]:
    """Run one discovery simulation; its figures as JSON."""
    t0 = time.perf_counter()
    rng = random.Random(p.seed)
    net = _Network(p, rng)
    built_s = time.perf_counter() - t0
    live = [i for i in range(p.nodes) if i not in net.frozen]
    carriers = {d: set(rng.sample(live, p.carriers)) for d in range(p.datasets)}
    dataset_keys = [key_of(f"did:odf:fed01sim{d}".encode()) for d in range(p.datasets)]
    cdf = zipf_cdf(p.datasets)
    wanted = [
        min(bisect.bisect_left(cdf, rng.random()), p.datasets - 1) for _ in range(p.subscriptions)
    ]
    # Carriers provide only the datasets somebody asks for here (the rest cost time, not figures).
    for d in sorted(set(wanted)):
        for c in carriers[d]:
            net.provide(c, dataset_keys[d], 0)
    provided_s = time.perf_counter() - t0 - built_s
    conns = [rng.sample(range(p.nodes), p.connections) for _ in range(p.nodes)]
    # Every record here is a carrier's (no Sybils in this model): a named provider counts.
    cfg = LookupConfig(want_providers=1, count_unconfirmed=True)
    times_ms: list[float] = []
    queried: list[int] = []
    found = one_hop_found = 0
    for d in wanted:
        start = rng.choice(live)
        if start in carriers[d]:
            start = next(i for i in live if i not in carriers[d])
        lookup, took = net.run(start, dataset_keys[d], cfg, 1)
        res = lookup.result()
        queried.append(res.queried)
        if res.providers and set(net.index[x] for x in res.providers) & carriers[d]:
            found += 1
            times_ms.append(took / MS)
        one_hop_found += net.one_hop(start, carriers[d], conns)

    def pct(q: float) -> float | None:
        if not times_ms:
            return None
        ordered = sorted(times_ms)
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)

    return {
        "nodes": p.nodes,
        "datasets": p.datasets,
        "carriers_per_dataset": p.carriers,
        "unresponsive": p.unresponsive,
        "subscriptions": p.subscriptions,
        "seed": p.seed,
        "dht": {
            "found_within_deadline": round(found / p.subscriptions, 4),
            "lookup_ms": {"p50": pct(0.5), "p90": pct(0.9), "p99": pct(0.99)},
            "queries_per_lookup_median": statistics.median(queried) if queried else None,
        },
        "one_hop_only": {"found": round(one_hop_found / p.subscriptions, 4)},
        "wall_s": {
            "routing_tables": round(built_s, 1),
            "provide": round(provided_s, 1),
            "total": round(time.perf_counter() - t0, 1),
        },
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


__all__ = ["DiscoveryParams", "simulate_discovery"]
