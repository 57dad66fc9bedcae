"""The ODF metadata model (spec v0.34.0 to v0.39.0) as immutable typed values.

One class per schema table; field names are the schema's snake_case names and fields appear in
schema declaration order (the flatbuffers encoder relies on that order). Optional fields default
to ``None``; lists are tuples so every value is hashable and immutable. Union members are plain
classes; the union types are ``X | Y`` aliases. The flatbuffers codec reads each field's wire
kind off its annotation (:mod:`coordinator.metadata.flatbuffers_serde`), so the annotations are
part of the wire format: keep them in the forms it knows.

Source of truth: ``schemas/odf.fbs`` (the metadata tables of spec v0.39.0, a superset of v0.34.0)
and kamu-cli ``src/odf/metadata/src/dtos/dtos_generated.rs`` for which fields are required.
Fields added after v0.34 are optional and appended, so a v0.34 value encodes as before.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from coordinator.identity.dataset_id import DatasetId
from coordinator.metadata.timestamp import Timestamp
from coordinator.multiformats import Multihash


class DatasetKind(IntEnum):
    """Root datasets ingest external data; derivative ones transform other datasets."""

    ROOT = 0
    DERIVATIVE = 1


class SourceOrdering(IntEnum):
    """Order in which ``FetchStepFilesGlob`` processes matched files."""

    BY_EVENT_TIME = 0
    BY_NAME = 1


class CompressionFormat(IntEnum):
    """Archive formats of ``PrepStepDecompress``."""

    GZIP = 0
    ZIP = 1


# ---------------------------------------------------------------------------------------------
# Data slices and checkpoints


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetInterval:
    """A closed ``[start, end]`` interval of record offsets."""

    start: int
    end: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DataSlice:
    """A data part file: its hashes, offsets and size in bytes."""

    logical_hash: Multihash
    physical_hash: Multihash
    offset_interval: OffsetInterval
    size: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Checkpoint:
    """An opaque engine/ingest checkpoint file."""

    physical_hash: Multihash
    size: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceState:
    """Opaque per-source state carried by ``AddData`` (e.g. a Kafka offset)."""

    source_name: str
    kind: str
    value: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ExtraAttributes:
    """Extension attributes (ODF v0.37, RFC-016/017): a JSON object keyed ``<domain>/<path>``.

    Carried by ``AddData.extra`` (flatbuffers slot 6, e.g. the RFC-017 linked-objects summary),
    ``DataField.extra`` (e.g. Arrow encodings, ``opendatafabric.org/type``) and
    ``DataSchema.extra`` (e.g. ``kamu.dev/archetype``). ``entries`` is the JSON text exactly as
    stored in the block, so a received block re-encodes byte-identically; kamu writes it compact
    with keys sorted (serde_json over a ``BTreeMap``), which :meth:`of` reproduces.
    """

    entries: str

    @classmethod
    def of(cls, entries: Mapping[str, Any]) -> ExtraAttributes:
        """The attributes ``entries`` in kamu's canonical JSON text (compact, keys sorted)."""
        return cls(entries=canonical_json(entries))

    def as_dict(self) -> dict[str, Any]:
        """The attributes as a JSON object (raises ``ValueError`` if the text is not one)."""
        value = json.loads(self.entries)
        if not isinstance(value, dict):
            raise ValueError("extra attributes are not a JSON object")
        return value


def canonical_json(value: Any) -> str:
    """``value`` as serde_json writes a ``BTreeMap``: compact, keys sorted, UTF-8 unescaped."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


# ---------------------------------------------------------------------------------------------
# ODF schema (RFC-016, spec v0.37): logical data types of a dataset's columns


class TimeUnit(IntEnum):
    """Unit of ``Duration``, ``Time`` and ``Timestamp`` types (a ``int16`` enum on the wire)."""

    SECOND = 0
    MILLISECOND = 1
    MICROSECOND = 2
    NANOSECOND = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class DataTypeBinary:
    """Bytes; ``fixed_length`` set for fixed-size binary."""

    fixed_length: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DataTypeBool:
    """A boolean."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DataTypeDate:
    """A calendar date."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DataTypeDecimal:
    """A fixed-point decimal (``scale`` may be negative)."""

    precision: int
    scale: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DataTypeDuration:
    """An elapsed time; ``unit`` defaults to milliseconds."""

    unit: TimeUnit | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DataTypeFloat16:
    """A half-precision float."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DataTypeFloat32:
    """A single-precision float."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DataTypeFloat64:
    """A double-precision float."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DataTypeInt8:
    """A signed 8-bit integer."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DataTypeInt16:
    """A signed 16-bit integer."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DataTypeInt32:
    """A signed 32-bit integer."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DataTypeInt64:
    """A signed 64-bit integer."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DataTypeUInt8:
    """An unsigned 8-bit integer."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DataTypeUInt16:
    """An unsigned 16-bit integer."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DataTypeUInt32:
    """An unsigned 32-bit integer."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DataTypeUInt64:
    """An unsigned 64-bit integer."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DataTypeList:
    """A list of ``item_type`` values; ``fixed_length`` set for fixed-size lists."""

    item_type: DataType
    fixed_length: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DataTypeMap:
    """A map (a list of key/value entries)."""

    key_type: DataType
    value_type: DataType
    keys_sorted: bool | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DataTypeNull:
    """The type of nulls only."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DataTypeOption:
    """A nullable ``inner`` (ODF types are NOT NULL unless wrapped in ``Option``)."""

    inner: DataType


@dataclass(frozen=True, slots=True, kw_only=True)
class DataTypeStruct:
    """A struct of named fields."""

    fields: tuple[DataField, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DataTypeTime:
    """A time of day; ``unit`` defaults to milliseconds."""

    unit: TimeUnit | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DataTypeTimestamp:
    """An instant; ``unit`` defaults to milliseconds and ``timezone`` to ``UTC``."""

    unit: TimeUnit | None = None
    timezone: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DataTypeString:
    """UTF-8 text."""


DataType = (
    DataTypeBinary
    | DataTypeBool
    | DataTypeDate
    | DataTypeDecimal
    | DataTypeDuration
    | DataTypeFloat16
    | DataTypeFloat32
    | DataTypeFloat64
    | DataTypeInt8
    | DataTypeInt16
    | DataTypeInt32
    | DataTypeInt64
    | DataTypeUInt8
    | DataTypeUInt16
    | DataTypeUInt32
    | DataTypeUInt64
    | DataTypeList
    | DataTypeMap
    | DataTypeNull
    | DataTypeOption
    | DataTypeStruct
    | DataTypeTime
    | DataTypeTimestamp
    | DataTypeString
)


@dataclass(frozen=True, slots=True, kw_only=True)
class DataField:
    """A named column of logical ``type``; ``extra`` holds encodings and annotations."""

    name: str
    type: DataType
    extra: ExtraAttributes | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DataSchema:
    """An ODF schema (RFC-016): logical columns of a dataset or of a read step."""

    fields: tuple[DataField, ...]
    extra: ExtraAttributes | None = None


# ---------------------------------------------------------------------------------------------
# Fetch / prepare / read / merge steps


@dataclass(frozen=True, slots=True, kw_only=True)
class EventTimeSourceFromMetadata:
    """Event time taken from the source's metadata (e.g. Last-Modified)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EventTimeSourceFromPath:
    """Event time extracted from the file path by a regex."""

    pattern: str
    timestamp_format: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class EventTimeSourceFromSystemTime:
    """Event time = system time of ingestion."""


EventTimeSource = (
    EventTimeSourceFromMetadata | EventTimeSourceFromPath | EventTimeSourceFromSystemTime
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceCachingForever:
    """Fetch the source once and never again."""


SourceCaching = SourceCachingForever


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestHeader:
    """An HTTP header sent by ``FetchStepUrl``."""

    name: str
    value: str


@dataclass(frozen=True, slots=True, kw_only=True)
class EnvVar:
    """An environment variable of ``FetchStepContainer``."""

    name: str
    value: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchStepUrl:
    """Fetch from a URL."""

    url: str
    event_time: EventTimeSource | None = None
    cache: SourceCaching | None = None
    headers: tuple[RequestHeader, ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchStepFilesGlob:
    """Fetch local files matching a glob."""

    path: str
    event_time: EventTimeSource | None = None
    cache: SourceCaching | None = None
    order: SourceOrdering | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchStepContainer:
    """Fetch by running a container."""

    image: str
    command: tuple[str, ...] | None = None
    args: tuple[str, ...] | None = None
    env: tuple[EnvVar, ...] | None = None


class MqttQos(IntEnum):
    """MQTT quality of service of a topic subscription."""

    AT_MOST_ONCE = 0
    AT_LEAST_ONCE = 1
    EXACTLY_ONCE = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class MqttTopicSubscription:
    """A topic (pattern) of ``FetchStepMqtt``; ``qos`` defaults to ``AtMostOnce``."""

    path: str
    qos: MqttQos | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchStepMqtt:
    """Subscribe to MQTT topics (spec v0.35)."""

    host: str
    port: int
    username: str | None = None
    password: str | None = None
    topics: tuple[MqttTopicSubscription, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchStepEthereumLogs:
    """Read Ethereum logs matching a filter (spec v0.36)."""

    chain_id: int | None = None
    node_url: str | None = None
    filter: str | None = None
    signature: str | None = None


FetchStep = (
    FetchStepUrl | FetchStepFilesGlob | FetchStepContainer | FetchStepMqtt | FetchStepEthereumLogs
)


@dataclass(frozen=True, slots=True, kw_only=True)
class PrepStepDecompress:
    """Decompress the fetched archive."""

    format: CompressionFormat
    sub_path: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PrepStepPipe:
    """Pipe the fetched data through a command."""

    command: tuple[str, ...]


PrepStep = PrepStepDecompress | PrepStepPipe


# Spec v0.38 renamed the read steps' DDL ``schema`` to ``ddl_schema`` (same slot, same bytes) and
# appended the ODF ``schema``.


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadStepCsv:
    """Read CSV."""

    ddl_schema: tuple[str, ...] | None = None
    separator: str | None = None
    encoding: str | None = None
    quote: str | None = None
    escape: str | None = None
    header: bool | None = None
    infer_schema: bool | None = None
    null_value: str | None = None
    date_format: str | None = None
    timestamp_format: str | None = None
    schema: DataSchema | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadStepGeoJson:
    """Read a GeoJSON FeatureCollection."""

    ddl_schema: tuple[str, ...] | None = None
    schema: DataSchema | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadStepEsriShapefile:
    """Read an ESRI shapefile."""

    ddl_schema: tuple[str, ...] | None = None
    sub_path: str | None = None
    schema: DataSchema | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadStepParquet:
    """Read Parquet."""

    ddl_schema: tuple[str, ...] | None = None
    schema: DataSchema | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadStepJson:
    """Read a JSON document (array of records, optionally under ``sub_path``)."""

    sub_path: str | None = None
    ddl_schema: tuple[str, ...] | None = None
    date_format: str | None = None
    encoding: str | None = None
    timestamp_format: str | None = None
    schema: DataSchema | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadStepNdJson:
    """Read newline-delimited JSON."""

    ddl_schema: tuple[str, ...] | None = None
    date_format: str | None = None
    encoding: str | None = None
    timestamp_format: str | None = None
    schema: DataSchema | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadStepNdGeoJson:
    """Read newline-delimited GeoJSON features."""

    ddl_schema: tuple[str, ...] | None = None
    schema: DataSchema | None = None


ReadStep = (
    ReadStepCsv
    | ReadStepGeoJson
    | ReadStepEsriShapefile
    | ReadStepParquet
    | ReadStepJson
    | ReadStepNdJson
    | ReadStepNdGeoJson
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SqlQueryStep:
    """One step of a multi-step SQL transform; its result is visible as ``alias``."""

    alias: str | None = None
    query: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TemporalTable:
    """An input to be treated as a temporal table keyed by ``primary_key``."""

    name: str
    primary_key: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TransformSql:
    """A SQL transform for the given engine."""

    engine: str
    version: str | None = None
    query: str | None = None
    queries: tuple[SqlQueryStep, ...] | None = None
    temporal_tables: tuple[TemporalTable, ...] | None = None


Transform = TransformSql


@dataclass(frozen=True, slots=True, kw_only=True)
class MergeStrategyAppend:
    """Append every record as a new event."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MergeStrategyLedger:
    """Append records whose primary key was not seen before."""

    primary_key: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class MergeStrategySnapshot:
    """Diff full snapshots into a changelog (+A / -R / -C +C)."""

    primary_key: tuple[str, ...]
    compare_columns: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MergeStrategyChangelogStream:
    """Input already is a changelog (``op`` column) keyed by ``primary_key`` (spec v0.37)."""

    primary_key: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class MergeStrategyUpsertStream:
    """Input is a stream of upserts/retractions keyed by ``primary_key`` (spec v0.37)."""

    primary_key: tuple[str, ...]


MergeStrategy = (
    MergeStrategyAppend
    | MergeStrategyLedger
    | MergeStrategySnapshot
    | MergeStrategyChangelogStream
    | MergeStrategyUpsertStream
)


@dataclass(frozen=True, slots=True, kw_only=True)
class AttachmentEmbedded:
    """An attachment embedded in metadata."""

    path: str
    content: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AttachmentsEmbedded:
    """A list of embedded attachments."""

    items: tuple[AttachmentEmbedded, ...]


Attachments = AttachmentsEmbedded


@dataclass(frozen=True, slots=True, kw_only=True)
class TransformInput:
    """An input of a derivative dataset; ``dataset_ref`` is a DID string once resolved."""

    dataset_ref: str
    alias: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecuteTransformInput:
    """Which blocks and offsets of one input a transform step consumed (half-open ranges)."""

    dataset_id: DatasetId
    prev_block_hash: Multihash | None = None
    new_block_hash: Multihash | None = None
    prev_offset: int | None = None
    new_offset: int | None = None


# ---------------------------------------------------------------------------------------------
# Events


@dataclass(frozen=True, slots=True, kw_only=True)
class AddData:
    """New data (and/or checkpoint, watermark, source state) ingested into a root dataset."""

    prev_checkpoint: Multihash | None = None
    prev_offset: int | None = None
    new_data: DataSlice | None = None
    new_checkpoint: Checkpoint | None = None
    new_watermark: Timestamp | None = None
    new_source_state: SourceState | None = None
    extra: ExtraAttributes | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecuteTransform:
    """The result of running a derivative's transform over new input data."""

    query_inputs: tuple[ExecuteTransformInput, ...]
    prev_checkpoint: Multihash | None = None
    prev_offset: int | None = None
    new_data: DataSlice | None = None
    new_checkpoint: Checkpoint | None = None
    new_watermark: Timestamp | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Seed:
    """The first block: the dataset's identity and kind."""

    dataset_id: DatasetId
    dataset_kind: DatasetKind


@dataclass(frozen=True, slots=True, kw_only=True)
class SetPollingSource:
    """How a root dataset polls an external source."""

    fetch: FetchStep
    prepare: tuple[PrepStep, ...] | None = None
    read: ReadStep
    preprocess: Transform | None = None
    merge: MergeStrategy


@dataclass(frozen=True, slots=True, kw_only=True)
class SetTransform:
    """The inputs and query of a derivative dataset."""

    inputs: tuple[TransformInput, ...]
    transform: Transform


@dataclass(frozen=True, slots=True, kw_only=True)
class SetVocab:
    """Renames of the system columns."""

    offset_column: str | None = None
    operation_type_column: str | None = None
    system_time_column: str | None = None
    event_time_column: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SetAttachments:
    """Attachments (e.g. README) of the dataset."""

    attachments: Attachments


@dataclass(frozen=True, slots=True, kw_only=True)
class SetInfo:
    """Description and keywords."""

    description: str | None = None
    keywords: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SetLicense:
    """The data license."""

    short_name: str
    name: str
    spdx_id: str | None = None
    website_url: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SetDataSchema:
    """The schema of the data that follows.

    ``raw_arrow_schema`` (flatbuffers slot 0) is the spec v0.34 form: the Arrow schema as a
    bare Arrow ``Schema`` flatbuffer (arrow-rs bytes). ``schema`` (slot 1, spec v0.37, RFC-016)
    is the ODF schema kamu writes since 2025 instead. Exactly one is set
    (:func:`coordinator.metadata.odf_schema.upgrade` turns either into an ODF schema).
    """

    raw_arrow_schema: bytes | None = None
    schema: DataSchema | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AddPushSource:
    """A named source that accepts pushed data."""

    source_name: str
    read: ReadStep
    preprocess: Transform | None = None
    merge: MergeStrategy


@dataclass(frozen=True, slots=True, kw_only=True)
class DisablePushSource:
    """Deactivates a push source."""

    source_name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class DisablePollingSource:
    """Deactivates the polling source."""


MetadataEvent = (
    AddData
    | ExecuteTransform
    | Seed
    | SetPollingSource
    | SetTransform
    | SetVocab
    | SetAttachments
    | SetInfo
    | SetLicense
    | SetDataSchema
    | AddPushSource
    | DisablePushSource
    | DisablePollingSource
)


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataBlock:
    """One link of a dataset's metadata chain."""

    system_time: Timestamp
    prev_block_hash: Multihash | None = None
    sequence_number: int
    event: MetadataEvent
