"""The query sandbox (``engine/query_sandbox.py``) on hostile SQL, without an engine.

The text screen runs as the worker runs it; the plan check runs on ``display_indent()`` texts
that DataFusion 51 printed for these queries (the worker plans with the dataset tables
registered as views over ``__odf_table_<i>`` scans). ``tests/integration/test_query_engine.py``
sends the same shapes through real workers.
"""

from __future__ import annotations

import time

import pytest

from engine.query_sandbox import (
    SandboxViolation,
    check_query_plan,
    check_query_text,
    check_size,
)
from node.adapters.query_engine import DataFusionQueryEngine
from node.app.errors import QueryRejected
from node.app.ports import QueryLimits

TABLES = {"__odf_table_0"}

GROUP_BY = """\
Projection: covid19.canada.k, count(Int64(1)) AS count(*)
  Aggregate: groupBy=[[covid19.canada.k]], aggr=[[count(Int64(1))]]
    SubqueryAlias: covid19.canada
      TableScan: __odf_table_0
"""
JOIN = """\
Projection: a.k, b.k
  Inner Join:  Filter: a.k = b.k
    SubqueryAlias: a
      SubqueryAlias: covid19.canada
        TableScan: __odf_table_0
    SubqueryAlias: b
      Projection: Int64(1) AS k
        EmptyRelation: rows=1
"""
TIME_LITERAL = """\
Projection: date_trunc(Utf8("day"), to_timestamp(covid19.canada.k)), Utf8("now()")
  SubqueryAlias: covid19.canada
    TableScan: __odf_table_0
"""


@pytest.mark.parametrize(
    "sql",
    [
        'select k, count(*) from "covid19.canada" group by k',
        'select * from "did:odf:fed01a1b2c3"',
        "with t as (select 1 as x) select x from t",
        "values (1), (2)",
        "(select 1)",
        'select \'now()\', "random" from "a/b-c.d";',
        "select 1 -- now()\n",
    ],
)
def test_plain_queries_pass_the_text_screen(sql: str) -> None:
    check_query_text(sql, 65536)


@pytest.mark.parametrize(
    ("sql", "needle"),
    [
        ("select * from read_parquet('/etc/passwd')", "read_parquet"),
        ("select * from read_csv('file:///etc/passwd')", "read_csv"),
        ("copy (select 1) to '/tmp/out.csv'", "COPY"),
        ("COPY \"t\" TO 'http://127.0.0.1/x' STORED AS PARQUET", "COPY"),
        ("create external table x stored as parquet location '/etc'", "CREATE"),
        ("create table x as select 1", "CREATE"),
        ("insert into t values (1)", "INSERT"),
        ("drop table t", "DROP"),
        ("set datafusion.execution.batch_size = 1", "SET"),
        ("explain analyze select 1", "EXPLAIN"),
        ("explain select 1", "EXPLAIN"),
        ('select random() from "t"', "random"),
        ('select "now"() from "t"', "now"),
        ("select current_date", "CURRENT_DATE"),
        ("select version()", "version"),
        ("select uuid()", "uuid"),
        ("select 1; select 2", "one statement per query"),
        ("select 1;\n-- and then\nselect 2;", "one statement per query"),
        ("", "empty"),
        ("select 1 into t", "INTO"),
    ],
)
def test_hostile_text_is_refused(sql: str, needle: str) -> None:
    with pytest.raises(SandboxViolation) as info:
        check_query_text(sql, 65536)
    assert needle in info.value.reason
    assert "transform" not in info.value.reason


def test_plans_of_dataset_tables_pass() -> None:
    check_query_plan(GROUP_BY, TABLES)
    check_query_plan(JOIN, TABLES)
    check_query_plan(TIME_LITERAL, TABLES)  # "now()" inside a string literal is data


@pytest.mark.parametrize(
    ("display", "needle"),
    [
        (
            "Projection: generate_series().value\n  TableScan: generate_series()\n",
            "generate_series",
        ),
        ("Projection: range().value\n  TableScan: range()\n", "range"),
        ("Projection: t.k\n  TableScan: other_table\n", "other_table"),
        ("Explain\n  Projection: Int64(1)\n    EmptyRelation: rows=1\n", "Explain"),
        ("Analyze\n  Projection: Int64(1)\n    EmptyRelation: rows=1\n", "Analyze"),
        ("Dml: op=[Insert Into] table=[t]\n  Values: (Int64(1))\n", "Dml"),
        ("CopyTo: format=csv output_url=/tmp/x\n  TableScan: __odf_table_0\n", "CopyTo"),
        ("Projection: now()\n  EmptyRelation: rows=1\n", "now"),
        ('Projection: json_get(t.k, Utf8("a"))\n  TableScan: __odf_table_0\n', "json"),
        ("", "no plan"),
    ],
)
def test_hostile_plans_are_refused(display: str, needle: str) -> None:
    with pytest.raises(SandboxViolation) as info:
        check_query_plan(display, TABLES)
    assert needle in info.value.reason
    assert "transform" not in info.value.reason


def test_an_unknown_scan_is_named_as_not_a_dataset_table() -> None:
    with pytest.raises(SandboxViolation, match="'generate_series\\(\\)' is not a dataset table"):
        check_query_plan("TableScan: generate_series()\n", TABLES)


def test_max_sql_bytes_is_checked_before_parsing() -> None:
    check_size("select 1", 8)
    with pytest.raises(SandboxViolation, match=r"\[query\] max_sql_bytes"):
        check_size("select 10", 8)
    # counted in UTF-8 bytes, not characters: 4 characters, 12 bytes
    with pytest.raises(SandboxViolation, match=r"\[query\] max_sql_bytes"):
        check_size("€€€€", 8)
    # an unterminated literal would be a lexer error; over the bound it is never lexed
    with pytest.raises(SandboxViolation, match=r"\[query\] max_sql_bytes"):
        check_query_text("select '" + "x" * 100, 64)
    with pytest.raises(SandboxViolation, match="unterminated"):
        check_query_text("select '" + "x" * 10, 64)


def test_one_mebibyte_of_sql_is_refused_unread_and_screened_in_linear_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import engine.query_sandbox as qs

    mib = 1 << 20
    shapes = [
        "select " + "(" * (mib - 7),
        "select '" + "'" * (mib - 8),
        "select " + "/*" * (mib // 2),
        'select "' + "\\" * (mib - 8),
        "select " + "a" * (mib - 7),
        "select " + "1." * (mib // 2),
        "select " + "$$" * (mib // 2),
    ]
    screen = qs.check_text

    def unread(sql: str) -> None:
        raise AssertionError("the text of an over-long query was screened")

    for sql in shapes:
        # Over the bound: refused before any character is looked at.
        monkeypatch.setattr(qs, "check_text", unread)
        with pytest.raises(SandboxViolation, match=r"\[query\] max_sql_bytes"):
            check_query_text(sql, 65536)
        monkeypatch.setattr(qs, "check_text", screen)
        # Without the bound the screen still ends: a linear scan takes well under a second
        # for a mebibyte, a backtracking one hours (the bound is generous for a loaded machine).
        t0 = time.monotonic()
        try:
            check_query_text(sql + " ")
        except SandboxViolation:
            pass
        assert time.monotonic() - t0 < 30.0, sql[:20]


def test_the_adapter_refuses_long_sql_without_a_worker(tmp_path: object) -> None:
    import asyncio

    engine = DataFusionQueryEngine(warm_workers=0, max_sql_bytes=1024)
    limits = QueryLimits(deadline_s=1.0, memory_bytes=1 << 20, max_rows=10, max_bytes=1 << 20)

    async def go() -> None:
        with pytest.raises(QueryRejected, match=r"\[query\] max_sql_bytes"):
            await engine.query("select " + "1+" * 1024 + "1", (), limits)
        await engine.close()

    asyncio.run(go())
    assert engine.started == 0


def test_worker_directories_leave_a_small_dev_shm_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from node.adapters import query_engine

    class _Small:
        f_bavail = 16 << 10  # 64 MiB of 4 KiB blocks: Docker's default /dev/shm
        f_frsize = 4096

    monkeypatch.setattr(os, "statvfs", lambda _p: _Small())
    assert query_engine._work_root() is None

    def _gone(_p: object) -> os.statvfs_result:
        raise FileNotFoundError("/dev/shm")

    monkeypatch.setattr(os, "statvfs", _gone)
    assert query_engine._work_root() is None


def test_a_workers_memory_is_its_process_trees_read_without_scanning_proc() -> None:
    """``worker_tree_rss`` (polled on the event loop while a query runs) counts the same
    processes as ``process_tree_rss``, which reads every process's ``stat``: a shell with two
    children here; a process that is gone counts 0."""
    import os
    import signal
    import subprocess

    from node.adapters.query_engine import worker_tree_rss
    from node.engine_client import process_tree_rss

    tree = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30 & wait"])
    children: list[int] = []
    try:
        deadline = time.monotonic() + 10
        while len(children) < 2:  # until both run (the shell forks them after it starts)
            assert time.monotonic() < deadline
            time.sleep(0.01)
            with open(f"/proc/{tree.pid}/task/{tree.pid}/children") as f:
                children = [int(c) for c in f.read().split()]
        with open(f"/proc/{tree.pid}/statm", "rb") as f:
            shell_only = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        assert worker_tree_rss(tree.pid) == process_tree_rss(tree.pid) > shell_only
    finally:
        for child in children:
            os.kill(child, signal.SIGKILL)
        tree.kill()
        tree.wait()
    assert worker_tree_rss(tree.pid) == 0
