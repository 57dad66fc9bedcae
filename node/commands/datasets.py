"""The home's datasets made and checked: ``dataset list|create|ingest|transform|verify``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from coordinator.errors import OdfNodeError
from node.app import Application
from node.app.datasets import load_data_stack
from node.app.errors import InvalidArgument
from node.app.results import (
    CreatedDataset,
    DatasetRow,
    IngestSummary,
    TransformResult,
    VerifyResult,
)
from node.commands import spec
from node.commands.params import absolute_paths, ref_param
from node.commands.spec import Cli, Command, CommandParam, Context, Output

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


def _render_created(value: list[CreatedDataset], out: Output, opts: Mapping[str, Any]) -> None:
    for c in value:
        out.print(f"created [bold]{c.alias}[/] {c.id}")


def _render_ingest(value: IngestSummary, out: Output, opts: Mapping[str, Any]) -> None:
    if value.up_to_date:
        out.print("dataset is up to date: nothing to commit")
    else:
        out.print(
            f"committed {len(value.new_blocks)} block(s), {value.records} record(s); "
            f"head {value.new_head}"
        )


def _render_list(value: list[DatasetRow], out: Output, opts: Mapping[str, Any]) -> None:
    rows = []
    for r in value:
        if r.error:
            rows.append([r.alias, "[red]damaged[/]", "", "", r.error[:40], r.id])
        else:
            head = r.head[-8:] if r.head else "-"
            rows.append([r.alias, r.kind or "", str(r.blocks), str(r.records), head, r.id])
    out.table(["alias", "kind", "blocks", "records", "head", "id"], rows)


def _render_transform(value: TransformResult, out: Output, opts: Mapping[str, Any]) -> None:
    if value.up_to_date:
        out.print("dataset is up to date: nothing to commit")
    else:
        out.print(f"committed {len(value.new_blocks)} block(s); head {value.new_head}")


def _render_verify(value: VerifyResult, out: Output, opts: Mapping[str, Any]) -> None:
    for p in value.problems:
        out.error(f"[red]✗[/] {p}")
    replay = value.replay
    if replay is not None and replay["mismatch"] is not None:
        mm = replay["mismatch"]
        out.error(
            f"[red]✗[/] at block {mm['block_hash']} (#{mm['sequence_number']}): "
            + "; ".join(mm["differences"])
        )
    elif replay is not None and replay["error"]:
        out.error(f"[red]✗[/] replay error: {replay['error']}")
    verdict = "[green]OK[/]" if value.ok else "[red]FAILED[/]"
    counts = value.integrity  # the integrity report (coordinator), a dict
    replayed = (
        f", {replay['blocks_replayed']}/{replay['blocks_total']} transforms replayed"
        f" ({replay['verdict']})"
        if replay is not None
        else ""
    )
    out.print(
        f"{verdict}: {counts['blocks_checked']} blocks, {counts['data_files_checked']} data "
        f"files, {counts['checkpoints_checked']} checkpoints checked{replayed}"
    )


DATASET_COMMANDS: tuple[Command, ...] = (
    Command(
        "dataset.list",
        "List datasets with their head, kind and number of blocks.",
        _dataset_list,
        cli=("dataset", "list"),
        result=spec.array_of(DatasetRow),
        result_type=DatasetRow,
        render=_render_list,
    ),
    Command(
        "dataset.create",
        "Create datasets from a DatasetSnapshot YAML file (kamu's format): all or none.",
        _dataset_create,
        (
            CommandParam(
                "snapshot_yaml",
                spec.STR,
                True,
                "DatasetSnapshot YAML file (may hold several); - for standard input.",
                Cli("argument", type=Path, to_wire=_read_snapshot, metavar="SNAPSHOT"),
            ),
            CommandParam(
                "snapshot_dir",
                spec.STR,
                False,
                "Absolute directory of the snapshot file: relative FilesGlob paths resolve "
                "there at pull (unless [ingest] files_root is set). The CLI sends it.",
            ),
            CommandParam(
                "account",
                spec.STR,
                False,
                "Create the datasets as this account: a name without one becomes "
                "account/name, and inputs named without one resolve in it first "
                "(kamu's --account in a multi-tenant workspace).",
                Cli(),
            ),
        ),
        cli=("dataset", "create"),
        result=spec.array_of(CreatedDataset),
        result_type=CreatedDataset,
        render=_render_created,
        write=True,
        prepare=_prepare_create,
    ),
    Command(
        "dataset.ingest",
        "Push files into a root dataset through its push source (one AddData per file).",
        _dataset_ingest,
        (
            CommandParam("ref", spec.STR, True, "Root dataset alias or did:odf.", Cli("argument")),
            CommandParam(
                "files",
                spec.STRS,
                True,
                "Input files (CSV, NDJSON, JSON, Parquet).",
                Cli("argument", type=list[Path], to_wire=absolute_paths),
            ),
            CommandParam(
                "source", spec.STR, False, "Push source name (if several).", Cli(type=str)
            ),
            CommandParam(
                "publish", spec.BOOL, False, "Publish and announce an owned dataset afterwards."
            ),
            CommandParam(
                "link_columns",
                spec.STRS,
                False,
                "A String column whose values are multihashes of linked objects (RFC-017).",
                Cli(flags=("--link-column",), type=list[str]),
            ),
            CommandParam(
                "objects",
                spec.STRS,
                False,
                "A linked object file to store under data/<multihash> (RFC-017).",
                Cli(flags=("--object",), type=list[Path], to_wire=absolute_paths),
            ),
        ),
        cli=("dataset", "ingest"),
        doc="With --link-column, every non-null value of those columns must name an object "
        "supplied with --object (or stored earlier); the ingest is refused otherwise.",
        render=_render_ingest,
        write=True,
        progress="bytes",
        prepare=_prepare_ingest,
        result=spec.object_of(IngestSummary),
        result_type=IngestSummary,
    ),
    Command(
        "dataset.transform",
        "Run the next transform step of a derivative dataset on its engine.",
        _dataset_transform,
        (
            CommandParam(
                "ref", spec.STR, True, "Derivative dataset alias or did:odf.", Cli("argument")
            ),
            CommandParam(
                "publish", spec.BOOL, False, "Publish and announce an owned dataset afterwards."
            ),
            *_ENGINE,
        ),
        cli=("dataset", "transform"),
        doc="Spark or DataFusion, as the dataset's transform names.",
        render=_render_transform,
        write=True,
        result=spec.object_of(TransformResult),
        result_type=TransformResult,
    ),
    Command(
        "dataset.verify",
        "Check integrity (hashes, chain rules, data files); for derivatives also replay.",
        _dataset_verify,
        (
            ref_param(),
            CommandParam(
                "integrity", spec.BOOL, False, "Check hashes only (no transform replay).", Cli()
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
        result_type=VerifyResult,
        progress="phases",
        exit_code=lambda value: 0 if value.ok else 2,
    ),
)
"""In the order of ``rpc.discover``."""

__all__ = ["DATASET_COMMANDS"]
