"""Derivative transforms: planning, engine protocol values and commit (no engine import)."""

from typing import TYPE_CHECKING

from coordinator.lazy import lazy_attributes

if TYPE_CHECKING:
    from coordinator.transform.model import (
        TransformCpuExceeded,
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
    "TransformCpuExceeded",
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

# The planner imports pyarrow: it loads when one of its names is first used, so that importing
# a light submodule (e.g. the engine table) keeps an idle daemon small.
_LAZY = {
    "TransformCpuExceeded": "coordinator.transform.model",
    "TransformInternalError": "coordinator.transform.model",
    "TransformInvalidQuery": "coordinator.transform.model",
    "TransformMemoryExceeded": "coordinator.transform.model",
    "TransformRequest": "coordinator.transform.model",
    "TransformRequestInput": "coordinator.transform.model",
    "TransformResponse": "coordinator.transform.model",
    "TransformSuccess": "coordinator.transform.model",
    "Watermark": "coordinator.transform.model",
    "CommitResult": "coordinator.transform.plan",
    "OutputPaths": "coordinator.transform.plan",
    "TransformEngineError": "coordinator.transform.plan",
    "TransformError": "coordinator.transform.plan",
    "TransformPlan": "coordinator.transform.plan",
    "TransformPlanError": "coordinator.transform.plan",
    "commit_transform": "coordinator.transform.plan",
    "plan_replay": "coordinator.transform.plan",
    "plan_transform": "coordinator.transform.plan",
}

if not TYPE_CHECKING:  # mypy sees the imports above, and reports unknown names as usual
    __getattr__ = lazy_attributes(__name__, _LAZY, globals())
