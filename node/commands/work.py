"""What the daemon does by itself: ``dataset schedule`` (flows, docs/flows.md), ``flows`` (their
schedules and runs) and ``work`` (the pipeline's work items)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from node.app import Application
from node.app.flows import require_flows
from node.app.results import (
    FlowsResult,
    ScheduleRow,
    WorkRow,
)
from node.app.rows import WorkState
from node.commands import spec
from node.commands.params import did_filter, ref_param
from node.commands.spec import Cli, Command, CommandParam, Context, Output


async def _dataset_schedule(
    app: Application,
    ctx: Context,
    ref: str,
    every: str | None = None,
    cron: str | None = None,
    on_input: bool = False,
    off: bool = False,
) -> ScheduleRow:
    return await require_flows(app.flows).schedule(
        ref, every=every, cron=cron, on_input=on_input, off=off
    )


async def _flows(
    app: Application, ctx: Context, did: str | None = None, limit: int = 100
) -> FlowsResult:
    return await require_flows(app.flows).flows(did, limit)


async def _work(
    app: Application, ctx: Context, state: WorkState | None = None, did: str | None = None
) -> list[WorkRow]:
    return await app.queries.work(state, did)


def _render_schedule(value: ScheduleRow, out: Output, opts: Mapping[str, Any]) -> None:
    name = value.alias or value.id
    if not value.active:
        out.print(f"{name}: schedule removed" if value.removed else f"{name}: no schedule")
    else:
        nxt = f", next run {value.next_run}" if value.next_run else ""
        out.print(f"{name}: {value.trigger}{nxt}")


def _render_flows(value: FlowsResult, out: Output, opts: Mapping[str, Any]) -> None:
    out.table(
        ["dataset", "trigger", "next run", "id"],
        [
            [
                s.alias or "",
                s.trigger or "",
                # A failing trigger is held back: its error says why its run does not come.
                f"held: {s.error}" if s.error else s.next_run or "",
                s.id,
            ]
            for s in value.schedules
        ],
    )
    out.table(
        ["run", "kind", "dataset", "trigger", "state", "attempts", "updated", "last error"],
        [
            [
                str(r.id),
                r.kind,
                r.alias or r.did,
                r.trigger,
                r.state,
                str(r.attempts),
                r.updated,
                (r.last_error or "")[:60],
            ]
            for r in value.runs
        ],
    )


WORK_COMMANDS: tuple[Command, ...] = (
    Command(
        "dataset.schedule",
        "Make a dataset update itself: poll a root on a schedule, transform a derivative when "
        "an input changes.",
        _dataset_schedule,
        (
            ref_param("Owned dataset alias or did:odf."),
            CommandParam(
                "every",
                spec.STR,
                False,
                "Poll a root's source this often (90, 30s, 15m, 1h, 1h30m, 1d).",
                Cli(type=str),
            ),
            CommandParam(
                "cron",
                spec.STR,
                False,
                'Poll a root\'s source on a cron schedule, UTC ("0 * * * *", @daily).',
                Cli(type=str),
            ),
            CommandParam(
                "on_input",
                spec.BOOL,
                False,
                "Transform a derivative when an input gets a new (trusted) head.",
                Cli(),
            ),
            CommandParam("off", spec.BOOL, False, "Remove the dataset's schedule.", Cli()),
        ),
        cli=("dataset", "schedule"),
        doc="Exactly one of --every, --cron, --on-input, --off. The daemon runs the flows "
        "(each run a work item, retried with backoff) and publishes what they commit; "
        "see docs/flows.md.",
        render=_render_schedule,
        write=True,
        result=spec.object_of(ScheduleRow),
        result_type=ScheduleRow,
    ),
    Command(
        "flows.list",
        "Flow schedules and the history of their runs (newest first).",
        _flows,
        (
            did_filter(),
            CommandParam("limit", spec.LIMIT, False, "Show at most this many runs.", Cli(type=int)),
        ),
        cli=("flows",),
        render=_render_flows,
        result=spec.object_of(FlowsResult),
        result_type=FlowsResult,
    ),
    Command(
        "work.list",
        "Pipeline work items (verify, publish, dispute) and their states.",
        _work,
        (
            CommandParam(
                "state",
                {"type": "string", "enum": ["pending", "claimed", "done", "failed"]},
                False,
                "pending, claimed, done, failed.",
                Cli(type=str),
            ),
            CommandParam("did", spec.STR, False),
        ),
        cli=("work",),
        result=spec.array_of(WorkRow),
        columns=("id", "kind", "did", "state", "attempts", "last_error"),
    ),
)
"""In the order of ``rpc.discover``."""

__all__ = ["WORK_COMMANDS"]
