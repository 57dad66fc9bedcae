"""Subscriptions (with their trust records and overrides), the accepted head of each followed
dataset, and verification verdicts of ``NodeState``."""

from __future__ import annotations

import json
from typing import cast

from node.app.rows import (
    VERIFICATION_OUTCOMES,
    AcceptedHead,
    Subscription,
    TrustOverride,
    TrustRecord,
    Verification,
    VerificationOutcome,
)
from node.state.base import (
    HEAD_SELECT,
    SUB_SELECT,
    StateCore,
    accepted_head_from_row,
    check_did,
    check_head,
    is_int,
    subscription_from_row,
)
from node.state.errors import InvalidStateValue


class SubscriptionsAndHeads(StateCore):
    """Subscriptions, accepted heads and verifications."""

    # -- subscriptions ----------------------------------------------------------------------

    def subscribe(
        self,
        did: str,
        alias: str | None = None,
        source_hint: str | None = None,
        override: TrustOverride | None = None,
        source_url: str | None = None,
    ) -> Subscription:
        """Follow ``did``; idempotent. On an existing subscription, a non-None ``alias``,
        ``source_hint``, ``source_url`` or field of ``override`` replaces the stored one and
        None keeps it."""
        check_did(did)
        now = self._clock()
        o = override or TrustOverride()
        attesters = None if o.trusted_attesters is None else json.dumps(list(o.trusted_attesters))
        with self._tx() as c:
            c.execute(
                """INSERT INTO subscriptions (did, alias, source_hint, created_ns, updated_ns,
                                              trust_policy, trust_k, trust_attesters, source_url)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (did) DO UPDATE SET
                     alias = coalesce(excluded.alias, alias),
                     source_hint = coalesce(excluded.source_hint, source_hint),
                     source_url = coalesce(excluded.source_url, source_url),
                     trust_policy = coalesce(excluded.trust_policy, trust_policy),
                     trust_k = coalesce(excluded.trust_k, trust_k),
                     trust_attesters = coalesce(excluded.trust_attesters, trust_attesters),
                     updated_ns = CASE
                       WHEN coalesce(excluded.alias, alias) IS NOT alias
                         OR coalesce(excluded.source_hint, source_hint) IS NOT source_hint
                         OR coalesce(excluded.source_url, source_url) IS NOT source_url
                         OR excluded.trust_policy IS NOT NULL
                         OR excluded.trust_k IS NOT NULL
                         OR excluded.trust_attesters IS NOT NULL
                       THEN excluded.updated_ns ELSE updated_ns END""",
                (did, alias, source_hint, now, now, o.policy, o.k, attesters, source_url),
            )
        sub = self.subscription(did)
        assert sub is not None
        return sub

    def record_trust(self, did: str, trust: TrustRecord, trusted_head: str | None) -> bool:
        """Store the trust state of ``did``'s newest judged head and, when not None, its newest
        trusted head; False when ``did`` is not followed (nothing stored)."""
        check_did(did)
        check_head(trust.head)
        if trusted_head is not None:
            check_head(trusted_head)
        record = {
            "head": trust.head,
            "state": trust.state,
            "by": trust.by,
            "attesters": list(trust.attesters),
            "evidence": trust.evidence,
            "disputed_by": list(trust.disputed_by),
        }
        return self._changed(
            """UPDATE subscriptions SET trust = ?, trusted_head = coalesce(?, trusted_head)
               WHERE did = ?""",
            (json.dumps(record), trusted_head, did),
        )

    def unsubscribe(self, did: str) -> bool:
        """Stop following ``did``; True if it was subscribed. Other rows (heads...) are kept."""
        return self._changed("DELETE FROM subscriptions WHERE did = ?", (did,))

    def subscriptions(self) -> list[Subscription]:
        """All subscriptions, oldest first."""
        return [
            subscription_from_row(r) for r in self._rows(SUB_SELECT + " ORDER BY created_ns, did")
        ]

    def subscription_count(self) -> int:
        """Number of subscriptions (without reading them)."""
        return int(self._conn.execute("SELECT count(*) FROM subscriptions").fetchone()[0])

    def subscription(self, did: str) -> Subscription | None:
        """The subscription of ``did``, if any."""
        rows = self._rows(SUB_SELECT + " WHERE did = ?", (did,))
        return subscription_from_row(rows[0]) if rows else None

    # -- accepted heads ---------------------------------------------------------------------

    def record_accepted_head(
        self,
        did: str,
        epoch: int,
        sequence: int,
        head: str,
        source_peer: str | None,
        envelope: bytes,
    ) -> bool:
        """Store the head announced for ``did`` if (epoch, sequence) is strictly above the stored
        one (or none is stored); return whether it was stored. Equal positions are not stored:
        the same position with another head is an equivocation, for the caller to prove."""
        check_did(did)
        check_head(head)
        if not (is_int(epoch) and is_int(sequence)) or epoch < 0 or sequence < 0:
            raise InvalidStateValue(
                f"epoch and sequence must be ints >= 0: {epoch!r}, {sequence!r}"
            )
        now = self._clock()
        return self._changed(
            """INSERT INTO accepted_heads
                 (did, epoch, sequence, head, source_peer, envelope, accepted_ns)
               VALUES (?, ?, ?, ?, ?, ?, ?)
               ON CONFLICT (did) DO UPDATE SET
                 epoch = excluded.epoch, sequence = excluded.sequence, head = excluded.head,
                 source_peer = excluded.source_peer, envelope = excluded.envelope,
                 accepted_ns = excluded.accepted_ns
               WHERE (excluded.epoch, excluded.sequence)
                     > (accepted_heads.epoch, accepted_heads.sequence)""",
            (did, epoch, sequence, head, source_peer, bytes(envelope), now),
        )

    def accepted_head(self, did: str) -> AcceptedHead | None:
        """The accepted head of ``did``, if any."""
        rows = self._rows(HEAD_SELECT + " WHERE did = ?", (did,))
        return accepted_head_from_row(rows[0]) if rows else None

    def accepted_heads(self) -> list[AcceptedHead]:
        """Accepted heads of every DID, ordered by DID."""
        return [accepted_head_from_row(r) for r in self._rows(HEAD_SELECT + " ORDER BY did")]

    # -- verifications ----------------------------------------------------------------------

    def record_verification(
        self,
        did: str,
        head: str,
        outcome: VerificationOutcome,
        detail: str,
        engine_seconds: float,
    ) -> Verification:
        """Record the outcome of verifying (did, head); a later record replaces an earlier one."""
        check_did(did)
        check_head(head)
        if outcome not in VERIFICATION_OUTCOMES:
            raise InvalidStateValue(
                f"outcome must be one of {sorted(VERIFICATION_OUTCOMES)}, got {outcome!r}"
            )
        if engine_seconds < 0:
            raise InvalidStateValue(f"engine_seconds must be >= 0, got {engine_seconds}")
        now = self._clock()
        with self._tx() as c:
            c.execute(
                """INSERT INTO verifications
                     (did, head, outcome, detail, engine_seconds, recorded_ns)
                   VALUES (?, ?, ?, ?, ?, ?)
                   ON CONFLICT (did, head) DO UPDATE SET
                     outcome = excluded.outcome, detail = excluded.detail,
                     engine_seconds = excluded.engine_seconds,
                     recorded_ns = excluded.recorded_ns""",
                (did, head, outcome, detail, float(engine_seconds), now),
            )
        return Verification(did, head, outcome, detail, float(engine_seconds), now)

    def verification(self, did: str, head: str) -> Verification | None:
        """The recorded outcome for (did, head), if any."""
        rows = self._rows(
            "SELECT did, head, outcome, detail, engine_seconds, recorded_ns FROM verifications"
            " WHERE did = ? AND head = ?",
            (did, head),
        )
        if not rows:
            return None
        r = rows[0]
        return Verification(
            r[0], r[1], cast(VerificationOutcome, r[2]), r[3], float(r[4]), int(r[5])
        )

    def verifications_of_heads(self) -> list[Verification]:
        """The recorded outcome of every dataset's accepted head, in one read (the console)."""
        rows = self._rows(
            "SELECT v.did, v.head, v.outcome, v.detail, v.engine_seconds, v.recorded_ns"
            " FROM verifications v JOIN accepted_heads a ON a.did = v.did AND a.head = v.head"
        )
        return [
            Verification(r[0], r[1], cast(VerificationOutcome, r[2]), r[3], float(r[4]), int(r[5]))
            for r in rows
        ]
