"""Following remote datasets, and what the node knows about peers and trust.

Subscribing records the subscription, then joins the dataset's topic and asks connected peers
for its head; from there the protocol core drives fetch -> accept -> verify -> attest.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from coordinator.identity import DatasetId
from coordinator.storage.repository import validate_alias
from node.app.errors import InvalidArgument, Unavailable
from node.app.fetch import pull_attempts
from node.app.ports import GossipPort, IpfsPort, StatePort
from node.app.results import SubscriptionRow, Unsubscribed
from node.app.rows import Subscription, TrustOverride
from node.app.trust import effective_config
from p2p.trust import TrustConfig

_PULL_EVENTS_READ = 500
"""How many of the newest ``pull.`` events ``subscriptions`` reads for its ``pull`` field."""

if TYPE_CHECKING:
    from node.app.follow import SourceFollower


def parse_did(text: str) -> DatasetId:
    """A ``did:odf`` DID, or :class:`InvalidArgument` naming the bad text."""
    try:
        return DatasetId.parse(text)
    except Exception as e:
        raise InvalidArgument(f"not a dataset DID: {text!r}") from e


def _row(sub: Subscription) -> SubscriptionRow:
    return SubscriptionRow(
        did=sub.did,
        alias=sub.alias,
        since_ns=sub.created_ns,
        policy=_override_json(sub.override),
        trusted_head=sub.trusted_head,
        source=sub.source_url,
    )


def _override_json(o: TrustOverride) -> dict[str, object] | None:
    """The subscription's own trust settings (None: the node's ``[trust]``)."""
    if o.empty:
        return None
    out: dict[str, object] = {}
    if o.policy is not None:
        out["policy"] = o.policy
    if o.k is not None:
        out["k"] = o.k
    if o.trusted_attesters is not None:
        out["trusted_attesters"] = list(o.trusted_attesters)
    return out


def trust_json(sub: Subscription, head: str | None) -> dict[str, object] | None:
    """``{"state", "by", "attesters"}`` of the accepted head (pending until judged)."""
    if head is None:
        return None
    t = sub.trust
    if t is None or t.head != head:
        return {"state": "pending", "by": None, "attesters": []}
    out: dict[str, object] = {"state": t.state, "by": t.by, "attesters": list(t.attesters)}
    if t.evidence is not None:
        out["evidence"] = t.evidence
    if t.disputed_by:
        out["disputed_by"] = list(t.disputed_by)
    return out


class SubscriptionUseCases:
    """subscribe, unsubscribe, subscriptions; peers and IPFS connections."""

    def __init__(
        self,
        state: StatePort,
        gossip: GossipPort,
        ipfs: IpfsPort,
        owns: Callable[[DatasetId], bool],
        *,
        loopback_only: bool,
        trust: TrustConfig | None = None,
        on_trust_change: Callable[[DatasetId], Awaitable[None]] | None = None,
        follower: SourceFollower | None = None,
    ) -> None:
        self._state = state
        self._gossip = gossip
        self._ipfs = ipfs
        self._owns = owns
        self._loopback_only = loopback_only
        self._trust = trust or TrustConfig()
        self._on_trust_change = on_trust_change
        self.follower = follower
        """Polls datasets followed by URL (the daemon's; None without a daemon)."""

    async def subscribe(
        self,
        did: str,
        alias: str | None = None,
        *,
        policy: str | None = None,
        k: int | None = None,
        attesters: list[str] | None = None,
        source: str | None = None,
    ) -> SubscriptionRow:
        """Follow a remote dataset: pull, verify, republish and attest every new head.

        ``did`` is a ``did:odf`` (heads come signed by its owner over gossip) or a source URL
        (``http(s)://``, ``ipfs://``, ``ipns://``, a path: polled, ``docs/follow.md``);
        ``source`` follows a DID from that URL. ``policy``, ``k`` and ``attesters`` override
        the node's ``[trust]`` for this dataset (persisted with the subscription).

        Raises:
            TrustConfigError: the override, applied over ``[trust]``, is invalid (the message
                names the setting, e.g. ``[trust] trusted_attesters``).
            Unavailable: a URL subscription without a running daemon (nothing would poll it).
        """
        if not did.startswith("did:"):
            did, source = "", did
        dataset = parse_did(did) if did else None
        if source is not None:
            return await self._subscribe_source(source, dataset, alias, policy, k, attesters)
        assert dataset is not None
        if alias is not None:
            validate_alias(alias)
        if self._owns(dataset):
            raise InvalidArgument(f"{did} is owned by this node; nothing to subscribe to")
        override = TrustOverride(policy, k, None if attesters is None else tuple(attesters))
        if not override.empty:
            # Over what is stored already: a second subscribe may change only k.
            known = await self._state.subscription(dataset.as_did_str())
            stored = known.override if known is not None else TrustOverride()
            merged = TrustOverride(
                policy if policy is not None else stored.policy,
                k if k is not None else stored.k,
                override.trusted_attesters
                if override.trusted_attesters is not None
                else stored.trusted_attesters,
            )
            effective_config(self._trust, merged)  # refused before anything is stored
        sub = await self._state.subscribe(dataset.as_did_str(), alias, "rpc", override)
        data: dict[str, object] = {"alias": alias}
        if not override.empty:
            data["trust"] = _override_json(sub.override)
        await self._state.log_event("subscribe", sub.did, data)
        if not override.empty and self._on_trust_change is not None:
            await self._on_trust_change(dataset)
        await self._gossip.follow(dataset)
        return _row(sub)

    async def _subscribe_source(
        self,
        source: str,
        dataset: DatasetId | None,
        alias: str | None,
        policy: str | None,
        k: int | None,
        attesters: list[str] | None,
    ) -> SubscriptionRow:
        if self.follower is None:
            raise Unavailable(
                "following a dataset by URL needs a running daemon (it polls the source): "
                "start `odf-node run`"
            )
        if dataset is not None and self._owns(dataset):
            raise InvalidArgument(f"{dataset.as_did_str()} is owned by this node")
        override = TrustOverride(policy, k, None if attesters is None else tuple(attesters))
        if not override.empty:
            effective_config(self._trust, override)  # refused before anything is stored
        did = await self.follower.subscribe(source, dataset, alias, override)
        if not override.empty and self._on_trust_change is not None:
            await self._on_trust_change(did)
        sub = await self._state.subscription(did.as_did_str())
        assert sub is not None
        return await self._full_row(sub)

    async def unsubscribe(self, did: str) -> Unsubscribed:
        """Stop following a dataset (its local copy is kept)."""
        dataset = parse_did(did)
        if self.follower is not None:
            self.follower.forget(dataset)
        removed = await self._state.unsubscribe(dataset.as_did_str())
        self._gossip.unfollow(dataset)
        return Unsubscribed(did=dataset.as_did_str(), removed=removed)

    async def subscriptions(self) -> list[SubscriptionRow]:
        """Followed datasets with their accepted head and last verification."""
        # The newest pull events of every dataset, in one read: what each pull tried and why
        # each source failed since its last success.
        pulls = await self._pull_attempts()
        return [await self._full_row(sub, pulls) for sub in await self._state.subscriptions()]

    async def _pull_attempts(self) -> dict[str, dict[str, Any]]:
        return pull_attempts(await self._state.recent_events(_PULL_EVENTS_READ, "pull."))

    async def _full_row(
        self, sub: Subscription, pulls: dict[str, dict[str, Any]] | None = None
    ) -> SubscriptionRow:
        """A subscription with its accepted head, verification, trust and failed pulls."""
        if pulls is None:
            pulls = await self._pull_attempts()
        acc = await self._state.accepted_head(sub.did)
        ver = await self._state.verification(sub.did, acc.head) if acc else None
        return SubscriptionRow(
            did=sub.did,
            alias=sub.alias,
            since_ns=sub.created_ns,
            accepted_head=acc.head if acc else None,
            sequence=acc.sequence if acc else None,
            verification=ver.outcome if ver else None,
            verification_detail=(ver.detail or None) if ver else None,
            policy=_override_json(sub.override),
            trusted_head=sub.trusted_head,
            trust=trust_json(sub, acc.head if acc else None),
            pull=pulls.get(sub.did),
            source=sub.source_url,
        )

    async def connect_peer(self, multiaddr: str) -> str:
        """Dial a gossip peer (remembered and redialled after a restart); its peer id."""
        if not self._gossip.enabled:
            raise Unavailable("gossip is disabled on this node: set [p2p] enabled = true")
        peer = await self._gossip.connect(multiaddr)
        await self._state.upsert_peer(peer, [multiaddr], None, True)
        return peer

    async def connect_ipfs(self, multiaddr: str) -> None:
        """Connect our IPFS node to another one (bitswap needs a connection); remembered."""
        if self._ipfs.api_url is None:
            raise Unavailable("IPFS is disabled on this node")
        if self._loopback_only and not multiaddr.startswith("/ip4/127."):
            raise InvalidArgument(f"refusing non-loopback address {multiaddr!r} (loopback-only)")
        await self._ipfs.connect(multiaddr)
        await self._state.log_event("ipfs.connect", None, {"multiaddr": multiaddr})


__all__ = ["SubscriptionRow", "SubscriptionUseCases", "parse_did", "trust_json"]
