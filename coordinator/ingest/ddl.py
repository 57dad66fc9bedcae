"""Parse the DDL schema strings of ODF read steps into Arrow schemas, as kamu does.

kamu-cli v0.153 joins a read step's ``schema`` strings with ``", "``, plans
``CREATE TABLE x (<ddl>)`` with DataFusion 33 (generic SQL dialect) and takes the table schema
(``kamu_data_utils::schema::parse::parse_ddl_to_arrow_schema`` with ``force_utc_time``). This
module reproduces that mapping without DataFusion:

============================================  ===============================================
DDL type (case-insensitive)                    Arrow type
============================================  ===============================================
``BOOLEAN``, ``BOOL``                          ``bool``
``TINYINT``                                    ``int8``
``SMALLINT``, ``INT2``                         ``int16``
``INT``, ``INTEGER``, ``INT4``                 ``int32``
``BIGINT``, ``INT8``                           ``int64``
``... UNSIGNED`` (TINYINT/SMALLINT/INT/BIGINT) ``uint8`` / ``uint16`` / ``uint32`` / ``uint64``
``FLOAT``, ``FLOAT(p)``, ``REAL``, ``FLOAT4``  ``float32`` (note: not ``float64`` as in Spark)
``DOUBLE``, ``DOUBLE PRECISION``, ``FLOAT8``   ``float64``
``STRING``, ``TEXT``, ``VARCHAR[(n)]``,        ``utf8``
``CHAR[(n)]``
``DATE``                                       ``date32``
``TIMESTAMP [WITHOUT TIME ZONE]``              ``timestamp[ns, tz=UTC]`` (``force_utc_time``)
``TIMESTAMP WITH TIME ZONE``, ``TIMESTAMPTZ``  ``timestamp[ns, tz=+00:00]`` (session zone)
``TIME [WITHOUT TIME ZONE]``                   ``time64[ns]``
``DECIMAL`` / ``NUMERIC`` ``[(p[, s])]``       ``decimal128(p, s)``; default ``(38, 10)``,
                                               ``(p)`` means ``(p, 0)``; ``0 < p <= 38``,
                                               ``s <= p``
``BYTEA``                                      ``binary``
``INTERVAL``                                   ``month_day_nano_interval``
``ARRAY<T>``, ``T[]``                          ``list<field: T>`` (item nullable)
============================================  ===============================================

Unquoted column names are lower-cased (DataFusion's identifier normalisation); names in double
quotes or backquotes keep their case (a doubled quote escapes it). ``NOT NULL`` makes a field
non-nullable, ``NULL`` is accepted; other column options are refused. Types DataFusion 33
refuses (``CHARACTER``, ``BINARY``, ``JSON``, ``UUID``, ``DATETIME``, ``STRUCT``, precision
on ``TIMESTAMP``/``TIME``...) are refused here too.

The writer later normalises every top-level timestamp to ``timestamp[ms, tz=UTC]``
(:func:`normalize_schema`), which is what ends up in data files and ``SetDataSchema``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import pyarrow as pa

from coordinator.errors import InvalidDdlSchema

__all__ = [
    "DDL_TIMESTAMP",
    "NORMALIZED_TIMESTAMP",
    "normalize_schema",
    "normalize_type",
    "parse_ddl",
]

#: What ``TIMESTAMP`` parses to (DataFusion nanoseconds, forced to UTC by kamu).
DDL_TIMESTAMP: Final = pa.timestamp("ns", tz="UTC")
#: What every top-level timestamp column becomes in a data slice.
NORMALIZED_TIMESTAMP: Final = pa.timestamp("ms", tz="UTC")
# DataFusion's default ``datafusion.execution.time_zone``, used for ``WITH TIME ZONE``.
_SESSION_TZ: Final = "+00:00"
_DECIMAL128_MAX_PRECISION: Final = 38
# DataFusion 33 names the item field of SQL arrays "field".
_LIST_ITEM_NAME: Final = "field"

# DDL comes from snapshots and from a stranger's blocks: a run of ordinary characters in a quoted
# name is one possessive step (``[^"]++``), so a long unterminated name is walked once, in C
# (tests/unit/test_regex_audit.py).
_TOKEN: Final = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<dq>"(?:[^"]++|"")*")
  | (?P<bq>`(?:[^`]++|``)*`)
  | (?P<num>\d+)
  | (?P<word>[A-Za-z_#@][A-Za-z0-9_$#@]*)
  | (?P<punct>[(),<>\[\]])
    """,
    re.VERBOSE,
)


@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str  # "word" | "quoted" | "num" | "punct"
    text: str
    pos: int

    def is_word(self, *words: str) -> bool:
        return self.kind == "word" and self.text.upper() in words


def _tokenize(ddl: str) -> list[_Tok]:
    out: list[_Tok] = []
    pos = 0
    while pos < len(ddl):
        m = _TOKEN.match(ddl, pos)
        if m is None:
            raise InvalidDdlSchema(f"unexpected character {ddl[pos]!r} at {pos} in DDL {ddl!r}")
        kind = m.lastgroup
        text = m.group()
        if kind == "dq":
            out.append(_Tok("quoted", text[1:-1].replace('""', '"'), pos))
        elif kind == "bq":
            out.append(_Tok("quoted", text[1:-1].replace("``", "`"), pos))
        elif kind != "ws":
            assert kind is not None
            out.append(_Tok(kind, text, pos))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, ddl: str) -> None:
        self.ddl = ddl
        self.toks = _tokenize(ddl)
        self.i = 0

    # -- token helpers ---------------------------------------------------------------------

    def _peek(self, k: int = 0) -> _Tok | None:
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else None

    def _next(self) -> _Tok:
        tok = self._peek()
        if tok is None:
            raise self._error("unexpected end of DDL")
        self.i += 1
        return tok

    def _error(self, message: str) -> InvalidDdlSchema:
        tok = self._peek()
        where = f" at position {tok.pos}" if tok is not None else ""
        return InvalidDdlSchema(f"{message}{where} in DDL schema {self.ddl!r}")

    def _accept_punct(self, ch: str) -> bool:
        tok = self._peek()
        if tok is not None and tok.kind == "punct" and tok.text == ch:
            self.i += 1
            return True
        return False

    def _expect_punct(self, ch: str) -> None:
        if not self._accept_punct(ch):
            raise self._error(f"expected {ch!r}")

    def _accept_word(self, *words: str) -> str | None:
        tok = self._peek()
        if tok is not None and tok.is_word(*words):
            self.i += 1
            return tok.text.upper()
        return None

    def _number(self) -> int:
        tok = self._next()
        if tok.kind != "num":
            self.i -= 1
            raise self._error("expected a number")
        return int(tok.text)

    def _opt_length(self) -> int | None:
        if self._accept_punct("("):
            n = self._number()
            self._expect_punct(")")
            return n
        return None

    # -- grammar -----------------------------------------------------------------------------

    def parse(self) -> pa.Schema:
        fields: list[pa.Field] = []
        seen: set[str] = set()
        if self._peek() is None:
            raise self._error("empty DDL schema")
        while True:
            f = self._column()
            if f.name in seen:
                raise InvalidDdlSchema(f"duplicate column {f.name!r} in DDL schema {self.ddl!r}")
            seen.add(f.name)
            fields.append(f)
            if self._peek() is None:
                break
            self._expect_punct(",")
        return pa.schema(fields)

    def _column(self) -> pa.Field:
        tok = self._next()
        if tok.kind == "quoted":
            name = tok.text
        elif tok.kind == "word":
            name = tok.text.lower()
        else:
            self.i -= 1
            raise self._error("expected a column name")
        if not name:
            raise self._error("empty column name")
        typ = self._type()
        nullable = True
        while True:
            if self._accept_word("NOT"):
                if not self._accept_word("NULL"):
                    raise self._error("expected NULL after NOT")
                nullable = False
            elif self._accept_word("NULL"):
                nullable = True
            else:
                break
        after = self._peek()
        if after is not None and not (after.kind == "punct" and after.text == ","):
            raise self._error(f"unsupported column option {after.text!r} for column {name!r}")
        return pa.field(name, typ, nullable=nullable)

    def _type(self) -> pa.DataType:
        typ = self._simple_type()
        # Postgres-style array suffixes: INT[] (DataFusion 33 supports one level only).
        while self._accept_punct("["):
            self._expect_punct("]")
            if pa.types.is_list(typ):
                raise self._error("nested arrays are not supported")
            typ = pa.list_(pa.field(_LIST_ITEM_NAME, typ, nullable=True))
        return typ

    def _simple_type(self) -> pa.DataType:
        """One SQL type name (with its modifiers) as the Arrow type DataFusion gives it."""
        tok = self._next()
        if tok.kind != "word":
            self.i -= 1
            raise self._error("expected a type")
        word = tok.text.upper()
        if word in _PLAIN_TYPES:
            return _PLAIN_TYPES[word]
        if word in _LENGTH_TYPES:
            self._opt_length()  # (n) is accepted and ignored, as DataFusion does
            return _LENGTH_TYPES[word]
        if word in _SIGNED_INTS:
            return self._integer_type(word)
        parse = _MODIFIED_TYPES.get(word)
        if parse is None:
            self.i -= 1
            raise self._error(f"unsupported SQL type {tok.text!r}")
        return parse(self, word)

    def _integer_type(self, word: str) -> pa.DataType:
        """An integer type: an ignored display width (``INT(11)``), then optional ``UNSIGNED``."""
        self._opt_length()
        if self._accept_word("UNSIGNED") is None:
            return _SIGNED_INTS[word]
        if word not in _UNSIGNED_INTS:
            # sqlparser only has UNSIGNED variants of the SQL-standard spellings here.
            raise self._error(f"{word} UNSIGNED is not supported")
        return _UNSIGNED_INTS[word]

    def _double_type(self, word: str) -> pa.DataType:
        """``DOUBLE [PRECISION]``."""
        self._accept_word("PRECISION")
        return pa.float64()

    def _timestamp_type(self, word: str) -> pa.DataType:
        """``TIMESTAMP [WITH[OUT] TIME ZONE]`` or ``TIMESTAMPTZ``; no precision."""
        if self._peek() is not None and self._accept_punct("("):
            raise self._error("TIMESTAMP precision is not supported")
        with_tz = word == "TIMESTAMPTZ" or self._time_zone_clause()
        return pa.timestamp("ns", tz=_SESSION_TZ) if with_tz else DDL_TIMESTAMP

    def _time_type(self, word: str) -> pa.DataType:
        """``TIME [WITHOUT TIME ZONE]``; no precision, no time zone."""
        if self._accept_punct("("):
            raise self._error("TIME precision is not supported")
        if self._time_zone_clause():
            raise self._error("TIME WITH TIME ZONE is not supported")
        return pa.time64("ns")

    def _decimal_type(self, word: str) -> pa.DataType:
        """``DECIMAL`` / ``NUMERIC`` with an optional ``(precision[, scale])``."""
        precision: int | None = None
        scale: int | None = None
        if self._accept_punct("("):
            precision = self._number()
            if self._accept_punct(","):
                scale = self._number()
            self._expect_punct(")")
        return self._decimal(precision, scale)

    def _array_type(self, word: str) -> pa.DataType:
        """``ARRAY<type>``: a list of nullable items."""
        if not self._accept_punct("<"):
            raise self._error("arrays with unspecified type are not supported")
        inner = self._simple_type()
        self._expect_punct(">")
        return pa.list_(pa.field(_LIST_ITEM_NAME, inner, nullable=True))

    def _time_zone_clause(self) -> bool:
        """Consume ``WITH TIME ZONE`` / ``WITHOUT TIME ZONE``; True for ``WITH``."""
        w = self._accept_word("WITH", "WITHOUT")
        if w is None:
            return False
        if not (self._accept_word("TIME") and self._accept_word("ZONE")):
            raise self._error(f"expected TIME ZONE after {w}")
        return w == "WITH"

    def _decimal(self, precision: int | None, scale: int | None) -> pa.DataType:
        # DataFusion ``make_decimal_type``.
        if precision is None:
            precision, scale = _DECIMAL128_MAX_PRECISION, 10
        elif scale is None:
            scale = 0
        if precision == 0 or precision > _DECIMAL128_MAX_PRECISION or scale > precision:
            raise self._error(
                f"Decimal(precision = {precision}, scale = {scale}) should satisfy "
                "`0 < precision <= 38`, and `scale <= precision`"
            )
        return pa.decimal128(precision, scale)


_PLAIN_TYPES: Final[dict[str, pa.DataType]] = {
    "BOOLEAN": pa.bool_(),
    "BOOL": pa.bool_(),
    "REAL": pa.float32(),
    "FLOAT4": pa.float32(),
    "FLOAT8": pa.float64(),
    "STRING": pa.string(),
    "TEXT": pa.string(),
    "DATE": pa.date32(),
    "BYTEA": pa.binary(),
    "INTERVAL": pa.month_day_nano_interval(),
}
"""Type names that take no modifiers."""

_LENGTH_TYPES: Final[dict[str, pa.DataType]] = {
    "FLOAT": pa.float32(),
    "VARCHAR": pa.string(),
    "CHAR": pa.string(),
}
"""Type names that take an optional, ignored ``(n)``."""

_SIGNED_INTS: Final[dict[str, pa.DataType]] = {
    "TINYINT": pa.int8(),
    "SMALLINT": pa.int16(),
    "INT2": pa.int16(),
    "INT": pa.int32(),
    "INTEGER": pa.int32(),
    "INT4": pa.int32(),
    "BIGINT": pa.int64(),
    "INT8": pa.int64(),
}

_UNSIGNED_INTS: Final[dict[str, pa.DataType]] = {
    "TINYINT": pa.uint8(),
    "SMALLINT": pa.uint16(),
    "INT2": pa.uint16(),
    "INT": pa.uint32(),
    "INTEGER": pa.uint32(),
    "BIGINT": pa.uint64(),
}

_MODIFIED_TYPES: Final[dict[str, Callable[[_Parser, str], pa.DataType]]] = {
    "DOUBLE": _Parser._double_type,
    "TIMESTAMP": _Parser._timestamp_type,
    "TIMESTAMPTZ": _Parser._timestamp_type,
    "TIME": _Parser._time_type,
    "DECIMAL": _Parser._decimal_type,
    "NUMERIC": _Parser._decimal_type,
    "ARRAY": _Parser._array_type,
}
"""Type names parsed by a method of their own (modifiers, precision, inner types)."""


def parse_ddl(schema: str | Sequence[str]) -> pa.Schema:
    """Parse a read step's DDL schema (one string or the list of strings) into Arrow.

    Raises:
        InvalidDdlSchema: a syntax error, an unsupported type or a duplicate column name.
    """
    ddl = schema if isinstance(schema, str) else ", ".join(schema)
    return _Parser(ddl).parse()


def normalize_type(typ: pa.DataType) -> pa.DataType:
    """The type a top-level column ends up with in a data slice.

    kamu's writer (``normalize_raw_result``) casts every top-level timestamp, whatever its unit
    or zone, to ``timestamp[ms, tz=UTC]``; nested timestamps are left alone.
    """
    if pa.types.is_timestamp(typ):
        return NORMALIZED_TIMESTAMP
    return typ


def normalize_schema(schema: pa.Schema) -> pa.Schema:
    """Apply :func:`normalize_type` to every top-level field (names and nullability kept)."""
    return pa.schema(
        [pa.field(f.name, normalize_type(f.type), f.nullable, f.metadata) for f in schema],
        metadata=schema.metadata,
    )
