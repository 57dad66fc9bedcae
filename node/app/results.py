"""One typed result per command: what the CLI prints and what the JSON-RPC method returns.

The offline CLI and the daemon's RPC methods call the same use cases and serialise the same
result with :meth:`to_json`, so ``odf-node dataset transform --json`` has one shape whether a
daemon runs or not. Fields a context cannot know (e.g. ``publish_work_id`` without a daemon) are
``None``, never missing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


class _Json:
    """``to_json``: the dataclass's fields as a JSON-friendly dict."""

    def to_json(self) -> dict[str, Any]:
        """JSON-friendly form (field names are the wire names)."""
        return asdict(self)  # type: ignore[call-overload, no-any-return]


@dataclass(frozen=True)
class CreatedDataset(_Json):
    """``dataset create``: one dataset made from a snapshot document."""

    alias: str
    id: str


@dataclass(frozen=True)
class IngestResult(_Json):
    """``dataset ingest``: what was committed (``up_to_date``: nothing)."""

    id: str
    alias: str
    up_to_date: bool
    new_head: str | None
    new_blocks: list[str]
    records: int
    watermark: str | None
    linked_objects: dict[str, int] | None = None
    publish_work_id: int | None = None


@dataclass(frozen=True)
class TransformResult(_Json):
    """``dataset transform``: the step committed (``up_to_date``: nothing to do)."""

    id: str
    alias: str
    up_to_date: bool
    new_head: str | None = None
    new_blocks: list[str] = field(default_factory=list)
    offsets: list[int] | None = None
    watermark: str | None = None
    publish_work_id: int | None = None


@dataclass(frozen=True)
class VerifyResult(_Json):
    """``dataset verify``: integrity counts, the replay report and every problem found."""

    id: str
    alias: str
    ok: bool
    seconds: float
    integrity: dict[str, Any]
    replay: dict[str, Any] | None
    problems: list[str]

    def to_json(self) -> dict[str, Any]:
        """The integrity report's fields at top level (as before), plus the rest."""
        out = dict(self.integrity)
        out.update(
            id=self.id,
            alias=self.alias,
            ok=self.ok,
            seconds=self.seconds,
            replay=self.replay,
            problems=self.problems,
        )
        return out


@dataclass(frozen=True)
class DatasetRow(_Json):
    """``dataset list``: one stored dataset (``error`` set when its chain cannot be read)."""

    alias: str
    id: str
    kind: str | None
    head: str | None
    blocks: int | None
    records: int | None
    owned: bool
    accepted_head: str | None
    verification: str | None
    error: str | None = None


@dataclass(frozen=True)
class LogEntry(_Json):
    """``dataset log``: one block, newest first."""

    hash: str
    block: dict[str, Any]


@dataclass(frozen=True)
class PublishQueued(_Json):
    """``dataset publish`` on a daemon: the queued work item."""

    id: str
    work_id: int
    head: str | None


__all__ = [
    "CreatedDataset",
    "DatasetRow",
    "IngestResult",
    "LogEntry",
    "PublishQueued",
    "TransformResult",
    "VerifyResult",
]
