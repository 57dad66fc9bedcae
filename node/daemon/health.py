"""``GET /healthz`` and ``GET /readyz``: what a supervisor (Docker, Kubernetes, a load balancer)
asks the daemon's HTTP listener.

``/healthz`` answers 200 whenever the process serves HTTP: liveness, nothing more (a supervisor
that restarts on it restarts only a process that no longer answers). ``/readyz`` answers 200 when
the node does its job and 503 otherwise, with a JSON body naming each check, whether it passed
and why not:

* ``services``: every service of the daemon started, and it is not shutting down;
* ``state_writer``: an empty write queued behind the state writer's work commits within
  ``[health] max_write_delay_s`` (another process holding the database's write lock, a stalled
  disk or a writer far behind fail it);
* ``engine``: engine workers did not fail to start or die on their own
  ``[health] engine_crash_failures`` times within ``engine_crash_window_s`` (crash-looping);
* ``gossip_peers``: in ``[network] isolation = "open"`` with gossip on, at least one peer is
  connected (a node that reaches no one hears no announcement);
* ``verify_backlog``: at most ``[health] max_verify_backlog`` verify work items wait.

Neither needs authentication: they reveal whether the node works and the counts above, no
dataset, key or peer identity (docs/operations.md). Each check is a callable the composition
root hands over, so the logic is tested without a daemon.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from node.config import HealthSection


@dataclass(frozen=True)
class Check:
    """One readiness check's outcome."""

    name: str
    ok: bool
    detail: str

    def to_json(self) -> dict[str, Any]:
        """``{"ok": ..., "detail": ...}``."""
        return {"ok": self.ok, "detail": self.detail}


@dataclass
class Readiness:
    """The checks of ``/readyz`` over callables into the running daemon (module docstring).

    ``services()``: the names of the services added and of those started; ``stopping()``:
    whether shutdown began; ``write_probe()``: :meth:`node.adapters.state.ThreadedState.
    write_probe`; ``engine_crashes(window_s)``: the reasons of recent engine failures (empty
    while no engine was ever used); ``peers()``: connected gossip peers, ``None`` when the check
    does not apply (loopback-only mode or gossip off); ``verify_backlog()``: verify items
    waiting.
    """

    config: HealthSection
    services: Callable[[], tuple[list[str], list[str]]]
    stopping: Callable[[], bool]
    write_probe: Callable[[], Awaitable[None]]
    engine_crashes: Callable[[float], list[str]]
    peers: Callable[[], int | None]
    verify_backlog: Callable[[], Awaitable[int]]

    async def check(self) -> list[Check]:
        """Every check, in the order of the module docstring."""
        state = await self._state_writer()
        return [
            self._services(),
            state,
            self._engine(),
            self._peers(),
            await self._backlog(),
        ]

    async def report(self) -> tuple[bool, dict[str, Any]]:
        """``(ready, body)``: the JSON body of ``/readyz``."""
        checks = await self.check()
        failing = [c.name for c in checks if not c.ok]
        body = {
            "ready": not failing,
            "failing": failing,
            "checks": {c.name: c.to_json() for c in checks},
        }
        return not failing, body

    def _services(self) -> Check:
        added, started = self.services()
        if self.stopping():
            return Check("services", False, "the daemon is shutting down")
        missing = [name for name in added if name not in started]
        if missing:
            return Check("services", False, f"not started yet: {', '.join(missing)}")
        return Check("services", True, f"{len(started)} started")

    async def _state_writer(self) -> Check:
        limit = self.config.max_write_delay_s
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        try:
            await asyncio.wait_for(self.write_probe(), limit)
        except TimeoutError:
            return Check(
                "state_writer",
                False,
                f"a write queued now has not committed within {limit:g} s (the database's "
                "write lock held by another process, a stalled disk, or a writer far behind)",
            )
        except Exception as e:
            return Check("state_writer", False, f"a write failed: {e}")
        return Check("state_writer", True, f"a write committed in {loop.time() - t0:.3f} s")

    def _engine(self) -> Check:
        window = self.config.engine_crash_window_s
        reasons = self.engine_crashes(window)
        if len(reasons) >= self.config.engine_crash_failures:
            return Check(
                "engine",
                False,
                f"crash-looping: {len(reasons)} worker failures in the last {window:g} s "
                f"(the newest: {reasons[-1]})",
            )
        return Check("engine", True, f"{len(reasons)} worker failure(s) in the last {window:g} s")

    def _peers(self) -> Check:
        n = self.peers()
        if n is None:
            return Check("gossip_peers", True, "not required (loopback-only or gossip off)")
        if n < 1:
            return Check("gossip_peers", False, "no gossip peer connected (open network mode)")
        return Check("gossip_peers", True, f"{n} connected")

    async def _backlog(self) -> Check:
        limit = self.config.max_verify_backlog
        try:
            # A read: WAL readers never wait for the writer, but bound it like the probe.
            n = await asyncio.wait_for(self.verify_backlog(), self.config.max_write_delay_s)
        except Exception as e:
            detail = "timed out" if isinstance(e, TimeoutError) else str(e)
            return Check("verify_backlog", False, f"could not count: {detail}")
        if n > limit:
            return Check("verify_backlog", False, f"{n} verify items waiting (> {limit})")
        return Check("verify_backlog", True, f"{n} verify items waiting (<= {limit})")


__all__ = ["Check", "Readiness"]
