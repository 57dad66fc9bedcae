"""Fetching an announced chain for the protocol core (its ``RequestFetch`` decisions).

The core names a dataset, a head, the base the chain must descend from and where to fetch it;
:class:`ChainFetcher` pulls from each source in turn (IPFS first, then HTTP), under the dataset's
commit lock, and answers whether the local chain now holds the head and descends from the base
(``ancestry_ok``). A pull is cancelled when the core abandons the fetch; the transfer layer
guarantees a cancelled pull leaves the store as it was.

Every source that fails is named, with why, in a ``pull.source_failed`` event (``url``,
``reason``, ``error``, and ``setting`` when a configuration change would help): ``unreachable``
(nothing came from it within ``[transfer] first_contact_s``; for IPFS, the providers' IPFS
addresses the node could not connect to), ``refused`` (the source policy; ``setting`` names
what would allow it), ``too-slow``, ``bad-bytes`` or ``unavailable``. ``subscriptions`` shows
the attempts since the last successful pull (:func:`pull_attempts`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

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
from node.app.rows import EventRecord
from p2p.core import RequestFetch
from p2p.wire import FetchLocations

log = logging.getLogger("odf_node.fetch")


class PullRejected(OdfNodeError):
    """A source served something that does not verify (the next source is tried)."""

    rpc_code = VERIFICATION_FAILED


class PullRefused(OdfNodeError):
    """The source is not one this node will contact: its URL is unusable or the source policy
    refuses its address (or where it redirects). The next source is tried; retrying the same
    one cannot help. ``setting`` names the configuration that would allow it (``""``: none)."""

    rpc_code = INVALID_INPUT

    def __init__(self, message: str, setting: str = "") -> None:
        super().__init__(message)
        self.setting = setting


class PullUnreachable(OdfNodeError):
    """Nothing came from the source at all: its first read got no answer in time."""

    rpc_code = UNAVAILABLE


class PullTooSlow(OdfNodeError):
    """The source delivered an object slower than ``[transfer]`` allows."""

    rpc_code = UNAVAILABLE


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
        ipfs_hints: Callable[[DatasetId], Sequence[IpfsHint]] | None = None,
        stream_peers: Callable[[DatasetId], Sequence[str]] | None = None,
        peer_connected: Callable[[str], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``ipfs_hints`` names the IPFS addresses of the dataset's providers this node could
        not connect to (discovery's), for the reason an IPFS source was unreachable;
        ``stream_peers`` lists the connected peers that carry a dataset, tried last over
        libp2p streams (``libp2p://<peer>/<did>``: a provider behind NAT, reached through a
        relay); ``peer_connected`` tells whether a peer is connected, for the peer a
        derivative came from as a source of its inputs (:meth:`note_input`); ``clock`` paces
        repeated events (monotonic seconds)."""
        self._repo = repo
        self._state = state
        self._transfer = transfer
        self._locks = locks
        self._metrics = metrics
        self._ipfs_enabled = ipfs_enabled
        self._events = events
        self._ipfs_hints = ipfs_hints
        self._stream_peers = stream_peers
        self._peer_connected = peer_connected
        self._clock = clock
        # The peer each dataset was last pulled from over libp2p streams, and the derivatives
        # each missing input belongs to (note_input): both bounded, oldest forgotten first.
        self._served_by: dict[DatasetId, str] = {}
        self._input_of: dict[DatasetId, list[DatasetId]] = {}
        # (did, url) -> (reason, when last logged): the core retries a failing fetch every few
        # seconds; the same failure is logged again only after _RELOG_S.
        self._logged: dict[tuple[str, str], tuple[str, float]] = {}
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

    def sources(
        self,
        locations: FetchLocations,
        did: DatasetId | None = None,
        head: Multihash | None = None,
    ) -> list[str]:
        """URLs to try, IPFS first (when this node runs IPFS), then HTTP, then the connected
        peers that carry ``did`` over libp2p streams. IPFS goes last when this node could not
        connect to a provider's IPFS node (``ipfs_hints``): it would wait ``[transfer]
        first_contact_s`` for nothing before every other source.

        Only ``http(s)://`` locations are taken from an announcement (the wire format already
        refuses others; checked again because a local path or ``file://`` URL here would read
        this node's own files). Which hosts they may reach is the transfer's source policy.
        """
        ipfs = [f"ipfs://{c}" for c in locations.ipfs_cids] if self._ipfs_enabled() else []
        urls = [
            u.rstrip("/")
            for u in locations.http_urls
            if u.lower().startswith(("http://", "https://"))
        ]
        if did is not None and self._stream_peers is not None:
            # Exactly the announced head, from whichever carrier has its blocks.
            at = f"?head={head.to_multibase()}" if head is not None else ""
            peers = list(self._stream_peers(did))
            peers += [p for p in self.input_origins(did) if p not in peers]
            urls += [f"libp2p://{p}/{did.as_did_str()}{at}" for p in peers]
        if did is not None and ipfs and self._ipfs_hints is not None and self._ipfs_hints(did):
            return urls + ipfs
        return ipfs + urls

    def note_input(self, of: DatasetId, input_did: DatasetId) -> None:
        """``input_did``, an input of the derivative ``of``, is wanted here (verification
        replays ``of``): the peer ``of`` came from over libp2p streams is a source of it.

        The owner that served a derivative usually has its inputs, and discovery learns that
        only from the next provider record it asks for (every ``4 × discovery_interval_s``);
        meanwhile an input whose announcement names only an HTTP URL the source policy
        refuses (an owner behind NAT, on a private address) would have no source at all.
        """
        ofs = self._input_of.pop(input_did, [])
        if of not in ofs:
            ofs = [*ofs[-(_MAX_INPUT_OF - 1) :], of]
        self._input_of[input_did] = ofs
        _bound(self._input_of)

    def input_origins(self, did: DatasetId) -> list[str]:
        """The connected peers that served a derivative ``did`` is a noted input of."""
        if self._peer_connected is None:
            return []
        peers: list[str] = []
        for of in self._input_of.get(did, ()):
            peer = self._served_by.get(of)
            if peer is not None and peer not in peers and self._peer_connected(peer):
                peers.append(peer)
        return peers

    def _served(self, did: DatasetId, url: str) -> None:
        # libp2p://<peer>/<did>[?head=...] (node/transfer/streams.py; node.app does not import
        # node.transfer, the import contracts in pyproject.toml).
        if url.startswith("libp2p://"):
            self._served_by.pop(did, None)
            self._served_by[did] = url.removeprefix("libp2p://").split("/", 1)[0]
            _bound(self._served_by)

    async def __call__(self, req: RequestFetch) -> bool:
        """Pull ``req``'s chain; ``ancestry_ok``. Raises :class:`RetryLater` if no source works."""
        did = req.dataset
        alias = await self.local_alias_for(did)
        sources = self.sources(req.locations, did, req.head)
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
                    self._finished(did, url, "diverged")
                    log.warning("pull of %s from %s: %s", did, url, e)
                    return False
                except PullOverBudget as e:
                    # Every source would bring the same chain: paused, not tried elsewhere.
                    # The core retries on the next announcement or anti-entropy round.
                    self._finished(did, url, "over_budget")
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
                    errors.append(f"{url}: {e}")
                    await self._source_failed(did, url, e, "refused", "refused", setting=e.setting)
                    continue
                except PullRejected as e:
                    errors.append(f"{url}: {e}")
                    await self._source_failed(did, url, e, "rejected", "bad-bytes")
                    continue
                except (OdfNodeError, OSError) as e:
                    # Unavailable sources, or our copy moved meanwhile (another pull): next.
                    self._finished(did, url, "unavailable")
                    errors.append(f"{url}: {e}")
                    await self._unavailable(did, url, e)
                    continue
                self._finished(did, url, "ok")
                self._metrics.pull_seconds.observe(time.monotonic() - t0)
                self._forget(did)
                self._served(did, url)
                await self._state.log_event("pull.ok", did.as_did_str(), {"url": url, **summary})
                return await asyncio.to_thread(
                    lambda: descends(self._repo.open(did.as_did_str()), req.head, req.base)
                )
        raise RetryLater("; ".join(errors) or "no source worked")

    async def _unavailable(self, did: DatasetId, url: str, e: BaseException) -> None:
        if isinstance(e, PullTooSlow):
            await self._failed(
                did,
                url,
                "too-slow",
                str(e),
                setting="[transfer] min_rate_bytes_per_s, [transfer] deadline_base_s",
            )
            return
        if not isinstance(e, PullUnreachable):
            await self._failed(did, url, "unavailable", str(e))
            return
        error, setting, addresses = str(e), "", []
        if url.startswith("ipfs://") and self._ipfs_hints is not None:
            hints = list(self._ipfs_hints(did))
            if hints:
                addresses = [h.address for h in hints]
                error += "; the providers' IPFS addresses this node could not connect to: " + (
                    "; ".join(f"{h.address} ({h.error})" for h in hints)
                )
                setting = next((h.setting for h in hints if h.setting), "")
            else:
                error += "; no provider's IPFS node is connected to this node's"
        await self._failed(did, url, "unreachable", error, setting=setting, addresses=addresses)

    def _finished(self, did: DatasetId, url: str, outcome: str) -> None:
        """One pull from ``url`` ended with ``outcome``: counted and reported."""
        self._metrics.pulls.labels(outcome).inc()
        self._progress("pull.finished", did, url=url, outcome=outcome)

    async def _source_failed(
        self,
        did: DatasetId,
        url: str,
        e: Exception,
        outcome: str,
        reason: str,
        *,
        setting: str = "",
    ) -> None:
        """``url`` will not serve this chain (``e``; the next source is tried): the pull's
        ``outcome`` counted and logged (``pull.<outcome>``), the source's failure (``reason``)
        recorded."""
        self._finished(did, url, outcome)
        await self._state.log_event(
            f"pull.{outcome}", did.as_did_str(), {"url": url, "error": str(e)}
        )
        await self._failed(did, url, reason, str(e), setting=setting)

    async def _failed(
        self,
        did: DatasetId,
        url: str,
        reason: str,
        error: str,
        *,
        setting: str = "",
        addresses: Sequence[str] = (),
    ) -> None:
        """Log a ``pull.source_failed`` event (once per ``_RELOG_S`` for the same failure)."""
        key = (did.as_did_str(), url)
        now = self._clock()
        last = self._logged.get(key)
        if last is not None and last[0] == reason and now - last[1] < _RELOG_S:
            return
        self._logged[key] = (reason, now)
        data: dict[str, Any] = {"url": url, "reason": reason, "error": error}
        if setting:
            data["setting"] = setting
        if addresses:
            data["addresses"] = list(addresses)
        log.info("pull of %s: source %s failed (%s): %s", did, url, reason, error)
        await self._state.log_event("pull.source_failed", did.as_did_str(), data)

    def _forget(self, did: DatasetId) -> None:
        d = did.as_did_str()
        for key in [k for k in self._logged if k[0] == d]:
            del self._logged[key]


_MAX_REMEMBERED = 4096
"""Datasets :class:`ChainFetcher` remembers the serving peer of, and inputs it remembers the
derivatives of (each)."""

_MAX_INPUT_OF = 8
"""Derivatives remembered per input (the newest)."""


def _bound(d: dict[Any, Any]) -> None:
    # Insertion order is age order (entries are re-inserted when renewed): the oldest go.
    while len(d) > _MAX_REMEMBERED:
        del d[next(iter(d))]


_RELOG_S = 300.0
"""The same source failing for the same reason is logged again after this many seconds."""

PULL_ATTEMPTS_SHOWN = 8
"""``subscriptions``' ``pull`` field: the newest failed attempts it lists per dataset."""


@dataclass(frozen=True, slots=True)
class IpfsHint:
    """An IPFS address of a provider the node could not connect to, and why (``setting``: the
    provider's configuration that would fix it, when known)."""

    address: str
    error: str
    setting: str = ""


def pull_attempts(events: Sequence[EventRecord]) -> dict[str, dict[str, Any]]:
    """Per dataset, the failed sources since its last successful pull, from the newest-first
    ``pull.`` events: ``{"last_ok_ns", "attempts": [{"url", "reason", "error", "setting"?,
    "addresses"?, "at_ns"}]}`` (newest first, at most :data:`PULL_ATTEMPTS_SHOWN`)."""
    out: dict[str, dict[str, Any]] = {}
    done: set[str] = set()
    for e in events:
        if e.did is None or e.did in done:
            continue
        entry = out.setdefault(e.did, {"last_ok_ns": None, "attempts": []})
        if e.kind == "pull.ok":
            entry["last_ok_ns"] = e.ts_ns
            done.add(e.did)
        elif e.kind == "pull.source_failed" and len(entry["attempts"]) < PULL_ATTEMPTS_SHOWN:
            entry["attempts"].append({**e.data, "at_ns": e.ts_ns})
    return out


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
    "IpfsHint",
    "PullDiverged",
    "PullOverBudget",
    "PullRefused",
    "PullRejected",
    "PullTooSlow",
    "PullUnreachable",
    "descends",
    "pull_attempts",
]
