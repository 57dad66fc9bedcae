"""Every user-facing command of the node, declared once (see ``node/commands/spec.py``).

Adding a command: write its use case in ``node/app`` (typed result in ``node/app/results.py``),
then one :class:`~node.commands.spec.Command` here; ``docs/commands.md`` walks through it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from coordinator.errors import OdfNodeError
from node.app import Application
from node.app.datasets import load_data_stack
from node.app.errors import InvalidArgument, Unavailable
from node.app.flows import require_flows
from node.app.results import (
    AttestationRow,
    BackupResult,
    ConnectResult,
    CreatedDataset,
    DatasetRow,
    DisputeRow,
    EquivocationRow,
    EventRow,
    FlowsResult,
    IngestSummary,
    IpfsConnected,
    LogEntry,
    NodeStatus,
    PeerRow,
    PublishResult,
    PullResult,
    ScheduleRow,
    SubscriptionRow,
    TransformResult,
    Unsubscribed,
    VerifiedEnvelope,
    VerifyResult,
    WorkRow,
)
from node.app.rows import WorkState
from node.commands.node_family import NODE_COMMANDS
from node.commands.spec import (
    ARRAY,
    BOOL,
    INT,
    LIMIT,
    STR,
    STRS,
    Cli,
    Command,
    CommandParam,
    Context,
    Output,
    array_of,
    object_of,
)

# ---- parameters used by several commands


def _ref(help: str = "Dataset alias or did:odf.") -> CommandParam:
    return CommandParam("ref", STR, True, help, Cli("argument"))


def _did_filter() -> CommandParam:
    return CommandParam("did", STR, False, "Only this dataset.", Cli("argument"))


def _paths(values: list[Path] | None) -> list[str] | None:
    """Input paths as absolute strings: the daemon resolves them in its own directory."""
    return [str(Path(v).resolve()) for v in values] if values else None


_ENGINE = (
    CommandParam(
        "spark_master",
        description="spark.master of the engine worker (local[N], spark://…; sc:// is refused).",
        cli=Cli(default="local[*]", type=str),
        role="offline",
    ),
    CommandParam(
        "engine_memory_limit",
        description="Memory bound of the engine request, MiB (0 = none).",
        cli=Cli(default=0, type=int),
        role="offline",
    ),
)


# ---- node


async def _status(app: Application, ctx: Context) -> NodeStatus:
    return await app.status()


async def _config(app: Application, ctx: Context) -> dict[str, Any]:
    return dict(app.info.config)


async def _events(
    app: Application, ctx: Context, after_id: int = 0, limit: int = 100, kind: str | None = None
) -> list[EventRow]:
    return await app.queries.events(after_id, limit, kind)


async def _peers(app: Application, ctx: Context) -> list[PeerRow]:
    return await app.queries.peers()


async def _peers_connect(app: Application, ctx: Context, multiaddr: str) -> ConnectResult:
    return ConnectResult(peer_id=await app.subscriptions.connect_peer(multiaddr))


async def _ipfs_connect(app: Application, ctx: Context, multiaddr: str) -> IpfsConnected:
    await app.subscriptions.connect_ipfs(multiaddr)
    return IpfsConnected(connected=multiaddr)


async def _backup(
    app: Application, ctx: Context, file: str, datasets: bool = False
) -> BackupResult:
    return await app.backup(file, datasets)


def _backup_file(value: Path) -> str:
    """The archive path as an absolute string (written where the caller sees it)."""
    return str(Path(value).absolute())


def _render_backup(result: Any, out: Output, opts: Mapping[str, Any]) -> None:
    stored = len(result["datasets"])
    out.print(
        f"Backed up node {result['node_id']} to [bold]{result['file']}[/]: "
        f"{result['subscriptions']} subscriptions, {result['attestations']} attestations, "
        f"{result['disputes']} disputes, {result['owned_dataset_keys']} dataset keys"
        + (f", {stored} datasets" if stored else " (datasets not included: --datasets)")
        + f"; {result['files']} files, {result['bytes']} bytes in {result['seconds']} s"
    )


# ---- subscriptions


async def _subscribe(
    app: Application,
    ctx: Context,
    did: str,
    alias: str | None = None,
    policy: str | None = None,
    k: int | None = None,
    attesters: list[str] | None = None,
    source: str | None = None,
) -> SubscriptionRow:
    if source is not None and not source.startswith(("http:", "https:", "ipfs:", "ipns:", "file:")):
        source = str(Path(source).expanduser().absolute())  # the daemon has another cwd
    if did.startswith((".", "~")) or (did.startswith("/") and not did.startswith("//")):
        did = str(Path(did).expanduser().absolute())
    return await app.subscriptions.subscribe(
        did, alias, policy=policy, k=k, attesters=attesters, source=source
    )


async def _unsubscribe(app: Application, ctx: Context, did: str) -> Unsubscribed:
    return await app.subscriptions.unsubscribe(did)


async def _subscriptions(app: Application, ctx: Context) -> list[SubscriptionRow]:
    return await app.subscriptions.subscriptions()


# ---- datasets


async def _dataset_list(app: Application, ctx: Context) -> list[DatasetRow]:
    return await app.datasets.list()


async def _dataset_create(
    app: Application,
    ctx: Context,
    snapshot_yaml: str,
    snapshot_dir: str | None = None,
    account: str | None = None,
) -> list[CreatedDataset]:
    return await app.datasets.create(snapshot_yaml, snapshot_dir=snapshot_dir, account=account)


async def _dataset_ingest(
    app: Application,
    ctx: Context,
    ref: str,
    files: list[str],
    source: str | None = None,
    publish: bool = True,
    link_columns: list[str] | None = None,
    objects: list[str] | None = None,
) -> IngestSummary:
    linked = None
    if objects and not link_columns:
        raise InvalidArgument("--object needs at least one --link-column")
    if link_columns:
        await load_data_stack()  # pyarrow, imported off the event loop
        from coordinator.ingest.linked import LinkedObjects

        linked = LinkedObjects(tuple(link_columns), tuple(Path(o) for o in objects or ()))
    return await app.datasets.ingest(
        ref,
        [Path(f) for f in files],
        source=source,
        linked=linked,
        publish=publish,
        progress=ctx.ingest_progress,
    )


async def _dataset_transform(
    app: Application, ctx: Context, ref: str, publish: bool = True
) -> TransformResult:
    return await app.datasets.transform(ref, publish=publish)


async def _dataset_verify(
    app: Application, ctx: Context, ref: str, integrity: bool = False
) -> VerifyResult:
    listener = ctx.verify_listener
    events = app.events
    if listener is None and events is not None:
        # On a daemon, progress goes to the event stream (``verify.progress``, ``manual``).
        did = app.repo.resolve(ref).id.as_did_str()

        def listener(phase: str, done: int, total: int) -> None:
            events.publish_threadsafe(
                "verify.progress",
                {"did": did, "phase": phase, "done": done, "total": total, "manual": True},
            )

    return await app.datasets.verify(ref, integrity=integrity, listener=listener)


async def _dataset_publish(
    app: Application, ctx: Context, ref: str, ipns_key: str | None = None
) -> PublishResult:
    return await app.publish.publish(ref, ipns_key=ipns_key, now=not app.info.live)


async def _dataset_pull(
    app: Application,
    ctx: Context,
    url: str,
    alias: str | None = None,
    force: bool = False,
    publish: bool = True,
) -> PullResult:
    datasets = app.datasets
    if await asyncio.to_thread(datasets.polling_source_of, url):
        # A local root with a polling source: run the source once, as ``kamu pull`` does.
        if alias is not None or force:
            raise InvalidArgument(
                f"{url[:200]} is a local dataset with a polling source: --as and --force apply "
                "to pulls of remote datasets only"
            )
        return await datasets.poll(url, publish=publish, progress=ctx.ingest_progress)
    return PullResult.from_summary(await datasets.pull(url, alias=alias, force=force))


async def _dataset_log(
    app: Application, ctx: Context, ref: str, limit: int | None = 50
) -> list[LogEntry]:
    return await app.datasets.log(ref, limit)


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
    app: Application, ctx: Context, envelopes: str
) -> list[VerifiedEnvelope]:
    return app.exports.verify(envelopes)


async def _equivocations(
    app: Application, ctx: Context, did: str | None = None
) -> list[EquivocationRow]:
    return await app.queries.equivocations(did)


# ---- kamu's HTTP data API (docs/query.md, "HTTP data API")


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
    out.table(value["columns"], [[_cell_text(c) for c in r] for r in value["rows"]])
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


def _render_export(value: Any, out: Output, opts: Mapping[str, Any]) -> None:
    out.print(
        f"Wrote {value['rows']} records of {value['did']} at {value['head']} to "
        f"[bold]{value['path']}[/] ({value['format']}, {value['bytes']} bytes)"
    )
    if not value["trusted"]:
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


# ---- the console's read models (RPC only: the console's pages call them)


def _console(app: Application) -> Any:
    if app.console is None:
        raise InvalidArgument("the console queries are not available on this node")
    return app.console


async def _console_datasets(app: Application, ctx: Context) -> Any:
    return await _console(app).datasets()


async def _console_dataset(app: Application, ctx: Context, ref: str) -> Any:
    return await _console(app).dataset(ref)


async def _console_preview(app: Application, ctx: Context, ref: str, limit: int = 20) -> Any:
    return await _console(app).preview(ref, limit)


async def _console_disputes(
    app: Application, ctx: Context, did: str | None = None, limit: int = 100
) -> Any:
    return await _console(app).disputes(did, limit)


async def _console_peers(app: Application, ctx: Context) -> Any:
    return await _console(app).peers()


async def _console_events(app: Application, ctx: Context, limit: int = 50) -> Any:
    return await _console(app).recent_events(limit)


async def _console_charts(app: Application, ctx: Context) -> Any:
    return await _console(app).charts()


# ---- CLI-side preparation


def _read_snapshot(path: Path) -> str:
    """The snapshot file's text (bounded; ``-``: standard input); a FIFO is never waited on."""
    from coordinator.metadata.yaml_serde import MAX_YAML_SIZE, yaml_text
    from node.app.datasets import read_snapshot_file

    data = read_snapshot_file(Path(path), MAX_YAML_SIZE)
    try:
        return yaml_text(data)
    except OdfNodeError as e:
        raise InvalidArgument(f"{path}: {e}") from None


def _prepare_create(values: dict[str, Any]) -> dict[str, Any]:
    """The snapshot file's directory goes with its text: a relative FilesGlob resolves there
    (standard input: the working directory, where kamu would resolve it)."""
    path = Path(values["snapshot_yaml"])
    base = Path.cwd() if str(path) == "-" else path.absolute().parent
    return {**values, "snapshot_dir": str(base)}


def _prepare_ingest(values: dict[str, Any]) -> dict[str, Any]:
    from node.app.datasets import check_input_files

    if values.get("objects") and not values.get("link_columns"):
        raise InvalidArgument("--object needs at least one --link-column")
    check_input_files([Path(f) for f in [*values["files"], *(values.get("objects") or [])]])
    return values


def _prepare_publish(values: dict[str, Any]) -> dict[str, Any]:
    if values.pop("ipns", False) and values.get("ipns_key") is None:
        values["ipns_key"] = "self"
    return values


# ---- renderings


def _render_created(value: Any, out: Output, opts: Mapping[str, Any]) -> None:
    for c in value:
        out.print(f"created [bold]{c['alias']}[/] {c['id']}")


def _render_ingest(value: Any, out: Output, opts: Mapping[str, Any]) -> None:
    if value["up_to_date"]:
        out.print("dataset is up to date: nothing to commit")
    else:
        out.print(
            f"committed {len(value['new_blocks'])} block(s), {value['records']} record(s); "
            f"head {value['new_head']}"
        )


def _render_list(value: Any, out: Output, opts: Mapping[str, Any]) -> None:
    rows = []
    for r in value:
        if r.get("error"):
            rows.append([r["alias"], "[red]damaged[/]", "", "", r["error"][:40], r["id"]])
        else:
            head = r["head"][-8:] if r["head"] else "-"
            rows.append([r["alias"], r["kind"], str(r["blocks"]), str(r["records"]), head, r["id"]])
    out.table(["alias", "kind", "blocks", "records", "head", "id"], rows)


def _render_log(value: Any, out: Output, opts: Mapping[str, Any]) -> None:
    from coordinator.metadata.yaml_serde import KIND_METADATA_BLOCK, write_manifest

    fmt = opts.get("output_format", "table")
    if fmt == "yaml":
        # A YAML stream as kamu-cli's `log -o yaml` writes it: `---`, a `# Block:` comment, the
        # manifest, blank lines. Each block keeps its own manifest version (kamu HEAD labels
        # every block with its current version 3).
        for e in value:
            manifest = write_manifest(KIND_METADATA_BLOCK, e.get("version", 2), e["block"])
            out.raw(f"---\n# Block: {e['hash']}\n{manifest}\n\n")
    elif fmt == "table":
        out.table(
            ["seq", "hash", "system time", "event"],
            [
                [
                    str(e["block"]["sequenceNumber"]),
                    _short(e["hash"]),
                    str(e["block"]["systemTime"]),
                    str(e["block"]["event"]["kind"]),
                ]
                for e in value
            ],
        )


def _short(multihash: str) -> str:
    from coordinator.multiformats import Multihash

    return Multihash.from_multibase(multihash).short()


def _check_log_format(values: dict[str, Any]) -> dict[str, Any]:
    fmt = values.get("output_format", "table")
    if fmt not in ("yaml", "json", "table"):
        raise InvalidArgument(f"unknown output format {fmt!r} (yaml, json, table)")
    return values


def _render_transform(value: Any, out: Output, opts: Mapping[str, Any]) -> None:
    if value["up_to_date"]:
        out.print("Up to date")
    else:
        out.print(f"Committed {len(value['new_blocks'])} block(s), head {value['new_head']}")


def _render_verify(value: Any, out: Output, opts: Mapping[str, Any]) -> None:
    for p in value["problems"]:
        out.error(f"[red]✗[/] {p}")
    replay = value["replay"]
    if replay is not None and replay["mismatch"] is not None:
        mm = replay["mismatch"]
        out.error(
            f"[red]✗[/] at block {mm['block_hash']} (#{mm['sequence_number']}): "
            + "; ".join(mm["differences"])
        )
    elif replay is not None and replay["error"]:
        out.error(f"[red]✗[/] replay error: {replay['error']}")
    verdict = "[green]OK[/]" if value["ok"] else "[red]FAILED[/]"
    replayed = (
        f", {replay['blocks_replayed']}/{replay['blocks_total']} transforms replayed"
        f" ({replay['verdict']})"
        if replay is not None
        else ""
    )
    out.print(
        f"{verdict}: {value['blocks_checked']} blocks, {value['data_files_checked']} data "
        f"files, {value['checkpoints_checked']} checkpoints checked{replayed}"
    )


def _render_schedule(value: Any, out: Output, opts: Mapping[str, Any]) -> None:
    name = value["alias"] or value["id"]
    if not value["active"]:
        out.print(f"{name}: schedule removed" if value["removed"] else f"{name}: no schedule")
    else:
        nxt = f", next run {value['next_run']}" if value["next_run"] else ""
        out.print(f"{name}: {value['trigger']}{nxt}")


def _render_flows(value: Any, out: Output, opts: Mapping[str, Any]) -> None:
    out.table(
        ["dataset", "trigger", "next run", "id"],
        [
            [
                s["alias"] or "",
                s["trigger"] or "",
                # A failing trigger is held back: its error says why its run does not come.
                f"held: {s['error']}" if s.get("error") else s["next_run"] or "",
                s["id"],
            ]
            for s in value["schedules"]
        ],
    )
    out.table(
        ["run", "kind", "dataset", "trigger", "state", "attempts", "updated", "last error"],
        [
            [
                str(r["id"]),
                r["kind"],
                r["alias"] or r["did"],
                r["trigger"],
                r["state"],
                str(r["attempts"]),
                r["updated"],
                (r["last_error"] or "")[:60],
            ]
            for r in value["runs"]
        ],
    )


def _render_pull(value: Any, out: Output, opts: Mapping[str, Any]) -> None:
    if value.get("source") == "polling":
        if value["comparison"] == "equal":
            out.print(f"{value['alias']}: up to date (the polling source has nothing new)")
        else:
            out.print(
                f"{value['alias']}: polled, {value['new_blocks']} new block(s), "
                f"{value['records']} record(s); head {value['new_head']}"
            )
        return
    if value["comparison"] == "equal":
        out.print(f"{value['alias']}: up to date")
    elif value["comparison"] == "local-ahead":
        out.print(f"{value['alias']}: local copy is ahead of the source; nothing pulled")
    else:
        verb = "created" if value["created"] else ("replaced" if value["forced"] else "updated")
        out.print(
            f"{value['alias']}: {verb}, {value['new_blocks']} new block(s), "
            f"{value['objects_downloaded']} object(s) downloaded; head {value['new_head']}"
        )


def _render_publish(value: Any, out: Output, opts: Mapping[str, Any]) -> None:
    if value["cid"] is not None:
        out.print(value["url"] + (f"  (ipns://{value['ipns']})" if value["ipns"] else ""))
    else:
        out.print(
            f"{value['alias']}: publication queued as work item {value['work_id']} "
            f"(head {value['head']})"
        )


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
            BOOL,
            False,
            "With --format in-toto: also the peers' (sealed by this node, theirs inside).",
            Cli(),
        ),
    )


def _render_exportable(columns: tuple[str, ...]) -> Any:
    """Rows as a table; envelopes (``--format in-toto``) as JSON lines, ready for a file."""

    def render(value: Any, out: Output, opts: Mapping[str, Any]) -> None:
        if value and "payloadType" in value[0]:
            from p2p.intoto import canonical_json

            out.raw("".join(canonical_json(e).decode() + "\n" for e in value))
        elif not value:
            out.error("(none)")  # on stderr: an empty export redirected to a file stays empty
        else:
            out.table(list(columns), [[_cell(row.get(c)) for c in columns] for row in value])

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


def _render_verified(value: Any, out: Output, opts: Mapping[str, Any]) -> None:
    for v in value:
        if not v["ok"]:
            out.error(f"[red]✗[/] {v['problem']}")
            continue
        p = v["predicate"]
        by = f"{v['node']}, relayed by {v['signer']}" if v["relayed"] else v["node"]
        what = (
            f"{p['verdict']} ({', '.join(p['checks'])}; engine {p['engine']['name']} "
            f"{p['engine']['release']})"
            if v["kind"] == "attestation"
            else f"{p['kind']}: {p['detail']}"
        )
        out.print(f"[green]✓[/] {v['kind']} by {by}, {p['issuedAt']}")
        out.print(f"  {v['dataset']}@{v['block']} (sha3_256 {v['digest']})")
        out.print(f"  {what}")
        if v["kind"] == "attestation":
            inputs = p["inputs"]
            shown = (
                "not in the signer's copy"
                if inputs is None
                else ", ".join(f"{i['dataset']}@{i['block']}" for i in inputs) or "none"
            )
            out.print(f"  inputs: {shown}; logical hash: {p['logicalHash'] or '-'}")


_NEEDS_IPFS = (
    "publishing without a daemon needs a reachable IPFS RPC API; "
    "tests/integration/test_ipfs_pull.py publishes and pulls through one"
)
_NEEDS_PEER = "needs the daemon (dials a peer): offline it fails naming `odf-node run`"

COMMANDS: tuple[Command, ...] = (
    Command(
        "node.status",
        "Identity, uptime, addresses, counts and queue depths.",
        _status,
        cli=("status",),
        doc="Without a daemon: what the home stores, the live fields null.",
        result=object_of(NodeStatus),
    ),
    Command("node.config", "The effective configuration.", _config),
    Command(
        "node.events",
        "The event log, oldest first.",
        _events,
        (
            CommandParam(
                "after_id", INT, False, "Only events after this id.", Cli(flags=("--after",))
            ),
            CommandParam(
                "limit", LIMIT, False, "At most this many events.", Cli(type=int, default=100)
            ),
            CommandParam(
                "kind", STR, False, "Only events of this kind (e.g. head.repaired).", Cli(type=str)
            ),
        ),
        cli=("events",),
        result=array_of(EventRow),
        columns=("id", "kind", "did", "data"),
    ),
    Command(
        "peers.list",
        "Gossip peers the node knows, with scores.",
        _peers,
        cli=("peers",),
        result=array_of(PeerRow),
        columns=("peer_id", "connected", "score", "last_seen_ns"),
    ),
    Command(
        "peers.connect",
        "Dial a gossip peer (or, with --ipfs, connect the node's IPFS to another).",
        _peers_connect,
        (CommandParam("multiaddr", STR, True, "/ip4/…/tcp/…/p2p/<peer id>", Cli("argument")),),
        cli=("connect",),
        daemon_only=True,
        alternate=("--ipfs", "Connect the IPFS node.", "ipfs.connect"),
        parity=_NEEDS_PEER,
        result=object_of(ConnectResult),
    ),
    Command(
        "ipfs.connect",
        "Swarm-connect the node's IPFS.",
        _ipfs_connect,
        (CommandParam("multiaddr", STR, True),),
        daemon_only=True,
        result=object_of(IpfsConnected),
    ),
    Command(
        "node.backup",
        "Back up the node: keys, config, state (attestations, disputes...), optionally datasets.",
        _backup,
        (
            CommandParam(
                "file",
                STR,
                True,
                "The archive to write (never over an existing file).",
                Cli("argument", type=Path, to_wire=_backup_file, metavar="FILE"),
            ),
            CommandParam(
                "datasets", BOOL, False, "Include every dataset (blocks, data, checkpoints).", Cli()
            ),
        ),
        cli=("backup",),
        doc="Safe while the daemon runs. Restore with `odf-node restore FILE --home DIR`; the "
        "archive format: docs/backup.md.",
        result=object_of(BackupResult),
        render=_render_backup,
        in_process="a read of the home beside the daemon (SQLite's online backup copies "
        "state.db while the daemon writes; dataset files are immutable once written), and the "
        "archive is written by the caller, where the caller sees FILE",
        parity="one command line cannot run on both homes (a backup never overwrites its "
        "file): the test backs each home up to its own file and compares the shapes",
    ),
    Command(
        "subscriptions.add",
        "Follow a remote dataset: pull, verify, republish and attest each new head.",
        _subscribe,
        (
            CommandParam(
                "did",
                STR,
                True,
                "did:odf:… of the dataset to follow (owner-signed heads over gossip), or the URL "
                "of its repository to poll: http(s)://, ipfs://, ipns:// or a path "
                "(docs/follow.md).",
                Cli("argument"),
            ),
            CommandParam("alias", STR, False, "Local name.", Cli(type=str)),
            CommandParam(
                "policy",
                {"type": "string", "enum": ["verify-all", "quorum", "sample", "reputation"]},
                False,
                "Trust policy of this dataset, over the node's [trust] policy (docs/trust.md).",
                Cli(type=str),
            ),
            CommandParam(
                "k",
                {"type": "integer", "minimum": 1},
                False,
                "Attestations of trusted attesters needed (quorum, sample), over [trust] k.",
                Cli(type=int),
            ),
            CommandParam(
                "attesters",
                STRS,
                False,
                "A trusted attester's node id (did:key:…), over [trust] trusted_attesters.",
                Cli(flags=("--attester",), type=list[str], metavar="NODE_ID"),
            ),
            CommandParam(
                "source",
                STR,
                False,
                "Follow the DID from this URL (polled; the source is the authority).",
                Cli(type=str, metavar="URL"),
            ),
        ),
        cli=("subscribe",),
        write=True,
        result=object_of(SubscriptionRow),
    ),
    Command(
        "subscriptions.remove",
        "Stop following a dataset (its local copy is kept).",
        _unsubscribe,
        (CommandParam("did", STR, True, "did:odf:… to stop following.", Cli("argument")),),
        cli=("unsubscribe",),
        write=True,
        result=object_of(Unsubscribed),
    ),
    Command(
        "subscriptions.list",
        "Followed datasets, their accepted heads, verification outcomes and trust.",
        _subscriptions,
        cli=("subscriptions",),
        result=array_of(SubscriptionRow),
    ),
    Command(
        "dataset.list",
        "List datasets with their head, kind and number of blocks.",
        _dataset_list,
        cli=("dataset", "list"),
        result=array_of(DatasetRow),
        render=_render_list,
    ),
    Command(
        "dataset.create",
        "Create datasets from a DatasetSnapshot YAML file (kamu's format): all or none.",
        _dataset_create,
        (
            CommandParam(
                "snapshot_yaml",
                STR,
                True,
                "DatasetSnapshot YAML file (may hold several); - for standard input.",
                Cli("argument", type=Path, to_wire=_read_snapshot, metavar="SNAPSHOT"),
            ),
            CommandParam(
                "snapshot_dir",
                STR,
                False,
                "Absolute directory of the snapshot file: relative FilesGlob paths resolve "
                "there at pull (unless [ingest] files_root is set). The CLI sends it.",
            ),
            CommandParam(
                "account",
                STR,
                False,
                "Create the datasets as this account: a name without one becomes "
                "account/name, and inputs named without one resolve in it first "
                "(kamu's --account in a multi-tenant workspace).",
                Cli(),
            ),
        ),
        cli=("dataset", "create"),
        result=array_of(CreatedDataset),
        render=_render_created,
        write=True,
        prepare=_prepare_create,
    ),
    Command(
        "dataset.ingest",
        "Push files into a root dataset through its push source (one AddData per file).",
        _dataset_ingest,
        (
            CommandParam("ref", STR, True, "Root dataset alias or did:odf.", Cli("argument")),
            CommandParam(
                "files",
                STRS,
                True,
                "Input files (CSV, NDJSON, JSON, Parquet).",
                Cli("argument", type=list[Path], to_wire=_paths),
            ),
            CommandParam("source", STR, False, "Push source name (if several).", Cli(type=str)),
            CommandParam(
                "publish", BOOL, False, "Publish and announce an owned dataset afterwards."
            ),
            CommandParam(
                "link_columns",
                STRS,
                False,
                "A String column whose values are multihashes of linked objects (RFC-017).",
                Cli(flags=("--link-column",), type=list[str]),
            ),
            CommandParam(
                "objects",
                STRS,
                False,
                "A linked object file to store under data/<multihash> (RFC-017).",
                Cli(flags=("--object",), type=list[Path], to_wire=_paths),
            ),
        ),
        cli=("dataset", "ingest"),
        doc="With --link-column, every non-null value of those columns must name an object "
        "supplied with --object (or stored earlier); the ingest is refused otherwise.",
        render=_render_ingest,
        write=True,
        progress="bytes",
        prepare=_prepare_ingest,
        result=object_of(IngestSummary),
    ),
    Command(
        "dataset.transform",
        "Run the next transform step of a derivative dataset on its engine.",
        _dataset_transform,
        (
            CommandParam("ref", STR, True, "Derivative dataset alias or did:odf.", Cli("argument")),
            CommandParam(
                "publish", BOOL, False, "Publish and announce an owned dataset afterwards."
            ),
            *_ENGINE,
        ),
        cli=("dataset", "transform"),
        doc="Spark or DataFusion, as the dataset's transform names.",
        render=_render_transform,
        write=True,
        result=object_of(TransformResult),
    ),
    Command(
        "dataset.verify",
        "Check integrity (hashes, chain rules, data files); for derivatives also replay.",
        _dataset_verify,
        (
            _ref(),
            CommandParam(
                "integrity", BOOL, False, "Check hashes only (no transform replay).", Cli()
            ),
            *_ENGINE,
        ),
        cli=("dataset", "verify"),
        doc="Exit status 2 when the dataset fails verification.",
        render=_render_verify,
        # The integrity report's counts sit at top level beside these (VerifyResult.to_json).
        result={
            "type": "object",
            "required": ["id", "alias", "ok", "seconds", "replay", "problems"],
        },
        progress="phases",
        exit_code=lambda value: 0 if value["ok"] else 2,
    ),
    Command(
        "dataset.publish",
        "Publish a dataset to IPFS and announce it.",
        _dataset_publish,
        (
            _ref(),
            CommandParam(
                "ipns_key",
                STR,
                False,
                "Also publish IPNS under this key name.",
                Cli(type=str),
            ),
            CommandParam(
                "ipns",
                description="Also publish IPNS under the node's own key (self).",
                cli=Cli(type=bool, default=False),
                role="cli",
            ),
            CommandParam(
                "ipfs_api",
                description="kubo-compatible RPC API, e.g. http://127.0.0.1:5001 "
                "(without a daemon).",
                cli=Cli(type=str, default="http://127.0.0.1:5001", envvar="ODF_NODE_IPFS_API"),
                role="offline",
            ),
        ),
        cli=("dataset", "publish"),
        doc="With a daemon: queue the publication and a signed head announcement of an owned "
        "dataset. Without one (or with an IPNS name): add it to IPFS as kamu does (without "
        "info/), pin it and print the root CID.",
        render=_render_publish,
        prepare=_prepare_publish,
        parity=_NEEDS_IPFS,
        result=object_of(PublishResult),
    ),
    Command(
        "dataset.pull",
        "Pull a dataset, verifying every block, data part and checkpoint before committing.",
        _dataset_pull,
        (
            CommandParam(
                "url",
                STR,
                True,
                "ipfs://CID, ipfs://CID/path, ipns://…, http(s)://… or a path.",
                Cli("argument"),
            ),
            CommandParam(
                "alias",
                STR,
                False,
                "Local name (default: the URL's last segment).",
                Cli(flags=("--as",), type=str),
            ),
            CommandParam(
                "force", BOOL, False, "Replace the local chain if it has diverged.", Cli()
            ),
            CommandParam(
                "publish",
                BOOL,
                False,
                "After polling an owned root: publish and announce it (a pull of a remote "
                "dataset ignores it).",
            ),
            CommandParam(
                "ipfs_api",
                description="IPFS RPC API URL (kubo; without a daemon).",
                cli=Cli(type=str, envvar="ODF_IPFS_API"),
                role="offline",
            ),
            CommandParam(
                "ipfs_gateway",
                description="IPFS HTTP gateway URL (without a daemon).",
                cli=Cli(type=str, envvar="ODF_IPFS_GATEWAY"),
                role="offline",
            ),
        ),
        cli=("dataset", "pull"),
        doc="An alias (or did:odf) of an owned root dataset with a polling source "
        "(SetPollingSource) runs that source once, as `kamu pull` does: fetch, prepare, read, "
        "merge, commit (all or nothing), then publish like an ingest.",
        render=_render_pull,
        write=True,
        result=object_of(PullResult),
    ),
    Command(
        "dataset.log",
        "Show a dataset's metadata blocks, newest first (like `kamu log`).",
        _dataset_log,
        (
            _ref(),
            CommandParam("limit", LIMIT, False, "Show at most this many blocks.", Cli(type=int)),
            CommandParam(
                "output_format",
                description="yaml | json | table",
                cli=Cli(flags=("--output-format", "-o"), type=str, default="table"),
                role="cli",
            ),
        ),
        cli=("dataset", "log"),
        result=array_of(LogEntry),
        render=_render_log,
        prepare=_check_log_format,
        in_process="a read of the repository, safe beside a daemon; without --limit it shows "
        "the whole chain, more than one RPC reply carries (limit <= 1000)",
    ),
    Command(
        "dataset.schedule",
        "Make a dataset update itself: poll a root on a schedule, transform a derivative when "
        "an input changes.",
        _dataset_schedule,
        (
            _ref("Owned dataset alias or did:odf."),
            CommandParam(
                "every",
                STR,
                False,
                "Poll a root's source this often (90, 30s, 15m, 1h, 1h30m, 1d).",
                Cli(type=str),
            ),
            CommandParam(
                "cron",
                STR,
                False,
                'Poll a root\'s source on a cron schedule, UTC ("0 * * * *", @daily).',
                Cli(type=str),
            ),
            CommandParam(
                "on_input",
                BOOL,
                False,
                "Transform a derivative when an input gets a new (trusted) head.",
                Cli(),
            ),
            CommandParam("off", BOOL, False, "Remove the dataset's schedule.", Cli()),
        ),
        cli=("dataset", "schedule"),
        doc="Exactly one of --every, --cron, --on-input, --off. The daemon runs the flows "
        "(each run a work item, retried with backoff) and publishes what they commit; "
        "see docs/flows.md.",
        render=_render_schedule,
        write=True,
        result=object_of(ScheduleRow),
    ),
    Command(
        "flows.list",
        "Flow schedules and the history of their runs (newest first).",
        _flows,
        (
            _did_filter(),
            CommandParam("limit", LIMIT, False, "Show at most this many runs.", Cli(type=int)),
        ),
        cli=("flows",),
        render=_render_flows,
        result=object_of(FlowsResult),
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
            CommandParam("did", STR, False),
        ),
        cli=("work",),
        result=array_of(WorkRow),
        columns=("id", "kind", "did", "state", "attempts", "last_error"),
    ),
    Command(
        "attestations.list",
        "Attestations received and made (newest first).",
        _attestations,
        (
            _did_filter(),
            CommandParam("head", STR, False),
            CommandParam("limit", LIMIT, False),
            *_export_params(),
        ),
        cli=("attestations",),
        doc="--format in-toto: the node's own attestations as in-toto Statements v1 in DSSE "
        "envelopes signed with the node key (docs/attestations.md); check one with "
        "`odf-node attestation verify FILE`.",
        result={"type": "array", "items": {"type": "object"}},
        render=_render_exportable(("did", "head", "verdict", "node", "signer", "own")),
    ),
    Command(
        "disputes.list",
        "Disputes received and made (newest first).",
        _disputes,
        (_did_filter(), CommandParam("limit", LIMIT, False), *_export_params()),
        cli=("disputes",),
        doc="--format in-toto: as for `attestations` (docs/attestations.md).",
        result={"type": "array", "items": {"type": "object"}},
        render=_render_exportable(("did", "block", "kind", "signer", "own", "detail")),
    ),
    Command(
        "attestation.verify",
        "Check exported in-toto/DSSE envelopes and print what they attest.",
        _attestation_verify,
        (
            CommandParam(
                "envelopes",
                STR,
                True,
                "An export: one envelope, a JSON array or JSON lines; - for standard input.",
                Cli("argument", type=Path, to_wire=_read_envelopes, metavar="FILE"),
            ),
        ),
        cli=("attestation", "verify"),
        doc="Checks the DSSE signature by the did:key of its keyid, the payload and statement "
        "types, the subject's sha3_256 digest and the signed gossip envelope inside. Exit "
        "status 2 when one does not verify.",
        result=array_of(VerifiedEnvelope),
        render=_render_verified,
        exit_code=lambda value: 0 if value and all(v["ok"] for v in value) else 2,
        in_process="a check of the file's bytes alone: no state is read, the file may be "
        "larger than an RPC body",
    ),
    Command(
        "equivocations.list",
        "Equivocation proofs: a dataset's key signed two heads for one position.",
        _equivocations,
        (_did_filter(),),
        cli=("equivocations",),
        result=array_of(EquivocationRow),
    ),
    Command(
        "data.query",
        "Run a read-only SQL query over the datasets this node verified.",
        _data_query,
        (
            CommandParam("sql", STR, True, "The query; dataset aliases and DIDs are table names."),
            CommandParam(
                "untrusted", BOOL, False, "Read untrusted heads too (the answer says so)."
            ),
            CommandParam("engine", {"type": "string", "enum": ["datafusion", "spark"]}, False),
            CommandParam("skip", INT, False),
            CommandParam("limit", INT, False),
        ),
        doc="`odf-node sql` runs it (docs/query.md).",
        render=render_rows,
    ),
    Command(
        "data.tables",
        "The datasets a query can read, each at its readable head and why it may be read.",
        _data_tables,
        (CommandParam("untrusted", BOOL, False, "Also datasets with no trusted head."),),
        result=ARRAY,
    ),
    Command(
        "data.tail",
        "The last records of a dataset at its trusted head.",
        _data_tail,
        (
            _ref(),
            CommandParam(
                "n",
                {"type": "integer", "minimum": 1},
                False,
                "How many records.",
                Cli(flags=("-n", "--num-records"), type=int),
            ),
            CommandParam(
                "untrusted", BOOL, False, "Read the newest head even if untrusted.", Cli()
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
            _ref(),
            CommandParam(
                "file",
                STR,
                True,
                "The file to write (never over an existing one).",
                Cli("argument", type=Path, to_wire=_backup_file, metavar="FILE"),
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
                STR,
                False,
                "Export the records as of this block (on the chain, and trusted).",
                Cli(flags=("--as-of",), metavar="BLOCK"),
            ),
            CommandParam(
                "untrusted", BOOL, False, "Read the newest head even if untrusted.", Cli()
            ),
        ),
        cli=("dataset", "export"),
        doc="Part by part (bounded memory), to a temporary file renamed into place.",
        render=_render_export,
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
                STR,
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
    Command("console.datasets", "Stored and followed datasets.", _console_datasets, result=ARRAY),
    Command(
        "console.dataset",
        "One dataset in detail.",
        _console_dataset,
        (CommandParam("ref", STR, True),),
    ),
    Command(
        "console.preview",
        "Last rows of the newest data slice.",
        _console_preview,
        (
            CommandParam("ref", STR, True),
            CommandParam("limit", {"type": "integer", "minimum": 1, "maximum": 100}, False),
        ),
    ),
    Command(
        "console.disputes",
        "Disputes with their evidence.",
        _console_disputes,
        (CommandParam("did", STR, False), CommandParam("limit", LIMIT, False)),
        result=ARRAY,
    ),
    Command("console.peers", "Peers, scores, graylist, penalties.", _console_peers),
    Command(
        "console.events",
        "The newest events.",
        _console_events,
        (CommandParam("limit", LIMIT, False),),
        result=ARRAY,
    ),
    Command("console.charts", "Data of the console's charts.", _console_charts),
    *NODE_COMMANDS,
)
"""Every command, in the order ``rpc.discover`` and ``odf-node --help`` list them."""

BY_NAME: dict[str, Command] = {c.name: c for c in COMMANDS}


__all__ = ["BY_NAME", "COMMANDS"]
