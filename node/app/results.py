"""One typed result per command: what the CLI prints and what the JSON-RPC method returns.

The offline CLI and the daemon's RPC methods call the same use cases and serialise the same
result with :meth:`to_json`, so ``odf-node dataset transform --json`` has one shape whether a
daemon runs or not. Fields a context cannot know (e.g. ``publish_work_id`` without a daemon) are
``None``, never missing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Self

from node.app.jsontypes import JsonObject


class _Json:
    """``to_json``: the dataclass's fields as a JSON-friendly dict; ``from_json``: back."""

    def to_json(self) -> dict[str, Any]:
        """JSON-friendly form (field names are the wire names)."""
        return asdict(self)  # type: ignore[call-overload, no-any-return]

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Self:
        """The inverse of :meth:`to_json`: the typed result from the JSON a command returns
        (over the RPC or in-process, the same JSON), so a rendering reads fields, not keys.

        Keys that are not fields are ignored (a newer daemon may add some); a missing field
        takes its default (a missing required one raises ``TypeError``).
        """
        names = cls.__dataclass_fields__  # type: ignore[attr-defined]
        return cls(**{k: v for k, v in value.items() if k in names})

    @classmethod
    def from_record(cls, record: object, **given: Any) -> Self:
        """The result made from a row of the state (or any object): each field ``record`` has
        an attribute of the same name for is copied, the others are ``given`` (renamed or
        computed) or take their default (a missing required one raises ``TypeError``)."""
        names = cls.__dataclass_fields__  # type: ignore[attr-defined]
        copied = {k: getattr(record, k) for k in names if k not in given and hasattr(record, k)}
        return cls(**copied, **given)


@dataclass(frozen=True)
class CreatedDataset(_Json):
    """``dataset create``: one dataset made from a snapshot document."""

    alias: str
    id: str


@dataclass(frozen=True)
class IngestSummary(_Json):
    """``dataset ingest``: what was committed (``up_to_date``: nothing)."""

    id: str
    alias: str
    up_to_date: bool
    new_head: str | None
    new_blocks: list[str]
    records: int
    watermark: str | None
    linked_objects: dict[str, int] | None = None
    publish_work_id: int | None = None


@dataclass(frozen=True)
class TransformResult(_Json):
    """``dataset transform``: the step committed (``up_to_date``: nothing to do)."""

    id: str
    alias: str
    up_to_date: bool
    new_head: str | None = None
    new_blocks: list[str] = field(default_factory=list)
    offsets: list[int] | None = None
    watermark: str | None = None
    publish_work_id: int | None = None


@dataclass(frozen=True)
class VerifyResult(_Json):
    """``dataset verify``: integrity counts, the replay report and every problem found."""

    id: str
    alias: str
    ok: bool
    seconds: float
    integrity: dict[str, Any]
    replay: dict[str, Any] | None
    problems: list[str]

    def to_json(self) -> dict[str, Any]:
        """The integrity report's fields at top level (as before), plus the rest."""
        out = dict(self.integrity)
        out.update(
            id=self.id,
            alias=self.alias,
            ok=self.ok,
            seconds=self.seconds,
            replay=self.replay,
            problems=self.problems,
        )
        return out

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Self:
        """The inverse of :meth:`to_json`: the keys that are not this result's own fields are
        the integrity report's."""
        own = ("id", "alias", "ok", "seconds", "replay", "problems")
        return cls(
            id=value["id"],
            alias=value["alias"],
            ok=value["ok"],
            seconds=value["seconds"],
            integrity={k: v for k, v in value.items() if k not in own},
            replay=value["replay"],
            problems=value["problems"],
        )


@dataclass(frozen=True)
class DatasetRow(_Json):
    """``dataset list``: one stored dataset (``error`` set when its chain cannot be read)."""

    alias: str
    id: str
    kind: str | None
    head: str | None
    blocks: int | None
    records: int | None
    owned: bool
    accepted_head: str | None
    verification: str | None
    error: str | None = None


@dataclass(frozen=True)
class LogEntry(_Json):
    """``dataset log``: one block, newest first, with its manifest ``version`` (2 or 3)."""

    hash: str
    block: dict[str, Any]
    version: int = 2


@dataclass(frozen=True)
class PublishResult(_Json):
    """``dataset publish``: a daemon queues the publication (``work_id``) and announces the head
    when the work item runs; without a daemon, or for an IPNS name, the dataset is added to IPFS
    at once (``cid``, ``url``, ``ipns``). What a context does not do is ``None``."""

    id: str
    alias: str
    head: str | None
    work_id: int | None = None
    cid: str | None = None
    url: str | None = None
    ipns: str | None = None


@dataclass(frozen=True)
class PullResult(_Json):
    """``dataset pull``: how the local head compares with the source's and what was fetched.

    For a root with a polling source, the source's run: ``comparison`` is ``equal`` (nothing
    new, nothing committed) or ``local-behind`` (new blocks committed); ``records`` the rows
    added and ``source_state`` the state now recorded (kamu's ETag / Last-Modified / last file).
    """

    alias: str
    id: str
    comparison: str
    old_head: str | None
    new_head: str | None
    created: bool
    forced: bool
    new_blocks: int
    objects_downloaded: int
    bytes_downloaded: int
    # A run of the dataset's own polling source (``source`` = "polling"); None for a pull.
    source: str | None = None
    records: int | None = None
    watermark: str | None = None
    source_state: dict[str, str] | None = None
    publish_work_id: int | None = None

    @classmethod
    def from_summary(cls, summary: JsonObject) -> PullResult:
        """From the transfer port's pull summary (its keys are these fields)."""
        return cls(**{k: summary.get(k) for k in cls.__dataclass_fields__})  # type: ignore[arg-type]


@dataclass(frozen=True)
class SubscriptionRow(_Json):
    """``subscriptions``: a followed dataset, its accepted head and verification outcome, and
    its trust (``docs/trust.md``).

    ``policy``: the subscription's own trust settings (None: the node's ``[trust]``);
    ``trusted_head``: the newest trusted head (the one served under a policy other than
    verify-all); ``trust``: the accepted head's ``{"state", "by", "attesters"}`` (with
    ``evidence`` and ``disputed_by`` when disputed); ``pull``: the sources that failed since
    the last successful pull of the dataset, newest first (``{"last_ok_ns", "attempts":
    [{"url", "reason", "error", "setting"?, "addresses"?, "at_ns"}]}``, from the
    ``pull.source_failed`` events; ``None``: no pull recorded); ``source``: the URL the dataset
    is followed from, the authority for its heads, which no owner signs (None: owner-signed
    announcements over gossip; ``docs/follow.md``).
    """

    did: str
    alias: str | None
    since_ns: int
    accepted_head: str | None = None
    sequence: int | None = None
    verification: str | None = None
    verification_detail: str | None = None
    policy: dict[str, Any] | None = None
    trusted_head: str | None = None
    trust: dict[str, Any] | None = None
    pull: dict[str, Any] | None = None
    source: str | None = None


@dataclass(frozen=True)
class Unsubscribed(_Json):
    """``unsubscribe``: whether the dataset was followed."""

    did: str
    removed: bool


@dataclass(frozen=True)
class PeerRow(_Json):
    """``peers``: a gossip peer the node knows."""

    peer_id: str
    connected: bool
    score: float
    addrs: list[str]
    last_seen_ns: int


@dataclass(frozen=True)
class ConnectResult(_Json):
    """``connect``: the gossip peer dialled."""

    peer_id: str


@dataclass(frozen=True)
class IpfsConnected(_Json):
    """``connect --ipfs``: the IPFS node connected to."""

    connected: str


@dataclass(frozen=True)
class EventRow(_Json):
    """``events``: one entry of the event log."""

    id: int
    at_ns: int
    kind: str
    did: str | None
    data: dict[str, Any]


@dataclass(frozen=True)
class WorkRow(_Json):
    """``work``: a pipeline work item and its state."""

    id: int
    kind: str
    did: str
    head: str | None
    state: str
    attempts: int
    last_error: str | None


@dataclass(frozen=True)
class ScheduleRow(_Json):
    """``dataset schedule``, ``flows``: a dataset's flow trigger (``docs/flows.md``).

    ``trigger`` is ``every Ns``, ``cron EXPR`` or ``on input``; ``next_run`` is when a time
    trigger is next due (RFC 3339). After ``--off``, ``active`` is false and ``removed`` says
    whether there was a trigger to remove. ``error`` is set while the scheduler holds back a
    trigger whose last step failed (it is tried again a minute later; the others go on).
    """

    id: str
    alias: str | None
    active: bool
    removed: bool
    trigger: str | None = None
    every_s: float | None = None
    cron: str | None = None
    on_input: bool = False
    next_run: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class FlowRunRow(_Json):
    """``flows``: one flow run (a ``poll`` or ``transform`` work item)."""

    id: int
    kind: str
    did: str
    alias: str | None
    trigger: str
    state: str
    attempts: int
    created: str
    updated: str
    last_error: str | None


@dataclass(frozen=True)
class FlowsResult(_Json):
    """``flows``: the triggers and the newest runs (newest first)."""

    schedules: list[ScheduleRow]
    runs: list[FlowRunRow]

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Self:
        """The inverse of :meth:`to_json`, the rows typed too."""
        return cls(
            schedules=[ScheduleRow.from_json(s) for s in value["schedules"]],
            runs=[FlowRunRow.from_json(r) for r in value["runs"]],
        )


@dataclass(frozen=True)
class AttestationRow(_Json):
    """``attestations``: a signed verdict on a head, ours (``own``) or received.

    ``node`` is who attested, as its current node id (``signer`` is the key that signed).

    ``engine`` and ``engine_version``: what reproduced the head, as the attestation signs it
    (``None`` when the stored envelope does not carry them).
    """

    did: str
    head: str
    verdict: str
    signer: str
    own: bool
    at_ns: int
    engine: str | None = None
    engine_version: str | None = None
    node: str | None = None
    """The attesting node's current id: ``signer`` followed through the node key rotations
    this node knows (docs/operations.md, "Node key rotation"); ``signer`` if it never rotated."""


@dataclass(frozen=True)
class VerifiedEnvelope(_Json):
    """``attestation verify``: one checked in-toto/DSSE envelope (``docs/attestations.md``).

    ``ok`` false: ``problem`` says which check failed and the other fields are ``None``.
    ``signer``: the envelope's key; ``node``: who made the attestation or dispute; ``relayed``:
    they differ. ``predicate``: exactly the checked fields of the statement's predicate (those
    the node's wire envelope signs; for an attestation also ``inputs`` and ``logicalHash``, the
    signer's reading of the block), without the embedded wire envelope; an envelope whose
    statement has any other field does not verify.
    """

    ok: bool
    problem: str | None
    signer: str | None
    node: str | None
    relayed: bool | None
    kind: str | None
    predicate_type: str | None
    dataset: str | None
    block: str | None
    digest: str | None
    predicate: dict[str, Any] | None

    @classmethod
    def failed(cls, problem: str) -> VerifiedEnvelope:
        """The row of an envelope that does not verify."""
        return cls(False, problem, None, None, None, None, None, None, None, None, None)


@dataclass(frozen=True)
class DisputeRow(_Json):
    """``disputes``: a signed dispute of a block, ours (``own``) or received; or a split view
    (``kind`` ``split-view``): a source followed by URL showed two heads that do not descend
    one from the other, with the two signed observations (``source``, ``observations``: each
    ``{"head", "sequence", "signer", "own", "at_ns", "envelope"}``, envelope in hex); one row
    per source and fork, ``seen`` times, the last at ``last_seen_ns`` (``at_ns``: the first)."""

    did: str
    block: str
    kind: str
    signer: str
    own: bool
    detail: str
    at_ns: int
    source: str | None = None
    observations: list[dict[str, Any]] | None = None
    seen: int | None = None
    last_seen_ns: int | None = None


@dataclass(frozen=True)
class EquivocationRow(_Json):
    """``equivocations``: a proof that a dataset's key signed two heads for one position."""

    did: str
    content_id: str
    at_ns: int


@dataclass(frozen=True)
class NodeStatus(_Json):
    """``status``: identity, what the node stores and, with a daemon, what it runs.

    Without a daemon the live fields say so: ``uptime_s``, ``rpc_url``, ``http_url`` and
    ``ipfs`` are ``None``, ``p2p`` has no peer id, the engine is not running. ``warnings``:
    what the daemon found wrong with its own reachability at start (``{"kind", "message",
    "setting"}``; e.g. an IPFS or HTTP address peers cannot reach in open mode).
    """

    node_id: str
    home: str
    block_version: int
    uptime_s: float | None
    rpc_url: str | None
    http_url: str | None
    p2p: JsonObject
    ipfs: JsonObject | None
    engine: JsonObject
    datasets: int
    subscriptions: int
    work: dict[str, int]
    running_work: int
    warnings: list[JsonObject] = field(default_factory=list)
    flight_sql_url: str | None = None
    """The Arrow Flight SQL server's ``grpc://host:port`` (``[query] flight_sql_*``; None: off
    or no daemon); ``kamu.connect`` and the ADBC Flight SQL driver take it (docs/query.md)."""


@dataclass(frozen=True)
class BackupResult(_Json):
    """``backup``: the archive written (docs/backup.md) and what it holds."""

    file: str
    format_version: int
    node_id: str
    state_schema_version: int
    subscriptions: int
    attestations: int
    disputes: int
    datasets: list[dict[str, str | None]]
    """``{"id", "alias", "head"}`` of each dataset stored (empty without ``--datasets``)."""
    owned_dataset_keys: int
    files: int
    bytes: int
    seconds: float


@dataclass(frozen=True)
class RestoreResult(_Json):
    """``restore``: the home a backup was restored into (docs/backup.md)."""

    home: str
    node_id: str
    format_version: int
    state_schema_version: int
    subscriptions: int
    datasets: int
    files: int


@dataclass(frozen=True)
class ConsoleLogin(_Json):
    """``ui``: a one-time URL that logs a browser into the node console."""

    url: str
    expires_in_s: float


__all__ = [
    "AttestationRow",
    "BackupResult",
    "ConnectResult",
    "ConsoleLogin",
    "CreatedDataset",
    "DatasetRow",
    "DisputeRow",
    "EquivocationRow",
    "EventRow",
    "FlowRunRow",
    "FlowsResult",
    "IngestSummary",
    "IpfsConnected",
    "LogEntry",
    "NodeStatus",
    "PeerRow",
    "PublishResult",
    "PullResult",
    "ScheduleRow",
    "SubscriptionRow",
    "TransformResult",
    "Unsubscribed",
    "VerifiedEnvelope",
    "VerifyResult",
    "WorkRow",
]
