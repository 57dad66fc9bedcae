"""The transfer port over :mod:`node.transfer.pull` (IPFS, IPNS, HTTP, local paths)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from coordinator.multiformats import Multihash
from coordinator.storage.repository import DatasetRepository
from node.adapters.loop_thread import LoopThread
from node.app.errors import Unavailable
from node.app.fetch import (
    PullDiverged,
    PullOverBudget,
    PullRefused,
    PullRejected,
    PullTooSlow,
    PullUnreachable,
)
from node.app.ports import (
    ContainerRequest,
    ContainerResponse,
    HeadProbe,
    MqttRequest,
    SourceResponse,
)
from node.config import NodeConfig
from node.transfer.policy import SourcePolicy

if TYPE_CHECKING:
    from node.app.ports import EthereumLogsRequest
    from node.transfer.pull import PullOptions
    from node.transfer.source_api import Source
    from node.transfer.sources import SharedHttpSession, StreamRequest


def source_policy(config: NodeConfig | None) -> SourcePolicy:
    """The HTTP source policy of ``config`` (``None``: the default config's, loopback only).

    ``loopback-only`` isolation allows loopback sources only, whatever ``[transfer]`` says;
    open isolation allows public addresses plus what ``transfer.allow_private_sources`` and
    ``transfer.allowed_source_networks`` add.
    """
    if config is None or config.network.loopback_only:
        return SourcePolicy()
    t = config.transfer
    return SourcePolicy.open(
        allow_private=t.allow_private_sources, allowed_networks=t.allowed_source_networks
    )


@contextlib.contextmanager
def _as_pull_errors() -> Iterator[None]:
    """The fetcher's refusals as the application's pull errors (:class:`PullDiverged` ...)."""
    from node.transfer.errors import (
        DivergedHeads,
        InvalidSourceUrl,
        ObjectRejected,
        SourceHeadUnreachable,
        SourceRefused,
        SourceTooSlow,
        StorageBudgetExceeded,
    )

    try:
        yield
    except StorageBudgetExceeded as e:
        raise PullOverBudget(str(e), needed=e.needed, allowed=e.allowed) from e
    except DivergedHeads as e:
        raise PullDiverged(str(e)) from e
    except ObjectRejected as e:
        raise PullRejected(str(e)) from e
    except SourceRefused as e:
        raise PullRefused(str(e), e.setting) from e
    except InvalidSourceUrl as e:
        raise PullRefused(str(e)) from e
    except SourceHeadUnreachable as e:
        raise PullUnreachable(str(e)) from e
    except SourceTooSlow as e:
        raise PullTooSlow(str(e)) from e


async def _read_capped(source: Source, path: str, limit: int, too_long: str) -> bytes:
    """``path`` of ``source`` read whole; over ``limit`` bytes a transient failure saying
    ``too_long``."""
    from node.transfer.errors import TransientSourceError

    buf = bytearray()
    async with source.open(path) as chunks:
        async for c in chunks:
            buf += c
            if len(buf) > limit:
                raise TransientSourceError(too_long)
    return bytes(buf)


def _tree_bytes(root: Path) -> int:
    total = 0
    stack = [root]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for e in it:
                    try:
                        if e.is_dir(follow_symlinks=False):
                            stack.append(Path(e.path))
                        elif e.is_file(follow_symlinks=False):
                            total += e.stat(follow_symlinks=False).st_size
                    except OSError:
                        continue  # removed meanwhile (a pull's clean-up)
        except OSError:
            continue
    return total


@dataclass(eq=False)
class DiskBudget:
    """``[storage]``: bytes of the datasets the node stores but does not own, against
    ``max_bytes``, and the free space of their file system, against ``min_free_bytes``.

    A pull asks :meth:`admit` for the bytes it will add once its chain is validated, before it
    downloads data (``PullOptions.admit``); what concurrent pulls were admitted counts as used
    until they end. The directory scan (every dataset directory without a dataset key, and
    every hidden staging directory) is repeated at most every ``rescan_s`` seconds; in between,
    admitted pulls are added to it.
    """

    repo: DatasetRepository
    max_bytes: int
    min_free_bytes: int
    _: KW_ONLY
    rescan_s: float = 60.0
    clock: Callable[[], float] = time.monotonic
    _used: int | None = field(init=False, default=None)
    _scanned_at: float = field(init=False, default=0.0)
    _in_flight: int = field(init=False, default=0)

    def scan(self) -> int:
        """Bytes of the stored, not owned datasets (and of unfinished pulls), read from disk."""
        root = self.repo.root
        if not root.is_dir():
            return 0
        total = 0
        owned = {h.root for h in self.repo.list() if self.repo.key_path(h.id).is_file()}
        for p in root.iterdir():
            if p.is_dir() and p not in owned:
                total += _tree_bytes(p)
        return total

    async def refresh(self) -> None:
        """Rescan if the last scan is older than ``rescan_s`` (off the calling loop)."""
        if self.max_bytes and (
            self._used is None or self.clock() - self._scanned_at >= self.rescan_s
        ):
            self._used = await asyncio.to_thread(self.scan)
            self._scanned_at = self.clock()

    @property
    def used(self) -> int:
        """Bytes in use as last scanned, plus what was admitted since."""
        return (self._used or 0) + self._in_flight

    def admit(self, need: int) -> None:
        """Reserve ``need`` bytes for a pull, or refuse it.

        Raises:
            StorageBudgetExceeded: over ``max_bytes``, or under ``min_free_bytes`` free.
        """
        from node.transfer.errors import StorageBudgetExceeded

        if self.max_bytes and self.used + need > self.max_bytes:
            raise StorageBudgetExceeded(
                f"the pull needs {need} bytes; followed datasets use {self.used} of the "
                f"{self.max_bytes} allowed by [storage] max_bytes",
                needed=need,
                allowed=max(0, self.max_bytes - self.used),
            )
        free = shutil.disk_usage(self.repo.root).free - self._in_flight
        if free - need < self.min_free_bytes:
            raise StorageBudgetExceeded(
                f"the pull needs {need} bytes; {free} are free on the datasets' file system and "
                f"[storage] min_free_bytes keeps {self.min_free_bytes}",
                needed=need,
                allowed=max(0, free - self.min_free_bytes),
            )
        self._in_flight += need

    def settle(self, need: int) -> None:
        """A pull admitted for ``need`` bytes ended: count them as used (the next scan
        corrects this if it wrote less)."""
        self._in_flight -= need
        if self._used is not None:
            self._used += need


_MAX_REF = 1024
_MAX_BLOCK = 16 << 20
_T = TypeVar("_T")


class TransferAdapter:
    """:class:`~node.app.ports.TransferPort`: pulls into ``repo``; errors in the app's terms.
    Also the :class:`~node.app.ports.SourcePort` of sources followed by URL (their polls share
    the pulls' one HTTP session, whose connections ``[follow] max_connections`` bounds).

    ``config`` supplies the source policy and the pace of reads (``[network]``,
    ``[transfer]``); without one the defaults apply. User-requested pulls (``dataset.pull``,
    the CLI) and announcement-derived ones go through the same policy.

    With a ``loop_thread`` (the daemon's), every pull runs on that thread's loop, so its many
    small steps never hold the caller's loop; cancelling the caller cancels the pull and
    returns only once it has unwound (see :mod:`node.adapters.loop_thread`).
    """

    def __init__(
        self,
        repo: DatasetRepository,
        ipfs_api: Callable[[], str | None],
        ipfs_gateway: str | None = None,
        *,
        config: NodeConfig | None = None,
        loop_thread: LoopThread | None = None,
        p2p_request: StreamRequest | None = None,
    ) -> None:
        self._repo = repo
        self._p2p_request = p2p_request
        # The gossip transport lives on the caller's loop; pulls may run on the loop thread's.
        self._home_loop: asyncio.AbstractEventLoop | None = None
        with contextlib.suppress(RuntimeError):
            self._home_loop = asyncio.get_running_loop()
        self._loop_thread = loop_thread
        self._ipfs_api = ipfs_api
        self._ipfs_gateway = ipfs_gateway
        self._config = config
        self._policy = source_policy(config)
        # With a loop thread, one HTTP session serves every pull (kept-alive connections); it
        # lives on that loop. Without one (the CLI's single pull), each pull has its own.
        self._http: SharedHttpSession | None = None
        storage = config.storage if config is not None else None
        self.budget = DiskBudget(
            repo,
            storage.max_bytes if storage else 0,
            storage.min_free_bytes if storage else 0,
        )

    async def pull(self, url: str, *, alias: str | None, force: bool = False) -> dict[str, Any]:
        """Pull ``url``; :class:`PullDiverged` / :class:`PullRejected` / :class:`PullRefused` /
        :class:`PullUnreachable` / :class:`PullTooSlow` for the fetcher's choices."""
        # Imported here: the pull brings pyarrow, which an idle daemon should not pay for.
        from node.transfer.pull import pull_url

        if self._http is None and self._loop_thread is not None:
            self._http = self._session()
        budget = self.budget
        admitted: list[int] = []

        def admit(need: int) -> None:
            budget.admit(need)
            admitted.append(need)

        options = self._pull_options(admit)
        ipfs_api = self._ipfs_api()
        bridged = self._bridged_request if self._p2p_request is not None else None

        async def pulling() -> Any:
            await budget.refresh()
            try:
                return await pull_url(
                    self._repo,
                    url,
                    alias=alias,
                    force=force,
                    ipfs_api=ipfs_api,
                    ipfs_gateway=self._ipfs_gateway,
                    options=options,
                    policy=self._policy,
                    http=self._http,
                    p2p_request=bridged,
                )
            finally:
                for need in admitted:
                    budget.settle(need)

        with _as_pull_errors():
            if self._loop_thread is not None:
                result = await self._loop_thread.run(pulling())
            else:
                result = await pulling()
        return dict(result.to_dict())

    def _pull_options(self, admit: Callable[[int], None]) -> PullOptions:
        """The configured deadlines, with every download admitted against the budget."""
        from node.transfer.pull import PullOptions

        options = PullOptions()
        if self._config is not None:
            t = self._config.transfer
            options = PullOptions(
                deadline_base_s=t.deadline_base_s,
                min_rate_bytes_per_s=float(t.min_rate_bytes_per_s),
                first_contact_s=t.first_contact_s,
                direct_io=t.direct_io,
            )
        # With a budget, nothing is downloaded before the chain is validated and admitted:
        # no speculative data download of a new dataset.
        return dataclasses.replace(
            options,
            admit=admit,
            max_speculative_bytes=0 if self.budget.max_bytes else options.max_speculative_bytes,
        )

    async def _bridged_request(
        self, peer: str, protocol: str, data: bytes, timeout_s: float
    ) -> bytes:
        """The gossip transport's request, run on the loop the transport lives on."""
        assert self._p2p_request is not None
        call = self._p2p_request(peer, protocol, data, timeout_s)
        home = self._home_loop
        if home is None or home is asyncio.get_running_loop():
            return await call
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(call, home))  # type: ignore[arg-type]

    async def fetch_source(
        self, url: str, headers: dict[str, str], target: Path, max_bytes: int
    ) -> SourceResponse:
        """Fetch a polling source's URL: ``GET`` for http(s) (:mod:`node.transfer.source_fetch`),
        ``RETR`` for ftp(s) in a worker thread (:mod:`node.transfer.ftp_fetch`)."""
        from node.transfer.errors import InvalidSourceUrl, SourceRefused
        from node.transfer.ftp_fetch import FTP_SCHEMES, fetch_ftp_to_file
        from node.transfer.source_fetch import fetch_url_to_file

        if url.split(":", 1)[0].lower() in FTP_SCHEMES:
            try:
                ftp = await asyncio.to_thread(
                    fetch_ftp_to_file,
                    url,
                    headers,
                    target,
                    policy=self._policy,
                    max_bytes=max_bytes,
                )
            except SourceRefused as e:
                raise PullRefused(str(e)) from e
            return SourceResponse(ftp.modified, ftp.etag, ftp.last_modified)

        async def run() -> SourceResponse:
            if self._http is not None:
                got = await fetch_url_to_file(self._http, url, headers, target, max_bytes=max_bytes)
            else:
                http = self._session()
                try:
                    got = await fetch_url_to_file(http, url, headers, target, max_bytes=max_bytes)
                finally:
                    await http.close()
            return SourceResponse(got.modified, got.etag, got.last_modified)

        if self._http is None and self._loop_thread is not None:
            self._http = self._session()
        try:
            result: SourceResponse = await self._run(run())
        except (SourceRefused, InvalidSourceUrl) as e:
            raise PullRefused(str(e)) from e
        return result

    async def fetch_container(
        self, request: ContainerRequest, target: Path, workdir: Path
    ) -> ContainerResponse:
        """Run a ``Container`` fetch step (see :mod:`node.transfer.container_fetch`) in a worker
        thread (the runtime is a child process)."""
        from node.transfer.container_fetch import ContainerFetch, find_runtime, run_container

        r = request
        runtime = find_runtime(r.runtime, r.storage, None)
        fetch = ContainerFetch(
            r.image,
            r.command,
            r.args,
            r.env,
            prev_etag=r.prev_etag,
            prev_last_modified=r.prev_last_modified,
            network=r.network,
            # Images are pulled only by a node whose containers have a network and that is not
            # confined to loopback.
            may_pull=r.network and not self._policy.loopback_only,
            timeout_s=r.timeout_s,
            memory_bytes=r.memory_bytes,
            max_bytes=r.max_bytes,
        )
        got = await asyncio.to_thread(run_container, runtime, fetch, target, workdir)
        return ContainerResponse(got.size, got.etag, got.last_modified, got.has_more)

    async def fetch_ethereum_logs(self, request: EthereumLogsRequest, target: Path) -> str | None:
        """Poll an Ethereum node's logs (see :mod:`node.transfer.evm_fetch`) in a worker thread,
        its address checked by the source policy first."""
        from node.transfer.errors import SourceRefused
        from node.transfer.evm_fetch import fetch_ethereum_logs, node_host

        host, _ = node_host(request.node_url)
        try:
            await asyncio.to_thread(
                self._policy.checked_addresses, host, None, f"Ethereum node {host}"
            )
        except SourceRefused as e:
            raise PullRefused(str(e)) from e
        got = await asyncio.to_thread(
            fetch_ethereum_logs,
            node_url=request.node_url,
            chain_id=request.chain_id,
            filter_text=request.filter,
            signature=request.signature,
            previous_state=request.previous_state,
            target=target,
            max_bytes=request.max_bytes,
        )
        return got.state

    async def fetch_mqtt(self, request: MqttRequest, target: Path) -> int:
        """Fetch an ``Mqtt`` source's messages (see :mod:`node.transfer.mqtt_fetch`), in a
        worker thread (the client blocks)."""
        from node.transfer.errors import SourceRefused
        from node.transfer.mqtt_fetch import fetch_mqtt

        r = request
        try:
            got = await asyncio.to_thread(
                fetch_mqtt,
                host=r.host,
                port=r.port,
                topics=r.topics,
                client=r.client_id,
                target=target,
                policy=self._policy,
                username=r.username,
                password=r.password,
                max_bytes=r.max_bytes,
                max_records=r.max_records,
                idle_timeout_s=r.idle_timeout_s,
                max_message_bytes=r.max_message_bytes,
                max_poll_s=r.max_poll_s,
            )
        except SourceRefused as e:
            raise PullRefused(str(e)) from e
        return got.records

    def _session(self) -> SharedHttpSession:
        from node.transfer.sources import SharedHttpSession

        limit = self._config.follow.max_connections if self._config is not None else 100
        return SharedHttpSession(policy=self._policy, limit=limit)

    async def _run(self, coro: Any) -> Any:
        if self._loop_thread is not None:
            return await self._loop_thread.run(coro)
        return await coro

    async def probe_head(self, url: str, etag: str | None, last_modified: str | None) -> HeadProbe:
        """One poll of ``{url}/refs/head``: conditional over HTTP(S); a plain read elsewhere
        (a directory, or IPFS / IPNS through the node's IPFS API or gateway)."""
        from node.transfer.sources import HttpSource

        async def probe(source: Source) -> HeadProbe:
            if isinstance(source, HttpSource):
                status, body, tag, modified = await source.conditional_head(etag, last_modified)
                if status == 304:
                    return HeadProbe(False, None, tag, modified, 1, 0)
                return HeadProbe(
                    True, body.decode("ascii", "replace").strip(), tag, modified, 1, len(body)
                )
            ref = await _read_capped(source, "refs/head", _MAX_REF, "refs/head too long")
            return HeadProbe(True, ref.decode("ascii", "replace").strip(), None, None, 1, len(ref))

        return await self._with_source(url, probe)

    async def read_block(self, url: str, block: Multihash) -> bytes:
        """``{url}/blocks/<block>``, checked against its sha3-256 hash."""
        path = f"blocks/{block.to_multibase()}"

        async def read(source: Source) -> bytes:
            return await _read_capped(source, path, _MAX_BLOCK, "block too large")

        data = await self._with_source(url, read)
        if Multihash.sha3_256(data) != block:
            raise PullRejected(f"{url}: {path} does not match its hash")
        return data

    async def _with_source(self, url: str, use: Callable[[Source], Awaitable[_T]]) -> _T:
        """``use`` the source at ``url`` (opened under the source policy with the shared HTTP
        session, on the pulls' loop; closed after); its refusals as :class:`PullRefused`, its
        transient failures as :class:`Unavailable`."""
        from node.transfer.errors import InvalidSourceUrl, SourceRefused, TransientSourceError
        from node.transfer.sources import open_source

        if self._http is None and self._loop_thread is not None:
            self._http = self._session()

        async def run() -> _T:
            source = open_source(
                url,
                ipfs_api=self._ipfs_api(),
                ipfs_gateway=self._ipfs_gateway,
                policy=self._policy,
                http=self._http,
            )
            try:
                return await use(source)
            finally:
                await source.close()

        try:
            result: _T = await self._run(run())
        except (SourceRefused, InvalidSourceUrl) as e:
            raise PullRefused(str(e)) from e
        except TransientSourceError as e:
            raise Unavailable(f"{url}: {e}") from e
        return result

    async def close(self) -> None:
        """Close the shared HTTP session (on the loop the pulls ran on)."""
        http, self._http = self._http, None
        if http is None:
            return
        if self._loop_thread is not None and self._loop_thread.running:
            await self._loop_thread.run(http.close())
