"""Streaming readers: CSV, NDJSON, JSON, GeoJSON, NDGeoJSON and Parquet -> Arrow record batches.

Every reader yields batches that conform to the read step's declared DDL schema after kamu's
normalisation (top-level timestamps as ``timestamp[ms, tz=UTC]``, see
:func:`coordinator.ingest.ddl.normalize_schema`), in bounded pieces (about ``block_bytes`` per
batch: Arrow data for CSV, input text for NDJSON/JSON; row groups for Parquet), so a file of any
size is read with bounded memory.

Semantics follow kamu-cli v0.153 (``kamu-ingest-datafusion`` readers, arrow-rs parsers):

* **CSV**: columns are taken *by position* and named by the schema (a header line, when
  ``header: true``, is skipped, not matched); ``header`` defaults to false; empty fields are
  null for every type (arrow-rs); ``separator``/``quote``/``escape`` must be single ASCII
  characters; ``encoding`` must be ``utf8``. Extensions over kamu (which refuses them):
  ``nullValue`` other than the empty string, and ``dateFormat``/``timestampFormat`` given as
  ``strptime`` patterns (``%Y-%m-%d``...). ``rfc3339`` (the default) parses as described in
  :mod:`coordinator.ingest.convert`.
* **NDJSON**: one object per line, fields matched by name, unknown fields ignored, missing
  fields null, blank lines skipped.
* **JSON**: a document whose root (or the value at the dot-separated ``subPath``) is an array
  of objects; elements are streamed out of the document as NDJSON text, never loading it
  whole (see :class:`_JsonArrayScanner`).
* **Parquet**: columns matched by name and cast to the declared types.
* **GeoJSON** (a ``FeatureCollection``; its ``features`` array streamed like a JSON document's
  ``subPath``) and **NDGeoJSON** (one ``Feature`` per line): each feature becomes the record of
  its ``properties`` plus a ``geometry`` column holding the geometry object as compact JSON
  text with sorted keys, then read as NDJSON (kamu's readers re-encode the same way). The
  collection's own ``type`` is not checked (only its ``features``).
* **EsriShapefile**: a zip holding a shapefile; each shape and its ``.dbf`` record become one
  NDJSON record (the fields plus ``geometry``, GeoJSON geometry text), read as NDJSON
  (:mod:`coordinator.ingest.esri_shapefile`, which also says which ``.shp`` is read). The
  archive is streamed, not extracted, and what it decompresses to counts against
  ``max_decompressed_bytes`` (``ingest.max_decompressed_bytes``).

A value that does not fit its column raises :class:`~coordinator.errors.BadInputData`
naming the column and the 1-based record number (and line, for NDJSON). Typed parsing runs
at Arrow speed; only when it fails is the failing block re-read to locate the value.

Input comes from strangers, so every failure is a typed error and nothing can hang or recurse
without bound (limits: ``docs/resource-budget.md``):

* only regular files are read: a FIFO, directory or device (``/dev/zero``) is refused, checked
  on the opened descriptor (opened non-blocking, so opening a FIFO cannot wait for a writer);
* a CSV record may be up to :data:`MAX_CSV_RECORD_BYTES`: Arrow cannot split a record across
  its parse blocks, so a file with a record larger than a block is re-read with larger blocks;
* an NDJSON line or an element of a JSON document's array may be up to
  :data:`MAX_JSON_RECORD_BYTES`; a longer one is refused once that many bytes are read, so a
  file without a newline (or a gigantic string) is never held whole; JSON text is parsed by
  Arrow in pieces of about 2 MiB (Arrow takes about ten times the text);
* JSON records are parsed by Arrow (iteratively, no nesting limit); Python's ``json`` only
  decodes the records of a failing chunk up to 1 MiB, to explain the failure (a value nested
  deeper than the interpreter's recursion limit, about 1,000 levels, is then blamed), and the
  keys on the way to a JSON document's ``subPath``;
* text must be UTF-8, including at the very end of the file (a truncated sequence).
"""

from __future__ import annotations

import codecs
import csv as pycsv
import io
import json
import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from coordinator.errors import BadInputData, UnsupportedReadOption
from coordinator.ingest.convert import (
    ConversionFailure,
    cast_column,
    clip,
    parse_dates,
    parse_timestamps,
    shown,
)
from coordinator.ingest.ddl import normalize_schema, parse_ddl
from coordinator.ingest.prepare import DEFAULT_MAX_DECOMPRESSED_BYTES
from coordinator.metadata import model as m
from coordinator.metadata.odf_schema import to_arrow as odf_to_arrow

__all__ = [
    "DEFAULT_BLOCK_BYTES",
    "MAX_CSV_RECORD_BYTES",
    "MAX_JSON_RECORD_BYTES",
    "ByteProgress",
    "read_batches",
    "read_parquet_as",
    "read_schema",
]

#: Data per batch: Arrow bytes for CSV (coalesced from 1 MiB blocks), input bytes for
#: NDJSON / JSON chunks.
DEFAULT_BLOCK_BYTES: Final = 4 << 20
_PARQUET_BATCH_ROWS: Final = 128 * 1024
# Arrow's streaming CSV reader holds a few dozen blocks in flight (peak memory is ~35x the
# block size), so it reads small blocks which are then coalesced to ``block_bytes``.
_CSV_ARROW_BLOCK: Final = 1 << 20
#: Largest CSV record (one row, all of its fields, in bytes) that is always ingested. Arrow
#: reads a record spanning two parse blocks but not three, so a record that does not fit makes
#: the file be re-read with blocks 4x larger, up to this size; a record Arrow still cannot read
#: is refused. Arrow reads up to 32 blocks ahead of the parser whatever the input, so its peak
#: memory is about 35x the block: 4 MiB blocks keep it near 150 MiB (64 MiB blocks took
#: 2.2 GB on a 1 GiB file without a newline).
MAX_CSV_RECORD_BYTES: Final = 4 << 20
#: Largest NDJSON line, or element of a JSON document's array (one record), that is read; a
#: longer one is refused as soon as that many bytes are read without its end. Arrow's JSON
#: parser takes several times the record's size (numbers are kept as text, then converted).
MAX_JSON_RECORD_BYTES: Final = 8 << 20
# Records up to this size are decoded by Python's json to explain why Arrow refused a chunk.
_PY_DIAGNOSE_BYTES: Final = 1 << 20
_JSON_READ_BYTES: Final = 2 << 20
# Input text per Arrow JSON parse: Arrow takes about ten times the text of small records
# (58 MiB for 8 MiB of ``{"city":"a"}`` lines), so JSON is parsed in smaller pieces than CSV.
_JSON_CHUNK_BYTES: Final = 2 << 20
_TOO_DEEP: Final = (
    "JSON value nested too deeply (more than the interpreter's recursion limit, ~1,000 levels)"
)

#: Called with the number of input bytes consumed so far.
ByteProgress = Callable[[int], None]


def read_schema(read: m.ReadStep, sample: Path | None = None) -> pa.Schema:
    """The normalised schema of what ``read`` produces (timestamps in ms/UTC).

    The schema is the step's DDL (``ddlSchema``, spec v0.34 ``schema``) parsed, or its ODF
    schema (spec v0.38 ``schema``) converted as kamu's readers do (default ``ToArrowSettings``;
    ODF fields are NOT NULL unless ``Option``). A ``Parquet`` step that declares none reads
    the file's own schema (``sample``: the input), as kamu's Parquet reader does: a Parquet
    file carries its schema, nothing is inferred (kamu-contrib's ``EthereumLogs`` sources read
    their fetched Parquet this way).

    Raises:
        UnsupportedReadOption: the step has no schema or is a format that cannot be read.
        InvalidDdlSchema: the DDL does not parse.
        UnsupportedOdfSchema: the ODF schema has no Arrow form.
        BadInputData: ``sample`` is not a Parquet file.
    """
    _check_format(read)
    ddl = read.ddl_schema
    if not ddl and read.schema is not None and read.schema.fields:
        return normalize_schema(odf_to_arrow(read.schema))
    if not ddl and isinstance(read, m.ReadStepParquet) and sample is not None:
        return _parquet_file_schema(sample)
    if not ddl:
        raise UnsupportedReadOption(
            f"{type(read).__name__} has no schema; push ingest needs an explicit DDL schema "
            "(schema inference is not supported)"
        )
    return normalize_schema(parse_ddl(ddl))


def _check_format(read: m.ReadStep) -> None:
    encoding = getattr(read, "encoding", None)
    if encoding not in (None, "utf8"):
        raise UnsupportedReadOption(
            f"unsupported encoding {encoding!r}: only utf8 is supported (as in kamu)"
        )


def _open_input(path: Path) -> io.BufferedReader:
    """Open an input file for reading, refusing anything but a regular file.

    The type is checked on the opened descriptor (no race with a rename), and the open is
    non-blocking: opening a FIFO with no writer would otherwise wait forever.

    Raises:
        BadInputData: missing, not a regular file (FIFO, directory, device), or unreadable.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise BadInputData("input file not found", path=str(path)) from None
    except OSError as e:
        raise BadInputData(f"cannot open input file: {e.strerror}", path=str(path)) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BadInputData(
                "not a regular file (a FIFO, directory or device cannot be ingested)",
                path=str(path),
            )
        os.set_blocking(fd, True)
        return open(fd, "rb")  # the caller closes it
    except BaseException:
        os.close(fd)
        raise


def _input_size(path: Path) -> int:
    """The size of a regular input file (see :func:`_open_input`)."""
    with _open_input(path) as f:
        return os.fstat(f.fileno()).st_size


def read_batches(
    read: m.ReadStep,
    path: Path,
    *,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    on_bytes: ByteProgress | None = None,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> Iterator[pa.RecordBatch]:
    """Stream ``path`` as batches of :func:`read_schema` (``read``).

    An empty file yields nothing. Errors are raised lazily, while iterating, except that
    ``path`` must be a regular file (checked at once). ``max_decompressed_bytes`` bounds what
    an archive read step (``EsriShapefile``) may decompress to.

    Raises:
        BadInputData: a value or record does not match the schema (column and row named), the
            input is not valid text, or ``path`` is missing or not a regular file.
        UnsupportedReadOption: an option this reader cannot honour.
        DecompressBudgetExceeded: an ``EsriShapefile`` archive decompresses to more than
            ``max_decompressed_bytes``.
    """
    if _input_size(path) == 0:
        return iter(())
    schema = read_schema(read, path)
    if isinstance(read, m.ReadStepCsv):
        return _CsvReader(read, path, schema, block_bytes, on_bytes).batches()
    if isinstance(read, m.ReadStepNdJson):
        return _ndjson_batches(
            _ndjson_chunks(path, min(block_bytes, _JSON_CHUNK_BYTES), on_bytes),
            schema,
            _Formats.of(read),
            str(path),
        )
    if isinstance(read, m.ReadStepJson):
        return _ndjson_batches(
            _json_document_chunks(
                path, read.sub_path, min(block_bytes, _JSON_CHUNK_BYTES), on_bytes
            ),
            schema,
            _Formats.of(read),
            str(path),
        )
    if isinstance(read, m.ReadStepParquet):
        return _parquet_batches(path, schema, on_bytes)
    if isinstance(read, m.ReadStepNdGeoJson):
        chunks = _ndjson_chunks(path, min(block_bytes, _JSON_CHUNK_BYTES), on_bytes)
        return _ndjson_batches(_features(chunks, path), schema, _Formats.of(read), str(path))
    if isinstance(read, m.ReadStepGeoJson):
        chunks = _json_document_chunks(
            path, "features", min(block_bytes, _JSON_CHUNK_BYTES), on_bytes
        )
        return _ndjson_batches(_features(chunks, path), schema, _Formats.of(read), str(path))
    if isinstance(read, m.ReadStepEsriShapefile):
        return _ndjson_batches(
            _shapefile_chunks(
                read, path, min(block_bytes, _JSON_CHUNK_BYTES), on_bytes, max_decompressed_bytes
            ),
            schema,
            _Formats(None, None),
            str(path),
        )
    raise UnsupportedReadOption(f"{type(read).__name__} input is not supported yet")


# --------------------------------------------------------------------------------------------
# Shared conversion helpers
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Formats:
    date: str | None
    timestamp: str | None

    @classmethod
    def of(cls, read: Any) -> _Formats:
        return cls(
            _check_time_format(getattr(read, "date_format", None), "dateFormat"),
            _check_time_format(getattr(read, "timestamp_format", None), "timestampFormat"),
        )


def _check_time_format(fmt: str | None, option: str) -> str | None:
    if fmt is None or fmt == "rfc3339":
        return None
    if "%" not in fmt:
        raise UnsupportedReadOption(
            f"unsupported {option} {fmt!r}: use 'rfc3339' or a strptime pattern such as "
            "'%Y-%m-%d %H:%M:%S'"
        )
    return fmt


def _needs_text(typ: pa.DataType, formats: _Formats) -> bool:
    """Columns read as text and converted by :mod:`convert` (timestamps; dates with a format)."""
    return pa.types.is_timestamp(typ) or (pa.types.is_date(typ) and formats.date is not None)


def _convert_text_column(arr: pa.Array, typ: pa.DataType, formats: _Formats) -> pa.Array:
    if pa.types.is_timestamp(typ):
        return parse_timestamps(arr, formats.timestamp)
    return parse_dates(arr, formats.date)


def _check_not_null(batch: pa.RecordBatch, schema: pa.Schema, row_base: int, path: str) -> None:
    for i, field in enumerate(schema):
        if field.nullable:
            continue
        col = batch.column(i)
        if col.null_count:
            index = pc.index(col.is_null(), True).as_py()
            raise BadInputData(
                "null value in a NOT NULL column",
                path=path,
                column=field.name,
                row=row_base + index + 1,
            )


class _NativeInput:
    """An input file as an Arrow native file, for Arrow's streaming CSV reader.

    Arrow reads ahead on threads of its own. Given a Python file object, those threads call
    into Python, and the blocks they read hold Python objects that they release later: an
    Arrow thread taking the GIL while the interpreter exits is killed inside C++, which
    aborted the process ("terminate called without an active exception") after an abandoned
    read (an error, a re-read with larger blocks). A native file keeps Python out of them.
    The file is checked and opened by :func:`_open_input`; Arrow opens the same file again
    through ``/proc/self/fd`` (no race with a rename).
    """

    def __init__(self, path: Path, on_bytes: ByteProgress | None) -> None:
        self._f: io.BufferedReader = _open_input(path)
        self._on_bytes = on_bytes
        try:
            self.arrow = pa.OSFile(f"/proc/self/fd/{self._f.fileno()}", "rb")
        except BaseException:
            self._f.close()
            raise

    def report(self) -> None:
        """Report how far Arrow has read (its read-ahead included)."""
        if self._on_bytes is not None:
            self._on_bytes(self.arrow.tell())

    def close(self) -> None:
        try:
            self.arrow.close()
        finally:
            self._f.close()


# --------------------------------------------------------------------------------------------
# CSV
# --------------------------------------------------------------------------------------------


def _coalesce(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    combined = pa.Table.from_batches(batches).combine_chunks().to_batches()
    return combined[0] if combined else batches[0]


def _single_char(value: str | None, option: str, default: str | None) -> str | None:
    if value is None or value == "":
        return default
    if len(value) != 1 or not value.isascii():
        raise UnsupportedReadOption(
            f"Csv.{option} supports only single-character ascii values, got: {value!r}"
        )
    return value


_TRUE_VALUES: Final = ("true", "True", "TRUE")
_FALSE_VALUES: Final = ("false", "False", "FALSE")


def _check_booleans(text: pa.Array) -> None:
    """Raise :class:`ConversionFailure` at the first value that is not a CSV boolean."""
    ok = pc.is_in(text, value_set=pa.array(_TRUE_VALUES + _FALSE_VALUES))
    bad = pc.and_(text.is_valid(), pc.invert(ok))
    if pc.any(bad).as_py():
        index = pc.index(bad, True).as_py()
        value = text[index].as_py()
        raise ConversionFailure(index, value, f"cannot convert {shown(value)} to bool")


class _RecordTooLarge(Exception):
    """A CSV record does not fit Arrow's parse block (``row``: about where, 1-based)."""

    def __init__(self, row: int) -> None:
        super().__init__(f"record {row} does not fit the parse block")
        self.row = row


class _CsvReader:
    def __init__(
        self,
        read: m.ReadStepCsv,
        path: Path,
        schema: pa.Schema,
        block_bytes: int,
        on_bytes: ByteProgress | None,
    ) -> None:
        self.read = read
        self.path = path
        self.schema = schema
        self.block_bytes = block_bytes
        self.on_bytes = on_bytes
        self.formats = _Formats.of(read)
        self.header = bool(read.header)
        self.delimiter = _single_char(read.separator, "separator", ",")
        self.quote = _single_char(read.quote, "quote", '"')
        self.escape = _single_char(read.escape, "escape", None)
        self.null_value = read.null_value if read.null_value is not None else ""
        for field in schema:
            t = field.type
            if pa.types.is_nested(t) or pa.types.is_interval(t):
                raise UnsupportedReadOption(
                    f"CSV column {field.name!r} has type {t}, which CSV cannot hold"
                )
        self.text_columns = {f.name for f in schema if _needs_text(f.type, self.formats)}

    def _options(
        self, all_text: bool, arrow_block: int
    ) -> tuple[pacsv.ReadOptions, pacsv.ParseOptions, pacsv.ConvertOptions]:
        read_options = pacsv.ReadOptions(
            column_names=self.schema.names,
            skip_rows=1 if self.header else 0,
            block_size=arrow_block,
            use_threads=True,
        )
        parse_options = pacsv.ParseOptions(
            delimiter=self.delimiter,
            quote_char=self.quote if self.quote is not None else False,
            double_quote=True,
            escape_char=self.escape if self.escape is not None else False,
            newlines_in_values=True,
            ignore_empty_lines=True,
        )
        types: dict[str, pa.DataType] = {}
        for f in self.schema:
            text = all_text or f.name in self.text_columns
            types[f.name] = pa.string() if text else f.type
        convert_options = pacsv.ConvertOptions(
            column_types=types,
            null_values=[self.null_value],
            strings_can_be_null=True,
            quoted_strings_can_be_null=True,
            true_values=list(_TRUE_VALUES),
            false_values=list(_FALSE_VALUES),
        )
        return read_options, parse_options, convert_options

    def _open(
        self, all_text: bool, on_bytes: ByteProgress | None, arrow_block: int
    ) -> tuple[Any, _NativeInput]:
        f = _NativeInput(self.path, on_bytes)
        try:
            ro, po, co = self._options(all_text, arrow_block)
            reader = pacsv.open_csv(f.arrow, read_options=ro, parse_options=po, convert_options=co)
            return reader, f
        except BaseException:
            f.close()
            raise

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The file's batches; re-read with larger Arrow blocks while a record does not fit."""
        arrow_block = min(self.block_bytes, _CSV_ARROW_BLOCK)
        done = 0  # rows yielded, over every attempt
        high = 0

        def progress(n: int) -> None:  # a re-read does not move the progress back
            nonlocal high
            if n > high:
                high = n
                if self.on_bytes is not None:
                    self.on_bytes(n)

        while True:
            try:
                for out in self._attempt(arrow_block, done, progress):
                    done += out.num_rows
                    yield out
                return
            except _RecordTooLarge as e:
                if arrow_block >= MAX_CSV_RECORD_BYTES:
                    raise BadInputData(
                        f"a CSV record is larger than {MAX_CSV_RECORD_BYTES} bytes, "
                        "the most a record may hold (readers.MAX_CSV_RECORD_BYTES)",
                        path=str(self.path),
                        row=e.row,
                    ) from None
                arrow_block = min(arrow_block * 4, MAX_CSV_RECORD_BYTES)

    def _attempt(
        self, arrow_block: int, skip: int, on_bytes: ByteProgress
    ) -> Iterator[pa.RecordBatch]:
        """Read with ``arrow_block``-byte parse blocks, past the ``skip`` rows already yielded.

        Raises:
            _RecordTooLarge: a record does not fit one parse block.
        """
        rows = skip  # rows finished (yielded by this attempt or an earlier one)
        parsed = 0  # rows Arrow has parsed and converted
        pending: list[pa.RecordBatch] = []
        pending_bytes = 0
        try:
            reader, f = self._open(False, on_bytes, arrow_block)
        except pa.ArrowInvalid as e:
            if "Empty CSV file" in str(e):
                return
            raise self._failure(e, 0, arrow_block) from e
        try:
            while True:
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    break
                except pa.ArrowInvalid as e:
                    raise self._failure(e, parsed, arrow_block) from e
                f.report()
                start = parsed
                parsed += batch.num_rows
                if parsed <= skip:
                    continue
                if start < skip:
                    batch = batch.slice(skip - start)
                pending.append(batch)
                pending_bytes += batch.nbytes
                if pending_bytes >= self.block_bytes:
                    out = self._finish(_coalesce(pending), rows)
                    pending, pending_bytes = [], 0
                    rows += out.num_rows
                    if out.num_rows:
                        yield out
            if pending:
                out = self._finish(_coalesce(pending), rows)
                if out.num_rows:
                    yield out
        finally:
            f.close()

    def _failure(
        self, error: pa.ArrowInvalid, rows_ok: int, arrow_block: int
    ) -> BadInputData | _RecordTooLarge:
        # Arrow's chunker cannot split a record across parse blocks ("straddling object").
        if "straddl" in str(error):
            return _RecordTooLarge(rows_ok + 1)
        return self._diagnose(error, rows_ok, arrow_block)

    def _finish(self, batch: pa.RecordBatch, row_base: int) -> pa.RecordBatch:
        if self.text_columns:
            columns = list(batch.columns)
            for i, field in enumerate(self.schema):
                if field.name in self.text_columns:
                    try:
                        columns[i] = _convert_text_column(columns[i], field.type, self.formats)
                    except ConversionFailure as e:
                        raise BadInputData(
                            e.message,
                            path=str(self.path),
                            column=field.name,
                            row=row_base + e.index + 1,
                        ) from None
            batch = pa.RecordBatch.from_arrays(columns, schema=self.schema)
        elif batch.schema != self.schema:
            batch = pa.RecordBatch.from_arrays(list(batch.columns), schema=self.schema)
        _check_not_null(batch, self.schema, row_base, str(self.path))
        return batch

    def _diagnose(self, error: pa.ArrowInvalid, rows_ok: int, arrow_block: int) -> BadInputData:
        """Locate the record behind a typed-parsing failure by re-reading as text."""
        path = str(self.path)
        rows = 0
        try:
            reader, f = self._open(True, None, arrow_block)
        except pa.ArrowInvalid:
            return self._diagnose_structure(error)
        try:
            while True:
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    break
                except pa.ArrowInvalid:
                    return self._diagnose_structure(error)
                if rows + batch.num_rows <= rows_ok:
                    rows += batch.num_rows
                    continue
                best: tuple[int, str, str] | None = None
                for i, field in enumerate(self.schema):
                    if field.name in self.text_columns or pa.types.is_string(field.type):
                        continue
                    text = pc.utf8_trim_whitespace(batch.column(i))
                    try:
                        if pa.types.is_boolean(field.type):
                            _check_booleans(text)
                        else:
                            cast_column(text, field.type)
                    except ConversionFailure as e:
                        if best is None or e.index < best[0]:
                            best = (e.index, field.name, e.message)
                if best is not None:
                    return BadInputData(best[2], path=path, column=best[1], row=rows + best[0] + 1)
                rows += batch.num_rows
        finally:
            f.close()
        return BadInputData(f"cannot read CSV: {clip(str(error))}", path=path, row=rows_ok + 1)

    def _diagnose_structure(self, error: pa.ArrowInvalid) -> BadInputData:
        """Find a record with the wrong number of fields using Python's csv module."""
        path = str(self.path)
        expected = len(self.schema)
        # Python's csv refuses fields over 128 KiB by default; records up to the ingest limit
        # must be diagnosed (the limit is process-wide, so it is only ever raised).
        if pycsv.field_size_limit() < MAX_CSV_RECORD_BYTES:
            pycsv.field_size_limit(MAX_CSV_RECORD_BYTES)
        fed = 0  # characters handed to the csv module since its last record

        def bounded_lines(f: io.TextIOWrapper) -> Iterator[str]:
            # The csv module reads whole lines, and a record may span lines: both are cut off
            # at the record limit, so a file with no newline is never read whole.
            nonlocal fed
            while line := f.readline(MAX_CSV_RECORD_BYTES + 1):
                fed += len(line)
                if fed > MAX_CSV_RECORD_BYTES:
                    raise _RecordTooLarge(record + 1)
                yield line

        record = 0
        with io.TextIOWrapper(
            _open_input(self.path), newline="", encoding="utf-8", errors="replace"
        ) as f:
            reader = pycsv.reader(
                bounded_lines(f),
                delimiter=self.delimiter or ",",
                quotechar=self.quote,
                escapechar=self.escape,
                doublequote=True,
                quoting=pycsv.QUOTE_MINIMAL if self.quote else pycsv.QUOTE_NONE,
                strict=False,
            )
            try:
                if self.header:
                    next(reader, None)
                    fed = 0
                for fields in reader:
                    fed = 0
                    if not fields:
                        continue
                    record += 1
                    if len(fields) != expected:
                        return BadInputData(
                            f"expected {expected} fields ({', '.join(self.schema.names)}), "
                            f"got {len(fields)}",
                            path=path,
                            row=record,
                            line=reader.line_num,
                        )
            except pycsv.Error as e:  # e.g. a field over the limit set above
                return BadInputData(f"cannot read CSV: {clip(str(e))}", path=path, row=record + 1)
            except _RecordTooLarge as e:
                return BadInputData(
                    f"a CSV record is larger than {MAX_CSV_RECORD_BYTES} bytes, the most a "
                    "record may hold (readers.MAX_CSV_RECORD_BYTES)",
                    path=path,
                    row=e.row,
                )
        return BadInputData(f"cannot read CSV: {clip(str(error))}", path=path)


# --------------------------------------------------------------------------------------------
# NDJSON and JSON documents
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _JsonChunk:
    """NDJSON text (whole lines): ``first_line`` is the file line of its first line (None for
    the elements of a JSON document, one per line). Record numbers are counted by the caller
    from the rows Arrow parses (it skips blank lines, as the record numbering does), so the
    chunker never splits a chunk into lines."""

    data: bytes
    first_line: int | None


def _lines(data: bytes) -> Iterator[tuple[int, bytes]]:
    """``(index, line)`` for each line of ``data`` (one line at a time, not a list)."""
    start = 0
    index = 0
    while start < len(data):
        end = data.find(b"\n", start)
        if end < 0:
            end = len(data)
        yield index, data[start:end]
        start = end + 1
        index += 1


def _count_records(data: bytes) -> int:
    # Non-blank lines; whitespace-only lines are skipped by the parser as well.
    return sum(1 for _, line in _lines(data) if line.strip())


def _record_too_large(what: str, path: Path, line: int | None) -> BadInputData:
    return BadInputData(
        f"{what} is larger than {MAX_JSON_RECORD_BYTES} bytes, the most a record may hold "
        "(readers.MAX_JSON_RECORD_BYTES)",
        path=str(path),
        line=line,
    )


def _ndjson_chunks(
    path: Path, block_bytes: int, on_bytes: ByteProgress | None
) -> Iterator[_JsonChunk]:
    """Whole lines, about ``block_bytes`` at a time; a line may be up to
    :data:`MAX_JSON_RECORD_BYTES` (a longer one is refused as soon as it is that long, so a
    file with no newline is never held whole)."""
    line = 1
    consumed = 0
    with _open_input(path) as f:
        # The unfinished last line, as a list of pieces: joined once, when its newline comes.
        partial: list[bytes] = []
        partial_size = 0
        while True:
            block = f.read(block_bytes)
            consumed += len(block)
            if not block:
                data = b"".join(partial)
                if data.strip():
                    yield _JsonChunk(data + b"\n", line)
                if on_bytes is not None:
                    on_bytes(consumed)
                return
            first = block.find(b"\n")
            if partial_size + (len(block) if first < 0 else first) > MAX_JSON_RECORD_BYTES:
                raise _record_too_large("an NDJSON line", path, line)
            if first < 0:
                partial.append(block)
                partial_size += len(block)
                continue
            cut = block.rfind(b"\n")
            partial.append(block[: cut + 1])
            data = b"".join(partial)
            partial = [block[cut + 1 :]]
            partial_size = len(block) - cut - 1
            if data.strip():
                yield _JsonChunk(data, line)
            line += data.count(b"\n")
            if on_bytes is not None:
                on_bytes(consumed - partial_size)


def _json_document_chunks(
    path: Path, sub_path: str | None, block_bytes: int, on_bytes: ByteProgress | None
) -> Iterator[_JsonChunk]:
    pending: list[bytes] = []
    size = 0
    scanner = _JsonArrayScanner(path, sub_path, on_bytes)
    for element in scanner.elements():
        pending.append(element)
        size += len(element)
        if size >= block_bytes:
            yield _JsonChunk(b"\n".join(pending) + b"\n", None)
            pending, size = [], 0
    if pending:
        yield _JsonChunk(b"\n".join(pending) + b"\n", None)


# What may follow the opening quote of a JSON string before its end: anything but a quote, a
# backslash or a control character (JSON forbids them raw), and backslash escapes. Possessive
# quantifiers: the match is linear (never backtracks), whatever the input.
_STRING_BODY_PATTERN: Final = rb'[^"\\\x00-\x1f]*+(?:\\[^\x00-\x1f][^"\\\x00-\x1f]*+)*+'
_STRING_BODY: Final = re.compile(_STRING_BODY_PATTERN)
# An object holding no array or object (the usual record), with the separator after it: a run
# of them is delimited by one match and split by one ``findall``, at C speed.
_FLAT_OBJECT: Final = rb'\{(?:[^"\[\]{}]++|"' + _STRING_BODY_PATTERN + rb'")*+\}'
_FLAT_RUN: Final = re.compile(rb"(?:" + _FLAT_OBJECT + rb"[ \t\n\r]*+,[ \t\n\r]*+)*+")
_FLAT: Final = re.compile(_FLAT_OBJECT)
# Bytes between structural characters (numbers, literals, commas, colons, whitespace).
_PLAIN: Final = re.compile(rb'[^"\[\]{}]*+')
_SCALAR: Final = re.compile(rb'[^ \t\n\r,\]}\[{"]*+')
_WS: Final = re.compile(rb"[ \t\n\r]*+")
_NEWLINES: Final = re.compile(rb"[\r\n]")
_SCALAR_TYPES: Final = {ord("["): "list", ord('"'): "str", ord("t"): "bool", ord("f"): "bool"}


class _JsonArrayScanner:
    """Streams the elements of the array at ``sub_path`` of a JSON document as JSON text.

    Mirrors kamu's ``ReaderJson``: ``sub_path`` is split on ``.``; a missing key (or a null)
    is "Sub-path not found", a non-array value "Sub-path does not specify an array".

    The document is scanned as bytes, never decoded whole: values are delimited by tracking
    strings and brackets (linear, resumable across reads), an element is handed out as text
    for Arrow to parse, values skipped on the way to ``sub_path`` are dropped as they are
    scanned (so they may be of any size), and an element larger than
    :data:`MAX_JSON_RECORD_BYTES` is refused. Memory is therefore bounded by the read size
    plus one element, whatever the document. Strings and brackets are checked; the rest of a
    skipped value's grammar is not (the elements themselves are parsed by Arrow).
    """

    def __init__(self, path: Path, sub_path: str | None, on_bytes: ByteProgress | None) -> None:
        self.path = path
        self.keys = sub_path.split(".") if sub_path else []
        self.on_bytes = on_bytes
        self.buf = b""
        self.pos = 0
        self.eof = False
        self._f: BinaryIO | None = None
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self._consumed = 0

    def _fill(self, keep_from: int | None = None) -> bool:
        """Read more input; bytes before ``keep_from`` (default ``pos``) are dropped and
        offsets shift accordingly (``pos`` stays valid). False at the end of the file."""
        assert self._f is not None
        if self.eof:
            return False
        raw = self._f.read(_JSON_READ_BYTES)
        self._consumed += len(raw)
        if self.on_bytes is not None:
            self.on_bytes(self._consumed)
        if not raw:
            self.eof = True
        try:
            # final: a multi-byte sequence cut off by the end of the file is an error too.
            # The decoded text is only checked, not kept: the scan works on the bytes.
            self._utf8.decode(raw, final=not raw)
        except UnicodeDecodeError as e:
            at = self._consumed - len(raw) + e.start - len(self._utf8.getstate()[0])
            raise BadInputData(
                f"invalid UTF-8 near byte offset {max(at, 0)}: {e.reason}", path=str(self.path)
            ) from None
        start = self.pos if keep_from is None else keep_from
        self.buf = self.buf[start:] + raw
        self.pos -= start
        return bool(raw)

    def _skip_ws(self) -> str:
        while True:
            m = _WS.match(self.buf, self.pos)
            assert m is not None
            self.pos = m.end()
            if self.pos < len(self.buf):
                return chr(self.buf[self.pos])
            if not self._fill():
                return ""

    def _more(self, i: int, start: int, keep: bool) -> tuple[int, int]:
        """Read on in the middle of a value scanned from ``start``, now at ``i``: returns the
        two offsets in the new buffer (what lies before ``start`` -- or, when the value is not
        kept, before ``i`` -- is dropped)."""
        keep_from = start if keep else i
        if not self._fill(keep_from):
            raise self._malformed("unexpected end of document")
        return i - keep_from, (start - keep_from if keep else 0)

    def _scan_value(self, keep: bool) -> int:
        """Find the end of the value at ``pos``; returns its end offset.

        With ``keep``, ``pos`` stays at the value's start and the value stays in the buffer
        (refused beyond :data:`MAX_JSON_RECORD_BYTES`); without, what was scanned is dropped
        as the scan goes on (``pos`` is then meaningless until the caller sets it to the
        end), so a skipped value may be of any size. Each byte is looked at once.
        """
        start = i = self.pos
        closers: list[int] = []  # the closing brackets expected, innermost last
        in_string = in_scalar = False
        while True:
            if keep and i - start > MAX_JSON_RECORD_BYTES:
                raise _record_too_large("a JSON array element", self.path, None)
            buf = self.buf
            if in_string:
                m = _STRING_BODY.match(buf, i)
                assert m is not None
                i = m.end()
                # The body stops at the closing quote, a control character, or the end of the
                # buffer -- possibly between a backslash and the character it escapes.
                if not self.eof and (i == len(buf) or (i == len(buf) - 1 and buf[i] == 0x5C)):
                    i, start = self._more(i, start, keep)
                    continue
                if i >= len(buf):
                    raise self._malformed("unexpected end of document")
                if buf[i] != 0x22:
                    raise self._malformed("control character in a string")
                in_string = False
                i += 1
                if not closers:
                    return i
                continue
            if i >= len(buf):
                i, start = self._more(i, start, keep)
                continue
            c = buf[i]
            if c == 0x22:  # '"'
                in_string = True
                i += 1
            elif c in (0x5B, 0x7B):  # '[' '{'
                closers.append(c + 2)  # ']' '}'
                i += 1
            elif c in (0x5D, 0x7D):
                if not closers or closers.pop() != c:
                    raise self._malformed(f"unexpected {chr(c)!r}")
                i += 1
                if not closers:
                    return i
            elif closers:
                m = _PLAIN.match(buf, i)
                assert m is not None
                i = m.end()
            else:  # a scalar at the top: up to a structural character or whitespace
                m = _SCALAR.match(buf, i)
                assert m is not None
                if m.end() == len(buf) and not self.eof:
                    in_scalar = True  # it may go on in the next read
                    i, start = self._more(m.end(), start, keep)
                    continue
                if m.end() == i and not in_scalar:
                    raise self._malformed("expected a value")
                return m.end()

    def _malformed(self, message: str) -> BadInputData:
        return BadInputData(f"malformed JSON document: {message}", path=str(self.path))

    def _where(self) -> str:
        return ".".join(self.keys) if self.keys else "."

    def _not_found(self, upto: int) -> BadInputData:
        return BadInputData(
            f"Sub-path not found: {'.'.join(self.keys[: upto + 1])}", path=str(self.path)
        )

    def _expect(self, ch: str) -> None:
        if self._skip_ws() != ch:
            raise self._malformed(f"expected {ch!r}")
        self.pos += 1

    def _key(self) -> str:
        end = self._scan_value(keep=True)
        try:
            name = json.loads(self.buf[self.pos : end])
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise self._malformed(f"invalid object key: {e}") from None
        self.pos = end
        return str(name)

    def _descend(self) -> None:
        for depth, key in enumerate(self.keys):
            if self._skip_ws() != "{":
                raise self._not_found(depth)
            self.pos += 1
            while True:
                c = self._skip_ws()
                if c == "}":
                    raise self._not_found(depth)
                if c != '"':
                    raise self._malformed("expected an object key")
                name = self._key()
                self._expect(":")
                if name == key:
                    break
                self._skip_ws()
                self.pos = self._scan_value(keep=False)
                c = self._skip_ws()
                if c == ",":
                    self.pos += 1
                elif c == "}":
                    raise self._not_found(depth)
                else:
                    raise self._malformed("expected ',' or '}'")

    def _finish(self) -> None:
        """Read the rest of the file: it must be UTF-8 (a sequence cut off at the end too) and,
        when the array is the document itself, only whitespace (serde_json: "trailing
        characters"). The rest of an enclosing ``subPath`` object is not parsed."""
        while True:
            if not self.keys and self._skip_ws() != "":
                raise self._malformed("trailing characters after the array")
            self.pos = len(self.buf)
            if not self._fill():
                return

    def elements(self) -> Iterator[bytes]:
        """The array's elements as NDJSON: each a JSON object on one line (newlines outside
        strings -- the only place JSON allows them -- become spaces), several per piece."""
        with _open_input(self.path) as f:
            self._f = f
            self._fill()
            self._descend()
            c = self._skip_ws()
            if c != "[":
                if c == "n" and self.buf.startswith(b"null", self.pos):
                    raise self._not_found(len(self.keys) - 1)
                raise BadInputData(
                    f"Sub-path does not specify an array: {self._where()}", path=str(self.path)
                )
            self.pos += 1
            index = 0
            if self._skip_ws() == "]":
                self.pos += 1
                self._finish()
                return
            while True:
                c = self._skip_ws()
                if c == "":
                    raise self._malformed("unexpected end of document")
                if c == "{":
                    # a run of at most one read: its pieces are then split out as a list
                    end = self.pos + _JSON_READ_BYTES
                    run = _FLAT_RUN.match(self.buf, self.pos, end)
                    assert run is not None
                    if run.end() > self.pos:
                        # the run's elements, found again (the separators are skipped)
                        text = _NEWLINES.sub(b" ", self.buf[self.pos : run.end()])
                        objects = _FLAT.findall(text)
                        index += len(objects)
                        self.pos = run.end()
                        yield b"\n".join(objects)
                        continue
                index += 1
                if c != "{":
                    kind = _SCALAR_TYPES.get(ord(c))
                    if kind is None:
                        kind = "NoneType" if c == "n" else "number"
                    raise BadInputData(
                        f"array elements must be JSON objects, got {kind}",
                        path=str(self.path),
                        row=index,
                    )
                end = self._scan_value(keep=True)
                yield _NEWLINES.sub(b" ", self.buf[self.pos : end])
                self.pos = end
                c = self._skip_ws()
                if c == ",":
                    self.pos += 1
                elif c == "]":
                    self.pos += 1
                    self._finish()
                    return
                else:
                    raise self._malformed("expected ',' or ']' after an array element")


def _json_arrow_type(typ: pa.DataType, formats: _Formats) -> pa.DataType:
    return pa.string() if _needs_text(typ, formats) or pa.types.is_date(typ) else typ


def _ndjson_batches(
    chunks: Iterator[_JsonChunk], schema: pa.Schema, formats: _Formats, path: str
) -> Iterator[pa.RecordBatch]:
    json_schema = pa.schema(
        [pa.field(f.name, _json_arrow_type(f.type, formats), True) for f in schema]
    )
    parse_options = pajson.ParseOptions(
        explicit_schema=json_schema, unexpected_field_behavior="ignore"
    )
    first = 1  # record number of the chunk's first record
    for chunk in chunks:
        _check_utf8(chunk, first, path)
        read_options = pajson.ReadOptions(use_threads=True, block_size=len(chunk.data) + 1)
        try:
            table = pajson.read_json(
                io.BytesIO(chunk.data), read_options=read_options, parse_options=parse_options
            )
        except pa.ArrowInvalid as e:
            raise _diagnose_json(chunk, first, schema, parse_options, path, e) from e
        columns = []
        for i, field in enumerate(schema):
            col = table.column(i).combine_chunks()
            if json_schema.field(i).type != field.type:
                try:
                    col = (
                        _convert_text_column(col, field.type, formats)
                        if _needs_text(field.type, formats)
                        else parse_dates(col)
                    )
                except ConversionFailure as e:
                    row = first + e.index
                    raise BadInputData(
                        e.message,
                        path=path,
                        column=field.name,
                        row=row,
                        line=_line_of(chunk, e.index),
                    ) from None
            columns.append(col)
        batch = pa.RecordBatch.from_arrays(columns, schema=schema)
        try:
            _check_not_null(batch, schema, first - 1, path)
        except BadInputData as e:
            assert e.row is not None
            raise BadInputData(
                "null value in a NOT NULL column",
                path=path,
                column=e.column,
                row=e.row,
                line=_line_of(chunk, e.row - first),
            ) from None
        first += batch.num_rows
        if batch.num_rows:
            yield batch


def _feature_record(text: bytes, path: Path, line: int | None) -> bytes:
    """One GeoJSON ``Feature`` as the NDJSON record kamu reads: its ``properties`` plus a
    ``geometry`` column holding the geometry object as compact JSON text with sorted keys
    (serde_json's ``to_string`` of a map, as kamu's readers produce it)."""
    try:
        feature = json.loads(text)
    except RecursionError:
        raise BadInputData(_TOO_DEEP, path=str(path), line=line) from None
    except ValueError as e:
        raise BadInputData(f"invalid GeoJSON feature: {e}", path=str(path), line=line) from None
    if not isinstance(feature, dict) or feature.get("type") != "Feature":
        kind = feature.get("type") if isinstance(feature, dict) else type(feature).__name__
        raise BadInputData(
            f"Expected Feature type but got {clip(str(kind))} instead", path=str(path), line=line
        )
    properties = feature.get("properties")
    geometry = feature.get("geometry")
    if not isinstance(properties, dict) or not isinstance(geometry, dict):
        raise BadInputData(
            "invalid GeoJSON: a Feature needs object properties and geometry",
            path=str(path),
            line=line,
        )
    try:
        properties["geometry"] = json.dumps(
            geometry, sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
        return json.dumps(properties, ensure_ascii=False).encode("utf-8")
    except RecursionError:
        raise BadInputData(_TOO_DEEP, path=str(path), line=line) from None


def _features(chunks: Iterator[_JsonChunk], path: Path) -> Iterator[_JsonChunk]:
    """GeoJSON features (one per line of each chunk) as kamu's NDJSON records (kamu-cli,
    ``src/infra/ingest-datafusion/src/readers/geojson.rs``, ``ndgeojson.rs``)."""
    for chunk in chunks:
        out = []
        for index, line in _lines(chunk.data):
            if line.strip():
                where = None if chunk.first_line is None else chunk.first_line + index
                out.append(_feature_record(line, path, where))
        if out:
            yield _JsonChunk(b"\n".join(out) + b"\n", chunk.first_line)


def _shapefile_chunks(
    read: m.ReadStepEsriShapefile,
    path: Path,
    chunk_bytes: int,
    on_bytes: ByteProgress | None,
    max_decompressed_bytes: int,
) -> Iterator[_JsonChunk]:
    """A zipped shapefile as kamu's NDJSON records (kamu-cli,
    ``src/infra/ingest-datafusion/src/readers/shapefile.rs``)."""
    # pyshp is imported only when a shapefile is read (an idle daemon does not load it).
    from coordinator.ingest.esri_shapefile import shapefile_records

    with _open_input(path) as f:
        for text in shapefile_records(
            f,
            sub_path=read.sub_path,
            max_bytes=max_decompressed_bytes,
            max_record_bytes=MAX_JSON_RECORD_BYTES,
            chunk_bytes=chunk_bytes,
            where=str(path),
        ):
            if on_bytes is not None:
                on_bytes(f.tell())
            yield _JsonChunk(text, None)


def _check_utf8(chunk: _JsonChunk, first: int, path: str) -> None:
    """Refuse text that is not UTF-8: Arrow's JSON reader copies string bytes unchecked."""
    try:
        chunk.data.decode("utf-8")
    except UnicodeDecodeError as e:
        start = chunk.data.rfind(b"\n", 0, e.start) + 1  # of the line holding the bad byte
        line = (
            None
            if chunk.first_line is None
            else chunk.first_line + chunk.data.count(b"\n", 0, start)
        )
        raise BadInputData(
            f"invalid UTF-8: {e.reason}",
            path=path,
            row=first + _count_records(chunk.data[:start]),
            line=line,
        ) from None


def _line_of(chunk: _JsonChunk, index: int) -> int | None:
    """File line of the chunk's ``index``-th (0-based) record."""
    if chunk.first_line is None:
        return None
    seen = 0
    for i, line in _lines(chunk.data):
        if line.strip():
            if seen == index:
                return chunk.first_line + i
            seen += 1
    return None


def _json_value_error(value: Any, typ: pa.DataType) -> str | None:
    """Why a decoded JSON value cannot go into a column of ``typ`` (None if it can)."""
    if value is None:
        return None
    if pa.types.is_boolean(typ):
        ok = isinstance(value, bool)
    elif pa.types.is_integer(typ):
        ok = isinstance(value, int) and not isinstance(value, bool)
        if ok:
            bits = typ.bit_width
            lo, hi = (
                (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
                if pa.types.is_signed_integer(typ)
                else (0, (1 << bits) - 1)
            )
            if not lo <= value <= hi:
                return f"{value} is out of range for {typ}"
    elif pa.types.is_floating(typ) or pa.types.is_decimal(typ):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif (
        pa.types.is_string(typ)
        or pa.types.is_large_string(typ)
        or pa.types.is_timestamp(typ)
        or pa.types.is_date(typ)
    ):
        ok = isinstance(value, str)
    elif pa.types.is_list(typ) or pa.types.is_large_list(typ):
        if not isinstance(value, list):
            ok = False
        else:
            for item in value:
                err = _json_value_error(item, typ.value_type)
                if err is not None:
                    return f"list element: {err}"
            ok = True
    elif pa.types.is_binary(typ):
        ok = isinstance(value, str)
    else:
        return None
    if ok:
        return None
    return f"expected {typ}, got JSON {type(value).__name__} {clip(json.dumps(value))}"


def _arrow_rejects(raw: bytes, parse_options: pajson.ParseOptions) -> str | None:
    """Arrow's complaint about one NDJSON record (None if it reads it)."""
    read_options = pajson.ReadOptions(use_threads=False, block_size=len(raw) + 2)
    try:
        pajson.read_json(
            io.BytesIO(raw + b"\n"), read_options=read_options, parse_options=parse_options
        )
    except pa.ArrowInvalid as e:
        return str(e)
    return None


def _diagnose_json(
    chunk: _JsonChunk,
    first: int,
    schema: pa.Schema,
    parse_options: pajson.ParseOptions,
    path: str,
    error: Exception,
) -> BadInputData:
    """Find the record of a chunk Arrow could not read, and say what is wrong with it.

    Records up to :data:`_PY_DIAGNOSE_BYTES` are decoded by Python's ``json`` for a precise
    message; a larger one is only re-read alone by Arrow: decoded into Python objects, a JSON
    text can take 20 times its size (``[{},{},...]``), and records may be large.
    """
    record = first - 1
    # A record too deep for Python's json may be fine for Arrow (which parses iteratively):
    # it is blamed only if no other record explains the failure.
    too_deep: BadInputData | None = None
    for i, raw in _lines(chunk.data):
        if not raw.strip():
            continue
        record += 1
        line = chunk.first_line + i if chunk.first_line is not None else None
        if len(raw) > _PY_DIAGNOSE_BYTES:
            problem = _arrow_rejects(raw, parse_options)
            if problem is not None:
                return BadInputData(
                    f"cannot read JSON record: {clip(problem)}", path=path, row=record, line=line
                )
            continue
        try:
            obj = json.loads(raw)
        except RecursionError:
            if too_deep is None:
                too_deep = BadInputData(_TOO_DEEP, path=path, row=record, line=line)
            continue
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            return BadInputData(f"invalid JSON: {clip(str(e))}", path=path, row=record, line=line)
        if not isinstance(obj, dict):
            return BadInputData(
                f"expected a JSON object, got {type(obj).__name__}",
                path=path,
                row=record,
                line=line,
            )
        for field in schema:
            problem = _json_value_error(obj.get(field.name), field.type)
            if problem is not None:
                return BadInputData(problem, path=path, column=field.name, row=record, line=line)
    if too_deep is not None:
        return too_deep
    return BadInputData(f"cannot read JSON records {first}-{record}: {clip(str(error))}", path=path)


# --------------------------------------------------------------------------------------------
# Parquet
# --------------------------------------------------------------------------------------------


def read_parquet_as(
    path: Path, schema: pa.Schema, on_bytes: ByteProgress | None = None
) -> Iterator[pa.RecordBatch]:
    """Stream a Parquet file as batches of ``schema`` (columns by name, cast; a preprocess
    query's output)."""
    return _parquet_batches(path, schema, on_bytes)


def _parquet_batches(
    path: Path, schema: pa.Schema, on_bytes: ByteProgress | None
) -> Iterator[pa.RecordBatch]:
    with _open_input(path) as source:
        yield from _parquet_file_batches(source, path, schema, on_bytes)


def _parquet_file_batches(
    source: BinaryIO, path: Path, schema: pa.Schema, on_bytes: ByteProgress | None
) -> Iterator[pa.RecordBatch]:
    try:
        pf = pq.ParquetFile(source)
    except (pa.ArrowInvalid, OSError) as e:
        raise BadInputData(f"not a valid Parquet file: {clip(str(e))}", path=str(path)) from None
    present = set(pf.schema_arrow.names)
    for name in schema.names:
        if name not in present:
            raise BadInputData(
                "column declared in the schema is missing from the Parquet file",
                path=str(path),
                column=name,
            )
    total = pf.metadata.num_rows or 1
    size = os.fstat(source.fileno()).st_size
    rows = 0
    for batch in pf.iter_batches(batch_size=_PARQUET_BATCH_ROWS, columns=schema.names):
        columns = []
        for i, field in enumerate(schema):
            try:
                columns.append(cast_column(batch.column(i), field.type))
            except ConversionFailure as e:
                raise BadInputData(
                    e.message, path=str(path), column=field.name, row=rows + e.index + 1
                ) from None
        out = pa.RecordBatch.from_arrays(columns, schema=schema)
        _check_not_null(out, schema, rows, str(path))
        rows += out.num_rows
        if on_bytes is not None:
            on_bytes(size * rows // total)
        if out.num_rows:
            yield out


def _parquet_file_schema(path: Path) -> pa.Schema:
    """The normalised schema a Parquet file carries."""
    import pyarrow.parquet as pq

    try:
        with _open_input(path) as f:
            return normalize_schema(pq.read_schema(f).remove_metadata())
    except (pa.ArrowInvalid, OSError) as e:
        raise BadInputData(f"not a valid Parquet file: {clip(str(e))}", path=str(path)) from None
