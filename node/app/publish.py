"""The owner pipeline: a commit to an owned dataset -> work "publish" -> IPFS add + pin ->
a HeadAnnouncement signed with the dataset's key on the dataset's topic.

Superseded publications coalesce: a publish item runs for the dataset's *current* head, so an
owner that commits faster than it can publish announces each dataset's newest head once.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from coordinator.identity import DatasetId, load_private_key
from coordinator.multiformats import Multihash
from coordinator.storage.repository import DatasetRepository
from node.app.errors import NotOwner
from node.app.ports import Clock, EventSink, GossipPort, IpfsPort, StatePort
from node.app.results import PublishResult
from node.app.rows import WorkItem
from p2p.wire import FetchLocations, HeadAnnouncement, sign_message

log = logging.getLogger("odf_node.publish")


@dataclass(eq=False)
class PublishPipeline:
    """Queues and runs publications of owned datasets."""

    repo: DatasetRepository
    state: StatePort
    gossip: GossipPort
    ipfs: IpfsPort
    events: EventSink
    clock: Clock
    http_urls: Callable[[DatasetId], tuple[str, ...]]
    kick: Callable[[], None]

    def owns(self, did: DatasetId) -> bool:
        """Whether this node holds the dataset key of ``did``."""
        return self.repo.key_path(did).is_file()

    async def queue(self, did: DatasetId) -> WorkItem:
        """Queue publication + announcement of the current head of an owned dataset."""
        if not self.owns(did):
            raise NotOwner(f"this node does not hold the key of {did.as_did_str()}")
        head = await asyncio.to_thread(self.repo.open(did.as_did_str()).head)
        # One pending publish per dataset: it announces whatever the head is when it runs.
        for w in await self.state.work(state="pending", did=did.as_did_str()):
            if w.kind == "publish":
                return w
        item = await self.state.enqueue(
            "publish", did.as_did_str(), str(head) if head else None, {}
        )
        self.kick()
        return item

    async def publish(self, ref: str, *, ipns_key: str | None, now: bool) -> PublishResult:
        """``dataset publish``: queue the publication and announcement of an owned dataset, or
        with ``now`` (no daemon to run the queue, or an IPNS name asked for) add any stored
        dataset to IPFS at once, pinned, optionally under the IPNS name of ``ipns_key``."""
        handle = self.repo.resolve(ref)
        did = handle.id.as_did_str()
        if not now and ipns_key is None:
            item = await self.queue(handle.id)
            return PublishResult(id=did, alias=handle.alias, head=item.head, work_id=item.id)
        ds = self.repo.open(did)
        head = await asyncio.to_thread(ds.head)
        cid = await self.ipfs.publish_dataset(ds)
        name = await self.ipfs.publish_ipns(cid, ipns_key) if ipns_key else None
        return PublishResult(
            id=did,
            alias=handle.alias,
            head=str(head) if head else None,
            cid=cid,
            url=f"ipfs://{cid}",
            ipns=name,
        )

    async def queue_id(self, did: DatasetId) -> int | None:
        """:meth:`queue`, returning the work item id (the ``on_commit`` hook of the use cases)."""
        return (await self.queue(did)).id

    async def run(self, item: WorkItem) -> None:
        """Publish to IPFS (if on) and announce the dataset's current head."""
        did = DatasetId.parse(item.did)
        ds = self.repo.open(item.did)
        chain = await asyncio.to_thread(ds.state)
        if chain.head is None:
            return
        cids: tuple[str, ...] = ()
        if self.ipfs.api_url:
            cids = (await self.ipfs.publish_dataset(ds),)
        key = await asyncio.to_thread(load_private_key, self.repo.key_path(did))
        prev = await self.state.accepted_head(item.did)
        ann = HeadAnnouncement(
            dataset=did,
            head=chain.head,
            sequence=chain.sequence_number,
            prev_head=Multihash.from_multibase(prev.head) if prev else None,
            epoch=0,
            locations=FetchLocations(cids, self.http_urls(did)),
            issued_at_ns=self.clock(),
            nonce=secrets.token_bytes(16),
        )
        sm = sign_message(ann, key)
        await self.state.record_accepted_head(
            item.did, 0, chain.sequence_number, chain.head.to_multibase(), "self", sm.envelope
        )
        await self.gossip.follow(did)
        self.gossip.accept_own(sm.envelope)
        await self.gossip.publish(did, sm.envelope)
        payload = {"head": chain.head.to_multibase(), "cids": list(cids)}
        await self.state.log_event("announce", item.did, payload)
        self.events.publish("announce", {"did": item.did, **payload})


__all__ = ["PublishPipeline"]
