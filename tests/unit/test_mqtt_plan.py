"""The pure decisions of an MQTT poll (node.transfer.mqtt_plan), without a broker."""

from __future__ import annotations

import dataclasses

import pytest

from node.transfer.mqtt_plan import MessageTake, MqttFetchPlan, take_message


def plan(**limits: int) -> MqttFetchPlan:
    settings = {"max_bytes": 100, "max_records": 3, **limits}
    return MqttFetchPlan(
        host="broker.test",
        port=1883,
        topics=(("a/#", 1), ("b", 0)),
        client="odf-x",
        username=None,
        password=None,
        idle_timeout_s=1.0,
        max_message_bytes=1000,
        max_poll_s=60.0,
        **settings,
    )


def test_the_plan_is_frozen_and_names_the_broker() -> None:
    p = plan()
    assert p.topics == (("a/#", 1), ("b", 0))
    assert p.where == "MQTT broker broker.test:1883"
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.port = 1  # type: ignore[misc]


def test_a_payload_is_one_trimmed_line() -> None:
    assert take_message(plan(), b'  {"a": 1}\n ', "t", 0, 0) == MessageTake(b'{"a": 1}\n', None)


def test_the_message_reaching_max_records_is_the_last() -> None:
    assert take_message(plan(), b"x", "t", 2, 10) == MessageTake(b"x\n", "")


def test_a_message_crossing_max_bytes_waits_unless_it_is_the_first() -> None:
    assert take_message(plan(max_bytes=10), b"123456789", "t", 1, 2) == MessageTake(None, "")
    first = take_message(plan(max_bytes=5), b"123456789", "t", 0, 0)
    assert first.line is None
    assert first.stop is not None and "larger than ingest.max_fetch_bytes (5)" in first.stop


def test_a_payload_that_is_not_utf8_fails_the_poll() -> None:
    take = take_message(plan(), b"\xff\xfe", "sensors/1", 0, 0)
    assert take.line is None
    assert take.stop == "MQTT broker broker.test:1883: a message on 'sensors/1' is not UTF-8 text"


def test_the_oversized_packet_error_names_the_setting() -> None:
    assert "ingest.mqtt_max_message_bytes (1,000)" in plan().too_large(2000)
