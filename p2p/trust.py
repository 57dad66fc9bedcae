"""Trust policies: when a node trusts a head it did not (or not yet) replay itself.

Pure and sans-IO like :mod:`p2p.core`: a driver (the daemon later, the simulator now,
``sim/simulator.py``) feeds :class:`TrustPolicy` the events a node sees for its heads — the head
was accepted (:class:`HeadSeen`), the node's own verdict (:class:`LocalVerdict`), signed
attestations and disputes from peers (:class:`AttestationSeen`, :class:`DisputeSeen`) and time
(:class:`TrustTick`) — and carries out the decisions it answers (:class:`Replay`, :class:`Trusted`,
:class:`Distrusted`). :meth:`TrustPolicy.status` answers a head's trust state at any time.
Time is injected as ``now_ns`` and randomness as an :class:`~p2p.core.Rng`, so the same inputs
always give the same decisions.

Policies (``docs/trust.md`` has the full semantics and the settings as ``[trust]`` names them):

* ``verify-all``: trusted only by the node's own replay (today's behaviour);
* ``quorum``: trusted once ``k`` VERIFIED attestations of that exact head come from distinct
  attesters of ``trusted_attesters``;
* ``sample``: replay with probability ``p`` (drawn once per head), otherwise ``quorum``;
* ``reputation``: trusted once the attesters' weights ``max(0, base_weight + reputation)`` sum
  to ``threshold`` (replaying with probability ``p`` first, as ``sample`` does).

A node's own verdict is final: its replay beats any number of attestations or disputes.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, assert_never

from coordinator.errors import INVALID_INPUT, OdfNodeError
from coordinator.identity import DatasetId
from coordinator.multiformats import Multihash
from p2p.core.config import NS_PER_S, Rng
from p2p.errors import P2PError
from p2p.wire import Verdict

# --------------------------------------------------------------------------- configuration


class TrustConfigError(P2PError):
    """A trust setting is invalid; ``setting`` names it as the config file does (``[trust] k``)."""

    rpc_code = INVALID_INPUT

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(f"[trust] {setting}: {message}")
        self.setting = f"[trust] {setting}"


class Policy(enum.StrEnum):
    """The trust policies (their names in ``[trust] policy``)."""

    VERIFY_ALL = "verify-all"
    QUORUM = "quorum"
    SAMPLE = "sample"
    REPUTATION = "reputation"


MAX_HEADS: Final = 4096
"""Heads a policy tracks by default; the oldest is forgotten first (bounds memory)."""
HEADS_PER_DATASET: Final = 16
"""Heads a dataset's policy remembers (:func:`dataset_policy`), the oldest forgotten first: the
one cap both drivers run with (the daemon, one policy per followed dataset; the simulator, one
per node and dataset).

:data:`MAX_HEADS` would let each followed dataset's policy keep 4,096 heads: a dataset updated
every minute filled it for three days, and a node following many grew by every head it ever saw
(``make bench-longrun``: about 1,700 heads an hour). A head 16 updates behind the newest no
longer decides what a node serves (the newest trusted head is kept apart, in the subscription),
so late attestations of it need not be counted."""
MAX_RECORDED_PER_HEAD: Final = 1024
"""Strangers' attestations (and, separately, disputes) kept per head; later ones from new
signers drop. A stranger is a signer neither in ``trusted_attesters`` nor with a reputation
earned by this node's own replays; the attesters with an earned reputation have a room of the
same size of their own, and the ``trusted_attesters`` are always recorded (their number is the
operator's), so no number of fresh keys can crowd a trusted attester's dispute out."""
STRANGER_HEADS_PER_SIGNER: Final = 4
"""Heads a stranger's messages alone may make a policy remember at once (heads not seen, with
no trusted evidence): more from the same signer are dropped. A sixteenth of ``max_heads`` when
that is more (the simulator's policies judge thousands of heads each)."""
SHOWN_DISPUTERS: Final = 32
"""Disputers :meth:`TrustPolicy.status` names besides the trusted ones (the count is exact)."""


@dataclass(frozen=True, slots=True)
class TrustConfig:
    """A node's trust policy and its settings, validated at construction.

    ``can_replay`` says whether the node has an engine (``[pipeline] replay``): a node that
    cannot replay never gets a :class:`Replay` decision. ``any_attester`` makes ``sample`` count
    every signer (the simulator's model of an unconfigured network, kept to measure what a
    closed trusted set buys); it is refused with ``quorum`` and is not a ``[trust]`` setting.

    Raises:
        TrustConfigError: a setting is out of range or inconsistent with the policy.
    """

    policy: Policy = Policy.VERIFY_ALL
    k: int = 3
    trusted_attesters: frozenset[DatasetId] = frozenset()
    p: float = 0.1
    fallback_verify_s: float = 600.0
    can_replay: bool = True
    min_score: float = 0.0
    base_weight: float = 0.2
    threshold: float = 3.0
    reward: float = 1.0
    penalty: float = 10.0
    any_attester: bool = False
    max_heads: int = MAX_HEADS

    def __post_init__(self) -> None:
        if not isinstance(self.policy, Policy):
            raise TrustConfigError("policy", f"unknown policy {self.policy!r}")
        if self.k < 1:
            raise TrustConfigError("k", f"must be >= 1, got {self.k}")
        if not 0.0 <= self.p <= 1.0:
            raise TrustConfigError("p", f"must be in [0, 1], got {self.p}")
        if not self.fallback_verify_s > 0:
            raise TrustConfigError("fallback_verify_s", "must be > 0")
        if self.policy is Policy.QUORUM and self.any_attester:
            raise TrustConfigError("trusted_attesters", "quorum never counts just anyone")
        if self.policy in (Policy.QUORUM, Policy.SAMPLE) and not self.any_attester:
            if not self.trusted_attesters:
                raise TrustConfigError(
                    "trusted_attesters",
                    f"policy {self.policy.value!r} needs at least k node ids (an empty list "
                    "trusts nobody, it does not mean anyone)",
                )
            if self.k > len(self.trusted_attesters):
                raise TrustConfigError(
                    "k",
                    f"{self.k} exceeds the {len(self.trusted_attesters)} trusted attesters: "
                    "no quorum could ever be reached",
                )
        if self.policy is Policy.REPUTATION and not self.threshold > 0:
            raise TrustConfigError("threshold", "must be > 0")
        if self.base_weight < 0 or self.reward < 0 or self.penalty < 0:
            raise TrustConfigError("base_weight", "base_weight, reward and penalty must be >= 0")
        if self.max_heads < 1:
            raise TrustConfigError("max_heads", "must be >= 1")

    @classmethod
    def from_settings(cls, table: Mapping[str, object], *, can_replay: bool) -> TrustConfig:
        """Build a config from a ``[trust]`` table (TOML values; attesters as ``did:key:…``).

        Raises:
            TrustConfigError: an unknown key, a wrong type, an unparsable node id or a bad value.
        """
        known = {"policy", "k", "trusted_attesters", "p", "fallback_verify_s", "min_score"}
        known |= {"base_weight", "threshold", "reward", "penalty"}
        for key in table:
            if key not in known:
                raise TrustConfigError(key, "unknown setting")
        name = table.get("policy", Policy.VERIFY_ALL.value)
        try:
            policy = Policy(str(name))
        except ValueError:
            choices = ", ".join(p.value for p in Policy)
            raise TrustConfigError("policy", f"unknown policy {name!r} ({choices})") from None
        k = table.get("k", 3)
        if not isinstance(k, int) or isinstance(k, bool):
            raise TrustConfigError("k", "must be an integer")
        defaults = cls()
        keys = ("p", "fallback_verify_s", "min_score", "base_weight", "threshold", "reward")
        nums = {
            key: _number(key, table[key]) if key in table else float(getattr(defaults, key))
            for key in (*keys, "penalty")
        }
        return cls(
            policy=policy,
            k=k,
            trusted_attesters=parse_attesters(table.get("trusted_attesters", [])),
            p=nums["p"],
            fallback_verify_s=nums["fallback_verify_s"],
            can_replay=can_replay,
            min_score=nums["min_score"],
            base_weight=nums["base_weight"],
            threshold=nums["threshold"],
            reward=nums["reward"],
            penalty=nums["penalty"],
        )


def _number(key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TrustConfigError(key, "must be a number")
    return float(value)


def parse_attesters(value: object) -> frozenset[DatasetId]:
    """Node ids (``did:key:z6Mk…`` as ``odf-node status`` prints them, or ``did:odf:…``).

    Raises:
        TrustConfigError: not a list of strings, or a string is not a node id.
    """
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise TrustConfigError("trusted_attesters", "must be a list of node ids")
    out: set[DatasetId] = set()
    for text in value:
        try:
            out.add(DatasetId.parse(text))
        except OdfNodeError as e:
            raise TrustConfigError("trusted_attesters", f"{text!r} is not a node id: {e}") from e
    return frozenset(out)


# --------------------------------------------------------------------------- events


class Outcome(enum.StrEnum):
    """The node's own verdict on a head."""

    VERIFIED = "verified"
    FAILED = "failed"
    UNVERIFIABLE = "unverifiable"


@dataclass(frozen=True, slots=True)
class HeadSeen:
    """The node accepted ``head`` (fetched, integrity checked): its trust clock starts."""

    dataset: DatasetId
    head: Multihash
    now_ns: int


@dataclass(frozen=True, slots=True)
class LocalVerdict:
    """The node's own replay of ``head`` finished; ``evidence`` references a failure's proof."""

    dataset: DatasetId
    head: Multihash
    outcome: Outcome
    now_ns: int
    evidence: str = "local replay"


@dataclass(frozen=True, slots=True)
class AttestationSeen:
    """A signed attestation by ``attester`` of ``head`` (signature already checked)."""

    dataset: DatasetId
    head: Multihash
    attester: DatasetId
    verdict: Verdict
    now_ns: int


@dataclass(frozen=True, slots=True)
class DisputeSeen:
    """A signed dispute by ``attester`` of ``head``; ``evidence`` references it (content id)."""

    dataset: DatasetId
    head: Multihash
    attester: DatasetId
    evidence: str
    now_ns: int


@dataclass(frozen=True, slots=True)
class TrustTick:
    """Time passed (pending heads may have waited longer than ``fallback_verify_s``)."""

    now_ns: int


TrustEvent = HeadSeen | LocalVerdict | AttestationSeen | DisputeSeen | TrustTick


# --------------------------------------------------------------------------- decisions and answers


class TrustState(enum.StrEnum):
    """A head's trust state."""

    PENDING = "pending"
    TRUSTED = "trusted"
    DISPUTED = "disputed"
    UNVERIFIABLE = "unverifiable"


class TrustedBy(enum.StrEnum):
    """What made a head trusted."""

    LOCAL = "local"
    QUORUM = "quorum"


class ReplayReason(enum.StrEnum):
    """Why the node should replay a head itself."""

    POLICY = "policy"
    """``verify-all``: every head."""
    SAMPLE = "sample"
    """The once-per-head draw with probability ``p`` came up."""
    DISPUTE = "dispute"
    """A trusted attester disputed it."""
    FALLBACK = "fallback"
    """It stayed pending longer than ``fallback_verify_s``."""


@dataclass(frozen=True, slots=True)
class Replay:
    """Replay ``head`` locally and report a :class:`LocalVerdict`."""

    dataset: DatasetId
    head: Multihash
    reason: ReplayReason


@dataclass(frozen=True, slots=True)
class Trusted:
    """``head`` became trusted ``by`` the node's replay or a quorum of ``attesters``."""

    dataset: DatasetId
    head: Multihash
    by: TrustedBy
    attesters: tuple[DatasetId, ...]


@dataclass(frozen=True, slots=True)
class Distrusted:
    """``head`` became ``state`` (disputed or unverifiable); ``disputer`` is None when local."""

    dataset: DatasetId
    head: Multihash
    state: TrustState
    evidence: str
    disputer: DatasetId | None


TrustDecision = Replay | Trusted | Distrusted


@dataclass(frozen=True, slots=True)
class HeadTrust:
    """A head's trust state as a node answers it.

    ``attesters``: who made it trusted by quorum (empty otherwise); ``evidence``: what disputed
    it (a dispute's reference or the local replay's); ``disputed_by``: the signers that
    disputed it, trusted or not (never enough alone to block unless trusted): every
    ``trusted_attesters`` entry that did, then the first :data:`SHOWN_DISPUTERS` others;
    ``disputes``: how many signers' disputes are recorded (at most
    :data:`MAX_RECORDED_PER_HEAD` strangers among them).
    """

    state: TrustState
    by: TrustedBy | None = None
    attesters: tuple[DatasetId, ...] = ()
    evidence: str | None = None
    disputed_by: tuple[DatasetId, ...] = ()
    disputes: int = 0


_UNKNOWN: Final = HeadTrust(TrustState.PENDING)


_NO_ATTESTERS: Final[Mapping[DatasetId, None]] = MappingProxyType({})
_NO_DISPUTES: Final[Mapping[DatasetId, str]] = MappingProxyType({})


@dataclass(slots=True)
class _Head:
    seen_ns: int | None = None
    state: TrustState = TrustState.PENDING
    by: TrustedBy | None = None
    attesters: tuple[DatasetId, ...] = ()
    evidence: str | None = None
    disputer: DatasetId | None = None
    local: Outcome | None = None
    replaying: ReplayReason | None = None
    # The containers below start as shared empty immutable values (dataclasses take a
    # mapping default only from a factory: this one returns the shared value) and are made on
    # the first write. A head no other node attested or disputed (every head of a node that
    # verifies all it follows, the default) then keeps none: a node following 1,000 datasets
    # remembers 16,000 heads, and their five empty containers were ~0.3 KB a head, 12.5 ->
    # 7.5 MB in all (docs/operations.md, "Following 1,000 datasets").
    verified_by: Mapping[DatasetId, None] = field(default_factory=lambda: _NO_ATTESTERS)
    disputes: Mapping[DatasetId, str] = field(default_factory=lambda: _NO_DISPUTES)
    listed_disputers: tuple[DatasetId, ...] = ()
    """The ``trusted_attesters`` among ``disputes``: looked at first, shown first."""
    strangers: tuple[int, int, int, int] = (0, 0, 0, 0)
    """Recorded attestations and disputes by room: [_STRANGER], [_EARNED], each + _DISPUTES."""
    creator: DatasetId | None = None
    """The stranger whose message alone made the policy remember this head (its share)."""
    epoch: int = -1
    """:attr:`TrustPolicy._epoch` when ``counted`` and ``weight`` were summed."""
    counted: list[DatasetId] | tuple[()] = ()
    weight: float = 0.0

    def count_stranger(self, room: int) -> None:
        """One more attestation or dispute recorded in ``room``."""
        s = list(self.strangers)
        s[room] += 1
        self.strangers = (s[0], s[1], s[2], s[3])


_Key = tuple[DatasetId, Multihash]
_STRANGER, _EARNED, _DISPUTES = 0, 1, 2


# --------------------------------------------------------------------------- the policy


def _same(node: DatasetId) -> DatasetId:
    return node


class TrustPolicy:
    """One node's trust decisions over all its heads (see the module docstring)."""

    def __init__(self, config: TrustConfig, rng: Rng) -> None:
        """A policy with ``config``; ``rng`` draws the ``sample`` decisions."""
        self.config = config
        self._rng = rng
        self._fallback_ns = int(config.fallback_verify_s * NS_PER_S)
        self._heads: dict[_Key, _Head] = {}
        # Which heads go first when memory is full: three rooms, oldest first in each, so that
        # no stranger's message can push out a head the node saw or a trusted signer named.
        self._kept: dict[_Key, None] = {}  # seen or named by a trusted signer: max_heads
        self._guarded: dict[_Key, None] = {}  # disputed by a trusted signer or own replay
        self._strangers: dict[_Key, None] = {}  # named only by strangers: max_heads
        self._shares: dict[DatasetId, int] = {}  # heads in _strangers per creator
        self._per_signer = max(STRANGER_HEADS_PER_SIGNER, config.max_heads // 16)
        self._pending: dict[_Key, int] = {}  # seen, pending, no replay asked: seen_ns
        self._reputation: dict[DatasetId, float] = {}
        self._epoch = 0  # bumped when a reputation moves: heads' cached quorums are stale
        self.canonical: Callable[[DatasetId], DatasetId] = _same
        """Maps a node id to its newest key (node key rotations, ``node/app/identities.py``);
        events carry canonical ids, and a listed attester is compared by its canonical id, so
        a ``trusted_attesters`` entry naming a rotated key follows the rotation. The identity
        by default (the simulator has no rotations)."""

    # ----------------------------------------------------------------- queries

    def status(self, dataset: DatasetId, head: Multihash) -> HeadTrust:
        """The trust state of ``head`` (pending when never heard of)."""
        h = self._heads.get((dataset, head))
        if h is None:
            return _UNKNOWN
        shown = list(h.listed_disputers)
        others = 0
        for a in h.disputes:  # listed disputers are skipped: at most len(trusted_attesters)
            if others >= SHOWN_DISPUTERS:
                break
            if a not in h.listed_disputers:
                shown.append(a)
                others += 1
        return HeadTrust(h.state, h.by, h.attesters, h.evidence, tuple(shown), len(h.disputes))

    def head_count(self) -> int:
        """Heads remembered (at most ``max_heads`` seen or named by trusted signers, as many
        disputed by a trusted signer or the node's own replay, and ``max_heads`` named only by
        strangers; for metrics and memory tests)."""
        return len(self._heads)

    def is_guarded(self, dataset: DatasetId, head: Multihash) -> bool:
        """Whether ``head`` is kept apart from eviction by other heads: a trusted attester
        disputed it or the node's own replay failed (for tests and ``docs/trust.md``)."""
        return (dataset, head) in self._guarded

    def reputation(self, attester: DatasetId) -> float:
        """``attester``'s local reputation (moved only by this node's own replays)."""
        return self._reputation.get(attester, 0.0)

    def is_trusted_attester(self, attester: DatasetId) -> bool:
        """Whether ``attester``'s attestations count and its disputes block, right now."""
        c = self.config
        match c.policy:
            case Policy.VERIFY_ALL:
                return self._listed(attester)
            case Policy.QUORUM | Policy.SAMPLE:
                listed = c.any_attester or self._listed(attester)
                return listed and self.reputation(attester) >= c.min_score
            case Policy.REPUTATION:
                return self._weight(attester) > 0
            case _:
                assert_never(c.policy)

    def _listed(self, attester: DatasetId) -> bool:
        listed = self.config.trusted_attesters
        if attester in listed:
            return True
        if self.canonical is _same:
            return False
        return any(self.canonical(a) == attester for a in listed)

    # ----------------------------------------------------------------- events

    def handle(self, event: TrustEvent) -> list[TrustDecision]:
        """Feed one event; return the decisions to carry out, in order."""
        match event:
            case HeadSeen():
                return self._on_seen(event)
            case LocalVerdict():
                return self._on_local(event)
            case AttestationSeen():
                return self._on_attestation(event)
            case DisputeSeen():
                return self._on_dispute(event)
            case TrustTick():
                return self._on_tick(event.now_ns)
            case _:
                assert_never(event)

    def _head(self, key: _Key, stranger: DatasetId | None = None) -> _Head | None:
        """The record of ``key``, made if new. ``stranger``: only a stranger's message names
        it, so a new record goes to the strangers' room, within that signer's share (None when
        it has no share left); else the record is (or moves) in the main room."""
        h = self._heads.get(key)
        if h is not None:
            if stranger is None and h.creator is not None:
                self._unshare(key, h)
                self._kept[key] = None
                self._trim(self._kept)
            return h
        if stranger is None:
            h = self._heads[key] = _Head()
            self._kept[key] = None
            self._trim(self._kept)
            return h
        if self._shares.get(stranger, 0) >= self._per_signer:
            return None
        h = self._heads[key] = _Head(creator=stranger)
        self._shares[stranger] = self._shares.get(stranger, 0) + 1
        self._strangers[key] = None
        self._trim(self._strangers)
        return h

    def _seen_head(self, key: _Key) -> _Head:
        h = self._head(key)
        assert h is not None  # no stranger: always made
        return h

    def _unshare(self, key: _Key, h: _Head) -> None:
        """Take ``h`` out of the strangers' room (its creator's share freed)."""
        assert h.creator is not None
        del self._strangers[key]
        left = self._shares[h.creator] - 1
        if left:
            self._shares[h.creator] = left
        else:
            del self._shares[h.creator]
        h.creator = None

    def _guard(self, key: _Key, h: _Head) -> None:
        """A trusted signer's dispute or the node's own failed replay: never evicted by other
        heads (only by newer guarded heads past ``max_heads`` of them, a bound no stranger
        can reach)."""
        if key in self._guarded:
            return
        if h.creator is not None:
            self._unshare(key, h)
        self._kept.pop(key, None)
        self._guarded[key] = None
        self._trim(self._guarded)

    def _trim(self, room: dict[_Key, None]) -> None:
        """Forget the oldest heads of ``room`` past ``max_heads`` (never the newest)."""
        while len(room) > self.config.max_heads:
            old = next(iter(room))
            h = self._heads.pop(old)
            if h.creator is not None:
                self._unshare(old, h)
            else:
                del room[old]
            self._pending.pop(old, None)

    def _on_seen(self, ev: HeadSeen) -> list[TrustDecision]:
        key = (ev.dataset, ev.head)
        h = self._seen_head(key)
        if h.seen_ns is not None:
            return []
        h.seen_ns = ev.now_ns
        if h.local in (Outcome.VERIFIED, Outcome.FAILED):
            return []  # the node's own verdict came first and is final
        out: list[TrustDecision] = []
        c = self.config
        blocked = self._trusted_dispute(h)
        if blocked is not None:
            out += self._set(
                key, h, TrustState.DISPUTED, evidence=h.disputes[blocked], disputer=blocked
            )
            out += self._replay(key, h, ReplayReason.DISPUTE)
            return out
        if h.local is Outcome.UNVERIFIABLE:
            return self._evaluate(key, h)  # own replay already tried: only a quorum can trust
        match c.policy:
            case Policy.VERIFY_ALL:
                reason: ReplayReason | None = ReplayReason.POLICY
            case Policy.QUORUM:
                reason = None
            case Policy.SAMPLE | Policy.REPUTATION:
                # One draw per head, and only on a node that can act on it.
                sampled = c.can_replay and self._rng.random() < c.p
                reason = ReplayReason.SAMPLE if sampled else None
            case _:
                assert_never(c.policy)
        if reason is not None and c.can_replay:
            return self._replay(key, h, reason)
        if c.policy is Policy.VERIFY_ALL:
            # verify-all on a node with no engine: nothing will ever trust this head.
            return self._set(key, h, TrustState.UNVERIFIABLE, evidence="cannot replay")
        self._pending[key] = ev.now_ns
        return self._evaluate(key, h)

    def _on_local(self, ev: LocalVerdict) -> list[TrustDecision]:
        key = (ev.dataset, ev.head)
        h = self._seen_head(key)
        if h.local in (Outcome.VERIFIED, Outcome.FAILED):
            return []  # the first definitive verdict is final
        h.local = ev.outcome
        h.replaying = None
        self._pending.pop(key, None)
        c = self.config
        match ev.outcome:
            case Outcome.VERIFIED:
                if h.verified_by:
                    self._epoch += 1
                for a in h.verified_by:
                    self._reputation[a] = self.reputation(a) + c.reward
                return self._set(key, h, TrustState.TRUSTED, by=TrustedBy.LOCAL)
            case Outcome.FAILED:
                if h.verified_by:
                    self._epoch += 1
                for a in h.verified_by:
                    self._reputation[a] = self.reputation(a) - c.penalty
                self._guard(key, h)
                return self._set(key, h, TrustState.DISPUTED, evidence=ev.evidence)
            case Outcome.UNVERIFIABLE:
                if h.state is TrustState.TRUSTED:
                    return []  # a quorum already trusted it; the failed attempt changes nothing
                out = self._evaluate(key, h)
                if h.state is TrustState.PENDING:
                    out += self._set(key, h, TrustState.UNVERIFIABLE, evidence=ev.evidence)
                return out
            case _:
                assert_never(ev.outcome)

    def _on_attestation(self, ev: AttestationSeen) -> list[TrustDecision]:
        if ev.verdict is not Verdict.VERIFIED:
            return []  # integrity-only or unverifiable attestations never count
        c = self.config
        closed = c.policy in (Policy.QUORUM, Policy.SAMPLE) and not c.any_attester
        listed = self._listed(ev.attester)
        if closed and not listed:
            return []  # never counts: not worth the memory
        key = (ev.dataset, ev.head)
        room = None if listed else self._room(ev.attester)
        h = self._head(key, ev.attester if room is not None else None)
        if h is None or ev.attester in h.verified_by:
            return []
        if room is not None:
            if h.strangers[room] >= MAX_RECORDED_PER_HEAD:
                return []  # that room is full; the trusted attesters' is not
            h.count_stranger(room)
        verified_by = h.verified_by if isinstance(h.verified_by, dict) else {}
        verified_by[ev.attester] = None
        h.verified_by = verified_by
        if self.config.policy is not Policy.VERIFY_ALL:
            self._tally(h, ev.attester)
        return self._evaluate(key, h)

    def _room(self, signer: DatasetId) -> int:
        """The room a signer not in ``trusted_attesters`` is counted in."""
        return _EARNED if self.reputation(signer) > 0 else _STRANGER

    def _on_dispute(self, ev: DisputeSeen) -> list[TrustDecision]:
        key = (ev.dataset, ev.head)
        listed = self._listed(ev.attester)
        room = None if listed else self._room(ev.attester)
        h = self._head(key, ev.attester if room is not None else None)
        if h is None or ev.attester in h.disputes:
            return []
        if room is None:
            h.listed_disputers = (*h.listed_disputers, ev.attester)
            self._guard(key, h)
        elif h.strangers[_DISPUTES + room] >= MAX_RECORDED_PER_HEAD:
            return []  # that room is full; the trusted attesters' is not
        else:
            h.count_stranger(_DISPUTES + room)
        disputes = h.disputes if isinstance(h.disputes, dict) else {}
        disputes[ev.attester] = ev.evidence
        h.disputes = disputes
        if h.local is not None and h.local is not Outcome.UNVERIFIABLE:
            return []  # the node's own replay already decided
        if h.seen_ns is None or not self.is_trusted_attester(ev.attester):
            return []  # recorded; acted on when the head is seen, or never (untrusted)
        out: list[TrustDecision] = []
        if h.state is not TrustState.DISPUTED:
            out += self._set(
                key, h, TrustState.DISPUTED, evidence=ev.evidence, disputer=ev.attester
            )
        self._pending.pop(key, None)
        out += self._replay(key, h, ReplayReason.DISPUTE)
        return out

    def _on_tick(self, now_ns: int) -> list[TrustDecision]:
        if not self.config.can_replay:
            return []
        due = [k for k, t in self._pending.items() if now_ns - t >= self._fallback_ns]
        out: list[TrustDecision] = []
        for key in due:
            del self._pending[key]
            out += self._replay(key, self._heads[key], ReplayReason.FALLBACK)
        return out

    # ----------------------------------------------------------------- transitions

    def _weight(self, attester: DatasetId) -> float:
        return max(0.0, self.config.base_weight + self.reputation(attester))

    def _trusted_dispute(self, h: _Head) -> DatasetId | None:
        for a in h.listed_disputers:
            if self.is_trusted_attester(a):
                return a
        c = self.config
        if c.policy is Policy.REPUTATION or c.any_attester:
            for a in h.disputes:  # anyone may weigh: once per head, when it is seen
                if self.is_trusted_attester(a):
                    return a
        return None

    def _quorum(self, h: _Head) -> tuple[DatasetId, ...] | None:
        """The attesters that make ``h`` trusted by quorum, or None."""
        c = self.config
        match c.policy:
            case Policy.VERIFY_ALL:
                return None
            case Policy.QUORUM | Policy.SAMPLE:
                self._tally(h)
                return tuple(h.counted) if len(h.counted) >= c.k else None
            case Policy.REPUTATION:
                self._tally(h)
                if h.weight >= c.threshold:
                    return tuple(a for a in h.verified_by if self._weight(a) > 0)
                return None
            case _:
                assert_never(c.policy)

    def _tally(self, h: _Head, new: DatasetId | None = None) -> None:
        """Bring ``h.counted`` (its attesters that count) and ``h.weight`` (the sum of their
        weights) up to date: add ``new`` (just recorded) only, unless a reputation moved since
        the last tally (then every attester again), so that an attestation costs O(1) in the
        number of earlier ones."""
        if h.epoch != self._epoch:
            h.epoch = self._epoch
            h.counted = [a for a in h.verified_by if self.is_trusted_attester(a)]
            h.weight = sum((self._weight(a) for a in h.verified_by), 0.0)
        elif new is not None:
            if self.is_trusted_attester(new):
                if isinstance(h.counted, list):
                    h.counted.append(new)
                else:
                    h.counted = [new]  # the shared empty default until now
            h.weight += self._weight(new)

    def _evaluate(self, key: _Key, h: _Head) -> list[TrustDecision]:
        """Trust a seen head by quorum when nothing forbids it."""
        if h.seen_ns is None or h.state in (TrustState.TRUSTED, TrustState.DISPUTED):
            return []
        if h.local is not None and h.local is not Outcome.UNVERIFIABLE:
            return []
        if h.replaying in (ReplayReason.POLICY, ReplayReason.SAMPLE, ReplayReason.DISPUTE):
            return []  # the node chose to check this head itself: wait for its verdict
        quorum = self._quorum(h)
        if quorum is None:
            return []
        self._pending.pop(key, None)
        return self._set(key, h, TrustState.TRUSTED, by=TrustedBy.QUORUM, attesters=quorum)

    def _replay(self, key: _Key, h: _Head, reason: ReplayReason) -> list[TrustDecision]:
        if not self.config.can_replay or h.replaying is not None or h.local is not None:
            return []
        h.replaying = reason
        return [Replay(key[0], key[1], reason)]

    def _set(
        self,
        key: _Key,
        h: _Head,
        state: TrustState,
        *,
        by: TrustedBy | None = None,
        attesters: Iterable[DatasetId] = (),
        evidence: str | None = None,
        disputer: DatasetId | None = None,
    ) -> list[TrustDecision]:
        h.state, h.by, h.attesters = state, by, tuple(attesters)
        h.evidence, h.disputer = evidence, disputer
        match state:
            case TrustState.TRUSTED:
                assert by is not None
                return [Trusted(key[0], key[1], by, h.attesters)]
            case TrustState.DISPUTED | TrustState.UNVERIFIABLE:
                return [Distrusted(key[0], key[1], state, evidence or "", disputer)]
            case TrustState.PENDING:
                return []
            case _:
                assert_never(state)


__all__ = [
    "AttestationSeen",
    "DisputeSeen",
    "Distrusted",
    "HeadSeen",
    "HeadTrust",
    "LocalVerdict",
    "Outcome",
    "Policy",
    "Replay",
    "ReplayReason",
    "TrustConfig",
    "TrustConfigError",
    "TrustDecision",
    "TrustEvent",
    "TrustPolicy",
    "TrustState",
    "TrustTick",
    "TrustedBy",
    "parse_attesters",
]


def dataset_policy(config: TrustConfig, rng: Rng) -> TrustPolicy:
    """One dataset's policy under ``config``, remembering at most :data:`HEADS_PER_DATASET`
    heads (fewer if ``config.max_heads`` says so)."""
    return TrustPolicy(
        dataclasses.replace(config, max_heads=min(config.max_heads, HEADS_PER_DATASET)), rng
    )
