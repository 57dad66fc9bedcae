"""The system column vocabulary (``SetVocab``), apart from the writer.

Kept free of pyarrow so that the engine protocol values (:mod:`coordinator.transform.model`)
can name it without loading the writer: that keeps an idle daemon small.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.metadata import model as m


@dataclass(frozen=True, slots=True)
class Vocab:
    """Names of the system columns (``SetVocab``, with ODF's defaults)."""

    offset_column: str = "offset"
    operation_type_column: str = "op"
    system_time_column: str = "system_time"
    event_time_column: str = "event_time"

    @classmethod
    def of(cls, event: m.SetVocab | None) -> Vocab:
        """The vocabulary a ``SetVocab`` event defines (defaults for unset columns)."""
        if event is None:
            return cls()
        d = cls()
        return cls(
            event.offset_column or d.offset_column,
            event.operation_type_column or d.operation_type_column,
            event.system_time_column or d.system_time_column,
            event.event_time_column or d.event_time_column,
        )
