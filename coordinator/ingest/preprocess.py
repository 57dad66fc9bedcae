"""Preprocess queries of push and polling sources (``preprocess: kind: Sql``), on an engine.

kamu-cli runs a source's preprocess query on the read data before the merge (kamu-cli,
``src/infra/core/src/services/ingest/ingest_common.rs``, ``preprocess``): the rows read from
one input are the view ``input``; the query (or its ``queries`` steps, each visible under its
``alias``) gives the rows that are merged and written. Here each input is read as usual
(bounded batches, the read step's schema), written to a Parquet file, and handed to the
engine worker as a raw query (``RawQueryRequest``), so the query runs in the engine's sandbox
under the same rules as a stranger's transform (``engine/sandbox.py``: no file, network or
UDF access). Its Parquet output is what the merge reads, with the schema the query gave
(top-level timestamps normalised to ms UTC as for the read step's).

Every input's output must have the same schema (the dataset has one). The output of one input
is read back in bounded batches; the engine itself holds what its query needs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from coordinator.errors import IncompatibleSchema, IngestError, UnsupportedPreprocess
from coordinator.ingest.ddl import normalize_schema
from coordinator.ingest.inputs import InputFile
from coordinator.ingest.prepare import DEFAULT_MAX_DECOMPRESSED_BYTES
from coordinator.ingest.readers import DEFAULT_BLOCK_BYTES, read_batches, read_schema
from coordinator.metadata import model as m
from coordinator.transform.model import (
    RawQueryRequest,
    RawQueryResponse,
    RawQuerySuccess,
    TransformInvalidQuery,
)

__all__ = ["PreprocessEngine", "preprocess_inputs"]

_ENGINES = ("datafusion", "spark")


class PreprocessEngine(Protocol):
    """What a preprocess needs of the engines (the node's engine router)."""

    def execute_raw_query(self, request: RawQueryRequest) -> RawQueryResponse:
        """Run ``request`` on the engine its transform names."""
        ...


def check_preprocess(transform: m.TransformSql) -> None:
    """Refuse a preprocess this node cannot run.

    Raises:
        UnsupportedPreprocess: an engine other than DataFusion or Spark, or no query.
    """
    if transform.engine.lower() not in _ENGINES:
        raise UnsupportedPreprocess(
            f"preprocess engine {transform.engine!r} is not available; use datafusion or spark"
        )
    if not transform.queries and not transform.query:
        raise UnsupportedPreprocess("the preprocess transform has no query")


def _queries(transform: m.TransformSql) -> m.TransformSql:
    if transform.query is not None and not transform.queries:
        return replace(transform, query=None, queries=(m.SqlQueryStep(query=transform.query),))
    return transform


def preprocess_inputs(
    read: m.ReadStep,
    transform: m.TransformSql,
    inputs: Sequence[InputFile],
    workdir: Path,
    engine: PreprocessEngine,
    *,
    prepare: Callable[[Path, int], Path] | None = None,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> tuple[pa.Schema | None, list[InputFile]]:
    """Run the preprocess query over each input: (the output schema, the outputs as inputs).

    The outputs keep each input's event time and source state. An empty input stays empty
    (kamu skips the query for it); the schema is None if every input was empty.

    Raises:
        UnsupportedPreprocess: see :func:`check_preprocess`.
        IngestError: the query is invalid or failed on the engine (its message).
        IncompatibleSchema: two inputs gave different schemas.
        BadInputData and the other read errors of the input.
    """
    check_preprocess(transform)
    transform = _queries(transform)
    out: list[InputFile] = []
    schema: pa.Schema | None = None
    for index, item in enumerate(inputs):
        path = item.path if prepare is None else prepare(item.path, index)
        if path.stat().st_size == 0:
            out.append(replace(item, path=path))
            continue
        schema_in = read_schema(read, path)
        raw_in = workdir / f"preprocess-in-{index}.parquet"
        raw_out = workdir / f"preprocess-out-{index}.parquet"
        with pq.ParquetWriter(raw_in, schema_in) as writer:
            for batch in read_batches(
                read, path, block_bytes=block_bytes, max_decompressed_bytes=max_decompressed_bytes
            ):
                writer.write_batch(batch)
        if path != item.path:
            path.unlink(missing_ok=True)
        resp = engine.execute_raw_query(
            RawQueryRequest(
                input_data_paths=(raw_in,), transform=transform, output_data_path=raw_out
            )
        )
        raw_in.unlink(missing_ok=True)
        if isinstance(resp, TransformInvalidQuery):
            raise IngestError(f"the preprocess query is invalid: {resp.message}")
        if not isinstance(resp, RawQuerySuccess):
            raise IngestError(f"the preprocess query failed on the engine: {resp.message}")
        got = normalize_schema(pq.read_schema(raw_out).remove_metadata())
        if schema is None:
            schema = got
        elif not got.equals(schema):
            raise IncompatibleSchema(
                f"the preprocess query gave different schemas for two inputs: {schema} vs {got}"
            )
        out.append(replace(item, path=raw_out))
    return schema, out
