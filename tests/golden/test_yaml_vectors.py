"""Golden vectors: our YAML equals kamu-cli's, text for text.

See docs/odf-wire-format.md, "YAML" and "Golden vectors".

Every expected text below is copied from kamu-cli v0.153.0
``src/domain/opendatafabric/tests/tests/test_serde_yaml.rs`` (spec v0.34 era; the same texts are
in v0.180.0 and v0.264.0). Rust ``indoc!`` strips the common indentation and a ``\\`` at a line
end joins the next line, so ``- datasetId: \\`` + ``did:odf:…`` is one line.
"""

from __future__ import annotations

import base64

import pytest

from coordinator.errors import DecodeError, UnsupportedBlockVersion
from coordinator.identity import DatasetId
from coordinator.metadata import model as m
from coordinator.metadata.snapshot import DatasetSnapshot, snapshot_from_yaml, snapshot_to_yaml
from coordinator.metadata.timestamp import Timestamp
from coordinator.metadata.yaml_serde import (
    block_from_yaml,
    block_to_yaml,
    dump_yaml,
    from_dict,
    load_yaml,
    to_dict,
)
from coordinator.multiformats import Multihash

T = Timestamp.parse("2020-01-01T12:00:00Z")
SCHEMA_AB = base64.b64decode(
    "DAAAAAgACAAAAAQACAAAAAQAAAACAAAAQAAAAAQAAADY////GAAAAAwAAAAAAAAGEAAAAAAAAAAEAAQABAAAAAEAAABiAAAA"
    "EAAUABAAAAAPAAQAAAAIABAAAAAYAAAAIAAAAAAAAAIcAAAACAAMAAQACwAIAAAAQAAAAAAAAAEAAAAAAQAAAGEAAAA="
)


def h(data: bytes) -> Multihash:
    return Multihash.sha3_256(data)


# ---------------------------------------------------------------------------------------------
# serde_metadata_block (L394-L472): ExecuteTransform, seq 127, manifest version 2

METADATA_BLOCK_YAML = """\
kind: MetadataBlock
version: 2
content:
  systemTime: 2020-01-01T12:00:00Z
  prevBlockHash: f16209eb949bd8ff0bb1d827f11809aebc6bd0d5955c7f368469a913c70d196620272
  sequenceNumber: 127
  event:
    kind: ExecuteTransform
    queryInputs:
    - datasetId: did:odf:fed01816ef0a9abe93aba816ef0a9abe93aba90e6065747170300c0d3d30c2cd8d7a4
      prevBlockHash: f162080084bf2fba02475726feb2cab2d8215eab14bc6bdd8bfb2c8151257032ecd8b
      newBlockHash: f1620b039179a8a4ce2c252aa6f2f25798251c19b75fc1508d9d511a191e0487d64a7
      prevOffset: 9
      newOffset: 20
    - datasetId: did:odf:fed01826ef0a9abea3a3a826ef0a9abea3a3a90e6065747270300c1d3b30a2cd9d724
      prevBlockHash: f162080084bf2fba02475726feb2cab2d8215eab14bc6bdd8bfb2c8151257032ecd8b
      newBlockHash: f1620b039179a8a4ce2c252aa6f2f25798251c19b75fc1508d9d511a191e0487d64a7
    prevCheckpoint: f1620894b355f91b194f31c1116dcec200b68d5cfd90a3df19032829fa643bc711fcb
    prevOffset: 9
    newData:
      logicalHash: f162076d3bc41c9f588f7fcd0d5bf4718f8f84b1c41b20882703100b9eb9413807c01
      physicalHash: f1620cceefd7e0545bcf8b6d19f3b5750c8a3ee8350418877bc6fb12e32de28137355
      offsetInterval:
        start: 10
        end: 19
      size: 10
    newWatermark: 2020-01-01T12:00:00Z
"""

METADATA_BLOCK = m.MetadataBlock(
    system_time=T,
    prev_block_hash=h(b"prev"),
    sequence_number=127,
    event=m.ExecuteTransform(
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
        new_data=m.DataSlice(
            logical_hash=h(b"foo"),
            physical_hash=h(b"bar"),
            offset_interval=m.OffsetInterval(start=10, end=19),
            size=10,
        ),
        new_watermark=T,
    ),
)


def test_metadata_block_text_identical() -> None:
    assert block_to_yaml(METADATA_BLOCK) == METADATA_BLOCK_YAML
    assert block_to_yaml(METADATA_BLOCK, version=2) == METADATA_BLOCK_YAML


def test_metadata_block_parses() -> None:
    assert block_from_yaml(METADATA_BLOCK_YAML) == METADATA_BLOCK
    assert block_from_yaml(METADATA_BLOCK_YAML.encode()) == METADATA_BLOCK


def test_metadata_block_v3_envelope() -> None:
    # kamu >= v0.265 writes version 3; the content is unchanged.
    v3 = METADATA_BLOCK_YAML.replace("version: 2\n", "version: 3\n", 1)
    assert block_to_yaml(METADATA_BLOCK, version=3) == v3
    assert block_from_yaml(v3) == METADATA_BLOCK


def test_metadata_block_obsolete_version() -> None:
    # serde_metadata_block_obsolete_version (L474-L520): version 1 is refused.
    v1 = METADATA_BLOCK_YAML.replace("version: 2\n", "version: 1\n", 1)
    with pytest.raises(UnsupportedBlockVersion, match="version"):
        block_from_yaml(v1)


# ---------------------------------------------------------------------------------------------
# serde_set_data_schema (L132-L184): the arrow schema as standard base64

SET_DATA_SCHEMA_YAML = f"""\
kind: MetadataBlock
version: 2
content:
  systemTime: 2020-01-01T12:00:00Z
  prevBlockHash: f16209eb949bd8ff0bb1d827f11809aebc6bd0d5955c7f368469a913c70d196620272
  sequenceNumber: 123
  event:
    kind: SetDataSchema
    schema: {base64.b64encode(SCHEMA_AB).decode()}
"""


def test_set_data_schema() -> None:
    assert "schema: DAAAAAgACAAAAAQACAAAAAQAAAACAAAAQAAAAAQAAADY////" in SET_DATA_SCHEMA_YAML
    block = m.MetadataBlock(
        system_time=T,
        prev_block_hash=h(b"prev"),
        sequence_number=123,
        event=m.SetDataSchema(raw_arrow_schema=SCHEMA_AB),
    )
    assert block_to_yaml(block) == SET_DATA_SCHEMA_YAML
    assert block_from_yaml(SET_DATA_SCHEMA_YAML) == block


# ---------------------------------------------------------------------------------------------
# serde_dataset_snapshot_* (L186-L392)

SNAPSHOT_ROOT_YAML = """\
kind: DatasetSnapshot
version: 1
content:
  name: kamu.test
  kind: Root
  metadata:
  - kind: SetPollingSource
    fetch:
      kind: Url
      url: ftp://kamu.dev/test.zip
      cache:
        kind: Forever
    prepare:
    - kind: Decompress
      format: Zip
      subPath: data_*.csv
    read:
      kind: Csv
      header: true
    preprocess:
      kind: Sql
      engine: spark
      query: SELECT * FROM input
    merge:
      kind: Snapshot
      primaryKey:
      - id
"""

SNAPSHOT_ROOT = DatasetSnapshot(
    name="kamu.test",
    kind=m.DatasetKind.ROOT,
    metadata=(
        m.SetPollingSource(
            fetch=m.FetchStepUrl(url="ftp://kamu.dev/test.zip", cache=m.SourceCachingForever()),
            prepare=(m.PrepStepDecompress(format=m.CompressionFormat.ZIP, sub_path="data_*.csv"),),
            read=m.ReadStepCsv(header=True),
            preprocess=m.TransformSql(engine="spark", query="SELECT * FROM input"),
            merge=m.MergeStrategySnapshot(primary_key=("id",)),
        ),
    ),
)


def _derivative_yaml(name: str, ref1: str, ref2: str) -> str:
    return f"""\
kind: DatasetSnapshot
version: 1
content:
  name: {name}
  kind: Derivative
  metadata:
  - kind: SetTransform
    inputs:
    - datasetRef: {ref1}
    - datasetRef: {ref2}
    transform:
      kind: Sql
      engine: spark
      query: SOME_SQL
"""


def _derivative(name: str, ref1: str, ref2: str) -> DatasetSnapshot:
    return DatasetSnapshot(
        name=name,
        kind=m.DatasetKind.DERIVATIVE,
        metadata=(
            m.SetTransform(
                inputs=(m.TransformInput(dataset_ref=ref1), m.TransformInput(dataset_ref=ref2)),
                transform=m.TransformSql(engine="spark", query="SOME_SQL"),
            ),
        ),
    )


SNAPSHOTS = [
    ("root", SNAPSHOT_ROOT_YAML, SNAPSHOT_ROOT),
    (
        "derivative",
        _derivative_yaml(
            "com.naturalearthdata.admin0",
            "com.naturalearthdata.10m.admin0",
            "com.naturalearthdata.50m.admin0",
        ),
        _derivative(
            "com.naturalearthdata.admin0",
            "com.naturalearthdata.10m.admin0",
            "com.naturalearthdata.50m.admin0",
        ),
    ),
    (
        "derivative-multi-tenant",
        _derivative_yaml(
            "a/com.naturalearthdata.admin0",
            "b/com.naturalearthdata.10m.admin0",
            "c/com.naturalearthdata.50m.admin0",
        ),
        _derivative(
            "a/com.naturalearthdata.admin0",
            "b/com.naturalearthdata.10m.admin0",
            "c/com.naturalearthdata.50m.admin0",
        ),
    ),
]


@pytest.mark.parametrize(("name", "text", "expected"), SNAPSHOTS, ids=[s[0] for s in SNAPSHOTS])
def test_dataset_snapshot(name: str, text: str, expected: DatasetSnapshot) -> None:
    actual = snapshot_from_yaml(text)
    assert actual == expected
    assert snapshot_to_yaml(actual) == text


# ---------------------------------------------------------------------------------------------
# serde_fetch_step_files_glob (L522-L549) and serde_transform (L551-L589): bare unions

FETCH_STEP_FILES_GLOB_YAML = """\
kind: FilesGlob
path: /opt/x/*.txt
cache:
  kind: Forever
order: ByName
"""

TRANSFORM_YAML = """\
kind: Sql
engine: flink
queries:
- alias: bar
  query: SELECT * FROM foo
temporalTables:
- name: foo
  primaryKey:
  - id
"""

UNION_VECTORS = [
    (
        "FetchStep",
        FETCH_STEP_FILES_GLOB_YAML,
        m.FetchStepFilesGlob(
            path="/opt/x/*.txt",
            cache=m.SourceCachingForever(),
            order=m.SourceOrdering.BY_NAME,
        ),
    ),
    (
        "Transform",
        TRANSFORM_YAML,
        m.TransformSql(
            engine="flink",
            queries=(m.SqlQueryStep(alias="bar", query="SELECT * FROM foo"),),
            temporal_tables=(m.TemporalTable(name="foo", primary_key=("id",)),),
        ),
    ),
    # serde_enum_tagging (L19-L80): PascalCase tags on output.
    ("ReadStep", "kind: NdJson\nencoding: utf-8\n", m.ReadStepNdJson(encoding="utf-8")),
]


@pytest.mark.parametrize(
    ("union", "text", "expected"), UNION_VECTORS, ids=[u[0] for u in UNION_VECTORS]
)
def test_union_text(union: str, text: str, expected: object) -> None:
    assert from_dict(union, load_yaml(text)) == expected
    assert dump_yaml(to_dict(expected)) == text


@pytest.mark.parametrize("tag", ["NdJson", "ndJson", "ndjson"])
def test_enum_tagging_accepts_pascal_camel_lower(tag: str) -> None:
    value = from_dict("ReadStep", load_yaml(f"kind: {tag}\nencoding: utf-8\n"))
    assert value == m.ReadStepNdJson(encoding="utf-8")


@pytest.mark.parametrize("tag", ["nDjson", "NDJSON", "Ndjson", "nd_json"])
def test_enum_tagging_rejects_other_casings(tag: str) -> None:
    with pytest.raises(DecodeError, match=r"ReadStep\.kind"):
        from_dict("ReadStep", load_yaml(f"kind: {tag}\nencoding: utf-8\n"))


# serde_string_enum_names (L82-L130): plain enums are PascalCase, read also camel/lowercase.


def test_string_enum_names_output() -> None:
    glob = m.FetchStepFilesGlob(path="x", order=m.SourceOrdering.BY_EVENT_TIME)
    assert dump_yaml(to_dict(glob)) == "kind: FilesGlob\npath: x\norder: ByEventTime\n"


@pytest.mark.parametrize("value", ["ByEventTime", "byEventTime", "byeventtime"])
def test_string_enum_names_accepted(value: str) -> None:
    glob = from_dict("FetchStep", load_yaml(f"kind: FilesGlob\npath: x\norder: {value}\n"))
    assert glob == m.FetchStepFilesGlob(path="x", order=m.SourceOrdering.BY_EVENT_TIME)


@pytest.mark.parametrize("value", ["bYeventtime", "BYEVENTTIME", "by_event_time"])
def test_string_enum_names_rejected(value: str) -> None:
    with pytest.raises(DecodeError, match=r"FetchStep\.order"):
        from_dict("FetchStep", load_yaml(f"kind: FilesGlob\npath: x\norder: {value}\n"))


# ---------------------------------------------------------------------------------------------
# Error handling: DecodeError naming the field path (kamu: serde errors, deny_unknown_fields)


def _block_with_event(event_yaml: str) -> str:
    head = METADATA_BLOCK_YAML.split("  event:\n", maxsplit=1)[0]
    return head + "  event:\n" + "".join(f"    {line}\n" for line in event_yaml.splitlines())


POLLING = """\
kind: SetPollingSource
fetch:
  kind: Url
  url: http://x
read:
  kind: Csv
merge:
  kind: Append
"""


def test_error_fixture_is_valid() -> None:
    block = block_from_yaml(_block_with_event(POLLING))
    assert block.event == m.SetPollingSource(
        fetch=m.FetchStepUrl(url="http://x"),
        read=m.ReadStepCsv(),
        merge=m.MergeStrategyAppend(),
    )


@pytest.mark.parametrize(
    ("text", "path"),
    [
        (POLLING.replace("kind: Csv", "kind: Xml"), r"content\.event\.read\.kind"),
        (POLLING.replace("  kind: Csv\n", "  header: true\n"), r"content\.event\.read\.kind"),
        (POLLING.replace("  kind: Csv\n", ""), r"content\.event\.read: must not be null"),
        (POLLING.replace("kind: Csv", "kind: 5"), r"content\.event\.read\.kind"),
        (POLLING + "extra: 1\n", r"content\.event\.extra"),
        (POLLING.replace("url: http://x", "url: 5"), r"content\.event\.fetch\.url"),
        (
            POLLING.replace("url: http://x", "url: http://x\n  URL: y"),
            r"content\.event\.fetch\.URL",
        ),
        (
            POLLING.replace("kind: Csv", "kind: Csv\n  header: 'true'"),
            r"content\.event\.read\.header",
        ),
        (POLLING.replace("kind: Csv", "kind: Csv\n  schema: a"), r"content\.event\.read\.schema"),
        (
            POLLING.replace("kind: Csv", "kind: Csv\n  schema: [1]"),
            r"content\.event\.read\.schema\[0\]",
        ),
        (POLLING.replace("kind: Append", "kind: Ledger"), r"content\.event\.merge\.primaryKey"),
        (
            POLLING + "prepare:\n- kind: Decompress\n  format: Rar\n",
            r"content\.event\.prepare\[0\]\.format",
        ),
        (POLLING.replace("read:\n  kind: Csv\n", ""), r"content\.event\.read"),
        ("kind: Unknown\n", r"content\.event\.kind"),
        ("kind: DisablePollingSource\nx: 1\n", r"content\.event\.x"),
        ("kind: AddData\nprevOffset: -1\n", r"content\.event\.prevOffset"),
        ("kind: AddData\nprevOffset: 18446744073709551616\n", r"content\.event\.prevOffset"),
        ("kind: AddData\nprevOffset: '9'\n", r"content\.event\.prevOffset"),
        ("kind: AddData\nprevOffset: 9.0\n", r"content\.event\.prevOffset"),
        ("kind: AddData\nprevCheckpoint: f00\n", r"content\.event\.prevCheckpoint"),
        ("kind: AddData\nnewWatermark: yesterday\n", r"content\.event\.newWatermark"),
        ("kind: Seed\ndatasetId: did:odf:f00\ndatasetKind: Root\n", r"content\.event\.datasetId"),
        ("kind: SetDataSchema\nschema: AAA\n", r"content\.event\.schema"),
        ("kind: SetDataSchema\nschema: AAB=\n", r"content\.event\.schema"),
        ("kind: SetInfo\nkeywords: [a, 1]\n", r"content\.event\.keywords\[1\]"),
        ("kind: SetInfo\ndescription: yes\ndescription: no\n", r"duplicate key"),
        (
            "kind: ExecuteTransform\nqueryInputs:\n- prevOffset: 1\n",
            r"content\.event\.queryInputs\[0\]\.datasetId",
        ),
    ],
)
def test_decode_errors_name_the_path(text: str, path: str) -> None:
    with pytest.raises(DecodeError, match=path):
        block_from_yaml(_block_with_event(text))


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("kind: MetadataBlock\nversion: 2\ncontent: [\n", "malformed YAML"),
        ("- 1\n", "expected a mapping"),
        ("", "expected a mapping"),
        (METADATA_BLOCK_YAML.replace("kind: MetadataBlock", "kind: DatasetSnapshot"), "kind"),
        (METADATA_BLOCK_YAML.replace("version: 2", "version: '2'"), "version"),
        (METADATA_BLOCK_YAML + "extra: 1\n", "extra"),
        (METADATA_BLOCK_YAML + "---\n" + METADATA_BLOCK_YAML, "malformed YAML"),
        (
            METADATA_BLOCK_YAML.replace("sequenceNumber: 127", "sequenceNumber: -1"),
            "sequenceNumber",
        ),
        (METADATA_BLOCK_YAML.replace("  sequenceNumber: 127\n", ""), r"content\.sequenceNumber"),
        (
            METADATA_BLOCK_YAML.replace("systemTime: 2020", "systemTime: x2020"),
            r"content\.systemTime",
        ),
        (
            METADATA_BLOCK_YAML.replace("start: 10", "start: !!python/object:int 10"),
            "malformed YAML",
        ),
        # PyYAML's own tag constructors crash on these (IndexError / AttributeError).
        ("!!float\n", "malformed YAML"),
        (METADATA_BLOCK_YAML.replace("start: 10", "start: !!timestamp 10"), "malformed YAML"),
        (
            METADATA_BLOCK_YAML.replace("start: 10", "start: !!binary AAAA"),
            r"content\.event\.newData\.offsetInterval\.start",
        ),
    ],
)
def test_envelope_errors(text: str, match: str) -> None:
    with pytest.raises(DecodeError, match=match):
        block_from_yaml(text)


def test_timestamps_keep_nanoseconds_and_are_not_yaml11_timestamps() -> None:
    text = METADATA_BLOCK_YAML.replace(
        "systemTime: 2020-01-01T12:00:00Z", "systemTime: 2024-01-17T22:56:23.716417240Z"
    )
    block = block_from_yaml(text)
    assert block.system_time == Timestamp.parse("2024-01-17T22:56:23.716417240Z")
    assert block_to_yaml(block) == text


def test_yaml11_booleans_are_plain_strings() -> None:
    # serde_yaml follows YAML 1.2: ``yes``/``on`` are strings, written without quotes.
    event = m.SetInfo(description="yes", keywords=("on", "no", "true", "1", "0123", "", "~"))
    text = dump_yaml(to_dict(event))
    assert text == (
        "kind: SetInfo\ndescription: yes\nkeywords:\n- on\n- no\n- 'true'\n- '1'\n- '0123'\n"
        "- ''\n- '~'\n"
    )
    assert from_dict("MetadataEvent", load_yaml(text)) == event


def test_multiline_strings_use_literal_blocks() -> None:
    transform = m.TransformSql(engine="spark", query="SELECT *\nFROM input\n")
    text = dump_yaml(to_dict(transform))
    assert text == "kind: Sql\nengine: spark\nquery: |\n  SELECT *\n  FROM input\n"
    assert from_dict("Transform", load_yaml(text)) == transform


def test_snapshot_errors() -> None:
    with pytest.raises(DecodeError, match=r"content\.name"):
        snapshot_from_yaml(SNAPSHOT_ROOT_YAML.replace("name: kamu.test", "name: kamu_test"))
    with pytest.raises(DecodeError, match=r"content\.kind"):
        snapshot_from_yaml(SNAPSHOT_ROOT_YAML.replace("kind: Root", "kind: ROOT"))
    with pytest.raises(DecodeError, match=r"content\.metadata\[0\]\.fetch\.kind"):
        snapshot_from_yaml(SNAPSHOT_ROOT_YAML.replace("kind: Url", "kind: Ftp"))
    with pytest.raises(DecodeError, match="version"):
        snapshot_from_yaml(SNAPSHOT_ROOT_YAML.replace("version: 1", "version: 2"))
