"""The trust record: ``attestations``, ``disputes`` (rows, or in-toto/DSSE envelopes),
``attestation verify`` (an export checked offline) and ``equivocations`` (docs/attestations.md)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from node.app import Application
from node.app.errors import InvalidArgument
from node.app.intoto import AttestationExport
from node.app.results import (
    AttestationRow,
    DisputeRow,
    EquivocationRow,
    VerifiedEnvelope,
)
from node.commands import spec
from node.commands.params import did_filter
from node.commands.spec import Cli, Command, CommandParam, Context, Output, Renderer


async def _attestations(
    app: Application,
    ctx: Context,
    did: str | None = None,
    head: str | None = None,
    limit: int = 100,
    format: str = "rows",
    received: bool = False,
) -> list[AttestationRow] | list[dict[str, Any]]:
    if format == "in-toto":
        return await app.exports.attestations(did, head, limit, received)
    _rows_only(received)
    return await app.queries.attestations(did, head, limit)


async def _disputes(
    app: Application,
    ctx: Context,
    did: str | None = None,
    limit: int = 100,
    format: str = "rows",
    received: bool = False,
) -> list[DisputeRow] | list[dict[str, Any]]:
    if format == "in-toto":
        return await app.exports.disputes(did, limit, received)
    _rows_only(received)
    return await app.queries.disputes(did, limit)


def _rows_only(received: bool) -> None:
    if received:
        raise InvalidArgument("--received goes with --format in-toto (rows list every signer)")


async def _attestation_verify(
    app: Application | None, ctx: Context, envelopes: str
) -> list[VerifiedEnvelope]:
    # Homeless: the file's bytes alone are checked, with or without a node.
    return AttestationExport.verify(envelopes)


async def _equivocations(
    app: Application, ctx: Context, did: str | None = None
) -> list[EquivocationRow]:
    return await app.queries.equivocations(did)


def _export_params() -> tuple[CommandParam, ...]:
    """``--format in-toto`` and ``--received``: the export of ``attestations`` and ``disputes``."""
    return (
        CommandParam(
            "format",
            {"type": "string", "enum": ["rows", "in-toto"]},
            False,
            "rows (the table) or in-toto: DSSE envelopes, one JSON line each (--json: an array).",
            Cli(type=str),
        ),
        CommandParam(
            "received",
            spec.BOOL,
            False,
            "With --format in-toto: also the peers' (sealed by this node, theirs inside).",
            Cli(),
        ),
    )


class _Exported:
    """An element of an ``attestations`` or ``disputes`` answer: a row, or with ``--format
    in-toto`` a DSSE envelope, kept as its JSON (the export's own format, written as is)."""

    row: ClassVar[type[AttestationRow] | type[DisputeRow]]

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> AttestationRow | DisputeRow | dict[str, Any]:
        """The typed row, or the envelope (a DSSE envelope has a ``payloadType``; no row has)."""
        return dict(value) if "payloadType" in value else cls.row.from_json(value)


class _ExportedAttestation(_Exported):
    """An element of an ``attestations`` answer."""

    row = AttestationRow


class _ExportedDispute(_Exported):
    """An element of a ``disputes`` answer."""

    row = DisputeRow


_ExportAnswer = list[AttestationRow] | list[DisputeRow] | list[dict[str, Any]]
"""What ``attestations`` and ``disputes`` render: rows, or envelopes (``--format in-toto``)."""


def _render_exportable(columns: tuple[str, ...]) -> Renderer:
    """Rows as a table; envelopes (``--format in-toto``) as JSON lines, ready for a file."""

    def render(value: _ExportAnswer, out: Output, opts: Mapping[str, Any]) -> None:
        if not value:
            out.error("(none)")  # on stderr: an empty export redirected to a file stays empty
        elif isinstance(value[0], dict):
            from p2p.intoto import canonical_json

            out.raw("".join(canonical_json(e).decode() + "\n" for e in value))
        else:
            # The declared columns are the rows' field names.
            out.table(list(columns), [[_cell(getattr(row, c)) for c in columns] for row in value])

    return render


def _cell(v: Any) -> str:
    if isinstance(v, dict | list):
        return json.dumps(v, default=str)
    return "" if v is None else str(v)


def _read_envelopes(path: Path) -> str:
    """The text of an export file (bounded; ``-``: standard input); a FIFO is never waited on."""
    from node.app.datasets import read_snapshot_file
    from p2p.intoto import MAX_ENVELOPE_BYTES

    limit = 64 * MAX_ENVELOPE_BYTES
    data = read_snapshot_file(Path(path), limit, "envelope file")
    if len(data) > limit:
        raise InvalidArgument(f"{path}: larger than {limit} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArgument(f"{path}: not UTF-8 text") from None


def _render_verified(value: list[VerifiedEnvelope], out: Output, opts: Mapping[str, Any]) -> None:
    for v in value:
        p = v.predicate  # None when the envelope did not verify
        if not v.ok or p is None:
            out.error(f"[red]✗[/] {v.problem}")
            continue
        by = f"{v.node}, relayed by {v.signer}" if v.relayed else v.node
        what = (
            f"{p['verdict']} ({', '.join(p['checks'])}; engine {p['engine']['name']} "
            f"{p['engine']['release']})"
            if v.kind == "attestation"
            else f"{p['kind']}: {p['detail']}"
        )
        out.print(f"[green]✓[/] {v.kind} by {by}, {p['issuedAt']}")
        out.print(f"  {v.dataset}@{v.block} (sha3_256 {v.digest})")
        out.print(f"  {what}")
        if v.kind == "attestation":
            inputs = p["inputs"]
            shown = (
                "not in the signer's copy"
                if inputs is None
                else ", ".join(f"{i['dataset']}@{i['block']}" for i in inputs) or "none"
            )
            out.print(f"  inputs: {shown}; logical hash: {p['logicalHash'] or '-'}")


ATTESTATION_COMMANDS: tuple[Command, ...] = (
    Command(
        "attestations.list",
        "Attestations received and made (newest first).",
        _attestations,
        (
            did_filter(),
            CommandParam("head", spec.STR, False),
            CommandParam("limit", spec.LIMIT, False),
            *_export_params(),
        ),
        cli=("attestations",),
        doc="--format in-toto: the node's own attestations as in-toto Statements v1 in DSSE "
        "envelopes signed with the node key (docs/attestations.md); check one with "
        "`odf-node attestation verify FILE`.",
        result={"type": "array", "items": {"type": "object"}},
        render=_render_exportable(("did", "head", "verdict", "node", "signer", "own")),
        result_type=_ExportedAttestation,
    ),
    Command(
        "disputes.list",
        "Disputes received and made (newest first).",
        _disputes,
        (did_filter(), CommandParam("limit", spec.LIMIT, False), *_export_params()),
        cli=("disputes",),
        doc="--format in-toto: as for `attestations` (docs/attestations.md).",
        result={"type": "array", "items": {"type": "object"}},
        render=_render_exportable(("did", "block", "kind", "signer", "own", "detail")),
        result_type=_ExportedDispute,
    ),
    Command(
        "attestation.verify",
        "Check exported in-toto/DSSE envelopes and print what they attest.",
        _attestation_verify,
        (
            CommandParam(
                "envelopes",
                spec.STR,
                True,
                "An export: one envelope, a JSON array or JSON lines; - for standard input.",
                Cli("argument", type=Path, to_wire=_read_envelopes, metavar="FILE"),
            ),
        ),
        cli=("attestation", "verify"),
        doc="Checks the DSSE signature by the did:key of its keyid, the payload and statement "
        "types, the subject's sha3_256 digest and the signed gossip envelope inside. Exit "
        "status 2 when one does not verify.",
        result=spec.array_of(VerifiedEnvelope),
        result_type=VerifiedEnvelope,
        render=_render_verified,
        exit_code=lambda value: 0 if value and all(v.ok for v in value) else 2,
        in_process="a check of the file's bytes alone: no state is read, the file may be "
        "larger than an RPC body",
        homeless="anyone given an export checks it, on a machine with no node",
    ),
    Command(
        "equivocations.list",
        "Equivocation proofs: a dataset's key signed two heads for one position.",
        _equivocations,
        (did_filter(),),
        cli=("equivocations",),
        result=spec.array_of(EquivocationRow),
    ),
)
"""In the order of ``rpc.discover``."""

__all__ = ["ATTESTATION_COMMANDS"]
