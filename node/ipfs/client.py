"""A small async client for the kubo RPC API (``/api/v0``) on aiohttp, and a gateway reader.

Only calls and parameters that kubo and the embedded Helia node (``js/helia-ipfs.mjs``) both
serve are used, and js-ipfs 0.66 accepted them too (see ``docs/ipfs.md``, "The RPC subset the
client uses"): ``block/put`` always sends
``cid-codec=raw`` *and* ``format=raw``; ``add`` sends ``cid-base=base32`` so CIDv1 strings
compare equal across daemons; every call has a timeout (an absent CID otherwise waits forever
under ``Routing.Type none``).

Why not ``ipfshttpclient``: unmaintained since 2021, its ``connect()`` refuses every current
daemon version, ``swarm.connect`` and pubsub are broken, and it is synchronous.

Both :class:`IpfsClient` and :class:`GatewayReader` implement :class:`IpfsReader`, the read
interface used by pulls: ``open_stream(path)`` yields the body of ``/ipfs/<cid>/<path>`` chunk
by chunk and raises :class:`IpfsError` (with the HTTP status, when there is one).
"""

from __future__ import annotations

import json
import mmap
import os
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

import aiohttp

from node.ipfs.errors import IpfsError
from node.ipfs.lazy import resolve_api

DEFAULT_TIMEOUT = aiohttp.ClientTimeout(total=None, connect=10, sock_read=60)


class IpfsReader(Protocol):
    """Read access to IPFS paths (``/ipfs/<cid>/sub/path``)."""

    def open_stream(self, ipfs_path: str) -> Any:
        """Async context manager yielding an ``AsyncIterator[bytes]`` of the content."""
        ...

    async def close(self) -> None:
        """Release the HTTP session."""
        ...


async def _read_all(reader: IpfsReader, ipfs_path: str, *, max_size: int | None = None) -> bytes:
    """The whole content of ``ipfs_path`` read through ``reader`` (refused beyond ``max_size``
    bytes, as soon as the stream passes it)."""
    buf = bytearray()
    async with reader.open_stream(ipfs_path) as chunks:
        async for chunk in chunks:
            buf += chunk
            if max_size is not None and len(buf) > max_size:
                raise IpfsError(f"{ipfs_path}: larger than {max_size} bytes")
    return bytes(buf)


@dataclass(frozen=True, slots=True)
class AddedEntry:
    """One line of ``add`` output."""

    name: str
    cid: str
    size: int


class _SessionOwner:
    def __init__(self, session: aiohttp.ClientSession | None) -> None:
        self._session = session
        self._own = session is None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=DEFAULT_TIMEOUT)
        return self._session

    async def close(self) -> None:
        """Close the session if this object created it."""
        if self._own and self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class IpfsClient(_SessionOwner):
    """kubo-compatible RPC client (``api_url`` like ``http://127.0.0.1:5001``)."""

    def __init__(
        self,
        api_url: str,
        *,
        session: aiohttp.ClientSession | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        super().__init__(session)
        self.api_url = api_url.rstrip("/")
        self.timeout_s = timeout_s

    async def _base(self) -> str:
        """``<api_url>/api/v0``, starting a node that starts on first use (node/ipfs/lazy.py)."""
        return await resolve_api(self.api_url) + "/api/v0"

    # -- plumbing ---------------------------------------------------------------------------

    def _params(self, params: dict[str, Any] | list[tuple[str, str]] | None) -> list[Any]:
        items = list(params.items()) if isinstance(params, dict) else list(params or [])
        out = [(k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in items]
        out.append(("timeout", f"{int(self.timeout_s * 1000)}ms"))
        return out

    async def _call(
        self,
        path: str,
        params: dict[str, Any] | list[tuple[str, str]] | None = None,
        data: Any = None,
    ) -> bytes:
        base = await self._base()
        try:
            async with self.session.post(
                f"{base}/{path}",
                params=self._params(params),
                data=data,
                timeout=aiohttp.ClientTimeout(total=self.timeout_s + 5),
            ) as r:
                body = await r.read()
                if r.status != 200:
                    raise IpfsError(f"{path}: HTTP {r.status}: {body[:300]!r}", r.status)
                return body
        except (aiohttp.ClientError, TimeoutError) as e:
            raise IpfsError(f"{path}: {type(e).__name__}: {e}") from e

    async def _json(self, path: str, params: Any = None, data: Any = None) -> list[dict[str, Any]]:
        body = await self._call(path, params, data)
        return [json.loads(line) for line in body.splitlines() if line.strip()]

    # -- identity / swarm --------------------------------------------------------------------

    async def version(self) -> dict[str, Any]:
        """``version``."""
        return (await self._json("version"))[0]

    async def id(self) -> dict[str, Any]:
        """``id`` (``ID``, ``Addresses`` -- the latter was empty on js-ipfs)."""
        return (await self._json("id"))[0]

    async def swarm_addrs_local(self) -> list[str]:
        """``swarm/addrs/local``: this node's listen multiaddrs."""
        return [str(a) for a in (await self._json("swarm/addrs/local"))[0].get("Strings") or []]

    async def swarm_connect(self, multiaddr: str) -> None:
        """``swarm/connect`` to a full multiaddr (``/ip4/…/tcp/…/p2p/<peer id>``)."""
        await self._call("swarm/connect", [("arg", multiaddr)])

    async def swarm_peers(self) -> list[str]:
        """Peer IDs currently connected."""
        peers = (await self._json("swarm/peers"))[0].get("Peers") or []
        return [str(p.get("Peer")) for p in peers]

    # -- content -----------------------------------------------------------------------------

    async def block_put(self, data: bytes) -> str:
        """Store a raw block; returns its CIDv1 (``bafk…``) on kubo and the embedded node."""
        form = aiohttp.FormData()
        form.add_field("file", data, filename="file", content_type="application/octet-stream")
        out = await self._json(
            "block/put",
            {"cid-codec": "raw", "format": "raw", "mhtype": "sha2-256", "cid-base": "base32"},
            form,
        )
        return str(out[0]["Key"])

    async def block_get(self, cid: str) -> bytes:
        """The raw bytes of a block."""
        return await self._call("block/get", [("arg", cid)])

    async def pin_add(self, cid: str, *, recursive: bool = True) -> None:
        """``pin/add``."""
        await self._call("pin/add", {"arg": cid, "recursive": recursive})

    async def ls(self, ipfs_path: str, *, resolve_type: bool = True) -> list[dict[str, Any]]:
        """``ls``: the links (``Name``, ``Hash``, ``Size``, ``Type``) of a directory.

        ``resolve_type=False`` leaves ``Type`` 0 (unknown) for a caller that only needs names
        and CIDs: the daemon then reads no child (the embedded node stats each dag-pb child,
        ~10 ms for a dataset's root against ~2 ms without).
        """
        params = [("arg", ipfs_path)]
        if not resolve_type:
            params.append(("resolve-type", "false"))
        out = await self._json("ls", params)
        return [dict(link) for obj in out for o in obj.get("Objects", []) for link in o["Links"]]

    async def cat(self, ipfs_path: str, *, max_size: int | None = None) -> bytes:
        """The whole content of a file (refused beyond ``max_size`` bytes)."""
        return await _read_all(self, ipfs_path, max_size=max_size)

    @asynccontextmanager
    async def _stream(self, call: str, arg: str) -> AsyncIterator[AsyncIterator[bytes]]:
        base = await self._base()
        try:
            async with self.session.post(
                f"{base}/{call}", params=self._params([("arg", arg)])
            ) as r:
                if r.status != 200:
                    body = await r.content.read(300)
                    raise IpfsError(f"{call} {arg}: HTTP {r.status}: {body!r}", r.status)
                # iter_any hands over whatever the socket delivered (often far more than 64 KiB):
                # fewer, larger chunks mean less per-chunk Python work when hashing parts.
                yield r.content.iter_any()
        except (aiohttp.ClientError, TimeoutError) as e:
            raise IpfsError(f"{call} {arg}: {type(e).__name__}: {e}") from e

    def open_stream(self, ipfs_path: str) -> AbstractAsyncContextManager[AsyncIterator[bytes]]:
        """Stream ``cat`` of ``/ipfs/<cid>/path``; errors raise :class:`IpfsError`."""
        return self._stream("cat", ipfs_path)

    def open_dag_export(self, cid: str) -> AbstractAsyncContextManager[AsyncIterator[bytes]]:
        """Stream ``dag/export`` of ``cid``: a CARv1 of every block of its DAG (one call)."""
        return self._stream("dag/export", cid)

    async def add_directory(
        self, root: Path, *, exclude_top: frozenset[str] = frozenset(), pin: bool = True
    ) -> str:
        """Add ``root`` recursively like ``ipfs add -r --cid-version 1 --raw-leaves``.

        Top-level entries named in ``exclude_top`` (e.g. ``info``) are left out, as kamu does
        with ``--ignore``; hidden ``.pending-*`` staging files are never sent. Returns the
        root directory's CID (base32 CIDv1).
        """
        files: list[tuple[str, Path | None]] = []  # (relative path, file or None for a dir)
        top = root.name
        files.append((top, None))
        for dirpath, dirnames, all_files in os.walk(root):
            rel = Path(dirpath).relative_to(root)
            filenames = all_files
            if rel == Path("."):
                dirnames[:] = sorted(d for d in dirnames if d not in exclude_top)
                filenames = [f for f in all_files if f not in exclude_top]
            else:
                dirnames.sort()
            for d in dirnames:
                files.append((str(Path(top) / rel / d), None))
            for f in sorted(filenames):
                if not f.startswith("."):
                    files.append((str(Path(top) / rel / f), Path(dirpath) / f))
        # File parts are memory-mapped views, so the request has a Content-Length: js-ipfs 0.66
        # stalls on large chunked multipart uploads (measured: 20 x 10 MB never completes),
        # and mmap keeps memory use at the page cache's discretion instead of the heap's.
        maps: list[mmap.mmap] = []
        views: list[memoryview] = []
        try:
            with aiohttp.MultipartWriter("form-data") as mp:
                for name, src in files:
                    disposition = f'form-data; name="file"; filename="{quote(name, safe="")}"'
                    if src is None:
                        part = mp.append(b"", {"Content-Type": "application/x-directory"})
                    else:
                        body: bytes | memoryview = b""
                        with open(src, "rb") as fh:
                            if os.fstat(fh.fileno()).st_size > 0:
                                mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
                                maps.append(mm)
                                body = memoryview(mm)
                                views.append(body)
                        part = mp.append(body, {"Content-Type": "application/octet-stream"})
                    part.headers["Content-Disposition"] = disposition
                out = await self._json(
                    "add",
                    {
                        "cid-version": 1,
                        "raw-leaves": True,
                        "cid-base": "base32",
                        "pin": pin,
                        "wrap-with-directory": False,
                        "progress": False,
                    },
                    mp,
                )
        finally:
            for v in views:
                try:
                    v.release()
                except BufferError:  # a slice is still referenced; the GC releases it
                    pass
            for mm in maps:
                try:
                    mm.close()
                except BufferError:
                    pass
        for entry in out:
            if entry.get("Name") == top:
                return str(entry["Hash"])
        raise IpfsError(f"add: no root entry for {top!r} in the response")

    async def add_bytes(self, data: bytes, *, pin: bool = True) -> str:
        """Add one file (CIDv1, raw leaves); returns its CID."""
        form = aiohttp.FormData()
        form.add_field("file", data, filename="file", content_type="application/octet-stream")
        out = await self._json(
            "add", {"cid-version": 1, "raw-leaves": True, "cid-base": "base32", "pin": pin}, form
        )
        return str(out[-1]["Hash"])

    # -- IPNS (optional) ---------------------------------------------------------------------

    async def name_publish(self, ipfs_path: str, *, key: str = "self") -> str:
        """Publish ``ipfs_path`` under IPNS ``key`` (``resolve=false``, ``allow-offline``)."""
        out = await self._json(
            "name/publish",
            {"arg": ipfs_path, "key": key, "resolve": False, "allow-offline": True},
        )
        return str(out[0]["Name"])

    async def name_resolve(self, name: str) -> str:
        """Resolve an IPNS name to an ``/ipfs/…`` path (recursively, as kubo does by default).

        The embedded node (no DHT) resolves names whose record is in its own datastore
        (published by this node, or received over IPNS pubsub) without any network.
        """
        out = await self._json("name/resolve", {"arg": name, "recursive": True})
        return str(out[0]["Path"])


class GatewayReader(_SessionOwner):
    """Read-only access through an HTTP gateway (``GET {gateway}/ipfs/<cid>/path``)."""

    def __init__(self, gateway_url: str, *, session: aiohttp.ClientSession | None = None) -> None:
        super().__init__(session)
        self.base = gateway_url.rstrip("/")

    @asynccontextmanager
    async def open_stream(self, ipfs_path: str) -> AsyncIterator[AsyncIterator[bytes]]:
        """Stream the content of ``ipfs_path``; non-200 answers raise :class:`IpfsError`."""
        try:
            async with self.session.get(f"{self.base}{ipfs_path}") as r:
                if r.status != 200:
                    raise IpfsError(f"GET {ipfs_path}: HTTP {r.status}", r.status)
                yield r.content.iter_any()
        except (aiohttp.ClientError, TimeoutError) as e:
            raise IpfsError(f"GET {ipfs_path}: {type(e).__name__}: {e}") from e

    async def cat(self, ipfs_path: str, *, max_size: int | None = None) -> bytes:
        """The whole content (refused beyond ``max_size`` bytes)."""
        return await _read_all(self, ipfs_path, max_size=max_size)


__all__ = [
    "DEFAULT_TIMEOUT",
    "AddedEntry",
    "GatewayReader",
    "IpfsClient",
    "IpfsError",
    "IpfsReader",
]
