"""``odf-node dataset transform``: plan, run on an engine, commit — nothing on failure."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from coordinator.errors import INVALID_INPUT
from coordinator.identity.dataset_id import DatasetId
from coordinator.metadata.timestamp import Timestamp
from coordinator.storage.dataset import Dataset
from coordinator.transform.model import (
    TransformCpuExceeded,
    TransformInvalidQuery,
    TransformMemoryExceeded,
    TransformSuccess,
)
from coordinator.transform.plan import (
    CommitResult,
    OutputPaths,
    TransformEngineError,
    clear_outputs,
    commit_transform,
    plan_transform,
)
from coordinator.transform.verify import TransformEngine


class InvalidTransformQuery(TransformEngineError):
    """The engine refused the dataset's query (``InvalidQuery``)."""

    rpc_code = INVALID_INPUT


class EngineMemoryExceeded(TransformEngineError):
    """The engine went over its per-request memory limit; it was stopped, nothing committed."""

    def __init__(self, message: str, *, limit_bytes: int, peak_bytes: int) -> None:
        super().__init__(message)
        self.limit_bytes = limit_bytes
        self.peak_bytes = peak_bytes


class EngineCpuExceeded(TransformEngineError):
    """The engine used more CPU time than its per-request budget (``engine.cpu_limit_s``);
    it was stopped, nothing committed."""

    def __init__(self, message: str, *, limit_seconds: float, used_seconds: float) -> None:
        super().__init__(message)
        self.limit_seconds = limit_seconds
        self.used_seconds = used_seconds


def run_transform(
    dataset: Dataset,
    inputs: Mapping[DatasetId, Dataset],
    engine: TransformEngine,
    *,
    clock: Callable[[], Timestamp],
    work_dir: Path | None = None,
    alias: str = "",
) -> CommitResult | None:
    """Run the next transform step of ``dataset``; None if it was up to date.

    Raises:
        TransformPlanError: the dataset cannot be transformed.
        InvalidTransformQuery: the engine refused the query; nothing was committed.
        EngineMemoryExceeded: the engine went over its memory limit; nothing was committed.
        EngineCpuExceeded: the engine went over its CPU-time budget; nothing was committed.
        TransformEngineError: the engine failed; nothing was committed.
        ConcurrentModification: the head moved meanwhile; nothing was committed.
    """
    own = work_dir is None
    scratch = Path(tempfile.mkdtemp(prefix="odf-transform-")) if work_dir is None else work_dir
    try:
        paths = OutputPaths.under(scratch)
        plan = plan_transform(dataset, inputs, system_time=clock(), paths=paths, alias=alias)
        if plan is None:
            return None
        clear_outputs(paths)
        response = engine.execute_transform(plan.request)
        if isinstance(response, TransformInvalidQuery):
            raise InvalidTransformQuery(response.message)
        if isinstance(response, TransformMemoryExceeded):
            raise EngineMemoryExceeded(
                response.message,
                limit_bytes=response.limit_bytes,
                peak_bytes=response.peak_bytes,
            )
        if isinstance(response, TransformCpuExceeded):
            raise EngineCpuExceeded(
                response.message,
                limit_seconds=response.limit_seconds,
                used_seconds=response.used_seconds,
            )
        if not isinstance(response, TransformSuccess):
            raise TransformEngineError(f"engine failed: {response.message}")
        return commit_transform(dataset, plan, response)
    finally:
        if own:
            shutil.rmtree(scratch, ignore_errors=True)


__all__ = ["EngineCpuExceeded", "EngineMemoryExceeded", "InvalidTransformQuery", "run_transform"]
