"""Where a pull reads from: one interface over HTTP, IPFS (RPC or gateway) and directories.

A :class:`Source` maps a relative dataset path (``refs/head``, ``blocks/<hash>``,
``data/<hash>``, ``checkpoints/<hash>``) to a byte stream. Every failure to obtain the bytes
(timeout, connection error, 404, 5xx) raises :class:`TransientSourceError`: the pull treats it
as "unknown, retry with backoff", never as "absent".

HTTP sources contact only what their :class:`~node.transfer.policy.SourcePolicy` allows: the
base URL, every redirect hop (followed here, at most ``MAX_REDIRECTS``, each checked) and every
address a host name resolves to (:class:`~node.transfer.policy.PolicyResolver`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import unquote, urlparse

import aiohttp
from aiohttp.abc import AbstractResolver
from yarl import URL

from node.ipfs.car import RAW_CODEC, CarError, read_car
from node.ipfs.client import GatewayReader, IpfsClient, IpfsError, IpfsReader
from node.transfer.errors import InvalidSourceUrl, SourceRefused, TransientSourceError
from node.transfer.policy import PolicyResolver, SourcePolicy
from node.transfer.source_api import SingleObjectSource, Source

_CHUNK = 1 << 20
StreamRequest = Callable[[str, str, bytes, float], Awaitable[bytes]]
"""``(peer, protocol, data, timeout_s) -> response`` of the gossip transport."""
MAX_REDIRECTS = 5
_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


class SharedHttpSession:
    """One HTTP client session for every :class:`HttpSource` of one loop, so connections are
    kept alive across pulls (a pull reads ``refs/head`` and one or two blocks: a new
    connection for each pull cost more than the reads themselves).

    Connections go only where ``policy`` allows, as for a source's own session. Create and use
    it on one loop; :meth:`close` it there.
    """

    def __init__(
        self,
        *,
        timeout_s: float = 30.0,
        policy: SourcePolicy | None = None,
        resolver: AbstractResolver | None = None,
        limit: int = 100,
    ) -> None:
        """``limit`` bounds the open connections of the session (aiohttp's connector limit):
        every pull and every poll of a source followed by URL share them."""
        self.policy = policy if policy is not None else SourcePolicy()
        self._limit = limit
        self._resolver = resolver
        self._timeout = aiohttp.ClientTimeout(total=None, connect=timeout_s, sock_read=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    def get(self) -> aiohttp.ClientSession:
        """The session (made on first use, on the calling loop)."""
        if self._session is None or self._session.closed:
            # Every host name goes through the policy resolver: aiohttp connects only to the
            # addresses it returns, so what is checked is what is connected to. No proxies from
            # the environment (trust_env=False): a proxy would connect on our behalf, unchecked.
            connector = aiohttp.TCPConnector(
                resolver=PolicyResolver(self.policy, self._resolver), limit=self._limit
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=self._timeout,
                auto_decompress=False,
                raise_for_status=False,
                trust_env=False,
            )
        return self._session

    async def close(self) -> None:
        """Close the session and its connections."""
        if self._session is not None:
            await self._session.close()
            self._session = None


async def policy_get(
    http: SharedHttpSession, url: str, headers: dict[str, str] | None = None
) -> aiohttp.ClientResponse:
    """``GET url``, following at most ``MAX_REDIRECTS`` redirects, each policy-checked.

    aiohttp's own redirect following would contact any host a source names; here every
    hop's URL is checked (scheme, IP literal) before it is requested, and its host name is
    checked by the resolver like the first one.

    Raises:
        InvalidSourceUrl, SourceRefused: the URL or a redirect is not one the policy allows.
        TransientSourceError: too many redirects.
    """
    policy = http.policy
    target = policy.check_url(url, "source")
    for _ in range(MAX_REDIRECTS + 1):
        r = await http.get().get(target, allow_redirects=False, headers=headers)
        location = r.headers.get("Location")
        if r.status not in _REDIRECT_STATUSES or not location:
            return r
        r.release()
        try:
            nxt = target.join(URL(location))
        except ValueError as e:
            raise SourceRefused(f"redirect from {str(target)!r} to {location!r}: {e}") from None
        try:
            target = policy.check_url(nxt, f"redirect from {str(target)!r} to")
        except InvalidSourceUrl as e:
            raise SourceRefused(str(e)) from None
    raise TransientSourceError(f"more than {MAX_REDIRECTS} redirects from {url}")


class HttpSource(SingleObjectSource):
    """ODF Simple Transfer Protocol over HTTP(S): ``GET {base}/{rel}`` (the protocol has no
    listing and no bulk transfer).

    Only addresses ``policy`` allows are contacted (default: loopback only, the policy of a
    node with the default configuration). ``resolver`` replaces the system resolver under the
    policy check (tests).

    Raises:
        InvalidSourceUrl: ``base_url`` is not an ``http(s)://`` URL with a host.
        SourceRefused: its host is an IP address the policy refuses.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 30.0,
        policy: SourcePolicy | None = None,
        resolver: AbstractResolver | None = None,
        shared: SharedHttpSession | None = None,
    ) -> None:
        self.base = base_url.rstrip("/")
        self.description = self.base
        # A shared session brings its own policy: the one its resolver enforces.
        self._owned = shared is None
        self._http = shared or SharedHttpSession(
            timeout_s=timeout_s, policy=policy, resolver=resolver
        )
        self.policy = self._http.policy
        self.policy.check_url(self.base)

    def _sess(self) -> aiohttp.ClientSession:
        return self._http.get()

    async def _get(self, url: str, headers: dict[str, str] | None = None) -> aiohttp.ClientResponse:
        """``GET url`` under the policy (see :func:`policy_get`)."""
        return await policy_get(self._http, url, headers)

    @asynccontextmanager
    async def open(self, rel: str) -> AsyncIterator[AsyncIterator[bytes]]:
        """Stream ``GET {base}/{rel}``."""
        try:
            async with await self._get(f"{self.base}/{rel}") as r:
                if r.status != 200:
                    raise TransientSourceError(f"HTTP {r.status}")
                yield r.content.iter_any()
        except (aiohttp.ClientError, TimeoutError) as e:
            raise TransientSourceError(f"{type(e).__name__}: {e}") from e

    async def conditional_head(
        self, etag: str | None, last_modified: str | None, cap: int = 1024
    ) -> tuple[int, bytes, str | None, str | None]:
        """``GET {base}/refs/head`` with ``If-None-Match`` / ``If-Modified-Since`` when known:
        ``(status, body, etag, last_modified)``; 304 has an empty body. A body over ``cap``
        bytes, or any status but 200 and 304, raises :class:`TransientSourceError`."""
        headers = {}
        if etag:
            headers["If-None-Match"] = etag
        if last_modified:
            headers["If-Modified-Since"] = last_modified
        try:
            async with await self._get(f"{self.base}/refs/head", headers) as r:
                tag = r.headers.get("ETag") or etag
                modified = r.headers.get("Last-Modified") or last_modified
                if r.status == 304:
                    return 304, b"", tag, modified
                if r.status != 200:
                    raise TransientSourceError(f"HTTP {r.status}")
                body = await r.content.read(cap + 1)
                if len(body) > cap:
                    raise TransientSourceError(f"refs/head longer than {cap} bytes")
                return 200, body, r.headers.get("ETag"), r.headers.get("Last-Modified")
        except (aiohttp.ClientError, TimeoutError) as e:
            raise TransientSourceError(f"{type(e).__name__}: {e}") from e

    async def close(self) -> None:
        """Close the HTTP session (unless it is shared)."""
        if self._owned:
            await self._http.close()


class IpfsSource:
    """A dataset directory on IPFS (``/ipfs/<cid>[/path]`` or ``/ipns/…``) read via a reader.

    Through the RPC API an ``/ipns/<name>`` root is resolved once (``name/resolve``), on first
    use, and every later read goes to the ``/ipfs/…`` path it pointed to then: one pull sees
    one snapshot even if the name is re-published meanwhile, and js-ipfs refuses ``cat`` of
    ``/ipns/`` paths anyway (HTTP 400). A gateway resolves ``/ipns/`` paths itself.
    """

    def __init__(self, reader: IpfsReader, root_path: str) -> None:
        self.reader = reader
        self.root = root_path.rstrip("/")
        self.description = self.root
        self._resolved: str | None = None
        # rel path -> CID learnt from listings: reading /ipfs/<cid> skips resolving the path
        # through a directory of thousands of entries on every request (js-ipfs: ~10x faster).
        self._cids: dict[str, str] = {}

    async def resolved_root(self) -> str:
        """The ``/ipfs/…`` root this source reads (IPNS resolved once, via the RPC API).

        Raises:
            TransientSourceError: the name could not be resolved (unknown, retried).
        """
        if self._resolved is not None:
            return self._resolved
        root = self.root
        if root.startswith("/ipns/") and isinstance(self.reader, IpfsClient):
            name, _, sub = root[len("/ipns/") :].partition("/")
            try:
                target = await self.reader.name_resolve(name)
            except (IpfsError, aiohttp.ClientError, TimeoutError, KeyError, IndexError) as e:
                raise TransientSourceError(f"cannot resolve /ipns/{name}: {e}") from e
            root = target.rstrip("/") + (f"/{sub}" if sub else "")
        self._resolved = root
        return root

    @asynccontextmanager
    async def open(self, rel: str) -> AsyncIterator[AsyncIterator[bytes]]:
        """Stream ``{root}/{rel}`` (IPFS errors and timeouts are transient)."""
        cid = self._cids.get(rel)
        path = f"/ipfs/{cid}" if cid else f"{await self.resolved_root()}/{rel}"
        try:
            async with self.reader.open_stream(path) as chunks:
                yield chunks
        except (IpfsError, aiohttp.ClientError, TimeoutError) as e:
            raise TransientSourceError(str(e)) from e

    async def list_names(self, rel_dir: str) -> list[str] | None:
        """``ls`` through the RPC API (gateways cannot list; then ``None``)."""
        if not isinstance(self.reader, IpfsClient):
            return None
        try:
            entries = await self.reader.ls(
                f"{await self.resolved_root()}/{rel_dir}", resolve_type=False
            )
        except (IpfsError, TransientSourceError):
            return None
        for e in entries:
            self._cids[f"{rel_dir}/{e['Name']}"] = str(e["Hash"])
        return [str(e["Name"]) for e in entries]

    async def export_blocks(
        self, max_bytes: int, on_block: Callable[[bytes], None] | None = None
    ) -> list[bytes] | None:
        """Every raw leaf under ``blocks/`` from one ``dag/export`` (RPC API only).

        One call instead of one round trip per block (js-ipfs: ~0.7 s for 1,000 blocks against
        ~3.4 ms per block). A block file added with ``--raw-leaves`` below the chunk size is a
        single raw leaf whose bytes are the file; larger ones are not returned whole and are
        fetched by name later. Any failure returns ``None`` (the caller falls back).
        """
        if not isinstance(self.reader, IpfsClient):
            return None
        client = self.reader
        try:
            cid = self._cids.get("blocks")
            if cid is None:
                for e in await client.ls(await self.resolved_root(), resolve_type=False):
                    self._cids[str(e["Name"])] = str(e["Hash"])
                cid = self._cids.get("blocks")
            if cid is None:
                return None
            out: list[bytes] = []
            async with client.open_dag_export(cid) as chunks:
                async for block in read_car(chunks, max_bytes=max_bytes):
                    if block.codec == RAW_CODEC:
                        out.append(block.data)
                        if on_block is not None:
                            on_block(block.data)
            return out
        except (IpfsError, CarError, TransientSourceError, aiohttp.ClientError, TimeoutError):
            return None

    async def close(self) -> None:
        """Close the reader's session."""
        await self.reader.close()


class LocalSource(SingleObjectSource):
    """A dataset directory on a local filesystem (no bulk transfer: local files are read one
    by one as cheaply as in bulk)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.description = str(root)

    @asynccontextmanager
    async def open(self, rel: str) -> AsyncIterator[AsyncIterator[bytes]]:
        """Stream a file under the root."""
        path = self.root / rel
        try:
            f = open(path, "rb")  # noqa: SIM115 - closed in finally
        except OSError as e:
            raise TransientSourceError(f"{path}: {e.strerror}") from e

        async def chunks() -> AsyncIterator[bytes]:
            while chunk := f.read(_CHUNK):
                yield chunk
                await asyncio.sleep(0)

        try:
            yield chunks()
        finally:
            f.close()

    async def list_names(self, rel_dir: str) -> list[str] | None:
        """Directory entries."""
        try:
            return [p.name for p in (self.root / rel_dir).iterdir()]
        except OSError:
            return None

    async def close(self) -> None:
        """Nothing to release."""


def open_source(
    url: str,
    *,
    ipfs_api: str | None = None,
    ipfs_gateway: str | None = None,
    timeout_s: float = 30.0,
    policy: SourcePolicy | None = None,
    http: SharedHttpSession | None = None,
    p2p_request: StreamRequest | None = None,
) -> Source:
    """A :class:`Source` for a pull URL.

    ``ipfs://CID[/path]`` and ``ipns://NAME[/path]`` go through the RPC API ``ipfs_api`` if
    given, else through the HTTP gateway ``ipfs_gateway`` (default ``http://127.0.0.1:8080``,
    kamu's default); ``http(s)://`` is the Simple Transfer Protocol, under ``policy`` (default:
    loopback only; with ``http``, over that shared session and under its policy);
    ``file://`` and plain paths are local directories; ``libp2p://<peer id>/<dataset>`` reads
    a connected peer over ``/odf/stp/1.0.0`` through ``p2p_request`` (the gossip transport's
    request; :mod:`node.transfer.streams`). The IPFS API and gateway are the operator's own
    configuration and are not policy-checked; a libp2p source is a peer already connected and
    authenticated, not an address.

    Raises:
        InvalidSourceUrl: an empty URL, an unsupported scheme or a missing CID / host.
        SourceRefused: an HTTP URL whose host is an IP address ``policy`` refuses.
    """
    if not url.strip():
        raise InvalidSourceUrl("empty pull URL")
    u = urlparse(url)
    if u.scheme in ("ipfs", "ipns"):
        if not u.netloc:
            raise InvalidSourceUrl(f"missing CID / name in {url!r}")
        reader: IpfsReader
        if ipfs_api:
            reader = IpfsClient(ipfs_api, timeout_s=timeout_s)
        else:
            reader = GatewayReader(ipfs_gateway or "http://127.0.0.1:8080")
        return IpfsSource(reader, f"/{u.scheme}/{u.netloc}{u.path}")
    if u.scheme in ("http", "https"):
        return HttpSource(url, timeout_s=timeout_s, policy=policy, shared=http)
    if u.scheme == "libp2p":
        from node.transfer.streams import StreamSource

        if p2p_request is None:
            raise InvalidSourceUrl(f"{url!r}: libp2p sources need the daemon's gossip host")
        return StreamSource(url, p2p_request, timeout_s=timeout_s)
    if u.scheme == "file":
        return LocalSource(Path(unquote(u.path)))
    if u.scheme == "" or (len(u.scheme) == 1 and url[1:3] in (":\\", ":/")):
        return LocalSource(Path(url).expanduser())
    raise InvalidSourceUrl(
        f"unsupported URL scheme {u.scheme!r} in {url!r} (use ipfs://, ipns://, http://, "
        "https://, libp2p://, file:// or a local path)"
    )


def default_alias(url: str) -> str:
    """The local name kamu would use: the URL's last non-empty path segment (or host / CID).

    Raises:
        InvalidSourceUrl: there is no such segment (e.g. ``/``).
    """
    u = urlparse(url)
    segments = [s for s in unquote(u.path).split("/") if s]
    if segments:
        return segments[-1]
    if u.netloc:
        return u.netloc
    raise InvalidSourceUrl(f"cannot derive a dataset name from {url!r}; pass --as NAME")
