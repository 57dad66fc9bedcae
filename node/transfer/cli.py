"""CLI command functions ``dataset pull``, ``dataset publish`` and ``serve-http``.

They are plain typer-compatible functions; ``node/cli.py`` registers them::

    from node.transfer.cli import dataset_publish, dataset_pull, serve_http
    dataset_app.command("pull")(dataset_pull)
    dataset_app.command("publish")(dataset_publish)
    app.command("serve-http")(serve_http)
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console

from coordinator.errors import OdfNodeError
from node.home import NodeHome, default_home
from node.ipfs.client import IpfsClient, IpfsError

out = Console(emoji=False, highlight=False, soft_wrap=True)
err = Console(stderr=True, emoji=False, highlight=False, soft_wrap=True)

HomeOpt = Annotated[
    Path | None, typer.Option("--home", envvar="ODF_NODE_HOME", help="Node home directory.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")]
ApiOpt = Annotated[
    str | None,
    typer.Option(
        "--ipfs-api",
        envvar="ODF_NODE_IPFS_API",
        help="kubo-compatible RPC API, e.g. http://127.0.0.1:5001.",
    ),
]
GatewayOpt = Annotated[
    str | None,
    typer.Option(
        "--ipfs-gateway",
        envvar="ODF_NODE_IPFS_GATEWAY",
        help="IPFS HTTP gateway for ipfs:// pulls without --ipfs-api (default localhost:8080).",
    ),
]


def _home(home: Path | None) -> NodeHome:
    h = NodeHome(home or default_home())
    if not h.initialized:
        h.init()
    return h


def _fail(message: str) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(1)


def dataset_publish(
    ref: Annotated[str, typer.Argument(help="Dataset alias or did:odf.")],
    ipfs_api: ApiOpt = "http://127.0.0.1:5001",
    ipns_key: Annotated[
        str | None, typer.Option("--ipns-key", help="Also publish IPNS under this key name.")
    ] = None,
    ipns: Annotated[
        bool, typer.Option("--ipns", help="Also publish IPNS under the node's own key (self).")
    ] = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Add a dataset to IPFS as kamu does (without info/), pin it and print the root CID."""
    from node.transfer.publish import publish_dataset

    if ipns and ipns_key is None:
        ipns_key = "self"
    repo = _home(home).repository()

    async def go() -> tuple[str, str | None]:
        async with IpfsClient(ipfs_api or "http://127.0.0.1:5001") as client:
            r = await publish_dataset(client, repo.open(ref), ipns_key=ipns_key)
            return r.cid, r.ipns_name

    try:
        cid, name = asyncio.run(go())
    except (OdfNodeError, IpfsError) as e:
        _fail(str(e))
    if as_json:
        sys.stdout.write(json.dumps({"cid": cid, "url": f"ipfs://{cid}", "ipns": name}) + "\n")
    else:
        out.print(f"ipfs://{cid}" + (f"  (ipns://{name})" if name else ""))


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
