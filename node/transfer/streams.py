"""The Simple Transfer Protocol over libp2p streams: ``/odf/stp/1.0.0``.

The data path of a node nobody can dial over HTTP or IPFS -- behind NAT, reachable only through
a relayed (or otherwise already open) libp2p connection (``docs/nat.md``). It carries the same
paths as the HTTP server (``node/transfer/server.py``) over the gossip host's length-framed
request/response streams, so a relayed connection carries data the same way it carries gossip,
and the relay's per-circuit limits bound what it carries for others.

Request (JSON): ``{"dataset": alias or did, "path": "refs/head" | "blocks/<hash>" |
"data/<hash>" | "checkpoints/<hash>", "offset": int, "length": int}`` with ``length`` at most
:data:`MAX_CHUNK`. Response: a JSON header line, then the bytes: ``{"size": total}\\n`` and the
slice ``[offset, offset + length)`` of the object, or ``{"error": "not-found", "message"}\\n``.
``refs/head`` answers the served head (a followed dataset under a trust policy other than
verify-all: its newest trusted head, as over HTTP). Objects are served only under their
multihash names; nothing else of a dataset (``info/``) is reachable.

:class:`StreamSource` is the pull side (``libp2p://<peer id>/<dataset>[?head=<multihash>]``):
each object is read in :data:`MAX_CHUNK` requests, and every byte is verified by the pull as
from any other source; with ``head`` the pull walks from that head (an announced one), not from
the peer's.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from coordinator.errors import DatasetNotFound, InvalidDatasetId, OdfNodeError
from coordinator.identity import DatasetId
from coordinator.multiformats import Multihash
from coordinator.storage.dataset import HEAD_REF
from coordinator.storage.repository import DatasetRepository
from node.transfer.errors import InvalidSourceUrl, TransientSourceError
from node.transfer.source_api import SingleObjectSource

PROTOCOL = "/odf/stp/1.0.0"
MAX_CHUNK = 512 * 1024
"""Bytes per response: the gossip host's request frames are capped at 1 MiB."""
SCHEME = "libp2p://"

Request = Callable[[str, str, bytes, float], Awaitable[bytes]]
"""``(peer, protocol, data, timeout_s) -> response``: the gossip transport's request."""
ServedHead = Callable[[DatasetId], "str | None"]


def _error(kind: str, message: str) -> bytes:
    return json.dumps({"error": kind, "message": message}).encode() + b"\n"


def serve(repo: DatasetRepository, served_head: ServedHead | None, request: bytes) -> bytes:
    """Answer one ``/odf/stp/1.0.0`` request from ``repo`` (blocking file reads: run it off the
    event loop)."""
    try:
        req = json.loads(request.decode("utf-8"))
        dataset, path = str(req["dataset"]), str(req["path"])
        offset, length = int(req["offset"]), int(req["length"])
    except (UnicodeDecodeError, ValueError, KeyError, TypeError):
        return _error("bad-request", "expected {dataset, path, offset, length}")
    if offset < 0 or not 0 <= length <= MAX_CHUNK:
        return _error("bad-request", f"offset >= 0 and 0 <= length <= {MAX_CHUNK}")
    try:
        handle = repo.resolve(dataset)
        ds = repo.open(dataset)
    except (DatasetNotFound, InvalidDatasetId, OdfNodeError):
        return _error("not-found", "dataset not found")
    if path == "refs/head":
        served = served_head(handle.id) if served_head is not None else None
        if served == "":
            return _error("not-found", "no trusted head yet")
        if served is not None:
            body = served.encode("ascii")
        else:
            ref = ds.layout.refs_dir / HEAD_REF
            if not ref.is_file():
                return _error("not-found", "empty dataset")
            body = ref.read_bytes()
        return json.dumps({"size": len(body)}).encode() + b"\n" + body[offset : offset + length]
    kind, _, name = path.partition("/")
    stores = {"blocks": ds.blocks, "data": ds.data, "checkpoints": ds.checkpoints}
    if kind not in stores or "/" in name:
        return _error("not-found", "no such path")
    try:
        h = Multihash.from_multibase(name)
    except (OdfNodeError, ValueError):
        return _error("not-found", "bad object name")
    file = stores[kind].path_of(h)
    if not file.is_file():
        return _error("not-found", "object not found")
    with open(file, "rb") as f:
        size = f.seek(0, 2)
        f.seek(offset)
        body = f.read(length)
    return json.dumps({"size": size}).encode() + b"\n" + body


class StreamSource(SingleObjectSource):
    """A dataset of a connected peer read over ``/odf/stp/1.0.0`` (``libp2p://peer/dataset``);
    no listing, no bulk transfer: blocks are read one by one.

    Failures to obtain bytes (no connection, a dropped stream, a timeout, not found) raise
    :class:`~node.transfer.errors.TransientSourceError`, as for every source.
    """

    def __init__(self, url: str, request: Request, *, timeout_s: float = 30.0) -> None:
        rest = url[len(SCHEME) :] if url.startswith(SCHEME) else ""
        rest, _, query = rest.partition("?")
        peer, _, dataset = rest.partition("/")
        if not peer or not dataset or "/" in dataset.rstrip("/"):
            raise InvalidSourceUrl(f"expected libp2p://<peer id>/<dataset>, got {url!r}")
        self.peer = peer
        self.dataset = dataset.rstrip("/")
        # ``?head=<multihash>``: pull exactly that head (an announced one) instead of the peer's
        # own: a carrier other than the announcer may be behind or elsewhere, and then has
        # the blocks or answers "not found", never a different chain.
        self.head: bytes | None = None
        for part in query.split("&") if query else ():
            key, _, value = part.partition("=")
            if key == "head" and value:
                try:
                    Multihash.from_multibase(value)
                except (OdfNodeError, ValueError) as e:
                    raise InvalidSourceUrl(f"{url!r}: bad head: {e}") from None
                self.head = value.encode("ascii")
        self.description = url
        self._request = request
        self._timeout_s = timeout_s

    async def _chunk(self, rel: str, offset: int) -> tuple[int, bytes]:

        body = json.dumps(
            {"dataset": self.dataset, "path": rel, "offset": offset, "length": MAX_CHUNK}
        ).encode()
        try:
            raw = await self._request(self.peer, PROTOCOL, body, self._timeout_s)
        except (OdfNodeError, OSError, TimeoutError) as e:
            raise TransientSourceError(f"{self.description}/{rel}: {e}") from e
        header, sep, data = raw.partition(b"\n")
        try:
            meta: dict[str, Any] = json.loads(header) if sep else {}
        except ValueError:
            meta = {}
        if "size" not in meta:
            why = meta.get("message") or "malformed response"
            raise TransientSourceError(f"{self.description}/{rel}: {why}")
        return int(meta["size"]), data

    @asynccontextmanager
    async def open(self, rel: str) -> AsyncIterator[AsyncIterator[bytes]]:
        """Stream ``rel`` in :data:`MAX_CHUNK` requests (``refs/head``: the requested head,
        if the URL names one)."""
        if rel == "refs/head" and self.head is not None:
            head = self.head

            async def one() -> AsyncIterator[bytes]:
                yield head

            yield one()
            return
        size, first = await self._chunk(rel, 0)

        async def chunks() -> AsyncIterator[bytes]:

            got, data = len(first), first
            yield data
            while got < size:
                _, data = await self._chunk(rel, got)
                if not data:
                    raise TransientSourceError(f"{self.description}/{rel}: short read")
                got += len(data)
                yield data

        yield chunks()

    async def close(self) -> None:
        """Nothing to release (the connection is the gossip host's)."""


__all__ = ["MAX_CHUNK", "PROTOCOL", "SCHEME", "StreamSource", "serve"]
