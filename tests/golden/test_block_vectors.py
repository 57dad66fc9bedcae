"""Golden vectors: our block bytes and hashes must equal kamu-cli's.

See docs/odf-wire-format.md, "Manifest and block hash" and "Golden vectors".

v2 values come from kamu-cli v0.153.0 / v0.264.0 ``test_serde_flatbuffers.rs`` (spec v0.34 era),
v3 values from kamu-cli HEAD (>= v0.265). Each vector wraps the event in the same block:
system_time 2020-01-01T12:00:00Z, prev = sha3mh("prev"), sequence number 117.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import replace

import pytest

from coordinator.identity import DatasetId
from coordinator.metadata import (
    block_hash,
    decode_block,
    decode_manifest,
    encode_block,
)
from coordinator.metadata import model as m
from coordinator.metadata.timestamp import Timestamp
from coordinator.multiformats import Multihash

WM = Timestamp.parse("2020-01-01T12:00:00Z")
SCHEMA_AB = base64.b64decode(
    "DAAAAAgACAAAAAQACAAAAAQAAAACAAAAQAAAAAQAAADY////GAAAAAwAAAAAAAAGEAAAAAAAAAAEAAQABAAAAAEAAABiAAAA"
    "EAAUABAAAAAPAAQAAAAIABAAAAAYAAAAIAAAAAAAAAIcAAAACAAMAAQACwAIAAAAQAAAAAAAAAEAAAAAAQAAAGEAAAA="
)


def h(data: bytes) -> Multihash:
    return Multihash.sha3_256(data)


def ds(logical: bytes, physical: bytes, start: int, end: int, size: int) -> m.DataSlice:
    return m.DataSlice(
        logical_hash=h(logical),
        physical_hash=h(physical),
        offset_interval=m.OffsetInterval(start=start, end=end),
        size=size,
    )


SET_POLLING_SOURCE = m.SetPollingSource(
    fetch=m.FetchStepFilesGlob(
        path="./*.csv",
        event_time=m.EventTimeSourceFromMetadata(),
        cache=m.SourceCachingForever(),
        order=m.SourceOrdering.BY_NAME,
    ),
    prepare=(m.PrepStepDecompress(format=m.CompressionFormat.GZIP),),
    read=m.ReadStepGeoJson(ddl_schema=("a: INT", "b: INT")),
    preprocess=m.TransformSql(engine="spark", version="1.0.0", query="SELECT * FROM input"),
    merge=m.MergeStrategyLedger(primary_key=("a",)),
)
# kamu-cli HEAD case 5: the same source with an ODF read schema (spec v0.38 ``read.schema``).
SET_POLLING_SOURCE_ODF = replace(
    SET_POLLING_SOURCE,
    read=m.ReadStepGeoJson(
        schema=m.DataSchema(
            fields=(
                m.DataField(name="a", type=m.DataTypeInt32()),
                m.DataField(name="b", type=m.DataTypeInt32()),
            )
        )
    ),
)
# kamu-cli HEAD ``serde_set_data_schema``: an ODF schema with encodings and extra attributes.
ODF_SCHEMA = m.DataSchema(
    fields=(
        m.DataField(
            name="city",
            type=m.DataTypeString(),
            extra=m.ExtraAttributes.of(
                {"arrow.apache.org/bufferEncoding": {"kind": "View", "offsetBitWidth": 32}}
            ),
        ),
        m.DataField(name="population", type=m.DataTypeUInt64()),
        m.DataField(
            name="census",
            type=m.DataTypeOption(inner=m.DataTypeString()),
            extra=m.ExtraAttributes.of(
                {
                    "opendatafabric.org/type": {
                        "kind": "ObjectLink",
                        "linkType": {"kind": "Multihash"},
                    }
                }
            ),
        ),
        m.DataField(name="links", type=m.DataTypeList(item_type=m.DataTypeString())),
    ),
    extra=m.ExtraAttributes.of({"kamu.dev/archetype": "Collection"}),
)
LINKED_OBJECTS = m.ExtraAttributes(
    entries='{"opendatafabric.org/linkedObjects":{"numObjectsNaive":10,"sizeNaive":100}}'
)
SET_TRANSFORM = m.SetTransform(
    inputs=(
        m.TransformInput(
            dataset_ref=DatasetId.new_seeded_ed25519(b"input1").as_did_str(), alias="input1"
        ),
        m.TransformInput(dataset_ref="input2", alias="input2"),
    ),
    transform=m.TransformSql(
        engine="spark", query="SELECT * FROM input1 UNION ALL SELECT * FROM input2"
    ),
)
EXECUTE_TRANSFORM = m.ExecuteTransform(
    query_inputs=(
        m.ExecuteTransformInput(
            dataset_id=DatasetId.new_seeded_ed25519(b"input1"),
            prev_block_hash=h(b"a"),
            new_block_hash=h(b"b"),
            prev_offset=9,
            new_offset=20,
        ),
        m.ExecuteTransformInput(
            dataset_id=DatasetId.new_seeded_ed25519(b"input2"),
            prev_block_hash=h(b"a"),
            new_block_hash=h(b"b"),
        ),
    ),
    prev_checkpoint=h(b"checkpoint"),
    prev_offset=9,
    new_data=ds(b"foo", b"bar", 10, 19, 10),
    new_watermark=WM,
)

# (name, event, v2 sha3 hex or None, v3 sha3 hex or None)
VECTORS: list[tuple[str, m.MetadataEvent, str | None, str | None]] = [
    (
        "SetPollingSource",
        SET_POLLING_SOURCE,
        "18cc1680b3d36f63358b59d469d76dcbf71ddac3ea66a693ce4158cfc5dfb28d",
        "eb61498b7362d334131a8486a5ce4cc2638d7c1aa3e4da82a19cf834a77df718",
    ),
    (
        "AddData-empty",
        m.AddData(),
        "73e2977b8beae4aef53670067c1173b9d68e69721908d080b84286ab366d1e14",
        "a93874702479f83ddff1e7a660ca78085def333c86501b0d895fa3aec79c7189",
    ),
    (
        "AddData-prevOffset-newData",
        m.AddData(prev_offset=9, new_data=ds(b"logical", b"physical", 10, 99, 100)),
        "39426541aa50092a19daa39fd488cf0a6eaace03b2130440922f27916ef74a88",
        None,
    ),
    (
        "AddData-prevCheckpoint-prevOffset",
        m.AddData(prev_checkpoint=h(b"prev"), prev_offset=9),
        "32516689d582e02e77778af75a71b6d131a640d0bebed99b99d96b385cee915f",
        "86aeb7dee0502b4886761de5e45b5111c0bc9e0fbfee02e3685487109305ef56",
    ),
    (
        "AddData-watermark",
        m.AddData(prev_checkpoint=h(b"prev"), prev_offset=9, new_watermark=WM),
        "1ad91cabca81e1f1771f28070980bfdcf409e5f8a877b3976b611401d2998189",
        "d1b412dab2a6af53f3e1b183834557bbf1c4689e2fc9b92fc0d04741ef607ecc",
    ),
    (
        "AddData-watermark-newData",
        m.AddData(
            prev_checkpoint=h(b"prev"),
            prev_offset=9,
            new_data=ds(b"logical", b"physical", 10, 99, 100),
            new_watermark=WM,
        ),
        "ec1d3f6aa39bb256fcae16d79a95705f614e26d9a86d393b6f9e6b19a60d0df6",
        "1fcf10cb843746c4c44e6c288e216995701aa073426fc4bebe14f1680f8ec6d1",
    ),
    (
        "AddData-sourceState",
        m.AddData(
            prev_checkpoint=h(b"checkpoint"),
            prev_offset=9,
            new_data=ds(b"logical", b"physical", 10, 99, 100),
            new_source_state=m.SourceState(
                source_name="push-source-1", kind="kamu/kafka-offset", value="SOME_OFFSET"
            ),
        ),
        "db5044313bbd596fb54bef9387ad61a18206d1e93e833db4d1159d20cd3cac58",
        "9326dc5daab04877a9f006ff6b1636a8fa9dcec9615b54f741a1a90091eaf694",
    ),
    (
        "SetTransform",
        SET_TRANSFORM,
        "dc2ab3737792021b6794d3969315bb521701780c91548104f149906d98c8da70",
        "bb6aa1f9689b794c75affa709ae2477b209411d9ad092c2318ecd9ea94121bcc",
    ),
    (
        "ExecuteTransform",
        EXECUTE_TRANSFORM,
        "a955281dca303056a88e39291d17e045d88ecdafca3ef9e75b09b83169633b52",
        "21cab7396525e614beeafe21c05a38bf597a39a191cc14147b9c5ec32210cf82",
    ),
    (
        "SetDataSchema",
        m.SetDataSchema(raw_arrow_schema=SCHEMA_AB),
        "44d64d764fb207713407b9a761566409404c907f765993105608299cd6f5bebf",
        "a7e79d088ca7bac689f12d71ae64b93e7bab62a7db2fec83ea89e9bf90dd89ed",
    ),
    (
        "SetPollingSource-odfReadSchema",
        SET_POLLING_SOURCE_ODF,
        None,
        "f96c90e9e9700819ba05d87f66b200a18a08404706ac62cde6d68bc350e73861",
    ),
    (
        "AddData-extra-linkedObjects",
        m.AddData(
            prev_checkpoint=h(b"checkpoint"),
            prev_offset=9,
            new_data=ds(b"logical", b"physical", 10, 99, 100),
            new_source_state=m.SourceState(
                source_name="push-source-1", kind="kamu/kafka-offset", value="SOME_OFFSET"
            ),
            extra=LINKED_OBJECTS,
        ),
        None,
        "54f64c642cca6f67416ebe2b29e5d9414ece91f819efe97cd437fbe542c61bbb",
    ),
    (
        "SetDataSchema-odf",
        m.SetDataSchema(schema=ODF_SCHEMA),
        None,
        "80865248519d55fa04598e24ba42884728efe70956e640dca4df5ec8043c69ca",
    ),
]


def wrap(event: m.MetadataEvent) -> m.MetadataBlock:
    return m.MetadataBlock(
        system_time=WM, prev_block_hash=h(b"prev"), sequence_number=117, event=event
    )


V2 = [(n, e, x) for n, e, x, _ in VECTORS if x]
V3 = [(n, e, x) for n, e, _, x in VECTORS if x]


@pytest.mark.parametrize(("name", "event", "expected"), V2, ids=[v[0] for v in V2])
def test_v2_event_hash(name: str, event: m.MetadataEvent, expected: str) -> None:
    data = encode_block(wrap(event), version=2)
    assert hashlib.sha3_256(data).hexdigest() == expected
    assert str(block_hash(data)) == "f1620" + expected
    assert decode_block(data) == wrap(event)
    assert decode_manifest(data)[0] == 2


@pytest.mark.parametrize(("name", "event", "expected"), V3, ids=[v[0] for v in V3])
def test_v3_event_hash(name: str, event: m.MetadataEvent, expected: str) -> None:
    data = encode_block(wrap(event), version=3)
    assert hashlib.sha3_256(data).hexdigest() == expected
    assert decode_block(data) == wrap(event)
    assert decode_manifest(data)[0] == 3


def test_vector_counts() -> None:
    assert len(V2) == 10
    # kamu-cli HEAD test_serializer_stability: 10 cases (all but AddData-prevOffset-newData,
    # a v0.153-only case), + serde_set_data_schema and serde_set_data_schema_legacy.
    assert len(V3) == 12


def test_kamu_head_serializer_stability_case_order() -> None:
    """The 10 cases of kamu-cli HEAD ``get_test_events()``, in its order, all present."""
    head = [
        "a93874702479f83ddff1e7a660ca78085def333c86501b0d895fa3aec79c7189",
        "86aeb7dee0502b4886761de5e45b5111c0bc9e0fbfee02e3685487109305ef56",
        "d1b412dab2a6af53f3e1b183834557bbf1c4689e2fc9b92fc0d04741ef607ecc",
        "1fcf10cb843746c4c44e6c288e216995701aa073426fc4bebe14f1680f8ec6d1",
        "eb61498b7362d334131a8486a5ce4cc2638d7c1aa3e4da82a19cf834a77df718",
        "f96c90e9e9700819ba05d87f66b200a18a08404706ac62cde6d68bc350e73861",
        "9326dc5daab04877a9f006ff6b1636a8fa9dcec9615b54f741a1a90091eaf694",
        "54f64c642cca6f67416ebe2b29e5d9414ece91f819efe97cd437fbe542c61bbb",
        "bb6aa1f9689b794c75affa709ae2477b209411d9ad092c2318ecd9ea94121bcc",
        "21cab7396525e614beeafe21c05a38bf597a39a191cc14147b9c5ec32210cf82",
    ]
    assert set(head) <= {x for _, _, x in V3}


@pytest.mark.parametrize(("name", "event", "expected"), V3, ids=[v[0] for v in V3])
def test_v3_received_bytes_reencode_identically(
    name: str, event: m.MetadataEvent, expected: str
) -> None:
    """Decode kamu's bytes, re-encode: the same bytes (stored as received, never rewritten)."""
    data = encode_block(wrap(event), version=3)
    assert encode_block(decode_block(data), version=3) == data


SET_INFO_BLOCK = m.MetadataBlock(
    system_time=Timestamp.parse("2050-01-01T12:00:00Z"),
    sequence_number=0,
    event=m.SetInfo(description="foo"),
)
SET_INFO_V2_HEX = (
    "140000000000000000000a0014000c00080004000a00000010000000020000000000400000000000440000001400"
    "000000000e001a000a0000000000090004000e0000001c00000000080208000001000000c0a80000000000000600"
    "08000400060000000400000003000000666f6f00"
)


def test_set_info_v2_exact_bytes() -> None:
    data = encode_block(SET_INFO_BLOCK, version=2)
    assert len(data) == 112
    assert data.hex() == SET_INFO_V2_HEX
    assert str(block_hash(data)) == (
        "f16205603b882241c71351baf996d6dba7e3ddbd571457e93c1cd282bdc61f9fed5f2"
    )
    assert decode_block(bytes.fromhex(SET_INFO_V2_HEX)) == SET_INFO_BLOCK


def test_set_info_v3() -> None:
    data = encode_block(SET_INFO_BLOCK, version=3)
    assert len(data) == 120
    assert str(block_hash(data)) == (
        "f1620e4773ca5765b41781e721cb891182e43a2df35665cd82b378e54b9ea25f4f50f"
    )
    assert decode_block(data) == SET_INFO_BLOCK


def test_default_version_is_2() -> None:
    assert encode_block(SET_INFO_BLOCK) == encode_block(SET_INFO_BLOCK, version=2)
