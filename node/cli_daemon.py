"""CLI commands that talk to the running daemon over JSON-RPC, or work on the home directly.

When a daemon holds the home's lock, commands go through its RPC API (address and token from
``<home>/rpc.cookie``); otherwise they open the home themselves, taking the same lock for writes
so that a daemon started meanwhile cannot write at the same time.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from coordinator.errors import OdfNodeError
from node.home import NodeHome, default_home

out = Console(emoji=False, highlight=False, soft_wrap=True)
err = Console(stderr=True, emoji=False, highlight=False, soft_wrap=True)

HomeOpt = Annotated[
    Path | None,
    typer.Option("--home", envvar="ODF_NODE_HOME", help="Node home directory."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")]


def _fail(message: str) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(1)


def _path(home: Path | None) -> Path:
    return home or default_home()


_DAEMON_START_WAIT_S = 120.0
"""How long a CLI command waits for a starting daemon's RPC (js-ipfs may take a while)."""


def daemon_endpoint(home: Path) -> tuple[str, str] | None:
    """``(url, token)`` of the daemon running on ``home``, or None if none runs."""
    from node.daemon.lock import HomeLock
    from node.rpc.cookie import cookie_path, read_cookie

    lock = HomeLock(home)
    if not lock.held_by_other():
        return None
    if not cookie_path(home).exists():
        if not lock.holder().startswith("daemon"):
            return None  # a CLI command holds it: the offline path reports the lock clearly
        # A daemon that is starting holds the lock before its RPC is up: wait for its cookie
        # rather than failing with "home in use" (typing a command right after `run`).
        print(f"waiting for the daemon on {home} to start its RPC ...", file=sys.stderr)
        deadline = time.monotonic() + _DAEMON_START_WAIT_S
        while not cookie_path(home).exists():
            if time.monotonic() > deadline or not lock.held_by_other():
                _fail(
                    f"the daemon on {home} did not open its RPC within "
                    f"{_DAEMON_START_WAIT_S:.0f} s (see its log), or it stopped"
                )
            time.sleep(0.2)
    try:
        url, token = read_cookie(home)
    except OdfNodeError as e:
        _fail(f"a daemon runs on {home} but its RPC cookie is unusable: {e}")
    # The Unix socket also reaches a daemon in another network namespace (`make run`).
    sock = home / "rpc.sock"
    return (f"unix:{sock}" if sock.is_socket() else url), token


def rpc_call(home: Path, method: str, params: dict[str, Any] | None = None) -> Any:
    """Call ``method`` on the daemon of ``home``; fail with a clear message if none runs."""
    ok, result = maybe_rpc(home, method, params or {})
    if not ok:
        _fail(f"no daemon is running on {home}: start one with `odf-node run`")
    return result


def maybe_rpc(home: Path, method: str, params: dict[str, Any]) -> tuple[bool, Any]:
    """``(True, result)`` if a daemon answered, ``(False, None)`` if none runs."""
    from node.rpc.client import call_sync

    ep = daemon_endpoint(home)
    if ep is None:
        return False, None
    try:
        return True, call_sync(ep[0], ep[1], method, params or None, timeout=3600)
    except OdfNodeError as e:
        _fail(str(e))


def with_state(home: Path, fn: Callable[[Any], Any], *, write: bool) -> Any:
    """Run ``fn(NodeState)`` on the home directly (no daemon), under the lock for writes."""
    import time

    from node.daemon.lock import HomeLock
    from node.state import NodeState

    h = NodeHome(home)
    if not h.initialized:
        h.init()
    lock = HomeLock(home)
    if write:
        try:
            lock.acquire_cli()
        except OdfNodeError as e:
            _fail(str(e))
    try:
        with NodeState.open(home / "state.db", time.time_ns) as state:
            return fn(state)
    finally:
        lock.release()


def emit(value: Any, as_json: bool, columns: list[str] | None = None) -> None:
    """Print ``value`` as JSON, a table (list of dicts) or key: value lines."""
    if as_json:
        sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")
        return
    if isinstance(value, list):
        if not value:
            out.print("(none)")
            return
        cols = columns or list(value[0].keys())
        table = Table(*cols)
        for row in value:
            table.add_row(*(_cell(row.get(c)) for c in cols))
        out.print(table)
        return
    if isinstance(value, dict):
        for k, v in value.items():
            out.print(f"[bold]{k:>16}[/]: {_cell(v)}")
        return
    out.print(str(value))


def _cell(v: Any) -> str:
    if isinstance(v, dict | list):
        return json.dumps(v, default=str)
    return "" if v is None else str(v)


def register(app: typer.Typer) -> None:
    """Add the daemon commands to the top-level ``odf-node`` app."""

    @app.command()
    def peers(home: HomeOpt = None, as_json: JsonOpt = False) -> None:
        """Gossip peers the node knows, with scores."""
        h = _path(home)
        ok, result = maybe_rpc(h, "peers.list", {})
        if not ok:
            result = with_state(h, lambda s: [vars_of(p) for p in s.peers()], write=False)
        emit(result, as_json, ["peer_id", "connected", "score", "last_seen_ns"])

    @app.command()
    def connect(
        multiaddr: Annotated[str, typer.Argument(help="/ip4/…/tcp/…/p2p/<peer id>")],
        ipfs: Annotated[bool, typer.Option("--ipfs", help="Connect the IPFS node.")] = False,
        home: HomeOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Dial a gossip peer (or, with --ipfs, connect the node's IPFS to another)."""
        method = "ipfs.connect" if ipfs else "peers.connect"
        emit(rpc_call(_path(home), method, {"multiaddr": multiaddr}), as_json)

    @app.command()
    def subscribe(
        did: Annotated[str, typer.Argument(help="did:odf:… of the dataset to follow.")],
        alias: Annotated[str | None, typer.Option("--alias", help="Local name.")] = None,
        home: HomeOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Follow a remote dataset: pull, verify, republish and attest each new head."""
        h = _path(home)
        params: dict[str, Any] = {"did": did}
        if alias:
            params["alias"] = alias
        ok, result = maybe_rpc(h, "subscriptions.add", params)
        if not ok:
            from coordinator.identity import DatasetId

            try:
                canonical = DatasetId.parse(did).as_did_str()
            except OdfNodeError as e:
                _fail(str(e))
            result = with_state(
                h, lambda s: vars_of(s.subscribe(canonical, alias, "cli")), write=True
            )
        emit(result, as_json)

    @app.command()
    def unsubscribe(
        did: Annotated[str, typer.Argument(help="did:odf:… to stop following.")],
        home: HomeOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Stop following a dataset (its local copy is kept)."""
        h = _path(home)
        ok, result = maybe_rpc(h, "subscriptions.remove", {"did": did})
        if not ok:
            result = with_state(
                h, lambda s: {"did": did, "removed": s.unsubscribe(did)}, write=True
            )
        emit(result, as_json)

    @app.command()
    def subscriptions(home: HomeOpt = None, as_json: JsonOpt = False) -> None:
        """Followed datasets, their accepted heads and verification outcomes."""
        h = _path(home)
        ok, result = maybe_rpc(h, "subscriptions.list", {})
        if not ok:
            result = with_state(h, lambda s: [vars_of(x) for x in s.subscriptions()], write=False)
        emit(result, as_json)

    @app.command()
    def attestations(
        did: Annotated[str | None, typer.Argument(help="Only this dataset.")] = None,
        home: HomeOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Attestations received and made (newest first)."""
        params = {"did": did} if did else {}
        emit(
            rpc_call(_path(home), "attestations.list", params),
            as_json,
            ["did", "head", "verdict", "signer", "own"],
        )

    @app.command()
    def disputes(
        did: Annotated[str | None, typer.Argument(help="Only this dataset.")] = None,
        home: HomeOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Disputes received and made (newest first)."""
        params = {"did": did} if did else {}
        emit(
            rpc_call(_path(home), "disputes.list", params),
            as_json,
            ["did", "block", "kind", "signer", "own", "detail"],
        )

    @app.command()
    def work(
        state: Annotated[
            str | None, typer.Option("--state", help="pending, claimed, done, failed.")
        ] = None,
        home: HomeOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Pipeline work items (verify, publish, dispute) and their states."""
        params = {"state": state} if state else {}
        emit(
            rpc_call(_path(home), "work.list", params),
            as_json,
            ["id", "kind", "did", "state", "attempts", "last_error"],
        )

    @app.command()
    def events(
        after: Annotated[int, typer.Option("--after", help="Only events after this id.")] = 0,
        limit: Annotated[int, typer.Option("--limit")] = 100,
        kind: Annotated[
            str | None,
            typer.Option("--kind", help="Only events of this kind (e.g. head.repaired)."),
        ] = None,
        home: HomeOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """The node's event log."""
        params: dict[str, Any] = {"after_id": after, "limit": limit}
        if kind:
            params["kind"] = kind
        emit(
            rpc_call(_path(home), "node.events", params),
            as_json,
            ["id", "kind", "did", "data"],
        )

    @app.command("ui")
    def console_ui(
        open_browser: Annotated[
            bool, typer.Option("--open", help="Also open the URL in a web browser.")
        ] = False,
        home: HomeOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Print a one-time URL that logs a browser into the node console (valid 2 minutes)."""
        result = rpc_call(_path(home), "console.login", {})
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
                _fail("no web browser could be started; open the URL above yourself")

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
            _fail(f"params are not JSON: {e}")
        emit(rpc_call(_path(home), method, value), True)


def vars_of(row: Any) -> dict[str, Any]:
    """A state row (frozen dataclass) as a JSON-friendly dict without raw envelopes."""
    from dataclasses import asdict

    d = asdict(row)
    d.pop("envelope", None)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}
