"""The DataFusion SQL sandbox: a query step may only read the request's input views.

A derivative's SQL comes from a stranger. Each step is checked before anything runs:

1. **Lexical screen** (:func:`scan`): the text is tokenised (string literals, quoted
   identifiers, comments, dollar-quoted strings understood), so a name inside a literal never
   counts and a quoted name (``"now"()``) still does. Refused: more than one statement; a first
   keyword other than ``SELECT``/``WITH``/``VALUES``/``(``; the time, random and session
   functions (``now()``, ``current_date``, ``random()``, ``uuid()``, ``version()``,
   ``current_user``…), also written without parentheses; XML functions (``xpath*``,
   ``from_xml``: none exists in the pinned releases, refused by name all the same); every
   ``json_*`` function (kamu's engine registers the ``datafusion-functions-json`` extension,
   which has no Python counterpart: running such a query here could not reproduce kamu's
   result, so it is refused with that reason).
2. **Planning without executing** with DDL, DML and statements disallowed
   (``sql_with_options``): ``CREATE``/``DROP``/``INSERT``/``COPY``/``SET``/``PREPARE``… fail
   here. The plan's root must be a query node (not ``Explain``/``Analyze``/``Dml``/``Copy``…)
   and every ``TableScan`` must be an input view, a raw input table or an earlier step: table
   functions (``generate_series()``, ``range()``) and anything else are refused. Functions are
   checked again on the plan by their canonical names (aliases resolve there).

The session itself holds nothing else: a fresh ``SessionContext`` per request with the
information schema off and no URL tables, so unknown names fail to plan.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

from engine.errors import SandboxViolation
from engine.sandbox import XML_FUNCTIONS

DENIED_FUNCTIONS = frozenset(
    {
        # current time: a replay would see another time
        "now",
        "current_timestamp",
        "current_date",
        "current_time",
        "localtime",
        "localtimestamp",
        "statement_timestamp",
        "transaction_timestamp",
        "clock_timestamp",
        "today",
        # randomness
        "random",
        "rand",
        "randn",
        "uuid",
        "gen_random_uuid",
        "uuidv4",
        "shuffle",
        # session and build disclosure
        "version",
        "current_user",
        "session_user",
        "user",
        "current_schema",
        "current_database",
        "current_catalog",
        "current_role",
        "pg_backend_pid",
        "arrow_metadata",
        # file and network readers (none is registered; refused by name all the same)
        "read_parquet",
        "read_csv",
        "read_json",
        "read_avro",
        "parquet_metadata",
        "parquet_scan",
        "read_file",
        "url",
        # XML parsing beyond the Spark names (engine.sandbox.XML_FUNCTIONS)
        "xmlparse",
        "xml_extract",
    }
    | XML_FUNCTIONS
)
"""Refused by (lower-case) name, called or bare."""
BARE_DENIED = frozenset(
    {
        "current_timestamp",
        "current_date",
        "current_time",
        "localtime",
        "localtimestamp",
        "current_user",
        "session_user",
        "current_schema",
        "current_catalog",
        "current_role",
    }
)
"""SQL keywords that call a function without parentheses."""
JSON_REFUSAL = (
    "json_* functions are refused: kamu's DataFusion engine registers the "
    "datafusion-functions-json extension, which has no Python equivalent, so this node cannot "
    "reproduce their results"
)
_QUERY_STARTS = frozenset({"select", "with", "values", "("})
_QUERY_NODES = frozenset(
    {
        "Projection",
        "Filter",
        "Aggregate",
        "Sort",
        "Limit",
        "Join",
        "CrossJoin",
        "Union",
        "Distinct",
        "DistinctOn",
        "SubqueryAlias",
        "Subquery",
        "Window",
        "WindowAggr",
        "Values",
        "EmptyRelation",
        "Unnest",
        "TableScan",
        "RecursiveQuery",
        "Repartition",
    }
)


@dataclass(frozen=True, slots=True)
class Token:
    """One lexical token: ``kind`` is word, quoted, string, number, punct."""

    kind: str
    text: str


def _lex_error(msg: str) -> SandboxViolation:
    return SandboxViolation(f"cannot parse the query: {msg}")


# Matched in place (``match(sql, i)``): a slice ``sql[i:]`` per ``$`` copied the rest of the
# query each time, quadratic in a query of dollar signs.
_DOLLAR_TAG = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*+)?\$")


def _block_comment_end(sql: str, i: int) -> int:
    """The index just past the (nested) ``/* ... */`` comment that starts at ``i``."""
    n = len(sql)
    depth, j = 1, i + 2
    while j < n and depth:
        if sql.startswith("/*", j):
            depth, j = depth + 1, j + 2
        elif sql.startswith("*/", j):
            depth, j = depth - 1, j + 2
        else:
            j += 1
    if depth:
        raise _lex_error("unterminated comment")
    return j


def _string_literal_end(sql: str, start: int, *, escapes: bool) -> int:
    """The index of the quote closing the string literal opened at ``start``.

    ``''`` is a quote inside the literal; with ``escapes`` (``E'...'``) so is ``\\'``.
    """
    n = len(sql)
    j = start + 1
    while True:
        if j >= n:
            raise _lex_error("unterminated string literal")
        if escapes and sql[j] == "\\":
            j += 2
            continue
        if sql[j] == "'":
            if j + 1 < n and sql[j + 1] == "'":
                j += 2
                continue
            return j
        j += 1


def _quoted_identifier(sql: str, i: int) -> tuple[str, int]:
    """The name quoted by ``sql[i]`` (a doubled quote stands for itself) and its closing quote."""
    q, n = sql[i], len(sql)
    j = i + 1
    buf = []
    while True:
        if j >= n:
            raise _lex_error("unterminated quoted identifier")
        if sql[j] == q:
            if j + 1 < n and sql[j + 1] == q:
                buf.append(q)
                j += 2
                continue
            return "".join(buf), j
        buf.append(sql[j])
        j += 1


def scan(sql: str) -> list[Token]:
    """Tokenise ``sql`` (comments dropped; words lower-cased; quoted names unquoted).

    Raises:
        SandboxViolation: unterminated literal, identifier or comment.
    """
    out: list[Token] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c.isspace():
            i += 1
        elif sql.startswith("--", i):
            j = sql.find("\n", i)
            i = n if j < 0 else j + 1
        elif sql.startswith("/*", i):
            i = _block_comment_end(sql, i)
        elif c == "'" or (c in "eEnNbBxXrR" and i + 1 < n and sql[i + 1] == "'"):
            start = i if c == "'" else i + 1
            j = _string_literal_end(sql, start, escapes=c in "eE")
            out.append(Token("string", sql[start + 1 : j]))
            i = j + 1
        elif c in ('"', "`"):
            name, j = _quoted_identifier(sql, i)
            out.append(Token("quoted", name))
            i = j + 1
        elif c == "$":
            m = _DOLLAR_TAG.match(sql, i)
            if m is None:
                out.append(Token("punct", c))
                i += 1
                continue
            tag = m.group(0)
            j = sql.find(tag, i + len(tag))
            if j < 0:
                raise _lex_error("unterminated dollar-quoted string")
            out.append(Token("string", sql[i + len(tag) : j]))
            i = j + len(tag)
        elif c.isalpha() or c == "_" or ord(c) > 127:
            j = i + 1
            while j < n and (sql[j].isalnum() or sql[j] in "_$" or ord(sql[j]) > 127):
                j += 1
            out.append(Token("word", sql[i:j].lower()))
            i = j
        elif c.isdigit():
            j = i + 1
            while j < n and (sql[j].isalnum() or sql[j] == "."):
                j += 1
            out.append(Token("number", sql[i:j]))
            i = j
        else:
            out.append(Token("punct", c))
            i += 1
    return out


@functools.lru_cache(maxsize=256)
def check_text(sql: str) -> None:
    """The lexical screen (step 1 of the module docstring).

    A pure function of the text: accepted texts are remembered (a replay checks the same
    query once per block; a refusal raises, and raising is never cached).

    Raises:
        SandboxViolation: with the reason.
    """
    tokens = scan(sql)
    while tokens and tokens[-1] == Token("punct", ";"):
        tokens.pop()
    if not tokens:
        raise SandboxViolation("the query is empty")
    if any(t == Token("punct", ";") for t in tokens):
        raise SandboxViolation("only one statement per query step is allowed")
    first = tokens[0].text if tokens[0].kind in ("word", "punct") else ""
    if first not in _QUERY_STARTS:
        raise SandboxViolation(f"only SELECT queries are allowed, got {tokens[0].text.upper()!r}")
    for k, t in enumerate(tokens):
        if t.kind not in ("word", "quoted"):
            continue
        name = t.text.lower() if t.kind == "word" else t.text
        called = k + 1 < len(tokens) and tokens[k + 1] == Token("punct", "(")
        qualified = k > 0 and tokens[k - 1] == Token("punct", ".")
        if name.lower().startswith("json_") and called:
            raise SandboxViolation(JSON_REFUSAL)
        if called and name.lower() in DENIED_FUNCTIONS:
            raise SandboxViolation(f"function {name.lower()}() is not allowed")
        if t.kind == "word" and not called and not qualified and name in BARE_DENIED:
            raise SandboxViolation(f"{name.upper()} is not allowed")
        if t.kind == "word" and name == "into":
            raise SandboxViolation("SELECT INTO is not allowed in a query")


# The plan of a stranger's query holds its names and literals: each pattern is linear in it
# (tests/unit/test_regex_audit.py). Indentation is matched within its line (``\s*`` after
# ``^`` ran across every following blank line, from each of them), and a name from the start of
# its word only (retrying from every letter of a long word was quadratic).
_SCAN = re.compile(r"^[^\S\n]*+TableScan: (.+?)(?: projection=.*)?$", re.M)
_JOIN = re.compile(r"^[A-Za-z]+ Join:")
_NODE_END = re.compile(r"[:\s]")
_CALL = re.compile(r"(?<![A-Za-z0-9_])[0-9]*+([A-Za-z_][A-Za-z0-9_]*+)\(")
_LITERAL = re.compile(r'(?:Large)?Utf8(?:View)?\("(?:[^"\\]++|\\.)*"\)')


def check_plan(display: str, allowed_tables: Iterable[str]) -> None:
    """Step 2 on a plan's ``display_indent()`` text.

    Raises:
        SandboxViolation: a non-query node, a scan of anything but ``allowed_tables``, or a
            denied function.
    """
    lines = [ln for ln in display.splitlines() if ln.strip()]
    if not lines:
        raise SandboxViolation("the query has no plan")
    allowed = set(allowed_tables)
    for ln in lines:
        head = ln.strip()
        if _JOIN.match(head):
            continue  # "Inner Join: …", "LeftSemi Join: …"
        node = _NODE_END.split(head, maxsplit=1)[0]
        if node not in _QUERY_NODES:
            raise SandboxViolation(f"{node} is not allowed in a query")
    for name in _SCAN.findall(display):
        table = name.strip()
        if table not in allowed:
            raise SandboxViolation(f"relation {table!r} is not an input of the transform")
    # String literals of the plan (``Utf8("now()")``) are data, not calls.
    for fn in _CALL.findall(_LITERAL.sub("", display)):
        low = fn.lower()
        if low.startswith("json_"):
            raise SandboxViolation(JSON_REFUSAL)
        if low in DENIED_FUNCTIONS:
            raise SandboxViolation(f"function {low}() is not allowed")


__all__ = [
    "BARE_DENIED",
    "DENIED_FUNCTIONS",
    "JSON_REFUSAL",
    "SandboxViolation",
    "Token",
    "check_plan",
    "check_text",
    "scan",
]
