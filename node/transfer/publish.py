"""Publish a dataset to IPFS exactly as kamu does.

kamu runs ``ipfs add -Q --cid-version 1 --raw-leaves -r --ignore /config --ignore /info <dir>``:
the whole dataset directory (``blocks/``, ``refs/``, ``data/``, ``checkpoints/``) as UnixFS
with the default chunker, CIDv1 and raw leaves. :func:`publish_dataset` sends the same tree
through the RPC API (hidden ``.pending-*`` staging files are skipped, as ``ipfs add`` skips
hidden files), pins it and optionally points an IPNS key at it.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.storage.dataset import Dataset
from node.ipfs.client import IpfsClient

EXCLUDED_TOP_LEVEL = frozenset({"info", "config"})


@dataclass(frozen=True)
class PublishedDataset:
    """The root CID of the published dataset directory (and the IPNS name, if any)."""

    cid: str
    ipns_name: str | None = None

    @property
    def url(self) -> str:
        """``ipfs://<cid>`` -- what subscribers pull."""
        return f"ipfs://{self.cid}"


async def publish_dataset(
    client: IpfsClient, dataset: Dataset, *, ipns_key: str | None = None
) -> PublishedDataset:
    """Add ``dataset`` to IPFS (without ``info/``), pin it and return the root CID.

    The dataset's write lock is held while adding, so the published tree is one consistent
    state of the chain.
    """
    with dataset.write_lock():
        cid = await client.add_directory(dataset.layout.root, exclude_top=EXCLUDED_TOP_LEVEL)
    await client.pin_add(cid)
    name = await client.name_publish(f"/ipfs/{cid}", key=ipns_key) if ipns_key else None
    return PublishedDataset(cid, name)
