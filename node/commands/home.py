"""The commands that run on a node home itself, in the CLI's process: declared like the others.

A use-case command (``node/commands/catalog.py``) runs on an :class:`~node.app.Application`,
over the daemon's RPC when one runs. These do not: they make a home (``init``), make one from a
backup (``restore``: the home does not exist yet), start the daemon (``run``: the process
becomes it), change the key the daemon would run with (``key rotate|revoke``: the daemon must be
stopped), serve a home without a daemon (``serve-http``), or are the command line's own clients
of the daemon (``rpc`` calls any method, ``sql`` is ``data.query`` with an interactive shell:
``node/commands/client.py``).
Kubo declares its ``init`` and ``daemon`` the same way, as commands that never run remotely.

Each declaration has :attr:`~node.commands.spec.Command.home_only` (why it runs here) and a
runner ``await run(home, context, **params)`` where ``home`` is the ``--home`` given (None: the
default home). None of them is an RPC method: the daemon does not load this module.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from node.app.node_keys import MOVE_NEXT_KEY_ADVICE, Revoked, Rotated
from node.app.results import RestoreResult
from node.commands import spec
from node.commands.client import CLIENT_COMMANDS
from node.commands.spec import Cli, Command, CommandParam, Context
from node.commands.spec import Output as Out
from node.compose import NodeHome, default_home


@dataclass(frozen=True)
class Initialised:
    """``init``: the node home, its node id, whether it was made now, its committed next key."""

    home: str
    node_id: str
    created: bool
    next_key: str | None


def _absolute(path: Path) -> str:
    return str(path.expanduser().absolute())


def _home(home: Path | None) -> NodeHome:
    """The home a command runs on: it must exist (:meth:`NodeHome.require`)."""
    return NodeHome(home or default_home()).require()


# ---- init


async def _init(home: Path | None, context: Context) -> Initialised:
    from node.compose import init_inception

    h = NodeHome(home or default_home())
    created = h.init()
    did = h.node_key().dataset_id().as_did_key()
    # The first key commits to its next one (keys/next.key): docs/operations.md.
    incepted = init_inception(h)
    next_key = incepted.next_key if incepted is not None else None
    return Initialised(home=str(h.path), node_id=did, created=created, next_key=next_key)


def _render_init(r: Initialised, out: Out, cli: Mapping[str, Any]) -> None:
    verb = "Initialised" if r.created else "Already initialised:"
    out.print(f"{verb} node home [bold]{r.home}[/]\nnode id: {r.node_id}")
    if r.next_key is not None:
        out.print(f"next key: {r.next_key}: {MOVE_NEXT_KEY_ADVICE}")


# ---- run


async def _run(
    home: Path | None,
    context: Context,
    ephemeral: bool = False,
    rpc_port: int | None = None,
    http_port: int | None = None,
    p2p_port: int | None = None,
    bootstrap: list[str] | None = None,
    ipfs_mode: str | None = None,
    log_format: str | None = None,
) -> None:
    from node.compose import check_listeners

    tmp: Path | None = None
    if ephemeral and home is None:
        tmp = Path(tempfile.mkdtemp(prefix="odf-node-"))
        home = tmp
    overrides: dict[str, dict[str, Any]] = {}
    for section, key, value in (
        *((s, "port", 0 if ephemeral else None) for s in ("rpc", "http", "p2p")),
        ("rpc", "port", rpc_port),
        ("http", "port", http_port),
        ("p2p", "port", p2p_port),
        ("p2p", "bootstrap", list(bootstrap) if bootstrap else None),
        ("ipfs", "mode", ipfs_mode),
        ("node", "log_format", log_format),
    ):
        if value is not None:
            overrides.setdefault(section, {})[key] = value
    # The first start makes the home, as `init` does (`make run` on a fresh machine).
    h = NodeHome(home or default_home())
    if not h.initialized:
        h.init()
    # A bad option or config file fails here, before the exec, as do listeners the daemon
    # could not advertise.
    check_listeners(h.config(overrides))
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


# ---- restore


async def _restore(home: Path | None, context: Context, file: str) -> RestoreResult:
    from node.compose import restore_home

    # The backup port runs its own event loop: in a thread of its own, not inside this one.
    return await asyncio.to_thread(restore_home, Path(file), home or default_home())


def _render_restore(s: RestoreResult, out: Out, cli: Mapping[str, Any]) -> None:
    out.print(
        f"Restored node {s.node_id} into [bold]{s.home}[/]: "
        f"{s.subscriptions} subscriptions, {s.datasets} datasets, "
        f"{s.files} files (backup format {s.format_version}, "
        f"state schema {s.state_schema_version})"
    )


# ---- key rotate | revoke


async def _key_rotate(home: Path | None, context: Context, next_key: str | None = None) -> Rotated:
    from node.compose import rotate_key

    return rotate_key(_home(home), next_key=Path(next_key) if next_key else None)


def _render_rotated(r: Rotated, out: Out, cli: Mapping[str, Any]) -> None:
    out.print(
        f"Node key rotated: {r.old_id} -> [bold]{r.new_id}[/]\n"
        f"peer id: {r.old_peer_id} -> {r.new_peer_id}\n"
        "committed to the next key in keys/next.key: keep a copy of it off this node\n"
        "the rotation record is gossiped when the daemon starts (odf-node run)"
    )


async def _key_revoke(home: Path | None, context: Context, node_id: str | None = None) -> Revoked:
    from node.compose import revoke_key

    return revoke_key(_home(home), node_id)


def _render_revoked(r: Revoked, out: Out, cli: Mapping[str, Any]) -> None:
    out.print(f"Revoked node key [bold]{r.node_id}[/] from {r.revoked_ns} ns on")


# ---- serve-http


async def _serve_http(
    home: Path | None, context: Context, port: int = 8090, host: str = "127.0.0.1"
) -> None:
    from node.compose import serve_home

    h = _home(home)
    print(f"serving {host}:{port} (Ctrl-C stops)", file=sys.stderr, flush=True)
    await serve_home(h, host, port)


_NO_DAEMON = "changes the key the daemon runs with: run it with the daemon stopped"
HOME_COMMANDS: tuple[Command, ...] = (
    Command(
        "node.init",
        "Create the node home: config, node key (mode 0600) and the dataset store.",
        _init,
        cli=("init",),
        result=spec.object_of(Initialised),
        render=_render_init,
        home_only="makes the home",
    ),
    Command(
        "node.run",
        "Run the node daemon in the foreground until SIGINT/SIGTERM.",
        _run,
        (
            CommandParam(
                "ephemeral",
                spec.BOOL,
                description="Temporary home (deleted on exit) and random ports: for tests "
                "and simulations.",
                cli=Cli(),
            ),
            CommandParam("rpc_port", spec.INT, description="JSON-RPC port.", cli=Cli(type=int)),
            CommandParam(
                "http_port", spec.INT, description="Transfer + /metrics port.", cli=Cli(type=int)
            ),
            CommandParam("p2p_port", spec.INT, description="libp2p port.", cli=Cli(type=int)),
            CommandParam(
                "bootstrap",
                spec.STRS,
                description="Gossip peer multiaddr (repeatable).",
                cli=Cli(type=list[str]),
            ),
            CommandParam(
                "ipfs_mode",
                spec.STR,
                description="IPFS mode: embedded, external or none.",
                cli=Cli(flags=("--ipfs",), type=str),
            ),
            CommandParam("log_format", spec.STR, description="text or json.", cli=Cli(type=str)),
        ),
        cli=("run",),
        doc="The subscription pipelines, the JSON-RPC control API, the console and the HTTP "
        "surface (Simple Transfer Protocol, /metrics) run in this process; gossip (libp2p), the "
        "embedded IPFS node and the engine workers (started on demand) in child processes it "
        "owns. The RPC address and token are written to <home>/rpc.cookie (mode 0600) for the "
        "CLI.",
        result=spec.OBJECT,
        home_only="the process becomes the daemon",
        parity="becomes the daemon: every other daemon test starts it this way",
    ),
    Command(
        "node.restore",
        "Restore a backup into a new node home (never over an existing one).",
        _restore,
        (
            CommandParam(
                "file",
                spec.STR,
                True,
                "A backup archive (odf-node backup).",
                Cli("argument", type=Path, to_wire=_absolute),
            ),
        ),
        cli=("restore",),
        doc="The restored node has the backed-up node key (the same node id), config, state "
        "(subscriptions, accepted heads, attestations, disputes, work items) and, if the backup "
        "included them, datasets. Start it with `odf-node run --home DIR`. docs/backup.md.",
        result=spec.object_of(RestoreResult),
        render=_render_restore,
        home_only="makes a new home: no daemon or Application exists for it yet",
    ),
    Command(
        "key.rotate",
        "Replace the node key by the key it committed to; the node keeps its identity.",
        _key_rotate,
        (
            CommandParam(
                "next_key",
                spec.STR,
                description="The key the current node key committed to, if kept outside "
                "keys/next.key.",
                cli=Cli(type=Path, to_wire=_absolute),
            ),
        ),
        cli=("key", "rotate"),
        doc="Pre-rotation: the new key is the one the current key committed to (keys/next.key, "
        "or --next-key; a fresh one if the current key made no commitment), and the record "
        "commits to a fresh key after it, written to keys/next.key: keep a copy of that file "
        "off the node. The record, signed by the old and the new key, is stored and gossiped by "
        "the daemon at its next start: peers move the node's score to its new peer id and count "
        "attestations signed by the old key as the node's. The old key is kept in keys/retired/ "
        "(for `key revoke`). Update `[p2p] bootstrap` entries of other nodes that name this "
        'node\'s old peer id. docs/operations.md ("Node key rotation").',
        result=spec.object_of(Rotated),
        render=_render_rotated,
        home_only=_NO_DAEMON,
    ),
    Command(
        "key.revoke",
        "Revoke a retired node key: from now on its attestations and disputes no longer count.",
        _key_revoke,
        (
            CommandParam(
                "node_id",
                spec.STR,
                description="The retired key to revoke (did:key:...; default: the newest).",
                cli=Cli("argument", type=str),
            ),
        ),
        cli=("key", "revoke"),
        doc="Signed by the key the revoked key committed to (its successor) when it made a "
        "commitment, else by the revoked key itself, and gossiped by the daemon at its next "
        "start. The current key cannot be revoked: rotate first. docs/operations.md "
        '("Node key rotation").',
        result=spec.object_of(Revoked),
        render=_render_revoked,
        home_only=_NO_DAEMON,
    ),
    Command(
        "node.serve_http",
        "Serve hosted datasets read-only over the ODF Simple Transfer Protocol.",
        _serve_http,
        (
            CommandParam(
                "port", spec.INT, description="TCP port.", cli=Cli(type=int, default=8090)
            ),
            CommandParam(
                "host",
                spec.STR,
                description="Bind address.",
                cli=Cli(type=str, default="127.0.0.1"),
            ),
        ),
        cli=("serve-http",),
        result=spec.OBJECT,
        home_only="serves the home's files without a daemon",
        parity="a server, no JSON: tests/integration/test_follow_urls.py follows a home it serves",
    ),
    *CLIENT_COMMANDS,
)
"""The declarations of this module, in the order of the CLI's help."""

BY_NAME: dict[str, Command] = {c.name: c for c in HOME_COMMANDS}

__all__ = ["BY_NAME", "HOME_COMMANDS", "Initialised"]
