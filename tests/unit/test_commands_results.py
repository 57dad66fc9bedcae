"""The typed results go to JSON and back: ``from_json`` is the inverse of ``to_json``.

The CLI renders the typed result of a command whether it ran over the daemon's RPC or
in-process; both give it the same JSON, which ``from_json`` turns back into the result.
"""

from __future__ import annotations

import json
import typing
from dataclasses import fields
from typing import Any

import pytest

from node.app import results
from node.app.data import ExportResult
from node.app.jsontypes import JsonValue
from node.app.results import FlowRunRow, FlowsResult, ScheduleRow, VerifyResult
from node.commands.catalog import COMMANDS

_SAMPLES: dict[str, Any] = {"str": "a", "int": 3, "float": 1.5, "bool": True}


def _sample(cls: type) -> Any:
    """An instance of a flat result type with every field set (no field left at None)."""
    hints = typing.get_type_hints(cls, localns={"JsonValue": JsonValue})
    values: dict[str, Any] = {}
    for f in fields(cls):
        hint = hints[f.name]
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        base = typing.get_origin(args[0]) or args[0] if args else typing.get_origin(hint) or hint
        if base is list:
            values[f.name] = ["x", "y"]
        elif base is dict:
            values[f.name] = {"k": 1, "nested": {"a": [1, 2]}}
        else:
            values[f.name] = _SAMPLES[base.__name__]
    return cls(**values)


_FLAT = sorted(
    (getattr(results, n) for n in results.__all__ if n not in ("FlowsResult", "VerifyResult")),
    key=lambda c: c.__name__,
)


@pytest.mark.parametrize("cls", [*_FLAT, ExportResult], ids=lambda c: c.__name__)
def test_from_json_inverts_to_json(cls: type) -> None:
    value = _sample(cls)
    wire = json.loads(json.dumps(value.to_json()))  # what the RPC carries
    assert cls.from_json(wire) == value  # type: ignore[attr-defined]


def test_nested_and_flattened_results_round_trip() -> None:
    flows = FlowsResult(schedules=[_sample(ScheduleRow)], runs=[_sample(FlowRunRow)])
    assert FlowsResult.from_json(json.loads(json.dumps(flows.to_json()))) == flows
    verify = VerifyResult(
        id="did:odf:x",
        alias="a",
        ok=False,
        seconds=0.5,
        integrity={"blocks_checked": 3, "data_files_checked": 1, "checkpoints_checked": 0},
        replay=None,
        problems=["p"],
    )
    wire = json.loads(json.dumps(verify.to_json()))
    assert wire["blocks_checked"] == 3  # the integrity report's counts sit at top level
    assert VerifyResult.from_json(wire) == verify


def test_from_json_ignores_unknown_keys_and_needs_the_required_ones() -> None:
    row = _sample(ScheduleRow)
    assert ScheduleRow.from_json({**row.to_json(), "added_later": 1}) == row
    with pytest.raises(TypeError):
        ScheduleRow.from_json({"alias": "a"})


def test_renderings_get_typed_results() -> None:
    """A command rendered from JSON keys is one of the few whose result has no type yet; a
    declared result type has every field its result schema requires."""
    from node.commands.catalog import COMMANDS

    untyped = {
        c.name
        for c in COMMANDS
        if (c.render is not None or c.exit_code is not None)
        and c.result_type is None
        and c.home_only is None
    }
    # data.query/tail: QueryAnswer holds an Arrow table; query.verify: kamu's VerifyResponse.
    assert untyped <= {"data.query", "data.tail", "query.verify", "console.login"}
    for c in COMMANDS:
        names = getattr(c.result_type, "__dataclass_fields__", None)
        schema = c.result.get("items", c.result)
        if names is not None and c.name != "dataset.verify":  # its counts sit at top level
            assert set(schema.get("required", [])) <= set(names), c.name


def test_homeless_declarations_run_in_process_and_change_nothing() -> None:
    """A homeless command (run with no home, ``app=None``) must be one the CLI runs itself
    (``in_process``), and neither write a home, need a daemon nor be a home command."""
    homeless = [c for c in COMMANDS if c.homeless is not None]
    assert homeless, "no homeless declaration left: drop the flag or this test"
    for c in homeless:
        assert c.in_process is not None, c.name
        assert not c.write and not c.daemon_only and c.home_only is None, c.name
