"""Arrow Flight SQL over the node's verified data (``[query] flight_sql_*``, docs/query.md).

kamu's Python client (PyPI ``kamu``: ``kamu.connect("grpc://host:port")``), the ADBC Flight SQL
driver and pandas ``read_sql`` over ADBC connect here as they connect to ``kamu sql server``:

* **Handshake.** Basic auth with the user ``anonymous`` (empty password, or ``anonymous``, as
  kamu accepts) answers an ``authorization: Bearer anon_…`` session token; every later call
  carries it. A token this server did not issue is refused; so is any other user (the node has
  no accounts). A session is the unit of ``[query] concurrency_per_client``.
* **Commands.** ``CommandStatementQuery``, prepared statements without parameters
  (``CreatePreparedStatement`` / ``ClosePreparedStatement`` actions,
  ``CommandPreparedStatementQuery``), ``CommandGetCatalogs``, ``CommandGetDbSchemas``,
  ``CommandGetTables`` (with ``include_schema``), ``CommandGetTableTypes``,
  ``CommandGetSqlInfo``; and ``show tables`` as kamu's examples run it. The catalog and schema
  are both ``kamu``, as in kamu's DataFusion session; a table is a dataset's alias (or DID).
* **Execution.** Every statement goes to the use case (``Application.data.query``: trusted
  heads only, the transform sandbox, ``[query]`` caps) on the daemon's event loop; the gRPC
  threads only wait for it, so the loop is never blocked. The answer is computed when the
  client asks for its ``FlightInfo`` (which carries the schema), kept under a one-use ticket and
  streamed as record batches by ``DoGet``.
* **Errors.** A :class:`~node.app.errors.QueryError` becomes a Flight error whose message is the
  use case's (naming the setting or the sandbox's reason): a sandbox refusal
  ``PERMISSION_DENIED``, a deadline ``DEADLINE_EXCEEDED``, a busy session ``UNAVAILABLE``, an
  oversized answer or another failure ``UNKNOWN``. Only Flight's error kinds are raised: pyarrow
  sends any other exception with the server's traceback.

Flight SQL's messages are protobuf ``Any`` values inside ``FlightDescriptor.cmd``, tickets and
action bodies (arrow's ``format/FlightSql.proto``); the few this server reads or writes are
encoded by hand below, so no generated code is needed.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import ipaddress
import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import pyarrow as pa
import pyarrow.flight as fl
import pyarrow.parquet as pq

from coordinator.errors import OdfNodeError
from coordinator.metadata.odf_schema import plain_arrow_type
from coordinator.protobuf_wire import decode_fields, encode_fields, read_varint
from node.app.errors import (
    HeadNotTrusted,
    QueryBusy,
    QueryDeadlineExceeded,
    QueryError,
    QueryRejected,
    Unavailable,
)
from node.app.ports import AnswerStream, QueryTable
from node.app.query_api import ClientLimiter

CATALOG = "kamu"
"""The catalog and schema name of every table (kamu's DataFusion session uses ``kamu``/``kamu``)."""
SCHEMA = "kamu"
TABLE_TYPE = "TABLE"
UNTRUSTED_HEADER = "x-odf-untrusted"
"""A call header (``true``) that reads untrusted heads, as ``--untrusted`` does; ADBC sets it
with the option ``adbc.flight.sql.rpc.call_header.x-odf-untrusted``."""

log = logging.getLogger(__name__)

_SQL_PREFIX = "type.googleapis.com/arrow.flight.protocol.sql."
_RESULT_TTL_S = 120.0
_RESULTS_PER_SESSION = 4
_SESSIONS_MAX = 4096
_RESULTS_MAX = 64
_STATEMENTS_PER_SESSION = 64
_BATCH_ROWS = 65536
_BATCH_BYTES = 4 << 20
"""Record batches of about this size: the Go gRPC client under ADBC refuses messages over
16 MiB, so wide rows make smaller batches."""
_WHOLE_BYTES = 4 << 20
"""An answer that ends within about this many bytes is taken whole by ``GetFlightInfo`` and
sent from the gRPC thread; a larger one is streamed as the worker computes it."""


# ---- the use case this adapter serves (``node.app.data.VerifiedData``, by shape)


class _Readable(Protocol):
    @property
    def table(self) -> QueryTable: ...


class _Answer(Protocol):
    @property
    def table(self) -> pa.Table: ...


class _Streamed(Protocol):
    @property
    def stream(self) -> AnswerStream: ...


class FlightDataReader(Protocol):
    """What the server needs of ``Application.data``: the readable tables and a query."""

    async def tables(self, *, untrusted: bool = False) -> Sequence[_Readable]:
        """The tables a query may read (``ReadableTable``: ``.table`` is a QueryTable)."""
        ...

    async def query(self, sql: str, *, untrusted: bool = False) -> _Answer:
        """The answer (``QueryAnswer``: ``.table`` is an Arrow table) or a QueryError."""
        ...

    async def query_stream(self, sql: str, *, untrusted: bool = False) -> _Streamed:
        """The answer as it is computed (``StreamedAnswer``: ``.stream``) or a QueryError."""
        ...


# ---- protobuf by hand (coordinator.protobuf_wire): varints and length-delimited fields


def pack_any(name: str, fields: Sequence[tuple[int, bytes | str | int]] = ()) -> bytes:
    """``google.protobuf.Any`` of the Flight SQL message ``name`` with ``fields``."""
    return encode_fields([(1, _SQL_PREFIX + name), (2, encode_fields(fields))])


def unpack_any(buf: bytes) -> tuple[str, dict[int, list[bytes | int]]]:
    """The Flight SQL message name and fields of an ``Any`` (``ValueError``: not one)."""
    outer = decode_fields(buf)
    type_url = _bytes(outer, 1).decode("utf-8", "replace")
    if not type_url.startswith(_SQL_PREFIX):
        raise ValueError(f"not a Flight SQL command: {type_url[:100]!r}")
    return type_url[len(_SQL_PREFIX) :], decode_fields(_bytes(outer, 2))


def _bytes(fields: dict[int, list[bytes | int]], num: int) -> bytes:
    values = fields.get(num)
    if not values:
        return b""
    v = values[-1]
    return v if isinstance(v, bytes) else b""


def _text(fields: dict[int, list[bytes | int]], num: int) -> str | None:
    values = fields.get(num)
    if not values:
        return None
    v = values[-1]
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else None


def _uint32s(fields: dict[int, list[bytes | int]], num: int) -> list[int]:
    out: list[int] = []
    for v in fields.get(num, []):
        if isinstance(v, int):
            out.append(v)
        else:  # packed
            i = 0
            while i < len(v):
                n, i = read_varint(v, i)
                out.append(n)
    return out


# ---- LIKE patterns of the metadata commands, matched without regular expressions


def like(value: str, pattern: str | None) -> bool:
    """SQL ``LIKE`` (``%`` any run, ``_`` one character, ``\\`` escapes) in O(len·len): the
    pattern is a client's string, so no backtracking regular expression sees it."""
    if pattern is None:
        return True
    tokens: list[str | None] = []  # None: %, "" : _, else a literal character
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            tokens.append(pattern[i + 1])
            i += 2
            continue
        tokens.append(None if c == "%" else "" if c == "_" else c)
        i += 1
    # reach[j]: the first j tokens match the value read so far.
    reach = [False] * (len(tokens) + 1)
    reach[0] = True
    for j, t in enumerate(tokens):
        reach[j + 1] = reach[j] and t is None
    for ch in value:
        nxt = [False] * (len(tokens) + 1)
        for j, t in enumerate(tokens):
            if t is None:  # % takes this character too, or matches nothing after it
                nxt[j + 1] = reach[j + 1] or nxt[j]
            else:
                nxt[j + 1] = reach[j] and t in ("", ch)
        reach = nxt
    return reach[-1]


# ---- the fixed answers (FlightSql.proto's result schemas)

_CATALOGS_SCHEMA = pa.schema([pa.field("catalog_name", pa.utf8(), nullable=False)])
_SCHEMAS_SCHEMA = pa.schema(
    [pa.field("catalog_name", pa.utf8()), pa.field("db_schema_name", pa.utf8(), nullable=False)]
)
_TABLES_FIELDS = [
    pa.field("catalog_name", pa.utf8()),
    pa.field("db_schema_name", pa.utf8()),
    pa.field("table_name", pa.utf8(), nullable=False),
    pa.field("table_type", pa.utf8(), nullable=False),
]
_TABLE_TYPES_SCHEMA = pa.schema([pa.field("table_type", pa.utf8(), nullable=False)])
_SQL_INFO_VALUE = pa.dense_union(
    [
        pa.field("string_value", pa.utf8()),
        pa.field("bool_value", pa.bool_()),
        pa.field("bigint_value", pa.int64()),
        pa.field("int32_bitmask", pa.int32()),
        pa.field("string_list", pa.list_(pa.utf8())),
        pa.field("int32_to_int32_list_map", pa.map_(pa.int32(), pa.list_(pa.int32()))),
    ],
    type_codes=[0, 1, 2, 3, 4, 5],
)
_SQL_INFO_SCHEMA = pa.schema(
    [
        pa.field("info_name", pa.uint32(), nullable=False),
        pa.field("value", _SQL_INFO_VALUE, nullable=False),
    ]
)

# SqlInfo codes (FlightSql.proto) and their values, as kamu's sql_info.rs states them for a
# read-only DataFusion server.
_SQL_INFO: dict[int, str | bool | int] = {
    0: "odf-node",  # FLIGHT_SQL_SERVER_NAME
    1: "0.1.0",  # FLIGHT_SQL_SERVER_VERSION
    2: "1.3",  # FLIGHT_SQL_SERVER_ARROW_VERSION (Schema.fbs format version)
    3: True,  # FLIGHT_SQL_SERVER_READ_ONLY
    4: True,  # FLIGHT_SQL_SERVER_SQL
    5: False,  # FLIGHT_SQL_SERVER_SUBSTRAIT
    8: 0,  # FLIGHT_SQL_SERVER_TRANSACTION: SQL_SUPPORTED_TRANSACTION_NONE
    9: False,  # FLIGHT_SQL_SERVER_CANCEL
    10: False,  # FLIGHT_SQL_SERVER_BULK_INGESTION
    100: 0,  # FLIGHT_SQL_SERVER_STATEMENT_TIMEOUT (ms; 0 = none)
    101: 0,  # FLIGHT_SQL_SERVER_TRANSACTION_TIMEOUT
    500: False,  # SQL_DDL_CATALOG
    501: False,  # SQL_DDL_SCHEMA
    502: False,  # SQL_DDL_TABLE
    503: 3,  # SQL_IDENTIFIER_CASE: SQL_CASE_SENSITIVITY_LOWERCASE (unquoted names)
    504: '"',  # SQL_IDENTIFIER_QUOTE_CHAR
    505: 1,  # SQL_QUOTED_IDENTIFIER_CASE: SQL_CASE_SENSITIVITY_CASE_INSENSITIVE
    506: True,  # SQL_ALL_TABLES_ARE_SELECTABLE
    507: 0,  # SQL_NULL_ORDERING: SQL_NULLS_SORTED_HIGH
}
_INT32_INFO = frozenset({8, 100, 101, 503, 505, 507})


def sql_info_table(wanted: Sequence[int]) -> pa.Table:
    """The ``CommandGetSqlInfo`` answer for ``wanted`` codes (all known ones when empty)."""
    codes = [c for c in (wanted or sorted(_SQL_INFO)) if c in _SQL_INFO]
    type_ids: list[int] = []
    offsets: list[int] = []
    strings: list[str] = []
    bools: list[bool] = []
    int32s: list[int] = []
    for c in codes:
        v = _SQL_INFO[c]
        if isinstance(v, bool):
            type_ids.append(1)
            offsets.append(len(bools))
            bools.append(v)
        elif isinstance(v, int):
            type_ids.append(3 if c in _INT32_INFO else 2)
            offsets.append(len(int32s))
            int32s.append(v)
        else:
            type_ids.append(0)
            offsets.append(len(strings))
            strings.append(v)
    children = [
        pa.array(strings, pa.utf8()),
        pa.array(bools, pa.bool_()),
        pa.array([], pa.int64()),
        pa.array(int32s, pa.int32()),
        pa.array([], pa.list_(pa.utf8())),
        pa.array([], pa.map_(pa.int32(), pa.list_(pa.int32()))),
    ]
    # Every int is an int32 here (bigint_value unused): type id 2 never occurs.
    value = pa.UnionArray.from_dense(
        pa.array(type_ids, pa.int8()),
        pa.array(offsets, pa.int32()),
        children,
        [f.name for f in _SQL_INFO_VALUE],
        [0, 1, 2, 3, 4, 5],
    )
    return pa.Table.from_arrays([pa.array(codes, pa.uint32()), value], schema=_SQL_INFO_SCHEMA)


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with view columns (DataFusion answers ``string_view``) as classic strings and
    binaries: clients that predate the view types read them, and a slice of a view array would
    carry every data buffer of the whole column into each IPC message (a 10M-row answer sent
    22 MB per 65,536-row batch, more than the ADBC client accepts)."""
    return pa.schema(
        [f.with_type(plain_arrow_type(f.type)) for f in schema], metadata=schema.metadata
    )


def batches(table: pa.Table, target: pa.Schema | None = None) -> Iterator[pa.RecordBatch]:
    """``table`` as record batches of ``target`` (default: :func:`plain_schema`), of at most
    ``_BATCH_ROWS`` rows and about ``_BATCH_BYTES`` (zero-copy slices, cast one by one when a
    column is a view)."""
    target = target or plain_schema(table.schema)
    rows = _BATCH_ROWS
    if table.num_rows:
        rows = max(1, min(_BATCH_ROWS, _BATCH_BYTES // max(1, table.nbytes // table.num_rows)))
    cast = target != table.schema
    for batch in table.to_batches(max_chunksize=rows):
        yield batch.cast(target) if cast else batch


def _is_show_tables(sql: str) -> bool:
    words = sql.strip().rstrip(";").split()
    return [w.lower() for w in words] == ["show", "tables"]


def _table_schema_bytes(table: QueryTable) -> bytes:
    """The Arrow schema of a table's data (its first parquet part's), IPC-serialized."""
    if not table.files:
        return bytes(pa.schema([]).serialize().to_pybytes())
    schema = pq.read_schema(table.files[0]).remove_metadata()
    return bytes(schema.serialize().to_pybytes())


# ---- sessions and results


@dataclass
class _Session:
    token: str
    statements: OrderedDict[bytes, str] = field(default_factory=OrderedDict)


class _Live:
    """A statement's answer being computed: its stream and the client's concurrency slot, both
    held until the answer is sent or dropped (:meth:`FlightSqlServer._drop`)."""

    def __init__(self, stream: AnswerStream, slot: contextlib.AsyncExitStack) -> None:
        self.stream = stream
        self.slot = slot
        self.head: list[pa.RecordBatch] = []
        """Batches already read from ``stream`` (by :meth:`whole`), sent before the rest."""

    async def whole(self, max_bytes: int) -> pa.Table | None:
        """The whole answer as a table, the stream closed and the slot released, when it ends
        within ``max_bytes``; else ``None`` (the batches read are kept in :attr:`head`).

        An aggregation's answer is complete with its first part: sending it as a table from
        the gRPC thread (Arrow's C++ stream) spares ``DoGet`` a hop to the daemon's loop per
        batch, the Python generator and the release hop."""
        size = 0
        while size <= max_bytes:
            batch = await self.stream.next_batch()
            if batch is None:
                await self.close()
                return pa.Table.from_batches(self.head, schema=self.stream.schema)
            self.head.append(batch)
            size += batch.nbytes
        return None

    async def close(self) -> None:
        try:
            await self.stream.close()
        finally:
            await self.slot.aclose()


@dataclass(frozen=True)
class _Result:
    token: str
    answer: pa.Table | _Live
    expires: float

    @property
    def nbytes(self) -> int:
        # A live answer is bounded by [query] max_bytes in the worker; only its head is here.
        if isinstance(self.answer, pa.Table):
            return int(self.answer.nbytes)
        return sum(int(b.nbytes) for b in self.answer.head)


class _Auth(fl.ServerMiddleware):  # type: ignore[misc]
    """One call's session token (answered in the handshake's ``authorization`` header)."""

    def __init__(self, token: str, untrusted: bool) -> None:
        self.token = token
        self.untrusted = untrusted

    def sending_headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.token}"}


class _AuthFactory(fl.ServerMiddlewareFactory):  # type: ignore[misc]
    """Basic auth for ``anonymous`` on the handshake; a token this server issued otherwise."""

    def __init__(self, server: FlightSqlServer) -> None:
        self._server = server

    def start_call(self, info: Any, headers: dict[str, list[str]]) -> _Auth:
        values = {k.lower(): v for k, v in headers.items()}
        auth = (values.get("authorization") or [""])[0]
        untrusted = (values.get(UNTRUSTED_HEADER) or [""])[0].strip().lower() in ("1", "true")
        scheme, _, cred = auth.partition(" ")
        if scheme.lower() == "basic":
            try:
                # The Go client (ADBC) sends base64 without padding; kamu accepts either.
                raw = base64.b64decode(cred.strip() + "=" * (-len(cred.strip()) % 4))
                user, _, password = raw.decode().partition(":")
            except (ValueError, UnicodeDecodeError) as e:
                raise fl.FlightUnauthenticatedError("authorization not parsable") from e
            if user != "anonymous" or password not in ("", "anonymous"):
                raise fl.FlightUnauthenticatedError(
                    "basic auth is only for the user 'anonymous' with no password; this node "
                    "has no accounts"
                )
            return _Auth(self._server.open_session(), untrusted)
        if scheme.lower() == "bearer" and self._server.has_session(cred.strip()):
            return _Auth(cred.strip(), untrusted)
        if scheme.lower() == "bearer":
            raise fl.FlightUnauthenticatedError(
                "unknown session token: handshake again (basic auth, user 'anonymous')"
            )
        raise fl.FlightUnauthenticatedError(
            "handshake first with basic auth as user 'anonymous' (kamu.connect and the ADBC "
            "driver with username 'anonymous' do), then send the bearer token it answers"
        )


class _NoopAuthHandler(fl.ServerAuthHandler):  # type: ignore[misc]
    """The handshake itself does nothing: the middleware authenticates from headers, as kamu's
    server and the Go Flight client expect (a server without a handler refuses Handshake)."""

    def authenticate(self, outgoing: Any, incoming: Any) -> None:
        return None

    def is_valid(self, token: bytes) -> str:
        return ""


T = TypeVar("T")


def flight_error(e: BaseException) -> Exception:
    """The Flight error a client sees for a use case's error (its message kept)."""
    msg = str(e) or type(e).__name__
    err: Exception
    # Flight errors only: any other exception (pa.ArrowInvalid too) reaches the client with the
    # server's Python traceback in its detail.
    if isinstance(e, QueryDeadlineExceeded):
        err = fl.FlightTimedOutError(msg)
    elif isinstance(e, QueryBusy):
        err = fl.FlightUnavailableError(msg)
    elif isinstance(e, (QueryRejected, HeadNotTrusted)):
        # What the sandbox or the trust rules do not permit: PERMISSION_DENIED (ADBC raises
        # ProgrammingError), with the reason.
        err = fl.FlightUnauthorizedError(f"{type(e).__name__}: {msg}")
    elif isinstance(e, (QueryError, OdfNodeError)):
        # QueryTooLarge, an unknown table, a failed query: UNKNOWN, with the use case's message.
        err = fl.FlightServerError(f"{type(e).__name__}: {msg}")
    else:
        err = fl.FlightInternalError(f"internal error: {type(e).__name__}")
    return err


F = TypeVar("F", bound=Callable[..., Any])


def _guarded(fn: F) -> F:
    """An RPC method whose every failure reaches the client as a Flight error (any other
    exception would carry the server's Python traceback to it)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except fl.FlightError:
            raise
        except (QueryError, OdfNodeError) as e:
            raise flight_error(e) from None
        except ValueError as e:  # a malformed command, ticket or action body
            raise fl.FlightServerError(f"malformed request: {e}") from None
        except Exception as e:
            log.exception("flight-sql: %s failed", fn.__name__)
            raise fl.FlightInternalError(f"internal error: {type(e).__name__}") from None

    return wrapper  # type: ignore[return-value]


def _peer_is_loopback(peer: str) -> bool:
    """``ipv4:127.0.0.1:5000`` / ``ipv6:[::1]:5000`` (gRPC's peer strings): loopback?"""
    kind, _, rest = peer.partition(":")
    if kind == "unix":
        return True
    host = rest.rsplit(":", 1)[0].strip("[]")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    # A dual-stack listener sees IPv4 clients as ::ffff:a.b.c.d.
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return (mapped or ip).is_loopback


class FlightSqlServer(fl.FlightServerBase):  # type: ignore[misc]
    """Flight SQL over ``data`` (``Application.data``), its calls run on ``loop``.

    gRPC serves calls on its own threads from construction on; :meth:`shutdown` (from any
    thread but ``loop``'s) waits for running calls. ``public``: answer other hosts too.
    """

    def __init__(
        self,
        data: FlightDataReader,
        loop: asyncio.AbstractEventLoop,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        public: bool = False,
        concurrency_per_client: int = 2,
        deadline_s: float = 30.0,
        limiter: ClientLimiter | None = None,
        kept_bytes: int = 1 << 30,
        max_sql_bytes: int = 65536,
    ) -> None:
        self._data = data
        self._loop = loop
        self._public = public
        # The daemon passes the HTTP data API's limiter: one [query] concurrency_total for both
        # surfaces, and concurrency_per_client per HTTP peer or Flight SQL session.
        self._limiter = limiter or ClientLimiter(concurrency_per_client, 1 << 30)
        self._per_client = concurrency_per_client
        self._kept_bytes = kept_bytes
        self._max_sql_bytes = max_sql_bytes
        self._deadline_s = deadline_s
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._results: OrderedDict[bytes, _Result] = OrderedDict()
        location = f"grpc://[{host}]:{port}" if ":" in host else f"grpc://{host}:{port}"
        try:
            super().__init__(
                location, auth_handler=_NoopAuthHandler(), middleware={"auth": _AuthFactory(self)}
            )
        except (pa.ArrowException, OSError) as e:
            raise Unavailable(
                f"the Flight SQL server cannot listen on {location} "
                f"([query] flight_sql_host / flight_sql_port): {e}"
            ) from None
        self.host = host

    @property
    def url(self) -> str:
        """``grpc://host:port`` (what ``kamu.connect`` and the ADBC driver take)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"grpc://{host}:{self.port}"

    # ---- sessions

    def open_session(self) -> str:
        """A new anonymous session's token (the oldest session is forgotten past the cap)."""
        token = "anon_" + secrets.token_hex(16)
        with self._lock:
            self._sessions[token] = _Session(token)
            while len(self._sessions) > _SESSIONS_MAX:
                self._sessions.popitem(last=False)
        return token

    def has_session(self, token: str) -> bool:
        """Whether ``token`` names a session this server opened (and still keeps)."""
        with self._lock:
            return token in self._sessions

    def _session(self, context: Any) -> tuple[_Session, bool]:
        if not self._public and not _peer_is_loopback(context.peer()):
            raise fl.FlightUnauthorizedError(
                "this node answers Flight SQL from loopback clients only ([query] public = false)"
            )
        auth = context.get_middleware("auth")
        with self._lock:
            session = self._sessions.get(auth.token) if auth is not None else None
        if session is None:
            raise fl.FlightUnauthenticatedError("no session: handshake first")
        return session, bool(auth.untrusted)

    def _on_loop(self, make: Callable[[], Awaitable[T]]) -> T:
        """Run a use-case coroutine on the daemon's loop and wait for it in this gRPC thread."""

        async def run() -> T:
            return await make()

        fut = asyncio.run_coroutine_threadsafe(run(), self._loop)
        try:
            # The use case enforces [query] deadline_s itself; this bound only stops a thread
            # from waiting forever on a loop that went away.
            return fut.result(timeout=self._deadline_s + 60.0)
        except FutureTimeout as e:
            fut.cancel()
            raise fl.FlightTimedOutError(
                f"no answer within [query] deadline_s = {self._deadline_s} s (+60 s)"
            ) from e
        except (QueryError, OdfNodeError) as e:
            raise flight_error(e) from e

    # ---- computing answers

    def _check_sql(self, sql: str) -> str:
        if len(sql.encode()) > self._max_sql_bytes:
            raise flight_error(
                QueryRejected(
                    f"the query is {len(sql.encode())} bytes, over [query] max_sql_bytes "
                    f"({self._max_sql_bytes})"
                )
            )
        return sql

    def _run_sql(self, session: _Session, untrusted: bool, sql: str) -> pa.Table | _Live:
        if _is_show_tables(sql):
            return self._show_tables(untrusted)

        self._supersede(session)

        async def run() -> pa.Table | _Live:
            # The slot is held until the answer is sent or dropped, not only while it starts.
            slot = contextlib.AsyncExitStack()
            await slot.enter_async_context(self._limiter.slot(f"flight-sql:{session.token}"))
            try:
                answer = await self._data.query_stream(sql, untrusted=untrusted)
            except BaseException:
                await slot.aclose()
                raise
            live = _Live(answer.stream, slot)
            try:
                # A small answer is taken whole now; a large one is streamed by DoGet.
                whole = await live.whole(_WHOLE_BYTES)
            except BaseException:
                await live.close()
                raise
            return live if whole is None else whole

        return self._on_loop(run)

    def _supersede(self, session: _Session) -> None:
        """Drop the session's oldest answers not fetched yet while they hold all its slots: a
        client that runs a new statement has moved on (ADBC executes a statement and may
        never fetch it), and would otherwise be refused as busy by its own leftovers."""
        with self._lock:
            live = [
                h
                for h, r in self._results.items()
                if r.token == session.token and isinstance(r.answer, _Live)
            ]
            stale = [self._results.pop(h) for h in live[: max(0, len(live) - self._per_client + 1)]]
        for r in stale:
            self._drop(r.answer, wait=True)

    def _drop(self, answer: pa.Table | _Live, *, wait: bool = False) -> None:
        """Release a kept answer that will not be sent (its worker and slot); ``wait``: until
        it is released (from a gRPC thread only)."""
        if isinstance(answer, _Live):
            done = asyncio.run_coroutine_threadsafe(answer.close(), self._loop)
            if wait:
                with contextlib.suppress(Exception):
                    done.result(timeout=30.0)

    def _tables(self, untrusted: bool) -> list[QueryTable]:
        readable = self._on_loop(lambda: self._data.tables(untrusted=untrusted))
        return [r.table for r in readable]

    def _show_tables(self, untrusted: bool) -> pa.Table:
        names = [t.name for t in self._tables(untrusted)]
        return pa.table(
            {
                "table_catalog": pa.array([CATALOG] * len(names), pa.utf8()),
                "table_schema": pa.array([SCHEMA] * len(names), pa.utf8()),
                "table_name": pa.array(names, pa.utf8()),
                "table_type": pa.array(["BASE TABLE"] * len(names), pa.utf8()),
            }
        )

    def _get_tables(self, untrusted: bool, f: dict[int, list[bytes | int]]) -> pa.Table:
        catalog, schema_pat, name_pat = _text(f, 1), _text(f, 2), _text(f, 3)
        types = [v.decode() for v in f.get(4, []) if isinstance(v, bytes)]
        include_schema = bool(f.get(5, [0])[-1])
        rows: list[QueryTable] = []
        wanted = not types or TABLE_TYPE in types
        if catalog in (None, CATALOG) and like(SCHEMA, schema_pat) and wanted:
            rows = [t for t in self._tables(untrusted) if like(t.name, name_pat)]
        fields = list(_TABLES_FIELDS)
        columns: list[pa.Array] = [
            pa.array([CATALOG] * len(rows), pa.utf8()),
            pa.array([SCHEMA] * len(rows), pa.utf8()),
            pa.array([t.name for t in rows], pa.utf8()),
            pa.array([TABLE_TYPE] * len(rows), pa.utf8()),
        ]
        if include_schema:
            fields.append(pa.field("table_schema", pa.binary(), nullable=False))
            columns.append(pa.array([_table_schema_bytes(t) for t in rows], pa.binary()))
        return pa.Table.from_arrays(columns, schema=pa.schema(fields))

    def _answer(self, session: _Session, untrusted: bool, cmd: bytes) -> pa.Table | _Live:
        try:
            name, f = unpack_any(cmd)
        except ValueError as e:
            raise fl.FlightServerError(f"not a Flight SQL command: {e}") from e
        if name == "CommandStatementQuery":
            if _bytes(f, 2):
                raise fl.FlightServerError("transactions are not supported (the node is read-only)")
            return self._run_sql(session, untrusted, self._check_sql(_text(f, 1) or ""))
        if name == "CommandPreparedStatementQuery":
            with self._lock:
                sql = session.statements.get(_bytes(f, 1))
            if sql is None:
                raise fl.FlightServerError("unknown prepared statement handle (closed or expired)")
            return self._run_sql(session, untrusted, sql)
        if name == "CommandGetCatalogs":
            return pa.Table.from_pylist([{"catalog_name": CATALOG}], schema=_CATALOGS_SCHEMA)
        if name == "CommandGetDbSchemas":
            catalog, pattern = _text(f, 1), _text(f, 2)
            hit = catalog in (None, CATALOG) and like(SCHEMA, pattern)
            rows = [{"catalog_name": CATALOG, "db_schema_name": SCHEMA}] if hit else []
            return pa.Table.from_pylist(rows, schema=_SCHEMAS_SCHEMA)
        if name == "CommandGetTables":
            return self._get_tables(untrusted, f)
        if name == "CommandGetTableTypes":
            return pa.Table.from_pylist([{"table_type": TABLE_TYPE}], schema=_TABLE_TYPES_SCHEMA)
        if name == "CommandGetSqlInfo":
            return sql_info_table(_uint32s(f, 1))
        raise fl.FlightServerError(f"Flight SQL command {name} is not supported by this node")

    def _keep(self, session: _Session, answer: pa.Table | _Live) -> bytes:
        handle = secrets.token_bytes(16)
        now = time.monotonic()
        dropped: list[_Result] = []
        with self._lock:
            for h in [h for h, r in self._results.items() if r.expires < now]:
                dropped.append(self._results.pop(h))
            mine = [h for h, r in self._results.items() if r.token == session.token]
            for h in mine[: max(0, len(mine) - _RESULTS_PER_SESSION + 1)]:
                dropped.append(self._results.pop(h))
            self._results[handle] = _Result(session.token, answer, now + _RESULT_TTL_S)
            # Each kept answer is within [query] max_bytes; clients that never fetch their
            # answers lose the oldest ones, the node not its memory.
            total = sum(r.nbytes for r in self._results.values())
            while len(self._results) > 1 and (
                len(self._results) > _RESULTS_MAX or total > self._kept_bytes
            ):
                _, oldest = self._results.popitem(last=False)
                total -= oldest.nbytes
                dropped.append(oldest)
        for r in dropped:
            self._drop(r.answer)
        return handle

    # ---- Flight RPCs

    @_guarded
    def get_flight_info(self, context: Any, descriptor: fl.FlightDescriptor) -> fl.FlightInfo:
        """Compute the answer of a Flight SQL command; its ``FlightInfo`` names a ticket."""
        session, untrusted = self._session(context)
        if descriptor.descriptor_type != fl.DescriptorType.CMD:
            raise fl.FlightServerError("this node serves Flight SQL commands, not paths")
        answer = self._answer(session, untrusted, descriptor.command)
        handle = self._keep(session, answer)
        ticket = fl.Ticket(pack_any("TicketStatementQuery", [(1, handle)]))
        if isinstance(answer, _Live):  # its rows are still being computed: count unknown
            return fl.FlightInfo(
                plain_schema(answer.stream.schema), descriptor, [fl.FlightEndpoint(ticket, [])]
            )
        return fl.FlightInfo(
            plain_schema(answer.schema),
            descriptor,
            [fl.FlightEndpoint(ticket, [])],
            answer.num_rows,
            -1,
        )

    @_guarded
    def get_schema(self, context: Any, descriptor: fl.FlightDescriptor) -> fl.SchemaResult:
        """The schema of a command's answer (the answer is computed and dropped)."""
        session, untrusted = self._session(context)
        answer = self._answer(session, untrusted, descriptor.command)
        if isinstance(answer, _Live):
            self._drop(answer)
            return fl.SchemaResult(plain_schema(answer.stream.schema))
        return fl.SchemaResult(plain_schema(answer.schema))

    @_guarded
    def do_get(self, context: Any, ticket: fl.Ticket) -> fl.RecordBatchStream:
        """Stream a kept answer (each ticket is redeemed once, by the session that asked)."""
        session, _ = self._session(context)
        try:
            name, f = unpack_any(ticket.ticket)
        except ValueError as e:
            raise fl.FlightServerError(f"not a ticket of this node: {e}") from e
        if name != "TicketStatementQuery":
            raise fl.FlightServerError(f"not a ticket of this node: {name}")
        with self._lock:
            result = self._results.get(_bytes(f, 1))
            if result is not None and result.token == session.token:
                del self._results[_bytes(f, 1)]
            else:
                result = None
        if result is not None and result.expires < time.monotonic():
            self._drop(result.answer)
            result = None
        if result is None:
            raise fl.FlightServerError("unknown or expired ticket: run the statement again")
        answer = result.answer
        if isinstance(answer, _Live):
            return fl.GeneratorStream(plain_schema(answer.stream.schema), self._send_live(answer))
        reader = pa.RecordBatchReader.from_batches(plain_schema(answer.schema), batches(answer))
        return fl.RecordBatchStream(reader)

    def _send_live(self, answer: _Live) -> Iterator[pa.RecordBatch]:
        """The batches of a live answer as the worker computes them (each fetched on the
        daemon's loop), cast as :func:`batches` casts; the answer is released at the end, when
        the client goes away, or on an error (which reaches the client as a Flight error)."""
        target = plain_schema(answer.stream.schema)
        try:
            for batch in answer.head:
                yield from batches(pa.Table.from_batches([batch]), target)
            answer.head = []
            while True:
                batch = self._on_loop(answer.stream.next_batch)
                if batch is None:
                    return
                yield from batches(pa.Table.from_batches([batch]), target)
        finally:
            self._drop(answer)

    @_guarded
    def do_action(self, context: Any, action: fl.Action) -> Iterator[bytes]:
        """Prepared statements (no parameters) and ``CloseSession``."""
        session, _ = self._session(context)
        kind = action.type
        if kind == "CreatePreparedStatement":
            _, f = unpack_any(action.body.to_pybytes())
            if _bytes(f, 2):
                raise fl.FlightServerError("transactions are not supported (the node is read-only)")
            handle = secrets.token_bytes(16)
            sql = self._check_sql(_text(f, 1) or "")
            with self._lock:
                session.statements[handle] = sql
                while len(session.statements) > _STATEMENTS_PER_SESSION:
                    session.statements.popitem(last=False)
            # The dataset schema is left empty (allowed): knowing it means running the query.
            return iter([pack_any("ActionCreatePreparedStatementResult", [(1, handle)])])
        if kind == "ClosePreparedStatement":
            _, f = unpack_any(action.body.to_pybytes())
            with self._lock:
                session.statements.pop(_bytes(f, 1), None)
            return iter([])
        if kind == "CloseSession":
            with self._lock:
                self._sessions.pop(session.token, None)
            return iter([encode_fields([(1, 1)])])  # CloseSessionResult{status: CLOSED}
        raise fl.FlightServerError(f"action {kind} is not supported by this node")

    @_guarded
    def list_actions(self, context: Any) -> list[tuple[str, str]]:
        """The actions :meth:`do_action` takes."""
        return [
            ("CreatePreparedStatement", "prepare a statement (no parameters)"),
            ("ClosePreparedStatement", "forget a prepared statement"),
            ("CloseSession", "end this session"),
        ]

    @_guarded
    def do_put(self, context: Any, descriptor: Any, reader: Any, writer: Any) -> None:
        """Refused: the node's data is written by its datasets' chains, never by clients."""
        raise fl.FlightServerError("the node is read-only: updates and parameters are refused")


def start_in_thread(server: FlightSqlServer) -> threading.Thread:
    """Run ``server.serve()`` in a daemon thread (gRPC already accepts calls)."""
    t = threading.Thread(target=server.serve, name="flight-sql", daemon=True)
    t.start()
    return t


def stop(server: FlightSqlServer, thread: threading.Thread | None) -> None:
    """Shut the server down (waits for running calls) and join its thread."""
    with contextlib.suppress(Exception):
        server.shutdown()
    if thread is not None:
        thread.join(timeout=10)
