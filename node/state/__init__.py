"""The node daemon's persistent state: SQLite (via sqlite-utils) with versioned migrations.

Subscriptions, accepted heads, verification outcomes, attestations, disputes, equivocation
proofs, peers, an event log and the durable work queue that lets pipelines resume after a
restart. Entry point: :class:`NodeState` (``NodeState.open(path, clock)``).
"""

from __future__ import annotations

from node.app.backoff import backoff_ns
from node.app.rows import (
    AcceptedHead,
    AttestationRecord,
    DisputeRecord,
    EquivocationRecord,
    EventRecord,
    Peer,
    Subscription,
    Verification,
    VerificationOutcome,
    WorkItem,
    WorkState,
)
from node.state.base import content_id
from node.state.errors import (
    InvalidStateValue,
    InvalidWorkTransition,
    MigrationError,
    StateError,
    StateVersionTooNew,
    WorkItemNotFound,
)
from node.state.migrations import LATEST_VERSION, MIGRATIONS, Migration, migrate, schema_version
from node.state.store import NodeState

__all__ = [
    "LATEST_VERSION",
    "MIGRATIONS",
    "AcceptedHead",
    "AttestationRecord",
    "DisputeRecord",
    "EquivocationRecord",
    "EventRecord",
    "InvalidStateValue",
    "InvalidWorkTransition",
    "Migration",
    "MigrationError",
    "NodeState",
    "Peer",
    "StateError",
    "StateVersionTooNew",
    "Subscription",
    "Verification",
    "VerificationOutcome",
    "WorkItem",
    "WorkItemNotFound",
    "WorkState",
    "backoff_ns",
    "content_id",
    "migrate",
    "schema_version",
]
