"""Scenario files (TOML) for the network simulator and the real-cluster mode.

A scenario is a TOML document with top-level keys ``name``, ``seed``, ``nodes``, ``duration_s``
and the tables ``[topology]``, ``[gossip]``, ``[latency]``, ``[workload]``, ``[policy]``,
``[adversary]``, ``[churn]``, ``[cluster]`` and ``[core]`` (overrides of
:class:`p2p.core.CoreConfig`). Every field has a default (see the dataclasses below), unknown keys
are refused, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coordinator.errors import OdfNodeError


class ScenarioError(OdfNodeError):
    """A scenario file or override is malformed (unknown key, wrong type, bad value)."""


@dataclass(slots=True)
class Topology:
    """Who is connected to whom: every node dials ``outbound`` random others (undirected links)."""

    outbound: int = 4
    cold_boot: bool = False
    """Nodes join one by one over ``join_window_s`` instead of all being up at t=0."""
    join_window_s: float = 60.0


@dataclass(slots=True)
class Gossip:
    """The gossipsub mesh model (parameter names as in the GossipSub v1.1 specification)."""

    D: int = 6
    D_lo: int = 4
    D_hi: int = 12
    D_lazy: int = 6
    heartbeat_s: float = 1.0
    history_gossip: int = 3
    flood_publish: bool = True
    seen_ttl_s: float = 120.0
    overhead_bytes: int = 64
    """Framing bytes per RPC (protobuf + yamux + noise), added to every message."""
    hop_delay_ms: float = 0.0
    """Processing time per hop (validation, serialisation) before a node sends; for calibration."""


@dataclass(slots=True)
class Latency:
    """One-way link latency (sampled once per link) and per-node uplink bandwidth."""

    model: str = "lognormal"  # constant | uniform | lognormal | matrix
    mean_ms: float = 50.0
    """constant: the value; lognormal: the median."""
    sigma: float = 0.5
    min_ms: float = 5.0
    max_ms: float = 300.0
    matrix_file: str = ""
    """CSV square matrix of one-way ms between regions (path relative to the scenario)."""
    matrix: list[list[float]] = field(default_factory=list)
    bandwidth_mbps: float = 20.0


@dataclass(slots=True)
class Workload:
    """What owners publish and what verification costs (engine seconds, ground-truth outcomes)."""

    datasets: int = 1
    head_interval_s: float = 120.0
    first_head_s: float = 10.0
    max_heads: int = 0
    """Stop publishing after this many heads per dataset (0: no limit)."""
    slices_per_head: int = 1
    verify_s_per_slice: float = 30.0
    """Median engine seconds to replay one slice (lognormal with ``verify_sigma``)."""
    verify_sigma: float = 0.5
    fetch_bytes: int = 1_000_000
    attester_fraction: float = 0.05
    """Honest nodes that always verify and publish attestations / disputes."""
    tick_s: float = 10.0
    ideal_samples: int = 10
    """How many honest heads get a shortest-path (ideal) latency computed."""


@dataclass(slots=True)
class TrustPolicySettings:
    """The trust policy of honest non-attester nodes (decided by :mod:`p2p.trust`)."""

    name: str = "verify-all"  # verify-all | quorum | sample | reputation
    p: float = 0.1
    k: int = 3
    min_score: float = 0.0
    base_weight: float = 0.2
    threshold: float = 3.0
    reward: float = 1.0
    penalty: float = 10.0
    fallback_verify_s: float = 600.0
    """A pending head with too few attestations is verified locally after this long."""
    trusted: str = "any"
    """Whose attestations count for ``quorum`` / ``sample``: ``"attesters"`` (a closed set: the
    honest public attesters plus ``trusted_colluders``) or ``"any"`` (every signer, ``sample``
    only: the model of a network where any identity counts)."""
    trusted_colluders: int = 0
    """Malicious false-attesting nodes inside the trusted set (``trusted = "attesters"``)."""


@dataclass(slots=True)
class Adversary:
    """Malicious and faulty behaviour."""

    malicious_fraction: float = 0.0
    """Non-owner nodes that forward only adversarial traffic and attest falsely."""
    silent: bool = True
    false_attest: bool = True
    spoof_owners: int = 0
    """The first ``spoof_owners`` datasets are owned by malicious nodes."""
    spoof_fraction: float = 0.5
    """Share of a malicious owner's heads whose derivative data is spoofed."""
    equivocating_owners: int = 0
    equivocate_every: int = 3
    """An equivocating owner forks every n-th head."""
    replayers: int = 0
    replay_interval_s: float = 30.0
    sybils: int = 0
    sybil_at_s: float = 300.0
    sybil_degree: int = 4
    flood_rate: float = 10.0
    flood_s: float = 30.0
    dispute_flood: int = 0
    """Disputes of each spoofed head, each signed by a fresh key, that the spoofing owner
    publishes right after the head (the sybil-dispute flood of issue 39: they filled a head's
    dispute slots before a trusted attester's dispute came)."""
    collude_after_s: float = 0.0
    """Colluders attest a spoofed head this long after accepting it (0: at once): past the
    honest attesters' replay, their quorum comes after the trusted disputes."""
    eclipse_target: int = -1
    eclipse_peers: int = 8
    eclipse_at_s: float = 0.0
    silent_fraction: float = 0.0
    silent_at_s: float = 600.0


@dataclass(slots=True)
class Churn:
    """Nodes go offline and come back (exponential times)."""

    rate_per_node_hour: float = 0.0
    mean_offline_s: float = 300.0


@dataclass(slots=True)
class Cluster:
    """Real-cluster mode settings (``sim.cluster``; node 0 is the owner, 1..N-1 are processes)."""

    messages: int = 20
    rate: float = 2.0


@dataclass(slots=True)
class Scenario:
    """A whole scenario; see the module docstring."""

    name: str = "unnamed"
    seed: int = 1
    nodes: int = 100
    duration_s: float = 3600.0
    topology: Topology = field(default_factory=Topology)
    gossip: Gossip = field(default_factory=Gossip)
    latency: Latency = field(default_factory=Latency)
    workload: Workload = field(default_factory=Workload)
    policy: TrustPolicySettings = field(default_factory=TrustPolicySettings)
    adversary: Adversary = field(default_factory=Adversary)
    churn: Churn = field(default_factory=Churn)
    cluster: Cluster = field(default_factory=Cluster)
    core: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        """Check value ranges.

        Raises:
            ScenarioError: a value is out of range.
        """
        if self.nodes < 2:
            raise ScenarioError("nodes must be >= 2")
        if self.workload.datasets < 1 or self.workload.datasets > self.nodes:
            raise ScenarioError("workload.datasets must be in 1..nodes")
        a = self.adversary
        if a.spoof_owners + a.equivocating_owners > self.workload.datasets:
            raise ScenarioError("spoof_owners + equivocating_owners exceed workload.datasets")
        if not 0.0 <= a.malicious_fraction < 1.0:
            raise ScenarioError("adversary.malicious_fraction must be in [0, 1)")
        pol = self.policy
        if pol.name not in ("verify-all", "quorum", "sample", "reputation"):
            raise ScenarioError(f"unknown policy {pol.name!r}")
        if pol.trusted not in ("any", "attesters"):
            raise ScenarioError(f"policy.trusted must be 'any' or 'attesters', not {pol.trusted!r}")
        if pol.name == "quorum" and pol.trusted != "attesters":
            raise ScenarioError("policy.name = 'quorum' needs policy.trusted = 'attesters'")
        if pol.trusted_colluders < 0:
            raise ScenarioError("policy.trusted_colluders must be >= 0")
        if self.adversary.dispute_flood < 0 or self.adversary.collude_after_s < 0:
            raise ScenarioError("adversary.dispute_flood and collude_after_s must be >= 0")
        if self.latency.model not in ("constant", "uniform", "lognormal", "matrix"):
            raise ScenarioError(f"unknown latency model {self.latency.model!r}")
        if self.latency.model == "matrix" and not self.latency.matrix:
            raise ScenarioError("latency.model = 'matrix' needs latency.matrix_file")
        g = self.gossip
        if not 0 < g.D_lo <= g.D <= g.D_hi:
            raise ScenarioError("gossip needs 0 < D_lo <= D <= D_hi")


_SECTIONS: dict[str, type[Any]] = {
    "topology": Topology,
    "gossip": Gossip,
    "latency": Latency,
    "workload": Workload,
    "policy": TrustPolicySettings,
    "adversary": Adversary,
    "churn": Churn,
    "cluster": Cluster,
}


def _coerce(cls: type[Any], key: str, value: Any, where: str) -> Any:
    names = {f.name: f for f in dataclasses.fields(cls)}
    if key not in names:
        raise ScenarioError(f"unknown key {where}.{key}")
    default = getattr(cls(), key)
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ScenarioError(f"{where}.{key} must be a boolean")
        return value
    if (
        isinstance(default, float)
        and isinstance(value, int | float)
        and not isinstance(value, bool)
    ):
        return float(value)
    if isinstance(default, int) and isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(default, str) and isinstance(value, str):
        return value
    if isinstance(default, list) and isinstance(value, list):
        return value
    raise ScenarioError(f"{where}.{key}: wrong type {type(value).__name__}")


def from_dict(doc: dict[str, Any], base_dir: Path | None = None) -> Scenario:
    """Build a :class:`Scenario` from a parsed TOML document.

    Raises:
        ScenarioError: unknown keys, wrong types, bad values or an unreadable matrix file.
    """
    sc = Scenario()
    for key, value in doc.items():
        if key in _SECTIONS:
            if not isinstance(value, dict):
                raise ScenarioError(f"[{key}] must be a table")
            section = getattr(sc, key)
            for k, v in value.items():
                setattr(section, k, _coerce(_SECTIONS[key], k, v, key))
        elif key == "core":
            if not isinstance(value, dict):
                raise ScenarioError("[core] must be a table")
            sc.core = dict(value)
        elif key in ("name", "seed", "nodes", "duration_s"):
            setattr(sc, key, _coerce(Scenario, key, value, "scenario"))
        else:
            raise ScenarioError(f"unknown key {key}")
    if sc.latency.matrix_file and not sc.latency.matrix:
        path = Path(sc.latency.matrix_file)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        sc.latency.matrix = read_matrix(path)
    sc.validate()
    return sc


def read_matrix(path: Path) -> list[list[float]]:
    """Read a square CSV matrix of one-way latencies in ms (``#`` lines are comments).

    Raises:
        ScenarioError: unreadable, not square or negative.
    """
    try:
        text = path.read_text()
    except OSError as e:
        raise ScenarioError(f"cannot read latency matrix {path}: {e}") from e
    rows: list[list[float]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            rows.append([float(x) for x in line.split(",")])
        except ValueError as e:
            raise ScenarioError(f"{path}: not a number in {line!r}") from e
    if not rows or any(len(r) != len(rows) for r in rows) or any(x < 0 for r in rows for x in r):
        raise ScenarioError(f"{path}: latency matrix must be square and non-negative")
    return rows


def load(path: str | Path, overrides: dict[str, Any] | None = None) -> Scenario:
    """Load a scenario file, applying dotted ``overrides`` (``{"adversary.sybils": 10}``).

    A bare name without ``/`` or ``.toml`` is looked up in ``sim/scenarios/``.

    Raises:
        ScenarioError: missing file, bad TOML or bad values.
    """
    p, doc = read_document(path, overrides)
    return from_dict(doc, p.parent)


def read_document(
    path: str | Path, overrides: dict[str, Any] | None = None
) -> tuple[Path, dict[str, Any]]:
    """The scenario file for ``path`` (:func:`resolve`) and its TOML document with dotted
    ``overrides`` applied (:func:`apply_override`), not yet checked: what :func:`load` and
    the other kinds of scenario (``sim/internet.py``) read their parameters from.

    Raises:
        ScenarioError: missing file, bad TOML or a bad override key.
    """
    p = resolve(path)
    try:
        doc = tomllib.loads(p.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ScenarioError(f"cannot load scenario {p}: {e}") from e
    for dotted, value in (overrides or {}).items():
        apply_override(doc, dotted, value)
    return p, doc


def resolve(path: str | Path) -> Path:
    """The scenario file for ``path`` (a path, or a name in ``sim/scenarios/``)."""
    p = Path(path)
    if not p.exists() and "/" not in str(path) and not str(path).endswith(".toml"):
        p = SCENARIO_DIR / f"{path}.toml"
    if not p.exists():
        raise ScenarioError(f"scenario not found: {path}")
    return p


def apply_override(doc: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``doc[a][b] = value`` for ``dotted = "a.b"`` (creating the table)."""
    parts = dotted.split(".")
    if len(parts) > 2 or not all(parts):
        raise ScenarioError(f"bad override key {dotted!r}")
    if len(parts) == 1:
        doc[parts[0]] = value
    else:
        table = doc.setdefault(parts[0], {})
        if not isinstance(table, dict):
            raise ScenarioError(f"{parts[0]} is not a table")
        table[parts[1]] = value


def parse_value(text: str) -> Any:
    """A command-line override value: TOML scalar syntax (``10``, ``0.3``, ``true``, ``"x"``)."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"
