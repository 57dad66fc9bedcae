"""ODF schema <-> Arrow, as kamu-cli converts them (coordinator/metadata/odf_schema.py).

Cases ported from kamu-cli HEAD ``src/odf/metadata/src/data/arrow_conversions.rs`` (its unit
tests) and ``src/odf/metadata/tests/tests/test_serde_flatbuffers.rs``
(``serde_set_data_schema_legacy``: the Arrow schema of a legacy event).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from coordinator.errors import UnsupportedOdfSchema
from coordinator.identity.dataset_id import DatasetId
from coordinator.ingest.push import ingest
from coordinator.metadata import model as m
from coordinator.metadata import odf_schema as osc
from coordinator.storage.dataset import Dataset
from coordinator.transform.testing import T0, StepClock, append_events
from tests.golden.test_block_vectors import ODF_SCHEMA, SCHEMA_AB


def enc(entries: dict[str, object]) -> m.ExtraAttributes:
    return m.ExtraAttributes.of(entries)


def buf(kind: str, width: int) -> m.ExtraAttributes:
    return enc({osc.KEY_BUFFER_ENCODING: {"kind": kind, "offsetBitWidth": width}})


ARROW = pa.schema(
    [
        pa.field("utf8", pa.string(), False),
        pa.field("utf8_large", pa.large_string(), False),
        pa.field("utf8_view", pa.string_view(), False),
        pa.field("date32", pa.date32(), False),
        pa.field("date64", pa.date64(), False),
        pa.field("decimal128", pa.decimal128(20, 5), False),
        pa.field("decimal256", pa.decimal256(20, 5), False),
    ]
)
ODF = m.DataSchema(
    fields=(
        m.DataField(name="utf8", type=m.DataTypeString(), extra=buf("Contiguous", 32)),
        m.DataField(name="utf8_large", type=m.DataTypeString(), extra=buf("Contiguous", 64)),
        m.DataField(name="utf8_view", type=m.DataTypeString(), extra=buf("View", 32)),
        m.DataField(name="date32", type=m.DataTypeDate()),
        m.DataField(
            name="date64",
            type=m.DataTypeDate(),
            extra=enc({osc.KEY_DATE_ENCODING: {"unit": "Millisecond"}}),
        ),
        m.DataField(
            name="decimal128",
            type=m.DataTypeDecimal(precision=20, scale=5),
            extra=enc({osc.KEY_DECIMAL_ENCODING: {"bitWidth": 128}}),
        ),
        m.DataField(
            name="decimal256",
            type=m.DataTypeDecimal(precision=20, scale=5),
            extra=enc({osc.KEY_DECIMAL_ENCODING: {"bitWidth": 256}}),
        ),
    )
)


def test_field_from_to_arrow() -> None:
    """kamu ``test_field_from_to_arrow``: symmetric with encodings kept."""
    assert osc.from_arrow(ARROW) == ODF
    assert osc.to_arrow(ODF) == ARROW


def test_strip_encoding_keeps_other_attributes() -> None:
    """kamu ``test_strip_encoding``: only ``arrow.apache.org/*Encoding`` keys go."""
    tagged = m.DataSchema(
        fields=tuple(
            m.DataField(
                name=f.name,
                type=f.type,
                extra=enc({**osc.extra_json(f.extra), "foo.com/foo": f.name}),
            )
            for f in ODF.fields
        ),
        extra=enc({"foo.com/bar": "x"}),
    )
    stripped = osc.strip_encoding(tagged)
    assert stripped.extra == enc({"foo.com/bar": "x"})
    assert [f.extra for f in stripped.fields] == [enc({"foo.com/foo": f.name}) for f in ODF.fields]
    assert [f.type for f in stripped.fields] == [f.type for f in ODF.fields]


def test_schema_to_arrow_default_view_encoding() -> None:
    """kamu ``test_schema_to_arrow_default_view_ecoding``."""
    arrow = pa.schema(
        [
            pa.field("utf8", pa.string(), False),
            pa.field("binary", pa.binary(), False),
            pa.field("list", pa.list_(pa.field("item", pa.string(), False)), False),
        ]
    )
    odf = osc.from_arrow(arrow)
    assert odf == m.DataSchema(
        fields=(
            m.DataField(name="utf8", type=m.DataTypeString(), extra=buf("Contiguous", 32)),
            m.DataField(name="binary", type=m.DataTypeBinary(), extra=buf("Contiguous", 32)),
            m.DataField(
                name="list",
                type=m.DataTypeList(item_type=m.DataTypeString()),
                extra=buf("Contiguous", 32),
            ),
        )
    )
    assert osc.to_arrow(odf) == arrow
    view32, view64 = osc.BufferEncoding("View", 32), osc.BufferEncoding("View", 64)
    settings = osc.ToArrowSettings(
        default_binary_encoding=view32,
        default_string_encoding=view32,
        default_list_encoding=view64,
    )
    assert osc.to_arrow(osc.strip_encoding(odf), settings) == pa.schema(
        [
            pa.field("utf8", pa.string_view(), False),
            pa.field("binary", pa.binary_view(), False),
            pa.field("list", pa.large_list_view(pa.field("item", pa.string_view(), False)), False),
        ]
    )


def test_logical_defaults() -> None:
    """Option is nullability; Timestamp defaults to ms/UTC, Time and Duration to ms."""
    schema = m.DataSchema(
        fields=(
            m.DataField(name="ts", type=m.DataTypeTimestamp()),
            m.DataField(name="t", type=m.DataTypeOption(inner=m.DataTypeTime())),
            m.DataField(name="d", type=m.DataTypeDuration(unit=m.TimeUnit.NANOSECOND)),
            m.DataField(name="s", type=m.DataTypeOption(inner=m.DataTypeString())),
        )
    )
    assert osc.to_arrow(schema) == pa.schema(
        [
            pa.field("ts", pa.timestamp("ms", "UTC"), False),
            pa.field("t", pa.time32("ms"), True),
            pa.field("d", pa.duration("ns"), False),
            pa.field("s", pa.string(), True),
        ]
    )


def test_set_data_schema_legacy_as_arrow_and_upgrade() -> None:
    """``serde_set_data_schema_legacy``: the Arrow schema of the v0.34 event, and its upgrade."""
    legacy = m.SetDataSchema(raw_arrow_schema=SCHEMA_AB)
    expected = pa.schema([pa.field("a", pa.int64(), False), pa.field("b", pa.bool_(), False)])
    assert osc.schema_as_arrow(legacy) == expected
    assert osc.upgrade(legacy) == m.DataSchema(
        fields=(
            m.DataField(name="a", type=m.DataTypeInt64()),
            m.DataField(name="b", type=m.DataTypeBool()),
        )
    )
    # An ODF event is its own upgrade.
    assert osc.upgrade(m.SetDataSchema(schema=ODF_SCHEMA)) is ODF_SCHEMA


def test_upgrade_strips_encodings() -> None:
    """Old kamu recorded the engine's layout (e.g. large or view types); the upgrade keeps
    logical types only."""
    arrow = pa.schema([pa.field("city", pa.large_string(), True), pa.field("n", pa.int64(), False)])
    from coordinator.metadata.arrow_schema import encode_arrow_schema

    upgraded = osc.upgrade(m.SetDataSchema(raw_arrow_schema=encode_arrow_schema(arrow)))
    assert upgraded == m.DataSchema(
        fields=(
            m.DataField(name="city", type=m.DataTypeOption(inner=m.DataTypeString())),
            m.DataField(name="n", type=m.DataTypeInt64()),
        )
    )
    assert osc.to_arrow(upgraded) == pa.schema(
        [pa.field("city", pa.string(), True), pa.field("n", pa.int64(), False)]
    )


def test_kamu_head_odf_schema_to_arrow() -> None:
    """The schema of kamu's ``serde_set_data_schema``: View encoding honoured, links kept."""
    assert osc.to_arrow(ODF_SCHEMA) == pa.schema(
        [
            pa.field("city", pa.string_view(), False),
            pa.field("population", pa.uint64(), False),
            pa.field("census", pa.string(), True),
            pa.field("links", pa.list_(pa.field("item", pa.string(), False)), False),
        ]
    )


@pytest.mark.parametrize(
    "extra",
    [
        {osc.KEY_BUFFER_ENCODING: "blerb"},
        {osc.KEY_BUFFER_ENCODING: {"kind": "Contiguous"}},
        {osc.KEY_DATE_ENCODING: {"unit": "Hour"}},
        {osc.KEY_BUFFER_ENCODING: {"kind": "RunEnd", "runEndsBitWidth": 32}},
    ],
)
def test_invalid_or_unsupported_encodings(extra: dict[str, object]) -> None:
    field = m.DataField(name="x", type=m.DataTypeString(), extra=enc(extra))
    with pytest.raises(UnsupportedOdfSchema):
        osc.to_arrow(m.DataSchema(fields=(field,)))


def test_unsupported_arrow_types() -> None:
    for t in (pa.month_day_nano_interval(), pa.dictionary(pa.int32(), pa.string())):
        with pytest.raises(UnsupportedOdfSchema):
            osc.from_arrow(pa.schema([pa.field("x", t)]))


def test_kamu_collection_push_source_ingests_a_changelog(tmp_path: Path) -> None:
    """kamu-cli HEAD's collection datasets (``DatasetSnapshots::collection``): an NdJson read
    step with an ODF schema whose ``op`` is ``Option<Int32>`` and a ``ChangelogStream`` merge
    on ``path`` (spec v0.37/v0.38). The entries written are the input's, sorted by path and op."""
    opt = m.DataTypeOption
    read = m.ReadStepNdJson(
        schema=m.DataSchema(
            fields=(
                m.DataField(name="op", type=opt(inner=m.DataTypeInt32())),
                m.DataField(name="event_time", type=opt(inner=m.DataTypeTimestamp())),
                m.DataField(name="path", type=opt(inner=m.DataTypeString())),
                m.DataField(name="ref", type=opt(inner=m.DataTypeString())),
            )
        )
    )
    ds = Dataset.create(tmp_path / "collection")
    append_events(
        ds,
        [
            m.Seed(
                dataset_id=DatasetId.new_seeded_ed25519(b"collection"),
                dataset_kind=m.DatasetKind.ROOT,
            ),
            m.AddPushSource(
                source_name="default",
                read=read,
                merge=m.MergeStrategyChangelogStream(primary_key=("path",)),
            ),
        ],
        T0,
    )
    lines = [
        {"op": 0, "path": "/b", "ref": "did:odf:b"},
        {"op": 0, "path": "/a", "ref": "did:odf:a1"},
        {"op": 3, "path": "/a", "ref": "did:odf:a2"},
        {"op": 2, "path": "/a", "ref": "did:odf:a1"},
    ]
    f = tmp_path / "entries.ndjson"
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    res = ingest(ds, [f], clock=StepClock())
    (s,) = res.slices
    t = pq.read_table(ds.data.path_of(s.physical_hash))
    assert t.schema.field("op") == pa.field("op", pa.int32(), False)
    assert [(r["offset"], r["op"], r["path"], r["ref"]) for r in t.to_pylist()] == [
        (0, 0, "/a", "did:odf:a1"),
        (1, 2, "/a", "did:odf:a1"),
        (2, 3, "/a", "did:odf:a2"),
        (3, 0, "/b", "did:odf:b"),
    ]
