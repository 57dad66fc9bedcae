"""The clocks the code is given (time is injected, never read from a global, so tests and the
simulator run in a time of their own).

* :data:`Clock`: nanoseconds since the Unix epoch (the protocol core, the node's state, the use
  cases).
* :data:`TimestampClock`: an ODF :class:`~coordinator.metadata.timestamp.Timestamp`, the system
  time written into new blocks (the dataset repository, ingest).
"""

from __future__ import annotations

from collections.abc import Callable

from coordinator.metadata.timestamp import Timestamp

Clock = Callable[[], int]
"""Nanoseconds since the Unix epoch."""
TimestampClock = Callable[[], Timestamp]
"""The system time of a new block."""

__all__ = ["Clock", "TimestampClock"]
