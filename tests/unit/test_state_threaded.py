"""The threaded state adapter over a real SQLite file: group commit, isolation of failures,
reads during commits, and an event loop that never waits for SQLite."""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from pathlib import Path

import pytest

from node.adapters.state import READS, WRITES, InlineState, StateClosed, ThreadedState
from node.state.errors import WorkItemNotFound
from node.state.store import NodeState

DID = "did:odf:fed01" + "ab" * 32


def clock() -> int:
    return time.time_ns()


def test_every_public_method_is_a_read_or_a_write() -> None:
    public = {
        n
        for n, f in inspect.getmembers(NodeState, inspect.isfunction)
        if not n.startswith("_") and n not in {"open", "in_memory", "close", "batch"}
    }
    assert public == READS | WRITES
    assert not READS & WRITES
    # Each adapter spells every one out (no __getattr__: mypy checks them against StatePort).
    for adapter in (InlineState, ThreadedState):
        assert set(vars(adapter)) >= READS | WRITES, adapter
        assert "__getattr__" not in vars(adapter)


def test_same_results_as_inline(tmp_path: Path) -> None:
    async def script(st: object) -> list[object]:
        s: object = st
        out: list[object] = []
        out.append((await s.subscribe(DID, "a")).did)  # type: ignore[attr-defined]
        item = await s.enqueue("verify", DID, "f1620" + "00" * 32, {})  # type: ignore[attr-defined]
        out.append(item.state)
        claimed = await s.claim(now_ns=time.time_ns() + 10**12)  # type: ignore[attr-defined]
        out.append(claimed.id == item.id)
        out.append((await s.complete(item.id)).state)  # type: ignore[attr-defined]
        out.append([x.did for x in await s.subscriptions()])  # type: ignore[attr-defined]
        out.append(await s.pending_count("verify"))  # type: ignore[attr-defined]
        return out

    async def run() -> tuple[list[object], list[object]]:
        threaded = ThreadedState(tmp_path / "t.db", clock)
        inline = InlineState(NodeState.open(tmp_path / "i.db", clock))
        try:
            return await script(threaded), await script(inline)
        finally:
            threaded.close()
            inline.close()

    a, b = asyncio.run(run())
    assert a == b


def test_concurrent_writes_are_group_committed(tmp_path: Path) -> None:
    async def run() -> ThreadedState:
        st = ThreadedState(tmp_path / "s.db", clock)
        await asyncio.gather(*(st.log_event("k", None, {"i": i}) for i in range(2000)))  # type: ignore[attr-defined]
        events = await st.events(after_id=0, limit=5000)  # type: ignore[attr-defined]
        assert len(events) == 2000
        return st

    st = asyncio.run(run())
    stats = st.stats
    st.close()
    assert stats.writes == 2000
    assert stats.transactions < 2000 / 4, stats  # far fewer commits than writes
    print(f"2000 writes in {stats.transactions} transactions, largest {stats.largest_batch}")


def test_a_failing_write_fails_alone(tmp_path: Path) -> None:
    async def run() -> None:
        st = ThreadedState(tmp_path / "s.db", clock)
        try:
            ok1 = st.log_event("before", None, {})  # type: ignore[attr-defined]
            bad = st.complete(424242)  # type: ignore[attr-defined]
            ok2 = st.log_event("after", None, {})  # type: ignore[attr-defined]
            results = await asyncio.gather(ok1, bad, ok2, return_exceptions=True)
            assert isinstance(results[1], WorkItemNotFound)
            kinds = [e.kind for e in await st.events(after_id=0)]  # type: ignore[attr-defined]
            assert kinds == ["before", "after"]
        finally:
            st.close()

    asyncio.run(run())


def test_reads_do_not_wait_for_a_slow_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    original = NodeState.log_event

    def slow(self: NodeState, kind: str, did: str | None, data: dict[str, object]) -> int:
        if kind == "slow":
            release.wait(10)
        return original(self, kind, did, data)

    monkeypatch.setattr(NodeState, "log_event", slow)

    async def run() -> None:
        st = ThreadedState(tmp_path / "s.db", clock)
        try:
            await st.subscribe(DID)  # type: ignore[attr-defined]
            writing = asyncio.ensure_future(st.log_event("slow", None, {}))  # type: ignore[attr-defined]
            await asyncio.sleep(0.05)
            assert not writing.done()  # the writer holds its transaction open
            subs = await asyncio.wait_for(st.subscriptions(), 5)  # type: ignore[attr-defined]
            assert [s.did for s in subs] == [DID]
            release.set()
            await writing
        finally:
            release.set()
            st.close()

    asyncio.run(run())


def test_the_loop_keeps_running_while_writes_commit(tmp_path: Path) -> None:
    async def max_lag(st: object) -> float:
        worst = 0.0
        stop = False

        async def heartbeat() -> None:
            nonlocal worst
            while not stop:
                t0 = time.perf_counter()
                await asyncio.sleep(0.001)
                worst = max(worst, time.perf_counter() - t0 - 0.001)

        hb = asyncio.ensure_future(heartbeat())
        for chunk in range(20):  # 2,000 durable writes in waves of 100
            await asyncio.gather(
                *(st.log_event("k", None, {"i": chunk * 100 + i}) for i in range(100))  # type: ignore[attr-defined]
            )
        stop = True
        await hb
        return worst

    async def run() -> tuple[float, float]:
        threaded = ThreadedState(tmp_path / "t.db", clock)
        inline = InlineState(NodeState.open(tmp_path / "i.db", clock))
        try:
            return await max_lag(threaded), await max_lag(inline)
        finally:
            threaded.close()
            inline.close()

    threaded_lag, inline_lag = asyncio.run(run())
    print(f"max loop lag: threaded {threaded_lag * 1000:.1f} ms, inline {inline_lag * 1000:.1f} ms")
    assert threaded_lag < 0.5  # generous: a shared, noisy machine


def test_calls_after_close_raise_a_typed_error(tmp_path: Path) -> None:
    async def run() -> None:
        st = ThreadedState(tmp_path / "s.db", clock)
        st.close()
        with pytest.raises(StateClosed):
            await st.subscriptions()  # type: ignore[attr-defined]

    asyncio.run(run())


def test_unknown_methods_are_attribute_errors(tmp_path: Path) -> None:
    st = ThreadedState(tmp_path / "s.db", clock)
    try:
        with pytest.raises(AttributeError):
            st.no_such_method  # noqa: B018
    finally:
        st.close()


def test_status_counts_run_on_the_callers_thread_and_see_committed_writes(tmp_path: Path) -> None:
    from node.adapters.state import STATUS_READS

    assert STATUS_READS <= READS

    async def run() -> None:
        st = await asyncio.to_thread(ThreadedState, tmp_path / "s.db", clock)
        try:
            assert await st.status_counts() == (0, {})  # type: ignore[attr-defined]
            await st.subscribe(DID, "a")  # type: ignore[attr-defined]
            await st.enqueue("verify", DID, "f1620" + "00" * 32, {})  # type: ignore[attr-defined]
            assert await st.status_counts() == (1, {"verify": 1})  # type: ignore[attr-defined]
            # The connection belongs to the loop's thread (sqlite3 would refuse another).
            assert st._status is not None
            st._status._conn.execute("SELECT 1")
        finally:
            await st.aclose()
        with pytest.raises(StateClosed):
            await st.status_counts()  # type: ignore[attr-defined]

    asyncio.run(run())
