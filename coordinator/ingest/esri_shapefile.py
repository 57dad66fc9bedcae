"""The ``EsriShapefile`` read step: a zip of a shapefile -> NDJSON records, as kamu reads it.

kamu-cli (``src/infra/ingest-datafusion/src/readers/shapefile.rs``, with the ``shapefile``
0.8 and ``dbase`` 0.7 crates) extracts the archive, locates the ``.shp``, turns each shape and
its ``.dbf`` record into one JSON object and reads the result with its NDJSON reader. This
module produces the same records, which :mod:`coordinator.ingest.readers` then reads with the
step's schema:

* **Locating the ``.shp``** among the archive's files (directories are not files): with
  ``subPath``, the member of exactly that name, else the ``.shp`` files matching it as a glob
  (``*``, ``?``, ``[...]`` within a path component, ``**`` across components), which must be
  exactly one; without ``subPath``, the only ``.shp`` of the archive. The ``.dbf`` is the
  member of the same name with the extension ``dbf`` (required); the ``.shx`` index is not
  needed (records are read in sequence).
* **A record** is an object of the ``.dbf`` fields plus ``geometry``, keys sorted (kamu
  builds a ``serde_json`` map, which sorts its keys); a field named ``geometry`` is replaced.
  Values, by dBase type: ``C`` text trimmed of spaces (cut at a NUL), null if empty; ``N``
  and ``F`` numbers (``F`` rounded to single precision, as the crate reads it), null if blank
  or all ``*``; ``L`` true for ``T t Y y 1 0``, false for ``F f N n``, else null; ``D``
  ``YYYYMMDD`` as ``"Y-M-D"`` without zero padding (``"2024-3-7"``), null if blank; ``I``,
  ``B`` (double), ``Y`` (currency, read as a double); ``T`` as ``"Y-M-D h:m:s"`` (unpadded);
  ``M`` (memo) only when empty (``""``): the memo file is not read (kamu: missing memo file).
  Deleted records are skipped and shapes paired with the remaining records in order (the
  ``dbase`` crate's reader; a shape without a record ends the file).
* **Text** is UTF-8 (invalid bytes replaced) when the ``.dbf`` declares no code page, strict
  UTF-8 when it declares UTF-8 (0xF0); any other declared code page is refused, as kamu's
  build of the ``dbase`` crate (without encoding features) refuses it.
* **``geometry``** is the shape as a GeoJSON geometry, compact JSON text with sorted keys
  (``coordinates`` first): Point (M and Z dropped), MultiPoint, MultiLineString for a
  polyline (one line per part), MultiPolygon for a polygon (a clockwise ring starts a polygon,
  a counter-clockwise ring is a hole of the polygon before it; rings are closed). Numbers are
  printed as ``serde_json`` prints an ``f64`` (shortest round-trip digits, ``1.0`` for
  integers, exponent form below 1e-5 and from 1e16, ``1e+16``). A null shape is refused
  (kamu: "Cannot convert NullShape"), and so is a multipatch.
* Numbers of fields that are whole are written without a fraction (``12`` rather than kamu's
  ``12.0``): the value read is the same, and an integer column takes it (arrow-rs, kamu's
  JSON parser, reads ``12.0`` into an integer column; Arrow's C++ parser refuses it).
  A non-finite number is refused (kamu's reader panics on one).

The archive is read without being extracted: the ``.shp`` and ``.dbf`` are streamed out of it,
and every byte they decompress to is counted against ``max_bytes`` (the node's
``ingest.max_decompressed_bytes``, as for a ``Decompress`` prepare step), so a zip bomb stops
with :class:`DecompressBudgetExceeded` once that much is out, whatever sizes the archive
declares. A shape record may be at most ``max_record_bytes`` (its JSON text could not be read
anyway), so one record's memory is bounded too.

This module imports ``shapefile`` (pyshp) for the shape geometries; it is imported lazily by
the readers (see ``tests/unit/test_idle_imports.py``).
"""

from __future__ import annotations

import decimal
import fnmatch
import io
import itertools
import json
import math
import struct
import zipfile
import zlib
from collections.abc import Iterator
from typing import IO, Any, BinaryIO, Final

import shapefile as pyshp

from coordinator.errors import BadInputData, DecompressBudgetExceeded

__all__ = ["json_number", "shapefile_records"]

_SHP_HEADER: Final = 100
_DBF_HEADER: Final = 32
_DBF_FIELD: Final = 32
_VFP_BACKLINK: Final = 263
# dBase code page marks the dbase crate knows (and, built without encoding support, refuses);
# 0x00 and unknown marks are read as lossy UTF-8, 0xF0 as UTF-8.
_KNOWN_CODE_PAGES: Final = frozenset(
    (0x01, 0x02, 0x03, 0x13, 0x4D, *range(0x64, 0x6C), *range(0x78, 0x7F), *range(0xC8, 0xCC))
)
_UTF8_CODE_PAGE: Final = 0xF0
_FIELD_TYPES: Final = frozenset("CDFNLYTIBM")
_READ_PIECE: Final = 1 << 20


class _Budget:
    """Bytes decompressed out of the archive so far (``ingest.max_decompressed_bytes``)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.used = 0

    def take(self, n: int) -> None:
        self.used += n
        if self.used > self.max_bytes:
            raise DecompressBudgetExceeded(
                f"the EsriShapefile archive decompresses to more than {self.max_bytes:,} bytes "
                "(ingest.max_decompressed_bytes); refused as a possible zip bomb, nothing was "
                "committed"
            )


class _Member:
    """A zip member read in order, exactly, every byte counted against the budget."""

    def __init__(self, raw: IO[bytes], name: str, budget: _Budget, where: str) -> None:
        self._raw = raw
        self.name = name
        self._budget = budget
        self._where = where
        self.pos = 0

    def read(self, n: int) -> bytes:
        """Up to ``n`` bytes (fewer only at the end of the member)."""
        out = []
        left = n
        while left > 0:
            # A decompressor may return more than it consumed; ask for one byte past the
            # budget at most, so a bomb is stopped right there.
            want = min(left, _READ_PIECE, self._budget.max_bytes - self._budget.used + 1)
            try:
                piece = self._raw.read(want)
            except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as e:
                raise BadInputData(
                    f"cannot decompress {self.name!r}: {e}", path=self._where
                ) from None
            if not piece:
                break
            self._budget.take(len(piece))
            out.append(piece)
            left -= len(piece)
        data = b"".join(out)
        self.pos += len(data)
        return data

    def exactly(self, n: int, what: str) -> bytes:
        data = self.read(n)
        if len(data) != n:
            raise BadInputData(f"{self.name!r} is truncated ({what})", path=self._where)
        return data

    def skip_to(self, offset: int, what: str) -> None:
        if offset < self.pos:
            raise BadInputData(f"{self.name!r} is corrupt ({what})", path=self._where)
        while self.pos < offset:
            if not self.read(min(offset - self.pos, _READ_PIECE)):
                raise BadInputData(f"{self.name!r} is truncated ({what})", path=self._where)


# --------------------------------------------------------------------------------------------
# Locating the .shp
# --------------------------------------------------------------------------------------------


def _is_shp(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    dot = base.rfind(".")
    return dot > 0 and base[dot + 1 :] == "shp"


def _with_extension(name: str, ext: str) -> str:
    head, _, base = name.rpartition("/")
    dot = base.rfind(".")
    stem = base[:dot] if dot > 0 else base
    return f"{head}/{stem}.{ext}" if head else f"{stem}.{ext}"


def _glob_match(pattern: list[str], parts: list[str]) -> bool:
    """Path components ``parts`` against ``pattern`` (``**`` spans any number of them)."""
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_glob_match(pattern[1:], parts[i:]) for i in range(len(parts) + 1))
    return (
        bool(parts)
        and fnmatch.fnmatchcase(parts[0], pattern[0])
        and _glob_match(pattern[1:], parts[1:])
    )


def _listing(names: list[str]) -> str:
    shown = names[:50]
    more = f"\n  ... and {len(names) - 50} more" if len(names) > 50 else ""
    return "".join(f"\n  - {n[:200]}" for n in shown) + more


def locate_shp(files: list[str], sub_path: str | None, where: str) -> str:
    """The archive member to read: ``sub_path`` (a name or a glob) or the only ``.shp``.

    Raises:
        BadInputData: no ``.shp`` matches, or more than one does.
    """
    shp_files = [n for n in files if _is_shp(n)]
    if sub_path is None:
        if len(shp_files) == 1:
            return shp_files[0]
        if not shp_files:
            raise BadInputData("Archive does not contain any .shp files", path=where)
        raise BadInputData(
            "Archive contains multiple .shp files. Specify `subPath` argument to select one "
            f"of:{_listing(shp_files)}",
            path=where,
        )
    wanted = sub_path.strip("/")
    if wanted in files:
        return wanted
    pattern = [p for p in wanted.split("/") if p not in ("", ".")]
    matches = [n for n in shp_files if _glob_match(pattern, n.split("/"))]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise BadInputData(
            f"Archive does not contain any .shp files under '{sub_path[:200]}' sub-path. "
            f"Possible entries are:{_listing(shp_files)}",
            path=where,
        )
    raise BadInputData(
        f"Archive contains multiple .shp files matching sub-path '{sub_path[:200]}':"
        f"{_listing(matches)}",
        path=where,
    )


# --------------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------------


def json_number(value: float) -> str:
    """``value`` as ``serde_json`` prints an ``f64`` (kamu's ``geometry`` text).

    The shortest digits that read back as ``value`` (Python's ``repr`` finds the same ones),
    laid out as the ``zmij`` crate does: plain decimals (with ``.0`` for whole numbers) when
    1e-5 <= |value| < 1e16, else ``d.ddde-N`` / ``d.ddde+N``.
    """
    if not math.isfinite(value):
        raise ValueError(f"{value!r} is not a finite number")
    sign, digit_tuple, exp = decimal.Decimal(repr(value)).as_tuple()
    assert isinstance(exp, int)
    digits = "".join(map(str, digit_tuple)).lstrip("0")
    minus = "-" if sign else ""
    if not digits:
        return f"{minus}0.0"
    stripped = digits.rstrip("0")
    exp += len(digits) - len(stripped)
    digits = stripped
    length = len(digits)
    kk = length + exp  # 10^(kk-1) <= |value| < 10^kk
    if exp >= 0 and kk <= 16:
        return f"{minus}{digits}{'0' * exp}.0"
    if 0 < kk <= 16:
        return f"{minus}{digits[:kk]}.{digits[kk:]}"
    if -5 < kk <= 0:
        return f"{minus}0.{'0' * -kk}{digits}"
    e = kk - 1
    exponent = f"e+{e}" if e >= 0 else f"e{e}"
    if length == 1:
        return f"{minus}{digits}{exponent}"
    return f"{minus}{digits[0]}.{digits[1:]}{exponent}"


def _trim(raw: bytes) -> bytes:
    """The dbase crate's field trim: cut at the first NUL, spaces off both ends."""
    return raw.split(b"\0", 1)[0].strip(b" ")


def _finite(value: float, field: str, row: int, where: str) -> float:
    if not math.isfinite(value):
        raise BadInputData(
            f"the .dbf holds a non-finite number {value!r}", path=where, column=field, row=row
        )
    return value


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _number(text: str) -> float:
    """``text`` parsed as Rust's ``str::parse::<f64>`` does (Python's ``float`` also takes
    underscores and spaces, which Rust refuses). A field is at most 255 bytes."""
    body = text[1:] if text[:1] in ("+", "-") else text
    mantissa, e, exponent = body.replace("E", "e").partition("e")
    whole, _, fraction = mantissa.partition(".")
    ok = body.lower() in ("inf", "infinity", "nan") or (
        (_digits(whole) or _digits(fraction))
        and (not whole or _digits(whole))
        and (not fraction or _digits(fraction))
        and (not e or _digits(exponent[1:] if exponent[:1] in ("+", "-") else exponent))
    )
    if not ok:
        raise ValueError(f"invalid number {text[:200]!r}")
    return float(text)


def _whole(value: float) -> float | int:
    """A whole number as an int (see the module docstring), other numbers unchanged."""
    if value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


def _rust_div(a: int, b: int) -> int:
    """Integer division truncating towards zero (as Rust's ``/`` on ``i32``)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _rust_rem(a: int, b: int) -> int:
    """Remainder with the sign of ``a`` (as Rust's ``%`` on ``i32``)."""
    return a - _rust_div(a, b) * b


def _julian_date(jdn: int) -> tuple[int, int, int]:
    """The dbase crate's Julian day number -> (year, month, day) (integer steps as in Rust)."""
    f = jdn + 1401 + _rust_div(_rust_div(4 * jdn + 274_277, 146_097) * 3, 4) - 38
    e = 4 * f + 3
    g = _rust_div(_rust_rem(e, 1461), 4)
    h = 5 * g + 2
    day = _rust_div(_rust_rem(h, 153), 5) + 1
    month = _rust_rem(_rust_div(h, 153) + 2, 12) + 1
    year = _rust_div(e, 1461) - 4716 + _rust_div(12 + 2 - month, 12)
    return year, month, day


class _DbfField:
    """One field descriptor of the dBase (.dbf) attribute table: its column and byte layout."""

    __slots__ = ("decimals", "length", "name", "offset", "type")

    def __init__(self, name: str, type_: str, length: int, decimals: int, offset: int) -> None:
        self.name = name
        self.type = type_
        self.length = length
        self.decimals = decimals
        self.offset = offset


class _Dbf:
    """A ``.dbf`` read in order, its records decoded as the dbase crate decodes them."""

    def __init__(self, member: _Member, where: str) -> None:
        self.member = member
        self.where = where
        header = member.exactly(_DBF_HEADER, "header")
        version = header[0]
        self.num_records, first_record = struct.unpack_from("<IH", header, 4)
        code_page = header[29]
        if code_page in _KNOWN_CODE_PAGES:
            raise BadInputData(
                f"the .dbf declares code page mark 0x{code_page:02X}; only UTF-8 text (no code "
                "page, or 0xF0) is read, as kamu reads it",
                path=where,
            )
        self.errors = "strict" if code_page == _UTF8_CODE_PAGE else "replace"
        fields_end = first_record - (_VFP_BACKLINK if 0x30 <= version <= 0x32 else 0)
        if fields_end < _DBF_HEADER + 1:
            raise BadInputData(f"{member.name!r} is corrupt (header length)", path=where)
        self.fields: list[_DbfField] = []
        offset = 1  # after the deletion flag
        for _ in range((fields_end - _DBF_HEADER - 1) // _DBF_FIELD):
            raw = member.exactly(_DBF_FIELD, "field descriptors")
            name = self._text(raw[:11], "a field name").strip("\0")
            type_ = chr(raw[11])
            if type_ not in _FIELD_TYPES:
                raise BadInputData(
                    f"the .dbf field {name[:200]!r} has type {type_!r}, which is not read",
                    path=where,
                )
            length = raw[16]
            self.fields.append(_DbfField(name, type_, length, raw[17], offset))
            offset += length
        self.record_size = offset
        member.skip_to(first_record, "header length")
        self.index = 0  # records read (deleted ones included)
        self.row = 0  # records returned

    def _text(self, raw: bytes, what: str) -> str:
        try:
            return raw.decode("utf-8", self.errors)
        except UnicodeDecodeError as e:
            raise BadInputData(
                f"invalid UTF-8 in {what} of the .dbf: {e.reason}", path=self.where
            ) from None

    def next_record(self) -> dict[str, Any] | None:
        """The next record that is not deleted (None after the last one)."""
        while self.index < self.num_records:
            self.index += 1
            raw = self.member.read(self.record_size)
            if len(raw) != self.record_size:
                raise BadInputData(
                    f"the .dbf ends before its {self.num_records:,} records "
                    f"(record {self.index:,} is truncated)",
                    path=self.where,
                )
            if raw[0] == 0x2A:  # deleted
                continue
            self.row += 1
            return {
                f.name: self._value(f, raw[f.offset : f.offset + f.length]) for f in self.fields
            }
        return None

    def _value(self, field: _DbfField, raw: bytes) -> Any:
        t = field.type
        row = self.row
        try:
            if t == "C":
                text = _trim(raw)
                return self._text(text, f"field {field.name!r}") if text else None
            if t in ("N", "F"):
                text = _trim(raw)
                if not text or not text.strip(b"*"):
                    return None
                value = _number(self._text(text, f"field {field.name!r}"))
                if t == "F":
                    value = struct.unpack("<f", struct.pack("<f", value))[0]
                return _whole(_finite(value, field.name, row, self.where))
            if t == "L":
                c = raw[:1]
                if c in (b"1", b"0", b"T", b"t", b"Y", b"y"):
                    return True
                if c in (b"N", b"n", b"F", b"f"):
                    return False
                return None
            if t == "D":
                text = _trim(raw)
                if not text:
                    return None
                s = self._text(text, f"field {field.name!r}")
                parts = (s[0:4], s[4:6], s[6:8])
                if len(s) < 8 or not all(_digits(p.removeprefix("+")) for p in parts):
                    raise ValueError(f"invalid date {s[:200]!r}")
                y, mo, d = (int(p) for p in parts)
                return f"{y}-{mo}-{d}"
            if t == "I":
                return struct.unpack("<i", raw[:4])[0]
            if t in ("B", "Y"):
                return _whole(_finite(struct.unpack("<d", raw[:8])[0], field.name, row, self.where))
            if t == "T":
                jdn, word = struct.unpack("<ii", raw[:8])
                y, mo, d = _julian_date(jdn)
                hours = _rust_div(word, 3_600_000)
                word -= hours * 3_600_000
                minutes = _rust_div(word, 60_000)
                word -= minutes * 60_000
                seconds = _rust_div(word, 1_000)
                return f"{y}-{mo}-{d} {hours}:{minutes}:{seconds}"
            # M: a memo block number; the memo file is not read (kamu: "missing memo file")
            if field.length > 4 and not _trim(raw):
                return ""
            raise BadInputData(
                "memo fields are not read (the .dbt memo file is not opened, as in kamu)",
                path=self.where,
                column=field.name,
                row=row,
            )
        except (ValueError, struct.error) as e:
            raise BadInputData(
                f"invalid {t} value in the .dbf: {e}", path=self.where, column=field.name, row=row
            ) from None


# --------------------------------------------------------------------------------------------
# Geometry
# --------------------------------------------------------------------------------------------


def _position(p: tuple[float, ...]) -> str:
    return f"[{json_number(p[0])},{json_number(p[1])}]"


def _line(points: Any) -> str:
    return "[" + ",".join(_position(p) for p in points) + "]"


def _closed(points: list[Any]) -> list[Any]:
    """A ring closed as geo-types closes it (its first point appended if not last)."""
    if points and (points[0][0], points[0][1]) != (points[-1][0], points[-1][1]):
        return [*points, points[0]]
    return points


def _is_outer(points: list[Any]) -> bool:
    """The shapefile crate's ring test: clockwise (area >= 0 by its formula) is an outer ring."""
    area = sum((b[0] - a[0]) * (b[1] + a[1]) for a, b in itertools.pairwise(points))
    return not area / 2.0 < 0.0


def _parts(shape: Any) -> list[list[Any]]:
    points = list(shape.points)
    starts = list(shape.parts) or [0]
    ends = [*starts[1:], len(points)]
    return [points[s:e] for s, e in zip(starts, ends, strict=True)]


def _geometry(shape: Any) -> str:
    """The shape as kamu's GeoJSON geometry text (see the module docstring)."""
    kind = shape.shapeType
    if kind in (pyshp.POINT, pyshp.POINTM, pyshp.POINTZ):
        return '{"coordinates":' + _position(shape.points[0]) + ',"type":"Point"}'
    if kind in (pyshp.MULTIPOINT, pyshp.MULTIPOINTM, pyshp.MULTIPOINTZ):
        return '{"coordinates":' + _line(shape.points) + ',"type":"MultiPoint"}'
    if kind in (pyshp.POLYLINE, pyshp.POLYLINEM, pyshp.POLYLINEZ):
        lines = ",".join(_line(part) for part in _parts(shape))
        return '{"coordinates":[' + lines + '],"type":"MultiLineString"}'
    if kind in (pyshp.POLYGON, pyshp.POLYGONM, pyshp.POLYGONZ):
        polygons: list[list[str]] = []
        current: list[str] | None = None
        for ring in _parts(shape):
            text = _line(_closed(ring))
            if _is_outer(ring):
                if current is not None:
                    polygons.append(current)
                current = [text]
            elif current is not None:
                current.append(text)
            else:  # a hole before any outer ring: a polygon with an empty exterior
                polygons.append(["[]", text])
        if current is not None:
            polygons.append(current)
        body = ",".join("[" + ",".join(rings) + "]" for rings in polygons)
        return '{"coordinates":[' + body + '],"type":"MultiPolygon"}'
    if kind == pyshp.NULL:
        raise ValueError("Cannot convert NullShape into any geo_types Geometry")
    raise ValueError(f"{pyshp.SHAPETYPE_LOOKUP.get(kind, kind)} shapes are not read")


def _shapes(member: _Member, max_record_bytes: int, where: str) -> Iterator[tuple[int, Any]]:
    """(record number, pyshp shape) of each record of the ``.shp``, in file order."""
    header = member.exactly(_SHP_HEADER, "header")
    if struct.unpack_from(">i", header, 0)[0] != 9994:
        raise BadInputData(f"{member.name!r} is not a shapefile (bad file code)", path=where)
    file_length = struct.unpack_from(">i", header, 24)[0] * 2
    number = 0
    while member.pos < file_length:
        number += 1
        head = member.read(8)
        if not head:
            raise BadInputData(
                f"{member.name!r} ends before the length its header declares "
                f"({file_length:,} bytes)",
                path=where,
            )
        if len(head) != 8:
            raise BadInputData(f"{member.name!r} is truncated (shape {number:,})", path=where)
        content_length = struct.unpack(">2i", head)[1] * 2
        if content_length < 4:
            raise BadInputData(f"{member.name!r} is corrupt (shape {number:,})", path=where)
        if content_length > max_record_bytes:
            raise BadInputData(
                f"shape {number:,} of {member.name!r} is {content_length:,} bytes, more than "
                f"{max_record_bytes:,} (its record could not be read)",
                path=where,
                row=number,
            )
        content = member.exactly(content_length, f"shape {number:,}")
        kind = struct.unpack_from("<i", content, 0)[0]
        cls = pyshp.SHAPE_CLASS_FROM_SHAPETYPE.get(kind)
        if cls is None:
            raise BadInputData(
                f"{member.name!r} is corrupt (shape {number:,} has type {kind})", path=where
            )
        try:
            shape = cls.from_byte_stream(
                shapeType=kind,
                b_io=io.BytesIO(content[4:]),
                next_shape_pos=content_length,
                oid=number - 1,
            )
        except Exception as e:  # pyshp raises struct.error, ShapefileException, ...
            raise BadInputData(
                f"{member.name!r} is corrupt (shape {number:,}): {str(e)[:200]}",
                path=where,
                row=number,
            ) from None
        yield number, shape


# --------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------


def shapefile_records(
    source: BinaryIO,
    *,
    sub_path: str | None,
    max_bytes: int,
    max_record_bytes: int,
    chunk_bytes: int,
    where: str,
) -> Iterator[bytes]:
    """The shapefile in the zip ``source`` as NDJSON text, in pieces of about ``chunk_bytes``.

    ``where`` names the input in errors.

    Raises:
        BadInputData: not a zip, no (or more than one) ``.shp``, no ``.dbf``, a corrupt
            shapefile, a value kamu would not read, a record over ``max_record_bytes``.
        DecompressBudgetExceeded: the members read decompress to more than ``max_bytes``.
    """
    try:
        archive = zipfile.ZipFile(source)
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise BadInputData(
            f"EsriShapefile input is not a readable zip archive: {e}", path=where
        ) from None
    with archive:
        files = [i.filename for i in archive.infolist() if not i.is_dir()]
        shp_name = locate_shp(files, sub_path, where)
        dbf_name = _with_extension(shp_name, "dbf")
        if dbf_name not in files:
            raise BadInputData(
                f"the archive has no {dbf_name[:200]!r} beside {shp_name[:200]!r}", path=where
            )
        budget = _Budget(max_bytes)
        try:
            shp_raw = archive.open(shp_name)
            dbf_raw = archive.open(dbf_name)
        except (zipfile.BadZipFile, NotImplementedError, RuntimeError, zlib.error) as e:
            raise BadInputData(f"cannot read the archive's shapefile: {e}", path=where) from None
        with shp_raw, dbf_raw:
            dbf = _Dbf(_Member(dbf_raw, dbf_name, budget, where), where)
            out: list[bytes] = []
            size = 0
            for number, shape in _shapes(
                _Member(shp_raw, shp_name, budget, where), max_record_bytes, where
            ):
                record = dbf.next_record()
                if record is None:
                    break
                try:
                    record["geometry"] = _geometry(shape)
                except ValueError as e:
                    raise BadInputData(str(e), path=where, row=number) from None
                line = json.dumps(
                    record, sort_keys=True, ensure_ascii=False, separators=(",", ":")
                ).encode("utf-8")
                if len(line) > max_record_bytes:
                    raise BadInputData(
                        f"record {number:,} is {len(line):,} bytes of JSON, more than "
                        f"{max_record_bytes:,}",
                        path=where,
                        row=number,
                    )
                out.append(line)
                size += len(line) + 1
                if size >= chunk_bytes:
                    yield b"\n".join(out) + b"\n"
                    out = []
                    size = 0
            if out:
                yield b"\n".join(out) + b"\n"
