"""The ports of the application layer: what the use cases need from the outside world.

Each port is a :class:`typing.Protocol` written in the application's terms (``DatasetId``,
``Multihash``, typed rows); adapters implement them structurally (SQLite state with its own
writer thread, the libp2p gossip service, the embedded IPFS node (Helia) or kubo over HTTP, the
Spark engine worker over gRPC, HTTP/IPFS pulls), and every port has an in-memory twin for unit
tests. Nothing here imports a network, database or engine library: the import-linter contract
"The application layer is pure" checks it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from coordinator.clock import Clock
from coordinator.identity import DatasetId, PrivateKey
from coordinator.multiformats import Multihash
from coordinator.storage.dataset import Dataset
from coordinator.transform.model import (
    RawQueryRequest,
    RawQueryResponse,
    TransformRequest,
    TransformResponse,
)
from node.app.jsontypes import JsonFields, JsonObject
from node.app.results import BackupResult, RestoreResult
from node.app.rows import (
    AcceptedHead,
    AttestationRecord,
    DisputeRecord,
    EquivocationRecord,
    EventRecord,
    EvidenceCaps,
    KeyInceptionRecord,
    KeyRevocationRecord,
    KeyRotationRecord,
    ObservationRecord,
    Peer,
    Schedule,
    SplitView,
    Subscription,
    TrustOverride,
    TrustRecord,
    Verification,
    VerificationOutcome,
    WorkItem,
    WorkState,
)
from p2p.core import PublishAttestation, PublishDispute

if TYPE_CHECKING:
    import pyarrow as pa  # not imported at the daemon's start


class StatePort(Protocol):
    """The node's durable state (subscriptions, accepted heads, work items, evidence, events).

    Every call is a coroutine: the adapter runs SQLite on its own threads, so the event loop
    never waits for a commit. Writes are durable when the call returns.
    """

    async def subscribe(
        self,
        did: str,
        alias: str | None = None,
        source_hint: str | None = None,
        override: TrustOverride | None = None,
        source_url: str | None = None,
    ) -> Subscription:
        """Follow ``did`` (idempotent; updates the alias, the source URL and the trust override
        when given)."""
        ...

    async def record_trust(self, did: str, trust: TrustRecord, trusted_head: str | None) -> bool:
        """Store the trust state of ``did``'s newest judged head (and its newest trusted head
        when not None); False when ``did`` is not followed."""
        ...

    async def unsubscribe(self, did: str) -> bool:
        """Stop following ``did``; whether it was followed."""
        ...

    async def subscriptions(self) -> list[Subscription]:
        """Every followed dataset."""
        ...

    async def subscription(self, did: str) -> Subscription | None:
        """One followed dataset."""
        ...

    async def record_accepted_head(
        self,
        did: str,
        epoch: int,
        sequence: int,
        head: str,
        source_peer: str | None,
        envelope: bytes,
    ) -> bool:
        """Store a newer accepted head; false if not newer than the stored one."""
        ...

    async def accepted_head(self, did: str) -> AcceptedHead | None:
        """The accepted head of ``did``."""
        ...

    async def accepted_heads(self) -> list[AcceptedHead]:
        """Every accepted head (reinstalled into the protocol core at start-up)."""
        ...

    async def record_verification(
        self,
        did: str,
        head: str,
        outcome: VerificationOutcome,
        detail: str,
        engine_seconds: float,
    ) -> Verification:
        """Store the outcome of verifying ``head``."""
        ...

    async def verification(self, did: str, head: str) -> Verification | None:
        """The recorded outcome for ``head``."""
        ...

    async def verifications_of_heads(self) -> list[Verification]:
        """The recorded outcome of every dataset's accepted head, in one read."""
        ...

    async def add_attestation(
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
        """Store an attestation (false if already known, or evicted at once by ``caps``);
        the ``trusted`` keys' evidence of ``did`` is kept, never evicted."""
        ...

    async def attestations(
        self, did: str | None = None, head: str | None = None, limit: int = 100
    ) -> list[AttestationRecord]:
        """Attestations, newest first."""
        ...

    async def attestations_of_head(
        self, did: str, head: str, signers: Sequence[str] = (), limit: int = 100
    ) -> list[AttestationRecord]:
        """The attestations of ``head``, oldest first: the node's own, all by ``signers``,
        ``limit`` others."""
        ...

    async def add_key_rotation(
        self,
        old_id: str,
        new_id: str,
        issued_at_ns: int,
        envelope: bytes,
        *,
        replace: bool = False,
        kept: bool = False,
        cap: int | None = None,
    ) -> bool:
        """Store a node key rotation record (false if the old key already has one, unless
        ``replace``: the record voids the stored one); ``kept``: never evicted, else at most
        ``cap`` such records are kept."""
        ...

    async def key_rotations(self) -> list[KeyRotationRecord]:
        """Every stored node key rotation record."""
        ...

    async def add_key_revocation(
        self,
        node_id: str,
        revoked_ns: int,
        envelope: bytes,
        *,
        kept: bool = False,
        cap: int | None = None,
    ) -> bool:
        """Store a node key revocation (false if an earlier one is stored); ``kept`` and
        ``cap`` as for :meth:`add_key_rotation`."""
        ...

    async def key_revocations(self) -> list[KeyRevocationRecord]:
        """Every stored node key revocation."""
        ...

    async def add_key_inception(
        self,
        node_id: str,
        issued_at_ns: int,
        envelope: bytes,
        *,
        kept: bool = False,
        cap: int | None = None,
    ) -> bool:
        """Store a node key inception (false if the key already has one); ``kept`` and
        ``cap`` as for :meth:`add_key_rotation`."""
        ...

    async def key_inceptions(self) -> list[KeyInceptionRecord]:
        """Every stored node key inception."""
        ...

    async def add_dispute(
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
        """Store a dispute (false if already known, or evicted at once by ``caps``); the
        ``trusted`` keys' evidence of ``did`` is kept, never evicted."""
        ...

    async def keep_evidence(self, did: str, trusted: Sequence[str]) -> None:
        """Mark the stored evidence of ``did`` by ``trusted`` keys kept (never evicted)."""
        ...

    async def evidence_count(self, table: str, scope: str = "*") -> int:
        """Strangers' rows of ``table`` counted against the evidence caps (in total, of a
        dataset or of a signer)."""
        ...

    async def disputes(self, did: str | None = None, limit: int = 100) -> list[DisputeRecord]:
        """Disputes, newest first."""
        ...

    async def disputed_blocks(self, did: str) -> list[str]:
        """The distinct blocks of ``did`` that others disputed."""
        ...

    async def disputes_of_block(
        self, did: str, head: str, signers: Sequence[str] = (), limit: int = 100
    ) -> list[DisputeRecord]:
        """Others' disputes of block ``head``, oldest first: all by ``signers``, ``limit``
        others."""
        ...

    async def datasets_signed_by(self, signers: Sequence[str]) -> list[str]:
        """The datasets with an attestation or a dispute by one of ``signers``."""
        ...

    async def add_observation(
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
        """Store a signed observation of a source (false if already known, or the caps evicted
        it at once); ``trusted`` and ``caps`` as for :meth:`add_attestation`."""
        ...

    async def observations(
        self, did: str | None = None, source: str | None = None, limit: int = 100
    ) -> list[ObservationRecord]:
        """Observations, newest first."""
        ...

    async def add_split_view(
        self, did: str, source: str, first: str, second: str, detail: str
    ) -> bool:
        """Store a split view between two stored observations (false if already known)."""
        ...

    async def split_views(self, did: str | None = None, limit: int = 100) -> list[SplitView]:
        """Split views with both observations, newest first."""
        ...

    async def add_equivocation_proof(self, did: str, envelope: bytes) -> bool:
        """Store an equivocation proof (false if already known)."""
        ...

    async def equivocation_proofs(self, did: str | None = None) -> list[EquivocationRecord]:
        """Known equivocation proofs."""
        ...

    async def upsert_peer(
        self,
        peer_id: str,
        addrs: list[str] | None = None,
        score: float | None = None,
        connected: bool = False,
    ) -> Peer:
        """Record a peer's addresses, score and connection state."""
        ...

    async def peers(self) -> list[Peer]:
        """Known peers."""
        ...

    async def log_event(self, kind: str, did: str | None, data: JsonFields) -> int:
        """Append to the event log; the event id."""
        ...

    async def events(
        self, after_id: int = 0, limit: int = 100, kind: str | None = None
    ) -> list[EventRecord]:
        """Events after ``after_id``, oldest first."""
        ...

    async def recent_events(
        self, limit: int = 100, kind_prefix: str | None = None
    ) -> list[EventRecord]:
        """The newest events (kinds starting with ``kind_prefix``), newest first."""
        ...

    async def prune_events(self, keep_last: int) -> int:
        """Keep only the newest ``keep_last`` events."""
        ...

    async def enqueue(
        self,
        kind: str,
        did: str,
        head: str | None,
        payload: JsonFields,
        *,
        dedupe: bool = True,
        not_before_ns: int | None = None,
    ) -> WorkItem:
        """Queue a work item (an identical pending one is reused when ``dedupe``)."""
        ...

    async def claim(
        self,
        now_ns: int,
        kinds: Iterable[str] | None = None,
        exclude_dids: Iterable[str] = frozenset(),
    ) -> WorkItem | None:
        """Claim the oldest runnable pending item."""
        ...

    async def complete(self, item_id: int) -> WorkItem:
        """Mark a claimed item done."""
        ...

    async def fail(self, item_id: int, error: str, retry_at_ns: int | None) -> WorkItem:
        """Mark a claimed item failed (pending again at ``retry_at_ns``, or for good)."""
        ...

    async def release_claims(self) -> int:
        """Return items claimed by a dead process to pending."""
        ...

    async def pending_count(self, kind: str | None = None) -> int:
        """Pending items (of ``kind``)."""
        ...

    async def pending_counts(self) -> dict[str, int]:
        """Pending items per kind, in one read."""
        ...

    async def subscription_count(self) -> int:
        """Number of subscriptions."""
        ...

    async def status_counts(self) -> tuple[int, dict[str, int]]:
        """Subscriptions and pending items per kind, in one read."""
        ...

    async def work(self, state: WorkState | None = None, did: str | None = None) -> list[WorkItem]:
        """Work items, filtered."""
        ...

    async def prune_work(self, finished_before_ns: int) -> int:
        """Delete items finished before ``finished_before_ns``."""
        ...

    async def set_schedule(
        self,
        did: str,
        *,
        every_s: float | None = None,
        cron: str | None = None,
        on_input: bool = False,
        next_ns: int | None = None,
        inputs_seen: dict[str, str] | None = None,
    ) -> Schedule:
        """Set a dataset's flow trigger (replacing any)."""
        ...

    async def schedule_ran(
        self, did: str, *, next_ns: int | None = None, inputs_seen: dict[str, str] | None = None
    ) -> bool:
        """Record a queued flow run: the next due time and/or the input heads."""
        ...

    async def remove_schedule(self, did: str) -> bool:
        """Remove a dataset's flow trigger."""
        ...

    async def schedules(self) -> list[Schedule]:
        """Every flow trigger."""
        ...

    async def schedule(self, did: str) -> Schedule | None:
        """One dataset's flow trigger."""
        ...


class GossipPort(Protocol):
    """The node's gossip: topics, the protocol core's decisions, peers."""

    @property
    def enabled(self) -> bool:
        """False on a node with gossip turned off (every call is then a no-op)."""
        ...

    def peer_id(self) -> str | None:
        """The libp2p peer id, if gossip runs."""
        ...

    def listen_addrs(self) -> list[str]:
        """Full listen multiaddrs."""
        ...

    def peer_count(self) -> int:
        """Connected peers."""
        ...

    def peer_score(self, peer: str) -> float:
        """The protocol core's score of ``peer``."""
        ...

    async def connect(self, multiaddr: str) -> str:
        """Dial a peer; its peer id."""
        ...

    async def follow(self, did: DatasetId) -> None:
        """Join ``did``'s topic and ask connected peers for its head."""
        ...

    def unfollow(self, did: DatasetId) -> None:
        """Stop following ``did``."""
        ...

    async def publish(self, did: DatasetId, envelope: bytes) -> None:
        """Publish a signed envelope on ``did``'s topic (best effort: no peers is fine)."""
        ...

    def accept_own(self, envelope: bytes) -> None:
        """Install an announcement this node signed as the accepted head in the core."""
        ...

    def verification_completed(
        self, did: DatasetId, head: Multihash, ok: bool
    ) -> VerificationVerdict:
        """Report a finished verification to the core; its verdict (see
        :data:`VerificationVerdict`), which the caller carries out."""
        ...

    def fetches_running(self) -> int:
        """Pulls in flight on behalf of the core."""
        ...

    def follow_source(self, did: DatasetId, source: str, head: Multihash | None) -> None:
        """Tell the core ``did`` is followed from ``source`` (``head``: the newest accepted
        from it), so peers' observations of it ask for a poll."""
        ...

    def source_head_accepted(self, did: DatasetId, source: str, head: Multihash) -> None:
        """Tell the core a head pulled from ``source`` was accepted (it is then attested or
        disputed like an announced head when its verification completes)."""
        ...


VerificationVerdict = PublishAttestation | PublishDispute | None
"""What the protocol core decided about a finished verification: attest it, dispute it, or
nothing (``None``: the head is no longer the accepted one, a newer head superseded it)."""


class IpfsPort(Protocol):
    """The node's IPFS node (the embedded Helia node, or any kubo-compatible RPC endpoint)."""

    @property
    def api_url(self) -> str | None:
        """The RPC endpoint, or None when IPFS is off."""
        ...

    def info(self) -> JsonObject | None:
        """Peer id, addresses, API and mode (for status)."""
        ...

    async def publish_dataset(self, dataset: Dataset) -> str:
        """Add a dataset as kamu does (no ``info/``), pin it; the root CID."""
        ...

    async def publish_ipns(self, cid: str, key: str) -> str:
        """Point the IPNS name of ``key`` (a key name, ``self``: the node's) at ``cid``."""
        ...

    async def connect(self, multiaddr: str) -> None:
        """Swarm-connect to another IPFS node."""
        ...


@dataclass(frozen=True, slots=True)
class SourceResponse:
    """A polling source's answer: ``modified`` False for ``304 Not Modified``."""

    modified: bool
    etag: str | None = None
    last_modified: str | None = None


@dataclass(frozen=True, slots=True)
class EthereumLogsRequest:
    """One poll of an ``EthereumLogs`` source: the node URL (``nodeUrl``), the step's chain id,
    filter and signature, and the previous source state (``<block>@<hash>``)."""

    node_url: str
    chain_id: int | None
    filter: str | None
    signature: str | None
    previous_state: str | None
    max_bytes: int = 1 << 30
    """``[ingest] max_fetch_bytes``: the log replies one poll reads (the rest: next poll)."""


@dataclass(frozen=True, slots=True)
class MqttRequest:
    """One ``Mqtt`` fetch: the broker, the topics with their QoS, the session's client id and
    the bounds (``[ingest]``)."""

    host: str
    port: int
    topics: tuple[tuple[str, int], ...]
    client_id: str
    username: str | None
    password: str | None
    max_bytes: int
    max_records: int
    idle_timeout_s: float
    max_message_bytes: int = 16 << 20
    max_poll_s: float = 60.0


@dataclass(frozen=True, slots=True)
class ContainerRequest:
    """One run of a ``Container`` fetch step: the image and what it runs with (values resolved),
    the previous source state, and the runtime and bounds (``[ingest] container_*``)."""

    image: str
    command: tuple[str, ...] | None
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    prev_etag: str
    prev_last_modified: str
    runtime: str
    storage: str
    network: bool
    timeout_s: float
    memory_bytes: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class ContainerResponse:
    """What the container gave: its output's size and the state files it wrote."""

    size: int
    etag: str | None
    last_modified: str | None
    has_more: bool


class TransferPort(Protocol):
    """Pulls over the ODF transfer protocols (IPFS, HTTP, local paths)."""

    async def pull(self, url: str, *, alias: str | None, force: bool = False) -> JsonObject:
        """Pull ``url`` into the repository; the pull summary (JSON-friendly)."""
        ...

    async def fetch_source(
        self, url: str, headers: dict[str, str], target: Path, max_bytes: int
    ) -> SourceResponse:
        """Fetch a polling source's ``http(s)`` or ``ftp(s)`` URL into ``target`` under the
        source policy, unless it is unchanged since the previous state (``If-None-Match`` /
        ``If-Modified-Since`` in ``headers``; an ftp source compares its modification time).

        Raises ``SourceNotFound`` (404, ftp 550), ``SourceUnreachable``, ``FetchError`` (too
        large) of :mod:`coordinator.errors`, or :class:`~node.app.fetch.PullRefused` (policy).
        """
        ...

    async def fetch_container(
        self, request: ContainerRequest, target: Path, workdir: Path
    ) -> ContainerResponse:
        """Run a ``Container`` fetch step once; its standard output becomes ``target`` (see
        :mod:`node.transfer.container_fetch`).

        Raises ``SourceNotRunnable`` (no runtime) or ``FetchError`` (image missing, non-zero
        exit, deadline, too much output) of :mod:`coordinator.errors`.
        """
        ...

    async def fetch_mqtt(self, request: MqttRequest, target: Path) -> int:
        """Write the MQTT messages received since the last poll into ``target``, one per line;
        the number written (see :mod:`node.transfer.mqtt_fetch`).

        Raises ``SourceUnreachable``, ``FetchError`` of :mod:`coordinator.errors`, or
        :class:`~node.app.fetch.PullRefused` (the policy refuses the broker's address).
        """
        ...

    async def fetch_ethereum_logs(self, request: EthereumLogsRequest, target: Path) -> str | None:
        """Write the logs after the previous state into ``target`` (parquet, if any); the new
        source state, ``None`` when up to date (see :mod:`node.transfer.evm_fetch`).

        Raises ``SourceUnreachable``, ``FetchError`` of :mod:`coordinator.errors`, or
        :class:`~node.app.fetch.PullRefused` (the policy refuses the node's address).
        """
        ...


@dataclass(frozen=True)
class HeadProbe:
    """What one poll of a source's ``refs/head`` found (:meth:`SourcePort.probe_head`).

    ``changed`` is False when the source answered "not modified" to the conditional request
    (HTTP 304), so ``head`` is None; else ``head`` is the multibase text it names. ``etag`` and
    ``last_modified`` are the validators to send next time; ``requests`` and ``bytes`` what the
    probe cost on the wire (body bytes).
    """

    changed: bool
    head: str | None
    etag: str | None = None
    last_modified: str | None = None
    requests: int = 1
    bytes: int = 0


class SourcePort(Protocol):
    """Cheap reads of a source followed by URL (``docs/follow.md``): its head, one block."""

    async def probe_head(self, url: str, etag: str | None, last_modified: str | None) -> HeadProbe:
        """Read ``{url}/refs/head``, conditionally (``If-None-Match`` / ``If-Modified-Since``)
        when validators are known. Raises :class:`~coordinator.errors.OdfNodeError` when the
        source cannot be read (unreachable, an error status, refused by the source policy)."""
        ...

    async def read_block(self, url: str, block: Multihash) -> bytes:
        """``{url}/blocks/<block>``, checked against its hash (raises when it does not match
        or cannot be read)."""
        ...


class EnginePort(Protocol):
    """The transform engines (the router over the Spark and DataFusion workers): what the use
    cases ask of them beyond running. Optionally ``pinned_versions(engine)``: the releases of
    an engine that can run here (the replay tries them; none installed: unverifiable)."""

    @property
    def running(self) -> bool:
        """Whether the worker process is up."""
        ...

    @property
    def starts(self) -> int:
        """How many times the worker was started."""
        ...

    def execute_transform(self, request: TransformRequest) -> TransformResponse:
        """Run one ODF transform request (blocking: call it from a worker thread)."""
        ...

    def execute_raw_query(self, request: RawQueryRequest) -> RawQueryResponse:
        """Run a source's preprocess query (the view ``input``) on the engine it names."""
        ...

    def close(self) -> None:
        """Stop the worker (blocking)."""
        ...


class BackupPort(Protocol):
    """Backups of the node's home (docs/backup.md): keys, config, the state database (SQLite's
    online backup: taken while a daemon writes) and optionally the datasets."""

    async def create(self, file: str, *, datasets: bool) -> BackupResult:
        """Write a backup archive to ``file`` (never over an existing file)."""
        ...

    async def restore(self, archive: str) -> RestoreResult:
        """Make this (new, empty) home from a backup archive."""
        ...


class EventSink(Protocol):
    """Live events for the RPC WebSocket stream and the console."""

    def publish(self, topic: str, payload: JsonFields) -> None:
        """Publish from the event loop."""
        ...

    def publish_threadsafe(self, topic: str, payload: JsonFields) -> None:
        """Publish from a worker thread."""
        ...


# ---- reading verified data (docs/query.md)

QueryDialect = Literal["datafusion", "spark"]
"""The engine a query runs on: DataFusion (the default) or the node's Spark worker."""


@dataclass(frozen=True)
class QueryTable:
    """One dataset as a table of a query: the name SQL uses (its alias, or its DID) and the
    data files of the head being read, oldest first (absolute paths of parquet parts)."""

    name: str
    did: str
    head: str | None
    files: tuple[str, ...]


@dataclass(frozen=True)
class QueryLimits:
    """What one query may use (``[query]``): the worker is killed at ``deadline_s``; the
    answer holds at most ``max_rows`` rows and ``max_bytes`` bytes."""

    deadline_s: float
    memory_bytes: int
    max_rows: int
    max_bytes: int


class AnswerStream(Protocol):
    """An answer sent on while its query runs (:meth:`QueryEnginePort.query_stream`)."""

    @property
    def schema(self) -> pa.Schema:
        """The answer's schema (known before its first batch)."""
        ...

    async def next_batch(self) -> pa.RecordBatch | None:
        """The next batch, ``None`` after the last one.

        Raises a :class:`~node.app.errors.QueryError` subclass when the query fails on the
        way (over ``max_rows``, its deadline): the batches already given were part of it.
        """
        ...

    async def close(self) -> None:
        """Stop the query if it still runs and release what it holds (idempotent)."""
        ...


class QueryEnginePort(Protocol):
    """Runs one read-only SQL statement over the given tables, in the transform sandbox and in a
    process of its own (a sandbox refusal, an overrun or a failure is a
    :class:`~node.app.errors.QueryError` subclass naming the setting)."""

    async def query(
        self,
        sql: str,
        tables: Sequence[QueryTable],
        limits: QueryLimits,
        dialect: QueryDialect = "datafusion",
        *,
        skip: int = 0,
        limit: int | None = None,
    ) -> pa.Table:
        """The answer's rows ``skip`` .. ``skip + limit`` (at most ``limits.max_rows``; more is
        :class:`~node.app.errors.QueryTooLarge`) as an Arrow table."""
        ...

    async def query_stream(
        self,
        sql: str,
        tables: Sequence[QueryTable],
        limits: QueryLimits,
        dialect: QueryDialect = "datafusion",
    ) -> AnswerStream:
        """The answer as it is computed (the same rules and bounds as :meth:`query`); returns
        once its schema is known. The caller closes it."""
        ...

    async def close(self) -> None:
        """Stop the workers (a running query is killed)."""
        ...


class ConsoleLoginPort(Protocol):
    """One-time login tokens of the node console (the daemon's console sessions)."""

    def issue_login(self) -> tuple[str, float]:
        """A new one-time login token and its lifetime in seconds."""
        ...


class NodeKeyStore(Protocol):
    """The node's keys on disk (``keys/`` of the home): the current node key, the key it
    committed to (``next.key``), the retired keys, and a rotation's staged keys. Key rotation
    and revocation (``node/app/node_keys.py``) decide; this only reads and writes."""

    def node_key(self) -> PrivateKey:
        """The current node key."""
        ...

    def retired(self) -> list[PrivateKey]:
        """The node's retired keys, oldest first."""
        ...

    def committed_path(self, path: str | None = None) -> str:
        """Where the committed next key is read from: ``path``, else ``keys/next.key``."""
        ...

    def read_committed(self, path: str | None = None) -> PrivateKey | None:
        """The committed next key (from ``path`` when given); None when the file is missing."""
        ...

    def write_committed(self, key: PrivateKey) -> None:
        """Write ``keys/next.key`` (owner-only)."""
        ...

    def remove_committed(self) -> None:
        """Remove ``keys/next.key``."""
        ...

    def staged(self) -> PrivateKey | None:
        """The new node key of a rotation in progress (``keys/node.key.next``), if any."""
        ...

    def stage(self, old: PrivateKey, new: PrivateKey, after: PrivateKey) -> None:
        """Write a rotation's keys before its record: the new node key and the key it commits
        to beside the current ones, and ``old`` among the retired keys (all owner-only)."""
        ...

    def discard_staged(self) -> None:
        """Remove a rotation's staged keys (a rotation that never got its record)."""
        ...

    def finish(self) -> None:
        """Make the staged keys current: the new committed key first, then the node key."""
        ...


__all__ = [
    "AnswerStream",
    "BackupPort",
    "Clock",
    "ConsoleLoginPort",
    "ContainerRequest",
    "ContainerResponse",
    "EnginePort",
    "EventSink",
    "GossipPort",
    "HeadProbe",
    "IpfsPort",
    "MqttRequest",
    "NodeKeyStore",
    "QueryDialect",
    "QueryEnginePort",
    "QueryLimits",
    "QueryTable",
    "SourcePort",
    "SourceResponse",
    "StatePort",
    "TransferPort",
    "VerificationVerdict",
]
