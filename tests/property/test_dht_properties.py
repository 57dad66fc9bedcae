"""Properties of a DHT lookup (``p2p/dht/lookup.py``) whatever the peers answer and when: it
never has more than ``max_in_flight`` queries out nor more than ``alpha`` fresh ones, never asks
a peer twice, and always ends."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from p2p.dht import Lookup, LookupConfig, Query, key_of
from p2p.dht.keys import DhtKey

S = 1_000_000_000


def _peer(i: int) -> tuple[str, DhtKey]:
    name = f"p{i}"
    return name, key_of(name.encode())


@settings(max_examples=200, deadline=None)
@given(
    seeds=st.lists(st.integers(0, 300), max_size=25, unique=True),
    script=st.lists(
        st.tuples(
            st.sampled_from(["answer", "fail", "wait"]),
            st.lists(st.integers(0, 300), max_size=25),
            st.integers(0, 3 * S),
        ),
        max_size=120,
    ),
)
def test_a_lookup_is_bounded_and_ends(
    seeds: list[int], script: list[tuple[str, list[int], int]]
) -> None:
    cfg = LookupConfig()
    lookup = Lookup(key_of(b"target"), [_peer(i) for i in seeds], cfg)
    now = 0
    out: list[tuple[int, Query]] = [(now, q) for q in lookup.start(now)]
    asked: set[str] = {q.peer for _, q in out}
    for action, closer, dt in script:
        if lookup.done:
            break
        now += dt
        sent: list[Query]
        if action == "wait" or not out:
            sent = lookup.poll(now)
        else:
            _, q = out.pop(0)
            if action == "answer":
                sent = lookup.on_response(q.peer, [_peer(i) for i in closer], [], now)
            else:
                sent = lookup.on_failure(q.peer, now)
        for q in sent:
            assert q.peer not in asked, "asked twice"
            asked.add(q.peer)
        out += [(now, q) for q in sent]
        # What the lookup itself counts as in flight: answered or failed ones left ``out``
        # only through the calls above; timed-out ones are dropped here as the lookup drops them.
        out = [(t, q) for t, q in out if now - t < cfg.query_timeout_ns]
        assert len(out) <= cfg.max_in_flight
        assert sum(now - t < cfg.slow_after_ns for t, _ in out) <= cfg.alpha
    # Whatever happened, a lookup whose peers all time out ends.
    lookup.poll(now + cfg.query_timeout_ns)
    while not lookup.done:
        now += cfg.query_timeout_ns
        lookup.poll(now)
        assert now < 10_000 * S
