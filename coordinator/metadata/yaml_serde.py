"""YAML serde of ODF metadata in kamu-cli's RFC-013 form, text-identical to kamu-cli v0.153
(spec v0.34) and to kamu-cli HEAD (spec v0.39: ODF schema, renamed keys, short-form unions).

Reading and writing follow kamu's ``serde`` derivations (``serde/yaml/derivations_generated.rs``
@ v0.153.0), driven generically by the FlatBuffers field tables (``SPECS`` / ``UNIONS``):

* an envelope ``kind`` / ``version`` / ``content`` (``MetadataBlock`` uses the block version);
* camelCase field names in schema declaration order; absent optionals are omitted; unknown and
  duplicate fields are rejected;
* unions are internally tagged: ``kind: <Variant>`` first, the type prefix dropped
  (``FetchStepUrl`` -> ``Url``); metadata events use their own names;
* enums are PascalCase (``Root``, ``ByName``); the variant tags and enum values are also accepted
  in the old camelCase and the all-lowercase spelling, any other casing is rejected;
* hashes are multibase base16, dataset ids ``did:odf:f...``, timestamps RFC 3339 with ``Z`` and
  0/3/6/9 fractional digits, ``SetDataSchema`` Arrow bytes standard base64 with padding;
* spec v0.38 renamed a read step's DDL ``schema`` to ``ddlSchema`` and ``SetDataSchema``'s
  Arrow ``schema`` to ``rawArrowSchema`` (``schema`` is now the ODF schema, a mapping): both
  spellings are read; v2 blocks are written with the old keys, v3 blocks with the new ones;
* ``DataType``, ``EventTimeSource`` and ``SourceCaching`` may be written as a bare variant
  name (``type: String``, spec v0.38); read only, kamu always writes the tagged form.

Output is byte-identical to kamu's ``serde_yaml`` 0.9 (libyaml emitter, unlimited width, unicode
on): :class:`_Emitter` ports the relevant parts of libyaml's emitter (scalar analysis, style
choice, block/flow collections, plain/quoted/literal writers), and string styles are inferred the
way ``serde_yaml`` does (strings that would read back as null/bool/number are single-quoted,
multi-line strings use literal block style).

Reading uses a :class:`yaml.SafeLoader` subclass (libyaml-backed when available). PyYAML's
stock ``safe_load`` implements YAML 1.1 and would turn ``2020-01-01T12:00:00Z`` into a
``datetime`` (dropping nanoseconds) and ``yes``/``on`` into booleans; the loader below resolves
plain scalars exactly as ``serde_yaml`` does (YAML 1.2 core schema) and constructs only plain
Python data. Values taken from the tagged content are then type-checked strictly, as serde does
for internally tagged enums (a quoted ``'9'`` is not a number, a bare ``9`` is not a string).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Final

import yaml

from coordinator.errors import DecodeError, EncodeError, UnsupportedBlockVersion
from coordinator.identity.dataset_id import DatasetId
from coordinator.metadata import model as m
from coordinator.metadata.flatbuffers_serde import SPECS, SUPPORTED_BLOCK_VERSIONS, UNIONS
from coordinator.metadata.timestamp import Timestamp
from coordinator.multiformats import Multihash

#: Envelope kinds.
KIND_METADATA_BLOCK: Final = "MetadataBlock"
KIND_METADATA_EVENT: Final = "MetadataEvent"
#: The envelope version of a standalone ``MetadataEvent`` manifest (kamu writes 1).
METADATA_EVENT_VERSION: Final = 1

_U64_MAX: Final = (1 << 64) - 1

# ---------------------------------------------------------------------------------------------
# Plain-scalar resolution exactly as serde_yaml 0.9 ``visit_untagged_scalar`` (YAML 1.2 core)

_NULLS: Final = frozenset({"", "~", "null", "Null", "NULL"})
_TRUE: Final = frozenset({"true", "True", "TRUE"})
_FALSE: Final = frozenset({"false", "False", "FALSE"})
_DEC: Final = re.compile(r"[0-9]+")
_SIGNED_DEC: Final = re.compile(r"[+-]?[0-9]+")
_RADIX: Final = ((("0x", 16), re.compile(r"[0-9a-fA-F]+")), (("0o", 8), re.compile(r"[0-7]+")))
_BIN: Final = re.compile(r"[01]+")
_FLOAT: Final = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_POS_INF: Final = frozenset({".inf", ".Inf", ".INF"})
_NEG_INF: Final = frozenset({"-.inf", "-.Inf", "-.INF"})
_NAN: Final = frozenset({".nan", ".NaN", ".NAN"})


def _digits_but_not_number(s: str) -> bool:
    """serde_yaml: leading zero(s) followed by digits is a string in YAML 1.2 (``0123``)."""
    if s[:1] in ("+", "-"):
        s = s[1:]
    return len(s) > 1 and s[0] == "0" and _DEC.fullmatch(s, 1) is not None


def _radix_int(body: str) -> int | None:
    """``0x…``/``0o…``/``0b…`` without sign, or ``None``."""
    for (prefix, radix), pattern in _RADIX:
        if body.startswith(prefix) and pattern.fullmatch(body, 2):
            return int(body[2:], radix)
    if body.startswith("0b") and _BIN.fullmatch(body, 2):
        return int(body[2:], 2)
    return None


def _parse_int(s: str) -> int | None:
    """serde_yaml's u64 / i64 / u128 / i128 attempts (Rust ``from_str_radix`` rules)."""
    unpositive = s[1:] if s.startswith("+") else s
    if not unpositive.startswith(("+", "-")):
        value = _radix_int(unpositive)
        if value is not None and value < 1 << 128:
            return value
        if not _digits_but_not_number(s) and _DEC.fullmatch(unpositive):
            return int(unpositive)
    if s.startswith("-"):
        value = _radix_int(s[1:])
        if value is not None and value <= 1 << 127:
            return -value
    if not _digits_but_not_number(s) and _SIGNED_DEC.fullmatch(s):
        value = int(s)
        if -(1 << 127) <= value < 1 << 128:
            return value
    return None


def _parse_float(s: str) -> float | None:
    unpositive = s[1:] if s.startswith("+") else s
    if s.startswith("+") and unpositive.startswith(("+", "-")):
        return None
    if unpositive in _POS_INF:
        return math.inf
    if s in _NEG_INF:
        return -math.inf
    if s in _NAN:
        return math.nan
    if _FLOAT.fullmatch(unpositive):
        value = float(unpositive)
        if math.isfinite(value):
            return value
    return None


def resolve_plain_scalar(s: str) -> bool | int | float | str | None:
    """The value of an untagged *plain* YAML scalar, as ``serde_yaml`` 0.9 resolves it."""
    if s in _NULLS:
        return None
    if s in _TRUE:
        return True
    if s in _FALSE:
        return False
    as_int = _parse_int(s)
    if as_int is not None:
        return as_int
    if not _digits_but_not_number(s):
        as_float = _parse_float(s)
        if as_float is not None:
            return as_float
    return s


# ---------------------------------------------------------------------------------------------
# Loader

_PLAIN_TAG: Final = "tag:odf-node,2024:plain"
_STR_TAG: Final = "tag:yaml.org,2002:str"

if TYPE_CHECKING:
    _LoaderBase = yaml.SafeLoader
else:
    _LoaderBase = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_LoaderBase):
    """A safe loader resolving plain scalars like serde_yaml and rejecting duplicate keys."""

    def resolve(self, kind: type[yaml.Node], value: Any, implicit: tuple[bool, bool]) -> str:
        if kind is yaml.ScalarNode:
            return _PLAIN_TAG if implicit[0] else _STR_TAG
        return str(super().resolve(kind, value, implicit))  # type: ignore[no-untyped-call]

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        mapping = super().construct_mapping(node, deep=deep)
        if len(mapping) != len(node.value):
            seen: set[object] = set()
            for key_node, _ in node.value:
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else key_node.tag
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark
                    )
                seen.add(key)
            raise yaml.constructor.ConstructorError(
                None, None, "duplicate keys in mapping", node.start_mark
            )
        return mapping


def _construct_plain(loader: _Loader, node: yaml.Node) -> Any:
    if not isinstance(node, yaml.ScalarNode):  # pragma: no cover - resolve() tags scalars only
        raise yaml.constructor.ConstructorError(None, None, "expected a scalar", node.start_mark)
    return resolve_plain_scalar(str(loader.construct_scalar(node)))


_Loader.add_constructor(_PLAIN_TAG, _construct_plain)


# Limits on YAML from strangers (snapshots from any RPC client, manifests from peers), checked
# before anything is built: PyYAML's composer (C or Python) recurses once per nesting level, so a
# few thousand ``[`` overflow the C stack (SIGSEGV) or the interpreter's recursion limit, and
# aliases share one node, so a few lines can stand for 10**12 nodes that any later walk expands.

#: Deepest nesting of collections (sequences and mappings, counted through aliases) in a
#: document: serde_yaml's own recursion limit, so kamu refuses anything deeper too.
MAX_YAML_DEPTH: Final = 128
#: Largest YAML text accepted: bytes of a ``bytes`` input, characters of a ``str``.
MAX_YAML_SIZE: Final = 4 << 20
#: Most nodes a YAML stream may stand for, every alias counted as a full copy of its anchored
#: node (so "billion laughs" expansion is refused however it is later walked).
MAX_YAML_NODES: Final = 1_000_000

_COLLECTION_START: Final = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_COLLECTION_END: Final = (yaml.SequenceEndEvent, yaml.MappingEndEvent)


def yaml_text(data: str | bytes) -> str:
    """``data`` as YAML text: within :data:`MAX_YAML_SIZE` and, for bytes, valid UTF-8.

    serde_yaml reads UTF-8 text only (kamu reads files into a Rust ``String``), so UTF-16 and
    other encodings libyaml would detect from a byte-order mark are refused too.

    Raises:
        DecodeError: too large, or bytes that are not UTF-8 (with the offending offset).
    """
    if len(data) > MAX_YAML_SIZE:
        unit = "bytes" if isinstance(data, bytes) else "characters"
        raise DecodeError(f"YAML text too large: more than {MAX_YAML_SIZE} {unit}")
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DecodeError(
            f"YAML text is not UTF-8: invalid byte 0x{data[e.start]:02x} at offset {e.start}"
        ) from None


def _where(event: yaml.Event) -> str:
    mark = event.start_mark
    return f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""


def _check_structure(text: str) -> None:
    """Refuse nesting over :data:`MAX_YAML_DEPTH`, expansion over :data:`MAX_YAML_NODES` and
    recursive aliases, from the parser's event stream, before any node is composed.

    libyaml's (and PyYAML's) parser is a state machine with heap stacks, so reading events
    cannot overflow whatever the input; only the composer recurses. One linear pass keeps, per
    open collection, its expanded node count and height, and per anchor the same for aliases.

    Raises:
        DecodeError: a limit is exceeded (or the text is not YAML, as the loader would say).
    """
    # Per open collection: [expanded nodes so far (itself included), height of its children].
    open_nodes: list[list[int]] = []
    open_anchors: list[str | None] = []
    anchors: dict[str, tuple[int, int]] = {}  # anchor -> (expanded nodes, height)
    total = 0

    def close(nodes: int, height: int, anchor: str | None) -> None:
        if anchor is not None:
            anchors[anchor] = (nodes, height)
        if open_nodes:
            parent = open_nodes[-1]
            parent[0] += nodes
            parent[1] = max(parent[1], height)

    loader = None
    try:
        loader = _Loader(text)
        while loader.check_event():
            event = loader.get_event()  # type: ignore[no-untyped-call]
            if isinstance(event, yaml.DocumentStartEvent):
                anchors.clear()  # anchors are scoped to their document
            elif isinstance(event, _COLLECTION_START):
                if len(open_nodes) >= MAX_YAML_DEPTH:
                    raise DecodeError(
                        f"YAML nested deeper than {MAX_YAML_DEPTH} levels{_where(event)}"
                    )
                total += 1
                open_nodes.append([1, 0])
                open_anchors.append(event.anchor)
            elif isinstance(event, _COLLECTION_END):
                nodes, height = open_nodes.pop()
                close(nodes, height + 1, open_anchors.pop())
            elif isinstance(event, yaml.ScalarEvent):
                total += 1
                close(1, 0, event.anchor)
            elif isinstance(event, yaml.AliasEvent):
                anchor = str(event.anchor)
                if anchor in open_anchors:
                    raise DecodeError(f"recursive YAML alias *{anchor}{_where(event)}")
                # An unknown anchor is left to the loader, which reports it.
                nodes, height = anchors.get(anchor, (1, 0))
                if len(open_nodes) + height > MAX_YAML_DEPTH:
                    raise DecodeError(
                        f"YAML nested deeper than {MAX_YAML_DEPTH} levels through alias "
                        f"*{anchor}{_where(event)}"
                    )
                total += nodes
                close(nodes, height, None)
            if total > MAX_YAML_NODES:
                raise DecodeError(
                    f"YAML stands for more than {MAX_YAML_NODES} nodes (aliases expanded)"
                    f"{_where(event)}"
                )
    except DecodeError:
        raise
    except Exception as e:  # the parser's errors, or a str libyaml cannot encode (surrogates)
        raise DecodeError(f"malformed YAML: {e}") from e
    finally:
        if loader is not None:
            loader.dispose()


def _checked(text: str | bytes) -> str:
    """The text to load, once every limit above has been checked."""
    checked = yaml_text(text)
    _check_structure(checked)
    return checked


def load_yaml(text: str | bytes) -> Any:
    """Parse one YAML document into plain Python data (dict / list / str / int / float / bool /
    None) with serde_yaml's scalar resolution.

    Raises:
        DecodeError: malformed YAML, several documents, a construct outside plain data, text
            that is not UTF-8, or a limit exceeded (:data:`MAX_YAML_SIZE`,
            :data:`MAX_YAML_DEPTH`, :data:`MAX_YAML_NODES`, recursive aliases).
    """
    checked = _checked(text)
    try:
        return yaml.load(checked, Loader=_Loader)
    except Exception as e:  # PyYAML's tag constructors raise arbitrary errors on bad input
        raise DecodeError(f"malformed YAML: {e}") from e


def load_yaml_all(text: str | bytes) -> list[Any]:
    """Parse every document of a YAML stream (see :func:`load_yaml`)."""
    checked = _checked(text)
    try:
        return list(yaml.load_all(checked, Loader=_Loader))
    except Exception as e:  # see load_yaml
        raise DecodeError(f"malformed YAML: {e}") from e


# ---------------------------------------------------------------------------------------------
# Emitter: a port of the parts of libyaml's emitter (unsafe-libyaml 0.2.10) that serde_yaml 0.9
# drives, with its settings: best_indent 2, unlimited width, unicode output, LF line breaks.

_BREAKS: Final = frozenset("\r\n\x85\u2028\u2029")
_FIRST_INDICATORS: Final = frozenset("#,[]{}&*!|>'\"%@`")
_FLOW_INDICATORS: Final = frozenset(",?[]{}")
_ESCAPES: Final[dict[int, str]] = {
    0x00: "0",
    0x07: "a",
    0x08: "b",
    0x09: "t",
    0x0A: "n",
    0x0B: "v",
    0x0C: "f",
    0x0D: "r",
    0x1B: "e",
    0x22: '"',
    0x5C: "\\",
    0x85: "N",
    0xA0: "_",
    0x2028: "L",
    0x2029: "P",
}
_BEST_INDENT: Final = 2
_MAX_SIMPLE_KEY: Final = 128

# Scalar styles (requested by the serializer / selected by the emitter).
_ANY, _PLAIN, _SINGLE, _DOUBLE, _LITERAL = "any", "plain", "single", "double", "literal"


def _is_printable(c: str) -> bool:
    o = ord(c)
    return (
        o == 0x0A
        or 0x20 <= o <= 0x7E
        or 0xA0 <= o <= 0xD7FF
        or (0xE000 <= o <= 0xFFFD and o != 0xFEFF)
        or 0x10000 <= o <= 0x10FFFF
    )


def _is_blankz(c: str | None) -> bool:
    return c is None or c in " \t\x00" or c in _BREAKS


@dataclass(frozen=True, slots=True)
class _Analysis:
    empty: bool
    multiline: bool
    flow_plain_allowed: bool
    block_plain_allowed: bool
    single_quoted_allowed: bool
    block_allowed: bool


def _analyze_scalar(s: str) -> _Analysis:
    """``yaml_emitter_analyze_scalar``."""
    if not s:
        return _Analysis(True, False, False, True, True, False)
    block_ind = flow_ind = line_breaks = special = False
    leading_space = leading_break = trailing_space = trailing_break = False
    break_space = space_break = previous_space = previous_break = False
    if s.startswith(("---", "...")):
        block_ind = flow_ind = True
    n = len(s)
    preceded_by_ws = True
    followed_by_ws = _is_blankz(s[1] if n > 1 else None)
    for i, c in enumerate(s):
        if i == 0:
            if c in _FIRST_INDICATORS:
                flow_ind = block_ind = True
            if c in "?:":
                flow_ind = True
                if followed_by_ws:
                    block_ind = True
            if c == "-" and followed_by_ws:
                flow_ind = block_ind = True
        else:
            if c in _FLOW_INDICATORS:
                flow_ind = True
            if c == ":":
                flow_ind = True
                if followed_by_ws:
                    block_ind = True
            if c == "#" and preceded_by_ws:
                flow_ind = block_ind = True
        if not _is_printable(c):
            special = True
        if c in _BREAKS:
            line_breaks = True
        if c == " ":
            leading_space = leading_space or i == 0
            trailing_space = trailing_space or i == n - 1
            break_space = break_space or previous_break
            previous_space, previous_break = True, False
        elif c in _BREAKS:
            leading_break = leading_break or i == 0
            trailing_break = trailing_break or i == n - 1
            space_break = space_break or previous_space
            previous_space, previous_break = False, True
        else:
            previous_space = previous_break = False
        preceded_by_ws = _is_blankz(c)
        if i + 1 < n:
            followed_by_ws = _is_blankz(s[i + 2] if i + 2 < n else None)
    flow_plain = block_plain = single = block = True
    if leading_space or leading_break or trailing_space or trailing_break:
        flow_plain = block_plain = False
    if trailing_space:
        block = False
    if break_space:
        flow_plain = block_plain = single = False
    if space_break or special:
        flow_plain = block_plain = single = block = False
    if line_breaks:
        flow_plain = block_plain = False
    if flow_ind:
        flow_plain = False
    if block_ind:
        block_plain = False
    return _Analysis(False, line_breaks, flow_plain, block_plain, single, block)


def format_float(value: float) -> str:
    """``value`` as serde_yaml writes an ``f64``: ``.inf`` / ``-.inf`` / ``.nan``, otherwise
    ryu's shortest round-trip digits in ryu's layout (upstream dtolnay/ryu ``src/pretty/mod.rs``,
    ``format64``).

    Python's ``repr`` finds the same shortest digits but lays them out differently (``1e+20``,
    ``1e-07``); ryu writes ``1e20``, ``1e-7``, ``100.0``, ``0.0001`` and ``1e16``.
    """
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    if value == 0:
        return sign + "0.0"
    # repr() gives the shortest digits that round-trip, as ryu does: value = digits * 10**exp.
    decimal = Decimal(repr(abs(value))).normalize().as_tuple()
    digits = "".join(map(str, decimal.digits))
    length = len(digits)
    point = length + int(decimal.exponent)  # 10**(point - 1) <= value < 10**point
    if length <= point <= 16:
        return f"{sign}{digits}{'0' * (point - length)}.0"
    if 0 < point <= 16:
        return f"{sign}{digits[:point]}.{digits[point:]}"
    if -5 < point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    rest = f".{digits[1:]}" if length > 1 else ""
    return f"{sign}{digits[0]}{rest}e{point - 1}"


def _infer_str_style(s: str) -> str:
    """serde_yaml's ``serialize_str``: literal if multi-line, quoted if it reads as non-string."""
    if "\n" in s:
        return _LITERAL
    if not isinstance(resolve_plain_scalar(s), str) or _digits_but_not_number(s):
        return _SINGLE
    return _ANY


class _Emitter:
    """Writes one YAML document from plain data the way serde_yaml + libyaml do."""

    def __init__(self) -> None:
        self._out: list[str] = []
        self._column = 0
        self._whitespace = True
        self._indention = True
        self._indent = -1
        self._indents: list[int] = []
        self._flow_level = 0
        self._open_ended = 0
        self._mapping_context = False
        self._simple_key_context = False

    # -- low-level writes ---------------------------------------------------------------------

    def _put(self, text: str) -> None:
        self._out.append(text)
        self._column += len(text)

    def _put_break(self) -> None:
        self._out.append("\n")
        self._column = 0

    def _write_break(self, c: str) -> None:
        """A line break of a scalar's text: the next character starts an indented line."""
        if c == "\n":
            self._put_break()
        else:
            self._out.append(c)
            self._column = 0
        self._indention = True

    def _write_text(self, after_break: bool, text: str) -> None:
        """A scalar's text that is not a break, indented first when it starts a line."""
        if after_break:
            self._write_indent()
        self._put(text)
        self._indention = False

    def _increase_indent(self, flow: bool, indentless: bool) -> None:
        self._indents.append(self._indent)
        if self._indent < 0:
            self._indent = _BEST_INDENT if flow else 0
        elif not indentless:
            self._indent += _BEST_INDENT

    def _write_indent(self) -> None:
        indent = max(self._indent, 0)
        if (
            not self._indention
            or self._column > indent
            or (self._column == indent and not self._whitespace)
        ):
            self._put_break()
        if self._column < indent:
            self._put(" " * (indent - self._column))
        self._whitespace = True
        self._indention = True

    def _write_indicator(
        self, indicator: str, need_whitespace: bool, is_whitespace: bool, is_indention: bool
    ) -> None:
        if need_whitespace and not self._whitespace:
            self._put(" ")
        self._put(indicator)
        self._whitespace = is_whitespace
        self._indention = self._indention and is_indention

    # -- document -----------------------------------------------------------------------------

    def emit_document(self, root: Any) -> str:
        self._emit_node(root, mapping=False, simple_key=False)
        # DOCUMENT-END (implicit), then STREAM-END.
        self._write_indent()
        if self._open_ended == 0:
            self._open_ended = 1
        if self._open_ended == 2:
            self._write_indicator("...", True, False, False)
            self._open_ended = 0
            self._write_indent()
        return "".join(self._out)

    def _emit_node(self, value: Any, *, mapping: bool, simple_key: bool) -> None:
        self._mapping_context = mapping
        self._simple_key_context = simple_key
        if isinstance(value, Mapping):
            if self._flow_level or not value:
                self._emit_empty_flow("{", "}", value)
            else:
                self._emit_block_mapping(value)
        elif isinstance(value, list | tuple):
            if self._flow_level or not value:
                self._emit_empty_flow("[", "]", value)
            else:
                self._emit_block_sequence(value)
        elif value is None:
            self._emit_scalar("null", _PLAIN)
        elif isinstance(value, bool):
            self._emit_scalar("true" if value else "false", _PLAIN)
        elif isinstance(value, int):
            self._emit_scalar(str(value), _PLAIN)
        elif isinstance(value, float):
            self._emit_scalar(format_float(value), _PLAIN)
        elif isinstance(value, str):
            self._emit_scalar(value, _infer_str_style(value))
        else:
            raise EncodeError(f"cannot write {type(value).__name__} to YAML")

    def _emit_empty_flow(self, start: str, end: str, value: object) -> None:
        if value:
            raise EncodeError("non-empty flow collections are not produced by this emitter")
        self._write_indicator(start, True, True, False)
        self._increase_indent(True, False)
        self._flow_level += 1
        self._flow_level -= 1
        self._indent = self._indents.pop()
        self._write_indicator(end, False, False, False)

    def _emit_block_sequence(self, items: list[Any] | tuple[Any, ...]) -> None:
        self._increase_indent(False, self._mapping_context and not self._indention)
        for item in items:
            self._write_indent()
            self._write_indicator("-", True, False, True)
            self._emit_node(item, mapping=False, simple_key=False)
        self._indent = self._indents.pop()

    def _emit_block_mapping(self, mapping: Mapping[Any, Any]) -> None:
        self._increase_indent(False, False)
        for key, value in mapping.items():
            self._write_indent()
            if not isinstance(key, str) or len(key) > _MAX_SIMPLE_KEY or "\n" in key:
                raise EncodeError(f"unsupported mapping key {key!r}")
            self._emit_node(key, mapping=True, simple_key=True)
            self._write_indicator(":", False, False, False)
            self._emit_node(value, mapping=True, simple_key=False)
        self._indent = self._indents.pop()

    # -- scalars ------------------------------------------------------------------------------

    def _select_style(self, requested: str, a: _Analysis) -> str:
        style = _PLAIN if requested == _ANY else requested
        if self._simple_key_context and a.multiline:
            style = _DOUBLE
        if style == _PLAIN:
            if (self._flow_level and not a.flow_plain_allowed) or (
                not self._flow_level and not a.block_plain_allowed
            ):
                style = _SINGLE
            if a.empty and (self._flow_level or self._simple_key_context):
                style = _SINGLE
        if style == _SINGLE and not a.single_quoted_allowed:
            style = _DOUBLE
        if style == _LITERAL and (
            not a.block_allowed or self._flow_level or self._simple_key_context
        ):
            style = _DOUBLE
        return style

    def _emit_scalar(self, text: str, requested: str) -> None:
        style = self._select_style(requested, _analyze_scalar(text))
        self._increase_indent(True, False)
        if style == _PLAIN:
            self._write_plain(text)
        elif style == _SINGLE:
            self._write_single_quoted(text)
        elif style == _DOUBLE:
            self._write_double_quoted(text)
        else:
            self._write_literal(text)
        self._indent = self._indents.pop()

    # With an unlimited width libyaml never folds lines at spaces, so those branches are gone.

    def _write_chars(self, s: str, *, quote_escape: bool) -> bool:
        """Scalar characters with libyaml's line-break handling (plain and single-quoted).

        Returns whether the text ended inside a run of line breaks.
        """
        breaks = False
        for c in s:
            if c == " ":
                self._put(c)
            elif c in _BREAKS:
                if not breaks and c == "\n":
                    self._put_break()
                self._write_break(c)
                breaks = True
            else:
                self._write_text(breaks, "''" if quote_escape and c == "'" else c)
                breaks = False
        return breaks

    def _write_plain(self, s: str) -> None:
        if not self._whitespace and (s or self._flow_level):
            self._put(" ")
        self._write_chars(s, quote_escape=False)
        self._whitespace = False
        self._indention = False

    def _write_single_quoted(self, s: str) -> None:
        self._write_indicator("'", True, False, False)
        breaks = self._write_chars(s, quote_escape=True)
        if breaks:
            self._write_indent()
        self._write_indicator("'", False, False, False)
        self._whitespace = False
        self._indention = False

    def _write_double_quoted(self, s: str) -> None:
        self._write_indicator('"', True, False, False)
        for c in s:
            if not _is_printable(c) or c in _BREAKS or c in '"\\':
                o = ord(c)
                short = _ESCAPES.get(o)
                if short is not None:
                    self._put("\\" + short)
                elif o <= 0xFF:
                    self._put(f"\\x{o:02X}")
                elif o <= 0xFFFF:
                    self._put(f"\\u{o:04X}")
                else:
                    self._put(f"\\U{o:08X}")
            else:
                self._put(c)
        self._write_indicator('"', False, False, False)
        self._whitespace = False
        self._indention = False

    def _write_literal(self, s: str) -> None:
        self._write_indicator("|", True, False, False)
        # yaml_emitter_write_block_scalar_hints
        if s[:1] == " " or s[:1] in _BREAKS:
            self._write_indicator(str(_BEST_INDENT), False, False, False)
        self._open_ended = 0
        chomp = ""
        if not s or s[-1] not in _BREAKS:
            chomp = "-"
        elif len(s) == 1 or s[-2] in _BREAKS:
            chomp = "+"
            self._open_ended = 2
        if chomp:
            self._write_indicator(chomp, False, False, False)
        self._put_break()
        self._indention = True
        self._whitespace = True
        breaks = True
        for c in s:
            if c in _BREAKS:
                self._write_break(c)
                breaks = True
            else:
                self._write_text(breaks, c)
                breaks = False


def dump_yaml(data: Mapping[str, Any]) -> str:
    """Render plain data (dict / list / tuple / str / int / float / bool / None) exactly as kamu's
    ``serde_yaml::to_string`` renders the equivalent Rust value.

    Dict order is kept. Strings that would read back as another type are single-quoted, strings
    with a line feed use a literal block scalar, other strings are plain when YAML allows it.
    """
    return _Emitter().emit_document(data)


# ---------------------------------------------------------------------------------------------
# Schema-driven conversion between model values and plain data


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def _pascal_enum(member: IntEnum) -> str:
    return "".join(w.capitalize() for w in str(member.name).split("_"))


@dataclass(frozen=True, slots=True)
class _YField:
    attr: str
    key: str
    kind: str  # the flatbuffers_serde field kind name (STR, HASH, UNION, ...)
    required: bool
    arg: Any


@dataclass(frozen=True, slots=True)
class _YTable:
    cls: type
    fields: tuple[_YField, ...]
    by_key: dict[str, _YField]


_TABLES: Final[dict[type, _YTable]] = {}
for _cls, _spec in SPECS.items():
    _fields = tuple(
        _YField(f.name, _camel(f.name), f.kind.name, f.required, f.arg) for f in _spec.fields
    )
    _TABLES[_cls] = _YTable(_cls, _fields, {f.key: f for f in _fields})

#: Variant tag of every union member class (``FetchStepUrl`` -> ``Url``).
_VARIANT_NAME: Final[dict[type, str]] = {}
#: Accepted spellings of each union's tags: PascalCase, old camelCase, all-lowercase.
_VARIANTS_BY_TAG: Final[dict[str, dict[str, type]]] = {}
_UNION_OF: Final[dict[type, str]] = {}
for _union, _members in UNIONS.items():
    _VARIANTS_BY_TAG[_union] = {}
    for _member in _members:
        _name = _member.__name__
        if _union != "MetadataEvent" and _name.startswith(_union):
            _name = _name[len(_union) :]
        _VARIANT_NAME[_member] = _name
        _UNION_OF[_member] = _union
        for _spelling in (_name, _name[:1].lower() + _name[1:], _name.lower()):
            _VARIANTS_BY_TAG[_union][_spelling] = _member


def _enum_spellings(enum_cls: type[IntEnum]) -> dict[str, IntEnum]:
    out: dict[str, IntEnum] = {}
    for member in enum_cls:
        name = _pascal_enum(member)
        for spelling in (name, name[:1].lower() + name[1:], name.lower()):
            out[spelling] = member
    return out


_ENUM_SPELLINGS: Final[dict[type, dict[str, IntEnum]]] = {
    cls: _enum_spellings(cls)
    for cls in (m.DatasetKind, m.SourceOrdering, m.CompressionFormat, m.TimeUnit, m.MqttQos)
}

#: Unions that may be written as a bare variant name (``type: Timestamp`` for
#: ``type: {kind: Timestamp}``; spec v0.38 short form, kamu ``UnionOrString``). Only read.
_SHORT_FORM_UNIONS: Final = frozenset({"DataType", "EventTimeSource", "SourceCaching"})

_READ_STEPS: Final = frozenset(UNIONS["ReadStep"])
#: Spec v0.34 YAML keys of fields that spec v0.38 renamed (the flatbuffers slots are the same):
#: a read step's DDL was ``schema`` (now ``ddlSchema``; ``schema`` is the ODF schema) and
#: ``SetDataSchema``'s Arrow bytes were ``schema`` (now ``rawArrowSchema``).
_LEGACY_KEY: Final[dict[tuple[type, str], str]] = {
    **{(cls, "ddl_schema"): "schema" for cls in _READ_STEPS},
    (m.SetDataSchema, "raw_arrow_schema"): "schema",
}


# -- to plain data ----------------------------------------------------------------------------


def _check_u64(where: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _U64_MAX:
        raise EncodeError(f"{where}: {value!r} is not a valid uint64")
    return value


def _check_type(where: str, value: object, tp: type | tuple[type, ...]) -> None:
    if not isinstance(value, tp):
        raise EncodeError(f"{where}: unexpected {type(value).__name__} value {value!r}")


def _value_to_plain(f: _YField, value: Any, where: str, legacy: bool = False) -> Any:
    k = f.kind
    if k == "TABLE" and f.arg is m.ExtraAttributes:
        # kamu flattens the attribute map into the YAML (serde `flatten`).
        _check_type(where, value, m.ExtraAttributes)
        try:
            entries = json.loads(value.entries)
        except ValueError as e:
            raise EncodeError(f"{where}: extra attributes are not valid JSON") from e
        if not isinstance(entries, dict):
            raise EncodeError(f"{where}: extra attributes must be a JSON object")
        return entries
    if k == "STR":
        _check_type(where, value, str)
        return value
    if k == "STRS":
        _check_type(where, value, (tuple, list))
        for i, s in enumerate(value):
            _check_type(f"{where}[{i}]", s, str)
        return list(value)
    if k == "HASH":
        _check_type(where, value, Multihash)
        return value.to_multibase()
    if k == "DID":
        _check_type(where, value, DatasetId)
        return value.as_did_str()
    if k == "BYTES":
        _check_type(where, value, (bytes, bytearray, memoryview))
        return base64.b64encode(bytes(value)).decode("ascii")
    if k in ("U64", "U64_OPT"):
        return _check_u64(where, value)
    if k in ("U32", "I32"):
        low, high = (0, (1 << 32) - 1) if k == "U32" else (-(1 << 31), (1 << 31) - 1)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise EncodeError(f"{where}: {value!r} is out of range")
        return value
    if k == "BOOL_OPT":
        _check_type(where, value, bool)
        return value
    if k in ("ENUM", "ENUM_OPT", "ENUM16_OPT"):
        try:
            return _pascal_enum(f.arg(value))
        except ValueError as e:
            raise EncodeError(f"{where}: {value!r} is not a {f.arg.__name__}") from e
    if k == "TS":
        _check_type(where, value, Timestamp)
        return value.to_rfc3339()
    if k == "TABLE":
        _check_type(where, value, f.arg)
        return _table_to_plain(value, where, legacy=legacy)
    if k == "TABLES":
        _check_type(where, value, (tuple, list))
        return [
            _table_to_plain_checked(x, f.arg, f"{where}[{i}]", legacy) for i, x in enumerate(value)
        ]
    if k == "UNION":
        return _union_to_plain(value, f.arg, where, legacy)
    if k == "PREP_VEC":
        _check_type(where, value, (tuple, list))
        return [_union_to_plain(x, f.arg, f"{where}[{i}]", legacy) for i, x in enumerate(value)]
    raise AssertionError(f"unhandled field kind {k}")  # pragma: no cover


def _table_to_plain_checked(value: Any, cls: type, where: str, legacy: bool) -> dict[str, Any]:
    _check_type(where, value, cls)
    return _table_to_plain(value, where, legacy=legacy)


def _table_to_plain(
    value: Any, where: str, out: dict[str, Any] | None = None, *, legacy: bool = False
) -> dict[str, Any]:
    table = _TABLES.get(type(value))
    if table is None:
        raise EncodeError(f"{where}: {type(value).__name__} is not an ODF metadata type")
    out = {} if out is None else out
    # The v0.34 key names apply only when the value has no ODF schema to clash with them.
    rename = legacy and getattr(value, "schema", None) is None
    for f in table.fields:
        v = getattr(value, f.attr)
        if v is None:
            if f.required:
                raise EncodeError(f"{where}.{f.key} is required")
            continue
        key = _LEGACY_KEY.get((table.cls, f.attr), f.key) if rename else f.key
        out[key] = _value_to_plain(f, v, f"{where}.{key}", legacy)
    return out


def _union_to_plain(value: Any, union: str, where: str, legacy: bool = False) -> dict[str, Any]:
    if type(value) not in UNIONS[union]:
        raise EncodeError(f"{where}: {type(value).__name__} is not a member of union {union}")
    return _table_to_plain(value, where, {"kind": _VARIANT_NAME[type(value)]}, legacy=legacy)


def to_dict(value: Any, *, legacy: bool = True) -> dict[str, Any]:
    """Plain data (kamu's YAML/JSON shape) of any model value.

    Union members (events, fetch/read steps, ...) carry their ``kind`` tag first. The result
    contains only dicts, lists, strings, ints and bools, so it is also valid JSON. With
    ``legacy`` (the default) the fields spec v0.38 renamed keep their v0.34 keys (a read step's
    DDL and ``SetDataSchema``'s Arrow bytes under ``schema``), as kamu up to spec v0.37 wrote
    them; otherwise the current keys (``ddlSchema``, ``rawArrowSchema``).

    Raises:
        EncodeError: the value is not a valid model value (missing field, out-of-range int).
    """
    where = type(value).__name__
    if type(value) in _UNION_OF:
        return _union_to_plain(value, _UNION_OF[type(value)], where, legacy)
    return _table_to_plain(value, where, legacy=legacy)


def event_to_dict(event: m.MetadataEvent, *, legacy: bool = True) -> dict[str, Any]:
    """Plain data of a metadata event: ``{"kind": "AddData", ...}`` (camelCase fields)."""
    return _union_to_plain(event, "MetadataEvent", "event", legacy)


def block_to_dict(block: m.MetadataBlock, *, legacy: bool = True) -> dict[str, Any]:
    """Plain data of a block: ``systemTime``, ``prevBlockHash``, ``sequenceNumber``, ``event``."""
    if not isinstance(block, m.MetadataBlock):
        raise EncodeError(f"expected MetadataBlock, got {type(block).__name__}")
    return _table_to_plain(block, "content", legacy=legacy)


# -- from plain data --------------------------------------------------------------------------


def _fail(path: str, message: str) -> DecodeError:
    return DecodeError(f"{path}: {message}")


#: What serde calls a loaded YAML value in "invalid type" errors, tested in this order (``bool``
#: before ``int``: a bool is an int).
_TYPE_NAMES: Final[tuple[tuple[type, str], ...]] = (
    (type(None), "null"),
    (bool, "boolean"),
    (int, "integer"),
    (float, "float"),
    (str, "string"),
    (list, "sequence"),
    (dict, "mapping"),
)


def _type_name(value: object) -> str:
    for kind, name in _TYPE_NAMES:
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _expect_str(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise _fail(path, f"invalid type: {_type_name(value)}, expected a string")
    return value


def _expect_list(value: object, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise _fail(path, f"invalid type: {_type_name(value)}, expected a sequence")
    return value


def _expect_map(value: object, path: str) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise _fail(path, f"invalid type: {_type_name(value)}, expected a mapping")
    return value


def _parse_with(path: str, parse: Callable[[str], Any], text: str) -> Any:
    try:
        return parse(text)
    except DecodeError as e:
        raise _fail(path, str(e)) from e
    except (ValueError, TypeError) as e:
        raise _fail(path, str(e)) from e


def _decode_base64(text: str) -> bytes:
    try:
        data = base64.b64decode(text, validate=True)
    except binascii.Error as e:
        raise DecodeError(f"invalid base64: {e}") from e
    if base64.b64encode(data).decode("ascii") != text:
        raise DecodeError("invalid base64: not canonical standard base64 with padding")
    return data


def _value_from_plain(f: _YField, value: Any, path: str) -> Any:
    k = f.kind
    if k == "TABLE" and f.arg is m.ExtraAttributes:
        mapping = _expect_map(value, path)
        try:
            text = json.dumps(
                mapping, sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=False
            )
        except (TypeError, ValueError) as e:
            raise _fail(path, f"extra attributes are not JSON-compatible: {e}") from e
        return m.ExtraAttributes(entries=text)
    if k == "STR":
        return _expect_str(value, path)
    if k == "STRS":
        items = _expect_list(value, path)
        return tuple(_expect_str(s, f"{path}[{i}]") for i, s in enumerate(items))
    if k == "HASH":
        return _parse_with(path, Multihash.from_multibase, _expect_str(value, path))
    if k == "DID":
        return _parse_with(path, DatasetId.from_did_str, _expect_str(value, path))
    if k == "BYTES":
        return _parse_with(path, _decode_base64, _expect_str(value, path))
    if k in ("U64", "U64_OPT", "U32", "I32"):
        name, low, high = {
            "U32": ("u32", 0, (1 << 32) - 1),
            "I32": ("i32", -(1 << 31), (1 << 31) - 1),
        }.get(k, ("u64", 0, _U64_MAX))
        if isinstance(value, bool) or not isinstance(value, int):
            raise _fail(path, f"invalid type: {_type_name(value)}, expected {name}")
        if not low <= value <= high:
            raise _fail(path, f"invalid value: integer {value}, expected {name}")
        return value
    if k == "BOOL_OPT":
        if not isinstance(value, bool):
            raise _fail(path, f"invalid type: {_type_name(value)}, expected a boolean")
        return value
    if k in ("ENUM", "ENUM_OPT", "ENUM16_OPT"):
        spellings = _ENUM_SPELLINGS[f.arg]
        text = _expect_str(value, path)
        if text not in spellings:
            expected = ", ".join(_pascal_enum(x) for x in f.arg)
            raise _fail(path, f"unknown variant {text!r}, expected one of {expected}")
        return spellings[text]
    if k == "TS":
        return _parse_with(path, Timestamp.parse, _expect_str(value, path))
    if k == "TABLE":
        return _table_from_plain(f.arg, value, path)
    if k == "TABLES":
        items = _expect_list(value, path)
        return tuple(_table_from_plain(f.arg, x, f"{path}[{i}]") for i, x in enumerate(items))
    if k == "UNION":
        return _union_from_plain(f.arg, value, path)
    if k == "PREP_VEC":
        items = _expect_list(value, path)
        return tuple(_union_from_plain(f.arg, x, f"{path}[{i}]") for i, x in enumerate(items))
    raise AssertionError(f"unhandled field kind {k}")  # pragma: no cover


def _legacy_renamed(
    cls: type, mapping: dict[Any, Any], path: str
) -> tuple[dict[Any, Any], str | None]:
    """``mapping`` with a v0.34 ``schema`` key moved to its v0.38 name, when its value has the
    v0.34 shape (a list of DDL strings for read steps, base64 text for ``SetDataSchema``); an
    ODF schema is a mapping, so the two never clash."""
    legacy = mapping.get("schema")
    old_shape = list if cls in _READ_STEPS else str
    if not isinstance(legacy, old_shape):
        return mapping, None
    new_key = "ddlSchema" if cls in _READ_STEPS else "rawArrowSchema"
    if new_key in mapping:
        raise _fail(f"{path}.schema", f"both the v0.34 'schema' and {new_key!r} are given")
    out = dict(mapping)
    out[new_key] = out.pop("schema")
    return out, new_key


def _table_from_plain(cls: type, data: Any, path: str, skip: str | None = None) -> Any:
    table = _TABLES[cls]
    mapping = _expect_map(data, path)
    renamed = None
    if cls in _READ_STEPS or cls is m.SetDataSchema:
        mapping, renamed = _legacy_renamed(cls, mapping, path)
    for key in mapping:
        if key != skip and (not isinstance(key, str) or key not in table.by_key):
            expected = ", ".join(f.key for f in table.fields) or "none"
            raise _fail(f"{path}.{key}", f"unknown field, expected one of: {expected}")
    kwargs: dict[str, Any] = {}
    for f in table.fields:
        # Errors name the key as written (``schema`` of a v0.34 manifest).
        fpath = f"{path}.{'schema' if f.key == renamed else f.key}"
        value = mapping.get(f.key)
        if value is None:
            if f.required:
                raise _fail(fpath, "missing field" if f.key not in mapping else "must not be null")
            continue
        kwargs[f.attr] = _value_from_plain(f, value, fpath)
    return cls(**kwargs)


def _union_from_plain(union: str, data: Any, path: str) -> Any:
    if union in _SHORT_FORM_UNIONS and isinstance(data, str):
        data = {"kind": data}
    mapping = _expect_map(data, path)
    if "kind" not in mapping:
        raise _fail(f"{path}.kind", "missing field")
    tag = _expect_str(mapping["kind"], f"{path}.kind")
    cls = _VARIANTS_BY_TAG[union].get(tag)
    if cls is None:
        expected = ", ".join(_VARIANT_NAME[c] for c in UNIONS[union])
        raise _fail(f"{path}.kind", f"unknown variant {tag!r}, expected one of {expected}")
    return _table_from_plain(cls, mapping, path, skip="kind")


def from_dict(target: type | str, data: Any, path: str = "") -> Any:
    """Build a model value from plain data (the inverse of :func:`to_dict`).

    ``target`` is a model class (``DataSlice``) or a union name (``"ReadStep"``); a union
    member class is read through its union, so its ``kind`` tag is checked. ``path`` prefixes
    error messages.

    Raises:
        DecodeError: wrong types, unknown or missing fields, unknown ``kind`` tags.
    """
    if isinstance(target, str):
        if target not in UNIONS:
            raise ValueError(f"unknown union {target!r}")
        return _union_from_plain(target, data, path or target)
    if target in _UNION_OF:
        value = _union_from_plain(_UNION_OF[target], data, path or target.__name__)
        if not isinstance(value, target):
            raise _fail(f"{path or target.__name__}.kind", f"expected {_VARIANT_NAME[target]}")
        return value
    if target not in _TABLES:
        raise ValueError(f"{target!r} is not an ODF metadata type")
    return _table_from_plain(target, data, path or target.__name__)


def event_from_dict(data: Any, path: str = "event") -> m.MetadataEvent:
    """Build a metadata event from plain data (``{"kind": "SetInfo", ...}``).

    Raises:
        DecodeError: naming the offending field path (e.g. ``event.read.kind``).
    """
    event: m.MetadataEvent = _union_from_plain("MetadataEvent", data, path)
    return event


def block_from_dict(data: Any, path: str = "content") -> m.MetadataBlock:
    """Build a block from plain data (the ``content`` of a ``MetadataBlock`` manifest)."""
    block: m.MetadataBlock = _table_from_plain(m.MetadataBlock, data, path)
    return block


# ---------------------------------------------------------------------------------------------
# Manifests


def read_manifest(text: str | bytes, kind: str) -> tuple[int, Any]:
    """Parse a ``kind``/``version``/``content`` manifest: ``(version, content)``.

    Raises:
        DecodeError: malformed YAML, not a mapping, wrong ``kind``, unknown envelope fields.
    """
    return check_manifest(load_yaml(text), kind)


def check_manifest(doc: Any, kind: str) -> tuple[int, Any]:
    """Validate an already parsed manifest document: ``(version, content)``.

    Raises:
        DecodeError: not a mapping, wrong ``kind``, non-integer ``version``, unknown fields.
    """
    root = _expect_map(doc, "<root>")
    if "kind" not in root:
        raise _fail("kind", "missing field")
    actual = _expect_str(root["kind"], "kind")
    if actual != kind:
        raise _fail("kind", f"expected {kind!r}, got {actual!r}")
    if "version" not in root:
        raise _fail("version", "missing field")
    version = root["version"]
    if isinstance(version, bool) or not isinstance(version, int):
        raise _fail("version", f"invalid type: {_type_name(version)}, expected i32")
    for key in root:
        if key not in ("kind", "version", "content"):
            raise _fail(str(key), "unknown field, expected one of: kind, version, content")
    if "content" not in root:
        raise _fail("content", "missing field")
    return version, root["content"]


def write_manifest(kind: str, version: int, content: Any) -> str:
    """Render a ``kind``/``version``/``content`` manifest as kamu does."""
    return dump_yaml({"kind": kind, "version": version, "content": content})


def block_to_yaml(block: m.MetadataBlock, version: int = 2) -> str:
    """kamu's YAML form of a block (``kamu log --output-format yaml``, RFC-013).

    ``version`` is the manifest version written in the envelope: 2 (kamu v0.153 - v0.264, the
    default) or 3 (kamu >= v0.265). Version 2 uses the spec v0.34 keys of the fields spec v0.38
    renamed (see :func:`to_dict`), version 3 the current ones, as kamu-cli HEAD writes them.

    Raises:
        EncodeError: unsupported version or an invalid block.
    """
    if version not in SUPPORTED_BLOCK_VERSIONS:
        raise EncodeError(f"cannot write block version {version}; supported: 2, 3")
    legacy = version == 2
    return write_manifest(KIND_METADATA_BLOCK, version, block_to_dict(block, legacy=legacy))


def block_from_yaml(text: str | bytes) -> m.MetadataBlock:
    """Parse kamu's YAML form of a block (manifest ``kind: MetadataBlock``, version 2 or 3).

    Raises:
        UnsupportedBlockVersion: any other manifest version.
        DecodeError: malformed YAML, wrong kind, unknown/missing fields, wrong types, unknown
            union kinds; the message names the field path (e.g. ``content.event.read.kind``).
    """
    version, content = read_manifest(text, KIND_METADATA_BLOCK)
    if version not in SUPPORTED_BLOCK_VERSIONS:
        raise UnsupportedBlockVersion(
            f"version: metadata block version {version} is not supported (readable: 2, 3)"
        )
    return block_from_dict(content, "content")


def event_to_yaml(event: m.MetadataEvent) -> str:
    """kamu's standalone event manifest (``kind: MetadataEvent``, ``version: 1``)."""
    return write_manifest(KIND_METADATA_EVENT, METADATA_EVENT_VERSION, event_to_dict(event))


def event_from_yaml(text: str | bytes) -> m.MetadataEvent:
    """Parse a ``kind: MetadataEvent`` manifest (version 1)."""
    version, content = read_manifest(text, KIND_METADATA_EVENT)
    if version != METADATA_EVENT_VERSION:
        raise _fail("version", f"unsupported MetadataEvent manifest version {version}")
    return event_from_dict(content, "content")


__all__ = [
    "KIND_METADATA_BLOCK",
    "KIND_METADATA_EVENT",
    "MAX_YAML_DEPTH",
    "MAX_YAML_NODES",
    "MAX_YAML_SIZE",
    "METADATA_EVENT_VERSION",
    "block_from_dict",
    "block_from_yaml",
    "block_to_dict",
    "block_to_yaml",
    "check_manifest",
    "dump_yaml",
    "event_from_dict",
    "event_from_yaml",
    "event_to_dict",
    "event_to_yaml",
    "from_dict",
    "load_yaml",
    "load_yaml_all",
    "read_manifest",
    "resolve_plain_scalar",
    "to_dict",
    "write_manifest",
    "yaml_text",
]
