"""Fetching an announced chain for the protocol core (its ``RequestFetch`` decisions).

The core names a dataset, a head, the base the chain must descend from and where to fetch it;
:class:`ChainFetcher` pulls from each source in turn (IPFS first, then HTTP), under the dataset's
commit lock, and answers whether the local chain now holds the head and descends from the base
(``ancestry_ok``). A pull is cancelled when the core abandons the fetch; the transfer layer
guarantees a cancelled pull leaves the store as it was.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from coordinator.errors import (
    CONFLICT,
    INVALID_INPUT,
    UNAVAILABLE,
    VERIFICATION_FAILED,
    OdfNodeError,
)
from coordinator.identity import DatasetId
from coordinator.multiformats import Multihash
from coordinator.storage.dataset import Dataset
from coordinator.storage.repository import DatasetRepository
from node.app.datasets import CommitLocks
from node.app.errors import RetryLater
from node.app.metrics import NodeMetrics
from node.app.ports import EventSink, StatePort, TransferPort
from p2p.core import RequestFetch
from p2p.wire import FetchLocations

log = logging.getLogger("odf_node.fetch")


class PullRejected(OdfNodeError):
    """A source served something that does not verify (the next source is tried)."""

    rpc_code = VERIFICATION_FAILED


class PullRefused(OdfNodeError):
    """The source is not one this node will contact: its URL is unusable or the source policy
    refuses its address (or where it redirects). The next source is tried; retrying the same
    one cannot help."""

    rpc_code = INVALID_INPUT


class PullOverBudget(OdfNodeError):
    """The pull would exceed the node's disk budget (``[storage] max_bytes``) or leave less
    than ``[storage] min_free_bytes`` free; refused before any data was downloaded."""

    rpc_code = UNAVAILABLE

    def __init__(self, message: str, *, needed: int = 0, allowed: int = 0) -> None:
        super().__init__(message)
        self.needed = needed
        self.allowed = allowed


class PullDiverged(OdfNodeError):
    """The announced chain does not descend from our copy (ancestry fails)."""

    rpc_code = CONFLICT


class ChainFetcher:
    """The core's fetcher; see the module docstring."""

    def __init__(
        self,
        repo: DatasetRepository,
        state: StatePort,
        transfer: TransferPort,
        locks: CommitLocks,
        metrics: NodeMetrics,
        *,
        ipfs_enabled: Callable[[], bool],
        events: EventSink | None = None,
    ) -> None:
        self._repo = repo
        self._state = state
        self._transfer = transfer
        self._locks = locks
        self._metrics = metrics
        self._ipfs_enabled = ipfs_enabled
        self._events = events
        # The head whose pull was last refused for space, per dataset: one event per head,
        # not one per retry.
        self._over_budget: dict[DatasetId, Multihash] = {}

    def _progress(self, topic: str, did: DatasetId, **data: object) -> None:
        # Live progress for the event stream (the console shows pulls as they happen).
        if self._events is not None:
            self._events.publish(topic, {"did": did.as_did_str(), **data})

    async def local_alias_for(self, did: DatasetId) -> str:
        """The alias a pulled dataset is stored under (subscription alias, else the DID)."""
        try:
            # Off the loop: a name lookup may read alias files (one per dataset, worst case).
            return (await asyncio.to_thread(self._repo.resolve, did.as_did_str())).alias
        except OdfNodeError:
            pass
        sub = await self._state.subscription(did.as_did_str())
        if sub is not None and sub.alias:
            return sub.alias
        return did.as_multibase()

    def sources(self, locations: FetchLocations) -> list[str]:
        """URLs to try, IPFS first (when this node runs IPFS), then HTTP.

        Only ``http(s)://`` locations are taken from an announcement (the wire format already
        refuses others; checked again because a local path or ``file://`` URL here would read
        this node's own files). Which hosts they may reach is the transfer's source policy.
        """
        urls = [f"ipfs://{c}" for c in locations.ipfs_cids] if self._ipfs_enabled() else []
        urls += [
            u.rstrip("/")
            for u in locations.http_urls
            if u.lower().startswith(("http://", "https://"))
        ]
        return urls

    async def __call__(self, req: RequestFetch) -> bool:
        """Pull ``req``'s chain; ``ancestry_ok``. Raises :class:`RetryLater` if no source works."""
        did = req.dataset
        alias = await self.local_alias_for(did)
        sources = self.sources(req.locations)
        if not sources:
            raise RetryLater("the announcement names no source this node can use")
        errors: list[str] = []
        t0 = time.monotonic()
        async with self._locks.of(did):
            for url in sources:
                self._progress("pull.started", did, url=url, head=req.head.to_multibase())
                try:
                    summary = await self._transfer.pull(url, alias=alias)
                except PullDiverged as e:
                    self._metrics.pulls.labels("diverged").inc()
                    self._progress("pull.finished", did, url=url, outcome="diverged")
                    log.warning("pull of %s from %s: %s", did, url, e)
                    return False
                except PullOverBudget as e:
                    # Every source would bring the same chain: paused, not tried elsewhere.
                    # The core retries on the next announcement or anti-entropy round.
                    self._metrics.pulls.labels("over_budget").inc()
                    self._progress("pull.finished", did, url=url, outcome="over_budget")
                    if self._over_budget.get(did) != req.head:
                        self._over_budget[did] = req.head
                        await self._state.log_event(
                            "storage.budget_exceeded",
                            did.as_did_str(),
                            {
                                "head": req.head.to_multibase(),
                                "budget": "[storage] max_bytes / min_free_bytes",
                                "needed_bytes": e.needed,
                                "allowed_bytes": e.allowed,
                                "error": str(e),
                            },
                        )
                    raise RetryLater(f"paused: {e}") from e
                except PullRefused as e:
                    # An announcement naming an address the policy forbids (an internal host,
                    # a metadata endpoint): logged for the operator, never contacted.
                    self._metrics.pulls.labels("refused").inc()
                    self._progress("pull.finished", did, url=url, outcome="refused")
                    errors.append(f"{url}: {e}")
                    await self._state.log_event(
                        "pull.refused", did.as_did_str(), {"url": url, "error": str(e)}
                    )
                    continue
                except PullRejected as e:
                    self._metrics.pulls.labels("rejected").inc()
                    self._progress("pull.finished", did, url=url, outcome="rejected")
                    errors.append(f"{url}: {e}")
                    await self._state.log_event(
                        "pull.rejected", did.as_did_str(), {"url": url, "error": str(e)}
                    )
                    continue
                except (OdfNodeError, OSError) as e:
                    # Unavailable sources, or our copy moved meanwhile (another pull): next.
                    self._metrics.pulls.labels("unavailable").inc()
                    self._progress("pull.finished", did, url=url, outcome="unavailable")
                    errors.append(f"{url}: {e}")
                    continue
                self._metrics.pulls.labels("ok").inc()
                self._progress("pull.finished", did, url=url, outcome="ok")
                self._metrics.pull_seconds.observe(time.monotonic() - t0)
                await self._state.log_event("pull.ok", did.as_did_str(), {"url": url, **summary})
                return await asyncio.to_thread(
                    lambda: descends(self._repo.open(did.as_did_str()), req.head, req.base)
                )
        raise RetryLater("; ".join(errors) or "no source worked")


def descends(ds: Dataset, head: Multihash, base: Multihash | None) -> bool:
    """Whether the local chain contains ``head`` and ``head`` descends from ``base``."""
    found = False
    for h, _ in ds.iter_blocks(verify=False):
        if h == head:
            found = True
            if base is None:
                return True
        if found and h == base:
            return True
    return False


__all__ = [
    "ChainFetcher",
    "PullDiverged",
    "PullOverBudget",
    "PullRefused",
    "PullRejected",
    "descends",
]
