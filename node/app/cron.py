"""Cron expressions of flow schedules (``odf-node dataset schedule ALIAS --cron "…"``), in UTC.

Five fields, as in crontab(5): minute (0-59), hour (0-23), day of month (1-31), month (1-12 or
``jan``-``dec``), day of week (0-7, 0 and 7 Sunday, or ``sun``-``sat``). Each field is ``*``
or a comma list of ``N``, ``A-B``, ``*/S``, ``A-B/S`` or ``N/S`` (from N to the field's end).
The macros ``@hourly``, ``@daily`` (``@midnight``), ``@weekly``, ``@monthly``, ``@yearly``
(``@annually``) stand for their usual expressions. As in Vixie cron, when both the day of month
and the day of week are restricted (neither is ``*``), a day matching either fires.

kamu-node's cron schedules take a six- or seven-field Quartz form (seconds first); this node
takes the five-field crontab form that cron and systemd users write. Anything else is refused
with :class:`CronError`, naming the field. No dependency: the stdlib only.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Final

from node.app.errors import InvalidArgument

__all__ = ["CronError", "CronSchedule"]

_MACROS: Final = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTHS: Final = {
    n: i + 1
    for i, n in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
    )
}
_DAYS: Final = {n: i for i, n in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
# (name, low, high, names)
_FIELDS: Final[tuple[tuple[str, int, int, dict[str, int]], ...]] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS),
)
#: The longest a search for the next time runs: a date like 30 February never comes.
_SEARCH_YEARS: Final = 5


class CronError(InvalidArgument):
    """A cron expression that does not parse (the message names the field and the value)."""


def _value(text: str, name: str, low: int, high: int, names: dict[str, int]) -> int:
    v = names.get(text.lower())
    if v is None:
        if not text.isdigit():
            raise CronError(f"cron {name}: {text!r} is not a number")
        v = int(text)
    if not low <= v <= high:
        raise CronError(f"cron {name}: {v} is outside {low}-{high}")
    return v


def _field(text: str, name: str, low: int, high: int, names: dict[str, int]) -> frozenset[int]:
    out: set[int] = set()
    for part in text.split(","):
        if not part:
            raise CronError(f"cron {name}: empty list item in {text!r}")
        base, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) < 1:
                raise CronError(f"cron {name}: step {step_text!r} is not a positive number")
            step = int(step_text)
        if base == "*":
            first, last = low, high
        elif "-" in base:
            a, _, b = base.partition("-")
            first, last = _value(a, name, low, high, names), _value(b, name, low, high, names)
            if first > last:
                raise CronError(f"cron {name}: range {base!r} runs backwards")
        else:
            first = _value(base, name, low, high, names)
            last = high if step_text else first
        out.update(range(first, last + 1, step))
    return frozenset(out)


@dataclass(frozen=True)
class CronSchedule:
    """A parsed cron expression; :meth:`next_after` gives its next firing time."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    any_day: bool
    any_weekday: bool

    @classmethod
    def parse(cls, text: str) -> CronSchedule:
        """Parse ``text``.

        Raises:
            CronError: not five fields (or a known macro), or a field that does not parse.
        """
        expr = _MACROS.get(text.strip().lower(), text.strip())
        parts = expr.split()
        if len(parts) != 5:
            raise CronError(
                f"cron expression {text[:100]!r} has {len(parts)} fields; five are needed "
                "(minute hour day-of-month month day-of-week) or a macro such as @hourly"
            )
        sets = [_field(p, *spec) for p, spec in zip(parts, _FIELDS, strict=True)]
        weekdays = frozenset(d % 7 for d in sets[4])
        return cls(
            text.strip(),
            sets[0],
            sets[1],
            sets[2],
            sets[3],
            weekdays,
            any_day=parts[2] == "*",
            any_weekday=parts[4] == "*",
        )

    def _day_matches(self, day: dt.date) -> bool:
        in_month = day.day in self.days
        in_week = (day.isoweekday() % 7) in self.weekdays
        if self.any_day or self.any_weekday:
            return in_month and in_week
        return in_month or in_week  # both restricted: either (Vixie cron)

    def next_after(self, now_ns: int) -> int:
        """The first firing time strictly after ``now_ns`` (UTC nanoseconds).

        Raises:
            CronError: the expression never fires (a date that does not exist, 31 February).
        """
        t = dt.datetime.fromtimestamp(now_ns // 1_000_000_000, dt.UTC).replace(second=0)
        t += dt.timedelta(minutes=1)
        limit = t + dt.timedelta(days=366 * _SEARCH_YEARS)
        while t < limit:
            if t.month not in self.months:
                t = (t.replace(day=1) + dt.timedelta(days=32)).replace(day=1, hour=0, minute=0)
                continue
            if not self._day_matches(t.date()):
                t = (t + dt.timedelta(days=1)).replace(hour=0, minute=0)
                continue
            if t.hour not in self.hours:
                t = (t + dt.timedelta(hours=1)).replace(minute=0)
                continue
            if t.minute not in self.minutes:
                t += dt.timedelta(minutes=1)
                continue
            return int(t.timestamp()) * 1_000_000_000
        raise CronError(f"cron expression {self.text[:100]!r} never fires")
