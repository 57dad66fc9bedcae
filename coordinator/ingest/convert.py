"""Vectorised value conversions used by the readers, with exact error locations.

* :func:`parse_timestamps` turns strings into ``timestamp[ms, tz=UTC]`` the way arrow-rs's
  ``string_to_datetime`` (kamu's CSV/JSON readers) does for the default ``rfc3339`` format: a
  date, optionally followed by a ``T``/``t``/space and a time (``HH:MM:SS[.fraction]`` or
  ``HHMMSS``) with an optional zone (``Z`` or ``±HH[[:]MM]``, optionally after spaces); values
  without a zone are UTC. Uniform input goes through Arrow's ISO 8601 cast; mixed zone forms
  take a slower regex path. Values are parsed to nanoseconds first
  (so, like kamu, only years 1677-2262 are representable) and truncated towards zero to
  milliseconds, as arrow-rs's cast does.
* :func:`cast_column` casts an array to a target type and, when some value cannot be
  converted, reports the index of the first such value (a binary search over slices, so only
  the error path pays for it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "MAX_SHOWN_CHARS",
    "RFC3339_PATTERN",
    "ConversionFailure",
    "cast_column",
    "clip",
    "first_failure",
    "parse_dates",
    "parse_timestamps",
    "shown",
]

_NS: Final = pa.timestamp("ns")
_NS_UTC: Final = pa.timestamp("ns", tz="UTC")
_MS_UTC: Final = pa.timestamp("ms", tz="UTC")
#: Accepted shape of a timestamp string under the default ``rfc3339`` format (arrow-rs
#: ``string_to_datetime``: ``HH:MM:SS[.fraction]`` or ``HHMMSS``; the zone may follow a space).
#: A zone offset is strict: hours 00-23, minutes 00-59 (RFC 3339; chrono refuses the rest too).
RFC3339_PATTERN: Final = (
    r"^(?P<date>\d{4}-\d{2}-\d{2})"
    r"(?:[Tt ](?P<time>\d{2}:\d{2}:\d{2}(?:\.\d+)?|\d{6}) *"
    r"(?P<tz>[Zz]|[+-](?:[01]\d|2[0-3])(?::?[0-5]\d)?)?)?$"
)


# A one-digit month / day of a date (``YYYY-M-D``, ``YYYY-MM-D``, ``YYYY-M-DD``): arrow-rs's
# ``parse_date`` reads these forms, so they are padded before Arrow's cast.
_ONE_DIGIT_MONTH: Final = r"^(\d{4})-(\d)-"
_ONE_DIGIT_DAY: Final = r"^(\d{4}-\d{2})-(\d)$"

#: Longest excerpt of an input value (or of a message quoting one) that an error carries: a
#: value may be megabytes long, and errors are logged and sent back over RPC.
MAX_SHOWN_CHARS: Final = 200


def clip(text: str) -> str:
    """``text``, cut to :data:`MAX_SHOWN_CHARS` (saying how long it was)."""
    if len(text) <= MAX_SHOWN_CHARS:
        return text
    return f"{text[:MAX_SHOWN_CHARS]}... ({len(text):,} characters)"


def shown(value: object) -> str:
    """The ``repr`` of an input value for an error message, clipped (:func:`clip`)."""
    return clip(repr(value))


class ConversionFailure(Exception):
    """A value could not be converted: ``index`` is its position in the converted array."""

    def __init__(self, index: int, value: object, message: str) -> None:
        super().__init__(message)
        self.index = index
        self.value = value
        self.message = message


def first_failure(n: int, fails: Callable[[int, int], bool]) -> int | None:
    """Smallest ``i`` in ``[0, n)`` such that ``fails(i, i + 1)``, given that ``fails(a, b)``
    is true iff some element of ``[a, b)`` fails. None if ``fails(0, n)`` is false."""
    if n == 0 or not fails(0, n):
        return None
    lo, hi = 0, n  # invariant: [lo, hi) contains a failing element
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fails(lo, mid):
            hi = mid
        else:
            lo = mid
    return lo


def _cast(arr: pa.Array, target: pa.DataType) -> pa.Array:
    # Timestamps are truncated (not rejected) when going to a coarser unit, as arrow-rs does.
    safe = not (pa.types.is_timestamp(arr.type) and pa.types.is_timestamp(target))
    return pc.cast(arr, target, safe=safe)


def cast_column(arr: pa.Array, target: pa.DataType) -> pa.Array:
    """Cast ``arr`` to ``target``; raise :class:`ConversionFailure` at the first bad value."""
    if arr.type == target:
        return arr
    try:
        return _cast(arr, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OverflowError) as e:
        if isinstance(e, pa.ArrowNotImplementedError):
            raise ConversionFailure(0, None, f"cannot convert {arr.type} to {target}") from e
        message = str(e)

        def fails(a: int, b: int) -> bool:
            try:
                _cast(arr.slice(a, b - a), target)
            except (pa.ArrowInvalid, OverflowError):
                return True
            return False

        index = first_failure(len(arr), fails)
        if index is None:  # pragma: no cover - cast failed as a whole but no single element does
            raise ConversionFailure(0, None, message) from e
        value = arr[index].as_py()
        raise ConversionFailure(
            index, value, f"cannot convert {shown(value)} to {target}: {clip(message)}"
        ) from e


def _offset_ns(tz: pa.Array) -> pa.Array:
    """Zone strings ("" / "Z" / "+HH" / "+HH:MM" / "+HHMM") -> offset in ns (int64)."""
    if pc.all(pc.is_in(tz, pa.array(["", "Z", "z"])), min_count=0).as_py():
        return pa.array(np.zeros(len(tz), dtype=np.int64))
    zulu = pc.or_(pc.equal(tz, ""), pc.equal(pc.utf8_upper(tz), "Z"))
    digits = pc.replace_substring(pc.utf8_slice_codeunits(tz, 1), ":", "")
    digits = pc.if_else(zulu, "0000", digits)
    digits = pc.if_else(
        pc.equal(pc.utf8_length(digits), 2), pc.binary_join_element_wise(digits, "00", ""), digits
    )
    hours = pc.cast(pc.utf8_slice_codeunits(digits, 0, 2), pa.int64())
    minutes = pc.cast(pc.utf8_slice_codeunits(digits, 2, 4), pa.int64())
    seconds = pc.add(pc.multiply(hours, 3600), pc.multiply(minutes, 60))
    sign = pc.if_else(pc.starts_with(tz, "-"), -1, 1)
    return pc.multiply(pc.multiply(seconds, sign), 1_000_000_000)


def _bad_index(source: pa.Array, result: pa.Array) -> int | None:
    bad = pc.and_(source.is_valid(), result.is_null())
    if not pc.any(bad).as_py():
        return None
    return int(np.flatnonzero(bad.to_numpy(zero_copy_only=False))[0])


def _strptime(arr: pa.Array, fmt: str, unit: str, what: str) -> pa.Array:
    """Strings parsed with the ``strptime`` pattern ``fmt`` into timestamps of ``unit``.

    Raises:
        ConversionFailure: at the first non-null string that does not parse (as ``what``).
    """
    parsed = pc.strptime(arr, format=fmt, unit=unit, error_is_null=True)
    index = _bad_index(arr, parsed)
    if index is not None:
        value = arr[index].as_py()
        raise ConversionFailure(
            index, value, f"cannot parse {shown(value)} as {what} with format {fmt!r}"
        )
    return parsed


def parse_timestamps(arr: pa.Array, fmt: str | None = None) -> pa.Array:
    """Strings -> ``timestamp[ms, tz=UTC]``.

    ``fmt`` is None / ``"rfc3339"`` (see the module docstring) or a ``strptime`` pattern with
    ``%`` directives (an extension over kamu; ``%z`` gives the zone, otherwise UTC).

    Raises:
        ConversionFailure: at the first non-null string that does not parse.
    """
    arr = pc.cast(arr, pa.string()) if not pa.types.is_string(arr.type) else arr
    if fmt is not None and fmt != "rfc3339":
        ns = _strptime(arr, fmt, "ns", "a timestamp")
        if ns.type.tz is None:
            ns = pc.assume_timezone(ns, "UTC")
        return pc.cast(ns, _MS_UTC, safe=False)
    matches = pc.match_substring_regex(arr, RFC3339_PATTERN)
    if not pc.all(matches, min_count=0).as_py():  # nulls are skipped
        index = int(np.flatnonzero(pc.fill_null(pc.invert(matches), False).to_numpy(False))[0])
        value = arr[index].as_py()
        raise ConversionFailure(
            index, value, f"cannot parse {shown(value)} as an RFC 3339 timestamp"
        )
    # Fast paths: Arrow's ISO 8601 cast when every value has a zone, or none has one.
    for target in (_NS_UTC, _NS):
        try:
            ts = pc.cast(arr, target)
        except pa.ArrowInvalid:
            continue
        if ts.type.tz is None:
            ts = ts.cast(pa.int64()).cast(_NS_UTC)
        return pc.cast(ts, _MS_UTC, safe=False)
    return _parse_mixed(arr)


def _parse_mixed(arr: pa.Array) -> pa.Array:
    """Slow path: values that all match :data:`RFC3339_PATTERN` but mix zone forms."""
    parts = pc.extract_regex(arr, RFC3339_PATTERN)
    date = pc.struct_field(parts, "date")
    time = pc.struct_field(parts, "time")
    compact = pc.equal(pc.utf8_length(time), 6)
    spaced = pc.binary_join_element_wise(
        pc.utf8_slice_codeunits(time, 0, 2),
        pc.utf8_slice_codeunits(time, 2, 4),
        pc.utf8_slice_codeunits(time, 4, 6),
        ":",
    )
    time = pc.if_else(compact, spaced, time)
    # arrow-rs reads at most 9 fraction digits ("decimal overrun" is skipped).
    time = pc.utf8_slice_codeunits(time, 0, 18)
    time = pc.if_else(pc.equal(time, ""), "00:00:00", time)
    naive_text = pc.binary_join_element_wise(date, time, "T")
    try:
        naive = pc.cast(naive_text, _NS)
    except pa.ArrowInvalid:
        index = first_failure(len(naive_text), lambda a, b: _cast_fails(naive_text, a, b))
        index = 0 if index is None else index
        value = arr[index].as_py()
        raise ConversionFailure(
            index, value, f"{shown(value)} is not a valid timestamp (or is out of range)"
        ) from None
    offset = _offset_ns(pc.struct_field(parts, "tz"))
    epoch_ns = pc.subtract(pc.cast(naive, pa.int64()), offset)
    # Re-apply the input's nulls (struct nulls are not propagated to the fields).
    epoch_ns = pc.if_else(arr.is_valid(), epoch_ns, pa.scalar(None, pa.int64()))
    return pc.cast(pc.cast(epoch_ns, _NS_UTC), _MS_UTC, safe=False)


def _cast_fails(arr: pa.Array, a: int, b: int) -> bool:
    try:
        pc.cast(arr.slice(a, b - a), _NS)
    except pa.ArrowInvalid:
        return True
    return False


def parse_dates(arr: pa.Array, fmt: str | None = None) -> pa.Array:
    """Strings (``YYYY-MM-DD``, month and day may have one digit as arrow-rs reads them; or a
    ``strptime`` pattern) -> ``date32``.

    Raises:
        ConversionFailure: at the first non-null string that does not parse.
    """
    arr = pc.cast(arr, pa.string()) if not pa.types.is_string(arr.type) else arr
    if fmt is not None and fmt != "rfc3339":
        return pc.cast(_strptime(arr, fmt, "s", "a date"), pa.date32())
    try:
        return cast_column(arr, pa.date32())
    except ConversionFailure:
        # arrow-rs (kamu's parser) also reads a one-digit month or day ("2024-3-7", the form
        # kamu's EsriShapefile reader gives .dbf dates); Arrow's cast needs two digits. Arrow's
        # regex engine (RE2) runs in linear time.
        padded = pc.replace_substring_regex(arr, _ONE_DIGIT_MONTH, r"\1-0\2-")
        padded = pc.replace_substring_regex(padded, _ONE_DIGIT_DAY, r"\1-0\2")
        try:
            return cast_column(padded, pa.date32())
        except ConversionFailure as e:
            value = arr[e.index].as_py()
            raise ConversionFailure(
                e.index, value, f"cannot convert {shown(value)} to {pa.date32()}"
            ) from None
