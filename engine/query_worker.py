"""A query worker: one read-only SQL query over dataset tables, in the transform sandbox, then exit.

``python -m engine.query_worker`` runs under a DataFusion release's Python (the node's
``.venv/engines/datafusion-<version>``). It imports DataFusion, warms it up, prints ``READY`` and
then answers requests on stdin one at a time (in sessions kept for their tables, see below)
until stdin closes. The node starts workers before any query arrives (``[query]
warm_workers``), so a query never waits for a process to start, and gives each worker one query
at a time, so it can kill the worker at the query's deadline (or when its memory grows too
large) without harming any other query; the node then starts a replacement.

Request (one JSON line)::

    {"sql": "...", "tables": [{"name": "covid19.canada", "files": ["/abs/part.parquet", ...]}],
     "memory_bytes": N, "max_rows": N, "max_bytes": N, "skip": 0, "limit": null,
     "max_sql_bytes": N (optional),
     "out": "/private/dir/answer.arrow", "scratch": "/private/dir",
     "tables_dir": "/worker/dir/tables" (optional: keep the session, see below),
     "inline_bytes": N (optional: answers up to N bytes inline, see below)}

Answer (one JSON line on stdout): ``{"ok": true, "rows": N}`` with the rows in ``out`` as an
Arrow IPC file (with ``"stream": true`` in the request: in parts, see below), or, with
``"inline_bytes"`` in the request and an answer whose batches hold at most that many bytes,
``{"ok": true, "rows": N, "inline": B}`` followed by the rows as ``B`` bytes of an Arrow IPC
stream on stdout (:mod:`engine.query_lines`; no file: ``out``'s and ``scratch``'s directories
are made only when a file is written there), or
``{"ok": false, "kind": K, "message": M}`` with ``K`` one of ``rejected`` (the sandbox refused
the SQL), ``too_large`` (over ``max_rows``/``max_bytes``), ``out_of_memory``
(DataFusion's memory pool of ``memory_bytes`` was exhausted) or ``failed`` (the query does not
plan or run: an unknown column, a type error...).

**Streamed answers** (``"stream": true``). The rows go out while the query runs, so the node can
send the first ones to its client before the last are computed (Flight SQL's ``DoGet``): each
part is a complete Arrow IPC stream (its schema, its batches, its end marker) written to
``<out>.<k>``, announced by a line ``{"part": k, "rows": n}`` once it is closed; parts hold about
:data:`PART_BYTES` each (the request's ``part_bytes`` if given), the first is closed after its
first batch so the schema is known early.
A part is self-contained, so the node reads it without the ones before (dictionaries included).
The answer line follows the last part; a refusal found mid-way (over ``max_rows``) comes after
the parts already sent.

The sandbox (:mod:`engine.query_sandbox`) is the transforms' rules: one statement, a query and
nothing else (no DDL, DML, ``COPY``, ``SET``, ``EXPLAIN``), every ``TableScan`` one of the request's
tables (so no file, URL or table function such as ``generate_series()``/``range()``), and the
time, random and session functions refused. Those last are not dangerous in a query, but they
make an answer that another node cannot reproduce, and a verifiable query (``/verify``) must be
reproducible; one rule for transforms and queries is also one rule to explain.

Table names are registered through the catalog API, not ``register_parquet``: DataFusion parses
a name given there as ``schema.table``, so a dataset alias with a dot (``covid19.canada``) could
not be registered as one table. Each table is a directory of symbolic links to its parquet parts
read by DataFusion's native parquet scan; tables with the same parts (a dataset under its alias
and its DID) share one scan.

**Sessions kept between queries.** With ``"tables_dir"`` in the request (a directory private to
this worker), the session its tables were registered in is kept (:data:`SESSIONS_KEPT` of them,
the least recently used dropped first) and serves the next request naming exactly the same tables
(names and part files, in order) and the same ``memory_bytes``: the parts' schemas are not
inferred again, nor their footers and statistics read again (~9 ms of a 1M-row aggregation's ~40,
measured on the development machine). A dataset's parts are files named by their content hash
and a head's parts never change, so a kept table is the head it was registered for. Nothing a
query runs can change a kept session: DDL, DML and statements (``SET``, ``PREPARE``...) are
refused when the SQL is planned and the plan's root must be a query (the sandbox); every
request's text is still checked, and each request sees only its own tables. Without
``"tables_dir"``, a fresh session in the request's ``scratch`` directory, dropped after it.

**Plans kept in a kept session.** A kept session also keeps the checked logical plans of the
last :data:`PLANS_KEPT` query texts it answered: the same text on the same tables is not parsed,
planned and checked again (~0.6 ms of a 1M-row aggregation's ~25, measured on the development
machine); it is optimised into a physical plan and executed afresh, so it reads the tables as
they are (a kept session's tables never change, see above). Only plans that passed the sandbox
are kept, and their text passes the lexical screen again on every request. The functions whose
value a plan would fix when it is made (the clock's, ``random()``) are refused by the sandbox,
so a kept plan answers what planning the text again would.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections import OrderedDict
from pathlib import Path
from typing import Any

from engine.errors import WorkerRefusal
from engine.lifeline import watch_lifeline
from engine.query_lines import Answer, serve_lines
from engine.query_sandbox import SandboxViolation, check_query_plan, check_query_text

PART_BYTES = 8 << 20
"""About how many bytes of batches one part of a streamed answer holds."""
SESSIONS_KEPT = 4
"""Sessions (their registered tables) a worker keeps for the next requests on the same tables."""
PLANS_KEPT = 32
"""Checked logical plans a kept session keeps, by their query's text (see the module docstring)."""


def _context(df: Any, memory_bytes: int) -> Any:
    config = (
        df.SessionConfig()
        .with_information_schema(False)
        # As kamu's engine and the transforms: identifiers are case-sensitive as written.
        .set("datafusion.sql_parser.enable_ident_normalization", "false")
    )
    runtime = df.RuntimeEnvBuilder().with_fair_spill_pool(memory_bytes)
    return df.SessionContext(config, runtime)


def _register(ctx: Any, tables: list[dict[str, Any]], scratch: Path) -> set[str]:
    """Register ``tables`` in ``ctx`` (folders of links to their parts made in ``scratch``);
    the internal names of their scans, the only ones the sandbox lets a plan read."""
    schema = ctx.catalog().schema("public")
    scans: dict[tuple[str, ...], str] = {}
    for i, t in enumerate(tables):
        name = str(t["name"])
        files = tuple(str(f) for f in t["files"])
        if not files:
            continue  # a dataset with no data yet: its name stays unknown to the query
        raw = scans.get(files)
        if raw is None:
            folder = scratch / f"t{i}"
            folder.mkdir()
            for k, f in enumerate(files):
                (folder / f"p{k:08d}.parquet").symlink_to(f)
            # The parquet scan gets a plain internal name (the one the plan's TableScan shows
            # and the sandbox allows); the dataset's name is a view of it, registered through
            # the catalog so that a dot in it stays part of the name.
            raw = f"__odf_table_{i}"
            ctx.register_parquet(raw, str(folder))
            scans[files] = raw
        schema.register_table(name, ctx.table(raw).into_view())
    return set(scans.values())


class _KeptSession:
    """A session, the internal names of its tables' scans (the only ones the sandbox lets a
    plan read), and when it is kept its folder and its checked plans by query text."""

    def __init__(self, ctx: Any, names: set[str], folder: Path | None) -> None:
        self.ctx = ctx
        self.names = names
        self.folder = folder
        self._plans: OrderedDict[str, Any] = OrderedDict()

    def plan(self, text: str) -> Any:
        """The checked plan (a DataFrame) of ``text`` kept here, or None."""
        frame = self._plans.get(text)
        if frame is not None:
            self._plans.move_to_end(text)
        return frame

    def keep(self, text: str, frame: Any) -> None:
        """Keep ``frame``, the plan of ``text`` that passed the sandbox (a kept session only)."""
        if self.folder is None:
            return
        self._plans[text] = frame
        while len(self._plans) > PLANS_KEPT:
            self._plans.popitem(last=False)


class _Sessions:
    """The sessions kept between requests (see the module docstring), least recently used
    first; each one's table folders in a directory of its own under the worker's."""

    def __init__(self) -> None:
        self._kept: OrderedDict[tuple[Any, ...], _KeptSession] = OrderedDict()
        self._made = 0

    def session(self, df: Any, request: dict[str, Any]) -> _KeptSession:
        """The session for ``request``'s tables and memory bound."""
        memory_bytes = int(request["memory_bytes"])
        tables = list(request["tables"])
        home = request.get("tables_dir")
        if home is None:
            ctx = _context(df, memory_bytes)
            scratch = Path(request["scratch"])
            scratch.mkdir(parents=True, exist_ok=True)
            return _KeptSession(ctx, _register(ctx, tables, scratch), None)
        key = (
            memory_bytes,
            tuple((str(t["name"]), tuple(str(f) for f in t["files"])) for t in tables),
        )
        kept = self._kept.get(key)
        if kept is not None:
            self._kept.move_to_end(key)
            return kept
        folder = Path(home) / f"s{self._made}"
        self._made += 1
        folder.mkdir(parents=True)
        ctx = _context(df, memory_bytes)
        try:
            names = _register(ctx, tables, folder)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        session = self._kept[key] = _KeptSession(ctx, names, folder)
        while len(self._kept) > SESSIONS_KEPT:
            _, old = self._kept.popitem(last=False)
            if old.folder is not None:
                shutil.rmtree(old.folder, ignore_errors=True)
        return session


_SESSIONS = _Sessions()


def run(request: dict[str, Any]) -> Answer:
    """Answer ``request``: its rows written to ``request["out"]``, or inline.

    Raises:
        WorkerRefusal: the answer is a refusal or an error (see the module docstring).
    """
    import datafusion

    sql = str(request["sql"])
    max_rows = int(request["max_rows"])
    max_bytes = int(request["max_bytes"])
    skip = int(request.get("skip") or 0)
    limit = request.get("limit")
    max_sql = request.get("max_sql_bytes")
    try:
        check_query_text(sql, None if max_sql is None else int(max_sql))
    except SandboxViolation as e:
        raise WorkerRefusal("rejected", e.reason) from None
    session = _SESSIONS.session(datafusion, request)
    text = sql.rstrip().rstrip(";")
    frame = session.plan(text)
    if frame is None:
        options = (
            datafusion.SQLOptions()
            .with_allow_ddl(False)
            .with_allow_dml(False)
            .with_allow_statements(False)
        )
        try:
            frame = session.ctx.sql_with_options(text, options)
        except Exception as e:
            raise WorkerRefusal(*_classify(e)) from None
        try:
            check_query_plan(frame.logical_plan().display_indent(), session.names)
        except SandboxViolation as e:
            raise WorkerRefusal("rejected", e.reason) from None
        session.keep(text, frame)
    if skip or limit is not None:
        # One row more than allowed tells "exactly max_rows" from "more than max_rows".
        want = max_rows + 1 if limit is None else min(int(limit), max_rows + 1)
        frame = frame.limit(want, offset=skip)
    # Without paging no limit is planned (it cost ~2-4 ms of a 25 ms aggregation, measured on
    # the development machine): the rows are counted as they stream out below, and the stream
    # is dropped at the first row over max_rows, which stops the query.
    out = Path(request["out"])
    part_bytes = int(request.get("part_bytes") or PART_BYTES)
    sink: _PartWriter | _File = (
        _PartWriter(out, part_bytes)
        if request.get("stream")
        else _File(out, int(request.get("inline_bytes") or 0))
    )
    rows = 0
    size = 0
    try:
        try:
            for batch in frame.execute_stream():
                rb = batch.to_pyarrow()
                rows += rb.num_rows
                size += rb.nbytes
                if rows > max_rows:
                    raise WorkerRefusal(
                        "too_large",
                        f"the answer has more than {max_rows} rows ([query] max_rows): "
                        "narrow the query or page with skip/limit",
                    )
                if size > max_bytes:
                    raise WorkerRefusal(
                        "too_large",
                        f"the answer is over {max_bytes} bytes ([query] max_bytes): "
                        "select fewer columns or page with skip/limit",
                    )
                sink.write(rb)
            inline = sink.finish(frame.schema())
        finally:
            sink.close()
    except WorkerRefusal:
        raise
    except Exception as e:
        raise WorkerRefusal(*_classify(e)) from None
    return Answer(rows, inline)


class _File:
    """The whole answer: inline when its batches hold at most ``inline_bytes`` (kept until the
    end), else in one Arrow IPC file at ``out``."""

    def __init__(self, out: Path, inline_bytes: int) -> None:
        self._out = out
        self._inline_bytes = inline_bytes
        self._held: list[Any] = []
        self._held_bytes = 0
        self._writer: Any = None

    def write(self, rb: Any) -> None:
        if self._writer is None:
            self._held_bytes += rb.nbytes
            if self._held_bytes <= self._inline_bytes:
                self._held.append(rb)
                return
            self._writer = self._open(rb.schema)
            for held in self._held:
                self._writer.write_batch(held)
            self._held = []
        self._writer.write_batch(rb)

    def _open(self, schema: Any) -> Any:
        import pyarrow as pa

        self._out.parent.mkdir(parents=True, exist_ok=True)
        return pa.ipc.new_file(str(self._out), schema)

    def finish(self, schema: Any) -> bytes | None:
        """The inline answer's bytes (None: it is in the file)."""
        import pyarrow as pa

        if self._writer is not None:
            return None
        if self._inline_bytes <= 0:  # no rows and nothing inline: still the answer's schema
            self._writer = self._open(schema)
            return None
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, self._held[0].schema if self._held else schema) as writer:
            for rb in self._held:
                writer.write_batch(rb)
        data: bytes = sink.getvalue().to_pybytes()
        return data

    def close(self) -> None:
        self._held = []
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class _PartWriter:
    """The answer in parts announced on stdout as they are closed (see the module docstring)."""

    def __init__(self, out: Path, part_bytes: int) -> None:
        self._out = out
        self._part_bytes = part_bytes
        self._batches: list[Any] = []
        self._bytes = 0
        self._next = 0

    def write(self, rb: Any) -> None:
        self._batches.append(rb)
        self._bytes += rb.nbytes
        if self._next == 0 or self._bytes >= self._part_bytes:
            self._flush(rb.schema)

    def finish(self, schema: Any) -> None:
        if self._batches or self._next == 0:  # the rest, or a first part with the schema only
            self._flush(self._batches[0].schema if self._batches else schema)

    def _flush(self, schema: Any) -> None:
        import pyarrow as pa

        k = self._next
        if k == 0:
            self._out.parent.mkdir(parents=True, exist_ok=True)
        with pa.ipc.new_stream(f"{self._out}.{k}", schema) as writer:
            for rb in self._batches:
                writer.write_batch(rb)
        rows = sum(rb.num_rows for rb in self._batches)
        self._batches, self._bytes, self._next = [], 0, k + 1
        sys.stdout.write(json.dumps({"part": k, "rows": rows}) + "\n")
        sys.stdout.flush()

    def close(self) -> None:
        self._batches = []


def _classify(e: BaseException) -> tuple[str, str]:
    text = str(e)
    if "Resources exhausted" in text or "ResourcesExhausted" in text:
        return "out_of_memory", text
    return "failed", text


def main() -> int:
    """Serve requests from stdin until it closes (see the module docstring)."""
    watch_lifeline()
    import datafusion
    import pyarrow as pa

    # Warm up before READY: the first query of a process pays for DataFusion's runtime
    # threads and first allocations (~15 ms of a 1M-row aggregation's ~40, measured on the
    # development machine); a warm worker pays it while waiting instead.
    warm = datafusion.SessionContext()
    warm.from_arrow(pa.table({"x": [1, 2]}), "warm")
    warm.sql("select sum(x) from warm group by x").collect()
    del warm
    print("READY", flush=True)
    serve_lines(run)
    os._exit(0)  # skip interpreter teardown: DataFusion's runtime threads can hold it up


if __name__ == "__main__":
    sys.exit(main())
