"""RFC-017 linked objects: column marking, the AddData ``extra`` summary and its wiring."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from coordinator.errors import (
    DanglingObjectLink,
    IngestError,
    InvalidObjectLink,
    UnsupportedReadOption,
)
from coordinator.ingest.linked import (
    LinkedObjectsSummary,
    extra_attributes_json,
    link_columns_from_odf_schema,
    store_objects,
    summarize_links,
    validate_link_columns,
)
from coordinator.ingest.writer import WrittenSlice, add_data_event
from coordinator.metadata import model as m
from coordinator.metadata.timestamp import Timestamp
from coordinator.multiformats import Multihash
from coordinator.storage import FsObjectRepository

LINK = {"opendatafabric.org/type": {"kind": "ObjectLink", "linkType": {"kind": "Multihash"}}}


def test_extra_json_is_kamus_serde_json_form() -> None:
    # kamu-cli HEAD src/odf/metadata/tests/tests/test_serde_flatbuffers.rs: the AddData test
    # event with ExtraAttributes::new().with(LinkedObjectsSummary{10, 100}).
    assert (
        extra_attributes_json(LinkedObjectsSummary(num_objects_naive=10, size_naive=100))
        == '{"opendatafabric.org/linkedObjects":{"numObjectsNaive":10,"sizeNaive":100}}'
    )


def test_link_columns_from_rfc017_schema() -> None:
    fields = [
        {"name": "offset", "type": {"kind": "UInt64"}},
        {"name": "mri_content_hash", "type": {"kind": "String"}, "extra": LINK},
        {
            "name": "patient_id",
            "type": {"kind": "String"},
            "extra": {"opendatafabric.org/type": {"kind": "Did"}},
        },
        {"name": "opt", "type": {"kind": "Option", "inner": {"kind": "String"}}, "extra": LINK},
    ]
    assert link_columns_from_odf_schema(fields) == ("mri_content_hash", "opt")


@pytest.mark.parametrize(
    "field",
    [
        {"name": "x", "type": {"kind": "Int64"}, "extra": LINK},
        {
            "name": "x",
            "type": {"kind": "String"},
            "extra": {
                "opendatafabric.org/type": {"kind": "ObjectLink", "linkType": {"kind": "Did"}}
            },
        },
        {
            "name": "s",
            "type": {
                "kind": "Struct",
                "fields": [{"name": "x", "type": {"kind": "String"}, "extra": LINK}],
            },
        },
    ],
)
def test_unsupported_links(field: dict[str, object]) -> None:
    with pytest.raises(UnsupportedReadOption):
        link_columns_from_odf_schema([field])


def test_validate_link_columns() -> None:
    schema = pa.schema([("a", pa.string()), ("b", pa.int64())])
    validate_link_columns(schema, ["a"])
    with pytest.raises(UnsupportedReadOption):
        validate_link_columns(schema, ["b"])
    with pytest.raises(UnsupportedReadOption):
        validate_link_columns(schema, ["c"])


def test_summarize_links(tmp_path: Path) -> None:
    repo = FsObjectRepository(tmp_path / "data", durable=False)
    (tmp_path / "o").write_bytes(b"12345")
    (h,) = store_objects(repo, [tmp_path / "o"])
    part = tmp_path / "part.parquet"
    pq.write_table(
        pa.table({"offset": [0, 1, 2], "link": [h.to_multibase(), None, h.to_multibase()]}), part
    )
    assert summarize_links(part, ["link"], repo) == LinkedObjectsSummary(2, 10)

    dangling = Multihash.sha3_256(b"nope").to_multibase()
    pq.write_table(pa.table({"offset": [7], "link": [dangling]}), part)
    with pytest.raises(DanglingObjectLink, match="offset 7"):
        summarize_links(part, ["link"], repo)
    pq.write_table(pa.table({"offset": [7], "link": ["not-a-hash"]}), part)
    with pytest.raises(InvalidObjectLink):
        summarize_links(part, ["link"], repo)


# -- AddData wiring ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class _ExtraAttributes:
    entries: str


@dataclass(frozen=True, slots=True, kw_only=True)
class _AddDataWithExtra:
    prev_checkpoint: Multihash | None = None
    prev_offset: int | None = None
    new_data: m.DataSlice | None = None
    new_checkpoint: m.Checkpoint | None = None
    new_watermark: Timestamp | None = None
    new_source_state: m.SourceState | None = None
    extra: _ExtraAttributes | None = None


def _written() -> WrittenSlice:
    h = Multihash.sha3_256(b"x")
    return WrittenSlice(
        path=Path("/nonexistent"),
        physical_hash=h,
        logical_hash=Multihash(0x300016, h.digest),
        size=1,
        offset_interval=m.OffsetInterval(start=0, end=0),
        max_event_time=Timestamp(0),
        schema=pa.schema([]),
    )


def test_add_data_extra_wiring(monkeypatch: pytest.MonkeyPatch) -> None:
    extra = extra_attributes_json(LinkedObjectsSummary(1, 2))
    if "extra" not in m.AddData.__dataclass_fields__:
        with pytest.raises(IngestError, match=r"AddData\.extra"):
            add_data_event(
                prev_offset=None,
                prev_checkpoint=None,
                prev_watermark=None,
                written=_written(),
                extra_json=extra,
            )
        # Once the model has the field (as below), nothing else needs to change here.
        monkeypatch.setattr(m, "AddData", _AddDataWithExtra)
        monkeypatch.setattr(m, "ExtraAttributes", _ExtraAttributes, raising=False)
    ev = add_data_event(
        prev_offset=None,
        prev_checkpoint=None,
        prev_watermark=None,
        written=_written(),
        extra_json=extra,
    )
    assert ev is not None
    assert isinstance(ev, m.AddData) and ev.extra is not None
    assert ev.extra.entries == extra
    plain = add_data_event(
        prev_offset=None, prev_checkpoint=None, prev_watermark=None, written=_written()
    )
    assert plain is not None and plain.extra is None


def test_kamu_head_block_vector_with_extra() -> None:
    """kamu-cli HEAD ``test_serializer_stability`` AddData case with ``extra`` (manifest v3)."""
    from coordinator.metadata import encode_block

    mh = Multihash.sha3_256
    event = m.AddData(
        prev_checkpoint=mh(b"checkpoint"),
        prev_offset=9,
        new_data=m.DataSlice(
            logical_hash=mh(b"logical"),
            physical_hash=mh(b"physical"),
            offset_interval=m.OffsetInterval(start=10, end=99),
            size=100,
        ),
        new_source_state=m.SourceState(
            source_name="push-source-1", kind="kamu/kafka-offset", value="SOME_OFFSET"
        ),
        extra=m.ExtraAttributes(entries=extra_attributes_json(LinkedObjectsSummary(10, 100))),
    )
    block = m.MetadataBlock(
        system_time=Timestamp.parse("2020-01-01T12:00:00Z"),
        prev_block_hash=mh(b"prev"),
        sequence_number=117,
        event=event,
    )
    digest = hashlib.sha3_256(encode_block(block, 3)).hexdigest()
    assert digest == "54f64c642cca6f67416ebe2b29e5d9414ece91f819efe97cd437fbe542c61bbb"
