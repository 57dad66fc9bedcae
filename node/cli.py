"""The ``odf-node`` command line: the commands of ``node/commands`` plus the node's own.

Every use-case command is generated from its declaration (``node/commands/catalog.py``): it
goes to the daemon's JSON-RPC when a daemon runs on the home and runs in-process otherwise,
prints a human rendering by default and the same JSON either way with ``--json``; failures
print one clear line and exit with status 1. The commands written here are not use cases:
``init`` and ``run`` make and start a node, ``restore`` makes one from a backup (a new home:
no daemon or Application exists for it yet), ``key rotate`` / ``key revoke`` change the key the
daemon runs with (so they need it stopped), ``serve-http`` serves a home without a daemon,
``ui`` and ``rpc`` speak to a running daemon's RPC, ``sim`` runs network simulations.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from coordinator.errors import OdfNodeError
from node.commands.cli import HomeOpt, JsonOpt, add_commands, emit, err, fail, out
from node.commands.dispatch import call
from node.home import NodeHome, default_home

app = typer.Typer(
    name="odf-node",
    help="A peer-to-peer node for Open Data Fabric datasets (kamu-compatible).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
dataset_app = typer.Typer(help="Create, inspect and verify datasets.", no_args_is_help=True)
app.add_typer(dataset_app, name="dataset")
key_app = typer.Typer(
    help="Rotate or revoke the node key (the daemon must be stopped).", no_args_is_help=True
)
app.add_typer(key_app, name="key")
attestation_app = typer.Typer(
    help="Check exported attestations (in-toto/DSSE envelopes).", no_args_is_help=True
)
app.add_typer(attestation_app, name="attestation")
query_app = typer.Typer(
    help="Check query commitments of the HTTP data API (docs/query.md).", no_args_is_help=True
)
app.add_typer(query_app, name="query")


def _home(home: Path | None) -> NodeHome:
    h = NodeHome(home or default_home())
    if not h.initialized:
        h.init()
    return h


@app.command()
def init(home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """Create the node home: config, node key (mode 0600) and the dataset store."""
    from node.app.node_keys import MOVE_NEXT_KEY_ADVICE
    from node.compose import init_inception

    h = NodeHome(home or default_home())
    created = h.init()
    did = h.node_key().dataset_id().as_did_key()
    # The first key commits to its next one (keys/next.key): docs/operations.md.
    incepted = init_inception(h)
    if as_json:
        next_key = incepted.next_key if incepted is not None else None
        emit({"home": str(h.path), "node_id": did, "created": created, "next_key": next_key}, True)
        return
    verb = "Initialised" if created else "Already initialised:"
    out.print(f"{verb} node home [bold]{h.path}[/]\nnode id: {did}")
    if incepted is not None:
        out.print(f"next key: {incepted.next_key}: {MOVE_NEXT_KEY_ADVICE}")


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

    from node.config import check_listeners

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
        # A bad option or config file fails here, before the exec, as do listeners the
        # daemon could not advertise.
        check_listeners(h.config(overrides))
    except OdfNodeError as e:
        fail(str(e))
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


@app.command()
def restore(
    file: Annotated[Path, typer.Argument(help="A backup archive (odf-node backup).")],
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Restore a backup into a new node home (never over an existing one).

    The restored node has the backed-up node key (the same node id), config, state
    (subscriptions, accepted heads, attestations, disputes, work items) and, if the backup
    included them, datasets. Start it with `odf-node run --home DIR`. docs/backup.md.
    """
    from node.compose import restore_home

    target = home or default_home()
    try:
        summary = restore_home(file, target)
    except OdfNodeError as e:
        fail(str(e))
    if as_json:
        emit(summary.__dict__, True)
        return
    out.print(
        f"Restored node {summary.node_id} into [bold]{summary.home}[/]: "
        f"{summary.subscriptions} subscriptions, {summary.datasets} datasets, "
        f"{summary.files} files (backup format {summary.format_version}, "
        f"state schema {summary.state_schema_version})"
    )


@key_app.command("rotate")
def key_rotate(
    home: HomeOpt = None,
    as_json: JsonOpt = False,
    next_key: Annotated[
        Path | None,
        typer.Option(
            "--next-key",
            help="The key the current node key committed to, if kept outside keys/next.key.",
        ),
    ] = None,
) -> None:
    """Replace the node key by the key it committed to; the node keeps its identity.

    Pre-rotation: the new key is the one the current key committed to (keys/next.key, or
    --next-key; a fresh one if the current key made no commitment), and the record commits to
    a fresh key after it, written to keys/next.key: keep a copy of that file off the node. The
    record, signed by the old and the new key, is stored and gossiped by the daemon at its next
    start: peers move the node's score to its new peer id and count attestations signed by the
    old key as the node's. The old key is kept in keys/retired/ (for `key revoke`). Update
    `[p2p] bootstrap` entries of other nodes that name this node's old peer id.
    docs/operations.md ("Node key rotation").
    """
    from node.compose import rotate_key

    try:
        r = rotate_key(_home(home), next_key=next_key)
    except OdfNodeError as e:
        fail(str(e))
    if as_json:
        emit(r.__dict__, True)
        return
    out.print(
        f"Node key rotated: {r.old_id} -> [bold]{r.new_id}[/]\n"
        f"peer id: {r.old_peer_id} -> {r.new_peer_id}\n"
        "committed to the next key in keys/next.key: keep a copy of it off this node\n"
        "the rotation record is gossiped when the daemon starts (odf-node run)"
    )


@key_app.command("revoke")
def key_revoke(
    node_id: Annotated[
        str | None,
        typer.Argument(help="The retired key to revoke (did:key:...; default: the newest)."),
    ] = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Revoke a retired node key: from now on its attestations and disputes no longer count.

    Signed by the key the revoked key committed to (its successor) when it made a commitment,
    else by the revoked key itself, and gossiped by the daemon at its next start. The current
    key cannot be revoked: rotate first. docs/operations.md ("Node key rotation").
    """
    from node.compose import revoke_key

    try:
        r = revoke_key(_home(home), node_id)
    except OdfNodeError as e:
        fail(str(e))
    if as_json:
        emit(r.__dict__, True)
        return
    out.print(f"Revoked node key [bold]{r.node_id}[/] from {r.revoked_ns} ns on")


@app.command("serve-http")
def serve_http(
    port: Annotated[int, typer.Option("--port", help="TCP port.")] = 8090,
    host: Annotated[str, typer.Option("--host", help="Bind address.")] = "127.0.0.1",
    home: HomeOpt = None,
) -> None:
    """Serve hosted datasets read-only over the ODF Simple Transfer Protocol."""
    from aiohttp import web

    from node.transfer.server import make_app

    repo = _home(home).repository()
    web.run_app(make_app(repo), host=host, port=port, print=err.print)


@app.command("ui")
def console_ui(
    open_browser: Annotated[
        bool, typer.Option("--open", help="Also open the URL in a web browser.")
    ] = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print a one-time URL that logs a browser into the node console (valid 2 minutes)."""
    try:
        result = call(home or default_home(), "console.login")
    except OdfNodeError as e:
        fail(str(e))
    if as_json:
        emit(result, True)
    else:
        out.print(result["url"], markup=False)
        err.print(
            f"one-time login link, valid {result['expires_in_s']:.0f} s; "
            "from another machine: ssh -L <port>:127.0.0.1:<port> (see the README)",
            markup=False,
        )
    if open_browser:
        import webbrowser

        if not webbrowser.open(result["url"]):
            fail("no web browser could be started; open the URL above yourself")


@app.command("rpc")
def rpc_raw(
    method: Annotated[str, typer.Argument(help="JSON-RPC method, e.g. node.status.")],
    params: Annotated[str, typer.Argument(help="Params as a JSON object.")] = "{}",
    home: HomeOpt = None,
) -> None:
    """Call any RPC method and print the JSON result (see `odf-node rpc rpc.discover`)."""
    try:
        value = json.loads(params)
    except ValueError as e:
        fail(f"params are not JSON: {e}")
    try:
        emit(call(home or default_home(), method, value), True)
    except OdfNodeError as e:
        fail(str(e))


@app.command("sql")
def sql_command(
    query: Annotated[
        str | None,
        typer.Argument(help="The query; none: an interactive shell.", show_default=False),
    ] = None,
    untrusted: Annotated[
        bool, typer.Option("--untrusted", help="Read untrusted heads too (the answer says so).")
    ] = False,
    engine: Annotated[
        str, typer.Option("--engine", help="datafusion (default) or spark.")
    ] = "datafusion",
    limit: Annotated[
        int | None, typer.Option("--limit", help="At most this many rows (page with --skip).")
    ] = None,
    skip: Annotated[int, typer.Option("--skip", help="Skip this many rows first.")] = 0,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run read-only SQL over the datasets this node verified (dataset aliases are tables).

    Quote names with dots or dashes as kamu's examples do: select * from "covid19.canada".
    Only trusted heads are read unless --untrusted (docs/query.md). Without a query: an
    interactive shell (history; \\d lists the tables, \\q quits).
    """
    from node.commands.catalog import BY_NAME, render_rows
    from node.commands.cli import RichOutput
    from node.commands.dispatch import dispatch

    where = home or default_home()

    def run_one(text: str) -> None:
        params: dict[str, Any] = {"sql": text, "untrusted": untrusted, "engine": engine}
        if skip:
            params["skip"] = skip
        if limit is not None:
            params["limit"] = limit
        result = dispatch(BY_NAME["data.query"], where, params)
        if as_json:
            emit(result, True)
        else:
            render_rows(result, RichOutput(), {})

    if query is not None:
        try:
            run_one(query)
        except OdfNodeError as e:
            fail(str(e))
        return
    _sql_shell(where, untrusted, run_one)


def _sql_shell(home: Path, untrusted: bool, run_one: Any) -> None:
    """Read queries until EOF or \\q; one failing query prints its error and the shell goes on."""
    from node.commands.catalog import BY_NAME
    from node.commands.dispatch import dispatch

    history = Path(home) / ".sql_history"
    try:
        import readline

        with contextlib.suppress(OSError):
            readline.read_history_file(str(history))
    except ImportError:  # pragma: no cover - readline is part of CPython on Linux
        readline = None  # type: ignore[assignment]

    def tables() -> None:
        rows = dispatch(BY_NAME["data.tables"], home, {"untrusted": untrusted})
        out.print(f"{len(rows)} readable table(s):")
        for r in rows:
            mark = "" if r["trusted"] else " [yellow](untrusted)[/]"
            out.print(f'  "{r["name"]}"  {r["records"]} records, {r["trust"]}{mark}')

    try:
        tables()
    except OdfNodeError as e:
        err.print(str(e), markup=False)
    err.print("Type SQL ending with ; (\\d tables, \\q quit).", markup=False)
    buffer: list[str] = []
    while True:
        try:
            line = input("sql> " if not buffer else "...> ")
        except (EOFError, KeyboardInterrupt):
            break
        stripped = line.strip()
        if not buffer and stripped in ("\\q", "quit", "exit"):
            break
        if not buffer and stripped in ("\\d", ".tables"):
            try:
                tables()
            except OdfNodeError as e:
                err.print(str(e), markup=False)
            continue
        if not stripped:
            continue
        buffer.append(line)
        if not stripped.endswith(";"):
            continue
        text = "\n".join(buffer)
        buffer = []
        try:
            run_one(text)
        except OdfNodeError as e:
            err.print(f"error: {e}", markup=False)
    if readline is not None:
        with contextlib.suppress(OSError):
            readline.write_history_file(str(history))


add_commands(app, {"dataset": dataset_app, "attestation": attestation_app, "query": query_app})


def _register_sim_commands() -> None:
    from sim.cli import sim_app

    app.add_typer(sim_app, name="sim")


_register_sim_commands()


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
