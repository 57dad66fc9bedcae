"""Discrete-event simulator of a network of validating nodes, driving the real protocol core.

Every simulated node owns a :class:`p2p.core.ProtocolCore` and feeds it events with the virtual
clock; the simulator only carries out the core's decisions (it re-implements none of its rules).
Around the core it models what the daemon gets from elsewhere:

* **gossipsub** (a router per node): a mesh of degree ``D`` (``D_lo``/``D_hi`` maintained on a
  heartbeat), flood publishing, a router seen-cache (duplicates never reach the validator, as in
  libp2p), lazy gossip (IHAVE of the last ``history_gossip`` heartbeat windows to ``D_lazy``
  non-mesh peers, IWANT, reply); a message is forwarded only when the core said
  :class:`~p2p.core.Forward` (libp2p's ACCEPT);
* **links**: one-way latency sampled once per link (constant/uniform/lognormal, or a region
  matrix), a serialising uplink of ``bandwidth_mbps`` per node;
* **fetch and verification** by cost: a fetch takes a round trip to the owner plus the transfer,
  a verification takes engine seconds per slice on the node's single engine; outcomes come from
  ground truth (which heads carry spoofed derivative data);
* **trust policies**: decided by the same module the daemon uses (:mod:`p2p.trust`), one
  :class:`~p2p.trust.TrustPolicy` per honest node: verify everything; a ``k``-of-N quorum of a
  closed trusted set; verify with probability ``p`` else quorum; reputation-weighted attestations.

Timers are batched (one global tick and one heartbeat loop over the nodes that need them) so
1,000 nodes x 1 hour fits a minute of wall time. Randomness comes from one seeded
:class:`random.Random` (plus one per core) and nothing iterates a hash-ordered container of
bytes, so a scenario and seed always give the same results.
"""

from __future__ import annotations

import heapq
import math
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from coordinator.identity import PrivateKey, generate_private_key
from coordinator.multiformats import Multicodec, Multihash
from p2p import trust
from p2p.core import (
    AbandonFetch,
    Accept,
    AntiEntropyReceived,
    CoreConfig,
    DisconnectPeer,
    EmitEquivocationProof,
    Event,
    FetchCompleted,
    Forward,
    HeadAccepted,
    Ignore,
    MessageReceived,
    PeerConnected,
    PeerDisconnected,
    Penalise,
    PollSource,
    ProtocolCore,
    PublishAttestation,
    PublishDispute,
    RejectHead,
    RequestAntiEntropy,
    RequestFetch,
    Tick,
    VerificationCompleted,
)
from p2p.executor import execute_all
from p2p.trust_executor import dispatch
from p2p.wire import (
    Attestation,
    Checks,
    Dispute,
    DisputeKind,
    EquivocationProof,
    Evidence,
    FetchLocations,
    HeadAnnouncement,
    SignedMessage,
    Verdict,
    content_id,
    sign_message,
)
from sim.scenario import Scenario, ScenarioError

NS: Final = 1_000_000_000
T0_NS: Final = 1_763_700_000 * NS
"""Virtual time zero (a fixed Unix time, so ``issued_at`` checks behave as in production)."""

HONEST, MALICIOUS, SYBIL, FAULTY = 0, 1, 2, 3

_EVIDENCE = Evidence(
    logical_hash=Multihash(Multicodec.ARROW0_SHA3_256, b"\x11" * 32), offsets=(0, 99)
)
_EVIDENCE_BAD = Evidence(
    logical_hash=Multihash(Multicodec.ARROW0_SHA3_256, b"\x22" * 32), offsets=(0, 99)
)


@dataclass(slots=True)
class Head:
    """Ground truth of one announced head."""

    hid: int
    dataset: int
    sequence: int
    good: bool
    published_ns: int
    honest_owner: bool
    fork: bool = False


@dataclass(slots=True)
class _Msg:
    envelope: bytes
    size: int
    hid: int  # -1 when not an announcement
    adversarial: bool
    published_ns: int


@dataclass(slots=True)
class SimNode:
    """One simulated node: its core, router state, trust state and counters."""

    idx: int
    name: str
    role: int
    core: ProtocolCore
    rng: random.Random
    online: bool = True
    attester: bool = False
    key: PrivateKey | None = None
    peers: dict[int, None] = field(default_factory=dict)
    mesh: dict[int, None] = field(default_factory=dict)
    router_seen: dict[bytes, int] = field(default_factory=dict)
    mc_cur: list[bytes] = field(default_factory=list)
    mc_windows: deque[list[bytes]] = field(default_factory=deque)
    up_free_ns: int = 0
    engine_free_ns: int = 0
    engine_s: float = 0.0
    replays: int = 0
    """Local verifications started (each a replay on the node's engine)."""
    bytes_sent: int = 0
    # outcomes, keyed by head id (the trust decisions themselves are made by `policy`)
    got: dict[int, None] = field(default_factory=dict)
    accepted: dict[int, int] = field(default_factory=dict)
    verifying: dict[int, None] = field(default_factory=dict)
    trusted: dict[int, int] = field(default_factory=dict)
    detected: dict[int, int] = field(default_factory=dict)
    policy: trust.TrustPolicy | None = None
    """The node's trust policy (honest nodes only; attesters run ``verify-all``)."""
    silent_from_ns: int = -1


class Simulator:
    """Runs one scenario with one seed; :meth:`run` returns the metrics (a JSON-ready dict)."""

    def __init__(self, scenario: Scenario, seed: int | None = None) -> None:
        """Build the network for ``scenario`` (``seed`` overrides ``scenario.seed``)."""
        self.sc = scenario
        self.seed = scenario.seed if seed is None else seed
        self.rng = random.Random(self.seed)
        self.now = T0_NS
        self._q: list[tuple[int, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0
        core_kw = dict(scenario.core)
        self.core_config = CoreConfig(**core_kw)
        self.nodes: list[SimNode] = []
        self.msgs: dict[bytes, _Msg] = {}
        self.heads: list[Head] = []
        self.head_by_digest: dict[bytes, int] = {}
        self.did_to_node: dict[bytes, int] = {}
        self.links: dict[tuple[int, int], int] = {}
        self.region: list[int] = []
        self._nonce = 0
        self._own = False
        self._hop_ns = int(scenario.gossip.hop_delay_ms * 1_000_000)
        self.eclipsed: int | None = None
        self._active: dict[int, None] = {}
        self._maint: dict[int, None] = {}
        self.latencies_ns: list[int] = []
        self.ideal_ns: list[int] = []
        self.ratio: list[float] = []
        self.equivocations: list[tuple[int, int, int]] = []  # (dataset, sequence, published ns)
        self.eq_detect: dict[tuple[int, int], dict[int, int]] = {}
        self.c: dict[str, int] = {
            "penalties": 0,
            "graylisted_links": 0,
            "rejected_heads": 0,
            "abandoned_fetches": 0,
            "router_duplicates": 0,
            "ihave": 0,
            "iwant": 0,
            "anti_entropy": 0,
            "replays_sent": 0,
            "flood_sent": 0,
            "fetch_bytes": 0,
            "core_events": 0,
        }
        self._build()

    # ------------------------------------------------------------------ building

    def _make_node(self, role: int) -> SimNode:
        idx = len(self.nodes)
        core = ProtocolCore(self.core_config, random.Random(self.seed * 1_000_003 + idx), ())
        n = SimNode(idx, f"n{idx}", role, core, random.Random(self.seed * 7_919 + idx))
        n.mc_windows = deque(maxlen=self.sc.gossip.history_gossip)
        self.nodes.append(n)
        lat = self.sc.latency
        self.region.append(self.rng.randrange(len(lat.matrix)) if lat.matrix else 0)
        return n

    def _key_for(self, n: SimNode) -> PrivateKey:
        if n.key is None:
            n.key = generate_private_key(
                (self.seed & 0xFFFFFFFF).to_bytes(4, "big") + n.idx.to_bytes(28, "big")
            )
            self.did_to_node[n.key.dataset_id().to_bytes()] = n.idx
        return n.key

    def _build(self) -> None:
        sc, rng = self.sc, self.rng
        adv, wl = sc.adversary, sc.workload
        for _ in range(sc.nodes):
            self._make_node(HONEST)
        self.owner_keys: list[PrivateKey] = []
        self.owner_node: list[int] = []
        for d in range(wl.datasets):
            self.owner_keys.append(
                generate_private_key(b"ds" + self.seed.to_bytes(8, "big") + d.to_bytes(22, "big"))
            )
            self.owner_node.append(d)
            if d < adv.spoof_owners + adv.equivocating_owners:
                self.nodes[d].role = MALICIOUS
        self.dids = [k.dataset_id() for k in self.owner_keys]
        for n in self.nodes:
            for did in self.dids:
                n.core.subscribe(did)
        others = list(range(wl.datasets, sc.nodes))
        n_mal = round(adv.malicious_fraction * sc.nodes)
        for i in rng.sample(others, min(n_mal, len(others))):
            self.nodes[i].role = MALICIOUS
        honest = [i for i in others if self.nodes[i].role == HONEST]
        n_faulty = round(adv.silent_fraction * sc.nodes)
        for i in rng.sample(honest, min(n_faulty, len(honest))):
            self.nodes[i].role = FAULTY
            self.nodes[i].silent_from_ns = T0_NS + int(adv.silent_at_s * NS)
        honest = [i for i in honest if self.nodes[i].role == HONEST]
        n_att = round(wl.attester_fraction * sc.nodes)
        if wl.attester_fraction > 0:
            n_att = max(1, n_att)
        for i in rng.sample(honest, min(n_att, len(honest))):
            self.nodes[i].attester = True
            self._key_for(self.nodes[i])
        for n in self.nodes:
            if n.role == MALICIOUS and adv.false_attest:
                self._key_for(n)
        self._build_trust()
        self.replayers: list[int] = [
            n.idx for n in self.nodes if n.role == MALICIOUS and n.idx >= wl.datasets
        ][: adv.replayers]
        # topology: every node dials `outbound` random others
        for i in range(sc.nodes):
            for r in rng.sample(range(sc.nodes - 1), min(sc.topology.outbound, sc.nodes - 1)):
                self._link(i, r if r < i else r + 1)  # any node but i
        if 0 <= adv.eclipse_target < sc.nodes:
            self._at(adv.eclipse_at_s, self._eclipse)
        if sc.topology.cold_boot:
            for n in self.nodes:
                n.online = False
            order = list(range(sc.nodes))
            rng.shuffle(order)
            for rank, i in enumerate(order):
                self._at(sc.topology.join_window_s * rank / sc.nodes, self._come_online, i)
        else:
            for n in self.nodes:
                self._connect_all(n, initial=True)
            for n in self.nodes:
                self._maintain(n)
        # owners publish on a schedule, staggered per dataset
        for d in range(wl.datasets):
            phase = wl.first_head_s + wl.head_interval_s * d / wl.datasets
            self._at(phase, self._publish_head, d, 1)
        self._at(wl.tick_s * rng.random(), self._tick_all)
        self._at(sc.gossip.heartbeat_s, self._heartbeat_all)
        if sc.churn.rate_per_node_hour > 0:
            for n in self.nodes:
                if n.idx >= wl.datasets:
                    self._schedule_churn(n)
        for r in self.replayers:
            self._at(adv.replay_interval_s * (1 + rng.random()), self._replay, r)
        if adv.sybils > 0:
            self._at(adv.sybil_at_s, self._sybil_flood)

    def _build_trust(self) -> None:
        """Give every honest node its :class:`~p2p.trust.TrustPolicy` (no random draws here)."""
        pol = self.sc.policy
        self.trusted_set: frozenset[Any] = frozenset()
        if pol.trusted == "attesters":
            honest = [n.idx for n in self.nodes if n.attester]
            colluders = [
                n.idx
                for n in self.nodes
                if n.role == MALICIOUS and n.key is not None and n.idx >= self.sc.workload.datasets
            ][: pol.trusted_colluders]
            if len(colluders) < pol.trusted_colluders:
                raise ScenarioError(
                    f"policy.trusted_colluders = {pol.trusted_colluders} but only "
                    f"{len(colluders)} false-attesting malicious nodes exist"
                )
            self.trusted_set = frozenset(
                self._key_for(self.nodes[i]).dataset_id() for i in honest + colluders
            )
        try:
            cfg = trust.TrustConfig(
                policy=trust.Policy(pol.name),
                k=pol.k,
                trusted_attesters=self.trusted_set,
                p=pol.p,
                fallback_verify_s=pol.fallback_verify_s,
                min_score=pol.min_score,
                base_weight=pol.base_weight,
                threshold=pol.threshold,
                reward=pol.reward,
                penalty=pol.penalty,
                any_attester=pol.trusted == "any",
            )
        except trust.TrustConfigError as e:
            raise ScenarioError(f"policy: {e}") from e
        # Public attesters verify every head (and publish what they find).
        attester_cfg = trust.TrustConfig(policy=trust.Policy.VERIFY_ALL)
        for n in self.nodes:
            if n.role == HONEST:
                n.policy = trust.dataset_policy(attester_cfg if n.attester else cfg, n.rng)

    def _lat_sample(self, a: int, b: int) -> int:
        lat, rng = self.sc.latency, self.rng
        if lat.model == "constant":
            ms = lat.mean_ms
        elif lat.model == "uniform":
            ms = rng.uniform(lat.min_ms, lat.max_ms)
        elif lat.model == "lognormal":
            ms = min(lat.max_ms, max(lat.min_ms, lat.mean_ms * math.exp(rng.gauss(0, lat.sigma))))
        else:
            ms = lat.matrix[self.region[a]][self.region[b]] * (1 + 0.1 * rng.random())
        return int(ms * 1_000_000)

    def _link(self, a: int, b: int) -> None:
        key = (a, b) if a < b else (b, a)
        if key not in self.links:
            self.links[key] = self._lat_sample(a, b)
        self.nodes[a].peers[b] = None
        self.nodes[b].peers[a] = None

    def lat(self, a: int, b: int) -> int:
        """One-way latency of the link ``a``-``b`` in ns (sampled on first use)."""
        key = (a, b) if a < b else (b, a)
        v = self.links.get(key)
        if v is None:
            v = self.links[key] = self._lat_sample(a, b)
        return v

    # ------------------------------------------------------------------ event queue

    def _at(self, delay_s: float, fn: Callable[..., None], *args: Any) -> None:
        self._push(self.now + int(delay_s * NS), fn, *args)

    def _push(self, t_ns: int, fn: Callable[..., None], *args: Any) -> None:
        self._seq += 1
        heapq.heappush(self._q, (t_ns, self._seq, fn, args))

    def run(self) -> dict[str, Any]:
        """Run to ``duration_s`` of virtual time and return the metrics (deterministic)."""
        end = T0_NS + int(self.sc.duration_s * NS)
        q = self._q
        pop = heapq.heappop
        while q and q[0][0] <= end:
            t, _, fn, args = pop(q)
            self.now = t
            fn(*args)
        self.now = end
        return self.metrics()

    # ------------------------------------------------------------------ links and router

    def _send(self, a: SimNode, b: int, size: int, fn: Callable[..., None], *args: Any) -> None:
        """Serialise ``size`` bytes on ``a``'s uplink, deliver after the link latency."""
        tx = size * 8 * NS // int(self.sc.latency.bandwidth_mbps * 1_000_000)
        start = max(self.now + self._hop_ns, a.up_free_ns)
        a.up_free_ns = start + tx
        a.bytes_sent += size
        self._push(start + tx + self.lat(a.idx, b), fn, *args)

    def _send_msg(self, a: SimNode, b: int, cid: bytes) -> None:
        m = self.msgs[cid]
        size = m.size + self.sc.gossip.overhead_bytes
        if self._surely_seen(self.nodes[b], cid):
            # A certain duplicate: account the bytes and the duplicate, skip the event (speed).
            self._uplink(a, size)
            self.c["router_duplicates"] += 1
            return
        self._send(a, b, size, self._deliver, b, a.idx, cid)

    def _surely_seen(self, n: SimNode, cid: bytes) -> bool:
        # seen now and still seen when any message sent now arrives (latency << 10 s << TTL)
        exp = n.router_seen.get(cid)
        return exp is not None and exp > self.now + 10 * NS

    def _uplink(self, a: SimNode, size: int) -> None:
        tx = size * 8 * NS // int(self.sc.latency.bandwidth_mbps * 1_000_000)
        a.up_free_ns = max(self.now, a.up_free_ns) + tx
        a.bytes_sent += size

    def _forwards(self, n: SimNode, cid: bytes) -> bool:
        if n.role in (HONEST, SYBIL):
            return True
        if n.role == FAULTY:
            return n.silent_from_ns < 0 or self.now < n.silent_from_ns
        return (not self.sc.adversary.silent) or self.msgs[cid].adversarial

    def _router_seen(self, n: SimNode, cid: bytes) -> bool:
        exp = n.router_seen.get(cid)
        return exp is not None and exp > self.now

    def _deliver(self, b: int, a: int, cid: bytes) -> None:
        n = self.nodes[b]
        if not n.online or a not in n.peers:
            return
        if self._router_seen(n, cid):
            self.c["router_duplicates"] += 1
            return
        n.router_seen[cid] = self.now + int(self.sc.gossip.seen_ttl_s * NS)
        m = self.msgs.get(cid)
        if m is not None and m.hid >= 0 and n.role == HONEST and m.hid not in n.got:
            n.got[m.hid] = None  # first receipt ever (replays after the seen TTL do not count)
            h = self.heads[m.hid]
            if h.honest_owner and not h.fork:
                self.latencies_ns.append(self.now - m.published_ns)
        data = m.envelope if m is not None else cid
        self._apply(n, MessageReceived(f"n{a}", data, self.now))

    def _publish(self, n: SimNode, cid: bytes, to: list[int] | None = None) -> None:
        n.router_seen[cid] = self.now + int(self.sc.gossip.seen_ttl_s * NS)
        if to is None:
            to = list(n.peers) if self.sc.gossip.flood_publish else list(n.mesh)
        for p in to:
            self._send_msg(n, p, cid)
        self._cache(n, cid)

    def _forward(self, n: SimNode, cid: bytes, source: int) -> None:
        if not self._forwards(n, cid):
            return
        for p in n.mesh:
            if p != source:
                self._send_msg(n, p, cid)
        self._cache(n, cid)

    def _cache(self, n: SimNode, cid: bytes) -> None:
        n.mc_cur.append(cid)
        self._active[n.idx] = None

    def _register(self, envelope: bytes, hid: int, adversarial: bool) -> bytes:
        cid = content_id(envelope)
        if cid not in self.msgs:
            self.msgs[cid] = _Msg(envelope, len(envelope), hid, adversarial, self.now)
        return cid

    # ------------------------------------------------------------------ heartbeat: mesh + IHAVE

    def _heartbeat_all(self) -> None:
        g = self.sc.gossip
        for i in list(self._maint):
            self._maintain(self.nodes[i])
        self._maint.clear()
        for i in list(self._active):
            n = self.nodes[i]
            if not n.online:
                del self._active[i]
                continue
            n.mc_windows.appendleft(n.mc_cur)
            n.mc_cur = []
            ids = [c for w in n.mc_windows for c in w]
            if not ids:
                del self._active[i]
                continue
            if n.role != HONEST:
                ids = [c for c in ids if self._forwards(n, c)]
                if not ids:
                    continue
            lazy = [p for p in n.peers if p not in n.mesh]
            if len(lazy) > g.D_lazy:
                lazy = n.rng.sample(lazy, g.D_lazy)
            size = g.overhead_bytes + 32 * len(ids)
            for p in lazy:
                self.c["ihave"] += 1
                q = self.nodes[p]
                if all(self._surely_seen(q, c) for c in ids):
                    self._uplink(n, size)  # the answer is surely "no IWANT": skip the event
                else:
                    self._send(n, p, size, self._on_ihave, p, i, ids)
        self._at(g.heartbeat_s, self._heartbeat_all)

    def _on_ihave(self, b: int, a: int, ids: list[bytes]) -> None:
        n = self.nodes[b]
        if not n.online or a not in n.peers:
            return
        want = [c for c in ids if not self._router_seen(n, c)]
        if not want:
            return
        self.c["iwant"] += 1
        self._send(n, a, self.sc.gossip.overhead_bytes + 32 * len(want), self._on_iwant, a, b, want)

    def _on_iwant(self, a: int, b: int, want: list[bytes]) -> None:
        n = self.nodes[a]
        if not n.online or b not in n.peers:
            return
        for c in want:
            if c in self.msgs and self._forwards(n, c):
                self._send_msg(n, b, c)

    def _maintain(self, n: SimNode) -> None:
        g = self.sc.gossip
        if not n.online:
            return
        if len(n.mesh) < g.D_lo:
            cands = [
                p
                for p in n.peers
                if p not in n.mesh and self.nodes[p].online and len(self.nodes[p].mesh) < g.D_hi
            ]
            n.rng.shuffle(cands)
            for p in cands[: g.D - len(n.mesh)]:
                n.mesh[p] = None
                self.nodes[p].mesh[n.idx] = None
        elif len(n.mesh) > g.D_hi:
            drop = n.rng.sample(list(n.mesh), len(n.mesh) - g.D)
            for p in drop:
                n.mesh.pop(p, None)
                self.nodes[p].mesh.pop(n.idx, None)
                self._maint[p] = None

    # ------------------------------------------------------------------ connections, churn

    def _connect_all(self, n: SimNode, initial: bool = False) -> None:
        for p in list(n.peers):
            if self.nodes[p].online:
                self._connected(n.idx, p, initial)

    def _connected(self, a: int, b: int, initial: bool) -> None:
        self._link(a, b)
        if not initial:
            self._apply(self.nodes[a], PeerConnected(f"n{b}", self.now))
            self._apply(self.nodes[b], PeerConnected(f"n{a}", self.now))
        else:
            # initial connections: the core learns them without an anti-entropy burst at t=0
            self.nodes[a].core.handle(PeerConnected(f"n{b}", self.now))
            self.nodes[b].core.handle(PeerConnected(f"n{a}", self.now))

    def _disconnect(self, a: int, b: int) -> None:
        na, nb = self.nodes[a], self.nodes[b]
        na.peers.pop(b, None)
        nb.peers.pop(a, None)
        for x, y in ((na, b), (nb, a)):
            if y in x.mesh:
                del x.mesh[y]
                self._maint[x.idx] = None
        na.core.handle(PeerDisconnected(f"n{b}", self.now))
        nb.core.handle(PeerDisconnected(f"n{a}", self.now))

    def _come_online(self, i: int) -> None:
        n = self.nodes[i]
        n.online = True
        self._connect_all(n)
        self._maintain(n)
        for p in list(n.peers):
            self._maint[p] = None

    def _go_offline(self, i: int) -> None:
        n = self.nodes[i]
        n.online = False
        for p in list(n.mesh):
            self.nodes[p].mesh.pop(i, None)
            self._maint[p] = None
            self.nodes[p].core.handle(PeerDisconnected(f"n{i}", self.now))
        n.mesh.clear()
        self._at(n.rng.expovariate(1.0 / self.sc.churn.mean_offline_s), self._rejoin, i)

    def _rejoin(self, i: int) -> None:
        self._come_online(i)
        self._schedule_churn(self.nodes[i])

    def _schedule_churn(self, n: SimNode) -> None:
        rate = self.sc.churn.rate_per_node_hour / 3600.0
        self._at(n.rng.expovariate(rate), self._go_offline, n.idx)

    # ------------------------------------------------------------------ the core

    def _apply(self, n: SimNode, ev: Event) -> None:
        self.c["core_events"] += 1
        execute_all(n.core.handle(ev), _SimEffects(self, n))

    def _tick_all(self) -> None:
        ev = Tick(self.now)
        for n in self.nodes:
            if n.online:
                execute_all(n.core.handle(ev), _SimEffects(self, n))
        self._at(self.sc.workload.tick_s, self._tick_all)

    def _on_accept(self, n: SimNode, d: Accept) -> None:
        msg = d.message
        if isinstance(msg, EquivocationProof):
            self._eq_detected(n, msg)
            return
        m = msg.message
        if n.policy is None:
            return
        if isinstance(m, Attestation):
            ev: trust.TrustEvent = trust.AttestationSeen(
                m.dataset, m.head, m.node, m.verdict, self.now
            )
        elif isinstance(m, Dispute):
            ev = trust.DisputeSeen(m.dataset, m.block, m.node, msg.content_id.hex(), self.now)
        else:
            return
        self._trust_decisions(n, n.policy.handle(ev))

    def _eq_detected(self, n: SimNode, proof: EquivocationProof) -> None:
        ann = proof.first.message
        assert isinstance(ann, HeadAnnouncement)
        det = self.eq_detect.setdefault((self.dids.index(ann.dataset), ann.sequence), {})
        if n.idx not in det:
            det[n.idx] = self.now

    def _fetch(self, n: SimNode, d: RequestFetch) -> None:
        wl = self.sc.workload
        owner = self.owner_node[self.dids.index(d.dataset)]
        rtt = 2 * self.lat(n.idx, owner) if owner != n.idx else 0
        tx = wl.fetch_bytes * 8 * NS // int(self.sc.latency.bandwidth_mbps * 1_000_000)
        self.c["fetch_bytes"] += wl.fetch_bytes
        # Ground truth: every head's chain is well formed and descends from the previous one;
        # spoofed derivative data is only caught by replay (verification).
        self._push(
            self.now + rtt + tx,
            self._apply,
            n,
            FetchCompleted(d.dataset, d.head, True, self.now + rtt + tx),
        )

    def _anti_entropy(self, n: SimNode, peer: int) -> None:
        p = self.nodes[peer]
        if not p.online or peer not in n.peers:
            return
        self.c["anti_entropy"] += 1
        if peer in self.replayers:
            envs = self._stale_envelopes()
        else:
            envs = p.core.latest_heads(n.core.subscriptions())
            if p.role == MALICIOUS and self.sc.adversary.silent:
                # a silent attacker withholds honest heads here too
                envs = [e for e in envs if self.msgs[content_id(e)].adversarial]
        rtt = 2 * self.lat(n.idx, peer)
        size = sum(len(e) for e in envs) + 2 * self.sc.gossip.overhead_bytes
        p.bytes_sent += size
        self._push(
            self.now + rtt,
            self._ae_reply,
            n.idx,
            peer,
            tuple(envs),
        )

    def _ae_reply(self, i: int, peer: int, envs: tuple[bytes, ...]) -> None:
        n = self.nodes[i]
        if n.online and peer in n.peers:
            self._apply(n, AntiEntropyReceived(f"n{peer}", envs, self.now))

    # ------------------------------------------------------------------ trust policies

    def _on_head_accepted(self, n: SimNode, d: HeadAccepted) -> None:
        hid = self.head_by_digest[d.head.digest]
        n.accepted[hid] = self.now
        if self.owner_node[self.heads[hid].dataset] == n.idx:
            self._trust(n, hid)  # an owner trusts what it published
            return
        if n.role in (MALICIOUS, SYBIL):
            # colluders vouch for their own side's datasets (every head of a spoofing owner)
            spoofed = self.heads[hid].dataset < self.sc.adversary.spoof_owners
            if spoofed and self.sc.adversary.false_attest and n.key is not None:
                later = self.sc.adversary.collude_after_s
                if later > 0:
                    self._at(later, self._attest, n, d.dataset, d.head)
                else:
                    self._attest(n, d.dataset, d.head)
            return
        if n.policy is None:
            return
        self._trust_decisions(n, n.policy.handle(trust.HeadSeen(d.dataset, d.head, self.now)))
        if n.policy.status(d.dataset, d.head).state is trust.TrustState.PENDING:
            # wake the policy when this head's fallback is due (exactly then, not a tick later)
            self._at(self.sc.policy.fallback_verify_s, self._fallback, n.idx)

    def _fallback(self, i: int) -> None:
        n = self.nodes[i]
        if n.policy is not None:
            self._trust_decisions(n, n.policy.handle(trust.TrustTick(self.now)))

    def _trust_decisions(self, n: SimNode, decisions: list[trust.TrustDecision]) -> None:
        effects = _TrustEffects(self, n)
        for dec in decisions:
            dispatch(dec, effects)

    def _trust(self, n: SimNode, hid: int) -> None:
        if hid not in n.trusted and hid not in n.detected:
            n.trusted[hid] = self.now

    def _verify(self, n: SimNode, hid: int) -> None:
        if hid in n.verifying:
            return
        n.verifying[hid] = None
        n.replays += 1
        wl = self.sc.workload
        cost = sum(
            wl.verify_s_per_slice * math.exp(n.rng.gauss(0, wl.verify_sigma))
            for _ in range(wl.slices_per_head)
        )
        start = max(self.now, n.engine_free_ns)
        n.engine_free_ns = start + int(cost * NS)
        n.engine_s += cost
        self._push(n.engine_free_ns, self._verified, n.idx, hid)

    def _verified(self, i: int, hid: int) -> None:
        n = self.nodes[i]
        h = self.heads[hid]
        did, mh = self.dids[h.dataset], self._head_hash(hid)
        if n.policy is not None:
            outcome = trust.Outcome.VERIFIED if h.good else trust.Outcome.FAILED
            self._trust_decisions(
                n, n.policy.handle(trust.LocalVerdict(did, mh, outcome, self.now))
            )
        if not h.good and hid not in n.detected:
            n.detected[hid] = self.now
        self._apply(
            n,
            VerificationCompleted(did, mh, h.good, self.now),
        )

    def _head_hash(self, hid: int) -> Multihash:
        h = self.heads[hid]
        return Multihash.sha3_256(f"s{self.seed}-d{h.dataset}-h{hid}".encode())

    def _next_nonce(self) -> bytes:
        self._nonce += 1
        return self._nonce.to_bytes(16, "big")

    def _attest(self, n: SimNode, did: Any, head: Multihash) -> None:
        key = self._key_for(n)
        att = Attestation(
            node=key.dataset_id(),
            dataset=did,
            head=head,
            verdict=Verdict.VERIFIED,
            engine_name="sim",
            engine_version="1",
            checks=Checks.METADATA_INTEGRITY | Checks.DATA_INTEGRITY | Checks.REPLAY,
            locations=FetchLocations(),
            issued_at_ns=self.now,
            nonce=self._next_nonce(),
        )
        sm = sign_message(att, key)
        cid = self._register(sm.envelope, -1, n.role != HONEST)
        self._publish(n, cid)

    def _dispute(self, n: SimNode, did: Any, head: Multihash) -> None:
        self._publish_dispute(n, self._key_for(n), did, head, "sim: replay mismatch", False)

    def _publish_dispute(
        self,
        n: SimNode,
        key: PrivateKey,
        did: Any,
        head: Multihash,
        detail: str,
        adversarial: bool,
    ) -> None:
        """A replay-mismatch dispute of ``head`` signed by ``key``, published by ``n``."""
        dis = Dispute(
            node=key.dataset_id(),
            dataset=did,
            block=head,
            kind=DisputeKind.REPLAY_MISMATCH,
            expected=_EVIDENCE,
            computed=_EVIDENCE_BAD,
            detail=detail,
            issued_at_ns=self.now,
            nonce=self._next_nonce(),
        )
        self._publish(n, self._register(sign_message(dis, key).envelope, -1, adversarial))

    def _dispute_flood(self, n: SimNode, d: int, head: Multihash) -> None:
        """``adversary.dispute_flood`` disputes of ``head``, each by a fresh key, published by
        ``n`` (issue 39: noise that filled the head's dispute slots first)."""
        for _ in range(self.sc.adversary.dispute_flood):
            self._nonce += 1
            key = generate_private_key(
                b"\xd1"
                + (self.seed & 0xFFFFFFFF).to_bytes(4, "big")
                + self._nonce.to_bytes(27, "big")
            )
            self._publish_dispute(n, key, self.dids[d], head, "sim: sybil dispute", True)

    # ------------------------------------------------------------------ owners and adversaries

    def _new_head(self, d: int, seq: int, good: bool, fork: bool) -> tuple[int, SignedMessage]:
        hid = len(self.heads)
        honest = self.nodes[self.owner_node[d]].role == HONEST
        self.heads.append(Head(hid, d, seq, good, self.now, honest, fork))
        mh = self._head_hash(hid)
        self.head_by_digest[mh.digest] = hid
        ann = HeadAnnouncement(
            dataset=self.dids[d],
            head=mh,
            sequence=seq,
            prev_head=None,
            epoch=0,
            locations=FetchLocations(http_urls=(f"http://127.0.0.1:1/d{d}",)),
            issued_at_ns=self.now,
            nonce=self._next_nonce(),
        )
        return hid, sign_message(ann, self.owner_keys[d])

    def _publish_head(self, d: int, seq: int) -> None:
        adv, wl = self.sc.adversary, self.sc.workload
        owner = self.nodes[self.owner_node[d]]
        spoofer = d < adv.spoof_owners
        equivocator = adv.spoof_owners <= d < adv.spoof_owners + adv.equivocating_owners
        good = not (spoofer and self.rng.random() < adv.spoof_fraction)
        hid, sm = self._new_head(d, seq, good, False)
        cid = self._register(sm.envelope, hid, not good)
        # The owner's own core takes its announcement first (its Forward is the publish below).
        owner.router_seen[cid] = self.now + int(self.sc.gossip.seen_ttl_s * NS)
        self._own = True
        self._apply(owner, MessageReceived(owner.name, sm.envelope, self.now))
        self._own = False
        if equivocator and seq % adv.equivocate_every == 0 and len(owner.peers) >= 2:
            hid2, sm2 = self._new_head(d, seq, True, True)
            self.heads[hid].fork = True
            cid2 = self._register(sm2.envelope, hid2, True)
            peers = list(owner.peers)
            half = len(peers) // 2
            self.equivocations.append((d, seq, self.now))
            self._publish(owner, cid, peers[:half])
            self._publish(owner, cid2, peers[half:])
        elif owner.online:
            self._publish(owner, cid)
            if not good:
                self._dispute_flood(owner, d, self._head_hash(hid))
        if (
            good
            and self.heads[hid].honest_owner
            and len(self.ideal_ns) < wl.ideal_samples * (self.sc.nodes)
        ):
            self._ideal(owner.idx, self.msgs[cid].size + self.sc.gossip.overhead_bytes)
        if wl.max_heads <= 0 or seq < wl.max_heads:
            self._at(wl.head_interval_s, self._publish_head, d, seq + 1)

    def _ideal(self, src: int, size: int) -> None:
        """Shortest-path latency from ``src`` to every online honest node (Dijkstra)."""
        if len(self.ideal_ns) >= self.sc.workload.ideal_samples * self.sc.nodes:
            return
        bw = int(self.sc.latency.bandwidth_mbps * 1_000_000)
        tx = size * 8 * NS // bw
        dist: dict[int, int] = {src: 0}
        heap = [(0, src)]
        while heap:
            dd, u = heapq.heappop(heap)
            if dd > dist.get(u, 1 << 62):
                continue
            for v in self.nodes[u].peers:
                if not self.nodes[v].online:
                    continue
                nd = dd + tx + self.lat(u, v)
                if nd < dist.get(v, 1 << 62):
                    dist[v] = nd
                    heapq.heappush(heap, (nd, v))
        for v, dv in sorted(dist.items()):
            if v != src and self.nodes[v].role == HONEST:
                self.ideal_ns.append(dv)

    def _stale_envelopes(self) -> list[bytes]:
        out = []
        for h in self.heads[:8]:
            for _cid, m in self.msgs.items():
                if m.hid == h.hid:
                    out.append(m.envelope)
                    break
        return out

    def _replay(self, r: int) -> None:
        n = self.nodes[r]
        stale = self._stale_envelopes()
        if n.online and stale:
            for env in stale:
                cid = content_id(env)
                for p in n.peers:
                    self.c["replays_sent"] += 1
                    self._send_msg(n, p, cid)
        self._at(self.sc.adversary.replay_interval_s, self._replay, r)

    def _sybil_flood(self) -> None:
        adv = self.sc.adversary
        honest = [n.idx for n in self.nodes if n.role == HONEST and n.online]
        for _ in range(adv.sybils):
            s = self._make_node(SYBIL)
            for did in self.dids:
                s.core.subscribe(did)
            if adv.false_attest:
                self._key_for(s)
            for p in self.rng.sample(honest, min(adv.sybil_degree, len(honest))):
                self._connected(s.idx, p, False)
            self._maintain(s)
            if adv.flood_rate > 0:
                self._flood(s.idx, self.now + int(adv.flood_s * NS))

    def _flood(self, i: int, until: int) -> None:
        n = self.nodes[i]
        if self.now >= until or not n.peers:
            return
        self._nonce += 1
        junk = b"ODFP\x01\x01junk" + self._nonce.to_bytes(8, "big")
        cid = self._register(junk, -1, True)
        for p in list(n.peers):
            self.c["flood_sent"] += 1
            self._send_msg(n, p, cid)
        self._at(1.0 / self.sc.adversary.flood_rate, self._flood, i, until)

    def _eclipse(self) -> None:
        adv = self.sc.adversary
        t = adv.eclipse_target
        for p in list(self.nodes[t].peers):
            self._disconnect(t, p)
        attackers = [n.idx for n in self.nodes if n.role == MALICIOUS and n.idx != t]
        while len(attackers) < adv.eclipse_peers:
            att = self._make_node(MALICIOUS)
            for did in self.dids:
                att.core.subscribe(did)
            if adv.false_attest:
                self._key_for(att)
            # attackers stay connected to the rest of the network to learn heads
            for p in self.rng.sample(range(self.sc.nodes), 4):
                if p != t:
                    self._connected(att.idx, p, False)
            attackers.append(att.idx)
        for a in self.rng.sample(attackers, adv.eclipse_peers):
            self._connected(t, a, False)
        self._maintain(self.nodes[t])
        self.eclipsed = t

    # ------------------------------------------------------------------ metrics

    def metrics(self) -> dict[str, Any]:
        """Results of the run so far (JSON-ready; identical for identical scenario and seed)."""
        sc = self.sc
        honest = [n for n in self.nodes if n.role == HONEST]
        dur = sc.duration_s
        good_heads = [h for h in self.heads if h.good and h.honest_owner and not h.fork]
        bad_heads = [h for h in self.heads if not h.good]
        delivered, total = self._delivery(honest, good_heads)
        trusted_pairs = sum(len(n.trusted) for n in honest)
        bad_trusted = sum(1 for n in honest for hid in n.trusted if not self.heads[hid].good)
        bad_pairs = sum(1 for n in honest for hid in n.accepted if not self.heads[hid].good)
        detect = sorted(
            (t - self.heads[hid].published_ns) / NS for n in honest for hid, t in n.detected.items()
        )
        eq_times, eq_all = self._equivocation_detection(honest)
        engine = sum(n.engine_s for n in honest)
        # The nodes the policy under study runs on: honest nodes that neither attest (attesters
        # verify everything) nor own a dataset (an owner trusts its own heads at once).
        deciders = [n for n in honest if not n.attester and n.idx >= sc.workload.datasets]
        to_trust = sorted(
            (t - self.heads[hid].published_ns) / NS
            for n in deciders
            for hid, t in n.trusted.items()
            if self.heads[hid].good and self.heads[hid].honest_owner
        )
        sent = sum(n.bytes_sent for n in honest)
        lat = sorted(self.latencies_ns)
        ideal = sorted(self.ideal_ns)
        out: dict[str, Any] = {
            "scenario": sc.name,
            "seed": self.seed,
            "nodes": sc.nodes,
            "honest_nodes": len(honest),
            "malicious_nodes": sum(1 for n in self.nodes if n.role == MALICIOUS),
            "sybils": sum(1 for n in self.nodes if n.role == SYBIL),
            "duration_s": dur,
            "policy": sc.policy.name,
            "heads": len(self.heads),
            "bad_heads": len(bad_heads),
            "delivery_ratio": _r(delivered / total) if total else None,
            "latency_ms": _pcts(lat),
            "ideal_latency_ms": _pcts(ideal),
            "latency_ratio_p50": _r(_pct(lat, 50) / _pct(ideal, 50)) if lat and ideal else None,
            "latency_ratio_p99": _r(_pct(lat, 99) / _pct(ideal, 99)) if lat and ideal else None,
            "latency_cdf_ms": _cdf(lat),
            "ideal_cdf_ms": _cdf(ideal),
            "bad_accept_probability": _r(bad_trusted / bad_pairs) if bad_pairs else 0.0,
            "bad_heads_trusted": bad_trusted,
            "bad_head_receipts": bad_pairs,
            "fraud_detection_s": _pcts_s(detect),
            "fraud_detected_pairs": len(detect),
            "equivocations": len(self.equivocations),
            "equivocation_detection_s": _pcts_s(sorted(eq_times)),
            "equivocation_detected_by_all_honest": eq_all if self.equivocations else None,
            "engine_s_per_trusted_head": _r(engine / trusted_pairs) if trusted_pairs else None,
            "engine_s_total": _r(engine),
            "trusted_heads": trusted_pairs,
            "replays_per_node": _r(sum(n.replays for n in deciders) / len(deciders))
            if deciders
            else None,
            "time_to_trust_s": _pcts_s(to_trust),
            "bandwidth_bytes_per_node_s": _r(sent / max(1, len(honest)) / dur),
            "counters": dict(self.c),
        }
        if self.eclipsed is not None:
            out["eclipse_target"] = self._eclipse_report(self.eclipsed, good_heads)
        return out

    def _delivery(self, honest: list[SimNode], good_heads: list[Head]) -> tuple[int, int]:
        """(delivered, total) over (honest node, good head) pairs published before the horizon.

        A node has a head when it accepted it or a later one of the same dataset; heads of the
        last minute (or tenth of the run) are left out, still spreading at the end.
        """
        delivered = total = 0
        latest: dict[tuple[int, int], int] = {}
        for n in honest:
            for hid in n.accepted:
                h = self.heads[hid]
                key = (n.idx, h.dataset)
                latest[key] = max(latest.get(key, -1), h.sequence)
        horizon = self.now - int(min(60.0, self.sc.duration_s / 10) * NS)
        for h in good_heads:
            if h.published_ns > horizon:
                continue
            for n in honest:
                total += 1
                if latest.get((n.idx, h.dataset), -1) >= h.sequence:
                    delivered += 1
        return delivered, total

    def _equivocation_detection(self, honest: list[SimNode]) -> tuple[list[float], bool]:
        """Seconds from each equivocation to each honest node's detection of it.

        The flag says whether every honest node online at the end detected every equivocation.
        """
        eq_times: list[float] = []
        eq_all = True
        for d, seq, t_pub in self.equivocations:
            det = self.eq_detect.get((d, seq), {})
            for n in honest:
                if n.idx in det:
                    eq_times.append(max(0.0, (det[n.idx] - t_pub) / NS))
                elif n.online:
                    eq_all = False
        return eq_times, eq_all

    def _eclipse_report(self, t: int, good_heads: list[Head]) -> dict[str, int]:
        """What the eclipsed node ``t`` accepted and trusted."""
        tn = self.nodes[t]
        return {
            "node": t,
            "accepted_honest": sum(1 for hid in tn.accepted if self.heads[hid].honest_owner),
            "trusted_bad": sum(1 for hid in tn.trusted if not self.heads[hid].good),
            "good_heads_published": len(good_heads),
        }


class _SimEffects:
    """How the simulator carries out each decision of one node's core (see p2p/executor.py)."""

    __slots__ = ("n", "sim")

    def __init__(self, sim: Simulator, n: SimNode) -> None:
        self.sim = sim
        self.n = n

    def accepted(self, d: Accept) -> None:
        self.sim._on_accept(self.n, d)

    def ignored(self, d: Ignore) -> None:
        return None  # counted by the core's decisions only; nothing to carry out

    def penalised(self, d: Penalise) -> None:
        self.sim.c["penalties"] += 1

    def forward(self, d: Forward) -> None:
        if not self.sim._own:
            self.sim._forward(self.n, d.content_id, int(d.source[1:]) if d.source else -1)

    def fetch(self, d: RequestFetch) -> None:
        self.sim._fetch(self.n, d)

    def abandon_fetch(self, d: AbandonFetch) -> None:
        # Simulated fetches are not cancellable tasks: a late FetchCompleted is judged by the core.
        self.sim.c["abandoned_fetches"] += 1

    def head_accepted(self, d: HeadAccepted) -> None:
        self.sim._on_head_accepted(self.n, d)

    def head_rejected(self, d: RejectHead) -> None:
        self.sim.c["rejected_heads"] += 1

    def equivocation(self, d: EmitEquivocationProof) -> None:
        self.sim._eq_detected(self.n, d.proof)
        cid = self.sim._register(d.proof.envelope, -1, False)
        self.sim._publish(self.n, cid)

    def anti_entropy(self, d: RequestAntiEntropy) -> None:
        self.sim._anti_entropy(self.n, int(d.peer[1:]))

    def disconnect(self, d: DisconnectPeer) -> None:
        self.sim.c["graylisted_links"] += 1
        self.sim._disconnect(self.n.idx, int(d.peer[1:]))

    def attest(self, d: PublishAttestation) -> None:
        if self.n.attester and self.n.role == HONEST:
            self.sim._attest(self.n, d.dataset, d.head)

    def dispute(self, d: PublishDispute) -> None:
        if self.n.attester and self.n.role == HONEST:
            self.sim._dispute(self.n, d.dataset, d.head)

    def poll_source(self, d: PollSource) -> None:
        """Simulated nodes follow no source URLs, so the core never asks them to poll one."""


def _r(x: float) -> float:
    return round(x, 6)


def _pct(xs: list[int] | list[float], p: float) -> float:
    if not xs:
        return 0.0
    i = min(len(xs) - 1, max(0, math.ceil(p / 100 * len(xs)) - 1))
    return float(xs[i])


def _pcts(xs: list[int]) -> dict[str, float] | None:
    if not xs:
        return None
    return {f"p{p}": _r(_pct(xs, p) / 1e6) for p in (50, 90, 99)} | {"max": _r(xs[-1] / 1e6)}


def _pcts_s(xs: list[float]) -> dict[str, float] | None:
    if not xs:
        return None
    return {f"p{p}": _r(_pct(xs, p)) for p in (50, 90, 99)} | {"max": _r(xs[-1])}


def _cdf(xs: list[int], points: int = 50) -> list[list[float]]:
    """``points`` (latency ms, cumulative fraction) pairs of a sorted list."""
    if not xs:
        return []
    out = []
    for k in range(1, points + 1):
        q = k / points
        out.append([_r(_pct(xs, 100 * q) / 1e6), _r(q)])
    return out


def run(scenario: Scenario, seed: int | None = None) -> dict[str, Any]:
    """Simulate ``scenario`` and return its metrics plus ``wall_s`` (the only varying field)."""
    t = time.perf_counter()
    sim = Simulator(scenario, seed)
    res = sim.run()
    res["wall_s"] = round(time.perf_counter() - t, 3)
    return res


class _TrustEffects:
    """The simulator's :class:`~p2p.trust_executor.TrustEffects` for one node."""

    def __init__(self, sim: Simulator, n: SimNode) -> None:
        self._sim = sim
        self._n = n

    def replay(self, d: trust.Replay) -> None:
        """Start the node's replay of the head (timed by the workload)."""
        self._sim._verify(self._n, self._sim.head_by_digest[d.head.digest])

    def trusted(self, d: trust.Trusted) -> None:
        """Record when the node trusted the head."""
        self._sim._trust(self._n, self._sim.head_by_digest[d.head.digest])

    def distrusted(self, d: trust.Distrusted) -> None:
        """Nothing to record: detection is timed by the node's own replay (``_verified``)."""
