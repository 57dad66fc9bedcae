"""Small builders of valid ODF chains for tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from coordinator.identity import DatasetId
from coordinator.metadata import block_hash, encode_block
from coordinator.metadata import model as m
from coordinator.metadata.timestamp import Timestamp
from coordinator.multiformats import Multihash
from coordinator.storage.repository import DatasetRepository

T0 = Timestamp.parse("2024-01-01T00:00:00Z")
SCHEMA_BYTES = b"\x0c\x00\x00\x00fake-arrow-schema"
PULL_TIME = Timestamp.parse("2024-06-01T00:00:00Z")


def pull_repo(path: Path) -> DatasetRepository:
    """A non-durable repository under ``path`` (datasets/, keys/) with a fixed clock."""
    return DatasetRepository(
        path / "datasets", path / "keys", clock=lambda: PULL_TIME, durable=False
    )


def mh(x: str | bytes) -> Multihash:
    return Multihash.sha3_256(x.encode() if isinstance(x, str) else x)


def data_slice(start: int, end: int, tag: str = "d") -> m.DataSlice:
    return m.DataSlice(
        logical_hash=Multihash(0x300016, mh(f"l{tag}{start}").digest),
        physical_hash=mh(f"p{tag}{start}"),
        offset_interval=m.OffsetInterval(start=start, end=end),
        size=end - start + 1,
    )


@dataclass
class ChainBuilder:
    """Builds a chain block by block, tracking hashes and sequence numbers."""

    kind: m.DatasetKind = m.DatasetKind.ROOT
    seed: bytes = b"test-dataset"
    version: int = 2
    blocks: list[bytes] = field(default_factory=list)
    head: Multihash | None = None
    seq: int = -1
    time: Timestamp = T0

    def __post_init__(self) -> None:
        self.add(m.Seed(dataset_id=DatasetId.new_seeded_ed25519(self.seed), dataset_kind=self.kind))

    @property
    def dataset_id(self) -> DatasetId:
        return DatasetId.new_seeded_ed25519(self.seed)

    def block(self, event: m.MetadataEvent, **overrides: object) -> m.MetadataBlock:
        """The next block for ``event`` (not added); fields can be overridden."""
        args: dict[str, object] = {
            "system_time": self.time,
            "prev_block_hash": self.head,
            "sequence_number": self.seq + 1,
            "event": event,
        }
        args.update(overrides)
        return m.MetadataBlock(**args)  # type: ignore[arg-type]

    def add(self, event: m.MetadataEvent) -> bytes:
        data = encode_block(self.block(event), self.version)
        self.blocks.append(data)
        self.head = block_hash(data)
        self.seq += 1
        return data

    def root_with_data(self, n_slices: int, rows: int = 10) -> ChainBuilder:
        """SetDataSchema then ``n_slices`` AddData blocks with contiguous offsets."""
        self.add(m.SetDataSchema(raw_arrow_schema=SCHEMA_BYTES))
        prev: int | None = None
        for i in range(n_slices):
            start = 0 if prev is None else prev + 1
            self.add(
                m.AddData(
                    prev_offset=prev,
                    new_data=data_slice(start, start + rows - 1),
                    new_watermark=Timestamp(T0.epoch_ns + i * 1_000_000_000),
                )
            )
            prev = start + rows - 1
        return self
