"""The input files of one ingest call (push or polling).

A module of its own so that :mod:`coordinator.ingest.preprocess`, which turns inputs into
inputs, does not import :mod:`coordinator.ingest.push`, which runs it (no import cycle).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from coordinator.metadata import model as m
from coordinator.metadata.timestamp import Timestamp


@dataclass(frozen=True, slots=True)
class InputFile:
    """One input of an ingest call, committed as one ``AddData``.

    ``event_time`` overrides the call's fallback event time for this file (a polling source's
    event time from the file name or ``Last-Modified``); ``source_state`` is written as the
    block's ``newSourceState`` (polling sources: ETag, Last-Modified, last file name).
    """

    path: Path
    event_time: Timestamp | None = None
    source_state: m.SourceState | None = None
