"""The decisions of one MQTT fetch (:mod:`node.transfer.mqtt_fetch`), with no broker in sight.

:class:`MqttFetchPlan` holds what one poll will do: the broker, the topics and the limits;
:func:`take_message` decides, from a message and what was written so far, whether the message
becomes a line of the file, ends the poll quietly (it waits, unacknowledged, for the next poll)
or fails it. The executor in :mod:`node.transfer.mqtt_fetch` only carries these out.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MessageTake", "MqttFetchPlan", "take_message"]


@dataclass(frozen=True, slots=True)
class MqttFetchPlan:
    """One MQTT poll: where to connect, what to subscribe (each topic with its QoS), when to
    stop."""

    host: str
    port: int
    topics: tuple[tuple[str, int], ...]
    client: str
    username: str | None
    password: str | None
    max_bytes: int
    max_records: int
    idle_timeout_s: float
    max_message_bytes: int
    max_poll_s: float

    @property
    def where(self) -> str:
        """The broker as errors name it."""
        return f"MQTT broker {self.host}:{self.port}"

    def too_large(self, size: int) -> str:
        """Why a packet of ``size`` bytes (over ``max_message_bytes``) fails the poll."""
        return (
            f"{self.where}: a message of {size:,} bytes is larger than "
            f"ingest.mqtt_max_message_bytes ({self.max_message_bytes:,}); it stays in the "
            "broker's session until that setting allows it or the session is cleared"
        )


@dataclass(frozen=True, slots=True)
class MessageTake:
    """What to do with one message.

    ``line`` set: write it and acknowledge the message; ``stop`` set: end the poll after this
    message (``""`` quietly, otherwise the error to raise). Both set: the line is the last one.
    """

    line: bytes | None
    stop: str | None


def take_message(
    plan: MqttFetchPlan, payload: bytes, topic: str, records: int, size: int
) -> MessageTake:
    """The decision for a message with ``payload`` on ``topic``, ``records`` lines of ``size``
    bytes being written already: the payload, UTF-8 trimmed, is one line unless it is not text,
    or would cross ``max_bytes`` (an error only when it is the first: alone it can never fit)."""
    try:
        text = payload.decode("utf-8").strip()
    except UnicodeDecodeError:
        return MessageTake(None, f"{plan.where}: a message on {topic[:200]!r} is not UTF-8 text")
    line = text.encode() + b"\n"
    if size + len(line) > plan.max_bytes:
        if records == 0:
            return MessageTake(
                None,
                f"{plan.where}: a message on {topic[:200]!r} ({len(line):,} bytes) is larger "
                f"than ingest.max_fetch_bytes ({plan.max_bytes:,})",
            )
        return MessageTake(None, "")  # full: this one waits for the next poll
    return MessageTake(line, "" if records + 1 >= plan.max_records else None)
