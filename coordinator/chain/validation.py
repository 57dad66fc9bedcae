"""The metadata chain rules, as a pure fold over blocks.

:class:`ChainState` summarises everything about a chain that the next block is validated
against, so validating an append is O(1) and needs no storage access: ``validate_append(state,
block, hash) -> new_state``. The rules follow ODF spec v0.34.0 and kamu-cli v0.153.0
``metadata_chain_impl.rs`` (docs/odf-wire-format.md, "Chain rules"). Every violation raises
:class:`ChainRuleViolation` whose ``rule`` is one of the identifiers in :data:`RULES`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Final

from coordinator.errors import ChainRuleViolation
from coordinator.identity.dataset_id import DatasetId
from coordinator.metadata import model as m
from coordinator.metadata.timestamp import Timestamp
from coordinator.multiformats import Multihash

#: Stable identifiers of every rule, with a one-line description.
RULES: Final[dict[str, str]] = {
    "prev-block-hash": "a block must point at the current head (the first block at nothing)",
    "sequence-number": "sequence numbers start at 0 and increase by exactly 1",
    "seed-first": "the first block must be a Seed",
    "seed-unique": "a Seed may only be the first block",
    "system-time-monotonic": "system_time must not go backwards",
    "event-kind": "the event is not allowed for this dataset kind (root / derivative)",
    "empty-event": "AddData / ExecuteTransform must carry data, checkpoint, watermark or state",
    "no-op-event": "an event without data must advance checkpoint, watermark or source state",
    "schema-before-data": "SetDataSchema must precede the first data slice",
    "prev-checkpoint": "prevCheckpoint must equal the previous event's newCheckpoint",
    "prev-offset": "prevOffset must equal the last offset in the chain",
    "offsets-sequential": "a new slice must start right after the previous offset",
    "offset-interval": "a slice's end offset must not be before its start",
    "watermark-monotonic": "the watermark must not decrease or disappear once set",
    "transform-inputs": "ExecuteTransform inputs must match SetTransform in number and order",
    "input-interval": "ExecuteTransform input block/offset intervals must be consistent",
    "transform-normalized": "transforms must use normalized `queries` (last one without alias)",
    "set-transform-inputs": "SetTransform inputs must be resolved dataset IDs with aliases",
    "source-conflict": "polling and push sources cannot be active at the same time",
    "push-source-schema": "push sources must declare the read schema explicitly",
    "disable-source": "only an active source can be disabled",
    "data-schema": "SetDataSchema must carry exactly one non-empty schema (Arrow or ODF)",
}


@dataclass(frozen=True, slots=True)
class ChainState:
    """What the next block of a chain is validated against.

    ``ChainState()`` is the state of an empty chain. ``last_data_event`` is the newest AddData or
    ExecuteTransform: it carries the checkpoint, watermark, offsets and source state.
    """

    head: Multihash | None = None
    sequence_number: int = -1
    system_time: Timestamp | None = None
    dataset_id: DatasetId | None = None
    dataset_kind: m.DatasetKind | None = None
    has_schema: bool = False
    set_transform: m.SetTransform | None = None
    last_data_event: m.AddData | m.ExecuteTransform | None = None
    polling_source: bool = False
    push_sources: frozenset[str] = frozenset()

    @property
    def is_empty(self) -> bool:
        """True for a chain with no blocks."""
        return self.head is None

    @property
    def last_offset(self) -> int | None:
        """The last record offset of the dataset (None if it has no data yet)."""
        return _last_offset(self.last_data_event)

    @property
    def watermark(self) -> Timestamp | None:
        """The current output watermark."""
        return self.last_data_event.new_watermark if self.last_data_event else None

    @property
    def checkpoint(self) -> m.Checkpoint | None:
        """The current checkpoint."""
        return self.last_data_event.new_checkpoint if self.last_data_event else None

    @property
    def next_offset(self) -> int:
        """The offset the next data slice must start at."""
        last = self.last_offset
        return 0 if last is None else last + 1


# A new state per block: the frozen dataclass's ``__init__`` (one ``object.__setattr__`` per field)
# was a third of validating a block; setting the slots through their descriptors builds the same
# object in less than half the time.
_new_object = object.__new__
(
    _set_head,
    _set_sequence_number,
    _set_system_time,
    _set_dataset_id,
    _set_dataset_kind,
    _set_has_schema,
    _set_set_transform,
    _set_last_data_event,
    _set_polling_source,
    _set_push_sources,
) = (vars(ChainState)[f.name].__set__ for f in fields(ChainState))


def _new_state(
    head: Multihash,
    sequence_number: int,
    system_time: Timestamp,
    dataset_id: DatasetId | None,
    dataset_kind: m.DatasetKind | None,
    has_schema: bool,
    set_transform: m.SetTransform | None,
    last_data_event: m.AddData | m.ExecuteTransform | None,
    polling_source: bool,
    push_sources: frozenset[str],
) -> ChainState:
    """``ChainState(...)`` of every field, positionally (see above)."""
    s: Any = _new_object(ChainState)
    _set_head(s, head)
    _set_sequence_number(s, sequence_number)
    _set_system_time(s, system_time)
    _set_dataset_id(s, dataset_id)
    _set_dataset_kind(s, dataset_kind)
    _set_has_schema(s, has_schema)
    _set_set_transform(s, set_transform)
    _set_last_data_event(s, last_data_event)
    _set_polling_source(s, polling_source)
    _set_push_sources(s, push_sources)
    return s  # type: ignore[no-any-return]


def _last_offset(e: m.AddData | m.ExecuteTransform | None) -> int | None:
    if e is None:
        return None
    if e.new_data is not None:
        return e.new_data.offset_interval.end
    return e.prev_offset


def _fail(rule: str, message: str) -> ChainRuleViolation:
    assert rule in RULES, rule
    return ChainRuleViolation(rule, message)


def validate_append(state: ChainState, block: m.MetadataBlock, block_hash: Multihash) -> ChainState:
    """Check that ``block`` (with hash ``block_hash``) may follow ``state``; return the new state.

    Raises:
        ChainRuleViolation: the block breaks a rule; ``.rule`` names it.
    """
    event = block.event
    # Linkage and ordering.
    if block.prev_block_hash != state.head:
        raise _fail(
            "prev-block-hash",
            f"block points at {block.prev_block_hash} but the head is {state.head}",
        )
    if block.sequence_number != state.sequence_number + 1:
        raise _fail(
            "sequence-number",
            f"expected sequence number {state.sequence_number + 1}, got {block.sequence_number}",
        )
    if state.head is None:
        if not isinstance(event, m.Seed):
            raise _fail("seed-first", f"first block is {type(event).__name__}, not Seed")
    elif isinstance(event, m.Seed):
        raise _fail("seed-unique", "Seed appended to a non-empty chain")
    if state.system_time is not None and block.system_time.epoch_ns < state.system_time.epoch_ns:
        raise _fail(
            "system-time-monotonic",
            f"system time {block.system_time} is before the previous {state.system_time}",
        )

    # Per-event rules; each branch only computes what changes, then one constructor call
    # builds the new state (dataclasses.replace was a third of the validation cost).
    kind = state.dataset_kind
    dataset_id = state.dataset_id
    has_schema = state.has_schema
    set_transform = state.set_transform
    last_data_event = state.last_data_event
    polling_source = state.polling_source
    push_sources = state.push_sources

    if isinstance(event, m.AddData):
        if kind != m.DatasetKind.ROOT:
            raise _fail("event-kind", "AddData is only allowed in root datasets")
        _check_data_event(state, event)
        last_data_event = event
    elif isinstance(event, m.ExecuteTransform):
        if kind != m.DatasetKind.DERIVATIVE:
            raise _fail("event-kind", "ExecuteTransform is only allowed in derivative datasets")
        _check_execute_transform(state, event)
        _check_data_event(state, event)
        last_data_event = event
    elif isinstance(event, m.Seed):
        dataset_id, kind = event.dataset_id, event.dataset_kind
    elif isinstance(event, m.SetDataSchema):
        # v0.34 carries Arrow bytes (slot 0), v0.37+ an ODF schema (slot 1); kamu never
        # writes both and cannot read a block that has both.
        if event.raw_arrow_schema is not None and event.schema is not None:
            raise _fail("data-schema", "SetDataSchema carries both an Arrow and an ODF schema")
        if not event.raw_arrow_schema and (event.schema is None or not event.schema.fields):
            raise _fail("data-schema", "SetDataSchema has an empty schema")
        has_schema = True
    elif isinstance(event, m.SetPollingSource):
        if kind != m.DatasetKind.ROOT:
            raise _fail("event-kind", "SetPollingSource is only allowed in root datasets")
        if push_sources:
            raise _fail(
                "source-conflict",
                "cannot add a polling source while push sources are active: "
                + ", ".join(sorted(push_sources)),
            )
        if event.preprocess is not None:
            _check_transform(event.preprocess)
        polling_source = True
    elif isinstance(event, m.AddPushSource):
        if kind != m.DatasetKind.ROOT:
            raise _fail("event-kind", "AddPushSource is only allowed in root datasets")
        if polling_source:
            raise _fail("source-conflict", "cannot add a push source while polling is active")
        if event.read.ddl_schema is None and event.read.schema is None:
            raise _fail("push-source-schema", "push sources must specify the read schema")
        if event.preprocess is not None:
            _check_transform(event.preprocess)
        push_sources = push_sources | {event.source_name}
    elif isinstance(event, m.DisablePushSource):
        if event.source_name not in push_sources:
            raise _fail("disable-source", f"no active push source {event.source_name!r}")
        push_sources = push_sources - {event.source_name}
    elif isinstance(event, m.DisablePollingSource):
        if not polling_source:
            raise _fail("disable-source", "no active polling source")
        polling_source = False
    elif isinstance(event, m.SetTransform):
        if kind != m.DatasetKind.DERIVATIVE:
            raise _fail("event-kind", "SetTransform is only allowed in derivative datasets")
        if not event.inputs:
            raise _fail("set-transform-inputs", "a transform must have at least one input")
        for i in event.inputs:
            if i.alias is None or not _is_dataset_id(i.dataset_ref):
                raise _fail(
                    "set-transform-inputs",
                    f"input {i.dataset_ref!r} must be resolved to a did:odf and have an alias",
                )
        _check_transform(event.transform)
        set_transform = event
    # SetVocab, SetAttachments, SetInfo, SetLicense carry no cross-block rules.

    return _new_state(
        block_hash,
        block.sequence_number,
        block.system_time,
        dataset_id,
        kind,
        has_schema,
        set_transform,
        last_data_event,
        polling_source,
        push_sources,
    )


def _is_dataset_id(ref: str) -> bool:
    try:
        DatasetId.from_did_str(ref)
    except Exception:
        return False
    return True


def _check_transform(transform: m.TransformSql) -> None:
    if transform.query is not None:
        raise _fail("transform-normalized", "transform `query` must be normalized into `queries`")
    if not transform.queries:
        raise _fail("transform-normalized", "a transform must have at least one query")
    if transform.queries[-1].alias is not None:
        raise _fail("transform-normalized", "the last query is the output and must have no alias")
    if any(q.alias is None for q in transform.queries[:-1]):
        raise _fail("transform-normalized", "all queries except the last must have aliases")


def _check_data_event(state: ChainState, e: m.AddData | m.ExecuteTransform) -> None:
    prev = state.last_data_event
    source_state = e.new_source_state if isinstance(e, m.AddData) else None
    if (
        e.new_data is None
        and e.new_checkpoint is None
        and e.new_watermark is None
        and source_state is None
    ):
        raise _fail("empty-event", f"{type(e).__name__} is empty")
    if e.new_data is not None and not state.has_schema:
        raise _fail("schema-before-data", "SetDataSchema must be present before adding data")
    expected_cp = prev.new_checkpoint.physical_hash if prev and prev.new_checkpoint else None
    if e.prev_checkpoint != expected_cp:
        raise _fail(
            "prev-checkpoint",
            f"prevCheckpoint {e.prev_checkpoint} does not match the last checkpoint {expected_cp}",
        )
    prev_wm = prev.new_watermark if prev else None
    prev_source_state = prev.new_source_state if isinstance(prev, m.AddData) else None
    new_cp = e.new_checkpoint.physical_hash if e.new_checkpoint else None
    if (
        e.new_data is None
        and new_cp == e.prev_checkpoint
        and e.new_watermark == prev_wm
        and source_state == prev_source_state
    ):
        raise _fail(
            "no-op-event",
            "event has no data and advances neither checkpoint, watermark nor source state",
        )
    if prev_wm is not None and (
        e.new_watermark is None or e.new_watermark.epoch_ns < prev_wm.epoch_ns
    ):
        raise _fail(
            "watermark-monotonic", f"watermark {e.new_watermark} is before the previous {prev_wm}"
        )
    expected_prev_offset = _last_offset(prev)
    if e.prev_offset != expected_prev_offset:
        raise _fail(
            "prev-offset",
            f"prevOffset {e.prev_offset} does not match the last offset {expected_prev_offset}",
        )
    if e.new_data is not None:
        interval = e.new_data.offset_interval
        expected_start = 0 if e.prev_offset is None else e.prev_offset + 1
        if interval.start != expected_start:
            raise _fail(
                "offsets-sequential",
                f"slice starts at offset {interval.start}, expected {expected_start}",
            )
        if interval.end < interval.start:
            raise _fail("offset-interval", f"invalid interval [{interval.start}, {interval.end}]")


def _check_execute_transform(state: ChainState, e: m.ExecuteTransform) -> None:
    prev = state.last_data_event if isinstance(state.last_data_event, m.ExecuteTransform) else None
    actual = [i.dataset_id for i in e.query_inputs]
    if state.set_transform is not None:
        expected = [DatasetId.from_did_str(i.dataset_ref) for i in state.set_transform.inputs]
    elif prev is not None:
        expected = [i.dataset_id for i in prev.query_inputs]
    else:
        raise _fail("transform-inputs", "ExecuteTransform must be preceded by SetTransform")
    if actual != expected:
        raise _fail(
            "transform-inputs", "inputs must be listed in the order declared by SetTransform"
        )
    for idx, new in enumerate(e.query_inputs):
        if new.new_block_hash is not None and new.new_block_hash == new.prev_block_hash:
            raise _fail("input-interval", f"input {idx}: empty block interval (prev == new)")
        if new.new_offset is not None and new.new_offset == new.prev_offset:
            raise _fail("input-interval", f"input {idx}: empty offset interval (prev == new)")
        if new.new_offset is not None and new.new_block_hash is None:
            raise _fail(
                "input-interval", f"input {idx}: non-empty offset interval but no new block"
            )
        if prev is not None:
            p = prev.query_inputs[idx]
            last_block = p.new_block_hash if p.new_block_hash is not None else p.prev_block_hash
            last_offset = p.new_offset if p.new_offset is not None else p.prev_offset
            if new.prev_block_hash != last_block:
                raise _fail(
                    "input-interval",
                    f"input {idx}: prevBlockHash does not match the last block of the previous "
                    "transform",
                )
            if new.prev_offset != last_offset:
                raise _fail(
                    "input-interval",
                    f"input {idx}: prevOffset does not match the last offset of the previous "
                    "transform",
                )


def fold_chain(blocks: list[tuple[Multihash, m.MetadataBlock]]) -> ChainState:
    """Validate a whole chain given oldest-first and return its final state."""
    state = ChainState()
    for h, b in blocks:
        state = validate_append(state, b, h)
    return state
