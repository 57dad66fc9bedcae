"""The Flight SQL server (node/transfer/flight_sql.py) over a stand-in of ``Application.data``,
driven by real third-party clients (the ADBC Flight SQL driver, kamu's Python client, pandas).

The stand-in answers a fixed table and a few canned errors; the daemon-level behaviour (the real
use case, the sandbox, ``status --json``) is tests/integration/test_flight_sql.py. Run in a
loopback-only namespace (``make test`` does): the server listens on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import adbc_driver_flightsql
import adbc_driver_flightsql.dbapi as flightsql
import adbc_driver_manager
import kamu
import pandas as pd
import pyarrow as pa
import pyarrow.flight as fl
import pyarrow.parquet as pq
import pytest

from node.adapters.query_answers import TableStream
from node.app.errors import QueryDeadlineExceeded, QueryRejected, Unavailable
from node.app.ports import QueryTable
from node.transfer.flight_sql import (
    FlightSqlServer,
    _peer_is_loopback,
    batches,
    decode_fields,
    encode_fields,
    like,
    pack_any,
    sql_info_table,
    start_in_thread,
    stop,
    unpack_any,
)

ROWS = pa.table(
    {
        "offset": pa.array([0, 1, 2], pa.int64()),
        "op": pa.array([0, 0, 0], pa.int32()),
        "system_time": pa.array([1_700_000_000_000] * 3, pa.timestamp("ms", tz="UTC")),
        "event_time": pa.array(
            [1_600_000_000_000, 1_600_000_001_000, 0], pa.timestamp("ms", tz="UTC")
        ),
        "city": ["a", "b", "c"],
    }
)


@dataclass(frozen=True)
class _Readable:
    table: QueryTable


@dataclass(frozen=True)
class _Answer:
    table: pa.Table


@dataclass(frozen=True)
class _Streamed:
    stream: TableStream


class StandIn:
    """Answers ``select 1``, the fixed dataset table, and refusals as the use case would."""

    def __init__(self, files: tuple[str, ...]) -> None:
        self.files = files
        self.untrusted_seen: list[bool] = []
        self.gate = threading.Event()
        self.started = threading.Event()
        self.gate.set()

    async def tables(self, *, untrusted: bool = False) -> list[_Readable]:
        return [_Readable(QueryTable("covid19.canada", "did:odf:fed01", "f1620aa", self.files))]

    async def query(self, sql: str, *, untrusted: bool = False) -> _Answer:
        self.untrusted_seen.append(untrusted)
        low = sql.lower()
        if "read_parquet" in low:
            raise QueryRejected(
                "reads a file (read_parquet): the sandbox allows dataset tables only"
            )
        if "sleep" in low:
            raise QueryDeadlineExceeded("the query ran past [query] deadline_s = 1.0 s")
        if "slow" in low:
            self.started.set()
            await asyncio.to_thread(self.gate.wait)
        if "covid19.canada" in low:
            return _Answer(ROWS)
        if "big" in low:  # 8 MB: over what GetFlightInfo takes whole
            return _Answer(pa.table({"n": pa.array(range(1_000_000), pa.int64())}))
        return _Answer(pa.table({"Int64(1)": pa.array([1], pa.int64())}))

    async def query_stream(self, sql: str, *, untrusted: bool = False) -> _Streamed:
        return _Streamed(TableStream((await self.query(sql, untrusted=untrusted)).table))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FlightSqlServer, StandIn]]:
    part = Path(tmp_path_factory.mktemp("flight")) / "part.parquet"
    pq.write_table(ROWS, part)
    data = StandIn((str(part),))
    loop = asyncio.new_event_loop()
    loop_thread = threading.Thread(target=loop.run_forever, daemon=True)
    loop_thread.start()
    server = FlightSqlServer(data, loop, concurrency_per_client=1, deadline_s=5.0)
    thread = start_in_thread(server)
    yield server, data
    stop(server, thread)
    loop.call_soon_threadsafe(loop.stop)
    loop_thread.join(timeout=5)


def _adbc(url: str, **extra: str) -> Any:
    kwargs = {
        adbc_driver_manager.DatabaseOptions.USERNAME.value: "anonymous",
        adbc_driver_manager.DatabaseOptions.PASSWORD.value: "",
        **extra,
    }
    return flightsql.connect(url, db_kwargs=kwargs, autocommit=True)


def test_protobuf_round_trip_and_like() -> None:
    msg = encode_fields([(1, "select 1"), (2, b"\x00\xff"), (3, 300)])
    assert decode_fields(msg) == {1: [b"select 1"], 2: [b"\x00\xff"], 3: [300]}
    name, fields = unpack_any(pack_any("CommandStatementQuery", [(1, "select 1")]))
    assert (name, fields) == ("CommandStatementQuery", {1: [b"select 1"]})
    with pytest.raises(ValueError):
        unpack_any(encode_fields([(1, "type.googleapis.com/other.Message")]))
    assert like("covid19.canada", "covid%") and like("a_b", "a\\_b") and not like("axb", "a\\_b")
    assert not like("abc", "a_") and like("", "%")
    # A pathological pattern costs len(value) * len(pattern) steps, no backtracking.
    assert not like("a" * 2000, "%a" * 200 + "b")
    info = sql_info_table([0, 3, 504, 9999]).to_pylist()
    assert info == [
        {"info_name": 0, "value": "odf-node"},
        {"info_name": 3, "value": True},
        {"info_name": 504, "value": '"'},
    ]


def test_loopback_peers() -> None:
    # gRPC's peer strings: only loopback clients are answered unless [query] public = true.
    assert _peer_is_loopback("ipv4:127.0.0.1:5000") and _peer_is_loopback("ipv6:[::1]:5000")
    assert _peer_is_loopback("ipv4:127.8.9.10:1") and _peer_is_loopback("unix:/tmp/s")
    assert not _peer_is_loopback("ipv4:10.0.0.7:5000")
    assert not _peer_is_loopback("ipv6:[2001:db8::1]:5000")
    assert not _peer_is_loopback("ipv6:[::ffff:10.0.0.7]:5000")
    assert _peer_is_loopback("ipv6:[::ffff:127.0.0.1]:5000")
    assert not _peer_is_loopback("garbage")


def test_batches_stay_under_the_adbc_message_cap() -> None:
    wide = pa.table({"s": ["x" * 100_000] * 300})  # 30 MB: one batch would be refused
    parts = list(batches(wide))
    assert sum(b.num_rows for b in parts) == 300 and max(b.nbytes for b in parts) <= 5 << 20
    assert [b.num_rows for b in batches(ROWS)] == [3]
    assert len(list(batches(ROWS.slice(0, 0)))) <= 1
    # View columns (DataFusion's answers) go as classic strings, each batch with its own bytes.
    views = pa.table({"s": pa.array([f"name-{i:08}-long-enough" for i in range(200_000)])})
    views = views.cast(pa.schema([pa.field("s", pa.string_view())]))
    parts = list(batches(views))
    assert {b.schema.field("s").type for b in parts} == {pa.string()}
    assert sum(b.num_rows for b in parts) == 200_000 and max(b.nbytes for b in parts) <= 5 << 20
    assert pa.Table.from_batches(parts).column("s").to_pylist()[-1] == "name-00199999-long-enough"


def test_adbc_select_tables_and_pandas(served: tuple[FlightSqlServer, StandIn]) -> None:
    server, _ = served
    with _adbc(server.url) as con:
        with con.cursor() as cur:
            cur.execute("select 1")
            assert cur.fetchall() == [(1,)]
        objects = con.adbc_get_objects(depth="all").read_all().to_pylist()
        assert [c["catalog_name"] for c in objects] == ["kamu"]
        [schema] = objects[0]["catalog_db_schemas"]
        assert schema["db_schema_name"] == "kamu"
        [table] = schema["db_schema_tables"]
        assert table["table_name"] == "covid19.canada"
        assert [c["column_name"] for c in table["table_columns"]] == ROWS.column_names
        assert con.adbc_get_table_schema("covid19.canada").names == ROWS.column_names
        assert con.adbc_get_info()["vendor_name"] == "odf-node"
        df = pd.read_sql('select * from "covid19.canada"', con)
        assert list(df["city"]) == ["a", "b", "c"]
        assert str(df["offset"].dtype) == "int64" and str(df["op"].dtype) == "int32"
        assert str(df["event_time"].dtype).endswith(", UTC]")
        # Prepared statements, as some clients (JDBC, SQLAlchemy) run every query.
        with con.cursor() as cur:
            cur.adbc_prepare("select 1")
            cur.execute("select 1")
            assert cur.fetch_arrow_table().num_rows == 1


def test_kamu_client_dtypes_and_show_tables(served: tuple[FlightSqlServer, StandIn]) -> None:
    server, _ = served
    with kamu.connect(server.url) as con:
        assert con.query("select 1").iloc[0, 0] == 1
        tables = con.query("show tables")
        assert list(tables["table_name"]) == ["covid19.canada"]
        df = con.query('select * from "covid19.canada"')
    assert df.dtypes["offset"] == "int64" and df.dtypes["op"] == "int32"
    assert str(df.dtypes["system_time"]) in ("datetime64[ms, UTC]", "datetime64[ns, UTC]")
    assert df["event_time"].iloc[0] == pd.Timestamp(1_600_000_000, unit="s", tz="UTC")


def test_errors_are_flight_errors_naming_the_reason(
    served: tuple[FlightSqlServer, StandIn],
) -> None:
    server, _ = served
    with _adbc(server.url) as con, con.cursor() as cur:
        with pytest.raises(adbc_driver_manager.ProgrammingError, match="reads a file"):
            cur.execute("select * from read_parquet('/etc/passwd')")
        with pytest.raises(adbc_driver_manager.OperationalError, match=r"deadline_s"):
            cur.execute("select sleep(100)")
        # No server traceback reaches the client.
        with pytest.raises(adbc_driver_manager.ProgrammingError) as refused:
            cur.execute("select * from read_parquet('/etc/passwd')")
        assert "Traceback" not in str(refused.value) and ".py" not in str(refused.value)
    closed = _adbc(server.url)
    closed.close()
    with pytest.raises(adbc_driver_manager.ProgrammingError):
        closed.cursor()


def test_a_taken_port_names_the_setting(served: tuple[FlightSqlServer, StandIn]) -> None:
    server, _ = served
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(Unavailable, match=r"\[query\] flight_sql_host / flight_sql_port"):
            FlightSqlServer(StandIn(()), loop, port=server.port)
    finally:
        loop.close()


def test_auth_sessions_and_concurrency(served: tuple[FlightSqlServer, StandIn]) -> None:
    server, data = served
    client = fl.FlightClient(server.url)
    # No handshake, a made-up token, another user: refused.
    with pytest.raises(fl.FlightUnauthenticatedError, match="anonymous"):
        list(client.list_actions())
    bad = fl.FlightCallOptions(headers=[(b"authorization", b"Bearer anon_forged")])
    with pytest.raises(fl.FlightUnauthenticatedError, match="unknown session"):
        list(client.list_actions(bad))
    with pytest.raises(fl.FlightUnauthenticatedError):
        client.authenticate_basic_token(b"admin", b"admin")
    header = client.authenticate_basic_token(b"anonymous", b"")
    assert header[0] == b"authorization" and header[1].startswith(b"Bearer anon_")
    opts = fl.FlightCallOptions(headers=[header])
    cmd = fl.FlightDescriptor.for_command(pack_any("CommandStatementQuery", [(1, "select 1")]))
    info = client.get_flight_info(cmd, opts)
    assert client.do_get(info.endpoints[0].ticket, opts).read_all().num_rows == 1
    # A ticket is redeemed once.
    with pytest.raises(fl.FlightServerError, match="expired ticket"):
        client.do_get(info.endpoints[0].ticket, opts).read_all()
    # concurrency_per_client = 1: a second query of the session while one runs is refused.
    data.gate.clear()
    slow = fl.FlightDescriptor.for_command(pack_any("CommandStatementQuery", [(1, "slow")]))
    t = threading.Thread(target=lambda: client.get_flight_info(slow, opts))
    t.start()
    try:
        assert data.started.wait(10)
        with pytest.raises(fl.FlightUnavailableError, match=r"\[query\] concurrency_per_client"):
            client.get_flight_info(cmd, opts)
        # Another session is not held up.
        other = fl.FlightCallOptions(headers=[client.authenticate_basic_token(b"anonymous", b"")])
        # (A small answer is complete with its first part: it is taken whole, its row count
        # known; a large one is streamed, see test_large_answer_streams.)
        theirs = client.get_flight_info(cmd, other)
        assert theirs.total_records == 1
        assert client.do_get(theirs.endpoints[0].ticket, other).read_all().num_rows == 1
    finally:
        data.gate.set()
        t.join(timeout=10)
    # SQL over [query] max_sql_bytes is refused unread, prepared or not.
    big = "select 1 -- " + "x" * 70_000
    huge = fl.FlightDescriptor.for_command(pack_any("CommandStatementQuery", [(1, big)]))
    with pytest.raises(fl.FlightUnauthorizedError, match=r"\[query\] max_sql_bytes"):
        client.get_flight_info(huge, opts)
    prepare = fl.Action("CreatePreparedStatement", pack_any("X", [(1, big)]))
    with pytest.raises(fl.FlightUnauthorizedError, match="max_sql_bytes"):
        list(client.do_action(prepare, opts))
    # Answers never fetched: a new statement supersedes the session's unfetched ones that hold
    # its slots (concurrency_per_client = 1 here), so the client is never busy with itself.
    infos = [client.get_flight_info(cmd, opts) for _ in range(6)]
    with pytest.raises(fl.FlightServerError, match="expired ticket"):
        client.do_get(infos[0].endpoints[0].ticket, opts).read_all()
    assert client.do_get(infos[-1].endpoints[0].ticket, opts).read_all().num_rows == 1
    # The untrusted header reaches the use case.
    untrusted = fl.FlightCallOptions(headers=[header, (b"x-odf-untrusted", b"true")])
    client.get_flight_info(cmd, untrusted)
    assert data.untrusted_seen[-1] is True
    option = adbc_driver_flightsql.DatabaseOptions.RPC_CALL_HEADER_PREFIX.value
    with _adbc(server.url, **{option + "x-odf-untrusted": "true"}) as con, con.cursor() as cur:
        cur.execute("select 1")
    assert data.untrusted_seen[-1] is True
    with _adbc(server.url) as con, con.cursor() as cur:
        cur.execute("select 1")
    assert data.untrusted_seen[-1] is False
    client.close()


def test_large_answer_streams(served: tuple[FlightSqlServer, StandIn]) -> None:
    """A small answer is taken whole (its row count known, its slot free); a large one keeps
    its slot and is streamed by DoGet, the batches read ahead sent first."""
    server, _ = served
    client = fl.FlightClient(server.url)
    opts = fl.FlightCallOptions(headers=[client.authenticate_basic_token(b"anonymous", b"")])
    big = fl.FlightDescriptor.for_command(pack_any("CommandStatementQuery", [(1, "big")]))
    info = client.get_flight_info(big, opts)
    assert info.total_records == -1
    # Its slot is held (concurrency_per_client = 1) until it is sent: another session's
    # small answer is not held up, and is taken whole.
    other = fl.FlightCallOptions(headers=[client.authenticate_basic_token(b"anonymous", b"")])
    one = fl.FlightDescriptor.for_command(pack_any("CommandStatementQuery", [(1, "select 1")]))
    assert client.get_flight_info(one, other).total_records == 1
    got = client.do_get(info.endpoints[0].ticket, opts).read_all()
    assert got.column("n").to_pylist() == list(range(1_000_000))
    # Sent: the slot is free again, a small answer twice in a row is never busy.
    for _ in range(2):
        small = client.get_flight_info(one, opts)
        assert small.total_records == 1
        assert client.do_get(small.endpoints[0].ticket, opts).read_all().num_rows == 1
