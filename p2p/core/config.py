"""The protocol core's tunables and the randomness it is given."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Protocol

from p2p.limits import MAX_MESSAGE_SIZE

NS_PER_S: Final = 1_000_000_000


class Rng(Protocol):
    """The randomness the core needs; :class:`random.Random` satisfies it."""

    def random(self) -> float:
        """A float in ``[0, 1)``."""
        ...


@dataclass(frozen=True, slots=True)
class CoreConfig:
    """Tunables of the protocol core. Times are in nanoseconds, scores are unitless."""

    max_message_size: int = MAX_MESSAGE_SIZE
    max_clock_skew_ns: int = 30 * NS_PER_S
    max_message_age_ns: int = 5 * 60 * NS_PER_S
    seen_ttl_ns: int = 10 * 60 * NS_PER_S
    seen_capacity: int = 65_536
    rate_burst: float = 100.0
    rate_per_s: float = 20.0
    backlog_bytes_per_peer: int = 1 << 20
    backlog_bytes_total: int = 32 << 20
    score_half_life_ns: int = 5 * 60 * NS_PER_S
    score_cap: float = 50.0
    graylist_threshold: float = -100.0
    reward_first_delivery: float = 1.0
    penalty_flood: float = 5.0
    penalty_oversized: float = 50.0
    penalty_malformed: float = 20.0
    penalty_bad_signature: float = 50.0
    penalty_future: float = 5.0
    penalty_invalid_proof: float = 50.0
    fetch_timeout_ns: int = 120 * NS_PER_S
    fetch_retry_base_ns: int = 2 * NS_PER_S
    fetch_retry_max_ns: int = 60 * NS_PER_S
    anti_entropy_interval_ns: int = 60 * NS_PER_S
    max_anti_entropy_entries: int = 256
    # Announcements remembered per dataset (equivocation checks, anti-entropy re-judging), and
    # as many rejected heads and proved slots. An owner that equivocates signs its two heads of
    # one slot close together; 16 slots cover that, where 64 kept ~2.5 MB of a node following
    # 40 busy datasets and took 85 minutes to fill (make bench-longrun).
    history_per_dataset: int = 16
    max_peers: int = 4096
    max_known_proofs: int = 4096
    # Attestations, disputes, observations and key records accepted (hence forwarded) per
    # signing key, whichever peer brings them (issue 39: one key's 20,000 disputes, sent
    # through many peers, each within its own rate, reached every node). An honest node signs
    # one attestation per head it verifies; a key past its budget is ignored, its peers not
    # blamed (they may only relay it). ``max_signers`` bounds the buckets kept (LRU).
    signer_rate_burst: float = 200.0
    signer_rate_per_s: float = 10.0
    max_signers: int = 16_384

    def __post_init__(self) -> None:
        if self.seen_ttl_ns < self.max_message_age_ns + self.max_clock_skew_ns:
            raise ValueError("seen_ttl_ns must cover max_message_age_ns + max_clock_skew_ns")
        if self.rate_burst < 1 or self.rate_per_s <= 0 or self.seen_capacity < 1:
            raise ValueError("rate_burst >= 1, rate_per_s > 0 and seen_capacity >= 1 required")
        if self.signer_rate_burst < 1 or self.signer_rate_per_s <= 0 or self.max_signers < 1:
            raise ValueError(
                "signer_rate_burst >= 1, signer_rate_per_s > 0 and max_signers >= 1 required"
            )
        if self.backlog_bytes_per_peer < self.max_message_size:
            raise ValueError("backlog_bytes_per_peer must hold at least one message")
        if not 0 < self.fetch_retry_base_ns <= self.fetch_retry_max_ns:
            raise ValueError("0 < fetch_retry_base_ns <= fetch_retry_max_ns required")
