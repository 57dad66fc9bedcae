"""The transfer port over :mod:`node.transfer.pull` (IPFS, IPNS, HTTP, local paths)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from coordinator.storage.repository import DatasetRepository
from node.adapters.loop_thread import LoopThread
from node.app.fetch import (
    PullDiverged,
    PullRefused,
    PullRejected,
    PullTooSlow,
    PullUnreachable,
)
from node.config import NodeConfig
from node.transfer.policy import SourcePolicy

if TYPE_CHECKING:
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


class TransferAdapter:
    """:class:`~node.app.ports.TransferPort`: pulls into ``repo``; errors in the app's terms.

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

    async def pull(self, url: str, *, alias: str | None, force: bool = False) -> dict[str, Any]:
        """Pull ``url``; :class:`PullDiverged` / :class:`PullRejected` / :class:`PullRefused` /
        :class:`PullUnreachable` / :class:`PullTooSlow` for the fetcher's choices."""
        # Imported here: the pull brings pyarrow, which an idle daemon should not pay for.
        from node.transfer.errors import (
            DivergedHeads,
            InvalidSourceUrl,
            ObjectRejected,
            SourceRefused,
            SourceTooSlow,
            SourceUnreachable,
        )
        from node.transfer.pull import PullOptions, pull_url

        if self._http is None and self._loop_thread is not None:
            from node.transfer.sources import SharedHttpSession

            self._http = SharedHttpSession(policy=self._policy)

        options = None
        if self._config is not None:
            t = self._config.transfer
            options = PullOptions(
                deadline_base_s=t.deadline_base_s,
                min_rate_bytes_per_s=float(t.min_rate_bytes_per_s),
                first_contact_s=t.first_contact_s,
            )
        pulling = pull_url(
            self._repo,
            url,
            alias=alias,
            force=force,
            ipfs_api=self._ipfs_api(),
            ipfs_gateway=self._ipfs_gateway,
            options=options,
            policy=self._policy,
            http=self._http,
            p2p_request=self._bridged_request if self._p2p_request is not None else None,
        )
        try:
            if self._loop_thread is not None:
                result = await self._loop_thread.run(pulling)
            else:
                result = await pulling
        except DivergedHeads as e:
            raise PullDiverged(str(e)) from e
        except ObjectRejected as e:
            raise PullRejected(str(e)) from e
        except SourceRefused as e:
            raise PullRefused(str(e), e.setting) from e
        except InvalidSourceUrl as e:
            raise PullRefused(str(e)) from e
        except SourceUnreachable as e:
            raise PullUnreachable(str(e)) from e
        except SourceTooSlow as e:
            raise PullTooSlow(str(e)) from e
        return dict(result.to_dict())

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

    async def close(self) -> None:
        """Close the shared HTTP session (on the loop the pulls ran on)."""
        http, self._http = self._http, None
        if http is None:
            return
        if self._loop_thread is not None and self._loop_thread.running:
            await self._loop_thread.run(http.close())
