"""Builders of real datasets (with data part and checkpoint files) for tests and benchmarks.

The parts are random bytes, not parquet: transfer only cares about physical hashes and sizes,
which are real here, so ``verify_integrity`` passes on the result.
"""

from __future__ import annotations

import random
from pathlib import Path

from coordinator.chain.validation import validate_append
from coordinator.identity.dataset_id import DatasetId
from coordinator.metadata import block_hash, encode_block
from coordinator.metadata import model as m
from coordinator.metadata.timestamp import Timestamp
from coordinator.multiformats import Multihash
from coordinator.storage.dataset import Dataset

T0 = Timestamp.parse("2024-01-01T00:00:00Z")
SCHEMA = b"\x0c\x00\x00\x00fake-arrow-schema"


def new_dataset(root: Path, seed: bytes = b"transfer-test", *, durable: bool = False) -> Dataset:
    """A root dataset with a Seed and a SetDataSchema."""
    ds = Dataset.create(root, durable=durable)
    did = DatasetId.new_seeded_ed25519(seed)
    ds.append(
        m.MetadataBlock(
            system_time=T0,
            sequence_number=0,
            event=m.Seed(dataset_id=did, dataset_kind=m.DatasetKind.ROOT),
        )
    )
    _append(ds, m.SetDataSchema(raw_arrow_schema=SCHEMA))
    return ds


def _append(ds: Dataset, event: m.MetadataEvent) -> Multihash:
    st = ds.state()
    return ds.append(
        m.MetadataBlock(
            system_time=T0,
            prev_block_hash=st.head,
            sequence_number=st.sequence_number + 1,
            event=event,
        )
    )


def add_data(
    ds: Dataset,
    n: int,
    part_size: int,
    *,
    rng: random.Random | None = None,
    checkpoint_every: int = 3,
    rows: int = 10,
) -> None:
    """Append ``n`` AddData blocks in one commit, each with a ``part_size``-byte data part; some
    carry a checkpoint (``checkpoint_every``); ``part_size == 0`` makes watermark-only blocks."""
    rng = rng or random.Random(0)
    st = ds.state()
    blocks: list[bytes] = []
    for _ in range(n):
        last = st.last_data_event
        prev_cp = last.new_checkpoint.physical_hash if last and last.new_checkpoint else None
        prev_off = st.last_offset
        wm_prev = st.watermark
        wm = Timestamp((wm_prev.epoch_ns if wm_prev else T0.epoch_ns) + 1_000_000_000)
        new_data = None
        if part_size > 0:
            part = rng.randbytes(part_size)
            ph = ds.data.insert_bytes(part)
            start = 0 if prev_off is None else prev_off + 1
            new_data = m.DataSlice(
                logical_hash=Multihash(0x300016, Multihash.sha3_256(part + b"l").digest),
                physical_hash=ph,
                offset_interval=m.OffsetInterval(start=start, end=start + rows - 1),
                size=len(part),
            )
        new_cp = None
        if checkpoint_every and (st.sequence_number % checkpoint_every == 0):
            cp = rng.randbytes(rng.randint(10, 300))
            new_cp = m.Checkpoint(physical_hash=ds.checkpoints.insert_bytes(cp), size=len(cp))
        block = m.MetadataBlock(
            system_time=T0,
            prev_block_hash=st.head,
            sequence_number=st.sequence_number + 1,
            event=m.AddData(
                prev_checkpoint=prev_cp,
                prev_offset=prev_off,
                new_data=new_data,
                new_checkpoint=new_cp,
                new_watermark=wm,
            ),
        )
        data = encode_block(block)
        blocks.append(data)
        st = validate_append(st, block, block_hash(data))
    if blocks:
        ds.append_many_bytes(blocks)


def build_dataset(
    root: Path,
    n_blocks: int,
    part_size: int,
    *,
    seed: bytes = b"transfer-test",
    rng_seed: int = 0,
) -> Dataset:
    """Seed + SetDataSchema + ``n_blocks`` AddData blocks with data parts and checkpoints."""
    ds = new_dataset(root, seed)
    add_data(ds, n_blocks, part_size, rng=random.Random(rng_seed))
    return ds
