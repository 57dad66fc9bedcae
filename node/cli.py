"""The ``odf-node`` command line.

Works directly on the node's home directory (the daemon's JSON-RPC control arrives with the
daemon). Every command prints human-readable tables by default and JSON with ``--json``;
failures print one clear line and exit with status 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from coordinator.errors import OdfNodeError
from coordinator.metadata.yaml_serde import MAX_YAML_SIZE, block_to_dict, block_to_yaml, yaml_text
from node.cli_daemon import emit, maybe_rpc
from node.cli_daemon import register as register_daemon_commands
from node.home import NodeHome, default_home

app = typer.Typer(
    name="odf-node",
    help="A peer-to-peer node for Open Data Fabric datasets (kamu-compatible).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
dataset_app = typer.Typer(help="Create, inspect and verify datasets.", no_args_is_help=True)
app.add_typer(dataset_app, name="dataset")

out = Console(emoji=False, highlight=False, soft_wrap=True)
err = Console(stderr=True, emoji=False, highlight=False, soft_wrap=True)
log = logging.getLogger("odf_node")

HomeOpt = Annotated[
    Path | None,
    typer.Option("--home", envvar="ODF_NODE_HOME", help="Node home directory."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")]
MasterOpt = Annotated[
    str,
    typer.Option(
        "--spark-master",
        help="spark.master of the engine worker (local[N], spark://…; sc:// is refused).",
    ),
]
MemoryLimitOpt = Annotated[
    int,
    typer.Option(
        "--engine-memory-limit", help="Memory bound of the engine request, MiB (0 = none)."
    ),
]


def _home(home: Path | None, *, create: bool = True) -> NodeHome:
    h = NodeHome(home or default_home())
    if create and not h.initialized:
        h.init()
    return h


def _fail(message: str) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(1)


def _emit_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2) + "\n")


@app.command()
def init(home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """Create the node home: config, node key (mode 0600) and the dataset store."""
    h = NodeHome(home or default_home())
    created = h.init()
    did = h.node_key().dataset_id().as_did_key()
    if as_json:
        _emit_json({"home": str(h.path), "node_id": did, "created": created})
        return
    verb = "Initialised" if created else "Already initialised:"
    out.print(f"{verb} node home [bold]{h.path}[/]\nnode id: {did}")


@app.command()
def status(home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """Show the node's identity and what it stores (live daemon status when one runs)."""
    h = _home(home)
    ok, live = maybe_rpc(h.path, "node.status", {})
    if ok:
        emit(live, as_json)
        return
    repo = h.repository()
    datasets = repo.list()
    info = {
        "home": str(h.path),
        "node_id": h.node_key().dataset_id().as_did_key(),
        "datasets": len(datasets),
        "block_version": h.config().metadata.block_version,
    }
    if as_json:
        _emit_json(info)
        return
    for k, v in info.items():
        out.print(f"[bold]{k:>14}[/]: {v}")


@app.command()
def run(
    home: HomeOpt = None,
    ephemeral: Annotated[
        bool,
        typer.Option(
            "--ephemeral",
            help="Temporary home (deleted on exit) and random ports: for tests and simulations.",
        ),
    ] = False,
    rpc_port: Annotated[int | None, typer.Option("--rpc-port", help="JSON-RPC port.")] = None,
    http_port: Annotated[
        int | None, typer.Option("--http-port", help="Transfer + /metrics port.")
    ] = None,
    p2p_port: Annotated[int | None, typer.Option("--p2p-port", help="libp2p port.")] = None,
    bootstrap: Annotated[
        list[str] | None, typer.Option("--bootstrap", help="Gossip peer multiaddr (repeatable).")
    ] = None,
    ipfs_mode: Annotated[
        str | None, typer.Option("--ipfs", help="IPFS mode: embedded, external or none.")
    ] = None,
    log_format: Annotated[str | None, typer.Option("--log-format", help="text or json.")] = None,
) -> None:
    """Run the node daemon in the foreground until SIGINT/SIGTERM.

    The subscription pipelines, the JSON-RPC control API, the console and the HTTP surface
    (Simple Transfer Protocol, /metrics) run in this process; gossip (libp2p), the embedded
    IPFS node and the engine workers (started on demand) in child processes it owns. The RPC
    address and token are written to <home>/rpc.cookie (mode 0600) for the CLI.
    """
    import subprocess
    import tempfile

    from node.config import ConfigError

    tmp: Path | None = None
    if ephemeral and home is None:
        tmp = Path(tempfile.mkdtemp(prefix="odf-node-"))
        home = tmp
    overrides: dict[str, dict[str, Any]] = {}

    def put(section: str, key: str, value: Any) -> None:
        if value is not None:
            overrides.setdefault(section, {})[key] = value

    if ephemeral:
        put("rpc", "port", 0)
        put("http", "port", 0)
        put("p2p", "port", 0)
    put("rpc", "port", rpc_port)
    put("http", "port", http_port)
    put("p2p", "port", p2p_port)
    put("p2p", "bootstrap", list(bootstrap) if bootstrap else None)
    put("ipfs", "mode", ipfs_mode)
    put("node", "log_format", log_format)
    h = _home(home)
    try:
        h.config(overrides)  # a bad option or config file fails here, before the exec
    except ConfigError as e:
        _fail(str(e))
    # The daemon runs as ``python -m node.daemon`` in this same process (exec: same PID, stdio
    # and environment), without the CLI toolkit loaded (node/daemon/__main__.py).
    argv = [
        sys.executable,
        # -X, -W, -O ... as this run was given (what multiprocessing uses for its children too)
        *subprocess._args_from_interpreter_flags(),  # type: ignore[attr-defined]
        "-m",
        "node.daemon",
        "--home",
        str(h.path),
        "--overrides",
        json.dumps(overrides),
    ]
    if ephemeral:
        argv.append("--ephemeral")
    if tmp is not None:
        argv.append("--remove-home-on-exit")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv)


def _use_cases(h: NodeHome, master: str = "local[*]", memory_limit: int = 0) -> Any:
    """The dataset use cases over the home directly (no daemon): the same code the RPC runs."""
    from node.app.datasets import DatasetUseCases

    engines: list[Any] = []

    def engine() -> Any:
        if not engines:
            from node.config import load_config
            from node.engine_client import EngineClient
            from node.engine_router import EngineRouter

            # The home's config (and ODF_NODE_* variables): where a cluster reaches the driver,
            # the per-request CPU-time budget.
            engine_cfg = load_config(h.path / "config.toml").engine
            driver_host = engine_cfg.driver_host
            cpu = engine_cfg.cpu_limit_s or None
            memory = (memory_limit << 20) or None
            engines.append(
                EngineRouter(
                    lambda: EngineClient(
                        master=master,
                        idle_timeout=0,
                        memory_limit=memory,
                        cpu_limit=cpu,
                        driver_host=driver_host,
                    ),
                    idle_timeout=0,
                    memory_limit=memory,
                    cpu_limit=cpu,
                )
            )
        return engines[0]

    uc = DatasetUseCases(h.repository(), engine)
    uc.close_engine = lambda: engines and engines[0].close()  # type: ignore[attr-defined]
    return uc


def _offline(h: NodeHome, run: Any, *, write: bool, **engine: Any) -> Any:
    """Run ``run(use_cases)`` (a coroutine function) on the home, under the write lock."""
    uc = _use_cases(h, **engine)
    try:
        with _write_lock(h) if write else contextlib.nullcontext():
            return asyncio.run(run(uc))
    except OdfNodeError as e:
        _fail(str(e))
    finally:
        uc.close_engine()


@dataset_app.command("create")
def dataset_create(
    snapshot: Annotated[
        Path,
        typer.Argument(help="DatasetSnapshot YAML file (may hold several); - for standard input."),
    ],
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create datasets from a DatasetSnapshot YAML file (kamu's format): all or none."""
    from node.app.datasets import read_snapshot_file

    h = _home(home)
    try:
        # Bounded read of a regular file (or '-': standard input); a FIFO, device or directory
        # is refused without blocking on it.
        data = read_snapshot_file(snapshot, MAX_YAML_SIZE)
    except OdfNodeError as e:
        _fail(str(e))
    try:
        text = yaml_text(data)
    except OdfNodeError as e:
        _fail(f"{snapshot}: {e}")
    ok, result = maybe_rpc(h.path, "dataset.create", {"snapshot_yaml": text})
    if not ok:
        created = _offline(h, lambda uc: uc.create(text), write=True)
        result = [c.to_json() for c in created]
    if as_json:
        _emit_json(result)
        return
    for c in result:
        out.print(f"created [bold]{c['alias']}[/] {c['id']}")


@dataset_app.command("ingest")
def dataset_ingest(
    ref: Annotated[str, typer.Argument(help="Root dataset alias or did:odf.")],
    files: Annotated[list[Path], typer.Argument(help="Input files (CSV, NDJSON, JSON, Parquet).")],
    source: Annotated[
        str | None, typer.Option("--source", help="Push source name (if several).")
    ] = None,
    link_column: Annotated[
        list[str] | None,
        typer.Option(
            "--link-column",
            help="A String column whose values are multihashes of linked objects (RFC-017).",
        ),
    ] = None,
    object_file: Annotated[
        list[Path] | None,
        typer.Option(
            "--object", help="A linked object file to store under data/<multihash> (RFC-017)."
        ),
    ] = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Push files into a root dataset through its push source (one AddData per file).

    With ``--link-column``, every non-null value of those columns must name an object supplied
    with ``--object`` (or stored earlier); the ingest is refused otherwise.
    """
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    from coordinator.ingest.linked import LinkedObjects
    from coordinator.ingest.push import IngestProgress
    from node.app.datasets import check_input_files

    try:
        check_input_files([*files, *(object_file or [])])
    except OdfNodeError as e:
        _fail(str(e))
    linked = LinkedObjects(tuple(link_column), tuple(object_file or ())) if link_column else None
    if object_file and not link_column:
        _fail("--object needs at least one --link-column")
    h = _home(home)
    result: dict[str, Any] | None = None
    if not linked:
        params: dict[str, Any] = {"ref": ref, "files": [str(f.resolve()) for f in files]}
        if source:
            params["source"] = source
        _ok, result = maybe_rpc(h.path, "dataset.ingest", params)
    if result is None:
        total = sum(f.stat().st_size for f in files)
        show = not as_json and sys.stderr.isatty()
        bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=err,
            disable=not show,
        )
        task = bar.add_task("ingest", total=total)
        done_before: dict[int, int] = {}

        def on_progress(p: IngestProgress) -> None:
            done_before[p.file_index] = p.bytes_read
            name = p.file.name if p.file is not None else ""
            bar.update(task, completed=sum(done_before.values()), description=f"{p.stage} {name}")

        with bar:
            res = _offline(
                h,
                lambda uc: uc.ingest(
                    ref, files, source=source, linked=linked, progress=on_progress
                ),
                write=True,
            )
        result = res.to_json()
    assert result is not None
    if as_json:
        _emit_json(result)
    elif result["up_to_date"]:
        out.print("dataset is up to date: nothing to commit")
    else:
        out.print(
            f"committed {len(result['new_blocks'])} block(s), {result['records']} record(s); "
            f"head {result['new_head']}"
        )


@dataset_app.command("list")
def dataset_list(home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """List datasets with their head, kind and number of blocks."""
    h = _home(home)
    ok, rows = maybe_rpc(h.path, "dataset.list", {})
    if not ok:
        rows = [r.to_json() for r in _offline(h, lambda uc: uc.list(), write=False)]
    if as_json:
        _emit_json(rows)
        return
    table = Table("alias", "kind", "blocks", "records", "head", "id")
    for r in rows:
        if r.get("error"):
            table.add_row(r["alias"], "[red]damaged[/]", "", "", r["error"][:40], r["id"])
        else:
            head = r["head"][-8:] if r["head"] else "-"
            table.add_row(r["alias"], r["kind"], str(r["blocks"]), str(r["records"]), head, r["id"])
    out.print(table)


@dataset_app.command("log")
def dataset_log(
    ref: Annotated[str, typer.Argument(help="Dataset alias or did:odf.")],
    home: HomeOpt = None,
    output_format: Annotated[
        str, typer.Option("--output-format", "-o", help="yaml | json | table")
    ] = "table",
    limit: Annotated[int | None, typer.Option(help="Show at most this many blocks.")] = None,
) -> None:
    """Show a dataset's metadata blocks, newest first (like `kamu log`)."""
    repo = _home(home).repository()
    try:
        ds = repo.open(ref)
        blocks = []
        for i, (bh, block) in enumerate(ds.iter_blocks()):
            if limit is not None and i >= limit:
                break
            blocks.append((bh, block))
    except OdfNodeError as e:
        _fail(str(e))
    if output_format == "yaml":
        for bh, block in blocks:
            sys.stdout.write(f"# Block: {bh}\n{block_to_yaml(block)}")
    elif output_format == "json":
        _emit_json([{"hash": str(bh), "block": block_to_dict(block)} for bh, block in blocks])
    elif output_format == "table":
        table = Table("seq", "hash", "system time", "event")
        for bh, block in blocks:
            table.add_row(
                str(block.sequence_number),
                bh.short(),
                str(block.system_time),
                type(block.event).__name__,
            )
        out.print(table)
    else:
        _fail(f"unknown output format {output_format!r} (yaml, json, table)")


@dataset_app.command("transform")
def dataset_transform(
    ref: Annotated[str, typer.Argument(help="Derivative dataset alias or did:odf.")],
    master: MasterOpt = "local[*]",
    memory_limit: MemoryLimitOpt = 0,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run the next transform step of a derivative dataset on its engine (Spark or DataFusion)."""
    h = _home(home)
    ok, result = maybe_rpc(h.path, "dataset.transform", {"ref": ref})
    if not ok:
        res = _offline(
            h,
            lambda uc: uc.transform(ref),
            write=True,
            master=master,
            memory_limit=memory_limit,
        )
        result = res.to_json()
    if as_json:
        _emit_json(result)
    elif result["up_to_date"]:
        out.print("Up to date")
    else:
        out.print(f"Committed {len(result['new_blocks'])} block(s), head {result['new_head']}")


@dataset_app.command("verify")
def dataset_verify(
    ref: Annotated[str, typer.Argument(help="Dataset alias or did:odf.")],
    integrity: Annotated[
        bool, typer.Option("--integrity", help="Check hashes only (no transform replay).")
    ] = False,
    master: MasterOpt = "local[*]",
    memory_limit: MemoryLimitOpt = 0,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Check integrity (hashes, chain rules, data files); for derivatives also replay transforms."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    h = _home(home)
    ok, result = maybe_rpc(h.path, "dataset.verify", {"ref": ref, "integrity": integrity})
    if not ok:
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            console=err,
            disable=as_json,
            transient=True,
        ) as bar:
            tasks: dict[str, Any] = {}

            def listener(phase: str, done: int, total: int) -> None:
                if phase not in tasks:
                    tasks[phase] = bar.add_task(phase, total=total)
                bar.update(tasks[phase], completed=done, total=total)

            res = _offline(
                h,
                lambda uc: uc.verify(ref, integrity=integrity, listener=listener),
                write=False,
                master=master,
                memory_limit=memory_limit,
            )
        result = res.to_json()
    if as_json:
        _emit_json(result)
    else:
        for p in result["problems"]:
            err.print(f"[red]✗[/] {p}")
        replay = result["replay"]
        if replay is not None and replay["mismatch"] is not None:
            mm = replay["mismatch"]
            err.print(
                f"[red]✗[/] at block {mm['block_hash']} (#{mm['sequence_number']}): "
                + "; ".join(mm["differences"])
            )
        elif replay is not None and replay["error"]:
            err.print(f"[red]✗[/] replay error: {replay['error']}")
        verdict = "[green]OK[/]" if result["ok"] else "[red]FAILED[/]"
        replayed = (
            f", {replay['blocks_replayed']}/{replay['blocks_total']} transforms replayed"
            f" ({replay['verdict']})"
            if replay is not None
            else ""
        )
        out.print(
            f"{verdict}: {result['blocks_checked']} blocks, {result['data_files_checked']} data "
            f"files, {result['checkpoints_checked']} checkpoints checked{replayed}"
        )
    if not result["ok"]:
        raise typer.Exit(2)


@dataset_app.command("pull")
def dataset_pull(
    url: Annotated[str, typer.Argument(help="ipfs://CID[/path], ipns://…, http(s)://… or a path.")],
    as_name: Annotated[
        str | None, typer.Option("--as", help="Local name (default: the URL's last segment).")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace the local chain if it has diverged.")
    ] = False,
    ipfs_api: Annotated[
        str | None,
        typer.Option("--ipfs-api", envvar="ODF_IPFS_API", help="IPFS RPC API URL (kubo)."),
    ] = None,
    ipfs_gateway: Annotated[
        str | None,
        typer.Option("--ipfs-gateway", envvar="ODF_IPFS_GATEWAY", help="IPFS HTTP gateway URL."),
    ] = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Pull a dataset, verifying every block, data part and checkpoint before committing."""
    from node.adapters.transfer import TransferAdapter

    h = _home(home)
    params: dict[str, Any] = {"url": url, "force": force}
    if as_name:
        params["alias"] = as_name
    ok, result = maybe_rpc(h.path, "dataset.pull", params)
    if not ok:
        uc = _use_cases(h)
        try:
            # The home's config: the same source policy and pace as the daemon's pulls.
            cfg = h.config()
            uc.transfer = TransferAdapter(uc.repo, lambda: ipfs_api, ipfs_gateway, config=cfg)
            with _write_lock(h):
                result = asyncio.run(uc.pull(url, alias=as_name, force=force))
        except (OdfNodeError, ValueError) as e:
            _fail(str(e))
    if as_json:
        _emit_json(result)
    elif result["comparison"] == "equal":
        out.print(f"{result['alias']}: up to date")
    elif result["comparison"] == "local-ahead":
        out.print(f"{result['alias']}: local copy is ahead of the source; nothing pulled")
    else:
        verb = "created" if result["created"] else ("replaced" if result["forced"] else "updated")
        out.print(
            f"{result['alias']}: {verb}, {result['new_blocks']} new block(s), "
            f"{result['objects_downloaded']} object(s) downloaded; head {result['new_head']}"
        )


@contextlib.contextmanager
def _write_lock(h: NodeHome) -> Iterator[None]:
    """The home's writer lock for a direct (no daemon) write; a clear error if it is taken."""
    from node.daemon.lock import HomeLock

    lock = HomeLock(h.path)
    try:
        lock.acquire_cli()
    except OdfNodeError as e:
        if lock.holder().startswith("daemon") and os.environ.get(_REDIRECTED) is None:
            # A daemon took the home after this command looked for one (typing a command right
            # after `odf-node run &`): run the command again, which now goes to its RPC. Once.
            print(f"a daemon is starting on {h.path}; sending the command to it", file=sys.stderr)
            sys.stdout.flush()
            os.environ[_REDIRECTED] = "1"
            os.execv(sys.executable, [sys.executable, "-m", "node.cli", *sys.argv[1:]])
        _fail(str(e))
    try:
        yield
    finally:
        lock.release()


_REDIRECTED = "ODF_CLI_REDIRECTED"
"""Set when a command re-ran itself to reach a daemon that started meanwhile (at most once)."""


def _register_transfer_commands() -> None:
    from node.transfer.cli import dataset_publish, serve_http

    dataset_app.command("publish")(dataset_publish)
    app.command("serve-http")(serve_http)


_register_transfer_commands()
register_daemon_commands(app)


def _register_sim_commands() -> None:
    from sim.cli import sim_app

    app.add_typer(sim_app, name="sim")


_register_sim_commands()


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
