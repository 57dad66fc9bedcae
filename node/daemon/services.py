"""Long-lived parts of the daemon as services with start / ready / stop, run as one group.

A :class:`Service` is started in dependency order and stopped in reverse order; each stop stage
has its own timeout so one stuck part (a hung IPFS daemon, a Spark job) cannot stop the others
from shutting down cleanly. Background tasks of a service run under the group's
:class:`asyncio.TaskGroup`-like supervisor: a crashed task is logged and stops the daemon instead
of leaving it half alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

log = logging.getLogger("odf_node.daemon")


class Service(Protocol):
    """A part of the daemon with an explicit lifecycle."""

    name: str

    async def start(self) -> None:
        """Start and return once the service is ready to be used."""
        ...

    async def stop(self) -> None:
        """Release everything; must be safe to call after a failed or partial start."""
        ...


@dataclass
class FunctionService:
    """A service made of two coroutine functions (for small parts that need no class)."""

    name: str
    on_start: Callable[[], Awaitable[None]]
    on_stop: Callable[[], Awaitable[None]]

    async def start(self) -> None:
        """Run ``on_start``."""
        await self.on_start()

    async def stop(self) -> None:
        """Run ``on_stop``."""
        await self.on_stop()


@dataclass
class ServiceGroup:
    """Starts services in order, supervises their tasks, stops them in reverse order."""

    stop_timeout_s: float = 15.0
    services: list[Service] = field(default_factory=list)
    started: list[Service] = field(default_factory=list)
    ready_at: dict[str, float] = field(default_factory=dict)
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    _failure: asyncio.Future[BaseException] | None = None
    restarts: dict[str, int] = field(default_factory=dict)
    on_starting: Callable[[str], object] | None = None
    """Called with each service's name before it starts (the systemd status line)."""

    def add(self, service: Service) -> None:
        """Register ``service`` (started after the ones added before it)."""
        self.services.append(service)

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run a supervised background task; if it crashes, the daemon stops."""
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._on_done)
        return task

    def spawn_restarting(
        self,
        factory: Callable[[], Coroutine[Any, Any, Any]],
        name: str,
        *,
        base_s: float = 1.0,
        cap_s: float = 60.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> asyncio.Task[Any]:
        """Run ``factory()`` supervised; a crash is logged and the task restarted after a
        capped exponential backoff instead of stopping the node (housekeeping, monitors)."""

        async def loop() -> None:
            failures = 0
            while True:
                try:
                    await factory()
                    failures = 0
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    failures += 1
                    delay = min(cap_s, base_s * 2 ** (failures - 1))
                    log.error(
                        "task %s crashed (%d in a row): %r; restarting in %.1f s",
                        name,
                        failures,
                        e,
                        delay,
                        exc_info=e,
                    )
                    self.restarts[name] = self.restarts.get(name, 0) + 1
                    await sleep(delay)

        return self.spawn(loop(), name)

    def _on_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("task %s crashed: %r", task.get_name(), exc, exc_info=exc)
            if self._failure is not None and not self._failure.done():
                self._failure.set_result(exc)

    async def start(self) -> None:
        """Start every service in order; on failure stop those already started and re-raise."""
        self._failure = asyncio.get_running_loop().create_future()
        for s in self.services:
            if self.on_starting is not None:
                self.on_starting(s.name)
            t0 = time.monotonic()
            try:
                await s.start()
            except BaseException:
                log.error("service %s failed to start", s.name)
                with contextlib.suppress(Exception):
                    await s.stop()
                await self.stop()
                raise
            self.started.append(s)
            self.ready_at[s.name] = time.monotonic() - t0
            log.info("service %s ready (%.2f s)", s.name, self.ready_at[s.name])

    async def wait_failure(self) -> BaseException:
        """Wait until a supervised task crashes (never returns while all is well)."""
        assert self._failure is not None, "start() first"
        return await self._failure

    async def stop(self) -> None:
        """Cancel the supervised tasks, then stop services in reverse order (bounded per stage)."""
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=self.stop_timeout_s)
        while self.started:
            s = self.started.pop()
            try:
                await asyncio.wait_for(s.stop(), self.stop_timeout_s)
                log.info("service %s stopped", s.name)
            except TimeoutError:
                log.error("service %s did not stop within %.0f s", s.name, self.stop_timeout_s)
            except Exception as e:
                log.error("service %s failed to stop: %r", s.name, e)
