"""The ``Mqtt`` fetch step of a polling source (ODF v0.35): the messages received since the last
poll, one per line, in a file.

Behaviour follows kamu-cli's MQTT fetch (kamu-cli,
``src/infra/core/src/services/ingest/fetch_service/mqtt.rs``):

* a **persistent session** (MQTT 3.1.1, ``clean_session = false``) under a client id derived
  from the dataset (:func:`coordinator.ingest.fetch.mqtt_client_id`), so the broker keeps the
  messages of QoS 1 and 2 subscriptions that arrive between two polls and hands them over at
  the next connect;
* the topics are subscribed with the QoS the source gives (``AtMostOnce`` by default);
* messages are read until the broker stays idle for ``idle_timeout_s`` (kamu: 1 s) or
  ``max_records`` are read (kamu's ``target_records_per_slice``, 10,000);
* each payload, UTF-8 with its surrounding whitespace trimmed, is one line of the file (kamu
  joins them with spaces; one per line reads with every line-based read step, NdJson first);
  no message is "up to date": nothing to ingest.

Where it differs from kamu:

* the topics are subscribed only when the broker has no session for the client id (a new one,
  or a broker that restarted without persistence): re-subscribing makes the broker send the
  retained messages again, which kamu then ingests at every poll. The client id includes a
  digest of the topics, so a source whose topics change starts a session of its own;
* every message is acknowledged as soon as it is written (the library's manual acknowledgement),
  and the message that would cross ``max_bytes`` (``ingest.max_fetch_bytes``) or come after
  ``max_records`` is *not* acknowledged: the poll ends there and the broker delivers it again at
  the next connect (QoS 1 and 2). A single message larger than ``max_bytes`` is refused;
* a poll reads messages for at most ``max_poll_s`` (``ingest.mqtt_max_poll_s``), whatever the
  broker sends: a message every ``idle_timeout_s`` or less would otherwise keep a poll open
  until ``max_records`` (10,000 messages a second apart: 2.8 hours); the messages after that
  wait, unacknowledged, for the next poll;
* a packet larger than ``max_message_bytes`` (``ingest.mqtt_max_message_bytes``) is refused
  from its header, before its payload is read: paho-mqtt reads a whole packet into memory (and
  the line is copied a few times), so a 200 MiB message took 1.1 GB of memory whatever
  ``max_bytes`` said;
* the broker's address must pass the node's source policy (every address its name resolves
  to, as for HTTP sources, :mod:`node.transfer.policy`); the client connects to the address
  that was checked.

Like kamu, a poll that fails after the messages were received (they do not match the schema)
loses them: they were acknowledged, nothing was committed. Messages published with QoS 0 while
no poll is connected are not kept by the broker (MQTT's rule).

The client is paho-mqtt (blocking, run in a worker thread by the caller).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from coordinator.errors import FetchError, SourceUnreachable
from node.transfer.mqtt_plan import MqttFetchPlan, take_message
from node.transfer.policy import SourcePolicy

__all__ = [
    "DEFAULT_IDLE_TIMEOUT_S",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_MAX_POLL_S",
    "DEFAULT_MAX_RECORDS",
    "MqttFetch",
    "fetch_mqtt",
]

#: kamu's ``MqttSourceConfig.broker_idle_timeout_ms`` default.
DEFAULT_IDLE_TIMEOUT_S: Final = 1.0
#: kamu's ``SourceConfig.target_records_per_slice`` default.
DEFAULT_MAX_RECORDS: Final = 10_000
#: ``ingest.mqtt_max_message_bytes``: the largest MQTT packet read (docs/ingest-polling.md).
DEFAULT_MAX_MESSAGE_BYTES: Final = 16 << 20
#: ``ingest.mqtt_max_poll_s``: the longest one poll reads messages.
DEFAULT_MAX_POLL_S: Final = 60.0
#: How long the CONNACK and SUBACK may take.
_HANDSHAKE_S: Final = 10.0
#: One turn of the network loop (the idle timeout is checked between turns).
_TURN_S: Final = 0.05
#: The longest the client reads what the broker still sends before it disconnects.
_DRAIN_S: Final = 2.0


@dataclass(frozen=True, slots=True)
class MqttFetch:
    """What one MQTT fetch wrote: ``records`` lines, ``size`` bytes; ``session_present`` tells
    whether the broker still had the session (the topics were not subscribed again)."""

    records: int
    size: int
    session_present: bool


def fetch_mqtt(
    *,
    host: str,
    port: int,
    topics: Sequence[tuple[str, int]],
    client: str,
    target: Path,
    policy: SourcePolicy,
    username: str | None = None,
    password: str | None = None,
    max_bytes: int,
    max_records: int = DEFAULT_MAX_RECORDS,
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    max_poll_s: float = DEFAULT_MAX_POLL_S,
    clock: Callable[[], float] = time.monotonic,
) -> MqttFetch:
    """Connect, subscribe if the session is new, and write the messages to ``target``.

    Blocking: call it in a worker thread.

    Raises:
        SourceUnreachable: cannot resolve or connect, no CONNACK / SUBACK in time, the broker
            refuses the connection (bad credentials: named) or drops it.
        SourceRefused: the policy refuses the broker's address.
        FetchError: a topic subscription is refused, a payload is not UTF-8 or is larger than
            ``max_bytes``, a packet is larger than ``max_message_bytes``.
    """
    plan = MqttFetchPlan(
        host=host,
        port=port,
        topics=tuple((path, qos) for path, qos in topics),
        client=client,
        username=username,
        password=password,
        max_bytes=max_bytes,
        max_records=max_records,
        idle_timeout_s=idle_timeout_s,
        max_message_bytes=max_message_bytes,
        max_poll_s=max_poll_s,
    )
    address = policy.checked_addresses(host, port, f"MQTT broker {host}:{port}")[0]
    with open(target, "wb") as out:
        session = _MqttSession(plan, out, clock)
        try:
            session_present = session.open(address)
            session.read_messages()
        finally:
            session.close()
    return MqttFetch(session.records, session.size, session_present)


class _MqttSession:
    """One poll's connection to the broker, carrying out an :class:`MqttFetchPlan`."""

    def __init__(self, plan: MqttFetchPlan, out: Any, clock: Callable[[], float]) -> None:
        from paho.mqtt import client as mqtt
        from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode

        self.plan, self.out, self.clock = plan, out, clock
        self.mqtt, self.codes = mqtt, MQTTErrorCode
        self.records = self.size = 0
        self.oversized = 0  # the size of a packet refused from its header
        self.stop: list[str] = []  # why the message loop ends early (empty: go on)
        self.last_message = 0.0
        self.arrived = 0  # messages delivered by the broker, taken or not
        self.state: dict[str, Any] = {"connack": None, "suback": None, "lost": None}
        self.c = _bounded_client_class(mqtt, self)(
            CallbackAPIVersion.VERSION2,
            client_id=plan.client,
            clean_session=False,
            protocol=mqtt.MQTTv311,
            manual_ack=True,
        )
        self.c.connect_timeout = _HANDSHAKE_S
        if plan.username is not None:
            self.c.username_pw_set(plan.username, plan.password)
        self.c.on_connect = self._on_connect
        self.c.on_subscribe = self._on_subscribe
        self.c.on_disconnect = self._on_disconnect
        self.c.on_message = self._on_message

    def _on_connect(self, _c: Any, _u: Any, flags: Any, reason: Any, _p: Any) -> None:
        self.state["connack"] = (reason, bool(flags.session_present))

    def _on_subscribe(self, _c: Any, _u: Any, _mid: int, reasons: Any, _p: Any) -> None:
        self.state["suback"] = list(reasons)

    def _on_disconnect(self, _c: Any, _u: Any, _f: Any, reason: Any, _p: Any) -> None:
        self.state["lost"] = reason

    def _on_message(self, _c: Any, _u: Any, msg: Any) -> None:
        self.arrived += 1
        if self.stop:
            return  # not acknowledged: the broker delivers it again next time
        take = take_message(self.plan, bytes(msg.payload), msg.topic, self.records, self.size)
        if take.line is not None:
            self.out.write(take.line)
            self.records += 1
            self.size += len(take.line)
            self.last_message = self.clock()
            self.c.ack(msg.mid, msg.qos)
        if take.stop is not None:
            self.stop.append(take.stop)

    def _turn(self, what: str) -> None:
        """One turn of the network loop; a refused packet or a loop error fails the poll."""
        rc = self.c.loop(timeout=_TURN_S)
        if self.oversized:
            raise FetchError(self.plan.too_large(self.oversized))
        if rc not in (self.codes.MQTT_ERR_SUCCESS, self.codes.MQTT_ERR_AGAIN):
            raise SourceUnreachable(f"{self.plan.where}: {self.mqtt.error_string(rc)}{what}")

    def _turn_until(self, done: Callable[[], bool], what: str) -> None:
        deadline = self.clock() + _HANDSHAKE_S
        while not done():
            if self.state["lost"] is not None:
                lost = self.state["lost"]
                raise SourceUnreachable(f"{self.plan.where}: disconnected ({lost}) {what}")
            if self.clock() > deadline:
                raise SourceUnreachable(
                    f"{self.plan.where}: no answer {what} within {_HANDSHAKE_S:g} s"
                )
            self._turn(f" {what}")

    def open(self, address: str) -> bool:
        """Connect, and subscribe unless the broker kept the session; whether it did."""
        where = self.plan.where
        try:
            self.c.connect(address, self.plan.port, keepalive=60)
        except OSError as e:
            raise SourceUnreachable(f"{where}: cannot connect: {e}") from None
        self._turn_until(lambda: self.state["connack"] is not None, "waiting for CONNACK")
        reason, session_present = self.state["connack"]
        if reason.is_failure:
            raise SourceUnreachable(f"{where}: connection refused: {reason}")
        if not session_present:
            result, _ = self.c.subscribe(list(self.plan.topics))
            if result != self.codes.MQTT_ERR_SUCCESS:
                raise SourceUnreachable(f"{where}: {self.mqtt.error_string(result)} subscribing")
            self._turn_until(lambda: self.state["suback"] is not None, "waiting for SUBACK")
            for (path, _), granted in zip(self.plan.topics, self.state["suback"], strict=False):
                if granted.is_failure:
                    raise FetchError(f"{where}: subscription to {path[:200]!r} refused")
        return bool(session_present)

    def read_messages(self) -> None:
        """Read until the broker is idle, a limit is reached or a message fails the poll."""
        self.last_message = started = self.clock()
        while not self.stop and self.clock() - self.last_message < self.plan.idle_timeout_s:
            if self.clock() - started >= self.plan.max_poll_s:
                self.stop.append("")  # the rest waits, unacknowledged, for the next poll
                break
            if self.oversized:
                raise FetchError(self.plan.too_large(self.oversized))
            if self.state["lost"] is not None:
                raise SourceUnreachable(f"{self.plan.where}: disconnected ({self.state['lost']})")
            self._turn("")
        if self.stop and self.stop[0]:
            raise FetchError(self.stop[0])

    def close(self) -> None:
        """Send the queued acknowledgements, drain what the broker still sends, disconnect."""
        self.stop.append("")  # a message still arriving is left unacknowledged for next time
        c = self.c
        if not c.is_connected():
            return
        # The acknowledgements written in the message callback are only queued: send them
        # before the DISCONNECT, or the broker delivers those messages again.
        for _ in range(100):
            if not c.want_write() or c.loop_write() != self.codes.MQTT_ERR_SUCCESS:
                break
        # Read (and leave unacknowledged) what the broker is still sending: closing a socket
        # with unread bytes resets the connection, and the broker then drops the
        # acknowledgements it had not read yet. Bounded by its in-flight window.
        deadline = self.clock() + _DRAIN_S
        seen = -1
        while seen != self.arrived and self.clock() < deadline:
            seen = self.arrived
            if c.loop(timeout=_TURN_S) != self.codes.MQTT_ERR_SUCCESS:
                break
        c.disconnect()


def _bounded_client_class(mqtt: Any, session: _MqttSession) -> Any:
    """paho-mqtt's client class, refusing a packet larger than the plan's ``max_message_bytes``
    once its header says so (the connection is dropped before the payload is read); the size
    is recorded on ``session``. Built here because paho is imported only when used."""
    limit = session.plan.max_message_bytes

    class _BoundedClient(mqtt.Client):  # type: ignore[misc]
        def _sock_recv(self, bufsize: int) -> bytes:
            packet = self._in_packet
            if packet["have_remaining"] and packet["remaining_length"] > limit:
                session.oversized = int(packet["remaining_length"])
                raise OSError(f"a packet of {session.oversized:,} bytes")
            return bytes(super()._sock_recv(bufsize))

    return _BoundedClient
