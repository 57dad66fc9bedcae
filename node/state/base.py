"""What every part of ``NodeState`` shares: the connection, write transactions, SQL helpers and
row converters.

:class:`StateCore` holds the connection and clock and gives the per-concern parts
(:mod:`node.state.work`, ...) their write transaction (``_tx``) and read (``_rows``);
:class:`node.state.store.NodeState` composes them over one connection.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, cast

from coordinator.clock import Clock
from node.app.rows import (
    AcceptedHead,
    ObservationRecord,
    Peer,
    Schedule,
    Subscription,
    TrustOverride,
    TrustRecord,
    WorkItem,
    WorkState,
)
from node.state.errors import InvalidStateValue

_DID_PREFIX = "did:odf:"


def content_id(envelope: bytes) -> str:
    """Content id of an envelope: its sha3-256 multihash, multibase base16 (``f1620...``)."""
    return "f1620" + hashlib.sha3_256(envelope).hexdigest()


class StateCore:
    """The connection, clock and transaction state shared by every part of ``NodeState``."""

    _conn: sqlite3.Connection
    _clock: Clock
    _batching: bool

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: BEGIN IMMEDIATE ... COMMIT, rolled back on any exception.

        Inside :meth:`batch` it is a SAVEPOINT instead, released on success and rolled back
        (alone) on an exception.
        """
        if self._batching:
            self._conn.execute("SAVEPOINT write")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK TO write")
                self._conn.execute("RELEASE write")
                raise
            self._conn.execute("RELEASE write")
            return
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
        except BaseException:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def _changed(self, sql: str, params: Iterable[Any] = ()) -> bool:
        """Run one write statement in a transaction of its own; whether it changed a row."""
        with self._tx() as c:
            return c.execute(sql, tuple(params)).rowcount > 0

    def _rows(self, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
        cur = self._conn.execute(sql, tuple(params))
        return cast(list[sqlite3.Row], cur.fetchall())


# -- helpers ----------------------------------------------------------------------------------


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_did(did: str) -> None:
    if not isinstance(did, str) or not did.startswith(_DID_PREFIX) or len(did) == len(_DID_PREFIX):
        raise InvalidStateValue(f"expected a did:odf:... DID, got {did!r}")


def check_head(head: str) -> None:
    if not isinstance(head, str) or not head:
        raise InvalidStateValue(f"expected a multibase multihash head, got {head!r}")


def checked_limit(limit: int) -> int:
    if limit < 0:
        raise InvalidStateValue(f"limit must be >= 0, got {limit}")
    return limit


def chunks(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    """``items`` in pieces of ``size`` (SQLite bounds the parameters of one statement)."""
    for i in range(0, len(items), size):
        yield items[i : i + size]


def to_json(data: Mapping[str, object], what: str) -> str:
    if not isinstance(data, Mapping):
        raise InvalidStateValue(f"{what} must be a mapping, got {type(data).__name__}")
    try:
        return json.dumps(dict(data), sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidStateValue(f"{what} is not JSON-serialisable: {exc}") from exc


def equal_filters(*pairs: tuple[str, object]) -> tuple[str, list[Any]]:
    """`` WHERE a = ? AND b = ?`` for the pairs whose value is not None (names are ours)."""
    conds = [f"{name} = ?" for name, value in pairs if value is not None]
    params = [value for _, value in pairs if value is not None]
    return (" WHERE " + " AND ".join(conds) if conds else ""), params


SUB_SELECT = (
    "SELECT did, alias, source_hint, created_ns, updated_ns, trust_policy, trust_k,"
    " trust_attesters, trusted_head, trust, source_url FROM subscriptions"
)
OBS_COLUMNS = (
    "id",
    "content_id",
    "did",
    "source",
    "head",
    "sequence",
    "signer",
    "envelope",
    "own",
    "observed_ns",
    "received_ns",
)
OBS_SELECT = f"SELECT {', '.join(OBS_COLUMNS)} FROM observations"
HEAD_SELECT = (
    "SELECT did, epoch, sequence, head, source_peer, envelope, accepted_ns FROM accepted_heads"
)
PEER_SELECT = "SELECT peer_id, addrs, score, connected, first_seen_ns, last_seen_ns FROM peers"
SCHED_SELECT = (
    "SELECT did, every_s, cron, on_input, next_ns, inputs_seen, created_ns, updated_ns"
    " FROM schedules"
)
WORK_SELECT = (
    "SELECT id, kind, did, head, payload, state, attempts, not_before_ns, created_ns,"
    " updated_ns, claimed_ns, last_error FROM work"
)


def schedule_from_row(r: sqlite3.Row) -> Schedule:
    did, every_s, cron, on_input, next_ns, seen, created, updated = r
    try:
        inputs_seen = json.loads(seen or "{}")
    except ValueError:
        # One damaged row must not make every schedule unreadable (docs/flows.md): its
        # derivative is transformed once more, as if no input had been seen.
        inputs_seen = {}
    if not isinstance(inputs_seen, dict):
        inputs_seen = {}
    return Schedule(
        did=did,
        every_s=every_s,
        cron=cron,
        on_input=bool(on_input),
        next_ns=next_ns,
        inputs_seen=inputs_seen,
        created_ns=created,
        updated_ns=updated,
    )


def subscription_from_row(r: sqlite3.Row) -> Subscription:
    attesters = None if r[7] is None else tuple(json.loads(r[7]))
    override = TrustOverride(r[5], None if r[6] is None else int(r[6]), attesters)
    trust = None
    if r[9] is not None:
        t = json.loads(r[9])
        trust = TrustRecord(
            t["head"],
            t["state"],
            t.get("by"),
            tuple(t.get("attesters") or ()),
            t.get("evidence"),
            tuple(t.get("disputed_by") or ()),
        )
    return Subscription(r[0], r[1], r[2], int(r[3]), int(r[4]), override, r[8], trust, r[10])


def observation_from_row(r: Any) -> ObservationRecord:
    return ObservationRecord(
        int(r[0]),
        r[1],
        r[2],
        r[3],
        r[4],
        int(r[5]),
        r[6],
        bytes(r[7]),
        bool(r[8]),
        int(r[9]),
        int(r[10]),
    )


def accepted_head_from_row(r: sqlite3.Row) -> AcceptedHead:
    return AcceptedHead(r[0], int(r[1]), int(r[2]), r[3], r[4], bytes(r[5]), int(r[6]))


def peer_from_row(r: sqlite3.Row) -> Peer:
    return Peer(r[0], tuple(json.loads(r[1])), float(r[2]), bool(r[3]), int(r[4]), int(r[5]))


def work_from_row(r: sqlite3.Row) -> WorkItem:
    return WorkItem(
        id=int(r[0]),
        kind=r[1],
        did=r[2],
        head=r[3],
        payload=json.loads(r[4]),
        state=cast(WorkState, r[5]),
        attempts=int(r[6]),
        not_before_ns=int(r[7]),
        created_ns=int(r[8]),
        updated_ns=int(r[9]),
        claimed_ns=None if r[10] is None else int(r[10]),
        last_error=r[11],
    )
