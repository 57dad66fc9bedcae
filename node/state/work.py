"""The work queue and flow schedules of ``NodeState``: enqueue, claim, complete/fail, release
of a dead process's claims, counts and pruning; and the per-dataset flow triggers."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, cast

from node.app.rows import WORK_STATES, Schedule, WorkItem, WorkState
from node.state.base import (
    SCHED_SELECT,
    WORK_SELECT,
    StateCore,
    check_did,
    check_head,
    equal_filters,
    schedule_from_row,
    to_json,
    work_from_row,
)
from node.state.errors import InvalidStateValue, InvalidWorkTransition, WorkItemNotFound


class WorkQueue(StateCore):
    """Work items (one row per unit of work, with its state machine) and flow schedules."""

    # -- work queue -------------------------------------------------------------------------

    def enqueue(
        self,
        kind: str,
        did: str,
        head: str | None,
        payload: Mapping[str, object],
        *,
        dedupe: bool = True,
        not_before_ns: int | None = None,
    ) -> WorkItem:
        """Add a pending work item, runnable from ``not_before_ns`` (default: now).

        With ``dedupe`` (the default), if a live (pending or claimed) item with the same
        (kind, did, head) exists, it is returned unchanged and nothing is added.
        """
        if not kind:
            raise InvalidStateValue("work kind must not be empty")
        check_did(did)
        if head is not None:
            check_head(head)
        body = to_json(payload, "work payload")
        key = json.dumps([kind, did, head]) if dedupe else None
        now = self._clock()
        runnable = now if not_before_ns is None else not_before_ns
        with self._tx() as c:
            if key is not None:
                existing = c.execute(
                    WORK_SELECT + " WHERE dedupe_key = ? AND state IN ('pending', 'claimed')",
                    (key,),
                ).fetchone()
                if existing is not None:
                    return work_from_row(existing)
            cur = c.execute(
                """INSERT INTO work (kind, did, head, payload, dedupe_key, state, attempts,
                                     not_before_ns, created_ns, updated_ns)
                   VALUES (?, ?, ?, ?, ?, 'pending', 0, ?, ?, ?)""",
                (kind, did, head, body, key, runnable, now, now),
            )
            item_id = int(cast(int, cur.lastrowid))
        return WorkItem(
            id=item_id,
            kind=kind,
            did=did,
            head=head,
            payload=json.loads(body),
            state="pending",
            attempts=0,
            not_before_ns=runnable,
            created_ns=now,
            updated_ns=now,
        )

    def claim(
        self,
        now_ns: int,
        kinds: Iterable[str] | None = None,
        exclude_dids: Iterable[str] = frozenset(),
    ) -> WorkItem | None:
        """Claim the oldest runnable item and return it (state ``claimed``, attempts + 1).

        Runnable: pending, ``not_before_ns <= now_ns``, of one of ``kinds`` (all if None), its
        DID not in ``exclude_dids`` and no other item of its DID currently claimed — so work
        on one dataset is serialised while different datasets proceed in parallel. ``now_ns``
        decides runnability and is stored as ``claimed_ns``. A DID's later items are not held
        back by an earlier item of it that waits for a retry.
        """
        conds = ["w.state = 'pending'", "w.not_before_ns <= ?"]
        params: list[Any] = [now_ns]
        if kinds is not None:
            kind_list = list(kinds)
            if not kind_list:
                return None
            conds.append(f"w.kind IN ({', '.join('?' * len(kind_list))})")
            params.extend(kind_list)
        excluded = list(exclude_dids)
        if excluded:
            conds.append(f"w.did NOT IN ({', '.join('?' * len(excluded))})")
            params.extend(excluded)
        conds.append(
            "NOT EXISTS (SELECT 1 FROM work o WHERE o.did = w.did AND o.state = 'claimed')"
        )
        with self._tx() as c:
            row = c.execute(
                f"SELECT w.id FROM work w WHERE {' AND '.join(conds)} ORDER BY w.id LIMIT 1",
                params,
            ).fetchone()
            if row is None:
                return None
            c.execute(
                """UPDATE work SET state = 'claimed', attempts = attempts + 1, claimed_ns = ?,
                     updated_ns = ? WHERE id = ?""",
                (now_ns, self._clock(), row[0]),
            )
            claimed = c.execute(WORK_SELECT + " WHERE id = ?", (row[0],)).fetchone()
        return work_from_row(claimed)

    def complete(self, item_id: int) -> WorkItem:
        """Mark a claimed item done."""
        return self._transition(item_id, "complete", "done", None, None)

    def fail(self, item_id: int, error: str, retry_at_ns: int | None) -> WorkItem:
        """Record a failed attempt of a claimed item: back to pending, runnable from
        ``retry_at_ns`` (see :func:`node.app.backoff.backoff_ns`), or, with None, give up
        (state ``failed``)."""
        target: WorkState = "failed" if retry_at_ns is None else "pending"
        return self._transition(item_id, "fail", target, error, retry_at_ns)

    def _transition(
        self,
        item_id: int,
        action: str,
        target: WorkState,
        error: str | None,
        retry_at_ns: int | None,
    ) -> WorkItem:
        now = self._clock()
        with self._tx() as c:
            row = c.execute("SELECT state FROM work WHERE id = ?", (item_id,)).fetchone()
            if row is None:
                raise WorkItemNotFound(item_id)
            if row[0] != "claimed":
                raise InvalidWorkTransition(item_id, row[0], action)
            c.execute(
                """UPDATE work SET state = ?, updated_ns = ?, claimed_ns = NULL,
                     last_error = coalesce(?, last_error),
                     not_before_ns = coalesce(?, not_before_ns)
                   WHERE id = ?""",
                (target, now, error, retry_at_ns, item_id),
            )
            updated = c.execute(WORK_SELECT + " WHERE id = ?", (item_id,)).fetchone()
        return work_from_row(updated)

    def release_claims(self) -> int:
        """Return every claimed item to pending (call once at start-up: whoever claimed them
        is dead). Their attempt stays counted. Returns how many were released."""
        now = self._clock()
        with self._tx() as c:
            cur = c.execute(
                """UPDATE work SET state = 'pending', claimed_ns = NULL, updated_ns = ?
                   WHERE state = 'claimed'""",
                (now,),
            )
        return cur.rowcount

    def pending_count(self, kind: str | None = None) -> int:
        """Number of pending items (runnable now or waiting for their retry time)."""
        where, params = equal_filters(("kind", kind))
        where = (where + " AND" if where else " WHERE") + " state = 'pending'"
        row = self._conn.execute(f"SELECT count(*) FROM work{where}", params).fetchone()
        return int(row[0])

    def pending_counts(self) -> dict[str, int]:
        """Pending items per kind, in one read (kinds with none are absent)."""
        rows = self._conn.execute(
            "SELECT kind, count(*) FROM work WHERE state = 'pending' GROUP BY kind"
        ).fetchall()
        return {str(k): int(n) for k, n in rows}

    def work(self, state: WorkState | None = None, did: str | None = None) -> list[WorkItem]:
        """Work items, oldest first, optionally filtered by state and/or DID."""
        if state is not None and state not in WORK_STATES:
            raise InvalidStateValue(f"state must be one of {sorted(WORK_STATES)}, got {state!r}")
        where, params = equal_filters(("state", state), ("did", did))
        return [work_from_row(r) for r in self._rows(WORK_SELECT + where + " ORDER BY id", params)]

    def work_item(self, item_id: int) -> WorkItem | None:
        """One work item by id."""
        rows = self._rows(WORK_SELECT + " WHERE id = ?", (item_id,))
        return work_from_row(rows[0]) if rows else None

    def prune_work(self, finished_before_ns: int) -> int:
        """Delete done and failed items last updated before ``finished_before_ns``."""
        with self._tx() as c:
            cur = c.execute(
                "DELETE FROM work WHERE state IN ('done', 'failed') AND updated_ns < ?",
                (finished_before_ns,),
            )
        return cur.rowcount

    # -- flow schedules ---------------------------------------------------------------------

    def set_schedule(
        self,
        did: str,
        *,
        every_s: float | None = None,
        cron: str | None = None,
        on_input: bool = False,
        next_ns: int | None = None,
        inputs_seen: dict[str, str] | None = None,
    ) -> Schedule:
        """Set ``did``'s flow trigger (replacing any): exactly one of ``every_s``, ``cron`` and
        ``on_input``."""
        check_did(did)
        if (every_s is not None) + (cron is not None) + bool(on_input) != 1:
            raise InvalidStateValue("a schedule has exactly one of every_s, cron and on_input")
        if every_s is not None and not every_s > 0:
            raise InvalidStateValue("every_s must be > 0")
        seen = to_json(inputs_seen or {}, "schedule inputs")
        now = self._clock()
        with self._tx() as c:
            c.execute(
                """INSERT INTO schedules (did, every_s, cron, on_input, next_ns, inputs_seen,
                                          created_ns, updated_ns)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (did) DO UPDATE SET
                     every_s = excluded.every_s, cron = excluded.cron,
                     on_input = excluded.on_input, next_ns = excluded.next_ns,
                     inputs_seen = excluded.inputs_seen, updated_ns = excluded.updated_ns""",
                (did, every_s, cron, int(on_input), next_ns, seen, now, now),
            )
        got = self.schedule(did)
        assert got is not None
        return got

    def schedule_ran(
        self, did: str, *, next_ns: int | None = None, inputs_seen: dict[str, str] | None = None
    ) -> bool:
        """Record that ``did``'s flow was queued: its next due time and/or the input heads it
        was queued for (None keeps the stored value). False if ``did`` has no schedule."""
        seen = None if inputs_seen is None else to_json(inputs_seen, "schedule inputs")
        return self._changed(
            """UPDATE schedules SET next_ns = coalesce(?, next_ns),
                 inputs_seen = coalesce(?, inputs_seen), updated_ns = ? WHERE did = ?""",
            (next_ns, seen, self._clock(), did),
        )

    def remove_schedule(self, did: str) -> bool:
        """Remove ``did``'s flow trigger; True if it had one (its runs' history stays)."""
        return self._changed("DELETE FROM schedules WHERE did = ?", (did,))

    def schedules(self) -> list[Schedule]:
        """Every flow trigger, oldest first."""
        return [
            schedule_from_row(r) for r in self._rows(SCHED_SELECT + " ORDER BY created_ns, did")
        ]

    def schedule(self, did: str) -> Schedule | None:
        """``did``'s flow trigger, if any."""
        rows = self._rows(SCHED_SELECT + " WHERE did = ?", (did,))
        return schedule_from_row(rows[0]) if rows else None
