"""The ODF v0.34.0 metadata model as immutable typed values.

One class per schema table; field names are the schema's snake_case names and fields appear in
schema declaration order (the flatbuffers encoder relies on that order). Optional fields default
to ``None``; lists are tuples so every value is hashable and immutable. Union members are plain
classes; the union types are ``X | Y`` aliases.

Source of truth: ``schemas/odf.fbs`` (spec v0.34.0) and kamu-cli v0.153.0 ``dtos_generated.rs``
for which fields are required.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

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


FetchStep = FetchStepUrl | FetchStepFilesGlob | FetchStepContainer


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


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadStepCsv:
    """Read CSV."""

    schema: tuple[str, ...] | None = None
    separator: str | None = None
    encoding: str | None = None
    quote: str | None = None
    escape: str | None = None
    header: bool | None = None
    infer_schema: bool | None = None
    null_value: str | None = None
    date_format: str | None = None
    timestamp_format: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadStepGeoJson:
    """Read a GeoJSON FeatureCollection."""

    schema: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadStepEsriShapefile:
    """Read an ESRI shapefile."""

    schema: tuple[str, ...] | None = None
    sub_path: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadStepParquet:
    """Read Parquet."""

    schema: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadStepJson:
    """Read a JSON document (array of records, optionally under ``sub_path``)."""

    sub_path: str | None = None
    schema: tuple[str, ...] | None = None
    date_format: str | None = None
    encoding: str | None = None
    timestamp_format: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadStepNdJson:
    """Read newline-delimited JSON."""

    schema: tuple[str, ...] | None = None
    date_format: str | None = None
    encoding: str | None = None
    timestamp_format: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadStepNdGeoJson:
    """Read newline-delimited GeoJSON features."""

    schema: tuple[str, ...] | None = None


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


MergeStrategy = MergeStrategyAppend | MergeStrategyLedger | MergeStrategySnapshot


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


@dataclass(frozen=True, slots=True, kw_only=True)
class ExtraAttributes:
    """Extension attributes of ``AddData`` (kamu >= v0.24x, flatbuffers slot 6).

    ``entries`` is the JSON object exactly as stored: compact, keys sorted (serde_json over a
    BTreeMap). Only written when there is something to say (e.g. RFC-017 linked objects), so
    every other block stays byte-identical to ODF v0.34.
    """

    entries: str


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
    """The Arrow schema of the data, as a bare Arrow ``Schema`` flatbuffer (arrow-rs bytes)."""

    schema: bytes


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
