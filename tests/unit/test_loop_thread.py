"""The transfer loop thread: results, errors, and cancellation that waits for the unwind."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from node.adapters.loop_thread import LoopThread, LoopThreadStopped


@pytest.fixture
def lt() -> Iterator[LoopThread]:
    t = LoopThread("test-loop")
    t.start()
    yield t
    t.stop()


def test_result_comes_from_the_other_thread(lt: LoopThread) -> None:
    async def main() -> None:
        async def where() -> str:
            return threading.current_thread().name

        assert await lt.run(where()) == "test-loop"

    asyncio.run(main())


def test_errors_propagate(lt: LoopThread) -> None:
    async def main() -> None:
        async def fail() -> None:
            raise KeyError("boom")

        with pytest.raises(KeyError, match="boom"):
            await lt.run(fail())

    asyncio.run(main())


class SlowUnwind:
    """A pull that waits forever and, once cancelled, unwinds only when ``gate`` opens."""

    def __init__(self, *, note_cancel: bool = True) -> None:
        self.started, self.gate = threading.Event(), threading.Event()
        self.log: list[str] = []
        self._note_cancel = note_cancel

    async def pull(self) -> None:
        self.started.set()
        try:
            await asyncio.Event().wait()
        finally:
            if self._note_cancel:
                self.log.append("cancelled")
            await asyncio.to_thread(self.gate.wait)  # a slow unwind: the store is being restored
            self.log.append("unwound")


def test_cancel_returns_only_after_the_coroutine_unwound(lt: LoopThread) -> None:
    async def main() -> None:
        p = SlowUnwind()
        started, gate, log = p.started, p.gate, p.log
        task = asyncio.create_task(lt.run(p.pull()))
        await asyncio.to_thread(started.wait)
        task.cancel()
        for _ in range(20):
            await asyncio.sleep(0)
        assert not task.done(), "the caller must not resume while the pull still unwinds"
        gate.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert log == ["cancelled", "unwound"]

    asyncio.run(main())


def test_a_second_cancel_still_waits(lt: LoopThread) -> None:
    async def main() -> None:
        p = SlowUnwind(note_cancel=False)
        started, gate, log = p.started, p.gate, p.log
        task = asyncio.create_task(lt.run(p.pull()))
        await asyncio.to_thread(started.wait)
        task.cancel()
        await asyncio.sleep(0)
        task.cancel()
        for _ in range(20):
            await asyncio.sleep(0)
        assert not task.done()
        gate.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert log == ["unwound"]

    asyncio.run(main())


def test_stopped_loop_refuses_and_closes_the_coroutine() -> None:
    async def main() -> None:
        t = LoopThread("never-started")

        async def work() -> int:
            return 1

        coro = work()
        with pytest.raises(LoopThreadStopped):
            await t.run(coro)
        assert coro.cr_frame is None  # closed, so no "never awaited" warning

    asyncio.run(main())


def test_stop_cancels_running_work() -> None:
    async def main() -> None:
        t = LoopThread("stopping")
        t.start()
        started = threading.Event()
        log: list[str] = []

        async def forever() -> None:
            started.set()
            try:
                await asyncio.Event().wait()
            finally:
                log.append("cancelled")

        task = asyncio.create_task(t.run(forever()))
        await asyncio.to_thread(started.wait)
        await asyncio.to_thread(t.stop)
        assert log == ["cancelled"]
        assert not t.running
        with pytest.raises(LoopThreadStopped):
            await task

    asyncio.run(main())
