"""Reading what the node verified: readable heads, SQL, tail and export (``docs/query.md``).

A dataset is read at its **readable head** (the rule of ``docs/query.md``, "Reading verified
data"):

* a dataset the node owns (it holds the dataset's key): its local head, ``trust: "owned"``;
* a followed dataset: the newest head its trust policy trusted (``Subscription.trusted_head``,
  ``docs/trust.md``), ``trust: "trusted"``;
* any other head this node replayed itself with the outcome ``verified``: ``trust: "verified"``;
* otherwise nothing, unless the caller asks for ``untrusted``: then the newest accepted (or
  local) head, marked ``trusted: false``, ``trust: "untrusted"``.

The local ``refs/head`` of a followed dataset may be ahead of its trusted head (blocks fetched,
not yet trusted), so the data parts of a head are found by walking the chain from that head's
block back to the Seed, never from ``refs/head``. The walk is cached per head, and so are the
facts a query's resolution looks up that cannot become false (blocks are named by their hash):
that a block is stored, that a block is on the chain of a given head.

Table names: a dataset is a table under its alias and under its ``did:odf`` (quote both in SQL:
``select * from "covid19.canada"``). Queries run on the :class:`~node.app.ports.QueryEnginePort`
(sandboxed workers); tail and export read the parquet parts with pyarrow, part by part.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from coordinator.errors import BlockNotFound, DatasetNotFound, InvalidMultihash, OdfNodeError
from coordinator.metadata import model as m
from coordinator.multiformats import Multihash
from coordinator.storage.dataset import Dataset
from coordinator.storage.repository import DatasetHandle, DatasetRepository
from node.app.errors import (
    HeadNotTrusted,
    InvalidArgument,
    QueryError,
    QueryRejected,
    Unavailable,
)
from node.app.ports import (
    AnswerStream,
    QueryDialect,
    QueryEnginePort,
    QueryLimits,
    QueryTable,
    StatePort,
)

if TYPE_CHECKING:
    import pyarrow as pa

Trust = Literal["owned", "trusted", "verified", "untrusted"]
ExportFormat = Literal["parquet", "csv", "ndjson"]
EXPORT_FORMATS: tuple[str, ...] = ("parquet", "csv", "ndjson")
PARTS_CACHE = 256
"""Heads whose data-part lists are kept (a walk of a long chain is not repeated per query)."""
FACTS_CACHE = 1024
"""Blocks known stored, and (head, block) pairs known on one chain, kept (see the module
docstring): a query on a followed dataset does not read its trusted head's block again, nor an
untrusted or pinned one walk the chain again."""


class BlockNotOnChain(OdfNodeError):
    """A pinned block is not on the dataset's stored chain (kamu: ``DatasetBlockNotFound``)."""

    rpc_code = DatasetNotFound.rpc_code

    def __init__(self, did: str, block: str) -> None:
        super().__init__(f"block {block} is not on the stored chain of {did}")
        self.did = did
        self.block = block


class UnknownTable(QueryError):
    """The SQL names a table that is not readable here; the message lists the readable ones."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


@dataclass(frozen=True)
class ReadableTable:
    """A dataset at the head that is read, and why that head may be read."""

    table: QueryTable
    alias: str | None
    did: str
    head: str
    sequence: int
    trusted: bool
    trust: Trust
    records: int

    def to_json(self) -> dict[str, Any]:
        """The JSON form of ``data.tables`` and of an answer's ``inputs``."""
        return {
            "name": self.table.name,
            "alias": self.alias,
            "did": self.did,
            "head": self.head,
            "sequence": self.sequence,
            "trusted": self.trusted,
            "trust": self.trust,
            "records": self.records,
        }


@dataclass(frozen=True)
class QueryAnswer:
    """The rows of an answer and the tables it could read."""

    table: pa.Table
    inputs: tuple[ReadableTable, ...]
    dialect: QueryDialect = "datafusion"
    skip: int = 0
    limit: int | None = None

    def to_json(self) -> dict[str, Any]:
        """``data.query``/``data.tail``'s JSON: columns, Arrow types, JSON-safe rows, inputs."""
        t = self.table
        columns = [[json_cell(v) for v in col.to_pylist()] for col in t.columns]
        return {
            "columns": list(t.column_names),
            "types": [str(f.type) for f in t.schema],
            "rows": [list(r) for r in zip(*columns, strict=True)] if columns else [],
            "inputs": [i.to_json() for i in self.inputs],
            "truncated": False,
        }


@dataclass(frozen=True)
class StreamedAnswer:
    """An answer given on while its query runs, and the tables it could read."""

    stream: AnswerStream
    inputs: tuple[ReadableTable, ...]


@dataclass(frozen=True)
class ExportResult:
    """What ``dataset export`` wrote."""

    path: str
    format: str
    rows: int
    bytes: int
    did: str
    head: str
    trusted: bool
    trust: str

    def to_json(self) -> dict[str, Any]:
        """The command's JSON."""
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> ExportResult:
        """The inverse of :meth:`to_json` (the JSON the CLI receives, over the RPC or not)."""
        return cls(**{f: value[f] for f in cls.__dataclass_fields__})


def json_cell(v: Any) -> Any:
    """A cell as JSON: timestamps as RFC 3339 (UTC ``Z`` when zoned), bytes as hex, decimals
    as strings, nested values element-wise."""
    import datetime as dt
    import decimal

    if v is None or isinstance(v, bool | int | str):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else str(v)
    if isinstance(v, dt.datetime):
        if v.tzinfo is not None:
            return v.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
        return v.isoformat()
    if isinstance(v, dt.date | dt.time):
        return v.isoformat()
    if isinstance(v, dt.timedelta):
        return v.total_seconds()
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, list | tuple):
        return [json_cell(x) for x in v]
    if isinstance(v, dict):
        return {str(k): json_cell(x) for k, x in v.items()}
    return str(v)


@dataclass(frozen=True)
class _Stored:
    """A stored dataset as its files say (read in a thread): its handle, the dataset, its
    stored head (``None``: no blocks yet) and whether this node owns it (holds its key)."""

    handle: DatasetHandle
    ds: Dataset
    local: Multihash | None
    owned: bool


@dataclass(frozen=True)
class _Parts:
    files: tuple[str, ...]
    sequence: int
    records: int


class VerifiedData:
    """The verified-data use case (``Application.data``); see the module docstring."""

    def __init__(
        self,
        repo: DatasetRepository,
        state: StatePort,
        engine: QueryEnginePort | None,
        limits: QueryLimits,
        *,
        max_sql_bytes: int = 65536,
        replays: bool = True,
    ) -> None:
        self._repo = repo
        self._state = state
        self.engine = engine
        self.limits = limits
        self.max_sql_bytes = max_sql_bytes
        self._parts: OrderedDict[tuple[str, str], _Parts] = OrderedDict()
        self._facts: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        # Whether this node replays derivatives ([pipeline] replay): on a light node a
        # derivative's "verified" outcome is an integrity check, which proves nothing about its
        # data (docs/trust.md), so it does not make the head readable.
        self.replays = replays
        self._kinds: dict[str, m.DatasetKind] = {}

    # -- readable heads ------------------------------------------------------------------

    def _handle(self, ref: str) -> DatasetHandle:
        try:
            return self._repo.resolve(ref)
        except DatasetNotFound:
            raise
        except OdfNodeError as e:
            raise DatasetNotFound(f"no dataset {ref!r} here: {e}") from e

    async def resolve(
        self, ref: str, *, untrusted: bool = False, block: str | None = None
    ) -> ReadableTable:
        """``ref`` (alias or DID) at its readable head, or at ``block`` when it is on the chain
        (and readable by the same rule: a block before a trusted head is trusted too).

        Raises:
            DatasetNotFound: no such dataset here.
            BlockNotOnChain: ``block`` is not on the stored chain.
            HeadNotTrusted: no trusted head and ``untrusted`` is False.
        """
        stored = await asyncio.to_thread(lambda: self._stored(self._handle(ref)))
        return await self._readable(stored, untrusted=untrusted, block=block)

    def _stored(self, handle: DatasetHandle) -> _Stored:
        """What the files say of ``handle`` (its stored head, whether this node owns it): a
        thread's work, done in the thread that found the handle."""
        ds = Dataset(handle.root, durable=False)
        return _Stored(handle, ds, ds.head(), self._repo.key_path(handle.id).is_file())

    async def _readable(
        self, stored: _Stored, *, untrusted: bool, block: str | None
    ) -> ReadableTable:
        handle, ds, local, owned = stored.handle, stored.ds, stored.local, stored.owned
        did = handle.id.as_did_str()
        if local is None:
            raise HeadNotTrusted(f"{handle.alias} ({did}) has no blocks yet")
        sub = await self._state.subscription(did)
        trusted_head = sub.trusted_head if sub is not None else None
        head: str | None
        trust: Trust
        if block is not None:
            head = block
            if not await self._is_on_chain(ds, did, local, block):
                raise BlockNotOnChain(did, block)
            trust = await self._trust_of_block(ds, did, owned, trusted_head, block)
        elif owned:
            head, trust = str(local), "owned"
        elif trusted_head is not None and await self._is_stored(ds, did, trusted_head):
            head, trust = trusted_head, "trusted"
        elif await self._verified_here(ds, did, str(local)):
            head, trust = str(local), "verified"
        else:
            acc = await self._state.accepted_head(did)
            head = acc.head if acc is not None else str(local)
            if not await self._is_on_chain(ds, did, local, head):
                head = str(local)  # announced but not fetched yet: what is stored
            trust = "untrusted"
        if trust == "untrusted" and not untrusted:
            if block is None and trusted_head is not None:
                # Trusted (by attestations) before its blocks were fetched: not readable yet.
                raise HeadNotTrusted(
                    f"{handle.alias} ({did}): its trusted head {trusted_head} is not stored here "
                    "yet (being pulled): wait for the pull, or read the stored head with "
                    "--untrusted (untrusted: true)"
                )
            raise HeadNotTrusted(
                f"{handle.alias} ({did}) has no trusted head yet (docs/trust.md): wait until "
                "its trust policy trusts one, or read its newest head with --untrusted "
                "(untrusted: true)"
            )
        parts = await self._parts_of(ds, did, head)
        return ReadableTable(
            table=QueryTable(handle.alias, did, head, parts.files),
            alias=handle.alias,
            did=did,
            head=head,
            sequence=parts.sequence,
            trusted=trust != "untrusted",
            trust=trust,
            records=parts.records,
        )

    async def _trust_of_block(
        self, ds: Dataset, did: str, owned: bool, trusted_head: str | None, block: str
    ) -> Trust:
        if owned:
            return "owned"
        if trusted_head is not None and await self._is_on_chain(
            ds, did, Multihash.from_multibase(trusted_head), block
        ):
            return "trusted"
        if await self._verified_here(ds, did, block):
            return "verified"
        return "untrusted"

    async def _verified_here(self, ds: Dataset, did: str, head: str) -> bool:
        """Whether this node's own verification of ``head`` is conclusive and ``verified``:
        a root's integrity check (all there is to check, as the trust policy counts it), or a
        derivative's replay. An integrity-only check of a derivative (a light node, or a trust
        policy that asked only for one) does not count."""
        ver = await self._state.verification(did, head)
        if ver is None or ver.outcome != "verified":
            return False
        kind = self._kinds.get(did)
        if kind is None:
            kind = await asyncio.to_thread(_dataset_kind, ds)
            self._kinds[did] = kind
        if kind == m.DatasetKind.ROOT:
            return True
        if not self.replays:
            return False
        # The newest verification work item of the dataset says whether it replayed.
        items = [w for w in await self._state.work(did=did) if w.kind == "verify"]
        if items:
            newest = max(items, key=lambda w: (w.updated_ns, w.id))
            if newest.payload.get("replay", True) is False:
                return False
        return True

    async def _is_stored(self, ds: Dataset, did: str, block: str) -> bool:
        """Whether ``block`` is stored (a yes is kept: a stored block stays stored)."""
        return await self._fact((did, "", block), lambda: _stored(ds, block))

    async def _is_on_chain(self, ds: Dataset, did: str, head: Multihash, block: str) -> bool:
        """Whether ``block`` is on the chain ending at ``head`` (a yes is kept: a head's
        chain never changes)."""
        return await self._fact((did, str(head), block), lambda: _on_chain(ds, head, block))

    async def _fact(self, key: tuple[str, str, str], check: Callable[[], bool]) -> bool:
        if key in self._facts:
            self._facts.move_to_end(key)
            return True
        if not await asyncio.to_thread(check):
            return False  # a no may become a yes (a block fetched later): asked again
        self._facts[key] = None
        while len(self._facts) > FACTS_CACHE:
            self._facts.popitem(last=False)
        return True

    async def _parts_of(self, ds: Dataset, did: str, head: str) -> _Parts:
        key = (did, head)
        cached = self._parts.get(key)
        if cached is not None:
            self._parts.move_to_end(key)
            return cached
        parts = await asyncio.to_thread(_walk_parts, ds, head)
        self._parts[key] = parts
        while len(self._parts) > PARTS_CACHE:
            self._parts.popitem(last=False)
        return parts

    async def tables(self, *, untrusted: bool = False) -> list[ReadableTable]:
        """Every stored dataset with a readable head (with ``untrusted``: every one with
        blocks), by alias."""
        out: list[ReadableTable] = []
        for stored in await asyncio.to_thread(self._all_stored):
            try:
                out.append(await self._readable(stored, untrusted=untrusted, block=None))
            except (HeadNotTrusted, OdfNodeError):
                continue
        out.sort(key=lambda r: (r.alias or "", r.did))
        return out

    # -- queries -------------------------------------------------------------------------

    async def query(
        self,
        sql: str,
        *,
        untrusted: bool = False,
        dialect: QueryDialect = "datafusion",
        pinned: Mapping[str, str] | None = None,
        skip: int = 0,
        limit: int | None = None,
    ) -> QueryAnswer:
        """Run ``sql`` over the readable datasets it names (by alias or DID).

        ``pinned`` (DID -> block hash) reads those datasets at an older block on their chain.

        Raises:
            QueryRejected: too long, or refused by the sandbox.
            HeadNotTrusted: a pinned block is not trusted and ``untrusted`` is False.
            UnknownTable: the SQL names a table not readable here (the message lists the
                readable ones, and those ``untrusted`` would add).
            QueryError: the other ways a query fails (each names its setting).
        """
        if skip < 0 or (limit is not None and limit < 0):
            raise InvalidArgument("skip and limit must be >= 0")
        engine, inputs, tables = await self._prepare(sql, untrusted, pinned)
        try:
            table = await engine.query(sql, tables, self.limits, dialect, skip=skip, limit=limit)
        except QueryError as e:
            raise await self._named_error(e, untrusted) from e
        return QueryAnswer(table, tuple(inputs), dialect, skip, limit)

    async def query_stream(
        self, sql: str, *, untrusted: bool = False, dialect: QueryDialect = "datafusion"
    ) -> StreamedAnswer:
        """:meth:`query`'s answer given on while the query runs (Flight SQL sends it so): the
        same tables, rules and errors; the caller closes ``stream``."""
        engine, inputs, tables = await self._prepare(sql, untrusted, None)
        try:
            stream = await engine.query_stream(sql, tables, self.limits, dialect)
        except QueryError as e:
            raise await self._named_error(e, untrusted) from e
        return StreamedAnswer(stream, tuple(inputs))

    async def _named_error(self, e: QueryError, untrusted: bool) -> QueryError:
        """``e``, or :class:`UnknownTable` when it says a table is missing (naming the readable
        ones)."""
        unknown = _missing_table(str(e)) if type(e) in (QueryError, QueryRejected) else None
        if unknown is None:
            return e
        return await self._unknown_table(unknown, untrusted)

    async def _prepare(
        self, sql: str, untrusted: bool, pinned: Mapping[str, str] | None
    ) -> tuple[QueryEnginePort, list[ReadableTable], list[QueryTable]]:
        """The engine, the readable datasets ``sql`` names and their tables (each under its
        alias and its DID)."""
        if len(sql.encode()) > self.max_sql_bytes:
            raise QueryRejected(
                f"the query is {len(sql.encode())} bytes, over [query] max_sql_bytes "
                f"({self.max_sql_bytes})"
            )
        if self.engine is None:
            raise Unavailable("the query engine is not available in this context")
        inputs: list[ReadableTable] = []
        pins = dict(pinned or {})
        # One thread hand-over for the listing and the named datasets' heads (a hand-over
        # costs more than these small reads, milliseconds when the machine is loaded).
        for stored in await asyncio.to_thread(self._named_stored, sql, set(pins)):
            handle = stored.handle
            did = handle.id.as_did_str()
            try:
                inputs.append(
                    await self._readable(stored, untrusted=untrusted, block=pins.pop(did, None))
                )
            except HeadNotTrusted:
                if did in sql or _named(sql, handle.alias):
                    raise
        if pins:
            missing = ", ".join(sorted(pins))
            raise DatasetNotFound(f"pinned dataset(s) not stored here: {missing}")
        tables: list[QueryTable] = []
        for r in inputs:
            tables.append(r.table)
            if r.alias != r.did:
                tables.append(QueryTable(r.did, r.did, r.head, r.table.files))
        return self.engine, inputs, tables

    def _all_stored(self) -> list[_Stored]:
        """Every stored dataset with what its files say, those that cannot be read left out
        (as :meth:`tables` leaves out those it cannot read); a thread's work."""
        out = []
        for handle in self._repo.list():
            with contextlib.suppress(OdfNodeError):
                out.append(self._stored(handle))
        return out

    def _named_stored(self, sql: str, pinned: set[str]) -> list[_Stored]:
        """The stored datasets ``sql`` names or ``pinned`` holds (a superset of what the SQL
        reads: the others are not registered), each with what its files say (a thread's work)."""
        out = []
        for handle in self._repo.list():
            did = handle.id.as_did_str()
            if did in pinned or did in sql or _mentioned(sql, handle.alias):
                out.append(self._stored(handle))
        return out

    async def _unknown_table(self, name: str, untrusted: bool) -> UnknownTable:
        """The error for a table the engine did not find: which tables can be read, how to
        quote, and which stored datasets ``--untrusted`` would add."""
        readable = await self.tables(untrusted=untrusted)
        for r in readable:
            if name in (r.alias, r.did) and not r.table.files:
                # The engine registers no table without data parts (it has no schema).
                return UnknownTable(
                    name,
                    f"{name!r} has no records yet at {r.head} (no data slice on its chain): "
                    "ingest or pull data first",
                )
        names = [r.alias or r.did for r in readable]
        listed = ", ".join(f'"{n}"' for n in names) if names else "none"
        hint = ""
        for n in names:
            if n == name:  # an unquoted dotted name: the engine read it as schema.table
                hint = f' (quote it: "{n}")'
            elif n.lower() == name.lower():  # identifiers are case-sensitive, as in kamu
                hint = f' (names are case-sensitive: write "{n}")'
            if hint:
                break
        message = f"table {name!r} not found here{hint}. Readable tables: {listed}"
        if not untrusted:
            more = [
                r.alias or r.did
                for r in await self.tables(untrusted=True)
                if (r.alias or r.did) not in names
            ]
            if more:
                message += (
                    "; stored with no trusted head yet (read with --untrusted): "
                    + ", ".join(f'"{n}"' for n in more)
                )
        return UnknownTable(name, message)

    async def tail(self, ref: str, n: int = 10, *, untrusted: bool = False) -> QueryAnswer:
        """The last ``n`` records of ``ref``'s readable head, oldest first."""
        if not 1 <= n <= self.limits.max_rows:
            raise InvalidArgument(f"n must be 1..{self.limits.max_rows} ([query] max_rows)")
        readable = await self.resolve(ref, untrusted=untrusted)
        table = await asyncio.to_thread(_tail, readable.table.files, n)
        return QueryAnswer(table, (readable,), limit=n)

    async def export(
        self,
        ref: str,
        path: str,
        fmt: str,
        *,
        as_of: str | None = None,
        untrusted: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> ExportResult:
        """Write ``ref``'s records at its readable head (or ``as_of``) to ``path``.

        Part by part (bounded memory); written to a temporary file renamed into place, so an
        interrupted export leaves nothing behind. ``progress(rows_written, total_rows)``.
        """
        if fmt not in EXPORT_FORMATS:
            raise InvalidArgument(f"format must be one of {', '.join(EXPORT_FORMATS)}, got {fmt!r}")
        target = Path(path)
        if not target.is_absolute():
            raise InvalidArgument(f"the export file must be an absolute path, got {path!r}")
        if target.exists():
            raise InvalidArgument(f"{path} exists: the export never writes over a file")
        readable = await self.resolve(ref, untrusted=untrusted, block=as_of)
        if not readable.table.files:
            # Nothing to write, and no schema for an empty file either (no data slice yet).
            raise InvalidArgument(
                f"{ref} has no records at {readable.head} (no data slice on its chain): "
                "nothing to export"
            )
        rows = await asyncio.to_thread(_export, readable.table.files, target, fmt, progress)
        return ExportResult(
            path=str(target),
            format=fmt,
            rows=rows,
            bytes=target.stat().st_size,
            did=readable.did,
            head=readable.head,
            trusted=readable.trusted,
            trust=readable.trust,
        )


def _missing_table(message: str) -> str | None:
    """The table name in an engine's "table not found" error, or None for other errors.

    DataFusion says ``table 'x' not found`` (its plan error adds the catalog and schema),
    Spark ``The table or view `x` cannot be found``. Plain string searches, no regular
    expression: the message carries the client's SQL text.
    """
    end = message.find("' not found")
    if end >= 0:
        start = message.rfind("table '", 0, end)
        if start >= 0 and "'" not in message[start + 7 : end]:
            return _bare(message[start + 7 : end])
    lower = message.lower()
    at = lower.find("table or view ")
    if at >= 0:
        stop = lower.find(" cannot be found", at)
        name = message[at + len("table or view ") : stop] if stop > at else ""
        if name and (" " not in name or name.startswith("`")):
            return _bare(name)
    return None


def _bare(name: str) -> str:
    name = name.replace("`", "")
    for prefix in ("datafusion.public.", "spark_catalog.default."):
        name = name.removeprefix(prefix)
    return name


def _named(sql: str, alias: str) -> bool:
    return f'"{alias}"' in sql or f"`{alias}`" in sql


def _mentioned(sql: str, alias: str) -> bool:
    """Whether ``sql`` may name ``alias``: quoted, or as a whole word in any case (Spark folds
    case; DataFusion also finds ``datafusion.public.alias``). A superset, so that an answer's
    inputs are not every dataset whose alias is a substring of the query (alias ``c`` in
    ``select city``, ``cities`` in ``"big-cities"``)."""
    if _named(sql, alias):
        return True
    # Quoted identifiers and string literals are other names or values: not this alias.
    # Plain string searches (no regular expression runs on the client's SQL).
    bare = _unquoted(sql).lower()
    needle = alias.lower()
    at = bare.find(needle)
    while at >= 0:
        before = bare[at - 1] if at > 0 else " "
        end = at + len(needle)
        after = bare[end] if end < len(bare) else " "
        if not _word_char(before) and not _word_char(after):
            return True
        at = bare.find(needle, at + 1)
    return False


def _word_char(c: str) -> bool:
    return c.isalnum() or c in "_$"


def _unquoted(sql: str) -> str:
    """``sql`` with every quoted identifier and string literal (``"…"``, `` `…` ``, ``'…'``,
    doubled quotes inside) replaced by a space; an unterminated one runs to the end."""
    parts: list[str] = []
    i, n = 0, len(sql)
    # The next position of each quote character, searched again only once passed: linear.
    ahead = {q: sql.find(q) for q in "\"`'"}
    while i < n:
        for q, at in ahead.items():
            if 0 <= at < i:
                ahead[q] = sql.find(q, i)
        starts = [k for k in ahead.values() if k >= 0]
        if not starts:
            parts.append(sql[i:])
            break
        k = min(starts)
        parts.append(sql[i:k])
        quote = sql[k]
        j = k + 1
        while True:
            close = sql.find(quote, j)
            if close < 0:
                j = n
                break
            if close + 1 < n and sql[close + 1] == quote:
                j = close + 2
                continue
            j = close + 1
            break
        parts.append(" ")
        i = j
    return "".join(parts)


def _dataset_kind(ds: Dataset) -> m.DatasetKind:
    """The kind its Seed names (the oldest block)."""
    kind = m.DatasetKind.ROOT
    for _, block in ds.iter_blocks(verify=False):
        if isinstance(block.event, m.Seed):
            kind = block.event.dataset_kind
    return kind


def _stored(ds: Dataset, block: str) -> bool:
    try:
        ds.get_block_bytes(Multihash.from_multibase(block), verify=False)
    except (BlockNotFound, InvalidMultihash):
        return False
    return True


def _on_chain(ds: Dataset, head: Multihash, block: str) -> bool:
    return any(str(h) == block for h, _ in ds.iter_blocks(head, verify=False))


def _walk_parts(ds: Dataset, head: str) -> _Parts:
    files: list[str] = []
    sequence = -1
    records = 0
    for h, block in ds.iter_blocks(Multihash.from_multibase(head), verify=False):
        if sequence < 0:
            sequence = block.sequence_number
        ev = block.event
        if isinstance(ev, m.AddData | m.ExecuteTransform) and ev.new_data is not None:
            nd = ev.new_data
            if records == 0:
                records = nd.offset_interval.end + 1
            path = ds.data.path_of(nd.physical_hash)
            if not path.is_file():
                raise QueryError(
                    f"data part {nd.physical_hash.to_multibase()} of block {h} is not stored "
                    "here (pull the dataset again)"
                )
            files.append(str(path))
    files.reverse()
    return _Parts(tuple(files), max(sequence, 0), records)


def _tail(files: tuple[str, ...], n: int) -> pa.Table:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pieces: list[pa.Table] = []
    have = 0
    for f in reversed(files):
        pf = pq.ParquetFile(f)
        groups: list[int] = []
        g = pf.num_row_groups - 1
        while g >= 0 and have < n:
            groups.insert(0, g)
            have += pf.metadata.row_group(g).num_rows
            g -= 1
        if groups:
            pieces.insert(0, pf.read_row_groups(groups))
        if have >= n:
            break
    if not pieces:
        return pa.table({})
    table = pa.concat_tables(pieces, promote_options="permissive")
    return table.slice(max(0, table.num_rows - n))


EXPORT_BATCH_ROWS = 65536
"""Rows read at a time by an export: memory stays bounded whatever the parts' row groups."""


def _export(
    files: tuple[str, ...], target: Path, fmt: str, progress: Callable[[int, int], None] | None
) -> int:
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    total = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    tmp = target.with_name(f".{target.name}.partial-{os.getpid()}")
    rows = 0
    writer: Any = None
    try:
        with open(tmp, "wb") as out:
            for f in files:
                pf = pq.ParquetFile(f)
                for batch in pf.iter_batches(batch_size=EXPORT_BATCH_ROWS):
                    rows += batch.num_rows
                    if fmt == "parquet":
                        if writer is None:
                            writer = pq.ParquetWriter(out, pf.schema_arrow)
                        writer.write_batch(batch)
                    elif fmt == "csv":
                        if writer is None:
                            writer = pcsv.CSVWriter(out, pf.schema_arrow)
                        writer.write_batch(batch)
                    else:
                        out.write(_ndjson(batch))
                    if progress is not None:
                        progress(rows, total)
            if writer is not None:
                writer.close()
                writer = None
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        if writer is not None:
            with contextlib.suppress(Exception):
                writer.close()
        tmp.unlink(missing_ok=True)
        raise
    return rows


def _ndjson(batch: pa.RecordBatch) -> bytes:
    """A batch as NDJSON lines, cells as :func:`json_cell` makes them (plain integer, string
    and boolean columns are JSON already: converting each of their cells would cost ~5x)."""
    import pyarrow as pa

    plain = (pa.types.is_integer, pa.types.is_string, pa.types.is_large_string, pa.types.is_boolean)
    columns: list[list[Any]] = []
    for field, column in zip(batch.schema, batch.columns, strict=True):
        values = column.to_pylist()
        if not any(is_type(field.type) for is_type in plain):
            values = [json_cell(v) for v in values]
        columns.append(values)
    names = batch.schema.names
    dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
    lines = [dumps(dict(zip(names, r, strict=True))) for r in zip(*columns, strict=True)]
    return ("\n".join(lines) + "\n").encode() if lines else b""


__all__ = [
    "EXPORT_FORMATS",
    "BlockNotOnChain",
    "ExportResult",
    "QueryAnswer",
    "ReadableTable",
    "StreamedAnswer",
    "UnknownTable",
    "VerifiedData",
    "json_cell",
]
