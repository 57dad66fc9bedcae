"""Which transform engines and versions this node replays, and how a block's version is chosen.

Pure policy, no engine import (see ``docs/engines.md``):

* ``spark``: one pinned line (PySpark 3.5, kamu-engine-spark 0.23.1 semantics);
* ``datafusion``: several pinned DataFusion releases, each in its own worker process, because
  the same SQL can produce differently typed (hence differently hashed) output on different
  DataFusion versions and the chain does not record which one produced a block;
* ``flink`` and ``risingwave`` are not replayed ("unverifiable: engine X").

For a DataFusion block the candidate versions are, in order: the one named by
``Transform.Sql.version`` when it maps to a pinned release; the one kamu-cli shipped at the
block's system time (:data:`KAMU_DATAFUSION_RELEASES`); then every other pinned release.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from coordinator.metadata import model as m
from coordinator.metadata.timestamp import Timestamp

SPARK = "spark"
DATAFUSION = "datafusion"
REPLAYABLE_ENGINES = frozenset({SPARK, DATAFUSION})
"""``Transform.Sql.engine`` values (case-insensitive) this node can run."""

SPARK_VERSION = "3.5"
DATAFUSION_VERSIONS: tuple[str, ...] = ("51.0.0", "41.0.0")
"""Pinned PyPI ``datafusion`` releases, newest first (each has its own virtual environment,
created by ``make setup``; keep the Makefile's ``DATAFUSION_VERSIONS`` equal)."""
NEWEST_DATAFUSION = DATAFUSION_VERSIONS[0]


@dataclass(frozen=True, slots=True)
class KamuRelease:
    """From ``since`` on, kamu-cli ran derivative transforms on ``image`` (DataFusion ``core``)."""

    since: Timestamp
    image: str
    core: str


KAMU_DATAFUSION_RELEASES: tuple[KamuRelease, ...] = (
    # kamu-cli v0.197.0 (2024-08-22) moved from engine-datafusion 0.7.2 (DataFusion 34) to
    # 0.8.0, and v0.198.2 to 0.8.1: both DataFusion 41.
    KamuRelease(Timestamp.parse("2024-08-22T00:00:00Z"), "0.8.1", "41.0.0"),
    # kamu-cli v0.256.1 (2026-01-17): engine-datafusion 0.9.0 on DataFusion 51.
    KamuRelease(Timestamp.parse("2026-01-17T00:00:00Z"), "0.9.0", "51.0.0"),
)
"""kamu-cli's engine-datafusion image by release date (older releases: DataFusion 34)."""

_IMAGE_TO_CORE = {"0.7.2": "34", "0.8.0": "41.0.0", "0.8.1": "41.0.0", "0.9.0": "51.0.0"}


def normalize_engine(name: str | None) -> str:
    """``Transform.Sql.engine`` in the form used for dispatch (lower case, trimmed)."""
    return (name or "").strip().lower()


def datafusion_core(version: str | None) -> str | None:
    """The pinned DataFusion release a ``Transform.Sql.version`` names, if any.

    Accepts an engine image version (``0.9.0``), a DataFusion version (``51.0.0``) or its
    major (``51``); None for an absent, unknown or unpinned version.
    """
    if not version:
        return None
    v = version.strip().lower().removeprefix("v")
    v = _IMAGE_TO_CORE.get(v, v)
    for pinned in DATAFUSION_VERSIONS:
        if v == pinned or v == pinned.split(".")[0]:
            return pinned
    return None


def inferred_datafusion_version(system_time: Timestamp) -> str | None:
    """The DataFusion release kamu-cli shipped at ``system_time`` (None before 41)."""
    found: str | None = None
    for r in KAMU_DATAFUSION_RELEASES:
        if system_time.epoch_ns >= r.since.epoch_ns:
            found = r.core
    return found


def candidate_versions(
    transform: m.TransformSql, system_time: Timestamp, available: tuple[str, ...]
) -> tuple[str, ...]:
    """Versions of ``transform``'s engine to try for a block stamped ``system_time``, in order.

    ``available`` are the versions the node can run now. For Spark that is its single line.
    """
    if normalize_engine(transform.engine) != DATAFUSION:
        return available[:1]
    order: list[str] = []
    for v in (
        datafusion_core(transform.version),
        inferred_datafusion_version(system_time) or DATAFUSION_VERSIONS[-1],
        *DATAFUSION_VERSIONS,
    ):
        if v is not None and v in available and v not in order:
            order.append(v)
    return tuple(order)


# -- version sensitivity -----------------------------------------------------------------------

STABLE_FUNCTIONS = frozenset(
    {
        # Same result type and value on DataFusion 41 and 51 for the same argument types.
        "abs",
        "coalesce",
        "nullif",
        "lower",
        "upper",
        "trim",
        "ltrim",
        "rtrim",
        "btrim",
        "length",
        "char_length",
        "character_length",
        "octet_length",
        "starts_with",
        "ends_with",
        "strpos",
        "replace",
        "left",
        "right",
        "lpad",
        "rpad",
        "reverse",
        "repeat",
        "concat",
        "concat_ws",
        "substr",
        "substring",
        "md5",
        "sha256",
        "isnan",
        "signum",
        "ceil",
        "floor",
        "trunc",
        "sqrt",
        "greatest",
        "least",
    }
)
"""Functions a DataFusion query may call without becoming *version-sensitive*. String
functions whose output moved from Utf8 to Utf8View are here: arrow-digest hashes both alike."""

# Patterns over SQL from a stranger's block (up to the 16 MiB block limit): each is linear in the
# text (tests/unit/test_regex_audit.py). A name is matched from the start of its word only (the
# lookbehind; leading digits skipped): retrying from every letter of a long word with no ``(``
# after it was quadratic.
_FUNCTION_CALL = re.compile(r"(?<![A-Za-z0-9_])[0-9]*+([A-Za-z_][A-Za-z0-9_]*+)\s*+\(")
_KEYWORDS_NOT_FUNCTIONS = frozenset(
    {
        "select",
        "from",
        "where",
        "and",
        "or",
        "not",
        "in",
        "exists",
        "as",
        "on",
        "using",
        "values",
        "when",
        "then",
        "else",
        "case",
        "over",
        "filter",
        "cast",
        "try_cast",
        "join",
        "with",
        "is",
        "between",
        "like",
        "ilike",
    }
)
_STRING_CASTS = re.compile(
    r"(?:\bas\s+(?:varchar|string|text|char)\b|::\s*(?:varchar|string|text|char)\b)"
)
_EXTRACT_CALL = re.compile(r"\bextract\s*\(")
_ORDER_SENSITIVE = tuple(
    (re.compile(pattern), why)
    for pattern, why in (
        (r"\bjoin\b", "join (output order)"),
        (r"\bgroup\s+by\b", "aggregation (output order)"),
        (r"\bdistinct\b", "DISTINCT (output order)"),
        (r"\b(?:union|intersect|except)\b", "set operation (output order)"),
        (r"\border\s+by\b", "sort (tie order)"),
    )
)
_LINE_COMMENT = re.compile(r"--[^\n]*")
# A comment that is never closed is matched to the end of the text and kept (the former
# ``/\*.*?\*/`` left it too, but only after failing there and retrying from every later ``/*``:
# quadratic).
_BLOCK_COMMENT = re.compile(r"/\*.*?(?:(\*/)|\Z)", re.S)
# A run of ordinary characters is one possessive step: what it consumed is never given back
# (giving it back could not end the literal anyway).
_STRING_LITERAL = re.compile(r"'(?:[^']++|'')*'")


def _strip_literals(sql: str) -> str:
    """``sql`` lower-cased with string literals and comments blanked (quoted names kept)."""
    text = _LINE_COMMENT.sub(" ", sql)
    text = _BLOCK_COMMENT.sub(lambda c: " " if c.group(1) else c.group(), text)
    text = _STRING_LITERAL.sub("''", text)
    return text.lower()


def version_sensitivity(transform: m.TransformSql) -> tuple[str, ...]:
    """Why ``transform``'s output may differ between pinned DataFusion versions (empty: none).

    Conservative (a screen, not a proof): every function call outside
    :data:`STABLE_FUNCTIONS`, ``EXTRACT``, casts to strings (number formatting), joins,
    aggregations and set operations count. A mismatch of a version-sensitive query on every
    pinned version is *inconclusive*; of a query with none of these, it is a dispute.
    """
    reasons: list[str] = []

    def add(r: str) -> None:
        if r not in reasons:
            reasons.append(r)

    for step in transform.queries or ():
        text = _strip_literals(step.query)
        for fn in _FUNCTION_CALL.findall(text):
            if fn not in STABLE_FUNCTIONS and fn not in _KEYWORDS_NOT_FUNCTIONS:
                add(f"function {fn}()")
        if _EXTRACT_CALL.search(text):
            add("function extract()")
        if _STRING_CASTS.search(text):
            add("cast to string")
        for pattern, why in _ORDER_SENSITIVE:
            if pattern.search(text):
                add(why)
    return tuple(reasons)


__all__ = [
    "DATAFUSION",
    "DATAFUSION_VERSIONS",
    "KAMU_DATAFUSION_RELEASES",
    "NEWEST_DATAFUSION",
    "REPLAYABLE_ENGINES",
    "SPARK",
    "SPARK_VERSION",
    "STABLE_FUNCTIONS",
    "KamuRelease",
    "candidate_versions",
    "datafusion_core",
    "inferred_datafusion_version",
    "normalize_engine",
    "version_sensitivity",
]
