"""A second asyncio loop on its own thread, for work that must not share the node's loop.

Pulls are many small steps (HTTP requests, hashing, decoding, signature checks, atomic file
writes with ``fsync``): run on the daemon's loop at 50 announcements/s they took more than half
of its time and held it for tens of milliseconds at a stretch, so RPC calls and gossip
validation waited behind them. :class:`LoopThread` runs such coroutines on a dedicated loop;
the caller's loop only waits for the result.

Cancellation keeps the caller's guarantees: when the awaiting task is cancelled, the coroutine
on the thread is cancelled too, and the caller's ``await`` returns (re-raising
:class:`asyncio.CancelledError`) only **after** that coroutine has finished unwinding. So a lock
the caller holds around :meth:`LoopThread.run` (the dataset's commit lock) still covers every
write the coroutine makes, and "a cancelled pull leaves the store as it was" still holds when
the caller's ``await`` returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from coordinator.errors import UNAVAILABLE, OdfNodeError

T = TypeVar("T")


class LoopThreadStopped(OdfNodeError):
    """The loop thread is not running (never started, or stopped with the node)."""

    rpc_code = UNAVAILABLE


class LoopThread:
    """An asyncio loop on a daemon thread; :meth:`run` awaits a coroutine on it from elsewhere."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def running(self) -> bool:
        """Whether :meth:`run` can take work."""
        return self._loop is not None and self._loop.is_running()

    def start(self) -> None:
        """Start the thread and its loop; returns once the loop runs."""
        if self._thread is not None:
            return
        ready = threading.Event()
        loop = asyncio.new_event_loop()

        def main() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            try:
                loop.run_forever()
            finally:
                loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=main, name=self.name, daemon=True)
        self._thread.start()
        ready.wait()

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the thread's loop and return its result (or raise its error).

        Raises:
            LoopThreadStopped: the loop is not running (``coro`` is closed, never run), or
                :meth:`stop` cancelled ``coro``.
        """
        loop = self._loop
        if loop is None or not loop.is_running():
            coro.close()
            raise LoopThreadStopped(f"the {self.name} loop is not running")
        caller = asyncio.get_running_loop()
        done: asyncio.Future[T] = caller.create_future()
        holder: list[asyncio.Task[T]] = []

        def settle(task: asyncio.Task[T]) -> None:
            if done.done():
                return
            if task.cancelled():  # by :meth:`stop`, or by our caller's cancellation
                done.set_exception(LoopThreadStopped(f"the {self.name} loop cancelled it"))
            elif (exc := task.exception()) is not None:
                done.set_exception(exc)
            else:
                done.set_result(task.result())

        def begin() -> None:
            task = loop.create_task(coro)
            holder.append(task)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            task.add_done_callback(lambda t: caller.call_soon_threadsafe(settle, t))

        loop.call_soon_threadsafe(begin)
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            # FIFO on the thread's loop: ``begin`` has run before this callback does.
            with contextlib.suppress(RuntimeError):  # the loop closed: the task is done
                loop.call_soon_threadsafe(lambda: holder[0].cancel() if holder else None)
            while not done.done():
                # Wait for the coroutine to unwind even if we are cancelled again meanwhile.
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait([done])
            done.exception()  # retrieved: its outcome no longer matters to anyone
            raise

    def stop(self, timeout_s: float = 10.0) -> None:
        """Cancel what still runs, wait up to ``timeout_s`` for it to unwind, stop the loop."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return

        async def shutdown() -> None:
            tasks = list(self._tasks)
            for t in tasks:
                t.cancel()
            await asyncio.wait(tasks, timeout=timeout_s) if tasks else None
            loop.stop()

        if loop.is_running():
            asyncio.run_coroutine_threadsafe(shutdown(), loop)
        thread.join(timeout_s + 1)
        self._loop = None
        self._thread = None


__all__ = ["LoopThread", "LoopThreadStopped"]
