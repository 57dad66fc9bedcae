"""The ODF transform on DataFusion, record-for-record what kamu-engine-datafusion does.

Runs on whichever PyPI ``datafusion`` release is importable (one worker process per pinned
release, each in its own virtual environment; see ``docs/engines.md``). The semantics, from
kamu-engine-datafusion's ``src/engine.rs`` (0.8.1 on DataFusion 41, 0.9.0 on DataFusion 51):

* **session**: a fresh context per request, ``target_partitions = 1``, identifiers not
  lower-cased (``enable_ident_normalization = false``), default catalog and schema
  ``odf.odf``. The information schema (on in kamu) is off here: the sandbox allows only the
  inputs, and nothing else changes with it;
* **inputs**: the listed slice files, read as one parquet table (no sort), filtered to
  ``offset BETWEEN start AND end``; an input without new data reads its schema file and keeps
  no row. With one target partition DataFusion reads the files of a table in path order, and
  kamu mounts each file under its physical hash, so rows come out in **physical-hash name
  order**: the files are linked into a per-input directory under those names here;
* **steps**: each query step becomes a view (``__output__`` for the step without alias) once
  the sandbox (:mod:`engine.datafusion_sandbox`) accepted it;
* **normalisation**: every timestamp column becomes ``Timestamp(ms, "UTC")``; an ``op`` of type
  i8/u8/i16/u16/u32 becomes Int32; then the checks: no ``offset``/``system_time`` column,
  ``op`` Int32, ``event_time`` a date or a UTC timestamp;
* **system columns**: ``offset`` Int64 counting from ``nextOffset`` in output order, ``op``
  Int32 0 when the query dropped it, ``system_time`` the request's time in ms UTC; columns
  ``offset, op, system_time, event_time, <data columns>``;
* **output**: one snappy parquet file (data pages v1, dictionary encoding). Strings of
  DataFusion 51 come out as string views; they are written as plain strings (arrow-digest
  hashes both alike, and kamu strips the view encoding from the schema it records). Nothing is
  written for an empty result. A request with ``arrow_output`` (a replay) gets an Arrow IPC
  file instead, which its caller hashes, unless the output is larger than
  ``ARROW_OUTPUT_MAX_BYTES`` (``coordinator/transform/output.py``);
* **watermark**: the minimum over inputs of each input's latest explicit watermark in this
  request (inputs without one skipped; none at all: no watermark). **No checkpoint.**

The system columns and the normalisation are applied to the collected Arrow batches rather
than as DataFusion expressions: same values, one code path for both releases (their Python
APIs differ: DataFusion 41 has no ``register_view``).
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import traceback
from pathlib import Path
from typing import Any

import pyarrow as pa

from coordinator.ingest.vocab import Vocab
from coordinator.metadata import model as m
from coordinator.metadata.odf_schema import plain_arrow_type
from coordinator.metadata.timestamp import Timestamp
from coordinator.transform import model as tm
from coordinator.transform.engines import DATAFUSION, datafusion_core, normalize_engine
from coordinator.transform.output import (
    ARROW_OUTPUT_MAX_BYTES,
    arrow_output_path,
    write_arrow_output,
    write_parquet_output,
)
from engine.datafusion_sandbox import check_plan, check_text
from engine.errors import InvalidQuery, SandboxViolation

MS_UTC = pa.timestamp("ms", tz="UTC")
_OP_NARROW = (pa.int8(), pa.uint8(), pa.int16(), pa.uint16(), pa.uint32())


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def datafusion_version() -> str:
    """The importable ``datafusion`` release."""
    import datafusion

    return str(datafusion.__version__)


class DataFusionEngine:
    """Executes :class:`TransformRequest` values on the importable DataFusion release."""

    def __init__(self, *, arrow_max_bytes: int = ARROW_OUTPUT_MAX_BYTES) -> None:
        """Import the release and build the session configuration once. ``arrow_max_bytes``:
        the largest output a request with ``arrow_output`` gets as Arrow IPC (see
        :data:`~coordinator.transform.output.ARROW_OUTPUT_MAX_BYTES`)."""
        import datafusion

        self.arrow_max_bytes = arrow_max_bytes
        self._df = datafusion
        self.version = str(datafusion.__version__)
        self.checks = 0
        """Query plans the sandbox checked (tests)."""
        self._accepted: set[tuple[frozenset[str], tuple[tuple[str | None, str], ...]]] = set()
        """Steps whose plan the sandbox accepted: the input aliases, then the alias and text of
        the step and of every step before it (see :meth:`_run_steps`)."""
        # Built once: a SessionContext takes its own copy of the configuration (a view made in
        # one context is not seen by the next, checked on 41 and 51); building it costs ~0.07
        # ms on 51 (0.01 on 41), measured on the development machine.
        self._config = (
            datafusion.SessionConfig()
            .with_information_schema(False)
            .with_default_catalog_and_schema("odf", "odf")
            .with_target_partitions(1)
            .set("datafusion.sql_parser.enable_ident_normalization", "false")
        )
        self._sql_options = (
            datafusion.SQLOptions()
            .with_allow_ddl(False)
            .with_allow_dml(False)
            .with_allow_statements(False)
        )
        self._offset_nullable = _offset_nullable(self._context())

    # -- session ---------------------------------------------------------------------------

    def _context(self) -> Any:
        """A fresh session (one per request, as kamu's engine)."""
        return self._df.SessionContext(self._config)

    def _options(self) -> Any:
        return self._sql_options

    # -- public ----------------------------------------------------------------------------

    def execute_transform(self, req: tm.TransformRequest) -> tm.TransformResponse:
        """Run the request; never raises for query or engine failures (they are responses)."""
        scratch = Path(tempfile.gettempdir()) / f"odf-df-{secrets.token_hex(8)}"
        try:
            return self._execute(req, scratch)
        except (InvalidQuery, SandboxViolation) as e:
            return tm.TransformInvalidQuery(message=str(e))
        except Exception as e:
            text = str(e)
            if _is_query_error(text):
                return tm.TransformInvalidQuery(message=text.splitlines()[0][:2000])
            return tm.TransformInternalError(
                message=f"{type(e).__name__}: {text.splitlines()[0] if text else ''}",
                backtrace=traceback.format_exc(),
            )
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def execute_raw_query(self, req: tm.RawQueryRequest) -> tm.RawQueryResponse:
        """Run a raw query over ``input`` (the given parquet files); one parquet file out."""
        scratch = Path(tempfile.mkdtemp(prefix="odf-df-"))
        try:
            if not req.transform.queries:
                raise InvalidQuery("the transform has no queries")
            if not req.input_data_paths:
                raise InvalidQuery("no input data")
            ctx = self._context()
            allowed = {"input"}
            raw = self._register_files(ctx, scratch / "input", req.input_data_paths)
            allowed.add(raw)
            ctx.sql(f"CREATE VIEW {_quote('input')} AS SELECT * FROM {_quote(raw)}")
            self._run_steps(ctx, req.transform, allowed, frozenset({"input"}))
            table = self._collect(ctx)
            table = _normalize(table, Vocab())
            _write(table, req.output_data_path)
            return tm.RawQuerySuccess(num_records=table.num_rows)
        except (InvalidQuery, SandboxViolation) as e:
            return tm.TransformInvalidQuery(message=str(e))
        except Exception as e:
            if _is_query_error(str(e)):
                return tm.TransformInvalidQuery(message=str(e).splitlines()[0][:2000])
            return tm.TransformInternalError(message=f"{type(e).__name__}: {e}")
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    # -- steps -----------------------------------------------------------------------------

    def _execute(self, req: tm.TransformRequest, scratch: Path) -> tm.TransformResponse:
        t = req.transform
        if not isinstance(t, m.TransformSql) or not t.queries:
            raise InvalidQuery("the transform has no queries")
        if normalize_engine(t.engine) != DATAFUSION:
            raise InvalidQuery(f"engine {t.engine!r} is not supported, only datafusion")
        wanted = datafusion_core(t.version)
        if wanted is not None and wanted != self.version:
            return tm.TransformInternalError(
                message=f"this worker runs DataFusion {self.version}, the request asks for {wanted}"
            )
        ctx = self._context()
        allowed: set[str] = set()
        for i, inp in enumerate(req.query_inputs):
            paths = inp.data_paths
            keep = inp.offset_interval is not None and bool(paths)
            if not paths:
                if inp.schema_file is None:
                    raise InvalidQuery(f"input {inp.query_alias!r} has no data and no schema")
                paths = (inp.schema_file,)
            raw = self._register_files(ctx, scratch / f"in{i}", tuple(paths))
            off = _quote(inp.vocab.offset_column)
            if keep:
                assert inp.offset_interval is not None
                where = (
                    f"{off} >= {int(inp.offset_interval.start)} AND "
                    f"{off} <= {int(inp.offset_interval.end)}"
                )
            else:
                where = "false"
            ctx.sql(
                f"CREATE VIEW {_quote(inp.query_alias)} AS SELECT * FROM {_quote(raw)} "
                f"WHERE {where}"
            )
            allowed |= {inp.query_alias, raw}
        self._run_steps(ctx, t, allowed, frozenset(i.query_alias for i in req.query_inputs))
        table = self._collect(ctx)
        vocab = req.vocab
        table = _normalize(table, vocab)
        _validate(table.schema, vocab)
        table = _with_system_columns(
            table, vocab, req.system_time, req.next_offset, offset_nullable=self._offset_nullable
        )
        arrow = req.arrow_output and table.num_rows > 0 and table.nbytes <= self.arrow_max_bytes
        if arrow:
            write_arrow_output(table, arrow_output_path(req.new_data_path))
        elif table.num_rows:
            _write(table, req.new_data_path)
        marks = [
            max(w.event_time for w in inp.explicit_watermarks)
            for inp in req.query_inputs
            if inp.explicit_watermarks
        ]
        interval = (
            m.OffsetInterval(start=req.next_offset, end=req.next_offset + table.num_rows - 1)
            if table.num_rows
            else None
        )
        return tm.TransformSuccess(
            new_offset_interval=interval,
            new_watermark=min(marks) if marks else None,
            arrow_output=arrow,
        )

    @staticmethod
    def _register_files(ctx: Any, folder: Path, paths: tuple[Path, ...]) -> str:
        """Link ``paths`` into ``folder`` under their own names; register it as a raw table.

        The raw table's name is random, so a published query cannot name it (the sandbox also
        refuses any relation that is not an input view).
        """
        name = f"__odf_raw_{secrets.token_hex(8)}"
        if len(paths) == 1:
            # One file has one order: no directory of links needed (saves ~1 ms of
            # filesystem calls per request, most of a small block's engine time).
            ctx.register_parquet(name, str(paths[0]), file_extension="")
            return name
        folder.mkdir(parents=True)
        for p in paths:
            target = folder / p.name
            if target.exists():
                continue  # the same file listed twice is read once
            os.symlink(p.resolve(), target)
        ctx.register_parquet(name, str(folder), file_extension="")
        return name

    def _run_steps(
        self, ctx: Any, transform: m.TransformSql, allowed: set[str], inputs: frozenset[str]
    ) -> None:
        steps: tuple[tuple[str | None, str], ...] = ()
        for step in transform.queries or ():
            name = step.alias if step.alias is not None else "__output__"
            check_text(step.query)
            df = ctx.sql_with_options(step.query, self._options())
            # What a plan scans and calls follows from the steps and the names they can see:
            # the input views (ours, the same filter over each request's slice files, under a
            # random raw-table name no text can know) and the earlier steps, each accepted
            # before it became a view. The column types can change between blocks, but no
            # coercion adds a scan or a denied function. So a step accepted once with the same
            # inputs and the same earlier steps is accepted again without printing and checking
            # its plan (~0.1 ms a step, measured on the development machine).
            steps += ((step.alias, step.query),)
            key = (inputs, steps)
            if key not in self._accepted:
                check_plan(df.logical_plan().display_indent(), allowed)
                self.checks += 1
                if len(self._accepted) >= 1024:
                    self._accepted.clear()
                self._accepted.add(key)
            register = getattr(ctx, "register_view", None)
            if register is not None:
                register(name, df)
            else:
                # DataFusion 41's Python API has no register_view: the accepted text becomes a
                # view through our own (trusted) CREATE VIEW around it.
                ctx.sql(f"CREATE VIEW {_quote(name)} AS {step.query}")
            allowed.add(name)

    @staticmethod
    def _collect(ctx: Any) -> pa.Table:
        df = ctx.table("__output__")
        planned = df.schema()
        batches = df.collect()
        if not batches:
            return pa.Table.from_batches([], schema=planned)
        # Batches may disagree with the plan and with each other on nullability (41; the
        # branches of a UNION): a field is nullable if any of them says so. Types agree.
        fields = []
        for i, f in enumerate(batches[0].schema):
            nullable = planned.field(i).nullable or any(b.schema.field(i).nullable for b in batches)
            fields.append(f.with_nullable(nullable))
        schema = pa.schema(fields)
        return pa.Table.from_batches(
            [pa.RecordBatch.from_arrays(b.columns, schema=schema) for b in batches], schema=schema
        )


def _is_query_error(text: str) -> bool:
    return any(
        k in text
        for k in (
            "Plan(",
            "SQL(",
            "Schema error",
            "SchemaError",
            "ParserError",
            "Error during planning",
        )
    )


def _normalize(table: pa.Table, vocab: Vocab) -> pa.Table:
    """Timestamps to ms UTC; a narrow ``op`` to Int32; string views to plain strings."""
    cols: list[Any] = []
    fields: list[pa.Field] = []
    for f, column in zip(table.schema, table.columns, strict=True):
        t = f.type
        col = column
        if pa.types.is_timestamp(t) and not (t.unit == "ms" and t.tz == "UTC"):
            # Values are UTC instants whatever the zone label (a naive one is read as UTC, as
            # arrow-rs casts to the "UTC" zone); ns -> ms truncates, as arrow-rs does.
            col = col.cast(pa.timestamp(t.unit, tz="UTC")).cast(MS_UTC, safe=False)
            t = MS_UTC
        elif f.name == vocab.operation_type_column and any(t.equals(x) for x in _OP_NARROW):
            col = col.cast(pa.int32())
            t = pa.int32()
        elif plain_arrow_type(t) != t:
            t = plain_arrow_type(t)
            col = col.cast(t)
        cols.append(col)
        fields.append(pa.field(f.name, t, nullable=f.nullable))
    return pa.Table.from_arrays(cols, schema=pa.schema(fields))


def _validate(schema: pa.Schema, vocab: Vocab) -> None:
    for sys_col in (vocab.offset_column, vocab.system_time_column):
        if sys_col in schema.names:
            raise InvalidQuery(
                "transformed data contains a column that conflicts with the system column "
                f"name: {sys_col}"
            )
    op = vocab.operation_type_column
    if op in schema.names and not schema.field(op).type.equals(pa.int32()):
        raise InvalidQuery(
            f"operation type column {op!r} should be Int32, but found: {schema.field(op).type}"
        )
    et = vocab.event_time_column
    if et not in schema.names:
        raise InvalidQuery(
            f"event time column {et} was not found amongst: {', '.join(schema.names)}"
        )
    t = schema.field(et).type
    if pa.types.is_date(t):
        return
    if pa.types.is_timestamp(t):
        if t.tz in ("UTC", "+00:00"):
            return
        raise InvalidQuery(f"event time column {et!r} should be adjusted to UTC, found {t}")
    raise InvalidQuery(f"event time column {et!r} should be either Date or Timestamp, found {t}")


def _offset_nullable(ctx: Any) -> bool:
    """Whether this release types kamu's ``offset`` expression as nullable.

    kamu's engine computes ``offset`` as ``CAST(row_number() OVER (PARTITION BY 1 ORDER BY
    NULL) + k AS BIGINT)`` and writes the file with the plan's schema: DataFusion 41 types
    ``row_number()`` as nullable (kamu's engine 0.8.1 wrote ``OPTIONAL INT64 offset``), 51 as
    NOT NULL (0.9.0: ``REQUIRED``; kamu-cli 4df19203f changed its test's expectation). Asked
    of the release itself rather than keyed on its version number.
    """
    df = ctx.sql(
        "SELECT CAST(row_number() OVER (PARTITION BY 1 ORDER BY NULL) + 1 AS BIGINT) AS o "
        "FROM (VALUES (1))"
    )
    return bool(df.schema().field(0).nullable)


def _with_system_columns(
    table: pa.Table,
    vocab: Vocab,
    system_time: Timestamp,
    next_offset: int,
    *,
    offset_nullable: bool = False,
) -> pa.Table:
    import numpy as np

    n = table.num_rows
    offsets = pa.array(np.arange(next_offset, next_offset + n, dtype=np.int64), pa.int64())
    op = vocab.operation_type_column
    if op in table.schema.names:
        op_col = table.column(op)
        op_field = table.schema.field(op)
    else:
        op_col = pa.array(np.zeros(n, dtype=np.int32), pa.int32())
        op_field = pa.field(op, pa.int32(), nullable=False)
    st_ms = system_time.epoch_ns // 1_000_000
    st = pa.array(np.full(n, st_ms, dtype=np.int64), pa.int64()).cast(MS_UTC)
    et = vocab.event_time_column
    data = [c for c in table.schema.names if c not in (et, op)]
    cols: list[Any] = [offsets, op_col, st, table.column(et)]
    fields = [
        pa.field(vocab.offset_column, pa.int64(), nullable=offset_nullable),
        op_field,
        pa.field(vocab.system_time_column, MS_UTC, nullable=False),
        table.schema.field(et),
    ]
    for c in data:
        cols.append(table.column(c))
        fields.append(table.schema.field(c))
    return pa.Table.from_arrays(cols, schema=pa.schema(fields))


def _write(table: pa.Table, target: Path) -> None:
    """One snappy parquet file, data pages v1, dictionaries on, no embedded Arrow schema."""
    # Written in place: the engine's owner removes a partial file of a failed request.
    target.parent.mkdir(parents=True, exist_ok=True)
    write_parquet_output(table, target)


__all__ = ["DataFusionEngine", "InvalidQuery", "datafusion_version"]
