"""UTC timestamps with nanosecond precision, as ODF stores them.

ODF's flatbuffers ``Timestamp`` struct carries ``year``, ``ordinal`` (1-based day of year),
``seconds_from_midnight`` and ``nanoseconds``; Python's ``datetime`` keeps only microseconds, so
the model uses this small value type and converts to ``datetime`` only for display.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from dataclasses import dataclass
from typing import Final

from coordinator.errors import DecodeError

_NS_PER_S: Final = 1_000_000_000
_NS_PER_DAY: Final = 86_400 * _NS_PER_S
_EPOCH_ORDINAL: Final = dt.date(1970, 1, 1).toordinal()
_RFC3339: Final = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?"
    r"(Z|z|[+-](?:[01]\d|2[0-3]):[0-5]\d)$",
    re.ASCII,
)


@functools.lru_cache(maxsize=512)
def _year_info(year: int) -> tuple[int, int]:
    """(days from the epoch to 1 January of ``year``, days in the year)."""
    try:
        first = dt.date(year, 1, 1).toordinal()
    except ValueError as e:
        raise DecodeError(f"invalid timestamp: year {year} is out of range") from e
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    return first - _EPOCH_ORDINAL, 366 if leap else 365


@dataclass(frozen=True, slots=True, order=True)
class Timestamp:
    """A UTC instant in integer nanoseconds since the Unix epoch."""

    epoch_ns: int

    @classmethod
    def from_datetime(cls, value: dt.datetime) -> Timestamp:
        """Convert an aware ``datetime`` (naive values are taken as UTC)."""
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
        micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        return cls(micros * 1000)

    @classmethod
    def from_parts(cls, year: int, ordinal: int, seconds: int, nanoseconds: int) -> Timestamp:
        """Build from the flatbuffers struct fields.

        Raises:
            DecodeError: a field is out of range (e.g. ordinal 0 or > days in the year).
        """
        first_day, days_in_year = _year_info(year)
        if not 1 <= ordinal <= days_in_year:
            raise DecodeError(f"invalid timestamp: day {ordinal} out of range for year {year}")
        if not 0 <= seconds < 86_400 or not 0 <= nanoseconds < _NS_PER_S:
            raise DecodeError(f"invalid timestamp time of day: {seconds}s {nanoseconds}ns")
        days = first_day + ordinal - 1
        return cls(days * _NS_PER_DAY + seconds * _NS_PER_S + nanoseconds)

    @classmethod
    def parse(cls, text: str) -> Timestamp:
        """Parse RFC 3339 (offsets -23:59 to +23:59; fractional seconds up to nanoseconds)."""
        m = _RFC3339.match(text)
        if not m:
            raise DecodeError(f"invalid RFC 3339 timestamp: {text!r}")
        year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
        # Like chrono, digits beyond nanoseconds are accepted and truncated.
        frac = (m.group(7) or "")[:9].ljust(9, "0")
        tz = m.group(8)
        try:
            days = dt.date(year, month, day).toordinal() - _EPOCH_ORDINAL
        except ValueError as e:
            raise DecodeError(f"invalid RFC 3339 timestamp {text!r}: {e}") from e
        if hour > 23 or minute > 59 or second > 59:
            raise DecodeError(f"invalid RFC 3339 timestamp: {text!r}")
        ns = days * _NS_PER_DAY + (hour * 3600 + minute * 60 + second) * _NS_PER_S + int(frac)
        if tz not in ("Z", "z"):
            sign = 1 if tz[0] == "+" else -1
            ns -= sign * (int(tz[1:3]) * 3600 + int(tz[4:6]) * 60) * _NS_PER_S
        return cls(ns)

    def to_parts(self) -> tuple[int, int, int, int]:
        """``(year, ordinal, seconds_from_midnight, nanoseconds)`` for the flatbuffers struct."""
        days, rem = divmod(self.epoch_ns, _NS_PER_DAY)
        date = dt.date.fromordinal(days + _EPOCH_ORDINAL)
        seconds, nanos = divmod(rem, _NS_PER_S)
        return date.year, date.timetuple().tm_yday, seconds, nanos

    def to_datetime(self) -> dt.datetime:
        """An aware UTC ``datetime`` (sub-microsecond digits are truncated)."""
        return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(
            microseconds=self.epoch_ns // 1000
        )

    def to_rfc3339(self) -> str:
        """RFC 3339 with ``Z`` and 0/3/6/9 fractional digits, whichever is lossless.

        This is chrono's ``SecondsFormat::AutoSi``, which kamu uses in YAML.
        """
        days, rem = divmod(self.epoch_ns, _NS_PER_DAY)
        date = dt.date.fromordinal(days + _EPOCH_ORDINAL)
        seconds, nanos = divmod(rem, _NS_PER_S)
        hh, rest = divmod(seconds, 3600)
        mm, ss = divmod(rest, 60)
        base = f"{date.isoformat()}T{hh:02d}:{mm:02d}:{ss:02d}"
        if nanos == 0:
            frac = ""
        elif nanos % 1_000_000 == 0:
            frac = f".{nanos // 1_000_000:03d}"
        elif nanos % 1000 == 0:
            frac = f".{nanos // 1000:06d}"
        else:
            frac = f".{nanos:09d}"
        return f"{base}{frac}Z"

    def __str__(self) -> str:
        return self.to_rfc3339()
