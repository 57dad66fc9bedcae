"""Golden vectors of kamu-cli HEAD's YAML (spec v0.39), text for text.

Expected texts from kamu-cli HEAD ``src/odf/metadata/tests/tests/test_serde_yaml.rs``. The cases
whose text did not change since v0.153 (``serde_metadata_block`` with ``version: 3``, the
obsolete version, the dataset snapshots, ``serde_fetch_step_files_glob``, ``serde_transform``,
``serde_enum_tagging``, ``serde_string_enum_names``) are in ``test_yaml_vectors.py``. The cases on
v0.39 resources (``test_serde_resource_*``) and ``serde_set_data_schema_validation`` are in
``test_yaml_resource_vectors.py``. See docs/odf-wire-format.md, "YAML".
"""

from __future__ import annotations

import base64

import pytest

from coordinator.errors import DecodeError
from coordinator.metadata import model as m
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
from tests.golden.test_block_vectors import ODF_SCHEMA, SCHEMA_AB

T = Timestamp.parse("2020-01-01T12:00:00Z")


def _block(event: m.MetadataEvent) -> m.MetadataBlock:
    return m.MetadataBlock(
        system_time=T,
        prev_block_hash=Multihash.sha3_256(b"prev"),
        sequence_number=123,
        event=event,
    )


# serde_set_data_schema: the ODF schema, encodings and extra attributes as nested maps.
SET_DATA_SCHEMA_ODF_YAML = """\
kind: MetadataBlock
version: 3
content:
  systemTime: 2020-01-01T12:00:00Z
  prevBlockHash: f16209eb949bd8ff0bb1d827f11809aebc6bd0d5955c7f368469a913c70d196620272
  sequenceNumber: 123
  event:
    kind: SetDataSchema
    schema:
      fields:
      - name: city
        type:
          kind: String
        extra:
          arrow.apache.org/bufferEncoding:
            kind: View
            offsetBitWidth: 32
      - name: population
        type:
          kind: UInt64
      - name: census
        type:
          kind: Option
          inner:
            kind: String
        extra:
          opendatafabric.org/type:
            kind: ObjectLink
            linkType:
              kind: Multihash
      - name: links
        type:
          kind: List
          itemType:
            kind: String
      extra:
        kamu.dev/archetype: Collection
"""

# serde_set_data_schema_legacy: the v0.34 Arrow bytes under the v0.38 key ``rawArrowSchema``.
SET_DATA_SCHEMA_LEGACY_YAML = f"""\
kind: MetadataBlock
version: 3
content:
  systemTime: 2020-01-01T12:00:00Z
  prevBlockHash: f16209eb949bd8ff0bb1d827f11809aebc6bd0d5955c7f368469a913c70d196620272
  sequenceNumber: 123
  event:
    kind: SetDataSchema
    rawArrowSchema: {base64.b64encode(SCHEMA_AB).decode()}
"""


def test_set_data_schema_odf() -> None:
    block = _block(m.SetDataSchema(schema=ODF_SCHEMA))
    assert block_to_yaml(block, version=3) == SET_DATA_SCHEMA_ODF_YAML
    assert block_from_yaml(SET_DATA_SCHEMA_ODF_YAML) == block
    # The ODF schema has no v0.34 spelling: a v2 manifest carries it under the same key.
    assert block_to_yaml(block, version=2) == SET_DATA_SCHEMA_ODF_YAML.replace(
        "version: 3", "version: 2"
    )


def test_set_data_schema_legacy() -> None:
    block = _block(m.SetDataSchema(raw_arrow_schema=SCHEMA_AB))
    assert block_to_yaml(block, version=3) == SET_DATA_SCHEMA_LEGACY_YAML
    assert block_from_yaml(SET_DATA_SCHEMA_LEGACY_YAML) == block
    # The v0.34 key (kamu <= spec v0.37) still reads as the Arrow bytes.
    v034 = SET_DATA_SCHEMA_LEGACY_YAML.replace("rawArrowSchema:", "schema:")
    assert block_from_yaml(v034) == block


def test_set_data_schema_both_keys_refused() -> None:
    text = SET_DATA_SCHEMA_LEGACY_YAML + f"    schema: {base64.b64encode(SCHEMA_AB).decode()}\n"
    with pytest.raises(DecodeError, match="schema"):
        block_from_yaml(text)


# test_serde_maps, ``String -> AnyJson``: extra attributes are a map of JSON values.
EXTRA_YAML = """\
arrow.apache.org/offsetBitWidth: 32
opendatafabric.org/description: foobar
opendatafabric.org/type:
  kind: ObjectLink
  linkType:
    kind: Multihash
"""


def test_extra_attributes_map() -> None:
    field = from_dict(m.DataField, {"name": "x", "type": "String", "extra": load_yaml(EXTRA_YAML)})
    assert field.extra is not None
    assert field.extra.as_dict() == {
        "arrow.apache.org/offsetBitWidth": 32,
        "opendatafabric.org/description": "foobar",
        "opendatafabric.org/type": {"kind": "ObjectLink", "linkType": {"kind": "Multihash"}},
    }
    assert dump_yaml(to_dict(field)["extra"]) == EXTRA_YAML
    # kamu's flatbuffers form of the same map (serde_json, keys sorted, compact).
    assert field.extra.entries == (
        '{"arrow.apache.org/offsetBitWidth":32,"opendatafabric.org/description":"foobar",'
        '"opendatafabric.org/type":{"kind":"ObjectLink","linkType":{"kind":"Multihash"}}}'
    )


# serde_enum_short_form: ``type: Timestamp`` reads as ``{kind: Timestamp}``; output expands.
SHORT_FORM_YAML = """\
fields:
- name: long
  type:
    kind: Timestamp
- name: short
  type: Timestamp
- name: full
  type:
    kind: Timestamp
    unit: Nanosecond
    timezone: UTC
"""


def test_enum_short_form() -> None:
    schema = from_dict(m.DataSchema, load_yaml(SHORT_FORM_YAML))
    assert schema == m.DataSchema(
        fields=(
            m.DataField(name="long", type=m.DataTypeTimestamp()),
            m.DataField(name="short", type=m.DataTypeTimestamp()),
            m.DataField(
                name="full",
                type=m.DataTypeTimestamp(unit=m.TimeUnit.NANOSECOND, timezone="UTC"),
            ),
        )
    )
    assert dump_yaml(to_dict(schema)) == SHORT_FORM_YAML.replace(
        "  type: Timestamp\n", "  type:\n    kind: Timestamp\n"
    )


def test_enum_short_form_invalid_type() -> None:
    with pytest.raises(DecodeError, match="unknown variant 'Invalid'"):
        from_dict(m.DataSchema, load_yaml("fields:\n- name: short\n  type: Invalid\n"))


# Spec v0.38 renamed a read step's DDL ``schema`` to ``ddlSchema``.
def test_read_step_ddl_schema_keys() -> None:
    step = m.ReadStepCsv(ddl_schema=("a INT",), header=True)
    assert to_dict(step, legacy=False) == {"kind": "Csv", "ddlSchema": ["a INT"], "header": True}
    assert to_dict(step) == {"kind": "Csv", "schema": ["a INT"], "header": True}
    assert from_dict("ReadStep", {"kind": "Csv", "ddlSchema": ["a INT"], "header": True}) == step
    assert from_dict("ReadStep", {"kind": "Csv", "schema": ["a INT"], "header": True}) == step
    odf = m.ReadStepCsv(
        schema=m.DataSchema(fields=(m.DataField(name="a", type=m.DataTypeInt32()),))
    )
    plain = {"kind": "Csv", "schema": {"fields": [{"name": "a", "type": {"kind": "Int32"}}]}}
    assert to_dict(odf) == plain
    assert from_dict("ReadStep", plain) == odf


def test_new_fetch_steps_and_merge_strategies() -> None:
    mqtt = m.FetchStepMqtt(
        host="test.mosquitto.org",
        port=1883,
        username="user",
        password="${{ env.MQTT_PASSWORD }}",
        topics=(m.MqttTopicSubscription(path="dev/#", qos=m.MqttQos.AT_LEAST_ONCE),),
    )
    eth = m.FetchStepEthereumLogs(chain_id=1, filter="address = X", signature="Transfer()")
    for value, plain in (
        (
            mqtt,
            {
                "kind": "Mqtt",
                "host": "test.mosquitto.org",
                "port": 1883,
                "username": "user",
                "password": "${{ env.MQTT_PASSWORD }}",
                "topics": [{"path": "dev/#", "qos": "AtLeastOnce"}],
            },
        ),
        (
            eth,
            {
                "kind": "EthereumLogs",
                "chainId": 1,
                "filter": "address = X",
                "signature": "Transfer()",
            },
        ),
        (
            m.MergeStrategyChangelogStream(primary_key=("id",)),
            {"kind": "ChangelogStream", "primaryKey": ["id"]},
        ),
        (
            m.MergeStrategyUpsertStream(primary_key=("id",)),
            {"kind": "UpsertStream", "primaryKey": ["id"]},
        ),
    ):
        assert to_dict(value) == plain
        union = (
            "FetchStep"
            if isinstance(value, m.FetchStepMqtt | m.FetchStepEthereumLogs)
            else "MergeStrategy"
        )
        assert from_dict(union, plain) == value
