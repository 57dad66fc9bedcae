"""The ``internet`` scenario (issue 43 items 3-4): discovery and trust in a network of N nodes and
M datasets, over the product's own code.

``odf-node sim run internet --nodes N --datasets M --seed S --json`` (scenario file
``sim/scenarios/internet.toml``). What runs unchanged, imported from ``p2p/``:

* **the DHT** (``p2p/dht``): every routing table, iterative lookup and provider store is the
  sans-IO object the daemon is to drive; this module only carries queries over a latency model;
* **the one-hop exchange** (``p2p/discovery.py``): every node that answers or asks is a real
  :class:`~p2p.discovery.Discovery`, its ``serve`` and ``run_once`` coroutines driven to the end
  synchronously over a simulated transport (no await ever suspends: the transport answers at
  once and advances a virtual clock by each request's round trip, so a round takes as long as
  its sequential requests do in the daemon);
* **the gossip core** (:class:`~p2p.core.ProtocolCore`, through ``p2p/executor.py``): every light
  subscriber whose trust is measured judges the owner's real signed announcement and a forged
  one (signed by a malicious node's key);
* **the trust policy** (:mod:`p2p.trust`, through ``p2p/trust_executor.py``): the attesters run
  ``verify-all`` and the light subscribers a ``k``-of-``n`` quorum of their trusted attesters.

The network: ``nat_fraction`` of nodes behind NAT (they dial out; others reach them only through
a relay, one more leg on each dial; they run the DHT in client mode, as go-libp2p-kad-dht does
when AutoNAT says private), ``light_fraction`` light nodes (no engine: they query the DHT but do
not serve it, carry nothing and trust by quorum), ``malicious_fraction`` malicious nodes (as DHT
servers they withhold the records they hold, answer with the malicious nodes closest to the key
as "closer peers" and with malicious peers as providers; in the one-hop exchange they claim to
carry every dataset; they attest and forge heads), ``unresponsive`` of the DHT servers gone
(routing entries that never answer), and churn: each node leaves at ``churn_per_hour`` and comes
back after ``mean_offline_s`` on average (exponential times), answering nothing meanwhile.
Datasets have Zipf popularity (``zipf_exponent``): each node follows ``follows`` of them.

Aggregate where a per-message simulation would not fit (100,000 x 100,000): discovery is measured
on ``subscriptions`` new subscriptions drawn by popularity at uniform times in the run; the
datasets they ask for are provided by up to ``max_providing`` of their carriers each (the
owner first; a DHT server keeps ``per_key`` = 20 records of a key, so more providers change
what it holds, not what a lookup finds). Trust is measured on ``trust_samples`` light
subscriptions (one head each). Bytes per node per hour and state per node combine the measured
per-operation figures with the network's rates (docs/simulation.md, "The internet scenario").
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import math
import random
import resource
import statistics
import time
import tomllib
from array import array
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

from coordinator.identity import DatasetId, PrivateKey, generate_private_key
from coordinator.multiformats import Multihash
from p2p import trust
from p2p.core import (
    CoreConfig,
    FetchCompleted,
    HeadAccepted,
    MessageReceived,
    ProtocolCore,
    RequestFetch,
)
from p2p.dht import Lookup, LookupConfig, ProviderStore, Query, RoutingTable, key_of
from p2p.dht.keys import KEY_BITS, DhtKey, dataset_key
from p2p.dht.records import RecordLimits
from p2p.discovery import (
    Discovery,
    PeerRecord,
    decode_providers_request,
    decode_providers_response,
)
from p2p.executor import NullEffects, execute_all
from p2p.transport import TransportError, dataset_topic
from p2p.trust_executor import dispatch
from p2p.wire import FetchLocations, HeadAnnouncement, Verdict, sign_message
from sim.discovery import zipf_cdf
from sim.scenario import ScenarioError, read_document, resolve

NS: Final = 1_000_000_000
MS: Final = 1_000_000
T0_NS: Final = 1_763_700_000 * NS
"""Virtual time zero (a fixed Unix time, so the core's ``issued_at`` checks behave)."""

_T = TypeVar("_T")


@dataclass(frozen=True)
class InternetParams:
    """One run's parameters (the ``[internet]`` table of a scenario file)."""

    nodes: int = 10_000
    datasets: int = 10_000
    follows: int = 3
    """Datasets each node follows (drawn by popularity)."""
    zipf_exponent: float = 1.0
    subscriptions: int = 2_000
    """New subscriptions whose discovery is measured."""
    nat_fraction: float = 0.60
    light_fraction: float = 0.10
    malicious_fraction: float = 0.05
    unresponsive: float = 0.10
    """DHT servers that never answer (gone nodes still in routing tables)."""
    churn_per_hour: float = 0.10
    mean_offline_s: float = 1800.0
    duration_s: float = 3600.0
    dials: int = 25
    """Gossip connections each node opens (to nodes not behind NAT); it also takes inbound ones."""
    random_contacts: int = 60
    """Random DHT servers each node has met, offered to its routing table besides its nearest."""
    refreshed_tables: bool = True
    """Routing tables as go-libp2p-kad-dht's refresh leaves them: up to ``k`` random servers of
    every bucket up to a common prefix length of 15, besides the nearest (False: the nearest and
    ``random_contacts`` random servers, whose middle buckets stay thin)."""
    rtt_ms: float = 80.0
    """Median round trip (log-normal, sigma 0.5, per exchange)."""
    relay_rtt_ms: float = 80.0
    """Median round trip of the relay leg a dial to a node behind NAT adds."""
    max_providing: int = 20
    dht: bool = True
    """False: discovery by the one-hop exchange only (``--no-dht``)."""
    stop_on_verified: bool = True
    """A provider lookup walks to convergence and the driver stops it at the first provider a
    dial confirmed (False: the lookup ends once it holds ``max_providing`` providers, confirmed
    or not, as go-libp2p-kad-dht's ``FindProvidersAsync(count)`` does)."""
    deadline_s: float = 60.0
    trust_samples: int = 500
    trusted_attesters: int = 8
    """Attesters each light subscriber trusts (drawn from the dataset's full followers)."""
    quorum_k: int = 3
    verify_s: float = 30.0
    """Median engine seconds of one replay (log-normal, sigma 0.5)."""
    fetch_bytes: int = 1_000_000
    bandwidth_mbps: float = 20.0
    heads_per_hour: float = 1.0
    """Heads each dataset's owner publishes per hour (rates for bytes and replays)."""
    mesh_degree: int = 6
    discovery_interval_s: float = 10.0
    """The one-hop loop's interval (``[p2p] discovery_interval_s``), doubling up to 16x while
    idle."""
    exchange_ms: float = 0.0
    """Processing per request/response exchange (one-hop request, DHT query, a head request)
    beyond its round trip: both ends' decode, handling and stream set-up."""
    dial_ms: float = 0.0
    """Processing per new connection beyond its two round trips (security and muxer
    handshakes)."""
    relay_dial_ms: float = 0.0
    """Processing a dial through a relay adds (the circuit's reservation check, its HOP and
    STOP exchanges, the handshakes over the circuit)."""
    hop_ms: float = 5.0
    """Processing per gossip hop (decode, the core's checks), added to half a round trip."""
    verify_sigma: float = 0.5
    """Spread (log-normal sigma) of the replay time around ``verify_s``."""
    fetch_s: float = 0.0
    """A pull's median seconds, log-normal with ``fetch_sigma`` (0: two round trips and
    ``fetch_bytes`` at ``bandwidth_mbps``)."""
    fetch_sigma: float = 0.5
    full_fetch_s: float = 0.0
    """A full follower's pull before its replay, median seconds (the inputs too; 0: as
    ``fetch_s``)."""
    full_fetch_sigma: float = 0.5
    first_fetch_s: float = 0.0
    """A light node's first pull of a dataset, during its subscription, median seconds
    (``calibration`` discovery; log-normal with ``first_fetch_sigma``; 0: as ``fetch_s``). The
    lab measures it apart from the heads' pulls, which run while every follower pulls the same
    head through the relay."""
    first_fetch_sigma: float = 0.5
    fetch_samples_s: tuple[float, ...] = ()
    """Measured pulls (seconds) to draw from, uniformly, instead of the log-normal of
    ``fetch_s`` (``calibration``: the lab's own samples; a lab's pulls can be multi-modal, which
    no log-normal represents: the core retries a failed fetch after 2, 4, ... 60 s)."""
    full_fetch_samples_s: tuple[float, ...] = ()
    """The same for ``full_fetch_s``."""
    first_fetch_samples_s: tuple[float, ...] = ()
    """The same for ``first_fetch_s``."""
    attestation_delivery_samples_s: tuple[float, ...] = ()
    """Measured deliveries (seconds, signer's attestation -> recorded at a light node) to draw
    a light node's receipt of an honest attester's attestation from, uniformly, instead of
    the mesh model's hops of ``hop_ms`` (``calibration``: the lab's own samples). A lab's
    heads make every follower that pulled attest at about the same time, and on one
    machine's cores that burst queues each message's validation at every hop: the delivery
    then depends on the load, which ``hop_ms`` (one figure per hop) cannot represent. The
    announcement, discovery and the attesters' own receipt of the head keep ``hop_ms``."""
    subscribe_gap_s: float = 0.0
    """Seconds between the light nodes' subscriptions (``calibration``: the lab's
    ``--subscribe-gap``, so that each subscription's discovery runs alone, as the simulator
    composes it; 0: 1 ms apart)."""
    peer_watch_s: float = 0.0
    """``calibration``: how often the daemon's libp2p thread posts its connected peers to the
    node (``p2p/libp2p_host.py`` ``peer_watch_interval_s``); a new connection reaches the core
    only with that snapshot (0: at once)."""
    tick_s: float = 0.0
    """``calibration``: the daemon's service tick (``p2p/service.py`` ``tick_interval_s``): the
    core hears of a new connection in the snapshot at the next tick, and only then asks the
    peer for its heads (0: at once)."""
    catch_up_s: float = 0.0
    """``calibration``: a subscription to an unknown dataset looks at the snapshot once this
    long after it (``p2p/service.py`` ``catch_up_delay_s``), besides the ticks (0: never)."""
    discovery_replicates: int = 1
    """``calibration``: the light nodes' discoveries simulated this many times, each replicate
    with its own seeded random streams (the first one's are the single run's); the output adds
    the median over replicates of each replicate's p50 and p99, an estimate of the same
    statistic over as many samples as the lab has, with less sampling noise than one replicate
    (a p99 over 14 samples is their largest)."""
    trust_replicates: int = 1
    """``calibration``: publish -> trusted simulated this many times, each replicate with its
    own seeded random streams (the first one's are the single run's); the output adds every
    replicate's (head, trusted) pairs, so that the median over replicates of each one's p50 and
    p99 can be taken over the same pairs as the lab's (a p99 over 42 pairs is one of their
    three largest)."""
    head_interval_s: float = 0.0
    """Seconds between an owner's heads (``calibration``: the lab's commit interval; a light
    node logs a head as trusted only while no newer head was accepted; 0: heads judged apart)."""
    calibration: bool = False
    """The lab's network (``tests/bench/bench_calibration.py``, docs/simulation.md "Calibration
    against real daemons"): node 0 a public relay that follows nothing and every node's one
    connection (the lab's bootstrap peer), exactly ``nat_nodes`` behind NAT and ``light_nodes``
    light, owners follow nothing; measured: every light node's subscription to each dataset it
    follows (subscribe -> first head received) and publish -> trusted for ``heads`` heads; any
    size from 8 nodes."""
    nat_nodes: int = 0
    """Nodes behind NAT (``calibration``)."""
    light_nodes: int = 0
    """Light nodes (``calibration``)."""
    heads: int = 3
    """Heads each owner publishes (``calibration``)."""
    seed: int = 1

    def validate(self) -> None:
        """Check ranges.

        Raises:
            ScenarioError: a value is out of range.
        """
        if self.nodes < (8 if self.calibration else 50) or self.datasets < 1:
            raise ScenarioError("internet: nodes must be >= 50 (8 in calibration), datasets >= 1")
        if self.calibration and (
            self.nat_nodes < 0
            or self.light_nodes < 0
            or self.nat_nodes > self.nodes - 2
            or self.light_nodes + self.datasets + self.quorum_k > self.nodes - 1
            or self.heads < 1
        ):
            raise ScenarioError(
                "internet (calibration): need 0 <= nat_nodes <= nodes - 2, room for the relay, "
                "the owners and quorum_k full followers beside light_nodes, heads >= 1"
            )
        for name in ("nat_fraction", "light_fraction", "malicious_fraction", "unresponsive"):
            if not 0.0 <= getattr(self, name) < 0.9:
                raise ScenarioError(f"internet.{name} must be in [0, 0.9)")
        if self.nat_fraction + self.light_fraction >= 0.95:
            raise ScenarioError("internet: too few public full nodes left to serve the DHT")
        if self.follows < 1 or self.follows > self.datasets:
            raise ScenarioError("internet.follows must be in 1..datasets")
        if (
            min(
                (
                    *self.fetch_samples_s,
                    *self.full_fetch_samples_s,
                    *self.first_fetch_samples_s,
                    *self.attestation_delivery_samples_s,
                ),
                default=0,
            )
            < 0
        ):
            raise ScenarioError("internet: measured pull and delivery samples must be >= 0 s")
        if self.discovery_replicates < 1 or self.trust_replicates < 1:
            raise ScenarioError("internet.discovery_replicates and trust_replicates must be >= 1")
        if self.quorum_k < 1 or self.trusted_attesters < self.quorum_k:
            raise ScenarioError("internet: need 1 <= quorum_k <= trusted_attesters")
        if (
            self.discovery_interval_s <= 0
            or min(
                self.hop_ms,
                self.fetch_s,
                self.full_fetch_s,
                self.first_fetch_s,
                self.head_interval_s,
                self.subscribe_gap_s,
                self.peer_watch_s,
                self.tick_s,
                self.catch_up_s,
                self.exchange_ms,
                self.dial_ms,
                self.relay_dial_ms,
            )
            < 0
        ):
            raise ScenarioError(
                "internet: discovery_interval_s > 0; hop_ms, fetch_s, full_fetch_s, "
                "first_fetch_s, head_interval_s, subscribe_gap_s, peer_watch_s, tick_s, "
                "catch_up_s, exchange_ms, dial_ms, relay_dial_ms >= 0"
            )
        if self.duration_s <= self.deadline_s:
            raise ScenarioError("internet.duration_s must exceed deadline_s")


def is_internet(path: str | Path) -> bool:
    """Whether the scenario file (or name) is an ``internet`` scenario (``kind = "internet"``)."""
    try:
        doc = tomllib.loads(resolve(path).read_text())
    except (OSError, tomllib.TOMLDecodeError, ScenarioError):
        return False
    return doc.get("kind") == "internet"


def load_params(path: str | Path, overrides: dict[str, Any] | None = None) -> InternetParams:
    """The parameters of an ``internet`` scenario file, with dotted ``overrides``
    (``{"internet.nodes": 1000}``; ``seed`` at the top level).

    Raises:
        ScenarioError: not an internet scenario, unknown key, wrong type or bad value.
    """
    p, doc = read_document(path, overrides)
    if doc.get("kind") != "internet":
        raise ScenarioError(f'{p} is not an internet scenario (kind = "internet")')
    known = {f.name: f for f in dataclasses.fields(InternetParams)}
    values: dict[str, Any] = {}
    for key, value in doc.items():
        if key in ("kind", "name"):
            continue
        if key == "seed":
            values["seed"] = _typed("seed", value, 1)
        elif key == "internet":
            if not isinstance(value, dict):
                raise ScenarioError("[internet] must be a table")
            for k, v in value.items():
                if k not in known or k == "seed":
                    raise ScenarioError(f"unknown key internet.{k}")
                values[k] = _typed(f"internet.{k}", v, getattr(InternetParams(), k))
        else:
            raise ScenarioError(f"unknown key {key}")
    params = InternetParams(**values)
    params.validate()
    return params


def _typed(where: str, value: Any, default: Any) -> Any:
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
    elif isinstance(default, float):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif isinstance(default, int) and isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ScenarioError(f"{where}: wrong type {type(value).__name__}")


# ----------------------------------------------------------------------------- helpers


def _churn(p: InternetParams, active: list[int]) -> dict[int, list[tuple[int, int]]]:
    """Offline intervals (ns from zero) of the nodes that leave during the run, each drawn from
    the node's own random stream: leaving at ``churn_per_hour``, back after ``mean_offline_s``
    on average."""
    offline: dict[int, list[tuple[int, int]]] = {}
    rate = p.churn_per_hour / 3600.0
    if rate <= 0:
        return offline
    for i in active:
        r = random.Random(p.seed * 2_000_003 + i)
        t = r.expovariate(rate)
        spans = []
        while t < p.duration_s:
            back = t + r.expovariate(1.0 / p.mean_offline_s)
            spans.append((int(t * NS), int(back * NS)))
            t = back + r.expovariate(rate)
        if spans:
            offline[i] = spans
    return offline


def _connections(
    p: InternetParams, rng: random.Random, frozen: bytearray, public: list[int]
) -> tuple[array[int], array[int], array[int]]:
    """The gossip connections: each node dials ``dials`` nodes not behind NAT. Returned as the
    dials (``dials`` per node, -1 for none) and the dials to each node (``inb`` from
    ``in_start[i]`` to ``in_start[i + 1]``), compact at 100,000 nodes."""
    n = p.nodes
    out = array("i")
    for i in range(n):
        if frozen[i]:
            out.extend([-1] * p.dials)
            continue
        picks = rng.sample(public, min(p.dials + 1, len(public)))
        picks = [j for j in picks if j != i][: p.dials]
        picks += [-1] * (p.dials - len(picks))
        out.extend(picks)
    counts = [0] * (n + 1)
    for j in out:
        if j >= 0:
            counts[j + 1] += 1
    for i in range(n):
        counts[i + 1] += counts[i]
    inb = array("i", [0] * counts[n])
    fill = list(counts[:n])
    for pos, j in enumerate(out):
        if j >= 0:
            inb[fill[j]] = pos // p.dials
            fill[j] += 1
    return out, array("i", counts), inb


def _drive(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run a coroutine that never suspends (the simulated transport answers at once)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("a simulated discovery coroutine suspended")


def _rank_pct(xs: list[float], q: float) -> float | None:
    """The q-quantile by the nearest-rank method, unrounded (None for no samples)."""
    if not xs:
        return None
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _pct(xs: list[float], q: float) -> float | None:
    v = _rank_pct(xs, q)
    return None if v is None else round(v, 1)


def _median_of(xs: list[float | None]) -> float | None:
    """The median of the defined values (None if none), to the millisecond."""
    ys = [x for x in xs if x is not None]
    return round(statistics.median(ys), 3) if ys else None


def _pcts(xs: list[float], qs: tuple[float, ...] = (0.5, 0.9, 0.99)) -> dict[str, float | None]:
    return {f"p{round(q * 100)}": _pct(xs, q) for q in qs}


# Sizes of what the model sends (bytes, with framing): DHT messages as go-libp2p-kad-dht's
# protobufs carry them, gossip envelopes as p2p.wire encodes them.
_DHT_REQUEST = 120
_DHT_PEER = 70
_DHT_PROVIDER = 350
_ADD_PROVIDER = 400
_ANNOUNCEMENT = 560
_ATTESTATION = 640
_REFRESH_PERIOD_S = 600.0
"""go-libp2p-kad-dht refreshes its routing table every 10 minutes."""
_REFRESHED_BUCKETS = 15
"""... with one lookup per bucket up to a common prefix length of 15."""
_REPUBLISH_S = RecordLimits().republish_ns / NS


@dataclass(slots=True)
class _Find:
    """One measured subscription's DHT search (possibly several lookups)."""

    found_ns: int | None = None
    connected_ns: int | None = None
    ended_ns: int = 0
    """When the last lookup ended."""
    queries: int = 0
    lookups: int = 0
    liars: set[int] = field(default_factory=set)


class _World:
    """The network: who is where, what they carry, and the product's objects per node."""

    def __init__(self, p: InternetParams) -> None:
        self.p = p
        rng = random.Random(p.seed)
        n = p.nodes
        self.names = [f"12D3KooWsim{i}" for i in range(n)]
        self.keys = [key_of(x.encode()) for x in self.names]
        self.index = {x: i for i, x in enumerate(self.names)}
        if p.calibration:
            # node 0: the lab's public relay and bootstrap peer
            self.nat, self.light = bytearray(n), bytearray(n)
            for i in rng.sample(range(1, n), p.nat_nodes):
                self.nat[i] = 1
            for i in rng.sample(range(1, n), p.light_nodes):
                self.light[i] = 1
            self.malicious = bytearray(n)
        else:
            self.nat = bytearray(1 if rng.random() < p.nat_fraction else 0 for _ in range(n))
            self.light = bytearray(1 if rng.random() < p.light_fraction else 0 for _ in range(n))
            self.malicious = bytearray(
                1 if rng.random() < p.malicious_fraction else 0 for _ in range(n)
            )
        self.servers = [i for i in range(n) if not self.nat[i] and not self.light[i]]
        honest_servers = [i for i in self.servers if not self.malicious[i]]
        self.frozen = bytearray(n)
        for i in rng.sample(honest_servers, int(len(self.servers) * p.unresponsive)):
            self.frozen[i] = 1
        self.active = [i for i in range(n) if not self.frozen[i]]
        self.public = [i for i in self.active if not self.nat[i]]
        self.offline = _churn(p, self.active)
        self.out, self.in_start, self.inb = _connections(
            p, rng, self.frozen, [0] if p.calibration else self.public
        )
        # datasets: owners, followers (Zipf), carriers
        self.cdf = zipf_cdf(p.datasets, p.zipf_exponent)
        full_honest = [i for i in self.active if not self.light[i] and not self.malicious[i]]
        if p.calibration:  # distinct owners, never the relay
            self.owner = rng.sample([i for i in full_honest if i != 0], p.datasets)
        else:
            self.owner = [rng.choice(full_honest) for _ in range(p.datasets)]
        self.follows: list[tuple[int, ...]] = [()] * n
        self.followers: list[list[int]] = [[] for _ in range(p.datasets)]
        for i in self.active:
            if p.calibration and (i == 0 or i in self.owner):
                continue  # the relay follows nothing, an owner only its own
            picked: dict[int, None] = {}
            while len(picked) < p.follows:
                d = self.zipf(rng)
                if self.owner[d] != i:
                    picked[d] = None
            self.follows[i] = tuple(picked)
            for d in picked:
                self.followers[d].append(i)
        # DHT: routing tables (servers eagerly, clients when they first look up), stores
        order = sorted(self.servers, key=lambda i: self.keys[i])
        self.server_keys = [self.keys[i] for i in order]
        self.server_order = order
        mal = sorted((i for i in self.servers if self.malicious[i]), key=lambda i: self.keys[i])
        self.mal_order = mal
        self.mal_keys = [self.keys[i] for i in mal]
        self.tables: dict[int, RoutingTable] = {}
        for i in self.servers:
            if not self.frozen[i]:
                self.table(i)
        self.stores: dict[int, ProviderStore] = {}
        self.dids: dict[int, DatasetId] = {}
        self.dataset_of: dict[DatasetId, int] = {}
        self.owner_keys: dict[int, PrivateKey] = {}
        self.node_keys: dict[int, PrivateKey] = {}
        self.c: dict[str, int] = {
            "dht_find_queries": 0,
            "dht_find_lookups": 0,
            "dht_find_bytes": 0,
            "dht_provide_queries": 0,
            "dht_provides": 0,
            "dht_provide_bytes": 0,
            "dht_add_provider_bytes": 0,
            "one_hop_requests": 0,
            "one_hop_bytes": 0,
            "one_hop_rounds": 0,
        }
        # one-hop: the real Discovery objects and the virtual clock their transports advance
        self.clock_ns = 0
        self.timing = False
        self.asking: list[DatasetId] = []
        self.watch: tuple[int, int] | None = None  # (subscriber, dataset) whose carriers we time
        self.watch_found_ns: int | None = None
        self.watch_carrier = -1
        self.rng = random.Random(p.seed * 3_000_017)
        self._plain: dict[int, Discovery] = {}
        self._served: dict[int, Discovery] = {}

    # ---- population

    def zipf(self, rng: random.Random) -> int:
        """A dataset drawn by popularity."""
        return min(bisect.bisect_left(self.cdf, rng.random()), self.p.datasets - 1)

    def online(self, i: int, t_ns: int) -> bool:
        """Whether node ``i`` answers at ``t_ns``."""
        if self.frozen[i]:
            return False
        spans = self.offline.get(i)
        return spans is None or all(not a <= t_ns < b for a, b in spans)

    def neighbours(self, i: int) -> list[int]:
        """Node ``i``'s gossip connections (its dials and the dials to it)."""
        d = self.p.dials
        out = [j for j in self.out[i * d : (i + 1) * d] if j >= 0]
        return out + list(self.inb[self.in_start[i] : self.in_start[i + 1]])

    def carries(self, i: int, d: int) -> bool:
        """Ground truth: ``i`` holds ``d`` and serves it (owner, or full honest follower)."""
        if self.owner[d] == i:
            return True
        return not self.light[i] and not self.malicious[i] and d in self.follows[i]

    def member(self, i: int, d: int) -> bool:
        """``i`` joined ``d``'s gossip topic (owner or follower, honest or not)."""
        return self.owner[d] == i or d in self.follows[i]

    def did(self, d: int) -> DatasetId:
        """The DID of dataset ``d`` (its owner's key, made when first needed)."""
        did = self.dids.get(d)
        if did is None:
            key = generate_private_key(
                b"ds" + self.p.seed.to_bytes(8, "big") + d.to_bytes(22, "big")
            )
            self.owner_keys[d] = key
            did = self.dids[d] = key.dataset_id()
            self.dataset_of[did] = d
        return did

    def node_key(self, i: int) -> PrivateKey:
        """Node ``i``'s signing key (made when first needed)."""
        key = self.node_keys.get(i)
        if key is None:
            key = self.node_keys[i] = generate_private_key(
                b"nd" + self.p.seed.to_bytes(8, "big") + i.to_bytes(22, "big")
            )
        return key

    def rtt_ns(self, rng: random.Random, median_ms: float | None = None) -> int:
        """One round trip (log-normal around ``median_ms``, default ``rtt_ms``)."""
        med = self.p.rtt_ms if median_ms is None else median_ms
        return int(med * MS * math.exp(rng.gauss(0.0, 0.5)))

    def dial_ns(self, j: int, rng: random.Random) -> int:
        """A new connection to ``j``: two round trips, each with a relay leg behind NAT."""
        legs = self.rtt_ns(rng) + (self.rtt_ns(rng, self.p.relay_rtt_ms) if self.nat[j] else 0)
        extra = self.p.dial_ms + (self.p.relay_dial_ms if self.nat[j] else 0.0)
        return 2 * legs + int(extra * MS)

    # ---- DHT

    def table(self, i: int) -> RoutingTable:
        """Node ``i``'s routing table: its nearest servers in key order and random others."""
        t = self.tables.get(i)
        if t is not None:
            return t
        t = self.tables[i] = RoutingTable(self.keys[i])
        r = random.Random(self.p.seed * 1_000_003 + i)
        own = self.keys[i]
        pos = bisect.bisect_left(self.server_keys, own)
        near = self.server_order[max(0, pos - 20) : pos + 21]
        if self.p.refreshed_tables:
            # bucket c: the keys sharing c leading bits with ours and not the next one, a
            # contiguous range of the sorted server keys
            met = []
            for cpl in range(_REFRESHED_BUCKETS + 1):
                shift = KEY_BITS - cpl - 1
                prefix = (own >> shift) ^ 1
                lo = bisect.bisect_left(self.server_keys, prefix << shift)
                hi = bisect.bisect_left(self.server_keys, (prefix + 1) << shift)
                picks = r.sample(range(lo, hi), min(t.k, hi - lo))
                met += [self.server_order[x] for x in picks]
        else:
            met = r.sample(self.servers, min(self.p.random_contacts, len(self.servers)))
        for j in [*near, *met]:
            if j != i:
                t.seen(self.names[j], self.keys[j], 0)
        return t

    def _mal_closest(self, target: DhtKey) -> list[tuple[str, DhtKey]]:
        """The malicious servers nearest ``target`` (what a poisoner names as closer peers)."""
        if not self.mal_order:
            return []
        pos = bisect.bisect_left(self.mal_keys, target)
        window = self.mal_order[max(0, pos - 20) : pos + 20]
        window.sort(key=lambda j: self.keys[j] ^ target)
        return [(self.names[j], self.keys[j]) for j in window[:20]]

    def _answer(
        self, j: int, target: DhtKey, now: int, find: bool
    ) -> tuple[list[tuple[str, DhtKey]], list[str]]:
        if self.malicious[j]:
            closer = self._mal_closest(target)
            return closer, [x for x, _ in closer] if find else []
        store = self.stores.get(j)
        providers = [r.provider for r in store.providers(target, now)] if store and find else []
        return self.table(j).closest(target), providers

    def walk(
        self,
        start: int,
        target: DhtKey,
        t0: int,
        rng: random.Random,
        find: _Find | None,
        d: int = -1,
    ) -> tuple[Lookup, int]:
        """One lookup from ``start`` at ``t0`` (a provider lookup when ``find`` is given, which
        records the first genuine carrier's record and connection); to ``deadline_s``."""
        p = self.p
        # Counting providers toward the end of the walk as answers name them (go-libp2p-kad-dht's
        # FindProvidersAsync(count): ``count_unconfirmed``) lets one poisoned answer of 20 fake
        # providers end it; counting only the providers a dial confirmed, as the daemon does,
        # does not (``stop_on_verified``: each dial's outcome is reported to the lookup).
        confirm = find is not None and p.stop_on_verified
        if find is None:
            cfg = LookupConfig()
        elif confirm:
            cfg = LookupConfig(want_providers=1)
        else:
            cfg = LookupConfig(want_providers=p.max_providing, count_unconfirmed=True)
        lookup = Lookup(target, self.table(start).closest(target), cfg)
        deadline = t0 + int(p.deadline_s * NS)
        events: list[tuple[int, int, int, int]] = []  # (time, seq, kind 0 answer / 1 dial, node)
        seq = 0
        named_by: dict[int, int] = {}  # provider -> the server whose answer named it first
        kind = "find" if find is not None else "provide"

        def send(queries: list[Query], now: int) -> None:
            nonlocal seq
            for q in queries:
                j = self.index[q.peer]
                self.c[f"dht_{kind}_queries"] += 1
                self.c[f"dht_{kind}_bytes"] += _DHT_REQUEST
                if find is not None:
                    find.queries += 1
                if self.online(j, now):  # gone or offline: never answers (the lookup times out)
                    seq += 1
                    ask = self.rtt_ns(rng) + int(p.exchange_ms * MS)
                    heapq.heappush(events, (now + ask, seq, 0, j))

        now = t0
        send(lookup.start(now), now)
        while now < deadline:
            if find is not None and find.connected_ns is not None and p.stop_on_verified:
                break  # a carrier answered our dial: the driver stops walking
            over = lookup.done or lookup.walked  # dials under way stay events below
            if over and not any(e[2] == 1 for e in events):
                break
            wake = None if over else lookup.next_deadline(now)
            if events and (wake is None or events[0][0] <= wake):
                now, _, ev, j = heapq.heappop(events)
                if now >= deadline:
                    break
                if ev == 1:  # a dial to a provider named in an answer ended
                    assert find is not None
                    confirmed = self.carries(j, d) and self.online(j, now)
                    if confirmed and find.connected_ns is None:
                        find.connected_ns = now
                    elif not confirmed and self.online(j, now):
                        # it answered the dial but carries nothing: whoever named it lied
                        find.liars.add(named_by[j])
                    if confirm:
                        name = self.names[j]
                        outcome = (
                            lookup.on_provider_confirmed if confirmed else lookup.on_provider_failed
                        )
                        send(outcome(name, now), now)
                    continue
                if lookup.done or lookup.walked:
                    continue
                if find is not None and j in find.liars:
                    send(lookup.on_failure(self.names[j], now), now)
                    continue
                closer, providers = self._answer(j, target, now, find is not None)
                self.c[f"dht_{kind}_bytes"] += (
                    64 + _DHT_PEER * len(closer) + _DHT_PROVIDER * len(providers)
                )
                if find is not None:
                    for name in providers:
                        x = self.index[name]
                        if x in named_by:
                            continue
                        named_by[x] = j
                        if find.found_ns is None and self.carries(x, d) and self.online(x, now):
                            find.found_ns = now
                        seq += 1
                        heapq.heappush(events, (now + self.dial_ns(x, rng), seq, 1, x))
                send(lookup.on_response(self.names[j], closer, providers, now), now)
            elif wake is not None:
                now = wake
                send(lookup.poll(now), now)
            else:
                break
        return lookup, min(now, deadline)

    def provide(self, carrier: int, d: int, t0: int, rng: random.Random) -> None:
        """``carrier`` provides ``d``: a walk to the key, then a record at the closest that
        answered (a malicious one keeps it to itself)."""
        target = self.dataset_key(d)
        lookup, _ = self.walk(carrier, target, t0, rng, None)
        self.c["dht_provides"] += 1
        record = f"/ip4/127.0.0.1/tcp/4001/p2p/{self.names[carrier]}".encode()
        for peer in lookup.result().closest:
            j = self.index[peer]
            self.c["dht_add_provider_bytes"] += _ADD_PROVIDER
            if not self.malicious[j]:
                self.stores.setdefault(j, ProviderStore()).add(
                    target, self.names[carrier], record, t0
                )

    def dataset_key(self, d: int) -> DhtKey:
        """The DHT key of dataset ``d`` (the daemon's :func:`p2p.dht.keys.dataset_key`)."""
        return dataset_key(self.did(d))

    def find(self, start: int, d: int, t0: int, rng: random.Random) -> _Find:
        """A subscriber's DHT search for ``d``: a provider lookup, dialling every provider as
        its record arrives; while no genuine carrier answered a dial and time is left, again,
        treating the servers that named providers carrying nothing as failed."""
        f = _Find()
        deadline = t0 + int(self.p.deadline_s * NS)
        t = t0
        known_liars = -1
        while f.connected_ns is None and t < deadline and len(f.liars) > known_liars:
            known_liars = len(f.liars)
            f.lookups += 1
            self.c["dht_find_lookups"] += 1
            _, t = self.walk(start, self.dataset_key(d), t, rng, f, d)
            f.ended_ns = t
            for liar in f.liars:
                self.table(start).remove(self.names[liar], self.keys[liar])
        return f

    # ---- one hop (the real Discovery over a simulated transport)

    def record(self, j: int) -> PeerRecord:
        """``j``'s own record: a direct address, or a relayed one behind NAT."""
        name = self.names[j]
        if self.nat[j]:
            relay = (
                self.names[self.out[j * self.p.dials]] if self.out[j * self.p.dials] >= 0 else name
            )
            addr = f"/ip4/127.0.0.1/tcp/4001/p2p/{relay}/p2p-circuit/p2p/{name}"
        else:
            addr = f"/ip4/127.0.0.1/tcp/4001/p2p/{name}"
        return PeerRecord(peer_id=name, gossip=(addr,))

    def discovery(
        self, tr: _SimTransport, follows: list[DatasetId], rng: random.Random | None = None
    ) -> Discovery:
        """A :class:`Discovery` for ``tr``'s node following ``follows`` (a list the caller
        may extend)."""
        j = tr.node
        rec = self.record(j)

        def carries(did: DatasetId) -> bool:
            # a malicious node claims to carry whatever it is asked about
            return bool(self.malicious[j]) or self.carries(j, self.dataset_of[did])

        return Discovery(
            tr,
            self_record=lambda: rec,
            carries=carries,
            followed=lambda: follows,
            connect_ipfs=None,
            rng=rng or self.rng,
            loopback_only=True,
            clock=lambda: self.clock_ns / NS,
            record_ttl_s=self.p.duration_s,
        )

    def server(self, j: int, first_hand: bool) -> Discovery:
        """Node ``j``'s Discovery as a responder; ``first_hand``: one that has asked its
        connected peers for their records (what it hands out about them), as it has after its
        own first round (run here with the clock stopped)."""
        if first_hand:
            disc = self._served.get(j)
            if disc is None:
                if len(self._served) >= 4096:
                    self._served.clear()  # rebuilt identically when needed (no randomness)
                disc = self._served[j] = self.discovery(_SimTransport(self, j, []), [])
                timing, self.timing = self.timing, False
                asking = self.asking
                _drive(disc.run_once())
                self.timing, self.asking = timing, asking
            return disc
        disc = self._plain.get(j)
        if disc is None:
            if len(self._plain) >= 65_536:
                self._plain.clear()
            disc = self._plain[j] = self.discovery(_SimTransport(self, j, []), [])
        return disc

    def advance(self, seconds_ns: int) -> None:
        """A request or dial took ``seconds_ns`` of the asking node's (sequential) round."""
        if self.timing:
            self.clock_ns += seconds_ns

    def one_hop(self, i: int, d: int, t0: int, rng: random.Random) -> tuple[int | None, int]:
        """Subscriber ``i`` starts following ``d`` at ``t0``: its Discovery's rounds until a
        genuine carrier's record arrives or the deadline; (found at, end of the first round)."""
        tr = _SimTransport(self, i, [])
        follows: list[DatasetId] = []
        disc = self.discovery(tr, follows, rng)
        self.timing = False
        self.clock_ns = t0
        self.asking = []
        # the node's steady state: a round has asked its peers for their own records before
        _drive(disc.run_once())
        follows.append(self.did(d))
        tr.followed.append(d)
        self.watch, self.watch_found_ns = (i, d), None
        self.timing = True
        deadline = t0 + int(self.p.deadline_s * NS)
        topics = _drive(tr.topic_peers())
        connected = set(tr.connected_peers())
        on_topic = topics.get(dataset_topic(self.did(d).as_multibase()), set()) & connected
        if any(self.carries(self.index[x], d) for x in on_topic):
            self.watch_found_ns = t0  # a connected peer on the topic carries it: nothing to find
        first_end = t0
        t, idle, rounds = t0, 0, 0
        while t < deadline and self.watch_found_ns is None:
            self.clock_ns = t
            report = _drive(disc.run_once())
            rounds += 1
            self.c["one_hop_rounds"] += 1
            if rounds == 1:
                first_end = self.clock_ns
            busy = report.learned or report.dialled or report.unreachable
            idle = 0 if busy else min(idle + 1, 4)
            interval = self.p.discovery_interval_s
            delay = interval * (2**idle if idle else 1)
            t = self.clock_ns + int(min(delay, interval * 16) * rng.uniform(0.8, 1.2) * NS)
        self.timing = False
        found = self.watch_found_ns
        self.watch = None
        return (found if found is not None and found < deadline else None), first_end

    def heard(self, i: int, response: bytes) -> None:
        """A response reached ``i``: note when the watched subscriber first holds a record of a
        genuine carrier of its dataset that is online."""
        if self.watch is None or self.watch[0] != i or self.watch_found_ns is not None:
            return
        d = self.watch[1]
        want = self.did(d).as_did_str()
        for rec in decode_providers_response(response):
            j = self.index.get(rec.peer_id)
            genuine = j is not None and want in rec.carries and self.carries(j, d)
            if genuine and j is not None and self.online(j, self.clock_ns):
                self.watch_found_ns = self.clock_ns
                self.watch_carrier = j
                return


class _SimTransport:
    """:class:`~p2p.discovery.DiscoveryTransport` of one simulated node: requests are answered
    by the peer's own :class:`Discovery` at once, the virtual clock advanced by a round trip."""

    def __init__(self, world: _World, i: int, followed: list[int]) -> None:
        self._w = world
        self._i = i
        self.node = i
        self.followed = followed
        self._dialled: set[int] = set()
        self._rng = random.Random(world.p.seed * 5_000_011 + i)

    @property
    def peer_id(self) -> str:
        """This node's peer id."""
        return self._w.names[self._i]

    def connected_peers(self) -> list[str]:
        """Connections to peers online now."""
        w = self._w
        now = w.clock_ns
        peers = [*w.neighbours(self._i), *sorted(self._dialled)]
        return [w.names[j] for j in dict.fromkeys(peers) if w.online(j, now)]

    async def connect(self, addr: str) -> str:
        """Dial the peer an address names (through its relay behind NAT)."""
        w = self._w
        j = w.index[addr.rsplit("/", 1)[1]]
        w.advance(w.dial_ns(j, self._rng))
        if not w.online(j, w.clock_ns):
            raise TransportError(f"{addr}: unreachable")
        self._dialled.add(j)
        return w.names[j]

    async def request(self, peer: str, protocol: str, data: bytes, timeout_s: float) -> bytes:
        """One exchange with ``peer``'s Discovery (``timeout_s`` of virtual time if gone)."""
        w = self._w
        j = w.index[peer]
        if not w.online(j, w.clock_ns):
            w.advance(int(timeout_s * NS))
            raise TransportError(f"{peer}: timed out")
        dids = decode_providers_request(data)
        w.asking = dids
        response = await w.server(j, first_hand=bool(dids)).serve(self.peer_id, data)
        w.advance(w.rtt_ns(self._rng) + int(w.p.exchange_ms * MS))
        if w.timing:
            w.c["one_hop_requests"] += 1
            w.c["one_hop_bytes"] += len(data) + len(response) + 2 * 64
        w.heard(self._i, response)
        return response

    async def topic_peers(self) -> dict[str, set[str]]:
        """Every asked or followed topic's members among this node's connections."""
        w = self._w
        out: dict[str, set[str]] = {}
        ds = {w.dataset_of[x] for x in w.asking} | set(self.followed)
        peers = [w.index[x] for x in self.connected_peers()]
        for d in sorted(ds):
            out[dataset_topic(w.did(d).as_multibase())] = {
                w.names[j] for j in peers if w.member(j, d)
            }
        return out


# ----------------------------------------------------------------------------- trust


class _LightEffects(NullEffects):
    """A light subscriber's core decisions: fetch (then report it), and accepted heads to the
    trust policy."""

    def __init__(self, run: _LightRun) -> None:
        self.run = run

    def fetch(self, d: RequestFetch) -> None:
        r = self.run
        done = r.now + r.fetch_ns
        r.push(done, ("fetched", FetchCompleted(d.dataset, d.head, True, T0_NS + done)))

    def head_accepted(self, d: HeadAccepted) -> None:
        r = self.run
        r.accepted.setdefault(d.head.digest, r.now)
        r.decide(r.policy.handle(trust.HeadSeen(d.dataset, d.head, T0_NS + r.now)))


class _LightTrust:
    """What a light subscriber's trust decisions do: note when each head became trusted."""

    def __init__(self, run: _LightRun) -> None:
        self.run = run

    def replay(self, d: trust.Replay) -> None:
        """A light node has no engine: its policy never asks (``can_replay`` is False)."""
        self.run.replays += 1

    def trusted(self, d: trust.Trusted) -> None:
        """Record the time the head became trusted."""
        self.run.trusted.setdefault(d.head.digest, self.run.now)

    def distrusted(self, d: trust.Distrusted) -> None:
        """Nothing to record."""


@dataclass
class _LightRun:
    """One light subscriber's view of one head: its core, its policy, its events in time."""

    core: ProtocolCore
    policy: trust.TrustPolicy
    fetch_ns: int
    now: int = 0
    events: list[tuple[int, int, tuple[str, Any]]] = field(default_factory=list)
    trusted: dict[bytes, int] = field(default_factory=dict)
    accepted: dict[bytes, int] = field(default_factory=dict)
    replays: int = 0
    _seq: int = 0

    def push(self, t: int, ev: tuple[str, Any]) -> None:
        self._seq += 1
        heapq.heappush(self.events, (t, self._seq, ev))

    def decide(self, decisions: list[trust.TrustDecision]) -> None:
        effects = _LightTrust(self)
        for dec in decisions:
            dispatch(dec, effects)

    def run(self) -> None:
        effects = _LightEffects(self)
        while self.events:
            self.now, _, (kind, ev) = heapq.heappop(self.events)
            if kind == "attestation":
                self.decide(self.policy.handle(ev))
            else:
                execute_all(self.core.handle(ev), effects)


class _AttesterTrust:
    """A full follower's trust decisions: a replay on its engine, then trusted (it attests)."""

    def __init__(self, w: _World, rng: random.Random) -> None:
        self.w, self.rng = w, rng
        self.replays = 0
        self.verified_at: int | None = None
        self.now = 0

    def replay(self, d: trust.Replay) -> None:
        """Replay: log-normal engine seconds around ``verify_s``."""
        self.replays += 1
        p = self.w.p
        self.now += int(p.verify_s * NS * math.exp(self.rng.gauss(0.0, p.verify_sigma)))

    def trusted(self, d: trust.Trusted) -> None:
        """Its own replay verified the head: it attests now."""
        self.verified_at = self.now

    def distrusted(self, d: trust.Distrusted) -> None:
        """Never, with honest heads."""


def _mesh_hops(rank: int, degree: int) -> int:
    """Hops from the publisher to the member of ``rank`` in a tree of degree ``degree``."""
    return 1 + int(math.log(1 + rank * (degree - 1)) / math.log(degree))


def mean_mesh_hops(members: int, degree: int) -> float:
    """The mean hops of mesh delivery to one of ``members`` topic members (``_gossip_ns``)."""
    return statistics.fmean(_mesh_hops(r, degree) for r in range(max(1, members)))


def _gossip_ns(w: _World, members: int, rng: random.Random) -> int:
    """Mesh delivery to one of ``members`` topic members: hops of a tree of degree ``D`` from
    the publisher, each a one-way link (half a round trip) plus ``hop_ms`` of processing."""
    hops = _mesh_hops(rng.randrange(max(1, members)), w.p.mesh_degree)
    return sum(w.rtt_ns(rng) // 2 + int(w.p.hop_ms * MS) for _ in range(hops))


def _attestation_delivery_ns(w: _World, members: int, rng: random.Random) -> int:
    """An honest attestation's delivery to a light node: a measured sample when given
    (``attestation_delivery_samples_s``), else the mesh's (:func:`_gossip_ns`)."""
    if w.p.attestation_delivery_samples_s:
        return int(rng.choice(w.p.attestation_delivery_samples_s) * NS)
    return _gossip_ns(w, members, rng)


@dataclass
class _Published:
    """One head of dataset ``d`` published at ``t_pub``, and a forgery of it."""

    d: int
    did: DatasetId
    t_pub: int
    members: int
    head: Multihash
    forged: Multihash
    genuine: bytes
    forgery: bytes | None
    forger: int
    full: list[int]
    """The dataset's full followers (its possible attesters, malicious ones included)."""
    attest_at: dict[int, int | None] = field(default_factory=dict)


@dataclass
class _TrustTally:
    times: list[float] = field(default_factory=list)
    no_quorum: int = 0
    forged_sent: int = 0
    forged_trusted: int = 0
    replays: int = 0
    attesters_run: int = 0


def _publish(w: _World, d: int, rng: random.Random) -> _Published:
    """The owner's signed head of ``d`` and a malicious follower's forgery of it."""
    p = w.p
    did = w.did(d)
    t_pub = int(rng.uniform(0, p.duration_s - 900) * NS)
    head = Multihash.sha3_256(f"s{p.seed}-d{d}-genuine".encode())
    forged = Multihash.sha3_256(f"s{p.seed}-d{d}-forged".encode())
    forgers = [j for j in w.followers[d] if w.malicious[j]] or [
        j for j in w.active if w.malicious[j]
    ][:1]
    forgery = _announce(did, forged, t_pub, w.node_key(forgers[0]), 2) if forgers else None
    return _Published(
        d,
        did,
        t_pub,
        len(w.followers[d]) + 1,
        head,
        forged,
        _announce(did, head, t_pub, w.owner_keys[d], 1),
        forgery,
        forgers[0] if forgers else -1,
        [j for j in w.followers[d] if not w.light[j]],
    )


def _fetch_ns(w: _World, rng: random.Random, full: bool = False, first: bool = False) -> int:
    """A pull: ``fetch_s`` (``full_fetch_s`` for a full follower, ``first_fetch_s`` for a
    light node's first pull while it subscribes; log-normal) when set, else two round trips
    and ``fetch_bytes``. Measured samples, when given, are drawn from instead."""
    p = w.p
    samples = (
        (first and p.first_fetch_samples_s)
        or (full and p.full_fetch_samples_s)
        or (not first and not full and p.fetch_samples_s)
    )
    if samples:
        return int(rng.choice(samples) * NS)
    if first and w.p.first_fetch_s > 0:
        return int(w.p.first_fetch_s * NS * math.exp(rng.gauss(0.0, w.p.first_fetch_sigma)))
    if full and w.p.full_fetch_s > 0:
        return int(w.p.full_fetch_s * NS * math.exp(rng.gauss(0.0, w.p.full_fetch_sigma)))
    if w.p.fetch_s > 0:
        return int(w.p.fetch_s * NS * math.exp(rng.gauss(0.0, w.p.fetch_sigma)))
    return 2 * w.rtt_ns(rng) + int(w.p.fetch_bytes * 8 * NS / (w.p.bandwidth_mbps * 1_000_000))


def _stream(seed: int, replicate: int, *parts: int) -> random.Random:
    """A random stream of a calibration replicate: replicate 0 is seeded with ``seed`` (the
    single run's streams, unchanged), replicate r > 0 by a string naming it (the same in
    every process)."""
    if replicate == 0:
        return random.Random(seed)
    return random.Random("calibration-trust/" + "/".join(map(str, (replicate, *parts))))


def _attestation_time(
    w: _World, h: _Published, j: int, tally: _TrustTally, replicate: int = 0
) -> int | None:
    """When honest full follower ``j`` attests ``h``: it receives the head, fetches it, and
    its verify-all policy asks for a replay whose verdict trusts it (memoised per head)."""
    if j in h.attest_at:
        return h.attest_at[j]
    ar = _stream(w.p.seed * 7_000_003 + j * 131 + h.d, replicate, w.p.seed, 1, j, h.d)
    pol = trust.dataset_policy(trust.TrustConfig(policy=trust.Policy.VERIFY_ALL), ar)
    eff = _AttesterTrust(w, ar)
    eff.now = h.t_pub + _gossip_ns(w, h.members, ar) + _fetch_ns(w, ar, full=True)
    for dec in pol.handle(trust.HeadSeen(h.did, h.head, T0_NS + eff.now)):
        dispatch(dec, eff)
    verdict = trust.LocalVerdict(h.did, h.head, trust.Outcome.VERIFIED, T0_NS + eff.now)
    for dec in pol.handle(verdict):
        dispatch(dec, eff)
    tally.replays += eff.replays
    tally.attesters_run += 1
    h.attest_at[j] = eff.verified_at
    return eff.verified_at


def _light_view(
    w: _World,
    h: _Published,
    i: int,
    trusted_set: list[int],
    tally: _TrustTally,
    stream: int = 0,
    replicate: int = 0,
) -> _LightRun:
    """Light subscriber ``i`` of ``h``: its core judges the head and the forgery, its quorum
    policy the attestations of ``trusted_set`` (malicious ones vouch for the forgery at once,
    never for the real head); run to the end. ``stream``: another random stream (one per
    head of the same dataset); ``replicate``: a calibration replicate's (see :func:`_stream`)."""
    p = w.p
    cfg = trust.TrustConfig(
        policy=trust.Policy.QUORUM,
        k=p.quorum_k,
        trusted_attesters=frozenset(w.node_key(j).dataset_id() for j in trusted_set),
        can_replay=False,
    )
    lr = _stream(
        p.seed * 9_000_011 + i * 131 + h.d + 1_000_003 * stream,
        replicate,
        *(p.seed, 2, i, h.d, stream),
    )
    run = _LightRun(
        ProtocolCore(CoreConfig(), lr, (h.did,)), trust.dataset_policy(cfg, lr), _fetch_ns(w, lr)
    )
    at = h.t_pub + _gossip_ns(w, h.members, lr)
    run.push(at, ("message", MessageReceived(f"n{w.owner[h.d]}", h.genuine, T0_NS + at)))
    if h.forgery is not None:
        tally.forged_sent += 1
        at = h.t_pub + _gossip_ns(w, h.members, lr)
        run.push(at, ("message", MessageReceived(f"n{h.forger}", h.forgery, T0_NS + at)))
    for j in trusted_set:
        if w.malicious[j]:
            at, mh = h.t_pub + _gossip_ns(w, h.members, lr), h.forged
        else:
            done = h.attest_at[j]
            if done is None:
                continue
            at, mh = done + _attestation_delivery_ns(w, h.members, lr), h.head
        signer = w.node_key(j).dataset_id()
        ev = trust.AttestationSeen(h.did, mh, signer, Verdict.VERIFIED, T0_NS + at)
        run.push(at, ("attestation", ev))
    run.run()
    return run


def _trust_runs(w: _World, rng: random.Random) -> dict[str, Any]:
    """Publish -> trusted at sampled light subscribers, forged heads, attester replays."""
    p = w.p
    lights = [(i, d) for i in w.active if w.light[i] and not w.malicious[i] for d in w.follows[i]]
    sample = sorted(rng.sample(lights, min(p.trust_samples, len(lights))))
    by_dataset: dict[int, list[int]] = {}
    for i, d in sample:
        by_dataset.setdefault(d, []).append(i)
    tally = _TrustTally()
    for d in sorted(by_dataset):
        h = _publish(w, d, rng)
        for i in by_dataset[d]:
            if len(h.full) < p.quorum_k:
                tally.no_quorum += 1
                continue
            trusted_set = rng.sample(h.full, min(p.trusted_attesters, len(h.full)))
            for j in trusted_set:
                if not w.malicious[j]:
                    _attestation_time(w, h, j, tally)
            run = _light_view(w, h, i, trusted_set, tally)
            tally.forged_trusted += h.forged.digest in run.trusted
            got = run.trusted.get(h.head.digest)
            if got is not None and got <= p.duration_s * NS:
                tally.times.append((got - h.t_pub) / NS)
    n = len(sample)
    per_head = tally.replays / tally.attesters_run if tally.attesters_run else None
    return {
        "light_subscriptions": n,
        "publish_to_trusted_s": _pcts(tally.times, (0.5, 0.99)),
        "trusted_within_run": round(len(tally.times) / n, 4) if n else None,
        "no_quorum_possible": round(tally.no_quorum / n, 4) if n else None,
        "forged_heads_sent": tally.forged_sent,
        "forged_heads_trusted": tally.forged_trusted,
        "replays_per_attester_head": round(per_head, 3) if per_head is not None else None,
        # a full node replays every head of each dataset it follows (verify-all), a light none
        "replays_per_full_node_per_hour": round(p.follows * p.heads_per_hour * per_head, 3)
        if per_head is not None
        else None,
    }


def _announce(did: DatasetId, mh: Multihash, t_ns: int, key: PrivateKey, nonce: int) -> bytes:
    """A signed announcement of ``mh`` as the head of ``did`` (by ``key``: the owner's, or a
    forger's, whose envelope fails the core's signature check)."""
    ann = HeadAnnouncement(
        dataset=did,
        head=mh,
        sequence=1,
        prev_head=None,
        epoch=0,
        locations=FetchLocations(http_urls=("http://127.0.0.1:1/d",)),
        issued_at_ns=T0_NS + t_ns,
        nonce=nonce.to_bytes(16, "big"),
    )
    return sign_message(ann, key).envelope


# ----------------------------------------------------------------------------- the run


def _subscriptions(w: _World) -> list[tuple[int, int, int]]:
    """The measured new subscriptions, by time: (ns, honest node online then, dataset by
    popularity that it neither owns nor follows)."""
    p = w.p
    rng = random.Random(p.seed * 4_000_037)
    horizon = p.duration_s - p.deadline_s
    subs: list[tuple[int, int, int]] = []
    candidates = [i for i in w.active if not w.malicious[i]]
    while len(subs) < p.subscriptions:
        t = int(rng.uniform(0, horizon) * NS)
        i = rng.choice(candidates)
        d = w.zipf(rng)
        if w.online(i, t) and not w.member(i, d):
            subs.append((t, i, d))
    subs.sort()
    return subs


def _provide_asked(w: _World, subs: list[tuple[int, int, int]]) -> None:
    """Up to ``max_providing`` carriers (the owner first) of each dataset asked for provide it
    at time zero (records live 48 h)."""
    p = w.p
    for d in sorted({d for _, _, d in subs}):
        carriers = [w.owner[d]] + [j for j in w.followers[d] if w.carries(j, d)]
        pr = random.Random(p.seed * 6_000_023 + d)
        chosen = carriers[:1] + pr.sample(carriers[1:], min(len(carriers) - 1, p.max_providing - 1))
        for c in chosen:
            if w.online(c, 0):
                w.provide(c, d, 0, pr)


@dataclass
class _DiscoveryTally:
    no_carrier_online: int = 0
    hop_only_found: int = 0
    hop_first: int = 0
    found: int = 0
    restarts: int = 0
    hop_ms: list[float] = field(default_factory=list)
    round_ms: list[float] = field(default_factory=list)
    disc_ms: list[float] = field(default_factory=list)
    lookup_ms: list[float] = field(default_factory=list)
    conn_ms: list[float] = field(default_factory=list)
    queries: list[int] = field(default_factory=list)


def _discover(w: _World, s: int, t0: int, i: int, d: int, tally: _DiscoveryTally) -> None:
    """Subscription ``s``: node ``i`` starts following ``d`` at ``t0``. One-hop rounds to the
    deadline (the one-hop-only figure); with the DHT, a search when the first round found
    nothing, the earlier of the two counting."""
    p = w.p
    sr = random.Random(p.seed * 8_000_009 + s)
    if not any(w.carries(j, d) and w.online(j, t0) for j in [w.owner[d], *w.followers[d]]):
        tally.no_carrier_online += 1
    found_hop, first_end = w.one_hop(i, d, t0, sr)
    tally.round_ms.append((first_end - t0) / MS)
    if found_hop is not None:
        tally.hop_only_found += 1
        tally.hop_ms.append((found_hop - t0) / MS)
    if not p.dht:
        return
    best = found_hop
    if found_hop is None or found_hop > first_end:
        f = w.find(i, d, first_end, sr)
        tally.queries.append(f.queries)
        tally.restarts += f.lookups - 1
        if f.found_ns is not None:
            tally.lookup_ms.append((f.found_ns - first_end) / MS)
            if best is None or f.found_ns < best:
                best = f.found_ns
        if f.connected_ns is not None:
            tally.conn_ms.append((f.connected_ns - t0) / MS)
    else:
        tally.hop_first += 1
    if best is not None and best - t0 <= int(p.deadline_s * NS):
        tally.found += 1
        tally.disc_ms.append((best - t0) / MS)


def _discovery_figures(p: InternetParams, n: int, t: _DiscoveryTally) -> dict[str, Any]:
    out: dict[str, Any] = {
        "subscriptions": n,
        "no_carrier_online": round(t.no_carrier_online / n, 4),
        "one_hop_only": {
            "found_within_deadline": round(t.hop_only_found / n, 4),
            "discovery_ms": _pcts(t.hop_ms, (0.5, 0.99)),
            "first_round_ms": _pcts(t.round_ms, (0.5, 0.99)),
        },
    }
    if p.dht:
        out["dht"] = {
            "found_within_deadline": round(t.found / n, 4),
            "found_one_hop_first": round(t.hop_first / n, 4),
            "discovery_ms": _pcts(t.disc_ms, (0.5, 0.99)),
            "lookup_ms": _pcts(t.lookup_ms),
            "lookups": len(t.queries),
            "connected_ms": _pcts(t.conn_ms, (0.5, 0.99)),
            "queries_per_search_median": statistics.median(t.queries) if t.queries else None,
            "repeated_lookups": t.restarts,
        }
    return out


@dataclass(frozen=True)
class LabPlan:
    """Who is who in a ``calibration`` run, for the lab to build the same network: node 0 is
    the relay; per node whether it is behind NAT or light, the datasets it follows; per
    dataset its owner; per (light node, dataset) the attesters it trusts."""

    nat: tuple[bool, ...]
    light: tuple[bool, ...]
    owner: tuple[int, ...]
    follows: tuple[tuple[int, ...], ...]
    trusted: dict[tuple[int, int], tuple[int, ...]]


def _trusted_set(w: _World, i: int, d: int) -> list[int]:
    """The attesters light node ``i`` trusts for ``d``: ``trusted_attesters`` of its full
    followers, drawn from the pair's own random stream."""
    full = [j for j in w.followers[d] if not w.light[j]]
    r = random.Random(w.p.seed * 11_000_027 + i * 131 + d)
    return sorted(r.sample(full, min(w.p.trusted_attesters, len(full))))


def lab_plan(p: InternetParams) -> LabPlan:
    """The network a ``calibration`` run of ``p`` simulates (the same seed, the same choices).

    Raises:
        ScenarioError: ``p`` is not a valid calibration run.
    """
    if not p.calibration:
        raise ScenarioError("lab_plan needs internet.calibration = true")
    p.validate()
    w = _World(p)
    n = p.nodes
    return LabPlan(
        nat=tuple(bool(x) for x in w.nat),
        light=tuple(bool(x) for x in w.light),
        owner=tuple(w.owner),
        follows=tuple(w.follows[i] for i in range(n)),
        trusted={
            (i, d): tuple(_trusted_set(w, i, d))
            for i in range(n)
            if w.light[i]
            for d in w.follows[i]
        },
    )


def _queued_attestations(
    w: _World, heads: list[_Published], j: int, tally: _TrustTally, replicate: int = 0
) -> None:
    """Honest full follower ``j``'s attestations of an owner's successive ``heads`` (committed
    ``head_interval_s`` apart), as the daemon's verification queue makes them
    (node/app/verify.py ``VerifyQueue.queue`` and ``run``): head k is accepted after its mesh
    delivery and its pull (the core keeps the newest: an older head arriving after a newer
    one is not accepted); one verification runs at a time; a head accepted while one is
    pending joins it; a verification checks the dataset's current head, so a head superseded
    before its verification started is never attested. Sets each head's ``attest_at[j]``."""
    p = w.p
    gap = int(p.head_interval_s * NS)
    arrivals: list[tuple[int, int, int]] = []  # (accepted, head index, replay ns), lab time
    for k, h in enumerate(heads):
        ar = _stream(
            p.seed * 7_000_003 + j * 131 + h.d + 1_000_003 * k, replicate, p.seed, 3, j, h.d, k
        )
        at = k * gap + _gossip_ns(w, h.members, ar) + _fetch_ns(w, ar, full=True)
        replay = int(p.verify_s * NS * math.exp(ar.gauss(0.0, p.verify_sigma)))
        arrivals.append((at, k, replay))
        h.attest_at[j] = None

    def verified(k: int, end: int) -> None:
        heads[k].attest_at[j] = heads[k].t_pub + end - k * gap
        tally.replays += 1

    free_at, pending, newest = -1, False, -1
    current = (0, 0)  # the current head and its replay's length
    for at, k, replay in sorted(arrivals):
        if k < newest:
            continue  # older than the accepted head: not accepted
        newest = k
        if pending and free_at <= at:  # the pending verification ran on the head then current
            free_at += current[1]
            verified(current[0], free_at)
            pending = False
        current = (k, replay)
        if free_at <= at:
            free_at = at + replay
            verified(k, free_at)
        else:
            pending = True
    if pending:
        verified(current[0], free_at + current[1])
    tally.attesters_run += 1


def _light_discoveries(
    w: _World,
    lights: list[tuple[int, int]],
    replicate: int,
    head_known: list[float] | None = None,
) -> tuple[list[float], int]:
    """Every light subscription's discovery (seconds; see :func:`_calibration`) in one
    replicate, and how many found no carrier before the deadline. Replicate 0 draws the
    streams a single run always drew; replicate r > 0 its own (string-seeded, so the same for
    every process). ``head_known`` gains each subscription's seconds to the first head known
    (before its pull)."""
    p = w.p
    known: list[float] = []
    disc: list[float] = []
    missed = 0
    for s, (i, d) in enumerate(lights):
        if replicate == 0:
            sr = random.Random(p.seed * 8_000_009 + s)
        else:
            sr = random.Random(f"calibration-discovery/{p.seed}/{replicate}/{s}")
        t0 = int(p.deadline_s * NS) + _subscribe_offset_ns(p, s)
        found, first_end = w.one_hop(i, d, t0, sr)
        got: int | None = None
        if found is not None and p.dht:
            # The daemon's round (p2p/discovery.py ``run_once``) asks the DHT before it dials:
            # a carrier a neighbour named is not connected yet, so no known provider is, and
            # the DHT lookup dials the providers it finds to confirm them (p2p/dht_service.py);
            # its round's dial then finds the carrier connected. A lookup that confirms none
            # leaves the dial to the round.
            f = w.find(i, d, found, sr)
            got = f.connected_ns
            if got is None:
                got = f.ended_ns + w.dial_ns(w.watch_carrier, sr)
        elif found is not None:
            got = found + w.dial_ns(w.watch_carrier, sr)
        elif p.dht:
            got = w.find(i, d, first_end, sr).connected_ns
        if got is None:
            missed += 1
            continue
        got = _core_sees_connection(p, t0, got, sr)
        got += w.rtt_ns(sr) + int((p.exchange_ms + p.hop_ms) * MS)
        known.append((got - t0) / NS)  # the lab's head_known_s: the head request answered
        got += _fetch_ns(w, sr, first=True)
        disc.append((got - t0) / NS)
    if head_known is not None:
        head_known += known
    return disc, missed


def _subscribe_offset_ns(p: InternetParams, s: int) -> int:
    """The lab's schedule: light subscription ``s`` starts ``s`` gaps after the first
    (``subscribe_gap_s``; 0: 1 ms apart)."""
    return s * (int(p.subscribe_gap_s * NS) if p.subscribe_gap_s > 0 else MS)


def _core_sees_connection(p: InternetParams, t0: int, conn: int, rng: random.Random) -> int:
    """When the daemon's core hears of a connection made at ``conn`` by a subscription that
    began at ``t0`` (and asks the peer for its heads): the libp2p thread's next peer snapshot
    (every ``peer_watch_s``, at a random phase), then the service's next tick (every
    ``tick_s``, at a random phase), or the subscription's one catch-up look at the snapshot
    ``catch_up_s`` after ``t0`` if the connection is in it by then."""
    seen = conn + int(rng.uniform(0.0, p.peer_watch_s) * NS) if p.peer_watch_s > 0 else conn
    heard = seen
    if p.tick_s > 0:
        phase = rng.uniform(0.0, p.tick_s)
        ticks = max(0, math.ceil(((seen - t0) / NS - phase) / p.tick_s))
        heard = t0 + int((phase + ticks * p.tick_s) * NS)
    catch_up = t0 + int(p.catch_up_s * NS)
    if p.catch_up_s > 0 and seen <= catch_up:
        heard = min(heard, catch_up)
    return max(heard, conn)


def _calibration_trust(
    w: _World, lights: list[tuple[int, int]], replicate: int
) -> tuple[_TrustTally, list[dict[str, Any]], int]:
    """Publish -> trusted at every light node for ``heads`` heads of each dataset, in one
    replicate (0: the single run's random streams; see :func:`_stream`): the tally, every
    (light node, dataset, head) pair and how many were superseded."""
    p = w.p
    tally = _TrustTally()
    rng = _stream(p.seed * 10_000_019, replicate, p.seed, 4)
    # per (light node, dataset, head): seconds from the head's commit to accepted, to trusted
    views: dict[tuple[int, int, int], tuple[float | None, float | None]] = {}
    for d in range(p.datasets):
        subs = [i for i, e in lights if e == d]
        heads = [_publish(w, d, rng) for _ in range(p.heads)]
        if p.head_interval_s > 0:  # the lab's successive heads through each verify queue
            for j in sorted({j for i in subs for j in _trusted_set(w, i, d)}):
                _queued_attestations(w, heads, j, tally, replicate)
        for k, h in enumerate(heads):
            for i in subs:
                trusted_set = _trusted_set(w, i, d)
                for j in trusted_set:
                    _attestation_time(w, h, j, tally, replicate)
                run = _light_view(w, h, i, trusted_set, tally, stream=k, replicate=replicate)
                acc_ns, got_ns = run.accepted.get(h.head.digest), run.trusted.get(h.head.digest)
                views[(i, d, k)] = (
                    None if acc_ns is None else (acc_ns - h.t_pub) / NS,
                    None if got_ns is None else (got_ns - h.t_pub) / NS,
                )
    # The daemon logs ``head.trusted`` only while the head is the newest it accepted
    # (node/app/trust.py ``_record_event``): a head trusted after a newer one arrived is
    # never logged. With the lab's commit interval, heads k and k' > k are
    # (k' - k) * head_interval_s apart.
    pairs: list[dict[str, Any]] = []
    superseded = 0
    for (i, d, k), (_, t_s) in sorted(views.items()):
        newer = (
            p.head_interval_s > 0
            and t_s is not None
            and any(
                acc is not None and (k2 - k) * p.head_interval_s + acc < t_s
                for (i2, d2, k2), (acc, _) in views.items()
                if (i2, d2) == (i, d) and k2 > k
            )
        )
        if t_s is None:
            tally.no_quorum += 1
        elif newer:
            superseded += 1
        else:
            tally.times.append(t_s)
        pairs.append(
            {
                "node": i,
                "dataset": d,
                "head": k,
                "trusted_s": None if t_s is None or newer else round(t_s, 3),
                "superseded": newer,
            }
        )
    return tally, pairs, superseded


def _calibration(w: _World) -> dict[str, Any]:
    """Every light node's subscription (subscribe -> first head received: the one-hop round,
    and the DHT if that found nothing, to a carrier's record; the dial to that carrier, whose
    connection makes the core ask it for its heads, one round trip and a hop's processing; the
    pull, after which the core accepts the head)
    and publish -> trusted at every light node for ``heads`` heads of each dataset."""
    p = w.p
    lights = [(i, d) for i in range(p.nodes) if w.light[i] for d in w.follows[i]]
    if p.dht:
        _provide_asked(w, [(0, 0, d) for d in range(p.datasets)])
    head_known: list[float] = []
    disc, missed = _light_discoveries(w, lights, 0, head_known)
    reps: list[list[float]] = [disc]
    for r in range(1, p.discovery_replicates):
        reps.append(_light_discoveries(w, lights, r)[0])
    tally, pairs, superseded = _calibration_trust(w, lights, 0)
    trust_reps = [
        [[q["head"], q["trusted_s"]] for q in _calibration_trust(w, lights, r)[1]]
        for r in range(1, p.trust_replicates)
    ]
    return {
        "light_subscriptions": len(lights),
        "discovery_s": _pcts(disc, (0.5, 0.99)),
        "discovery_samples": [round(x, 3) for x in disc],
        "subscribe_at_s": [round(_subscribe_offset_ns(p, s) / NS, 3) for s in range(len(lights))],
        "head_known_samples": [round(x, 3) for x in head_known],
        "discovery_replicates": {
            "n": len(reps),
            "p50": _median_of([_rank_pct(x, 0.5) for x in reps]),
            "p99": _median_of([_rank_pct(x, 0.99) for x in reps]),
        },
        "not_found": missed,
        "publish_to_trusted_s": _pcts(tally.times, (0.5, 0.99)),
        "trusted_samples": [round(x, 3) for x in tally.times],
        "not_trusted": tally.no_quorum,
        "superseded": superseded,
        "trusted_pairs": pairs,
        # replicates 1.. : each one's [head, trusted_s] per pair, in trusted_pairs' order
        "trust_replicates": trust_reps,
    }


def simulate_internet(p: InternetParams) -> dict[str, Any]:
    """Run the internet scenario once; its figures as JSON (only ``wall_s`` and ``max_rss_mb``
    vary between runs of the same parameters)."""
    p.validate()
    t_start = time.perf_counter()
    w = _World(p)
    if p.calibration:
        return {
            "scenario": "internet",
            "seed": p.seed,
            "nodes": p.nodes,
            "params": dataclasses.asdict(p),
            "calibration": _calibration(w),
            "wall_s": {"total": round(time.perf_counter() - t_start, 1)},
        }
    wall: dict[str, float] = {"network": round(time.perf_counter() - t_start, 1)}
    subs = _subscriptions(w)
    t1 = time.perf_counter()
    if p.dht:
        _provide_asked(w, subs)
    wall["provide"] = round(time.perf_counter() - t1, 1)
    t2 = time.perf_counter()
    tally = _DiscoveryTally()
    for s, (t0, i, d) in enumerate(subs):
        _discover(w, s, t0, i, d, tally)
    wall["discovery"] = round(time.perf_counter() - t2, 1)
    t3 = time.perf_counter()
    trust_out = _trust_runs(w, random.Random(p.seed * 10_000_019))
    wall["trust"] = round(time.perf_counter() - t3, 1)
    out: dict[str, Any] = {
        "scenario": "internet",
        "seed": p.seed,
        "nodes": p.nodes,
        "datasets": p.datasets,
        "params": dataclasses.asdict(p),
        "population": {
            "dht_servers": len(w.servers),
            "behind_nat": sum(w.nat),
            "light": sum(w.light),
            "malicious": sum(w.malicious),
            "unresponsive_servers": sum(w.frozen),
            "churned_in_run": len(w.offline),
        },
        "discovery": _discovery_figures(p, len(subs), tally),
        "trust": trust_out,
        "bytes_per_node_per_hour": _bytes(w, len(subs)),
        "state_per_node": _state(w),
        "counters": dict(w.c),
    }
    wall["total"] = round(time.perf_counter() - t_start, 1)
    out["wall_s"] = wall
    out["max_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return out


def _bytes(w: _World, n_subs: int) -> dict[str, int]:
    """Bytes sent per node per hour: measured per-operation figures times the network's rates.

    DHT: searches (one per new subscription, and one per followed dataset of each node coming
    back from churn), provides (every carrier of every dataset once per republish interval and
    again when it comes back), table refreshes; one-hop: a round asks every connection for its
    record whenever the records are older than the TTL (40 s < the idle interval of 160 s), and
    the first round's measured bytes per request; gossip: each head to every topic member over a
    mesh of degree D, and each full follower's attestation to every member likewise.
    """
    p, c = w.p, w.c
    n = p.nodes
    hours = p.duration_s / 3600.0
    out: dict[str, int] = {}
    if p.dht:
        per_search = c["dht_find_bytes"] / max(1, c["dht_find_lookups"])
        per_walk = c["dht_provide_bytes"] / max(1, c["dht_provides"])
        per_provide = per_walk + c["dht_add_provider_bytes"] / max(1, c["dht_provides"])
        pairs = sum(1 for d in range(p.datasets) for j in w.followers[d] if w.carries(j, d))
        pairs += p.datasets
        searches = n_subs / hours + p.churn_per_hour * n * p.follows
        provides = pairs * (3600.0 / _REPUBLISH_S + p.churn_per_hour)
        refresh = len(w.servers) * (3600.0 / _REFRESH_PERIOD_S) * _REFRESHED_BUCKETS
        out["dht"] = round(
            (searches * per_search + provides * per_provide + refresh * per_walk) / n
        )
    reqs = max(1, c["one_hop_requests"])
    per_req = c["one_hop_bytes"] / reqs
    mean_degree = 2 * p.dials
    out["one_hop"] = round(mean_degree * (3600.0 / (p.discovery_interval_s * 16)) * per_req)
    ann = att = 0.0
    for d in range(p.datasets):
        members = len(w.followers[d]) + 1
        attesters = sum(1 for j in w.followers[d] if w.carries(j, d))
        ann += members * p.mesh_degree * _ANNOUNCEMENT
        att += members * p.mesh_degree * _ATTESTATION * attesters
    out["gossip_heads"] = round(ann * p.heads_per_hour / n)
    out["gossip_attestations"] = round(att * p.heads_per_hour / n)
    out["total"] = sum(out.values())
    return out


def _state(w: _World) -> dict[str, Any]:
    """What a node holds: routing entries (measured), provider records (measured at the
    servers that stored the sampled datasets' records, and the steady state of every carrier
    providing every dataset), trust policy heads and core history (capped per dataset)."""
    p = w.p
    servers = set(w.servers)
    tables = [len(t) for i, t in w.tables.items() if i in servers]
    stores = [len(s) for s in w.stores.values()]
    carriers = [1 + sum(1 for j in w.followers[d] if w.carries(j, d)) for d in range(p.datasets)]
    live = max(1, len(w.servers) - sum(w.frozen))
    steady = 20 * sum(min(c, RecordLimits().per_key) for c in carriers) / live
    return {
        "routing_entries_mean": round(statistics.fmean(tables), 1) if tables else 0,
        "provider_records_sampled_max": max(stores) if stores else 0,
        "provider_records_steady_mean": round(steady, 1),
        "followed_datasets": p.follows,
        "trust_heads_max": p.follows * trust.HEADS_PER_DATASET,
        "core_history_max": p.follows * CoreConfig().history_per_dataset,
    }


__all__ = [
    "InternetParams",
    "LabPlan",
    "is_internet",
    "lab_plan",
    "load_params",
    "mean_mesh_hops",
    "simulate_internet",
]
