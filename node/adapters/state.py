"""The state port over :class:`node.state.store.NodeState`, run inline on the caller's loop.

A stop-gap twin used until the threaded adapter (its own writer thread, batched commits)
replaces it in the daemon; it is also the simplest faithful in-memory twin for unit tests
(``NodeState.in_memory``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from node.state.store import NodeState


class InlineState:
    """Every :class:`NodeState` method as a coroutine (runs synchronously when awaited)."""

    def __init__(self, state: NodeState) -> None:
        self.sync = state

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        fn = getattr(self.sync, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        return call

    def close(self) -> None:
        """Close the database."""
        self.sync.close()
