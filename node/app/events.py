"""In-process event bus: the daemon publishes what happens, RPC WebSocket clients listen.

Publishing never blocks: each listener is a plain callable invoked on the event loop, and the
RPC layer owns the bounded per-client queues.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from node.app.jsontypes import JsonFields

log = logging.getLogger("odf_node.events")

Listener = Callable[[str, dict[str, Any]], None]


class EventBus:
    """Fan-out of ``(topic, payload)`` events to listeners."""

    def __init__(self) -> None:
        self._listeners: list[Listener] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    def listen(self, listener: Listener) -> None:
        """Call ``listener(topic, payload)`` for every event."""
        self._listeners.append(listener)
        with contextlib.suppress(RuntimeError):
            self._loop = asyncio.get_running_loop()

    def publish(self, topic: str, payload: JsonFields) -> None:
        """Deliver an event (from the event loop thread); each listener gets its own copy."""
        for listener in list(self._listeners):
            try:
                listener(topic, dict(payload))
            except Exception:  # a broken listener must not break the pipeline
                log.exception("event listener failed on %s", topic)

    def publish_threadsafe(self, topic: str, payload: JsonFields) -> None:
        """Deliver an event from a worker thread (verification progress)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self.publish, topic, payload)
