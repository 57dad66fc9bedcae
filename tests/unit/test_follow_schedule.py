"""The source follower's schedule in virtual time (``node/app/follow.py``): one heap of due
times, jittered intervals, coalesced "poll now", backoff after errors. No real sleeping."""

from __future__ import annotations

from typing import Any, cast

from coordinator.identity import generate_private_key
from node.app.follow import FollowSettings, SourceFollower, _Source, normalise_source

DID = generate_private_key(b"\x01" * 32).dataset_id()
OTHER = generate_private_key(b"\x04" * 32).dataset_id()
URL = "http://127.0.0.1:8090/ds"


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def follower(clock: Clock, **settings: Any) -> SourceFollower:
    none = cast(Any, None)
    f = SourceFollower(
        none,
        none,
        none,
        none,
        none,
        none,
        none,
        none,
        lambda: 0,
        generate_private_key(b"\x02" * 32),
        none,
        settings=FollowSettings(**settings),
        rng=lambda: 0.5,
        monotonic=clock,
    )
    for did in (DID, OTHER):
        src = _Source(did, URL, None)
        f._by_did[did] = src
        f._schedule(src, clock() + 10)
    return f


def test_due_sources_pop_in_time_order_and_only_when_due() -> None:
    clock = Clock()
    f = follower(clock)
    assert f.due_now() == []
    assert f.next_due() == 1010.0
    clock.t = 1010.0
    assert sorted(map(str, f.due_now())) == sorted(map(str, (DID, OTHER)))
    assert f.due_now() == []


def test_poll_now_moves_one_source_forward_and_respects_the_minimum_gap() -> None:
    clock = Clock()
    f = follower(clock, min_gap_s=2.0)
    f._by_did[DID].last_poll = clock.t - 0.5
    f.poll_now(DID, URL)
    assert f.next_due() == clock.t + 1.5  # 2 s after the last poll, not 10 s
    clock.t += 1.5
    assert f.due_now() == [DID]  # the stale entry at +10 s is skipped later
    clock.t += 10
    assert f.due_now() == [OTHER]


def test_poll_now_for_another_source_url_or_while_polling_does_not_reschedule() -> None:
    clock = Clock()
    f = follower(clock)
    f.poll_now(DID, "http://elsewhere.example/ds")
    assert f.next_due() == 1010.0
    f._by_did[DID].polling = True
    f.poll_now(DID, URL)
    assert f._by_did[DID].again  # one more poll once the running one ends


def test_only_an_earlier_due_time_wakes_the_sleeping_poll_loop() -> None:
    """A finished poll reschedules its source an interval ahead: that must not wake the loop
    (it sleeps until its own next due time); a poll asked for now must."""
    import asyncio

    clock = Clock()
    f = follower(clock)
    f._wake = asyncio.Event()
    f._wake_at = clock.t + 5  # the loop sleeps until the next due time, 5 s from now
    src = f._by_did[DID]
    src.last_poll = clock.t - 100
    f._schedule(src, clock.t + 300)  # a poll ended: its next one is one interval ahead
    assert not f._wake.is_set()
    f.poll_now(DID, URL)  # a peer's observation: poll now
    assert f._wake.is_set()
    assert f.due_now() == [DID]


def test_interval_is_jittered_and_backs_off_up_to_the_cap() -> None:
    clock = Clock()
    f = follower(clock, poll_interval_s=300.0, jitter=0.1, backoff_max_s=1000.0)
    assert f._interval() == 300.0  # rng 0.5: the middle of [270, 330]
    assert f._interval(1) == 600.0
    assert f._interval(5) == 1000.0
    f2 = follower(clock, poll_interval_s=300.0, jitter=0.1)
    f2._rng = lambda: 0.0
    assert f2._interval() == 270.0


def test_source_urls_are_normalised_or_refused() -> None:
    assert normalise_source("http://h/ds/") == "http://h/ds"
    assert normalise_source("ipns://k51q") == "ipns://k51q"
    assert normalise_source("/data/ds") == "/data/ds"
    import pytest

    from node.app.errors import InvalidArgument

    with pytest.raises(InvalidArgument):
        normalise_source("ftp://h/ds")
