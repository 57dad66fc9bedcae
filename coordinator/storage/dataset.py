"""One dataset on disk in kamu's layout, and its metadata chain.

Layout (kamu-cli ``dataset_layout.rs``)::

    <dataset>/blocks/<f1620… block hash>      raw manifest bytes, as received
    <dataset>/refs/head                        head block hash, no trailing newline
    <dataset>/data/<f1620… physical hash>      parquet part files
    <dataset>/checkpoints/<f1620… hash>        checkpoint files
    <dataset>/info/                            private to this node (alias, lock)

Blocks are stored exactly as received and never re-encoded; appends write data first, then
blocks, then ``refs/head`` last, so a crash always leaves the previous head valid.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from coordinator.chain.validation import ChainState, validate_append
from coordinator.errors import BlockNotFound, ChainRuleViolation, HashMismatch, InvalidBlock
from coordinator.identity import DatasetId
from coordinator.metadata.flatbuffers_serde import (
    decode_block,
    encode_block,
)
from coordinator.metadata.model import MetadataBlock
from coordinator.multiformats import Multihash
from coordinator.storage.fs import remove_stale_pending
from coordinator.storage.objects import FsObjectRepository
from coordinator.storage.refs import FsRefRepository

HEAD_REF = "head"

# Chain states by head hash, shared by every Dataset object of the process. A head hash fixes
# the whole chain behind it (blocks are content-addressed and name their predecessor), so a
# state validated once stays right for that head wherever it is stored; a node that opens a
# dataset per request (the daemon) then folds only the blocks added since, not the chain
# from the Seed on every pull. Bounded twice: the newest few heads of each dataset (a pull or an
# append folds from the dataset's current head; older heads' states are never asked for again,
# and keeping them grew a long-running node by every head it ever stored until 4,096 of them,
# ~1,100 an hour in make bench-longrun), and an LRU over all datasets. Guarded because states
# are computed in threads.
_SHARED_STATES: OrderedDict[Multihash, ChainState] = OrderedDict()
_SHARED_STATES_MAX = 4096
_STATES_PER_DATASET = 4
_HEADS_BY_DATASET: dict[DatasetId | None, OrderedDict[Multihash, None]] = {}
_SHARED_STATES_LOCK = threading.Lock()


def _forget_state(head: Multihash) -> None:
    state = _SHARED_STATES.pop(head, None)
    if state is None:
        return
    heads = _HEADS_BY_DATASET.get(state.dataset_id)
    if heads is not None:
        heads.pop(head, None)
        if not heads:
            del _HEADS_BY_DATASET[state.dataset_id]


def remember_chain_state(state: ChainState) -> None:
    """Record a validated chain state for its head (see ``Dataset.state``)."""
    if state.head is None:
        return
    with _SHARED_STATES_LOCK:
        _SHARED_STATES[state.head] = state
        _SHARED_STATES.move_to_end(state.head)
        heads = _HEADS_BY_DATASET.setdefault(state.dataset_id, OrderedDict())
        heads[state.head] = None
        heads.move_to_end(state.head)
        while len(heads) > _STATES_PER_DATASET:
            old = next(iter(heads))
            del heads[old]
            _SHARED_STATES.pop(old, None)
        while len(_SHARED_STATES) > _SHARED_STATES_MAX:
            _forget_state(next(iter(_SHARED_STATES)))


def shared_chain_states() -> int:
    """Chain states the process keeps (for memory tests and figures)."""
    with _SHARED_STATES_LOCK:
        return len(_SHARED_STATES)


def known_chain_state(head: Multihash) -> ChainState | None:
    """The validated chain state of ``head`` if this process already knows it, else None.

    No file is read: a caller that has the head (e.g. from :meth:`DatasetRepository.catalog`)
    gets the state without opening the dataset; a miss is answered by :meth:`Dataset.state`.
    """
    with _SHARED_STATES_LOCK:
        state = _SHARED_STATES.get(head)
        if state is not None:
            _SHARED_STATES.move_to_end(head)
        return state


@dataclass(frozen=True, slots=True)
class DatasetLayout:
    """Paths of a dataset directory."""

    root: Path

    @property
    def blocks_dir(self) -> Path:
        """``blocks/``."""
        return self.root / "blocks"

    @property
    def refs_dir(self) -> Path:
        """``refs/``."""
        return self.root / "refs"

    @property
    def data_dir(self) -> Path:
        """``data/``."""
        return self.root / "data"

    @property
    def checkpoints_dir(self) -> Path:
        """``checkpoints/``."""
        return self.root / "checkpoints"

    @property
    def info_dir(self) -> Path:
        """``info/`` (node-private; excluded from IPFS publication like kamu does)."""
        return self.root / "info"

    def create(self) -> None:
        """Create the directory skeleton."""
        for d in (self.blocks_dir, self.refs_dir, self.data_dir, self.checkpoints_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.info_dir.mkdir(parents=True, exist_ok=True)


class Dataset:
    """A dataset directory with its object stores and metadata chain.

    Writes are serialised by an exclusive ``flock`` on ``info/write.lock`` (held during
    :meth:`write_lock`), so a daemon and a CLI never write at once.
    """

    def __init__(self, root: Path, *, durable: bool = True) -> None:
        self.layout = DatasetLayout(root)
        self.blocks = FsObjectRepository(self.layout.blocks_dir, durable=durable)
        self.data = FsObjectRepository(self.layout.data_dir, durable=durable)
        self.checkpoints = FsObjectRepository(self.layout.checkpoints_dir, durable=durable)
        self.refs = FsRefRepository(self.layout.refs_dir, durable=durable)
        self._state_cache: ChainState | None = None
        self._lock_fd: int | None = None
        self._lock_depth = 0

    @classmethod
    def create(cls, root: Path, *, durable: bool = True) -> Dataset:
        """Create an empty dataset directory."""
        DatasetLayout(root).create()
        return cls(root, durable=durable)

    # -- reading ------------------------------------------------------------------------------

    def head(self) -> Multihash | None:
        """The head block hash, or None for an empty chain."""
        return self.refs.get(HEAD_REF)

    def get_block_bytes(self, h: Multihash, *, verify: bool = True) -> bytes:
        """Raw block bytes (hash re-checked unless ``verify`` is False)."""
        return self.blocks.get_bytes(h, verify=verify)

    def get_block(self, h: Multihash, *, verify: bool = True) -> MetadataBlock:
        """The decoded block with hash ``h``."""
        return decode_block(self.get_block_bytes(h, verify=verify))

    def iter_blocks(
        self, head: Multihash | None = None, *, verify: bool = True
    ) -> Iterator[tuple[Multihash, MetadataBlock]]:
        """Blocks from ``head`` (default: the current head) back to the Seed, newest first."""
        h = head if head is not None else self.head()
        while h is not None:
            block = self.get_block(h, verify=verify)
            yield h, block
            h = block.prev_block_hash

    def state(self) -> ChainState:
        """The :class:`ChainState` at the current head, every block validated from the Seed.

        Walks back from the head only as far as the newest block whose state is already
        known (this object's cache or the process-wide one, see :func:`remember_chain_state`)
        and folds the blocks after it; with nothing known, that is the whole chain.
        """
        head = self.head()
        if self._state_cache is not None and self._state_cache.head == head:
            return self._state_cache
        pending: list[tuple[Multihash, MetadataBlock]] = []
        base = ChainState()
        h = head
        while h is not None:
            known = (
                self._state_cache
                if self._state_cache is not None and self._state_cache.head == h
                else known_chain_state(h)
            )
            if known is not None:
                base = known
                break
            block = self.get_block(h)
            pending.append((h, block))
            h = block.prev_block_hash
        state = base
        for bh, b in reversed(pending):
            state = validate_append(state, b, bh)
        self._state_cache = state
        remember_chain_state(state)
        return state

    # -- writing ------------------------------------------------------------------------------

    @contextmanager
    def write_lock(self) -> Iterator[None]:
        """Hold the dataset's exclusive write lock (re-entrant for this ``Dataset`` object).

        The lock is an ``flock`` on ``info/write.lock``: it excludes other processes and other
        ``Dataset`` objects, so callers that need a read-modify-write (ingest, pull) take it
        around the whole operation and the appends inside it re-enter.
        """
        if self._lock_depth:
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
            return
        self.layout.info_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.layout.info_dir / "write.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._lock_fd, self._lock_depth = fd, 1
            yield
        finally:
            self._lock_fd, self._lock_depth = None, 0
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def append(self, block: MetadataBlock, *, version: int | None = None) -> Multihash:
        """Encode ``block`` and append it; returns the new head."""
        return self.append_many_bytes([encode_block(block, version)])

    def append_bytes(self, data: bytes, expected: Multihash | None = None) -> Multihash:
        """Append one received block, stored byte-for-byte as given."""
        return self.append_many_bytes([data], [expected] if expected is not None else None)

    def append_many_bytes(
        self,
        blocks: Sequence[bytes],
        expected_hashes: Sequence[Multihash | None] | None = None,
    ) -> Multihash:
        """Validate and append several blocks (oldest first), moving ``refs/head`` once, last.

        Nothing is written unless every block decodes and passes every chain rule; if writing
        fails half-way, only unreferenced block files are left and the head is unchanged.

        Raises:
            InvalidBlock, HashMismatch, ChainRuleViolation: nothing was changed.
        """
        if not blocks:
            raise ValueError("nothing to append")
        with self.write_lock():
            # The cached state is keyed by the head it describes: if another writer moved the
            # head, state() re-validates from the Seed; otherwise appending costs O(new blocks).
            state = self.state()
            start_head = state.head
            hashes = []
            for i, data in enumerate(blocks):
                h = Multihash.sha3_256(data)
                exp = expected_hashes[i] if expected_hashes else None
                if exp is not None and exp != h:
                    raise HashMismatch(f"block {i} hashes to {h}, expected {exp}")
                block = decode_block(data)
                state = validate_append(state, block, h)
                hashes.append(h)
            for h, data in zip(hashes, blocks, strict=True):
                self.blocks.insert_bytes(data, h)
            self.refs.set(HEAD_REF, hashes[-1], expected=start_head)
            self._state_cache = state
            remember_chain_state(state)
            return hashes[-1]

    def cleanup(self) -> int:
        """Remove stale ``.pending-*`` files left by a crash."""
        d = self.layout
        return sum(
            remove_stale_pending(p)
            for p in (d.blocks_dir, d.refs_dir, d.data_dir, d.checkpoints_dir)
        )


__all__ = [
    "HEAD_REF",
    "BlockNotFound",
    "ChainRuleViolation",
    "Dataset",
    "DatasetLayout",
    "InvalidBlock",
    "known_chain_state",
    "remember_chain_state",
    "shared_chain_states",
]
