"""Read-only HTTP server for hosted datasets (ODF Simple Transfer Protocol paths).

``GET /{dataset}/refs/head``, ``/{dataset}/blocks/{hash}``, ``/{dataset}/data/{hash}`` and
``/{dataset}/checkpoints/{hash}``, where ``{dataset}`` is a local alias or ``did:odf:…``; so
``kamu pull http://host:port/{alias}`` works against this node. Nothing else is served: hashes
must parse as multihashes (no path traversal), and ``info/`` is never exposed.

A followed dataset under a trust policy other than verify-all is served at its newest trusted
head (``served_head``, ``docs/trust.md``): ``refs/head`` names it, or answers 404 while no head
is trusted, so a puller never walks from a head this node does not trust.
"""

from __future__ import annotations

from aiohttp import web

from coordinator.errors import DatasetNotFound, InvalidDatasetId, OdfNodeError
from coordinator.multiformats import Multihash
from coordinator.storage.dataset import HEAD_REF, Dataset
from coordinator.storage.repository import DatasetRepository
from node.transfer.streams import ServedHead

"""The head to serve of a dataset: None serves the stored head, ``""`` none (not trusted yet)."""

REPO_KEY: web.AppKey[DatasetRepository] = web.AppKey("repo", DatasetRepository)
SERVED_KEY: web.AppKey[ServedHead] = web.AppKey("served_head")


def _dataset(request: web.Request) -> Dataset:
    repo = request.app[REPO_KEY]
    try:
        return repo.open(request.match_info["dataset"])
    except (DatasetNotFound, InvalidDatasetId) as e:
        raise web.HTTPNotFound(text="dataset not found\n") from e


def _empty_suffix_range(value: str) -> bool:
    """Whether a ``Range`` header asks for a zero-length suffix (``bytes=-0``, ``bytes=-000``)."""
    unit, _, spec = value.strip().partition("=")
    suffix = spec.strip()
    return (
        unit.strip().lower() == "bytes"
        and suffix[:1] == "-"
        and suffix[1:].strip("0") == ""
        and (len(suffix) > 1)
    )


async def _head(request: web.Request) -> web.StreamResponse:
    ds = _dataset(request)
    served_head = request.app.get(SERVED_KEY)
    if served_head is not None:
        did = request.app[REPO_KEY].resolve(request.match_info["dataset"]).id
        served = served_head(did)
        if served == "":
            raise web.HTTPNotFound(text="no trusted head yet\n")
        if served is not None:
            return _ref_response(request, served.encode("ascii"))
    path = ds.layout.refs_dir / HEAD_REF
    if not path.is_file():
        raise web.HTTPNotFound(text="empty dataset\n")
    return _ref_response(request, path.read_bytes())


def _ref_response(request: web.Request, body: bytes) -> web.StreamResponse:
    """``refs/head`` with an ``ETag`` naming the head itself, and 304 to a matching
    ``If-None-Match``: a follower polling an idle dataset costs one small request
    (``docs/follow.md``). No ``Last-Modified``: a head can move twice within its 1 s
    resolution, and the ETag is exact."""
    etag = '"' + body.decode("ascii", "replace").strip() + '"'
    headers = {"ETag": etag, "Cache-Control": "no-cache"}
    match = request.headers.get("If-None-Match", "")
    if etag in (t.strip() for t in match.split(",")) or match.strip() == "*":
        return web.Response(status=304, headers=headers)
    return web.Response(body=body, content_type="text/plain", headers=headers)


async def _object(request: web.Request) -> web.StreamResponse:
    ds = _dataset(request)
    kind = request.match_info["kind"]
    try:
        h = Multihash.from_multibase(request.match_info["hash"])
    except (OdfNodeError, ValueError) as e:
        raise web.HTTPNotFound(text="bad object name\n") from e
    repo = {"blocks": ds.blocks, "data": ds.data, "checkpoints": ds.checkpoints}[kind]
    path = repo.path_of(h)
    if not path.is_file():
        raise web.HTTPNotFound(text="object not found\n")
    if _empty_suffix_range(request.headers.get("Range", "")):
        # aiohttp reads ``bytes=-0`` as "from offset 0" and answers 206 with the whole body;
        # a zero-length suffix selects nothing, so it is unsatisfiable (RFC 9110, 14.1.1).
        raise web.HTTPRequestRangeNotSatisfiable(
            headers={"Content-Range": f"bytes */{path.stat().st_size}"}
        )
    return web.FileResponse(path, headers={"Content-Type": "application/octet-stream"})


def make_app(repo: DatasetRepository, served_head: ServedHead | None = None) -> web.Application:
    """The aiohttp application serving ``repo`` read-only (``served_head``: see the module
    docstring)."""
    app = web.Application()
    app[REPO_KEY] = repo
    if served_head is not None:
        app[SERVED_KEY] = served_head
    app.router.add_get("/{dataset}/refs/head", _head)
    app.router.add_get(r"/{dataset}/{kind:blocks|data|checkpoints}/{hash:[A-Za-z0-9]+}", _object)
    return app


async def start_server(
    repo: DatasetRepository,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    idle_timeout_s: float = 10.0,
) -> tuple[web.AppRunner, int]:
    """Start serving; returns the runner (``await runner.cleanup()`` to stop) and the port.

    A connection that sends no complete request within ``idle_timeout_s`` is closed.
    """
    runner = web.AppRunner(make_app(repo), access_log=None, keepalive_timeout=idle_timeout_s)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    server = site._server
    sockets = getattr(server, "sockets", None) or []
    bound = sockets[0].getsockname()[1] if sockets else port
    return runner, int(bound)
