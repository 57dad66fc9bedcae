"""An IPFS node started on its first use (``[ipfs] start = "lazy"``, docs/config.md).

Until it starts, the node's RPC API has no address: the daemon hands out a placeholder URL
(:attr:`LazyStart.placeholder`, which names no host) wherever an IPFS API URL is expected, and
:class:`~node.ipfs.client.IpfsClient` resolves it with :func:`resolve_api` before each request,
which starts the node once and answers its real API URL. Every IPFS call of the daemon goes
through ``IpfsClient`` (pulls of ``ipfs://`` URLs on the transfer loop's thread, publishes and
swarm connects on the daemon's loop), so the first one of any of them starts the node.

The start runs on the loop that owns the node (the daemon's); callers on any loop or thread
wait on the same start. A start that failed is tried again by a use at least
:data:`RETRY_AFTER_S` later; uses in between get its error.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

from node.ipfs.errors import IpfsError

log = logging.getLogger("odf_node.ipfs")

#: Seconds after a failed start before a use tries again (a start waits up to 180 s for the
#: node; a pull retrying every few seconds must not relaunch it each time).
RETRY_AFTER_S = 60.0

#: What ``status`` says of a node that has not started yet.
NOT_STARTED = "not started (starts on first use)"

_ids = itertools.count(1)
_registry: dict[str, LazyStart] = {}
_registry_lock = threading.Lock()


class LazyStart:
    """Starts a node once, on the first :meth:`ensure` (see the module docstring).

    ``start`` is a coroutine function run on ``loop`` that starts the node and returns its RPC
    API URL.
    """

    def __init__(
        self,
        start: Callable[[], Coroutine[Any, Any, str]],
        loop: asyncio.AbstractEventLoop,
        *,
        retry_after_s: float = RETRY_AFTER_S,
    ) -> None:
        self._start = start
        self._loop = loop
        self._retry_after_s = retry_after_s
        self._lock = threading.Lock()
        self._future: concurrent.futures.Future[str] | None = None
        self._failed_at = 0.0
        self._closed = False
        #: The RPC API URL once started (None before).
        self.api_url: str | None = None
        #: Stands for the API URL until the node starts. Port 0 of the loopback address: a
        #: request that bypassed :func:`resolve_api` fails at once, with no name to look up and
        #: nothing reached.
        self.placeholder = f"http://127.0.0.1:0/ipfs-not-started-{next(_ids)}"

    @property
    def started(self) -> bool:
        """Whether the node has started (and not been closed)."""
        return self.api_url is not None

    @property
    def starting(self) -> bool:
        """Whether a start is under way."""
        fut = self._future
        return fut is not None and not fut.done()

    @property
    def state(self) -> str:
        """``running``, ``starting`` or :data:`NOT_STARTED` (what ``status`` shows)."""
        if self.started:
            return "running"
        return "starting" if self.starting else NOT_STARTED

    async def ensure(self) -> str:
        """The node's API URL, starting it first if it has not started (once, whoever asks)."""
        url = self.api_url
        if url is not None:
            return url
        with self._lock:
            if self._closed:
                raise IpfsError("the IPFS node is stopping")
            fut = self._future
            if fut is None or (
                fut.done()
                and (fut.cancelled() or fut.exception() is not None)
                and time.monotonic() - self._failed_at >= self._retry_after_s
            ):
                fut = self._future = asyncio.run_coroutine_threadsafe(self._run(), self._loop)
        # Shielded: a caller giving up (a pull's deadline) must not cancel the start that other
        # callers wait for.
        return await asyncio.shield(asyncio.wrap_future(fut))

    async def _run(self) -> str:
        log.info("starting the IPFS node on its first use")
        try:
            url = await self._start()
        except BaseException:
            self._failed_at = time.monotonic()
            raise
        self.api_url = url
        return url

    async def close(self) -> None:
        """Refuse further starts and wait for one under way (its node is then the caller's
        to stop)."""
        with self._lock:
            self._closed = True
            fut = self._future
        if fut is not None and not fut.done():
            try:
                await asyncio.wrap_future(fut)
            except Exception as e:  # the start failed: nothing to stop
                log.debug("IPFS start failed while stopping: %s", e)
        unregister(self)


def register(lazy: LazyStart) -> None:
    """Make :func:`resolve_api` start ``lazy`` for its placeholder URL."""
    with _registry_lock:
        _registry[lazy.placeholder] = lazy


def unregister(lazy: LazyStart) -> None:
    """Forget ``lazy`` (its placeholder then resolves to itself, and requests to it fail)."""
    with _registry_lock:
        if _registry.get(lazy.placeholder) is lazy:
            del _registry[lazy.placeholder]


async def resolve_api(api_url: str) -> str:
    """``api_url``, or, for the placeholder of a node not started yet, its real API URL once
    started (see the module docstring)."""
    lazy = _registry.get(api_url)
    if lazy is None:
        return api_url
    return await lazy.ensure()


__all__ = ["NOT_STARTED", "RETRY_AFTER_S", "LazyStart", "register", "resolve_api", "unregister"]
