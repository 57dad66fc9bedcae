"""Helpers that build small root/derivative datasets for transform tests and benchmarks.

Not used by the node itself; kept here (and importable without Spark) so unit tests,
integration tests and benchmarks share one way of making a chain.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from coordinator.identity.dataset_id import DatasetId
from coordinator.ingest.push import IngestResult, ingest
from coordinator.metadata import model as m
from coordinator.metadata.timestamp import Timestamp
from coordinator.multiformats import Multihash
from coordinator.storage.dataset import Dataset

T0 = Timestamp.parse("2024-01-01T00:00:00Z")


class StepClock:
    """A clock that advances one minute per reading."""

    def __init__(self, start: Timestamp = T0, step_ns: int = 60 * 10**9) -> None:
        self.now = start
        self.step_ns = step_ns

    def __call__(self) -> Timestamp:
        self.now = Timestamp(self.now.epoch_ns + self.step_ns)
        return self.now


def append_events(ds: Dataset, events: Sequence[m.MetadataEvent], t: Timestamp) -> Multihash:
    """Append ``events`` one block each, all at system time ``t``."""
    head = ds.head()
    for ev in events:
        st = ds.state()
        head = ds.append(
            m.MetadataBlock(
                system_time=t,
                prev_block_hash=st.head,
                sequence_number=st.sequence_number + 1,
                event=ev,
            )
        )
    assert head is not None
    return head


def make_root(
    root: Path,
    name: str,
    schema: tuple[str, ...] = ("event_time TIMESTAMP", "city STRING", "population BIGINT"),
    merge: m.MergeStrategy | None = None,
) -> Dataset:
    """A root dataset with a CSV push source (header row, given DDL schema)."""
    source = m.AddPushSource(
        source_name="src",
        read=m.ReadStepCsv(ddl_schema=schema, header=True),
        merge=merge or m.MergeStrategyAppend(),
    )
    return _seeded(root, name, m.DatasetKind.ROOT, source)


def push_csv(ds: Dataset, tmp: Path, text: str, clock: StepClock) -> IngestResult:
    """Ingest one CSV document into a root dataset."""
    tmp.mkdir(parents=True, exist_ok=True)
    n = sum(1 for _ in tmp.iterdir())
    f = tmp / f"push-{n}.csv"
    f.write_text(text)
    return ingest(ds, [f], clock=clock)


def make_derivative(
    root: Path,
    name: str,
    inputs: Sequence[tuple[Dataset, str]],
    queries: Sequence[tuple[str | None, str]],
    *,
    engine: str = "spark",
    version: str | None = None,
) -> Dataset:
    """A derivative dataset whose ``SetTransform`` reads ``inputs`` (dataset, alias)."""
    ins = []
    for in_ds, alias in inputs:
        did = in_ds.state().dataset_id
        assert did is not None
        ins.append(m.TransformInput(dataset_ref=did.as_did_str(), alias=alias))
    transform = m.SetTransform(
        inputs=tuple(ins),
        transform=m.TransformSql(
            engine=engine,
            version=version,
            queries=tuple(m.SqlQueryStep(alias=a, query=q) for a, q in queries),
        ),
    )
    return _seeded(root, name, m.DatasetKind.DERIVATIVE, transform)


def _seeded(root: Path, name: str, kind: m.DatasetKind, event: m.MetadataEvent) -> Dataset:
    """A new dataset at ``root / name``: its ``Seed`` (id seeded by ``name``), then ``event``."""
    ds = Dataset.create(root / name)
    seed = m.Seed(dataset_id=DatasetId.new_seeded_ed25519(name.encode()), dataset_kind=kind)
    append_events(ds, [seed, event], T0)
    return ds


def inputs_of(*datasets: Dataset) -> dict[DatasetId, Dataset]:
    """The ``inputs`` mapping the planner takes."""
    out = {}
    for ds in datasets:
        did = ds.state().dataset_id
        assert did is not None
        out[did] = ds
    return out


def forge_block(ds: Dataset, event: m.MetadataEvent, *, system_time: Timestamp) -> Multihash:
    """Append a block with ``event`` (for tests that forge history)."""
    return append_events(ds, [event], system_time)


def with_logical_hash(s: m.DataSlice, h: Multihash) -> m.DataSlice:
    """``s`` with another logical hash."""
    return replace(s, logical_hash=h)


__all__ = [
    "T0",
    "StepClock",
    "append_events",
    "forge_block",
    "inputs_of",
    "make_derivative",
    "make_root",
    "push_csv",
    "with_logical_hash",
]
