"""The daemon's state (``<home>/state.db``; node/state/, node/adapters/state.py) as the ``state``
service: opened before the other services are built (they hold it from construction), started
first (work items a dead process had claimed are released and resumed) and stopped last.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

from node.adapters.state import ThreadedState

log = logging.getLogger("odf_node.daemon")


class StateService:
    """The ``state`` service over an open :class:`ThreadedState`."""

    name = "state"

    def __init__(self, state: ThreadedState, node_id: str) -> None:
        self.state = state
        self._node_id = node_id
        self._closed = False

    @classmethod
    async def open(cls, path: Path, clock: Callable[[], int], node_id: str) -> StateService:
        """Open (and migrate) the state file off the event loop, like every later call."""
        return cls(await asyncio.to_thread(ThreadedState, path, clock), node_id)

    async def start(self) -> None:
        """Release the claims of a process that died, and log the start."""
        released = await self.state.release_claims()
        if released:
            log.info("resuming %d work item(s) interrupted by the last shutdown", released)
        await self.state.log_event("daemon.start", None, {"node_id": self._node_id})

    async def stop(self) -> None:
        """Log the stop and close the file (a second call does nothing)."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            await self.state.log_event("daemon.stop", None, {})
        await self.state.aclose()
