"""Two followers of one source shown different forks (``node/app/follow.py``, ``docs/follow.md``
"Two followers shown different heads"): each accepts the fork it was shown, and the other's
signed observation makes it record the split view -- also after strangers' observations of the
same source were stored in between. Fakes for the source, the pull and gossip (from
test_follow_split_views); an injected clock; no network."""

from __future__ import annotations

import asyncio
from pathlib import Path

from coordinator.identity import generate_private_key
from coordinator.multiformats import Multihash
from p2p.wire import FetchLocations, Observation, sign_message
from tests.unit.test_follow_split_views import URL, World


def _observation(w: World, seed: int, head: Multihash, seq: int) -> tuple[object, Observation]:
    key = generate_private_key(bytes([seed]) * 32)
    obs = Observation(
        node=key.dataset_id(),
        dataset=w.did,
        source=URL,
        head=head,
        sequence=seq,
        locations=FetchLocations((), ()),
        issued_at_ns=w.clock.now,
    )
    return sign_message(obs, key), obs


def _first_poll(w: World) -> None:
    # The follower had accepted "base"; its pull from the source brought "ours": it observes
    # (signs and gossips) and accepts it.
    src = w.follower._by_did[w.did]
    src.head, src.sequence = w.base, w.base_seq
    asyncio.run(w.follower._accepted(src, w.ours))


def test_the_other_followers_fork_is_a_split_view(tmp_path: Path) -> None:
    w = World(tmp_path)
    _first_poll(w)
    sm, obs = _observation(w, 7, w.theirs, w.base_seq + 1)  # the second follower's view
    asyncio.run(w.follower.observed(sm, obs))  # type: ignore[arg-type]
    (sv,) = w.sync.split_views()
    assert {sv.first.head, sv.second.head} == {w.ours.to_multibase(), w.theirs.to_multibase()}
    # The same fork gossiped again (another follower shown it) is the same record.
    sm2, obs2 = _observation(w, 8, w.theirs, w.base_seq + 1)
    asyncio.run(w.follower.observed(sm2, obs2))  # type: ignore[arg-type]
    (sv,) = w.sync.split_views()
    assert sv.seen == 2


def test_strangers_observations_do_not_hide_the_followers_own(tmp_path: Path) -> None:
    """Before: the node looked for its own observation of its head among the newest 50 of the
    source; 60 observations by fresh keys (of the very head it holds) pushed it out, and the
    second follower's fork was then never compared."""
    w = World(tmp_path)
    _first_poll(w)
    for i in range(60):
        w.clock.now += 1
        sm, obs = _observation(w, 100 + i, w.ours, w.base_seq + 1)
        asyncio.run(w.follower.observed(sm, obs))  # type: ignore[arg-type]
    assert not w.sync.split_views()
    sm, obs = _observation(w, 7, w.theirs, w.base_seq + 1)
    asyncio.run(w.follower.observed(sm, obs))  # type: ignore[arg-type]
    (sv,) = w.sync.split_views()
    assert {sv.first.head, sv.second.head} == {w.ours.to_multibase(), w.theirs.to_multibase()}
    # The follower's own observation was found, not signed (and gossiped) again.
    own = [o for o in w.sync.observations(w.did.as_did_str(), limit=1000) if o.own]
    assert len(own) == 1


def _longer_fork(w: World) -> tuple[Multihash, int]:
    """The second follower's fork, one block longer than ours: ``base -> theirs -> theirs2``."""
    from coordinator.metadata import encode_block

    block = w.block("theirs2", w.theirs, w.base_seq + 2)
    head = Multihash.sha3_256(encode_block(block))
    w.source.blocks[head] = encode_block(block)
    return head, w.base_seq + 2


def test_a_longer_fork_is_read_from_the_source_and_recorded(tmp_path: Path) -> None:
    w = World(tmp_path)
    _first_poll(w)
    head, seq = _longer_fork(w)
    sm, obs = _observation(w, 7, head, seq)
    asyncio.run(w.follower.observed(sm, obs))  # type: ignore[arg-type]
    (sv,) = w.sync.split_views()
    assert {sv.first.head, sv.second.head} == {w.ours.to_multibase(), head.to_multibase()}
    assert w.source.reads == 2  # theirs2, then theirs: down to our sequence number


def test_a_longer_fork_served_nowhere_is_not_recorded(tmp_path: Path) -> None:
    # The source serves this follower only its own chain, and the other follower names no
    # HTTP location: the relation is unknown, and nothing is recorded (docs/follow.md).
    w = World(tmp_path)
    _first_poll(w)
    head, seq = _longer_fork(w)
    del w.source.blocks[head]
    sm, obs = _observation(w, 7, head, seq)
    asyncio.run(w.follower.observed(sm, obs))  # type: ignore[arg-type]
    assert not w.sync.split_views()
