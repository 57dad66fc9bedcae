"""Evidence kept by ``NodeState``: attestations and disputes, and the bounds every evidence table
shares (what is kept for trusted signers, the per-DID and global caps)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from node.app.rows import (
    AttestationRecord,
    DisputeRecord,
    EvidenceCaps,
)
from node.state.base import (
    StateCore,
    check_did,
    check_head,
    checked_limit,
    chunks,
    content_id,
    equal_filters,
)


class EvidenceStore(StateCore):
    """Attestations, disputes and the evidence bounds (``_keep``, ``_bound``) that the other
    evidence parts use."""

    # -- attestations, disputes, equivocation proofs ----------------------------------------

    def add_attestation(
        self,
        did: str,
        head: str,
        verdict: str,
        signer: str,
        envelope: bytes,
        own: bool,
        *,
        trusted: Sequence[str] = (),
        caps: EvidenceCaps | None = None,
    ) -> bool:
        """Store an attestation; False if the same envelope (by content id) is already stored,
        or the caps evicted it at once. ``trusted``: the keys whose evidence of ``did`` is kept
        (never evicted nor counted); ``caps``: bound the others' (:meth:`_bound`)."""
        return self._add_evidence(
            "attestations", did, head, signer, envelope, own, trusted, caps, verdict=verdict
        )

    def attestations(
        self, did: str | None = None, head: str | None = None, limit: int = 100
    ) -> list[AttestationRecord]:
        """Attestations, newest first, optionally for one DID and/or head, at most ``limit``."""
        where, params = equal_filters(("did", did), ("head", head))
        rows = self._rows(
            "SELECT id, content_id, did, head, verdict, signer, envelope, own, received_ns"
            f" FROM attestations{where} ORDER BY id DESC LIMIT ?",
            [*params, checked_limit(limit)],
        )
        return [
            AttestationRecord(r[0], r[1], r[2], r[3], r[4], r[5], bytes(r[6]), bool(r[7]), r[8])
            for r in rows
        ]

    def _with_signers(
        self,
        rows: list[sqlite3.Row],
        select: str,
        did: str,
        head: str,
        signers: Sequence[str],
    ) -> list[sqlite3.Row]:
        """``rows`` (of ``select``, which filters on ``did`` and ``head``; extended in place)
        and every row of ``select`` signed by one of ``signers``, each once, ordered by id: a
        capped listing still shows every trusted signer's evidence."""
        ids = {r[0] for r in rows}
        for chunk in chunks(sorted(set(signers)), 500):
            marks = ", ".join("?" * len(chunk))
            extra = self._rows(select + f" AND signer IN ({marks})", (did, head, *chunk))
            rows += [r for r in extra if r[0] not in ids]
            ids |= {r[0] for r in extra}
        rows.sort(key=lambda r: int(r[0]))
        return rows

    def attestations_of_head(
        self, did: str, head: str, signers: Sequence[str] = (), limit: int = 100
    ) -> list[AttestationRecord]:
        """The attestations of ``head`` of ``did``, oldest first: the node's own, every one
        signed by one of ``signers`` (the trusted attesters' keys) and the first ``limit``
        others, so that no number of strangers' attestations can hide a trusted one."""
        select = (
            "SELECT id, content_id, did, head, verdict, signer, envelope, own, received_ns"
            " FROM attestations WHERE did = ? AND head = ?"
        )
        rows = list(
            self._rows(
                select + " AND own = 0 ORDER BY id LIMIT ?", (did, head, checked_limit(limit))
            )
        )
        rows += self._rows(select + " AND own = 1", (did, head))
        rows = self._with_signers(rows, select, did, head, signers)
        return [
            AttestationRecord(r[0], r[1], r[2], r[3], r[4], r[5], bytes(r[6]), bool(r[7]), r[8])
            for r in rows
        ]

    def add_dispute(
        self,
        did: str,
        head: str,
        kind: str,
        signer: str,
        envelope: bytes,
        own: bool,
        detail: str = "",
        *,
        trusted: Sequence[str] = (),
        caps: EvidenceCaps | None = None,
    ) -> bool:
        """Store a dispute; False if the same envelope (by content id) is already stored, or
        the caps evicted it at once. ``trusted`` and ``caps`` as for :meth:`add_attestation`."""
        return self._add_evidence(
            "disputes", did, head, signer, envelope, own, trusted, caps, kind=kind, detail=detail
        )

    def _add_evidence(
        self,
        table: str,
        did: str,
        head: str,
        signer: str,
        envelope: bytes,
        own: bool,
        trusted: Sequence[str],
        caps: EvidenceCaps | None,
        **columns: object,
    ) -> bool:
        """Store a signed piece of evidence (its other ``columns`` given by name) in ``table``
        unless its envelope is stored already; ``trusted`` keys' evidence of ``did`` is kept,
        strangers' bounded by ``caps`` (:meth:`_bound`). Whether it is stored now."""
        check_did(did)
        check_head(head)
        with self._tx() as c:
            self._keep(c, table, did, trusted)
            row = {
                "content_id": content_id(envelope),
                "did": did,
                "head": head,
                "signer": signer,
                "envelope": bytes(envelope),
                "own": int(bool(own)),
                **columns,
                "received_ns": self._clock(),
                "kept": int(signer in trusted),
            }
            cur = c.execute(
                f"INSERT INTO {table} ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})"
                " ON CONFLICT (content_id) DO NOTHING",
                tuple(row.values()),
            )
            return cur.rowcount > 0 and self._bound(c, table, cur.lastrowid, caps)

    def keep_evidence(self, did: str, trusted: Sequence[str]) -> None:
        """Mark every stored attestation, dispute and observation of ``did`` by a ``trusted``
        key kept (never evicted nor counted from now on): at start-up and when a dataset's trusted
        attesters change, so that no eviction of another dataset's flood reaches them before
        evidence of ``did`` arrives again."""
        check_did(did)
        with self._tx() as c:
            for table in ("attestations", "disputes", "observations"):
                self._keep(c, table, did, trusted)

    @staticmethod
    def _keep(c: sqlite3.Connection, table: str, did: str, trusted: Sequence[str]) -> None:
        """Mark the stored evidence of ``did`` by ``trusted`` keys kept, before any eviction: a
        key the operator trusts since it was stored must not lose it (an index lookup per key,
        nothing to update once marked)."""
        for chunk in chunks(sorted(set(trusted)), 500):
            marks = ", ".join("?" * len(chunk))
            c.execute(
                f"UPDATE {table} SET kept = 1"
                f" WHERE signer IN ({marks}) AND did = ? AND own = 0 AND kept = 0",
                (*chunk, did),
            )

    @staticmethod
    def _bound(
        c: sqlite3.Connection, table: str, row_id: int | None, caps: EvidenceCaps | None
    ) -> bool:
        """Hold strangers' rows of ``table`` within ``caps`` after the insert of ``row_id``:
        past the cap of its signer, of its dataset or in total, the oldest strangers' rows of
        that scope go (kept and own rows are neither counted nor evicted). The counts are kept
        by triggers (state migration 11), so a check is a primary-key lookup and an eviction
        the first entry of a partial index: O(1) in the number of rows stored. Whether the
        new row is still there."""
        if caps is None or row_id is None:
            return True
        row = c.execute(f"SELECT did, signer FROM {table} WHERE id = ?", (row_id,)).fetchone()
        did, signer = row[0], row[1]
        for scope, cap, where, params in (
            (signer, caps.per_signer, " AND signer = ?", (signer,)),
            (did, caps.per_dataset, " AND did = ?", (did,)),
            ("*", caps.total, "", ()),
        ):
            got = c.execute(
                "SELECT n FROM evidence_counts WHERE tbl = ? AND scope = ?", (table, scope)
            ).fetchone()
            excess = (got[0] if got else 0) - cap
            if excess > 0:
                c.execute(
                    f"DELETE FROM {table} WHERE id IN (SELECT id FROM {table}"
                    f" WHERE own = 0 AND kept = 0{where} ORDER BY id LIMIT ?)",
                    (*params, excess),
                )
        return c.execute(f"SELECT 1 FROM {table} WHERE id = ?", (row_id,)).fetchone() is not None

    def evidence_count(self, table: str, scope: str = "*") -> int:
        """Strangers' rows of ``table`` (attestations, disputes, key_rotations,
        key_revocations) counted against the caps: in total (``*``), of a dataset or a
        signer."""
        rows = self._rows(
            "SELECT n FROM evidence_counts WHERE tbl = ? AND scope = ?", (table, scope)
        )
        return int(rows[0][0]) if rows else 0

    def disputes(self, did: str | None = None, limit: int = 100) -> list[DisputeRecord]:
        """Disputes, newest first, optionally for one DID, at most ``limit``."""
        where, params = equal_filters(("did", did))
        rows = self._rows(
            "SELECT id, content_id, did, head, kind, signer, envelope, own, detail, received_ns"
            f" FROM disputes{where} ORDER BY id DESC LIMIT ?",
            [*params, checked_limit(limit)],
        )
        return [
            DisputeRecord(r[0], r[1], r[2], r[3], r[4], r[5], bytes(r[6]), bool(r[7]), r[8], r[9])
            for r in rows
        ]

    def disputed_blocks(self, did: str) -> list[str]:
        """The distinct blocks of ``did`` that others (not this node) disputed."""
        rows = self._rows(
            "SELECT DISTINCT head FROM disputes WHERE did = ? AND own = 0 ORDER BY head", (did,)
        )
        return [r[0] for r in rows]

    def disputes_of_block(
        self, did: str, head: str, signers: Sequence[str] = (), limit: int = 100
    ) -> list[DisputeRecord]:
        """Others' disputes of block ``head`` of ``did``, oldest first: every one signed by
        one of ``signers`` (the trusted attesters' keys) and the first ``limit`` others, so that
        no number of strangers' disputes can hide a trusted one."""
        select = (
            "SELECT id, content_id, did, head, kind, signer, envelope, own, detail, received_ns"
            " FROM disputes WHERE did = ? AND head = ? AND own = 0"
        )
        rows = list(self._rows(select + " ORDER BY id LIMIT ?", (did, head, checked_limit(limit))))
        rows = self._with_signers(rows, select, did, head, signers)
        return [
            DisputeRecord(r[0], r[1], r[2], r[3], r[4], r[5], bytes(r[6]), bool(r[7]), r[8], r[9])
            for r in rows
        ]

    def datasets_signed_by(self, signers: Sequence[str]) -> list[str]:
        """The datasets with an attestation or a dispute by one of ``signers`` (node ids)."""
        out: set[str] = set()
        for chunk in chunks(sorted(set(signers)), 500):
            marks = ", ".join("?" * len(chunk))
            rows = self._rows(
                f"SELECT did FROM attestations WHERE signer IN ({marks})"
                f" UNION SELECT did FROM disputes WHERE signer IN ({marks})",
                (*chunk, *chunk),
            )
            out |= {r[0] for r in rows}
        return sorted(out)
