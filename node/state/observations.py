"""Follow evidence of ``NodeState`` (docs/follow.md): head observations, split views and
equivocation proofs."""

from __future__ import annotations

from collections.abc import Sequence

from node.app.rows import (
    EquivocationRecord,
    EvidenceCaps,
    ObservationRecord,
    SplitView,
)
from node.state.base import (
    OBS_COLUMNS,
    OBS_SELECT,
    check_did,
    checked_limit,
    content_id,
    equal_filters,
    observation_from_row,
)
from node.state.evidence import EvidenceStore


class Observations(EvidenceStore):
    """Head observations, split views and equivocation proofs."""

    # -- observations and split views (docs/follow.md) ---------------------------------------

    def add_observation(
        self,
        did: str,
        source: str,
        head: str,
        sequence: int,
        signer: str,
        envelope: bytes,
        own: bool,
        observed_ns: int,
        *,
        trusted: Sequence[str] = (),
        caps: EvidenceCaps | None = None,
    ) -> bool:
        """Store a signed observation; False if the same envelope is already stored, or the
        caps evicted it at once. Strangers' observations are bounded like their evidence
        (:meth:`add_attestation`: ``trusted`` keys' are kept, ``caps`` bound the others'; the
        node's own, and those a split view names, are never evicted)."""
        return self._add_evidence(
            "observations",
            did,
            head,
            signer,
            envelope,
            own,
            trusted,
            caps,
            source=source,
            sequence=int(sequence),
            observed_ns=int(observed_ns),
        )

    def observations(
        self, did: str | None = None, source: str | None = None, limit: int = 100
    ) -> list[ObservationRecord]:
        """Observations, newest first, optionally of one DID and source, at most ``limit``."""
        where, params = equal_filters(("did", did), ("source", source))
        rows = self._rows(
            f"{OBS_SELECT}{where} ORDER BY id DESC LIMIT ?", [*params, checked_limit(limit)]
        )
        return [observation_from_row(r) for r in rows]

    def add_split_view(self, did: str, source: str, first: str, second: str, detail: str) -> bool:
        """Record a split view between two stored observations (content ids, in either order).

        One record per (dataset, source, fork), the fork being the two heads: a fork recorded
        before (by any pair of observations of those heads) has its ``seen`` counter and
        ``last_seen_ns`` bumped instead, so a source that stays diverged is one record, not one
        per poll. True if the record is new.
        """
        check_did(did)
        a, b = sorted((first, second))
        now = self._clock()
        with self._tx() as c:
            heads = sorted(
                str(r[0])
                for r in c.execute(
                    "SELECT head FROM observations WHERE content_id IN (?, ?)", (a, b)
                )
            )
            fork = " ".join(heads) if len(heads) == 2 else f"{a} {b}"
            # The two observations are the split view's evidence: never evicted by the caps.
            c.execute("UPDATE observations SET kept = 1 WHERE content_id IN (?, ?)", (a, b))
            cur = c.execute(
                """UPDATE split_views SET seen = seen + 1, last_seen_ns = ?
                   WHERE did = ? AND source = ? AND fork = ?""",
                (now, did, source, fork),
            )
            if cur.rowcount > 0:
                return False
            cur = c.execute(
                """INSERT INTO split_views (did, source, first, second, detail, detected_ns,
                                            fork, seen, last_seen_ns)
                   VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?) ON CONFLICT (first, second) DO NOTHING""",
                (did, source, a, b, detail, now, fork, now),
            )
        return cur.rowcount > 0

    def split_views(self, did: str | None = None, limit: int = 100) -> list[SplitView]:
        """Split views, newest first, with both observations (optionally of one DID)."""
        where, params = equal_filters(("s.did", did))
        cols = ", ".join(f"{t}.{c}" for t in ("a", "b") for c in OBS_COLUMNS)
        rows = self._rows(
            f"SELECT s.id, s.did, s.source, s.detail, s.detected_ns, s.seen, s.last_seen_ns,"
            f" {cols} FROM split_views s"
            " JOIN observations a ON a.content_id = s.first"
            f" JOIN observations b ON b.content_id = s.second{where}"
            " ORDER BY s.id DESC LIMIT ?",
            [*params, checked_limit(limit)],
        )
        n = len(OBS_COLUMNS)
        return [
            SplitView(
                int(r[0]),
                r[1],
                r[2],
                observation_from_row(tuple(r[7 : 7 + n])),
                observation_from_row(tuple(r[7 + n : 7 + 2 * n])),
                r[3],
                int(r[4]),
                seen=int(r[5]),
                last_seen_ns=int(r[6]),
            )
            for r in rows
        ]

    def add_equivocation_proof(self, did: str, envelope: bytes) -> bool:
        """Store an equivocation proof; False if the same envelope is already stored."""
        check_did(did)
        return self._changed(
            """INSERT INTO equivocation_proofs (content_id, did, envelope, received_ns)
               VALUES (?, ?, ?, ?) ON CONFLICT (content_id) DO NOTHING""",
            (content_id(envelope), did, bytes(envelope), self._clock()),
        )

    def equivocation_proofs(self, did: str | None = None) -> list[EquivocationRecord]:
        """Equivocation proofs in the order received, optionally for one DID."""
        where, params = equal_filters(("did", did))
        rows = self._rows(
            "SELECT id, content_id, did, envelope, received_ns"
            f" FROM equivocation_proofs{where} ORDER BY id",
            params,
        )
        return [EquivocationRecord(r[0], r[1], r[2], bytes(r[3]), r[4]) for r in rows]
