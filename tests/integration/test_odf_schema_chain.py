"""A derivative whose chain uses ODF schemas, written as kamu-cli HEAD writes it, replays.

kamu-cli HEAD (spec v0.39) writes manifest version 3 blocks, a push source whose read step
carries an ODF schema (``read.schema``, spec v0.38) and ``SetDataSchema`` events with the ODF
schema (slot 1, RFC-016) and no Arrow bytes. The node writes the same form with
``[metadata] write_version = "current"``; this test builds such a root and derivative, checks
the blocks are in that form, and runs the existing verify path (integrity + replay) on the real
DataFusion engine. Serializer bytes of these events are pinned by kamu's own vectors in
``tests/golden/test_block_vectors.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from coordinator.identity.dataset_id import DatasetId
from coordinator.metadata import decode_manifest, set_write_form
from coordinator.metadata import model as m
from coordinator.metadata.odf_schema import schema_as_arrow, upgrade
from coordinator.metadata.timestamp import Timestamp
from coordinator.storage.dataset import Dataset
from coordinator.transform.run import run_transform
from coordinator.transform.testing import T0, StepClock, append_events, inputs_of, push_csv
from coordinator.transform.verify import verify_dataset
from node.engine_client import EngineClient
from node.engine_router import EngineRouter

pytestmark = pytest.mark.integration

READ_SCHEMA = m.DataSchema(
    fields=(
        m.DataField(name="event_time", type=m.DataTypeTimestamp()),
        m.DataField(name="city", type=m.DataTypeString()),
        m.DataField(name="population", type=m.DataTypeOption(inner=m.DataTypeInt64())),
    )
)
CSV = [
    "event_time,city,population\n2020-01-01T00:00:00Z,A,10\n2021-01-02T00:00:00Z,B,\n",
    "event_time,city,population\n2022-01-04T00:00:00Z,C,30\n",
]
QUERY = "SELECT op, event_time, city, population * 10 AS p10 FROM cities"


def no_spark() -> EngineClient:
    raise AssertionError("Spark must not be started for DataFusion transforms")


@pytest.fixture
def current_form() -> Iterator[None]:
    set_write_form("current")
    try:
        yield
    finally:
        set_write_form("v0.34")


def make_chain(tmp: Path) -> tuple[Dataset, Dataset]:
    root = Dataset.create(tmp / "root")
    append_events(
        root,
        [
            m.Seed(
                dataset_id=DatasetId.new_seeded_ed25519(b"root"), dataset_kind=m.DatasetKind.ROOT
            ),
            m.AddPushSource(
                source_name="src",
                read=m.ReadStepCsv(schema=READ_SCHEMA, header=True),
                merge=m.MergeStrategyAppend(),
            ),
        ],
        T0,
    )
    der = Dataset.create(tmp / "der")
    root_id = root.state().dataset_id
    assert root_id is not None
    append_events(
        der,
        [
            m.Seed(
                dataset_id=DatasetId.new_seeded_ed25519(b"der"),
                dataset_kind=m.DatasetKind.DERIVATIVE,
            ),
            m.SetTransform(
                inputs=(m.TransformInput(dataset_ref=root_id.as_did_str(), alias="cities"),),
                transform=m.TransformSql(
                    engine="datafusion", queries=(m.SqlQueryStep(query=QUERY),)
                ),
            ),
        ],
        T0,
    )
    return root, der


def schema_events(ds: Dataset) -> list[m.SetDataSchema]:
    return [b.event for _, b in ds.iter_blocks() if isinstance(b.event, m.SetDataSchema)]


def test_odf_schema_derivative_replays_and_verifies(tmp_path: Path, current_form: None) -> None:
    root, der = make_chain(tmp_path)
    router = EngineRouter(no_spark, idle_timeout=0)
    try:
        clock = StepClock(Timestamp.parse("2026-06-01T00:00:00Z"))
        for csv in CSV:
            push_csv(root, tmp_path / "in", csv, clock)
            res = run_transform(der, inputs_of(root), router, clock=clock)
            assert res is not None and res.new_head is not None

        # Written as kamu-cli HEAD writes: manifest v3, ODF schemas only, no Arrow bytes.
        for ds in (root, der):
            for h, _ in ds.iter_blocks():
                assert decode_manifest(ds.get_block_bytes(h))[0] == 3
            (ev,) = schema_events(ds)
            assert ev.raw_arrow_schema is None and ev.schema is not None
        (root_schema,) = schema_events(root)
        assert upgrade(root_schema) == root_schema.schema
        assert schema_as_arrow(root_schema) == pa.schema(
            [
                pa.field("offset", pa.int64(), False),
                pa.field("op", pa.int32(), False),
                pa.field("system_time", pa.timestamp("ms", "UTC"), False),
                pa.field("event_time", pa.timestamp("ms", "UTC"), False),
                pa.field("city", pa.string(), False),
                pa.field("population", pa.int64(), True),
            ]
        )
        (der_schema,) = schema_events(der)
        assert der_schema.schema is not None
        assert [f.name for f in der_schema.schema.fields][-1] == "p10"

        report = verify_dataset(der, inputs_of(root), router)
        assert report.ok, report.replay
        assert report.replay is not None and report.replay.blocks_replayed == 2
    finally:
        router.close()
