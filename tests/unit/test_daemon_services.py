"""The daemon's service supervisor: order, failure handling, crash detection."""

from __future__ import annotations

import asyncio

import pytest

from node.daemon.services import FunctionService, ServiceGroup


def make(log: list[str], name: str, fail: bool = False) -> FunctionService:
    async def start() -> None:
        log.append(f"start {name}")
        if fail:
            raise RuntimeError(f"{name} cannot start")

    async def stop() -> None:
        log.append(f"stop {name}")

    return FunctionService(name, start, stop)


def test_started_in_order_stopped_in_reverse() -> None:
    log: list[str] = []
    group = ServiceGroup()
    for n in ("state", "ipfs", "rpc"):
        group.add(make(log, n))

    async def main() -> None:
        await group.start()
        await group.stop()

    asyncio.run(main())
    assert log == ["start state", "start ipfs", "start rpc", "stop rpc", "stop ipfs", "stop state"]


def test_failed_start_stops_what_already_started() -> None:
    log: list[str] = []
    group = ServiceGroup()
    group.add(make(log, "state"))
    group.add(make(log, "ipfs", fail=True))
    group.add(make(log, "rpc"))
    with pytest.raises(RuntimeError, match="ipfs cannot start"):
        asyncio.run(group.start())
    # The failing service is asked to clean up its partial start; rpc never started.
    assert log == ["start state", "start ipfs", "stop ipfs", "stop state"]


def test_a_crashed_task_is_reported_and_tasks_are_cancelled_on_stop() -> None:
    group = ServiceGroup()
    cancelled = asyncio.Event()

    async def crash() -> None:
        raise ValueError("boom")

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    async def main() -> BaseException:
        await group.start()
        group.spawn(forever(), "forever")
        group.spawn(crash(), "crash")
        failure = await group.wait_failure()
        await group.stop()
        assert cancelled.is_set()
        return failure

    failure = asyncio.run(main())
    assert isinstance(failure, ValueError) and str(failure) == "boom"
