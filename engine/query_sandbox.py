"""The query sandbox: the transforms' SQL rules applied to a client's read-only query.

A query sent to ``odf-node sql``, ``/query`` or Flight SQL comes from anyone the node serves.
It is checked with :mod:`engine.datafusion_sandbox` (read its docstring), in this order:

1. **Size** (:func:`check_size`): a text over ``[query] max_sql_bytes`` is refused before any
   other code reads it (a length comparison; it is encoded only when it might fit).
2. **Lexical screen** (:func:`check_query_text`): one statement; ``SELECT``/``WITH``/``VALUES``
   only, so no DDL, DML, ``COPY``, ``SET``, ``EXPLAIN`` (``EXPLAIN ANALYZE`` would run the
   query outside the answer's bounds); the denied functions refused by name. The tokenizer is a
   hand-written linear scan: no regular expression that can backtrack runs on a client's text
   (``tests/unit/test_regex_audit.py``).
3. **Plan** (:func:`check_query_plan`, on ``LogicalPlan.display_indent()`` planned with DDL, DML
   and statements disallowed): the root is a query node, every ``TableScan`` is one of the
   request's dataset tables (so no file path, URL or table function such as
   ``generate_series()``/``range()``), denied functions refused by their canonical names.

Unlike a transform, a query changes nothing, so the time and random functions (``now()``,
``random()``…) would do no harm. They are refused all the same: a query's answer can be
verified (kamu's ``/verify`` re-runs it on the same heads and compares the output hash), and
an answer built from the clock or a random source cannot be reproduced; one rule for
transforms and queries is also one rule to explain. The session functions (``version()``,
``current_user``) are refused because they disclose the node's build.
"""

from __future__ import annotations

from collections.abc import Iterable

from engine.datafusion_sandbox import check_plan, check_text
from engine.errors import SandboxViolation


def check_size(sql: str, max_sql_bytes: int) -> None:
    """Refuse ``sql`` longer than ``max_sql_bytes`` UTF-8 bytes, before it is parsed.

    Raises:
        SandboxViolation: naming ``[query] max_sql_bytes``.
    """
    # Characters never outnumber bytes: a text with more characters than the bound is refused
    # without encoding it; one that might fit is encoded (at most 4x the bound).
    size = len(sql) if len(sql) > max_sql_bytes else len(sql.encode("utf-8", "surrogatepass"))
    if size > max_sql_bytes:
        raise SandboxViolation(
            f"the query is over {max_sql_bytes} bytes ([query] max_sql_bytes): send a shorter query"
        )


def check_query_text(sql: str, max_sql_bytes: int | None = None) -> None:
    """Steps 1 and 2 of the module docstring.

    Raises:
        SandboxViolation: with a reason worded for a query.
    """
    if max_sql_bytes is not None:
        check_size(sql, max_sql_bytes)
    try:
        check_text(sql)
    except SandboxViolation as e:
        raise SandboxViolation(_for_query(e.reason)) from None


def check_query_plan(display: str, tables: Iterable[str]) -> None:
    """Step 3 of the module docstring; ``tables`` are the names the plan's scans may show.

    Raises:
        SandboxViolation: with a reason worded for a query.
    """
    try:
        check_plan(display, tables)
    except SandboxViolation as e:
        raise SandboxViolation(_for_query(e.reason)) from None


def _for_query(reason: str) -> str:
    return reason.replace("is not an input of the transform", "is not a dataset table").replace(
        "per query step", "per query"
    )


__all__ = ["SandboxViolation", "check_query_plan", "check_query_text", "check_size"]
