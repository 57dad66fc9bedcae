"""Flows (``node/app/flows.py``, ``node/app/cron.py``): triggers, the scheduler's step with an
injected clock (no sleeping), coalescing, trust gating, retries, and cron parsing."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path
from typing import Any, cast

import pytest

from coordinator.errors import SourceUnreachable
from coordinator.identity import DatasetId
from coordinator.metadata import model as m
from coordinator.storage.repository import DatasetRepository
from node.adapters.state import InlineState
from node.app.cron import CronError, CronSchedule
from node.app.datasets import DatasetUseCases
from node.app.errors import InvalidArgument, RetryLater
from node.app.flows import (
    FAILED_RETRY_S,
    MAX_EVERY_S,
    POLL,
    TRANSFORM,
    FlowUseCases,
    parse_every,
)
from node.app.ports import StatePort
from node.app.work import RetryPolicy, WorkRunner
from node.state import NodeState

S = 1_000_000_000
T0 = int(dt.datetime(2050, 1, 1, 0, 0, 30, tzinfo=dt.UTC).timestamp()) * S

ROOT = """\
kind: DatasetSnapshot
version: 1
content:
  name: {name}
  kind: Root
  metadata:
    - kind: SetPollingSource
      fetch:
        kind: FilesGlob
        path: /nonexistent/*.csv
      read:
        kind: Csv
        header: true
        schema: ["event_time TIMESTAMP", "v BIGINT"]
      merge:
        kind: Append
"""
DERIVED = """\
kind: DatasetSnapshot
version: 1
content:
  name: derived
  kind: Derivative
  metadata:
    - kind: SetTransform
      inputs:
        - datasetRef: a
      transform:
        kind: Sql
        engine: datafusion
        query: SELECT * FROM a
"""


def ns(text: str) -> int:
    return int(dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC).timestamp()) * S


# ---------------------------------------------------------------------------- cron


@pytest.mark.parametrize(
    ("expr", "now", "want"),
    [
        ("*/5 * * * *", "2050-01-01 00:00:30", "2050-01-01 00:05:00"),
        ("*/5 * * * *", "2050-01-01 00:05:00", "2050-01-01 00:10:00"),  # strictly after
        ("0 * * * *", "2050-01-01 10:59:59", "2050-01-01 11:00:00"),
        ("30 2 * * *", "2050-01-01 03:00:00", "2050-01-02 02:30:00"),
        ("@daily", "2050-01-01 00:00:00", "2050-01-02 00:00:00"),
        ("0 0 1 jan *", "2050-03-01 00:00:00", "2051-01-01 00:00:00"),
        ("0 12 * * mon-fri", "2050-01-01 13:00:00", "2050-01-03 12:00:00"),  # Sat -> Mon
        ("0 0 * * 7", "2050-01-01 00:00:00", "2050-01-02 00:00:00"),  # 7 is Sunday
        ("0 0 29 2 *", "2050-01-01 00:00:00", "2052-02-29 00:00:00"),  # leap day
        # Day of month and day of week both restricted: either (Vixie cron).
        ("0 0 15 * fri", "2050-01-01 00:00:00", "2050-01-07 00:00:00"),
        ("10-20/5 8 * * *", "2050-01-01 08:11:00", "2050-01-01 08:15:00"),
        ("5/20 * * * *", "2050-01-01 00:26:00", "2050-01-01 00:45:00"),
    ],
)
def test_cron_next_after(expr: str, now: str, want: str) -> None:
    assert CronSchedule.parse(expr).next_after(ns(now)) == ns(want)


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("* * * *", "has 4 fields"),
        ("* * * * * *", "has 6 fields"),
        ("60 * * * *", "minute: 60 is outside 0-59"),
        ("* 24 * * *", "hour: 24 is outside 0-23"),
        ("* * 0 * *", "day of month: 0 is outside 1-31"),
        ("* * * 13 *", "month: 13 is outside 1-12"),
        ("* * * * 8", "day of week: 8 is outside 0-7"),
        ("x * * * *", "minute: 'x' is not a number"),
        ("5-1 * * * *", "runs backwards"),
        ("*/0 * * * *", "step '0'"),
        ("1,,2 * * * *", "empty list item"),
        ("", "has 0 fields"),
    ],
)
def test_cron_that_does_not_parse_is_refused_naming_the_field(expr: str, message: str) -> None:
    with pytest.raises(CronError, match=message):
        CronSchedule.parse(expr)


def test_cron_that_never_fires_is_refused() -> None:
    with pytest.raises(CronError, match="never fires"):
        CronSchedule.parse("0 0 31 2 *").next_after(T0)


def test_every_durations() -> None:
    assert parse_every("90") == 90
    assert parse_every("30s") == 30
    assert parse_every("15m") == 900
    assert parse_every("1h30m") == 5400
    assert parse_every("1d") == 86400
    for bad in ("", "1x", "h", "1h 30m", "-5", "0.5s"):
        with pytest.raises(InvalidArgument):
            parse_every(bad)


def test_every_has_an_upper_bound_named_in_the_error() -> None:
    assert parse_every("366d") == MAX_EVERY_S
    # 107000 days in nanoseconds does not fit a signed 64-bit SQLite integer.
    for bad in ("107000d", "367d", "9" * 40):
        with pytest.raises(InvalidArgument, match=r"at most 366d \(31622400 s\)"):
            parse_every(bad)


# ---------------------------------------------------------------------------- the scheduler


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


class Node:
    """A repository, an in-memory state and the flow use cases, on one injected clock."""

    def __init__(self, tmp: Path, untrusted: set[str] | None = None) -> None:
        self.clock = Clock()
        self.repo = DatasetRepository(
            tmp / "datasets", tmp / "keys", clock=lambda: m.Timestamp(self.clock.now), durable=False
        )
        self.sync = NodeState.in_memory(self.clock)
        self.state = cast(StatePort, InlineState(self.sync))
        self.datasets = DatasetUseCases(self.repo, lambda: None, state=self.state)
        self.untrusted = untrusted if untrusted is not None else set()
        self.kicks = 0
        self.flows = FlowUseCases(
            self.repo,
            self.state,
            self.clock,
            self.datasets,
            kick=self._kick,
            untrusted_input=lambda d: "not trusted" if d.as_did_str() in self.untrusted else None,
        )

    def _kick(self) -> None:
        self.kicks += 1

    def run(self, coro: Any) -> Any:
        return asyncio.run(coro)

    def create(self, yaml: str) -> str:
        (created,) = self.run(self.datasets.create(yaml))
        return str(created.id)

    def tick(self) -> list[tuple[str, str]]:
        return [(w.kind, w.did) for w in self.run(self.flows.tick())]

    def advance_input(self, did: str) -> None:
        ds = self.repo.open(did)
        st = ds.state()
        ds.append(
            m.MetadataBlock(
                system_time=m.Timestamp(self.clock.now),
                prev_block_hash=st.head,
                sequence_number=st.sequence_number + 1,
                event=m.SetInfo(description=f"at {self.clock.now}"),
            )
        )

    def finish(self, kind: str) -> None:
        item = self.sync.claim(self.clock.now, kinds=[kind])
        assert item is not None
        self.sync.complete(item.id)


def test_every_polls_at_once_then_each_period_and_coalesces(tmp_path: Path) -> None:
    n = Node(tmp_path)
    a = n.create(ROOT.format(name="a"))
    row = n.run(n.flows.schedule("a", every="10s"))
    assert row.trigger == "every 10s" and row.next_run is not None
    assert n.tick() == [(POLL, a)]  # due at once
    n.clock.now += 1 * S
    assert n.tick() == []
    n.clock.now = T0 + 10 * S
    # Still pending (not run yet): the due run joins it, no second item.
    assert n.tick() == [(POLL, a)]
    assert len(n.sync.work(state="pending")) == 1
    n.finish(POLL)
    # Down for 35 s: the missed runs are one run, the next one on the period's grid.
    n.clock.now = T0 + 45 * S
    assert n.tick() == [(POLL, a)]
    assert n.sync.schedule(a).next_ns == T0 + 50 * S  # type: ignore[union-attr]
    assert n.kicks >= 3


def test_cron_schedule_runs_on_its_minutes(tmp_path: Path) -> None:
    n = Node(tmp_path)
    a = n.create(ROOT.format(name="a"))
    row = n.run(n.flows.schedule("a", cron="*/5 * * * *"))
    assert row.next_run == "2050-01-01T00:05:00Z"
    n.clock.now = ns("2050-01-01 00:04:59")
    assert n.tick() == []
    n.clock.now = ns("2050-01-01 00:05:00")
    assert n.tick() == [(POLL, a)]
    assert n.sync.schedule(a).next_ns == ns("2050-01-01 00:10:00")  # type: ignore[union-attr]


def test_a_bad_schedule_row_stops_no_other_schedule(tmp_path: Path) -> None:
    """A row the scheduler cannot step (here one stored before ``--every`` had a bound: its next
    time overflows SQLite) is logged, marked and held back; the others run on every tick."""
    n = Node(tmp_path)
    a = n.create(ROOT.format(name="a"))
    b = n.create(ROOT.format(name="b"))
    n.sync.set_schedule(a, every_s=107000 * 86400.0, next_ns=T0)  # older version's row
    n.run(n.flows.schedule("b", every="10s"))
    assert n.tick() == [(POLL, b)]
    (row_a,) = [s for s in n.run(n.flows.flows()).schedules if s.id == a]
    assert row_a.error is not None and "outside 1-31622400 s" in row_a.error
    assert [e for e in n.sync.events() if e.kind == "flow.schedule_failed"]
    n.finish(POLL)
    n.clock.now += 10 * S
    assert n.tick() == [(POLL, b)]  # a is held back, b goes on
    # a's failure is retried after a while, and does not stop b then either.
    n.finish(POLL)
    n.clock.now += FAILED_RETRY_S * S
    assert n.tick() == [(POLL, b)]
    # Set again within the bound, a runs.
    n.run(n.flows.schedule("a", every="1d"))
    n.clock.now += FAILED_RETRY_S * S
    assert sorted(n.tick()) == sorted([(POLL, a), (POLL, b)])
    assert all(s.error is None for s in n.run(n.flows.flows()).schedules)


class _BrokenState:
    """The state port with ``schedule_ran`` failing for one dataset (any error, not typed)."""

    def __init__(self, inner: StatePort, bad: str) -> None:
        self._inner = inner
        self._bad = bad

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def schedule_ran(self, did: str, **kw: Any) -> bool:
        if did == self._bad:
            raise OverflowError("Python int too large to convert to SQLite INTEGER")
        return await self._inner.schedule_ran(did, **kw)


def test_a_failing_state_write_for_one_schedule_stops_no_other(tmp_path: Path) -> None:
    n = Node(tmp_path)
    a = n.create(ROOT.format(name="a"))
    b = n.create(ROOT.format(name="b"))
    n.run(n.flows.schedule("a", every="10s"))  # a first: it used to stop the loop
    n.run(n.flows.schedule("b", every="10s"))
    flows = FlowUseCases(n.repo, cast(StatePort, _BrokenState(n.state, a)), n.clock, n.datasets)
    assert [(w.kind, w.did) for w in n.run(flows.tick())] == [(POLL, b)]
    (row_a,) = [s for s in n.run(flows.flows()).schedules if s.id == a]
    assert row_a.error is not None and "OverflowError" in row_a.error


def test_bad_triggers_are_refused(tmp_path: Path) -> None:
    n = Node(tmp_path)
    n.create(ROOT.format(name="a"))
    n.create(DERIVED)
    for kwargs, message in [
        ({"cron": "61 * * * *"}, "minute: 61"),
        ({"every": "soon"}, "not a duration"),
        ({"every": "107000d"}, "at most 366d"),
        ({"every": "1h", "cron": "@daily"}, "exactly one"),
        ({}, "exactly one"),
        ({"on_input": True}, "not a derivative"),
    ]:
        with pytest.raises(InvalidArgument, match=message):
            n.run(n.flows.schedule("a", **kwargs))
    with pytest.raises(InvalidArgument, match="no active polling source"):
        n.run(n.flows.schedule("derived", every="1h"))
    assert n.sync.schedules() == []
    # --off removes, and says whether there was anything.
    n.run(n.flows.schedule("a", every="1h"))
    assert n.run(n.flows.schedule("a", off=True)).removed is True
    assert n.run(n.flows.schedule("a", off=True)).removed is False


def test_on_input_transforms_once_per_new_head_never_two_at_once(tmp_path: Path) -> None:
    n = Node(tmp_path)
    a = n.create(ROOT.format(name="a"))
    d = n.create(DERIVED)
    n.run(n.flows.schedule("derived", on_input=True))
    assert n.tick() == [(TRANSFORM, d)]  # catches up at once
    assert n.tick() == []  # nothing new
    # A run is in flight when the input changes: no second one beside it...
    item = n.sync.claim(n.clock.now, kinds=[TRANSFORM])
    assert item is not None
    n.advance_input(a)
    assert n.tick() == []
    assert n.sync.work(state="pending") == []
    # ...and the change is picked up once it is done.
    n.sync.complete(item.id)
    assert n.tick() == [(TRANSFORM, d)]
    # Two changes before the pending run starts: one run.
    n.advance_input(a)
    assert n.tick() == [(TRANSFORM, d)]
    assert len([w for w in n.sync.work(state="pending") if w.kind == TRANSFORM]) == 1


def test_on_input_waits_for_a_trusted_head(tmp_path: Path) -> None:
    n = Node(tmp_path)
    a = n.create(ROOT.format(name="a"))
    d = n.create(DERIVED)
    n.untrusted.add(a)
    n.run(n.flows.schedule("derived", on_input=True))
    assert n.tick() == []
    n.untrusted.clear()
    assert n.tick() == [(TRANSFORM, d)]


class FailingDatasets:
    """Stands in for DatasetUseCases: the source of ``down`` is unreachable."""

    def __init__(self, down: str) -> None:
        self.down = down
        self.polled: list[str] = []

    async def poll(self, ref: str, *, publish: bool = True) -> None:
        if ref == self.down:
            raise SourceUnreachable("http://127.0.0.1:9/a.csv: connection refused")
        self.polled.append(ref)


def test_a_failing_source_is_retried_with_backoff_and_blocks_no_other(tmp_path: Path) -> None:
    n = Node(tmp_path)
    a = n.create(ROOT.format(name="a"))
    b = n.create(ROOT.format(name="b"))
    fake = FailingDatasets(down=a)
    flows = FlowUseCases(n.repo, n.state, n.clock, cast(DatasetUseCases, fake))
    runner = WorkRunner(n.state, n.clock, RetryPolicy(base_s=5, cap_s=60), lambda: 0.5)
    runner.handle(POLL, flows.run_poll)
    n.run(n.flows.schedule("a", every="1h"))
    n.run(n.flows.schedule("b", every="1h"))
    assert sorted(n.tick()) == sorted([(POLL, a), (POLL, b)])

    async def drain() -> None:
        while (item := await n.state.claim(n.clock.now)) is not None:
            await runner.run_item(item)

    n.run(drain())
    assert fake.polled == [b]  # b ran although a failed first
    (retry,) = n.sync.work(state="pending")
    assert retry.did == a and "connection refused" in (retry.last_error or "")
    assert retry.not_before_ns > n.clock.now  # backoff: not runnable now
    # An unreachable source waits as RetryLater: four times the attempts of a plain failure.
    policy = RetryPolicy(max_attempts=2)
    assert policy.next_attempt_ns(retry, RetryLater("x"), 0, lambda: 0.5) is not None
    n.clock.now = retry.not_before_ns
    n.run(drain())
    assert n.sync.work_item(retry.id).attempts == 2  # type: ignore[union-attr]


def test_flows_lists_triggers_and_runs_newest_first(tmp_path: Path) -> None:
    n = Node(tmp_path)
    a = n.create(ROOT.format(name="a"))
    n.run(n.flows.schedule("a", every="1m"))
    n.tick()
    n.finish(POLL)
    n.clock.now += 60 * S
    n.tick()
    out = n.run(n.flows.flows())
    assert [s.alias for s in out.schedules] == ["a"]
    assert [(r.kind, r.alias, r.state, r.trigger) for r in out.runs] == [
        (POLL, "a", "pending", "every 60s"),
        (POLL, "a", "done", "every 60s"),
    ]
    assert n.run(n.flows.flows(did="a", limit=1)).runs[0].state == "pending"
    assert DatasetId.parse(a)


def test_cli_refuses_a_period_past_the_bound_naming_it(tmp_path: Path) -> None:
    """``dataset schedule --every 107000d`` was accepted, then the scheduler crash-looped on an
    SQLite integer overflow: the CLI now refuses it with the limit, and stores nothing."""
    from typer.testing import CliRunner

    from node.cli import app

    home = tmp_path / "home"
    snap = tmp_path / "a.yaml"
    snap.write_text(ROOT.format(name="a"))

    def run(*args: str) -> Any:
        return CliRunner().invoke(app, [*args, "--home", str(home)])

    assert run("init").exit_code == 0
    assert run("dataset", "create", str(snap)).exit_code == 0
    result = run("dataset", "schedule", "a", "--every", "107000d")
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert "--every must be at most 366d (31622400 s)" in result.stderr
    with NodeState.open(home / "state.db", lambda: T0) as st:
        assert st.schedules() == []
    assert run("dataset", "schedule", "a", "--every", "366d").exit_code == 0


def test_a_derivative_whose_inputs_cannot_be_read_stops_no_other(tmp_path: Path) -> None:
    """Reading one derivative's inputs fails with an untyped error: the other derivative is
    still transformed, the failing one marked."""
    a_did = ""

    def untrusted(d: DatasetId) -> str | None:
        if d.as_did_str() == a_did:
            raise RuntimeError("trust state unreadable")
        return None

    n = Node(tmp_path)
    a_did = n.create(ROOT.format(name="a"))
    n.create(ROOT.format(name="b"))
    d1 = n.create(DERIVED)
    d2 = n.create(
        DERIVED.replace("name: derived", "name: derived2")
        .replace("datasetRef: a", "datasetRef: b")
        .replace("FROM a", "FROM b")
    )
    flows = FlowUseCases(n.repo, n.state, n.clock, n.datasets, untrusted_input=untrusted)
    n.run(flows.schedule("derived", on_input=True))
    n.run(flows.schedule("derived2", on_input=True))
    assert [(w.kind, w.did) for w in n.run(flows.tick())] == [(TRANSFORM, d2)]
    (row,) = [s for s in n.run(flows.flows()).schedules if s.id == d1]
    assert row.error is not None and "trust state unreadable" in row.error


def test_a_damaged_schedule_row_leaves_the_others_readable(tmp_path: Path) -> None:
    n = Node(tmp_path)
    n.create(ROOT.format(name="a"))
    b = n.create(ROOT.format(name="b"))
    d = n.create(DERIVED)
    n.run(n.flows.schedule("derived", on_input=True))
    n.run(n.flows.schedule("b", every="10s"))
    n.sync.conn.execute("UPDATE schedules SET inputs_seen = '{not json' WHERE did = ?", (d,))
    assert sorted(n.tick()) == sorted([(POLL, b), (TRANSFORM, d)])
