"""Verified, incremental, resumable pull of a dataset from a
:class:`~node.transfer.source_api.Source`.

Order of work (kamu's Simple Transfer Protocol client, plus verification and resumption):

1. ``GET refs/head`` (capped) and compare with the local head like kamu: *equal* (nothing to
   do), *local ahead* (the remote head is in the local chain: nothing to do), *behind* (the walk
   meets the local head: incremental) or *diverged* (refused unless ``force``).
2. Walk ``blocks/<hash>`` back from the remote head to the local head (or the Seed), checking
   every block's sha3-256 against its name, decoding it and checking the chain rules against
   the local chain state before any data is kept. A new dataset's blocks come in one
   transfer where the source allows it (IPFS ``dag/export`` of ``blocks/``: one call instead
   of one round trip per block); otherwise blocks missing locally are read in parallel when
   the source lists ``blocks/``, else one by one.
3. Download the data parts and checkpoints those blocks reference, ``parallel`` at a time
   (for a new dataset whose blocks come in one export, downloads start as the blocks stream
   in, bounded by ``max_speculative_bytes``, and those the validated chain does not reference
   are cancelled and deleted: :class:`_Speculation`);
   each stream is capped at its recorded size (and ``max_object_size``), and its size and
   physical hash are checked before it is renamed into ``data/`` or ``checkpoints/``. Then
   the linked objects (RFC-017) the verified parts reference (:mod:`node.transfer.linked`),
   each checked against its hash, and per block against the recorded ``sizeNaive``.
4. Commit: block files (renamed into place, then flushed with one ``syncfs``, or fsynced one
   by one where that is unavailable), then ``refs/head`` by compare-and-swap against the head
   the chain was validated on.

Anything a source fails to deliver (timeouts, 404, 5xx, drops, short reads) is retried with
exponential backoff and finally reported as :class:`SourceUnavailable` -- "unknown", not
"absent". Bytes that fail verification raise a typed :class:`ObjectRejected` naming the object.

Pace: the read of every object (request, headers and body) runs against a deadline that
grows with the bytes received: ``t0 + deadline_base_s + received / min_rate_bytes_per_s``.
A read timeout that restarts on every byte would let a source trickling one byte every few
seconds hold a pull for hours; this deadline ends such a read after about
``deadline_base_s`` (:class:`SourceTooSlow`, not retried), while a transfer averaging at least
the minimum rate never meets it. The total time of one object is thereby bounded by
``deadline_base_s + expected / min_rate_bytes_per_s``, where ``expected`` is its recorded size
or, for an object of unknown size (``refs/head``, a block, a linked object), its size cap.

Resumption: verified data parts and checkpoints go straight into the dataset's content-addressed
object stores; verified blocks are cached in ``info/pull-cache/blocks`` (``info/`` is never
published). A pull into a new dataset is assembled in a hidden ``.pull-<key>`` directory of the
repository and renamed into place on commit, so a crash or a rejected source never leaves a
visible half-made dataset, and the next attempt re-uses everything already verified.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import os
import random
import secrets
import shutil
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa

from coordinator.chain.validation import ChainState, validate_append
from coordinator.errors import (
    ChainRuleViolation,
    DatasetAlreadyExists,
    DatasetNotFound,
    DecodeError,
)
from coordinator.identity.dataset_id import DatasetId
from coordinator.metadata import decode_block
from coordinator.metadata import model as m
from coordinator.multiformats import Multihash
from coordinator.storage.dataset import HEAD_REF, Dataset, remember_chain_state
from coordinator.storage.fs import (
    PENDING_PREFIX,
    atomic_write_bytes,
    can_sync_filesystem,
    fsync_dir,
    sync_filesystem,
)
from coordinator.storage.objects import FsObjectRepository
from coordinator.storage.repository import DatasetRepository, check_alias_for, validate_alias
from node.transfer.errors import (
    InvalidRemoteChain,
    InvalidRemoteHead,
    ObjectHashMismatch,
    ObjectSizeMismatch,
    ObjectTooLarge,
    SourceHeadUnreachable,
    SourceTooSlow,
    SourceUnavailable,
    StorageBudgetExceeded,
    TransientSourceError,
)
from node.transfer.linked import LinkSummary, LinkSummaryError, link_choices, link_summary
from node.transfer.object_writer import ObjectWriter, open_object_writer
from node.transfer.policy import SourcePolicy
from node.transfer.pull_plan import HeadComparison, PullDecision, decide_pull, staging_extends
from node.transfer.source_api import Source
from node.transfer.sources import SharedHttpSession, StreamRequest, default_alias, open_source

log = logging.getLogger(__name__)
T = TypeVar("T")

_STAGING_PREFIX = ".pull-"
_CACHE_DIR = ("info", "pull-cache", "blocks")
_BATCH = 1 << 20
_FSYNC_WORKERS = 8


# (relative path, store, content hash, recorded size) of a data part or checkpoint
_DataObject = tuple[str, FsObjectRepository, Multihash, int]


@dataclass(frozen=True)
class PullOptions:
    """Limits and retry policy of a pull.

    ``parallel`` bounds concurrent data part / checkpoint / linked object downloads,
    ``block_parallel`` concurrent block reads when a source lists ``blocks/`` (small objects,
    dominated by round trips), and ``max_export_size`` the one-shot ``blocks/`` archive of a
    new dataset (beyond it the pull falls back to reading blocks one by one).
    ``max_speculative_bytes`` bounds the data a new dataset's pull downloads while its
    metadata still streams, before the chain is validated (see :class:`_Speculation`;
    0 turns that off). ``deadline_base_s`` and ``min_rate_bytes_per_s`` set the pace every
    object read must keep (module docstring; ``[transfer]`` in the node config).
    ``first_contact_s`` bounds the first read (``refs/head``, retries included): a source that
    says nothing at all within it is :class:`SourceHeadUnreachable` (``None``: only the pace and
    the retries bound it). ``direct_io`` writes data parts and checkpoints of 1 MiB or more
    with ``O_DIRECT`` where the filesystem allows it (:mod:`node.transfer.object_writer`;
    ``[transfer] direct_io``).
    """

    max_ref_size: int = 1024
    max_block_size: int = 16 << 20
    max_object_size: int = 16 << 30
    parallel: int = 8
    block_parallel: int = 32
    max_export_size: int = 64 << 20
    max_speculative_bytes: int = 1 << 30
    attempts: int = 5
    backoff_s: float = 0.2
    backoff_max_s: float = 5.0
    durable: bool = True
    direct_io: bool = True
    deadline_base_s: float = 60.0
    min_rate_bytes_per_s: float = 16384.0
    first_contact_s: float | None = None
    admit: Callable[[int], None] | None = field(default=None, compare=False)
    """Called with the bytes the pull will add (its new blocks and the data parts and
    checkpoints it must download) once the chain is validated, before any data is downloaded;
    raising refuses the pull, which then removes what it fetched (the disk budget,
    ``[storage]``: ``node.adapters.transfer``)."""


@dataclass
class PullOutcome:
    """What a pull did."""

    alias: str
    dataset_id: DatasetId
    comparison: HeadComparison
    old_head: Multihash | None
    new_head: Multihash | None
    created: bool = False
    forced: bool = False
    blocks_fetched: int = 0
    objects_downloaded: int = 0
    bytes_downloaded: int = 0
    new_blocks: int = 0

    @property
    def updated(self) -> bool:
        """Whether the local head moved."""
        return self.old_head != self.new_head

    def to_dict(self) -> dict[str, object]:
        """JSON-friendly form."""
        return {
            "alias": self.alias,
            "id": self.dataset_id.as_did_str(),
            "comparison": self.comparison.value,
            "old_head": str(self.old_head) if self.old_head else None,
            "new_head": str(self.new_head) if self.new_head else None,
            "created": self.created,
            "forced": self.forced,
            "new_blocks": self.new_blocks,
            "objects_downloaded": self.objects_downloaded,
            "bytes_downloaded": self.bytes_downloaded,
        }


@dataclass
class _Stats:
    blocks_fetched: int = 0
    objects: int = 0
    bytes: int = 0


@dataclass
class _Fetcher:
    source: Source
    opts: PullOptions
    stats: _Stats = field(default_factory=_Stats)

    async def retrying(self, what: str, op: Callable[[], Awaitable[T]]) -> T:
        """Run ``op`` until it succeeds; transient failures back off, then SourceUnavailable."""
        last: Exception | None = None
        for attempt in range(self.opts.attempts):
            try:
                return await op()
            except (TransientSourceError, ObjectSizeMismatch) as e:
                last = e
                if attempt + 1 < self.opts.attempts:
                    delay = min(self.opts.backoff_max_s, self.opts.backoff_s * 2**attempt)
                    log.debug("%s: %s; retry in %.2fs", what, e, delay)
                    await asyncio.sleep(delay * (0.5 + random.random()))
        if isinstance(last, ObjectSizeMismatch):
            raise last
        raise SourceUnavailable(
            what,
            f"not obtained from {self.source.description} after {self.opts.attempts} "
            f"attempts ({last})",
        )

    @asynccontextmanager
    async def paced(self, rel: str, expected: int) -> AsyncIterator[AsyncIterator[bytes]]:
        """``source.open(rel)`` under the pace deadline (module docstring).

        The deadline covers opening (connection, request, headers) and each chunk; the
        consumer's own work between chunks runs outside any timeout scope, so a deadline never
        interrupts hashing or writing half-way. ``expected`` (recorded size, else the cap) only
        bounds how far received bytes extend the deadline.

        Raises:
            SourceTooSlow: the deadline passed before the next chunk (or the headers) arrived.
        """
        pace = _Pace(self.source.description, rel, self.opts, expected)
        async with AsyncExitStack() as stack:
            chunks = await pace.within(stack.enter_async_context(self.source.open(rel)))
            yield pace.stream(chunks)

    async def read_bytes(self, rel: str, cap: int) -> bytes:
        """The whole object at ``rel``; more than ``cap`` bytes is rejected."""

        async def op() -> bytes:
            buf = bytearray()
            async with self.paced(rel, cap) as chunks:
                async for chunk in chunks:
                    buf += chunk
                    if len(buf) > cap:
                        raise ObjectTooLarge(rel, f"longer than the {cap}-byte cap")
            self.stats.bytes += len(buf)
            return bytes(buf)

        return await self.retrying(rel, op)

    async def download(
        self,
        rel: str,
        repo: FsObjectRepository,
        h: Multihash,
        size: int | None,
        cap: int | None = None,
    ) -> int:
        """Stream an object into ``repo`` under ``h`` after checking its size and hash.

        ``size`` is the recorded size (``None`` for linked objects, whose size no block records:
        then only ``max_object_size`` caps the stream). Returns the object's size.

        Hashing and writing run in a worker thread on batches of at least ``_BATCH`` bytes:
        sha3-256 is the most expensive step of a pull (~290 MB/s per core here) and hashlib
        releases the GIL on large inputs, so other downloads keep reading meanwhile; fsync
        runs there too so it never stalls the event loop.
        """
        cap = self.opts.max_object_size if cap is None else min(cap, self.opts.max_object_size)
        if size is not None and size > cap:
            raise ObjectTooLarge(rel, f"recorded size {size} exceeds the cap")
        limit = cap if size is None else size
        durable = self.opts.durable

        def consume(out: ObjectWriter, hasher: Any, batch: list[bytes]) -> None:
            for c in batch:
                hasher.update(c)
                out.write(c)

        def finish(out: ObjectWriter, tmp: Path) -> None:
            out.finish(durable)
            os.replace(tmp, repo.path_of(h))
            if durable:
                fsync_dir(repo.directory)

        async def op() -> int:
            repo.directory.mkdir(parents=True, exist_ok=True)
            tmp = repo.directory / f"{PENDING_PREFIX}{secrets.token_hex(8)}"
            hasher = hashlib.sha3_256()
            n = 0
            out = open_object_writer(tmp, size, self.opts.direct_io)
            try:
                batch: list[bytes] = []
                pending = 0
                async with self.paced(rel, limit) as chunks:
                    async for chunk in chunks:
                        n += len(chunk)
                        if n > limit:
                            what = "recorded size" if size is not None else "cap"
                            raise ObjectTooLarge(rel, f"stream exceeds the {what} of {limit} bytes")
                        batch.append(chunk)
                        pending += len(chunk)
                        if pending >= _BATCH:
                            await asyncio.to_thread(consume, out, hasher, batch)
                            batch, pending = [], 0
                if batch:
                    await asyncio.to_thread(consume, out, hasher, batch)
                if size is not None and n < size:
                    raise ObjectSizeMismatch(rel, f"got {n} of {size} bytes (truncated)")
                if hasher.digest() != h.digest:
                    raise ObjectHashMismatch(rel, "content does not match its hash")
                await asyncio.to_thread(finish, out, tmp)
            finally:
                out.close()
                tmp.unlink(missing_ok=True)
            self.stats.objects += 1
            self.stats.bytes += n
            return n

        return await self.retrying(rel, op)


class _Pace:
    """The deadline of one object read: ``t0 + base + min(received, expected) / min_rate``."""

    def __init__(self, source: str, rel: str, opts: PullOptions, expected: int) -> None:
        self.source = source
        self.rel = rel
        self.base = opts.deadline_base_s
        self.rate = opts.min_rate_bytes_per_s
        self.expected = expected
        self.received = 0
        self.t0 = asyncio.get_running_loop().time()

    def deadline(self) -> float:
        """When the read must have delivered its next chunk (event-loop clock)."""
        return self.t0 + self.base + min(self.received, self.expected) / self.rate

    async def within(self, aw: Awaitable[T]) -> T:
        """Await ``aw`` under the current deadline; :class:`SourceTooSlow` when it passes."""
        scope = asyncio.timeout_at(self.deadline())
        try:
            async with scope:
                return await aw
        except TimeoutError:
            if not scope.expired():
                raise  # the source's own timeout (a transient failure), not the pace
            elapsed = asyncio.get_running_loop().time() - self.t0
            total = self.base + self.expected / self.rate
            raise SourceTooSlow(
                self.rel,
                f"{self.source} delivered {self.received} bytes in {elapsed:.1f}s, slower than "
                f"the minimum rate of {self.rate:g} B/s after a {self.base:g}s grace "
                f"(whole object due within {total:.1f}s)",
            ) from None

    async def stream(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """``chunks``, each awaited under the deadline the bytes so far have earned."""
        it = aiter(chunks)
        while True:
            try:
                chunk = await self.within(anext(it))
            except StopAsyncIteration:
                return
            self.received += len(chunk)
            yield chunk


def _data_objects(ds: Dataset, blocks: list[m.MetadataBlock]) -> list[_DataObject]:
    out: dict[str, _DataObject] = {}
    for b in blocks:
        e = b.event
        if isinstance(e, m.AddData | m.ExecuteTransform):
            if e.new_data is not None:
                h = e.new_data.physical_hash
                out[f"data/{h}"] = (f"data/{h}", ds.data, h, e.new_data.size)
            if e.new_checkpoint is not None:
                h = e.new_checkpoint.physical_hash
                out[f"checkpoints/{h}"] = (
                    f"checkpoints/{h}",
                    ds.checkpoints,
                    h,
                    e.new_checkpoint.size,
                )
    return list(out.values())


class _Speculation:
    """Data downloads started while a new dataset's metadata is still arriving.

    A new dataset's blocks come in one stream (IPFS ``dag/export``) in name order, not chain
    order, so which blocks are on the chain is only known once the last one arrived; the data
    parts would wait for the whole export. Instead, every part a streamed block references is
    downloaded at once (through the same ``parallel`` bound, size cap and hash check), and
    after the walk and the chain rules, the pull keeps the downloads the chain needs and
    cancels and deletes the rest. What a hostile source can make us fetch in vain is bounded
    by ``max_speculative_bytes`` (recorded sizes); past it, parts wait for the validated
    chain as before. Nothing is committed before validation either way.
    """

    def __init__(
        self,
        f: _Fetcher,
        ds: Dataset,
        sem: asyncio.Semaphore,
        budget: int,
        ready: asyncio.Future[Any] | None = None,
    ) -> None:
        self.f = f
        self.ds = ds
        self.sem = sem
        self.budget = budget
        self.ready = ready
        self.spent = 0
        self.tasks: dict[str, asyncio.Task[int]] = {}
        self.objects: dict[str, _DataObject] = {}

    def offer(self, blocks: list[m.MetadataBlock]) -> None:
        """Start downloading what exported blocks reference (not yet known to be on the chain),
        within the budget. :class:`_ExportedBlocks` decoded them in a worker thread as they came."""
        for obj in _data_objects(self.ds, blocks):
            rel, store, h, size = obj
            if rel in self.tasks or store.contains(h):
                continue
            if size > self.f.opts.max_object_size or self.spent + size > self.budget:
                continue
            self.spent += size
            self.objects[rel] = obj
            self.tasks[rel] = asyncio.ensure_future(self._download(obj))

    async def settle_listing(self) -> None:
        """Wait for the listing started with the speculation (a failed one is just unused)."""
        if self.ready is not None:
            await asyncio.gather(asyncio.shield(self.ready), return_exceptions=True)

    async def _download(self, obj: _DataObject) -> int:
        await self.settle_listing()  # the listing maps names to direct CIDs (IPFS)
        async with self.sem:
            return await self.f.download(*obj)

    def started(self, rel: str) -> asyncio.Task[int] | None:
        """The download of ``rel`` if one was started."""
        return self.tasks.get(rel)

    async def drop_unneeded(self, needed: set[str]) -> None:
        """Cancel the downloads of objects the chain does not reference; delete their files."""
        extra = {rel: t for rel, t in self.tasks.items() if rel not in needed}
        await self._cancel(list(extra.values()))
        for rel in extra:
            _, store, h, _ = self.objects.pop(rel)
            store.path_of(h).unlink(missing_ok=True)
            del self.tasks[rel]

    async def cancel_all(self) -> None:
        """Stop every download still running (the pull failed, or is done with them)."""
        await self._cancel(list(self.tasks.values()))
        if self.ready is not None:
            self.ready.cancel()
            await asyncio.gather(self.ready, return_exceptions=True)

    @staticmethod
    async def _cancel(tasks: list[asyncio.Task[int]]) -> None:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _first_contact(f: _Fetcher) -> Multihash:
    """The remote head, or :class:`SourceHeadUnreachable` if the source never delivered it.

    The first read says whether the source is there at all: an IPFS node with no connected
    provider would otherwise wait out every retry of ``refs/head`` (five IPFS API timeouts),
    longer than the protocol core waits for the whole pull, and the next source would never be
    tried.
    """
    try:
        if f.opts.first_contact_s is None:
            return await _read_remote_head(f)
        async with asyncio.timeout(f.opts.first_contact_s):
            return await _read_remote_head(f)
    except TimeoutError:
        raise SourceHeadUnreachable(
            "refs/head",
            f"no answer from {f.source.description} within {f.opts.first_contact_s:g} s "
            "([transfer] first_contact_s)",
        ) from None
    except SourceTooSlow:
        raise
    except SourceUnavailable as e:
        raise SourceHeadUnreachable("refs/head", str(e).removeprefix("refs/head: ")) from e


async def _read_remote_head(f: _Fetcher) -> Multihash:
    raw = await f.read_bytes("refs/head", f.opts.max_ref_size)
    try:
        return Multihash.from_multibase(raw.decode("ascii").strip())
    except (UnicodeDecodeError, DecodeError, ValueError) as e:
        raise InvalidRemoteHead("refs/head", f"not a multibase multihash: {raw[:80]!r}") from e


async def _fetch_block(
    f: _Fetcher, cache: FsObjectRepository, h: Multihash, mem: _ExportedBlocks | None = None
) -> tuple[bytes, m.MetadataBlock]:
    rel = f"blocks/{h}"
    data: bytes | None = None
    if mem is not None:  # keyed by their verified sha3-256
        block = mem.blocks.get(h)
        if block is not None:
            return mem.data[h], block
        data = mem.data.get(h)  # exported, but does not decode: reported below
    if data is None:
        data = await asyncio.to_thread(_cached_block, cache, h)
    if data is None:
        data = await f.read_bytes(rel, f.opts.max_block_size)
        f.stats.blocks_fetched += 1
        # Hashing, the cache write and decoding are CPU and disk work on bytes a stranger sent:
        # a worker thread does them, never the event loop.
        return await asyncio.to_thread(_check_store_decode, cache, h, rel, data)
    return data, await asyncio.to_thread(_decode_block, rel, data)


def _cached_block(cache: FsObjectRepository, h: Multihash) -> bytes | None:
    if not cache.contains(h):
        return None
    try:
        return cache.get_bytes(h, verify=True)
    except Exception:
        cache.path_of(h).unlink(missing_ok=True)
        return None


def _check_store_decode(
    cache: FsObjectRepository, h: Multihash, rel: str, data: bytes
) -> tuple[bytes, m.MetadataBlock]:
    if Multihash.sha3_256(data) != h:
        raise ObjectHashMismatch(rel, "block bytes do not hash to the block's name")
    block = _decode_block(rel, data)  # only a block that decodes is worth caching
    cache.insert_bytes(data, h)
    return data, block


def _decode_block(rel: str, data: bytes) -> m.MetadataBlock:
    try:
        return decode_block(data)
    except DecodeError as e:
        raise InvalidRemoteChain(rel, f"does not decode: {e}") from e


class _LocalChain:
    """Membership in the local chain (head back to the Seed), paying only for what is asked.

    A pull needs "is this remote block already in my chain?" for the few blocks between the
    two heads. Collecting the whole chain first would read every local block on every pull,
    which grows without bound on a dataset that is updated for months. Instead, a block is a
    candidate only if its file is stored; then the chain is walked back from the head, once
    and incrementally, down to that block's sequence number (sequence numbers fall by one per
    block, so the walk knows when it has gone past it). Behind / ahead / diverged then cost
    the distance between the heads, not the chain length.
    """

    def __init__(self, ds: Dataset | None, head: Multihash | None) -> None:
        self.ds = ds
        self.head = head if ds is not None else None
        self._on_chain: set[Multihash] = set()
        self._next = self.head  # where the walk back resumes

    def __bool__(self) -> bool:
        return self.head is not None

    def stored(self, h: Multihash) -> bool:
        """Whether the block's bytes are in the local store (on the chain or not)."""
        return self.ds is not None and self.ds.blocks.contains(h)

    async def contains(self, h: Multihash) -> bool:
        """``h in self``; the walk back (reading and decoding local blocks) in a worker thread.

        The common answers (already walked past, or not stored at all) cost no thread hop.
        """
        if h in self._on_chain:
            return True
        if self._next is None or not self.stored(h):
            return False
        return await asyncio.to_thread(self.__contains__, h)

    def __contains__(self, h: object) -> bool:
        if not isinstance(h, Multihash) or self.ds is None:
            return False
        if h in self._on_chain:
            return True
        if self._next is None or not self.ds.blocks.contains(h):
            return False
        seq = self.ds.get_block(h, verify=False).sequence_number
        while self._next is not None:
            cur = self._next
            block = self.ds.get_block(cur, verify=False)
            self._on_chain.add(cur)
            self._next = block.prev_block_hash
            if block.sequence_number <= seq:
                break
        return h in self._on_chain


async def _prefetch_blocks(
    f: _Fetcher,
    cache: FsObjectRepository,
    local: _LocalChain,
    on_blocks: Callable[[list[m.MetadataBlock]], None] | None = None,
) -> _ExportedBlocks | None:
    """Fetch the blocks we lack before the walk, in as few round trips as the source allows.

    * Nothing local yet (a new dataset): ask the source for every ``blocks/`` file in one
      transfer (IPFS ``dag/export``). Each payload is hashed and decoded while the rest still
      streams (:class:`_ExportedBlocks`) and returned in memory under its sha3-256, so the walk
      reads them without a request and with their identity already proven. Anything else in
      the archive is ignored. ``on_blocks`` sees the decoded candidates as they come (see
      :class:`_Speculation`).
    * Otherwise, if the source can list ``blocks/``, the blocks we lack are fetched
      ``block_parallel`` at a time into the cache.

    Blocks missed by both (a source that cannot list, a block split into several leaves) are
    fetched one at a time by the walk. Bytes not matching their name reject the source like
    any other altered block.
    """
    if not local:
        mem = _ExportedBlocks(f.opts.max_block_size, on_blocks)
        try:
            exported = await f.source.export_blocks(f.opts.max_export_size, mem.offer)
            if exported and not mem.offered:  # a source that does not report arrivals
                for data in exported:
                    mem.offer(data)
            await mem.settle()
        except BaseException:
            await mem.cancel()
            raise
        if exported:
            f.stats.bytes += sum(map(len, mem.data.values()))
            f.stats.blocks_fetched += len(mem.data)
            return mem
    names = await f.source.list_names("blocks")
    if not names:
        return None
    wanted: list[Multihash] = []
    for n in names:
        try:
            h = Multihash.from_multibase(n)
        except (DecodeError, ValueError):
            continue
        if not local.stored(h) and not cache.contains(h):
            wanted.append(h)
    sem = asyncio.Semaphore(max(1, f.opts.block_parallel))

    async def one(h: Multihash) -> None:
        async with sem:
            rel = f"blocks/{h}"
            data = await f.read_bytes(rel, f.opts.max_block_size)
            await asyncio.to_thread(_check_and_cache, cache, h, rel, data)
            f.stats.blocks_fetched += 1

    await _gather_all([one(h) for h in wanted])
    return None


class _ExportedBlocks:
    """A new dataset's ``blocks/`` from one bulk export, each candidate hashed and decoded.

    The source hands over each candidate as it arrives (:meth:`offer`); a worker thread hashes
    (sha3-256) and decodes them, one call per batch, never one per block. With ``on_blocks``
    (the speculative downloads of a pull) that happens while the export still streams: one
    call at a time takes everything offered since the previous one (one network chunk of the
    export, or more when the thread lags), and hands the decoded blocks on. Without it, one
    call after the export: a thread decoding while the event loop parses the next chunk only
    makes the two wait for each other's turn at the GIL (measured: no faster for 1,000
    blocks). Everything is keyed by its sha3-256, so a block found under a name is proven to
    be that block, and the walk only follows ``prev_block_hash`` through dictionaries. A
    candidate that does not decode stays in ``data`` only (the walk reports it if it is on the
    chain); one larger than a block may be is ignored. The decoded candidates are held as the
    walk would hold the chain's blocks, so the export's size cap bounds them.
    """

    def __init__(
        self,
        max_block_size: int,
        on_blocks: Callable[[list[m.MetadataBlock]], None] | None = None,
    ) -> None:
        self.max_block_size = max_block_size
        self.on_blocks = on_blocks
        self.data: dict[Multihash, bytes] = {}
        self.blocks: dict[Multihash, m.MetadataBlock] = {}
        self.offered = 0
        self._pending: list[bytes] = []
        self._runs: list[asyncio.Task[None]] = []

    def offer(self, data: bytes) -> None:
        """Queue a candidate (unverified) for hashing and decoding."""
        self._pending.append(data)
        self.offered += 1
        if self.on_blocks is not None and (not self._runs or self._runs[-1].done()):
            # Starts on the loop's next turn: every candidate of the current chunk is queued.
            self._runs.append(asyncio.ensure_future(self._run()))

    async def _run(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            found = await asyncio.to_thread(_hash_and_decode, batch, self.max_block_size)
            decoded: list[m.MetadataBlock] = []
            for h, data, block in found:
                self.data[h] = data
                if block is not None:
                    self.blocks[h] = block
                    decoded.append(block)
            if decoded and self.on_blocks is not None:
                self.on_blocks(decoded)

    async def settle(self) -> None:
        """Wait until every candidate offered so far is hashed and decoded."""
        if self._pending and (not self._runs or self._runs[-1].done()):
            self._runs.append(asyncio.ensure_future(self._run()))
        for run in list(self._runs):  # one at a time: the earlier ones are done
            await run

    async def cancel(self) -> None:
        """Stop (the export failed): nothing more is handed to ``on_blocks``."""
        self._pending.clear()
        for t in self._runs:
            t.cancel()
        await asyncio.gather(*self._runs, return_exceptions=True)


def _hash_and_decode(
    batch: list[bytes], max_block_size: int
) -> list[tuple[Multihash, bytes, m.MetadataBlock | None]]:
    """Each candidate under its sha3-256 with its decoded block (None: does not decode)."""
    out: list[tuple[Multihash, bytes, m.MetadataBlock | None]] = []
    for data in batch:
        if len(data) > max_block_size:
            continue
        try:
            block: m.MetadataBlock | None = decode_block(data)
        except DecodeError:
            block = None
        out.append((Multihash.sha3_256(data), data, block))
    return out


def _check_and_cache(cache: FsObjectRepository, h: Multihash, rel: str, data: bytes) -> None:
    if Multihash.sha3_256(data) != h:
        raise ObjectHashMismatch(rel, "block bytes do not hash to the block's name")
    cache.insert_bytes(data, h)


async def _gather_all(coros: list[Coroutine[Any, Any, T]]) -> list[T]:
    """Run all; on the first failure cancel the rest, wait for them, and re-raise."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def fetch_linked_objects(
    f: _Fetcher,
    ds: Dataset,
    new: list[tuple[Multihash, bytes, m.MetadataBlock]],
    sem: asyncio.Semaphore,
) -> None:
    """Fetch and verify the linked objects (RFC-017) the new blocks' data parts reference.

    Must run after the parts are stored (they are read to find the links). Each object is
    checked against its hash and capped at the block's ``sizeNaive``; then, per block, the
    referenced objects' sizes times their reference counts must equal ``sizeNaive``.
    Verified objects stay in ``data/`` (content-addressed), so a resumed pull skips them.

    Raises:
        InvalidRemoteChain: a block's linked-objects summary does not match its part.
        ObjectRejected / SourceUnavailable: as for any other object.
    """
    jobs: list[tuple[Multihash, LinkSummary, list[Counter[Multihash]]]] = []
    for bh, _, block in new:
        rel = f"blocks/{bh}"
        try:
            summary = link_summary(block.event)
        except LinkSummaryError as e:
            raise InvalidRemoteChain(rel, str(e)) from e
        if summary is None or summary.num_objects_naive == 0:
            continue
        event = block.event
        assert isinstance(event, m.AddData)
        if event.new_data is None:
            raise InvalidRemoteChain(rel, "records linked objects but adds no data part")
        part = ds.data.path_of(event.new_data.physical_hash)
        try:
            choices = await asyncio.to_thread(link_choices, part, summary)
        except (pa.ArrowException, OSError) as e:
            raise InvalidRemoteChain(
                rel, f"records linked objects but its data part is not readable parquet: {e}"
            ) from e
        if not choices:
            raise InvalidRemoteChain(
                rel,
                f"records {summary.num_objects_naive} linked objects but no set of multihash "
                f"columns in data/{event.new_data.physical_hash} has that many links",
            )
        jobs.append((bh, summary, choices))
    if not jobs:
        return
    listed: set[str] | None = None
    if any(len(c) > 1 for _, _, c in jobs):
        names = await f.source.list_names("data")
        listed = set(names) if names is not None else None
    chosen: list[tuple[Multihash, LinkSummary, Counter[Multihash]]] = []
    caps: dict[Multihash, int] = {}
    for bh, summary, choices in jobs:
        pick = choices[0]
        if listed is not None:  # ambiguous columns: prefer links the source actually holds
            for c in choices:
                if all(ds.data.contains(h) or str(h) in listed for h in c):
                    pick = c
                    break
        chosen.append((bh, summary, pick))
        for h in pick:
            caps[h] = max(caps.get(h, 0), summary.size_naive)

    async def one(h: Multihash) -> None:
        async with sem:
            await f.download(f"data/{h}", ds.data, h, None, cap=caps[h])

    await _gather_all([one(h) for h in caps if not ds.data.contains(h)])
    for bh, summary, pick in chosen:
        total = sum(ds.data.size(h) * n for h, n in pick.items())
        if total != summary.size_naive:
            raise InvalidRemoteChain(
                f"blocks/{bh}",
                f"linked objects total {total} bytes, the block records {summary.size_naive}",
            )


def _write_blocks(
    repo: FsObjectRepository, hashes: list[Multihash], blocks: list[bytes], durable: bool
) -> None:
    """Store verified block files before ``refs/head`` moves, with few flushes to disk.

    Each file is written to a pending name and renamed, so a name never holds partial bytes
    while the system runs. Durability comes from one ``syncfs`` of the whole batch where the
    platform has it (one journal commit instead of one per block: 1,000 blocks went from
    ~0.7 s to a few tens of ms during a pull), else from an fsync per file in parallel and one
    directory fsync. Either way the blocks are on disk before the caller moves
    ``refs/head``. A file already under a block's name is rewritten, not trusted: after a
    power loss between a rename and the flush it could hold torn bytes, and no ref names it.
    """
    repo.directory.mkdir(parents=True, exist_ok=True)
    batched = durable and len(hashes) > 1 and can_sync_filesystem()
    per_file_fsync = durable and not batched

    def one(item: tuple[Multihash, bytes]) -> None:
        h, data = item
        tmp = repo.directory / f"{PENDING_PREFIX}{secrets.token_hex(8)}"
        try:
            with open(tmp, "wb") as out:
                out.write(data)
                out.flush()
                if per_file_fsync:
                    os.fsync(out.fileno())
            os.replace(tmp, repo.path_of(h))
        finally:
            tmp.unlink(missing_ok=True)

    items = list(zip(hashes, blocks, strict=True))
    if per_file_fsync and len(items) > 1:
        with ThreadPoolExecutor(max_workers=_FSYNC_WORKERS) as pool:
            list(pool.map(one, items))
    else:
        for item in items:
            one(item)
    if batched:
        sync_filesystem(repo.directory)
    elif durable:
        fsync_dir(repo.directory)


def _open_staging(root: Path, durable: bool) -> Dataset:
    if root.is_dir():
        ds = Dataset(root, durable=durable)
        ds.cleanup()
        return ds
    return Dataset.create(root, durable=durable)


async def _walk(
    f: _Fetcher,
    cache: FsObjectRepository,
    remote_head: Multihash,
    local: _LocalChain,
    mem: _ExportedBlocks | None = None,
) -> tuple[list[tuple[Multihash, bytes, m.MetadataBlock]], bool]:
    """Blocks from ``remote_head`` back to the first one in ``local`` (oldest first)."""
    new: list[tuple[Multihash, bytes, m.MetadataBlock]] = []
    h: Multihash | None = remote_head
    while h is not None:
        if mem is not None and not local and h in mem.blocks:
            # A new dataset's blocks from one export, hashed and decoded as they came: follow
            # them on the loop (dictionary look-ups), yielding to it between runs.
            run, h = _walk_in_memory(mem, h, _WALK_RUN)
            new.extend(run)
            await asyncio.sleep(0)
            continue
        if await local.contains(h):
            new.reverse()
            return new, True
        data, block = await _fetch_block(f, cache, h, mem)
        new.append((h, data, block))
        h = block.prev_block_hash
    new.reverse()
    return new, False


_WALK_RUN = 16384
"""Blocks followed per turn of the loop in the in-memory walk (the loop stays responsive)."""


def _walk_in_memory(
    mem: _ExportedBlocks, h: Multihash | None, limit: int
) -> tuple[list[tuple[Multihash, bytes, m.MetadataBlock]], Multihash | None]:
    """Follow decoded blocks back from ``h`` while ``mem`` holds them (at most ``limit``); the
    run (newest first) and the hash to go on from (None at the chain's start)."""
    run: list[tuple[Multihash, bytes, m.MetadataBlock]] = []
    blocks, data = mem.blocks, mem.data
    while h is not None and len(run) < limit:
        block = blocks.get(h)
        if block is None:
            break
        run.append((h, data[h], block))
        h = block.prev_block_hash
    return run, h


def _validate_chain(
    state: ChainState, new: list[tuple[Multihash, bytes, m.MetadataBlock]]
) -> ChainState:
    """Fold every chain rule over ``new`` (a worker thread runs it: long chains cost CPU)."""
    for bh, _, block in new:
        try:
            state = validate_append(state, block, bh)
        except ChainRuleViolation as e:
            raise InvalidRemoteChain(f"blocks/{bh}", str(e)) from e
    return state


def _seed_id(block: m.MetadataBlock, rel: str) -> DatasetId:
    if not isinstance(block.event, m.Seed):
        raise InvalidRemoteChain(rel, "the first block of the chain is not a Seed")
    return block.event.dataset_id


#: (hash, bytes, decoded) of each block a pull adds, oldest first
_NewBlocks = list[tuple[Multihash, bytes, m.MetadataBlock]]


@dataclass(slots=True)
class _LocalSide:
    """The local end of a pull: the dataset ``alias`` names (``existing``), or a new dataset's
    staging directory; ``ds`` is written, ``local_head`` is its head when the pull began."""

    existing: Dataset | None
    ds: Dataset
    local_id: DatasetId
    local_head: Multihash | None
    local: _LocalChain
    staging: Path | None

    def drop_cache(self) -> None:
        """Remove the pull's cache of fetched blocks."""
        shutil.rmtree(self.ds.layout.root.joinpath(*_CACHE_DIR[:2]), ignore_errors=True)

    def give_back(self) -> None:
        """Refused for space: give back what the walk fetched (the blocks' cache, and a new
        dataset's staging directory, which would otherwise wait for a later attempt)."""
        self.drop_cache()
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)

    def cache(self) -> FsObjectRepository:
        """The pull's cache of fetched blocks."""
        return FsObjectRepository(self.ds.layout.root.joinpath(*_CACHE_DIR), durable=False)


def _open_local(
    repo: DatasetRepository, alias: str, source: Source, opts: PullOptions, staging_key: str | None
) -> _LocalSide:
    """The dataset ``alias`` names, or the staging directory a new dataset accumulates in."""
    try:
        handle = repo.resolve(alias)
        existing = Dataset(handle.root, durable=opts.durable)
    except DatasetNotFound:
        key = staging_key or hashlib.sha256(source.description.encode()).hexdigest()[:20]
        staging = repo.root / f"{_STAGING_PREFIX}{key}"
        ds = _open_staging(staging, opts.durable)
        head = ds.head()
        # replaced by the remote dataset's id when the staging directory is adopted
        unused = DatasetId.new_seeded_ed25519(b"unused")
        return _LocalSide(None, ds, unused, head, _LocalChain(ds, head), staging)
    head = existing.head()
    return _LocalSide(existing, existing, handle.id, head, _LocalChain(existing, head), None)


async def _walk_remote(
    f: _Fetcher,
    at: _LocalSide,
    remote_head: Multihash,
    spec: _Speculation | None,
    durable: bool,
) -> tuple[_NewBlocks, bool, FsObjectRepository, _ExportedBlocks | None]:
    """Fetch the remote blocks down to a local one: (new blocks oldest first, met a local
    block?, block cache, prefetched blocks)."""
    cache = at.cache()
    mem = await _prefetch_blocks(f, cache, at.local, spec.offer if spec is not None else None)
    new, met_local = await _walk(f, cache, remote_head, at.local, mem)
    if at.existing is None and at.local_head is not None:
        # A previous attempt committed in staging but died before the rename: keep it only if
        # the remote extends it exactly, else start the staging dataset afresh.
        extends = staging_extends(
            met_local=met_local,
            has_new=bool(new),
            first_prev=new[0][2].prev_block_hash if new else None,
            remote_head=remote_head,
            local_head=at.local_head,
        )
        if not extends:
            assert at.staging is not None
            shutil.rmtree(at.staging)
            at.ds = _open_staging(at.staging, durable)
            cache = at.cache()
            at.local_head, at.local = None, _LocalChain(at.ds, None)
            new, met_local = await _walk(f, cache, remote_head, at.local, mem)
    return new, met_local, cache, mem


async def _older_blocks(
    f: _Fetcher, cache: FsObjectRepository, h: Multihash | None, mem: _ExportedBlocks | None
) -> _NewBlocks:
    """The blocks from ``h`` back to the ``Seed``, oldest first."""
    older: _NewBlocks = []
    while h is not None:
        data, block = await _fetch_block(f, cache, h, mem)
        older.append((h, data, block))
        h = block.prev_block_hash
    older.reverse()
    return older


async def _download_data(
    f: _Fetcher,
    ds: Dataset,
    new: _NewBlocks,
    spec: _Speculation | None,
    sem: asyncio.Semaphore,
    opts: PullOptions,
    alongside: Callable[[], None] | None = None,
) -> None:
    """Data parts and checkpoints the new blocks name, bounded parallelism; then their linked
    objects (RFC-017).

    ``alongside`` (blocking) runs in its own thread once the pull is admitted, while the
    downloads run, and has finished when this returns or raises (its thread cannot be stopped,
    so it is never left writing); the downloads' error wins over its error.
    """
    objects = _data_objects(ds, [b for _, _, b in new])
    if spec is not None:
        await spec.drop_unneeded({o[0] for o in objects})
    todo = [
        o for o in objects if (spec is not None and spec.started(o[0])) or not o[1].contains(o[2])
    ]
    if opts.admit is not None:
        opts.admit(sum(o[3] for o in todo) + sum(len(d) for _, d, _ in new))
    if alongside is None:
        await _fetch_data(f, ds, new, spec, sem, todo)
        return
    pool = ThreadPoolExecutor(max_workers=1)  # not the loop's: the downloads hash there
    side = asyncio.get_running_loop().run_in_executor(pool, alongside)
    pool.shutdown(wait=False)
    try:
        await _fetch_data(f, ds, new, spec, sem, todo)
    except BaseException:
        await asyncio.wait([side])
        if not side.cancelled():
            side.exception()  # retrieved, so never logged as unhandled
        raise
    await side


async def _fetch_data(
    f: _Fetcher,
    ds: Dataset,
    new: _NewBlocks,
    spec: _Speculation | None,
    sem: asyncio.Semaphore,
    todo: list[_DataObject],
) -> None:
    if todo:  # lets sources that can list map names to direct addresses (IPFS CIDs)
        if spec is not None:  # its listing is already under way
            await spec.settle_listing()
        else:
            await asyncio.gather(f.source.list_names("data"), f.source.list_names("checkpoints"))

    async def one(obj: _DataObject) -> None:
        started = spec.started(obj[0]) if spec is not None else None
        if started is not None:
            await started  # a failed speculative download fails the pull like any other
            return
        async with sem:
            await f.download(*obj)

    await _gather_all([one(o) for o in todo])
    # Linked objects (RFC-017) are named inside the parts just verified; fetch them now.
    await fetch_linked_objects(f, ds, new, sem)


async def _commit_blocks(
    ds: Dataset,
    new: _NewBlocks,
    local_head: Multihash | None,
    state: ChainState,
    durable: bool,
    written: bool = False,
) -> None:
    """Data is in place: write the blocks (unless ``written``: already on disk, flushed as
    ``durable`` says), then move ``refs/head`` last."""
    blocks = [d for _, d, _ in new]
    hashes = [bh for bh, _, _ in new]
    with ds.write_lock():
        if new:  # else staging already holds the remote head (a crash hit before the rename)
            # Every block was hashed and chain-checked above against the state at local_head;
            # the compare-and-swap on refs/head refuses the commit if anyone moved it since.
            if not written:
                await asyncio.to_thread(_write_blocks, ds.blocks, hashes, blocks, durable)
            # The commit point, deliberately synchronous (one small atomic write): a pull
            # cancelled at any await before it leaves refs/head, and so the dataset, exactly as
            # it was (blocks written by content address belong to no chain until a ref names
            # them), and no cancellation can land between the ref moving and the pull returning.
            ds.refs.set(HEAD_REF, hashes[-1], expected=local_head)
            remember_chain_state(state)  # validated above: the next pull folds from here


def _adopt_staging(
    repo: DatasetRepository, alias: str, staging: Path, remote_id: DatasetId, durable: bool
) -> None:
    """Name the staging dataset ``alias`` and move it where its id says."""
    check_alias_for(alias, remote_id)
    if repo.contains(alias):
        raise DatasetAlreadyExists(f"a dataset named {alias!r} already exists")
    atomic_write_bytes(staging / "info" / "alias", alias.encode("utf-8"), durable=durable)
    staging.rename(repo.root / remote_id.as_multibase())
    if durable:
        fsync_dir(repo.root)


async def pull(
    repo: DatasetRepository,
    source: Source,
    alias: str,
    *,
    force: bool = False,
    options: PullOptions | None = None,
    staging_key: str | None = None,
) -> PullOutcome:
    """Pull ``source`` into the local dataset ``alias`` (created if missing).

    ``staging_key`` names the hidden directory that accumulates a *new* dataset across
    attempts (default: derived from the source description), so restarts resume.

    Raises:
        SourceHeadUnreachable: the first read (``refs/head``) got no answer at all.
        SourceUnavailable: an object could not be obtained (retry later; progress is kept).
        ObjectRejected: the source served bytes that fail verification (nothing committed).
        DivergedHeads: the chains diverged and ``force`` is False.
        DatasetAlreadyExists: the remote dataset's id is stored under another alias, or
            ``alias`` names a different dataset.
    """
    opts = options or PullOptions()
    validate_alias(alias)
    f = _Fetcher(source, opts)
    remote_head = await _first_contact(f)
    at = _open_local(repo, alias, source, opts, staging_key)
    if at.existing is not None:
        up_to_date = await _up_to_date(at, alias, remote_head)
        if up_to_date is not None:
            return up_to_date
    sem = asyncio.Semaphore(max(1, opts.parallel))
    spec = _speculation(f, at, sem) if not at.local else None
    try:
        new, met_local, cache, mem = await _walk_remote(f, at, remote_head, spec, opts.durable)
        decision, remote_id = await _decide(repo, at, new, met_local, remote_head, force, alias, f)
        if decision.rewalk_to_seed:
            # Re-walk to the Seed so the whole remote chain is validated from scratch.
            new = await _older_blocks(f, cache, new[0][2].prev_block_hash, mem) + new
        base_state = await asyncio.to_thread(at.ds.state) if decision.base_from_local else None
        # -- validate before downloading any data --
        base = ChainState() if base_state is None else base_state
        state = await asyncio.to_thread(_validate_chain, base, new)
        # A new dataset's blocks go into its hidden staging directory while the data
        # downloads: writing and flushing 1,000 block files (one syncfs of the whole file
        # system, shared with everything else on it) took 0.2-0.6 s after the last part.
        # Nothing names them before refs/head moves, and the staging is invisible until then.
        early = None
        if at.existing is None and new:
            hashes, blocks = [bh for bh, _, _ in new], [d for _, d, _ in new]
            early = functools.partial(_write_blocks, at.ds.blocks, hashes, blocks, opts.durable)
        await _download_data(f, at.ds, new, spec, sem, opts, early)
    except BaseException as e:
        if spec is not None:
            await spec.cancel_all()
        if isinstance(e, StorageBudgetExceeded):
            at.give_back()
        raise
    if spec is not None:
        await spec.cancel_all()  # nothing left running; settles the listing
    await _commit_blocks(at.ds, new, at.local_head, state, opts.durable, early is not None)
    at.drop_cache()
    did = at.local_id
    if at.existing is None:
        assert at.staging is not None and remote_id is not None
        _adopt_staging(repo, alias, at.staging, remote_id, opts.durable)
        did = remote_id
    return PullOutcome(
        alias,
        did,
        decision.comparison,
        at.local_head,
        at.ds.head() if at.existing is not None else remote_head,
        created=at.existing is None,
        forced=decision.forced,
        blocks_fetched=f.stats.blocks_fetched,
        objects_downloaded=f.stats.objects,
        bytes_downloaded=f.stats.bytes,
        new_blocks=len(new),
    )


def _speculation(f: _Fetcher, at: _LocalSide, sem: asyncio.Semaphore) -> _Speculation | None:
    """Data downloads started while the blocks of a new dataset are fetched (None: off)."""
    if f.opts.max_speculative_bytes <= 0:
        return None
    # Lets sources that can list map names to direct addresses (IPFS CIDs) meanwhile.
    listing = asyncio.ensure_future(
        asyncio.gather(f.source.list_names("data"), f.source.list_names("checkpoints"))
    )
    return _Speculation(f, at.ds, sem, f.opts.max_speculative_bytes, listing)


async def _up_to_date(at: _LocalSide, alias: str, remote_head: Multihash) -> PullOutcome | None:
    """The outcome when the local dataset already holds the remote head (else None)."""
    local_head = at.local_head
    if local_head == remote_head:
        # A pull killed between its commit and its clean-up leaves its cache behind.
        at.drop_cache()
        return PullOutcome(alias, at.local_id, HeadComparison.EQUAL, local_head, local_head)
    if await at.local.contains(remote_head):
        at.drop_cache()
        return PullOutcome(alias, at.local_id, HeadComparison.LOCAL_AHEAD, local_head, local_head)
    return None


async def _decide(
    repo: DatasetRepository,
    at: _LocalSide,
    new: _NewBlocks,
    met_local: bool,
    remote_head: Multihash,
    force: bool,
    alias: str,
    f: _Fetcher,
) -> tuple[PullDecision, DatasetId | None]:
    """The remote dataset's id (None: the local one) and the :func:`decide_pull` decision;
    a new dataset's id must not be stored already."""
    if not met_local:
        remote_id: DatasetId | None = _seed_id(new[0][2], f"blocks/{new[0][0]}")
    elif at.existing is None:
        remote_id = (await asyncio.to_thread(at.ds.state)).dataset_id
    else:
        remote_id = None
    decision = decide_pull(
        existing=at.existing is not None,
        met_local=met_local,
        remote_id=remote_id,
        local_id=at.local_id,
        local_head=at.local_head,
        remote_head=remote_head,
        first_prev=new[0][2].prev_block_hash if new else None,
        force=force,
        alias=alias,
        description=f.source.description,
    )
    if decision.check_id_free:
        assert remote_id is not None
        try:
            other = repo.resolve(remote_id.as_did_str())
        except DatasetNotFound:
            return decision, remote_id
        raise DatasetAlreadyExists(
            f"{f.source.description} is dataset {remote_id}, already stored as "
            f"{other.alias!r}; pull with --as {other.alias}"
        )
    return decision, remote_id


async def pull_url(
    repo: DatasetRepository,
    url: str,
    *,
    alias: str | None = None,
    force: bool = False,
    ipfs_api: str | None = None,
    ipfs_gateway: str | None = None,
    options: PullOptions | None = None,
    timeout_s: float = 30.0,
    policy: SourcePolicy | None = None,
    http: SharedHttpSession | None = None,
    p2p_request: StreamRequest | None = None,
) -> PullOutcome:
    """Pull from a URL (``ipfs://``, ``ipns://``, ``http(s)://``, ``libp2p://``, ``file://``
    or a path).

    The local alias defaults to the URL's last path segment, as in kamu. An HTTP source
    contacts only what ``policy`` allows (default: loopback only, as a default-configured
    node; :mod:`node.transfer.policy`); with ``http`` it reuses that session's connections
    (and its policy).

    Raises:
        InvalidSourceUrl: the URL is empty, has an unsupported scheme or names no dataset.
        SourceRefused: the policy forbids the source's address or where it redirects.
        SourceTooSlow: an object arrived slower than ``options``' minimum rate.
        plus everything :func:`pull` raises.
    """
    source = open_source(
        url,
        ipfs_api=ipfs_api,
        ipfs_gateway=ipfs_gateway,
        timeout_s=timeout_s,
        policy=policy,
        http=http,
        p2p_request=p2p_request,
    )
    try:
        key = hashlib.sha256(url.encode()).hexdigest()[:20]
        return await pull(
            repo,
            source,
            alias or default_alias(url),
            force=force,
            options=options,
            staging_key=key,
        )
    finally:
        await source.close()
