"""The ODF engine protocol (spec v0.34.0 ``engine-ops``) as immutable typed values.

``TransformRequest`` / ``TransformRequestInput`` / ``TransformResponse`` mirror the schemas in
``open-data-fabric/schemas/engine-ops``; paths are local filesystem paths (the spec marks them
temporary, to go once engines speak Arrow). These values are what the planner produces and what
an engine (in-process or behind gRPC) consumes; they import nothing from Spark.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from coordinator.identity.dataset_id import DatasetId
from coordinator.ingest.vocab import Vocab
from coordinator.metadata import model as m
from coordinator.metadata.timestamp import Timestamp


@dataclass(frozen=True, slots=True, kw_only=True)
class Watermark:
    """An explicit watermark found in an input block (``newWatermark`` + the block's time)."""

    system_time: Timestamp
    event_time: Timestamp


@dataclass(frozen=True, slots=True, kw_only=True)
class TransformRequestInput:
    """One input of a transform request (``TransformRequestInput.json``)."""

    dataset_id: DatasetId
    dataset_alias: str
    query_alias: str
    vocab: Vocab
    offset_interval: m.OffsetInterval | None
    data_paths: tuple[Path, ...]
    schema_file: Path | None
    explicit_watermarks: tuple[Watermark, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TransformRequest:
    """A request to run one transform step (``TransformRequest.json``)."""

    dataset_id: DatasetId
    dataset_alias: str
    system_time: Timestamp
    vocab: Vocab
    transform: m.TransformSql
    query_inputs: tuple[TransformRequestInput, ...]
    next_offset: int
    prev_checkpoint_path: Path | None
    new_checkpoint_path: Path
    new_data_path: Path
    arrow_output: bool = False
    """The caller would rather have the data as an Arrow IPC file at
    ``coordinator.transform.output.arrow_output_path(new_data_path)`` than as Parquet (a
    replay, which only hashes it; see :mod:`coordinator.transform.output`). odf-node's own
    engines only; kamu's protocol has no such field, so it is never encoded and kamu's engines
    write Parquet as always."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TransformSuccess:
    """The engine ran the query; output (if any) is at ``new_data_path``."""

    new_offset_interval: m.OffsetInterval | None = None
    new_watermark: Timestamp | None = None
    arrow_output: bool = False
    """The data (if any) is the Arrow IPC file asked for with ``TransformRequest.arrow_output``
    rather than the Parquet file at ``new_data_path``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TransformInvalidQuery:
    """The query was refused (syntax, sandbox, schema rules)."""

    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TransformInternalError:
    """The engine failed for a reason that is not the query's fault."""

    message: str
    backtrace: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TransformMemoryExceeded(TransformInternalError):
    """The engine went over its memory limit during the request and was stopped.

    Produced by the engine's owner (``node.engine_client.EngineClient``), never sent over the
    wire (it is an ``InternalError`` there). The request's output is discarded; the next
    request starts a fresh engine.
    """

    limit_bytes: int
    peak_bytes: int


CPU_LIMIT_SETTING = "engine.cpu_limit_s"
"""The configuration setting of the per-request CPU-time budget (named in the error)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TransformCpuExceeded(TransformInternalError):
    """The engine used more CPU time on the request than its budget and was stopped.

    Produced by the engine's owner (``node.engine_client.EngineClient``), never sent over the
    wire, like :class:`TransformMemoryExceeded`. The budget is per request (a batch of ``n``
    requests gets ``n`` times it); the message names :data:`CPU_LIMIT_SETTING`.
    """

    limit_seconds: float
    used_seconds: float


TransformResponse = TransformSuccess | TransformInvalidQuery | TransformInternalError


@dataclass(frozen=True, slots=True, kw_only=True)
class RawQueryRequest:
    """Run a query over parquet files (``RawQueryRequest.json``; ingest preprocessing).

    The input is registered as the view ``input``; the result is one parquet file.
    """

    input_data_paths: tuple[Path, ...]
    transform: m.TransformSql
    output_data_path: Path


@dataclass(frozen=True, slots=True, kw_only=True)
class RawQuerySuccess:
    """The query ran; ``num_records`` rows are at ``output_data_path``."""

    num_records: int


RawQueryResponse = RawQuerySuccess | TransformInvalidQuery | TransformInternalError


__all__ = [
    "CPU_LIMIT_SETTING",
    "RawQueryRequest",
    "RawQueryResponse",
    "RawQuerySuccess",
    "TransformCpuExceeded",
    "TransformInternalError",
    "TransformInvalidQuery",
    "TransformMemoryExceeded",
    "TransformRequest",
    "TransformRequestInput",
    "TransformResponse",
    "TransformSuccess",
    "Watermark",
]
