"""Hostile queries against the DataFusion sandbox, on every pinned release's real worker.

Each query must be refused (``InvalidQuery``) and must touch neither the canary directory (a
real parquet and CSV file there; watched with inotify, which sees the worker's opens, reads,
listings and writes whatever language does them) nor the network (an HTTP listener on
loopback that the queries point at must see no connection). A positive control proves the
watch works and that a legitimate query runs.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from coordinator.transform.engines import DATAFUSION_VERSIONS
from coordinator.transform.model import TransformInvalidQuery, TransformSuccess
from node.engine_client import EngineClient
from node.engine_router import datafusion_python
from tests.golden.test_datafusion_engine import request
from tests.inotify import Inotify

pytestmark = pytest.mark.integration

HOSTILE = [
    # DDL / DML / statements
    "CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '{canary}/data.parquet'",
    "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION '{canary}/secret.csv'",
    "CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '{url}'",
    "COPY (SELECT 1) TO '{canary}/out.parquet'",
    "COPY foo TO '{canary}/out.csv' STORED AS CSV",
    "INSERT INTO foo VALUES (1)",
    "CREATE TABLE x AS SELECT * FROM foo",
    "CREATE VIEW v AS SELECT * FROM foo",
    "DROP TABLE foo",
    "SET datafusion.execution.target_partitions = 8",
    "PREPARE p AS SELECT * FROM foo",
    "SHOW ALL",
    "DESCRIBE foo",
    "EXPLAIN SELECT * FROM foo",
    "EXPLAIN ANALYZE SELECT * FROM foo",
    "CREATE FUNCTION f() RETURNS INT RETURN 1",
    "SELECT * INTO newt FROM foo",
    "SELECT * FROM foo; DROP TABLE foo",
    "SELECT event_time FROM foo /* ; */ ; COPY foo TO '{canary}/x.parquet'",
    # files and URLs as relations, file-reading table functions
    "SELECT * FROM '{canary}/data.parquet'",
    'SELECT * FROM "{canary}/data.parquet"',
    "SELECT * FROM '{url}'",
    "SELECT * FROM read_parquet('{canary}/data.parquet')",
    "SELECT * FROM read_csv('{canary}/secret.csv')",
    "SELECT * FROM parquet_metadata('{canary}/data.parquet')",
    "SELECT event_time, city FROM foo UNION ALL "
    "SELECT event_time, city FROM '{canary}/data.parquet'",
    "SELECT event_time, (SELECT max(city) FROM '{canary}/data.parquet') AS m FROM foo",
    "SELECT * FROM generate_series(1, 3)",
    # anything but the inputs
    "SELECT * FROM information_schema.tables",
    "SELECT * FROM information_schema.df_settings",
    "SELECT * FROM odf.odf.other",
    "SELECT * FROM another_table",
    # time, randomness, session
    "SELECT now() AS event_time, city FROM foo",
    "SELECT current_timestamp AS event_time, city FROM foo",
    "SELECT event_time, current_date AS d FROM foo",
    "SELECT event_time, current_time AS t FROM foo",
    "SELECT event_time, LOCALTIMESTAMP AS t FROM foo",
    "SELECT event_time, random() AS r FROM foo",
    "SELECT event_time, uuid() AS u FROM foo",
    'SELECT event_time, "now"() AS n FROM foo',
    "SELECT event_time, NOW ( ) AS n FROM foo",
    "SELECT event_time FROM foo WHERE random() > 0.5",
    "WITH x AS (SELECT now() AS n) SELECT event_time, n FROM foo, x",
    "SELECT event_time, to_timestamp(now()) AS t FROM foo",
    "SELECT event_time, version() AS v FROM foo",
    # facts about the verifier
    "SELECT event_time, current_user AS u FROM foo",
    "SELECT event_time, CURRENT_USER AS u FROM foo",
    "SELECT event_time, session_user AS u FROM foo",
    "SELECT event_time, current_role AS u FROM foo",
    "SELECT event_time, current_catalog AS u FROM foo",
    "SELECT event_time, user() AS u FROM foo",
    "SELECT event_time, current_user() AS u FROM foo",
    "SELECT event_time FROM foo WHERE version() LIKE '%'",
    # XML functions (none exists in the pinned releases; refused by name)
    "SELECT event_time, xpath_string('<!DOCTYPE a SYSTEM \"{url}\"><a>&ext;</a>', 'a') AS x "
    "FROM foo",
    'SELECT event_time, xpath_string(\'<!DOCTYPE a SYSTEM "file://{canary}/secret.csv">'
    "<a>&ext;</a>', 'a') AS x FROM foo",
    "SELECT event_time, XPATH(city, 'a') AS x FROM foo",
    "SELECT event_time, xpath_int(city, 'a') AS x FROM foo",
    "SELECT event_time, from_xml(city, 'a INT') AS x FROM foo",
    "SELECT event_time, schema_of_xml(city) AS x FROM foo",
    # kamu's JSON extension
    "SELECT event_time, json_get_str(city, 'a') AS j FROM foo",
    "SELECT event_time, JSON_LENGTH(city) AS j FROM foo",
]


@pytest.fixture(scope="module", params=DATAFUSION_VERSIONS)
def engine(request: Any) -> Iterator[EngineClient]:
    python = datafusion_python(request.param)
    with EngineClient(engine="datafusion", python=str(python), idle_timeout=0) as client:
        yield client


@pytest.fixture
def canary(tmp_path: Path) -> Iterator[tuple[Path, Inotify]]:
    d = tmp_path / "canary"
    d.mkdir()
    pq.write_table(pa.table({"city": ["secret"]}), d / "data.parquet")
    (d / "secret.csv").write_text("city\nsecret\n")
    watch = Inotify(d, d / "data.parquet", d / "secret.csv")
    yield d, watch
    watch.close()


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    s.setblocking(False)
    yield s
    s.close()


def _connections(s: socket.socket) -> int:
    n = 0
    while True:
        try:
            conn, _ = s.accept()
        except BlockingIOError:
            return n
        conn.close()
        n += 1


def test_the_watch_sees_file_access(canary: tuple[Path, Inotify]) -> None:
    d, watch = canary
    assert watch.events() == []
    (d / "secret.csv").read_text()
    assert watch.events() != []


def test_a_plain_query_runs_without_touching_the_canary(
    tmp_path: Path, engine: EngineClient, canary: tuple[Path, Inotify]
) -> None:
    _, watch = canary
    req = request(tmp_path / "ok")
    assert isinstance(engine.execute_transform(req), TransformSuccess)
    assert watch.events() == []


def test_corpus_is_big_enough() -> None:
    assert len(HOSTILE) >= 30


@pytest.mark.parametrize("query", HOSTILE)
def test_hostile_query_is_refused_without_file_or_network_access(
    tmp_path: Path,
    engine: EngineClient,
    canary: tuple[Path, Inotify],
    listener: socket.socket,
    query: str,
) -> None:
    d, watch = canary
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/x.parquet"
    sql = query.format(canary=d, url=url)
    req = request(tmp_path, queries=[(None, sql)])
    resp = engine.execute_transform(req)
    assert isinstance(resp, TransformInvalidQuery), (sql, resp)
    assert not req.new_data_path.exists()
    assert watch.events() == [], sql
    assert _connections(listener) == 0, sql
    assert sorted(p.name for p in d.iterdir()) == ["data.parquet", "secret.csv"]


def test_partition_hint_comments_are_ignored(tmp_path: Path, engine: EngineClient) -> None:
    """DataFusion has no partitioning hints: ``/*+ REPARTITION(100000) */`` is a comment, the
    query runs at once on the engine's single partition (Spark's sandbox refuses the hint)."""
    import time

    hint = "SELECT /*+ REPARTITION(100000) */ event_time, city, population FROM foo"
    t0 = time.monotonic()
    resp = engine.execute_transform(request(tmp_path / "hint", queries=[(None, hint)]))
    assert isinstance(resp, TransformSuccess), resp
    assert time.monotonic() - t0 < 10
