"""Hypothesis strategies for every ODF metadata model type.

Strategies are derived from the model's own type hints (``coordinator.metadata.model``), not from
the serde field tables, so they are an independent oracle for the encoders: every ``int`` is a
uint64, optional fields are ``None`` or present (present-but-empty strings and tuples included),
lists are tuples, unions draw every member. Leaf values:

* strings: any Unicode text without surrogates (which UTF-8 cannot carry), short;
* hashes: sha3-256 multihashes (and arrow0-sha3-256, kamu's logical-hash code);
* dataset ids: ed25519 ids from 32 random bytes;
* timestamps: nanosecond precision over years 1..9999, biased to whole seconds / ms / us so every
  RFC 3339 ``AutoSi`` fraction width is exercised.

Use :func:`strategy_for` for any model class or union alias; the named functions below cover the
common cases (``metadata_events()``, ``metadata_blocks()``, ``dataset_snapshots()``, ...).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from enum import IntEnum
from typing import Any

from hypothesis import strategies as st

from coordinator.identity import DatasetId
from coordinator.metadata import model as m
from coordinator.metadata.snapshot import DatasetSnapshot
from coordinator.metadata.timestamp import Timestamp
from coordinator.multiformats import Multicodec, Multihash

U64_MAX = (1 << 64) - 1
MAX_LIST = 3
MAX_TEXT = 12

#: Every metadata event class, in union order.
EVENT_TYPES: tuple[type, ...] = typing.get_args(m.MetadataEvent)

_TS_MIN = Timestamp.parse("0001-01-01T00:00:00Z").epoch_ns
_TS_MAX = Timestamp.parse("9999-12-31T23:59:59.999999999Z").epoch_ns


def u64s() -> st.SearchStrategy[int]:
    """uint64 values, edges included."""
    return st.integers(min_value=0, max_value=U64_MAX)


def texts(max_size: int = MAX_TEXT) -> st.SearchStrategy[str]:
    """Unicode strings (empty allowed) without surrogates."""
    return st.text(st.characters(exclude_categories=["Cs"]), max_size=max_size)


def multihashes() -> st.SearchStrategy[Multihash]:
    """sha3-256 multihashes, sometimes arrow0-sha3-256 (kamu's logical data hash code)."""
    digests = st.binary(min_size=32, max_size=32)
    return st.one_of(
        digests.map(lambda d: Multihash(Multicodec.SHA3_256, d)),
        digests.map(lambda d: Multihash(Multicodec.ARROW0_SHA3_256, d)),
    )


def dataset_ids() -> st.SearchStrategy[DatasetId]:
    """``did:odf`` ids from 32 random bytes."""
    return st.binary(min_size=32, max_size=32).map(DatasetId)


def timestamps() -> st.SearchStrategy[Timestamp]:
    """UTC instants with nanoseconds over years 1..9999."""
    ns = st.integers(min_value=_TS_MIN, max_value=_TS_MAX)
    return st.one_of(
        ns,
        ns.map(lambda v: v - v % 1_000_000_000),
        ns.map(lambda v: v - v % 1_000_000),
        ns.map(lambda v: v - v % 1_000),
    ).map(Timestamp)


def _union_members(tp: Any) -> tuple[Any, ...] | None:
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        return typing.get_args(tp)
    return None


#: Integer fields that are not uint64 on the wire.
_INT_FIELDS: dict[tuple[type, str], st.SearchStrategy[int]] = {
    (m.FetchStepMqtt, "port"): st.integers(-(1 << 31), (1 << 31) - 1),
    (m.DataTypeDecimal, "precision"): st.integers(0, (1 << 32) - 1),
    (m.DataTypeDecimal, "scale"): st.integers(-(1 << 31), (1 << 31) - 1),
}


@functools.cache
def strategy_for(tp: Any) -> st.SearchStrategy[Any]:
    """A strategy of valid values for a model class, a union alias or a field type."""
    if tp == m.DataType:
        # Recursive (List, Map, Option, Struct contain DataTypes): resolved lazily.
        return st.deferred(lambda: st.one_of([strategy_for(x) for x in typing.get_args(tp)]))
    members = _union_members(tp)
    if members is not None:
        present = [x for x in members if x is not type(None)]
        inner = st.one_of([strategy_for(x) for x in present])
        return st.one_of(st.none(), inner) if len(present) < len(members) else inner
    if typing.get_origin(tp) is tuple:
        (item, _ellipsis) = typing.get_args(tp)
        return st.lists(strategy_for(item), max_size=MAX_LIST).map(tuple)
    leaves: dict[Any, st.SearchStrategy[Any]] = {
        str: texts(),
        int: u64s(),
        bool: st.booleans(),
        bytes: st.binary(max_size=64),
        Multihash: multihashes(),
        DatasetId: dataset_ids(),
        Timestamp: timestamps(),
    }
    if tp in leaves:
        return leaves[tp]
    if tp is m.ExtraAttributes:
        # Stored as compact, key-sorted JSON (what kamu's serde_json over a BTreeMap writes).
        values = st.one_of(st.integers(0, 2**53), texts(20), st.booleans())
        # Attribute names are namespaced identifiers (e.g. opendatafabric.org/linkedObjects); the
        # YAML writer, like kamu's, only writes such simple keys.
        keys = st.from_regex(r"\A[a-z][a-z0-9.]{0,15}/[a-zA-Z][a-zA-Z0-9]{0,15}\Z")
        objects = st.dictionaries(keys, values, min_size=1, max_size=3)
        return objects.map(
            lambda d: m.ExtraAttributes(
                entries=json.dumps(d, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            )
        )
    if isinstance(tp, type) and issubclass(tp, IntEnum):
        return st.sampled_from(list(tp))
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        fields = {
            f.name: _INT_FIELDS[(tp, f.name)]
            if (tp, f.name) in _INT_FIELDS
            else strategy_for(hints[f.name])
            for f in dataclasses.fields(tp)
        }
        return st.builds(tp, **fields)
    raise TypeError(f"no strategy for {tp!r}")


# -- named strategies --------------------------------------------------------------------------


def offset_intervals() -> st.SearchStrategy[m.OffsetInterval]:
    """Closed offset intervals (any two u64s; chain rules are not applied)."""
    return strategy_for(m.OffsetInterval)


def data_slices() -> st.SearchStrategy[m.DataSlice]:
    """Data slices with any hashes, interval and size."""
    return strategy_for(m.DataSlice)


def checkpoints() -> st.SearchStrategy[m.Checkpoint]:
    """Checkpoints with any hash and size."""
    return strategy_for(m.Checkpoint)


def source_states() -> st.SearchStrategy[m.SourceState]:
    """Opaque per-source states."""
    return strategy_for(m.SourceState)


def execute_transform_inputs() -> st.SearchStrategy[m.ExecuteTransformInput]:
    """Transform inputs with every optional combination."""
    return strategy_for(m.ExecuteTransformInput)


def event_time_sources() -> st.SearchStrategy[m.EventTimeSource]:
    """Every ``EventTimeSource`` member."""
    return strategy_for(m.EventTimeSource)


def fetch_steps() -> st.SearchStrategy[m.FetchStep]:
    """Every ``FetchStep`` member."""
    return strategy_for(m.FetchStep)


def prep_steps() -> st.SearchStrategy[m.PrepStep]:
    """Every ``PrepStep`` member."""
    return strategy_for(m.PrepStep)


def read_steps() -> st.SearchStrategy[m.ReadStep]:
    """Every ``ReadStep`` member."""
    return strategy_for(m.ReadStep)


def transforms() -> st.SearchStrategy[m.Transform]:
    """SQL transforms (the only ``Transform`` member)."""
    return strategy_for(m.Transform)


def merge_strategies() -> st.SearchStrategy[m.MergeStrategy]:
    """Every ``MergeStrategy`` member."""
    return strategy_for(m.MergeStrategy)


def attachments() -> st.SearchStrategy[m.Attachments]:
    """Embedded attachments (the only ``Attachments`` member)."""
    return strategy_for(m.Attachments)


def metadata_events(*event_types: type) -> st.SearchStrategy[m.MetadataEvent]:
    """Events of the given classes (default: every event type)."""
    chosen = event_types or EVENT_TYPES
    return st.one_of([strategy_for(t) for t in chosen])


def metadata_blocks(
    events: st.SearchStrategy[m.MetadataEvent] | None = None,
) -> st.SearchStrategy[m.MetadataBlock]:
    """Blocks wrapping ``events`` (default: any event), with any time, prev hash and seq."""
    return st.builds(
        m.MetadataBlock,
        system_time=timestamps(),
        prev_block_hash=st.none() | multihashes(),
        sequence_number=u64s(),
        event=events if events is not None else metadata_events(),
    )


_SUBDOMAIN = r"[A-Za-z0-9]{1,4}(-[A-Za-z0-9]{1,3}){0,2}"
_HOSTNAME = rf"{_SUBDOMAIN}(\.{_SUBDOMAIN}){{0,2}}"


def dataset_aliases() -> st.SearchStrategy[str]:
    """Valid kamu dataset aliases: ``name`` or ``account/name``."""
    return st.from_regex(rf"\A({_HOSTNAME}/)?{_HOSTNAME}\Z")


def dataset_snapshots() -> st.SearchStrategy[DatasetSnapshot]:
    """Snapshots with any events (kamu would refuse some kinds when creating the dataset)."""
    return st.builds(
        DatasetSnapshot,
        name=dataset_aliases(),
        kind=st.sampled_from(list(m.DatasetKind)),
        metadata=st.lists(metadata_events(), max_size=MAX_LIST).map(tuple),
    )


__all__ = [
    "EVENT_TYPES",
    "U64_MAX",
    "attachments",
    "checkpoints",
    "data_slices",
    "dataset_aliases",
    "dataset_ids",
    "dataset_snapshots",
    "event_time_sources",
    "execute_transform_inputs",
    "fetch_steps",
    "merge_strategies",
    "metadata_blocks",
    "metadata_events",
    "multihashes",
    "offset_intervals",
    "prep_steps",
    "read_steps",
    "source_states",
    "strategy_for",
    "texts",
    "timestamps",
    "transforms",
    "u64s",
]
