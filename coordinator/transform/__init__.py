"""Derivative transforms: planning, engine protocol values and commit (no engine import)."""

from coordinator.transform.model import (
    TransformInternalError,
    TransformInvalidQuery,
    TransformMemoryExceeded,
    TransformRequest,
    TransformRequestInput,
    TransformResponse,
    TransformSuccess,
    Watermark,
)
from coordinator.transform.plan import (
    CommitResult,
    OutputPaths,
    TransformEngineError,
    TransformError,
    TransformPlan,
    TransformPlanError,
    commit_transform,
    plan_replay,
    plan_transform,
)

__all__ = [
    "CommitResult",
    "OutputPaths",
    "TransformEngineError",
    "TransformError",
    "TransformInternalError",
    "TransformInvalidQuery",
    "TransformMemoryExceeded",
    "TransformPlan",
    "TransformPlanError",
    "TransformRequest",
    "TransformRequestInput",
    "TransformResponse",
    "TransformSuccess",
    "Watermark",
    "commit_transform",
    "plan_replay",
    "plan_transform",
]
