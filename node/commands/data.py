"""Reading the verified datasets: SQL (``data.query``, ``odf-node sql``), ``dataset tail``,
``dataset export``, kamu's ``/query`` over RPC and ``query verify`` of a saved commitment
(docs/query.md, "HTTP data API")."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from node.app import Application
from node.app.data import ExportResult
from node.app.errors import InvalidArgument, Unavailable
from node.commands import spec
from node.commands.params import absolute_file, ref_param
from node.commands.spec import Cli, Command, CommandParam, Context, Output


def _data(app: Application) -> Any:
    if app.data is None:
        raise Unavailable(
            "reading datasets is not available here: this application has no VerifiedData "
            "with a query engine (node/app/data.py, node/adapters/query_engine.py)"
        )
    return app.data


async def _data_query(
    app: Application,
    ctx: Context,
    sql: str,
    untrusted: bool = False,
    engine: str = "datafusion",
    skip: int = 0,
    limit: int | None = None,
) -> Any:
    if engine not in ("datafusion", "spark"):
        raise InvalidArgument(f"engine must be datafusion or spark, got {engine!r}")
    return await _data(app).query(sql, untrusted=untrusted, dialect=engine, skip=skip, limit=limit)


async def _data_tail(
    app: Application, ctx: Context, ref: str, n: int = 10, untrusted: bool = False
) -> Any:
    return await _data(app).tail(ref, n, untrusted=untrusted)


async def _data_tables(app: Application, ctx: Context, untrusted: bool = False) -> Any:
    return await _data(app).tables(untrusted=untrusted)


async def _dataset_export(
    app: Application,
    ctx: Context,
    ref: str,
    file: str,
    format: str = "parquet",
    as_of: str | None = None,
    untrusted: bool = False,
) -> Any:
    listener = ctx.verify_listener

    def progress(done: int, total: int) -> None:
        if listener is not None:
            listener("export", done, total)

    return await _data(app).export(
        ref, file, format, as_of=as_of, untrusted=untrusted, progress=progress
    )


def render_rows(value: Any, out: Output, opts: Mapping[str, Any]) -> None:
    """An answer of ``data.query``/``data.tail`` as a table, and which heads it read."""
    # The rows are data: a value "[/x]" must show as it is, not fail as a closing markup tag.
    out.table(value["columns"], [[_cell_text(c) for c in r] for r in value["rows"]], markup=False)
    n = len(value["rows"])
    out.print(f"[dim]{n} row{'s' if n != 1 else ''}[/]")
    untrusted = [i for i in value.get("inputs", []) if not i.get("trusted")]
    for i in untrusted:
        out.error(
            f"[yellow]read an UNTRUSTED head[/] of {i.get('alias') or i['did']}: {i['head']} "
            "(not trusted by this node's trust policy)"
        )


def _cell_text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, dict | list):
        return json.dumps(v)
    return str(v)


def _render_export(value: ExportResult, out: Output, opts: Mapping[str, Any]) -> None:
    out.print(
        f"Wrote {value.rows} records of {value.did} at {value.head} to "
        f"[bold]{value.path}[/] ({value.format}, {value.bytes} bytes)"
    )
    if not value.trusted:
        out.error("[yellow]the head read is UNTRUSTED[/] (--untrusted)")


async def _data_query_api(app: Application, ctx: Context, request: dict[str, Any]) -> Any:
    return await app.query_api.query(request, client="rpc")


_VERIFY_FIELDS = ("input", "subQueries", "commitment", "proof")


_MAX_COMMITMENT_BYTES = 64 << 20


def _read_commitment(path: Path) -> dict[str, Any]:
    """A saved ``/query`` answer with a proof (or a ``/verify`` request): its commitment parts
    (the output and attestations are dropped: the reproduction recomputes the output)."""
    from node.app.datasets import read_snapshot_file

    data = read_snapshot_file(Path(path), _MAX_COMMITMENT_BYTES, "commitment file")
    if len(data) > _MAX_COMMITMENT_BYTES:
        raise InvalidArgument(f"{path}: larger than {_MAX_COMMITMENT_BYTES} bytes")
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, ValueError) as e:
        raise InvalidArgument(f"{path}: not JSON: {e}") from None
    if not isinstance(value, dict):
        raise InvalidArgument(f"{path}: not a JSON object")
    missing = [k for k in _VERIFY_FIELDS if k not in value]
    if missing:
        raise InvalidArgument(
            f"{path}: no {', '.join(missing)}: not an answer with a proof "
            '(ask /query with include: ["Proof"])'
        )
    return {k: value[k] for k in _VERIFY_FIELDS}


async def _query_verify(
    app: Application, ctx: Context, request: dict[str, Any], node: str | None = None
) -> dict[str, Any]:
    from node.app.query_proofs import CommitmentError, check_commitment, verify_response

    try:
        error = check_commitment(request)
    except CommitmentError as e:
        raise InvalidArgument(str(e)) from None
    if error is not None:
        return {**verify_response(error), "checkedBy": "offline"}
    if node:
        result = await asyncio.to_thread(_post_verify, node, request)
        return {**result, "checkedBy": node}
    result = await app.query_api.verify(request, client="rpc")
    return {**result, "checkedBy": app.info.node_id}


def _post_verify(node: str, request: dict[str, Any]) -> dict[str, Any]:
    """``POST {node}/verify`` (another node's data API); its kamu ``VerifyResponse``."""
    import urllib.error
    import urllib.request

    if not node.startswith(("http://", "https://")):
        raise InvalidArgument(f"--node takes the node's HTTP URL (http://host:port), not {node!r}")
    req = urllib.request.Request(
        node.rstrip("/") + "/verify",
        data=json.dumps(request).encode("utf-8"),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        # Only http(s) URLs get here (checked above): no file:// or other scheme.
        with urllib.request.urlopen(req, timeout=300) as resp:
            body = resp.read(1 << 20)
    except urllib.error.HTTPError as e:
        body = e.read(1 << 20)
        if e.code != 400:
            raise InvalidArgument(f"{node}/verify answered {e.code}: {body[:500]!r}") from None
    except (urllib.error.URLError, OSError) as e:
        raise InvalidArgument(f"cannot reach {node}: {e}") from None
    try:
        value = json.loads(body)
    except ValueError:
        raise InvalidArgument(f"{node}/verify did not answer JSON") from None
    if not isinstance(value, dict) or "ok" not in value:
        raise InvalidArgument(f"{node}/verify answered {value!r}"[:500])
    return value


def _render_query_verify(value: Any, out: Output, opts: Mapping[str, Any]) -> None:
    if value["ok"]:
        out.print(f"[green]✓[/] the commitment holds (reproduced by {value['checkedBy']})")
        return
    err = value["error"]
    out.error(f"[red]✗[/] {err['kind']} ({value['checkedBy']}): {err['message']}")
    for k in ("expected_hash", "actual_hash", "dataset_id", "block_hash"):
        if k in err:
            out.error(f"  {k}: {err[k]}")


DATA_COMMANDS: tuple[Command, ...] = (
    Command(
        "data.query",
        "Run a read-only SQL query over the datasets this node verified.",
        _data_query,
        (
            CommandParam(
                "sql", spec.STR, True, "The query; dataset aliases and DIDs are table names."
            ),
            CommandParam(
                "untrusted", spec.BOOL, False, "Read untrusted heads too (the answer says so)."
            ),
            CommandParam("engine", {"type": "string", "enum": ["datafusion", "spark"]}, False),
            CommandParam("skip", spec.INT, False),
            CommandParam("limit", spec.INT, False),
        ),
        doc="`odf-node sql` runs it (docs/query.md).",
        render=render_rows,
    ),
    Command(
        "data.tables",
        "The datasets a query can read, each at its readable head and why it may be read.",
        _data_tables,
        (CommandParam("untrusted", spec.BOOL, False, "Also datasets with no trusted head."),),
        result=spec.ARRAY,
    ),
    Command(
        "data.tail",
        "The last records of a dataset at its trusted head.",
        _data_tail,
        (
            ref_param(),
            CommandParam(
                "n",
                {"type": "integer", "minimum": 1},
                False,
                "How many records.",
                Cli(flags=("-n", "--num-records"), type=int),
            ),
            CommandParam(
                "untrusted", spec.BOOL, False, "Read the newest head even if untrusted.", Cli()
            ),
        ),
        cli=("dataset", "tail"),
        doc="Only a trusted head is read (owned, trusted by the trust policy, or verified here) "
        "unless --untrusted.",
        render=render_rows,
    ),
    Command(
        "dataset.export",
        "Write a dataset's records at its trusted head to a parquet, CSV or NDJSON file.",
        _dataset_export,
        (
            ref_param(),
            CommandParam(
                "file",
                spec.STR,
                True,
                "The file to write (never over an existing one).",
                Cli("argument", type=Path, to_wire=absolute_file, metavar="FILE"),
            ),
            CommandParam(
                "format",
                {"type": "string", "enum": ["parquet", "csv", "ndjson"]},
                False,
                "parquet, csv or ndjson.",
                Cli(flags=("--format",), type=str),
            ),
            CommandParam(
                "as_of",
                spec.STR,
                False,
                "Export the records as of this block (on the chain, and trusted).",
                Cli(flags=("--as-of",), metavar="BLOCK"),
            ),
            CommandParam(
                "untrusted", spec.BOOL, False, "Read the newest head even if untrusted.", Cli()
            ),
        ),
        cli=("dataset", "export"),
        doc="Part by part (bounded memory), to a temporary file renamed into place.",
        render=_render_export,
        result_type=ExportResult,
        progress="phases",
        in_process="a read of dataset files beside the daemon (immutable once written); the "
        "file is written by the caller, where the caller sees FILE",
        parity="one command line cannot run on both homes (an export never overwrites its file)",
    ),
    Command(
        "data.query_api",
        "kamu's /query over RPC: a kamu request object in, the kamu response out.",
        _data_query_api,
        (CommandParam("request", {"type": "object"}, True),),
        doc="The request and response of GET/POST /query (docs/query.md, HTTP data API).",
    ),
    Command(
        "query.verify",
        "Check a saved query commitment: hashes and signature, then reproduce the query.",
        _query_verify,
        (
            CommandParam(
                "request",
                {"type": "object"},
                True,
                'A /query answer saved with include: ["Proof"]; - for standard input.',
                Cli("argument", type=Path, to_wire=_read_commitment, metavar="FILE"),
            ),
            CommandParam(
                "node",
                spec.STR,
                False,
                "Ask this node's /verify (its HTTP URL) instead of reproducing it here.",
                Cli(metavar="URL"),
            ),
        ),
        cli=("query", "verify"),
        doc="First the commitment's own hashes and the signature (offline), then the query "
        "reproduced at the pinned blocks on this node's verified copy (or by --node); kamu's "
        "error kinds name what does not match. Exit status 2 when it does not hold.",
        render=_render_query_verify,
        exit_code=lambda value: 0 if value.get("ok") else 2,
    ),
)
"""In the order of ``rpc.discover``."""

__all__ = ["DATA_COMMANDS", "render_rows"]
