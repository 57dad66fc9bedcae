"""Split views of followed sources (``node/app/follow.py``, ``docs/follow.md``): one record per
(source, fork) with a counter and the last time seen, and a source that names two heads that do
not descend one from the other within one poll is recorded too. Fakes for the source, the pull
and gossip; an injected clock; no sleeping, no network."""

from __future__ import annotations

import asyncio
import datetime as dt
import sqlite3
from pathlib import Path
from typing import Any, cast

from coordinator.identity import DatasetId, generate_private_key
from coordinator.metadata import encode_block
from coordinator.metadata import model as m
from coordinator.multiformats import Multihash
from coordinator.storage.repository import DatasetRepository
from node.adapters.state import InlineState
from node.app.datasets import CommitLocks, DatasetUseCases
from node.app.fetch import PullDiverged
from node.app.follow import FollowSettings, SourceFollower, _Source
from node.app.metrics import NodeMetrics
from node.app.ports import HeadProbe, StatePort
from node.state import NodeState
from node.state.migrations import LATEST_VERSION, migrate

S = 1_000_000_000
T0 = int(dt.datetime(2050, 1, 1, tzinfo=dt.UTC).timestamp()) * S
URL = "http://source.example/ds"
ROOT = """\
kind: DatasetSnapshot
version: 1
content:
  name: a
  kind: Root
  metadata:
    - kind: SetInfo
      description: a
"""


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


class Source:
    """``refs/head`` answers from ``heads`` in turn; blocks are served from ``blocks``."""

    def __init__(self) -> None:
        self.heads: list[Multihash] = []
        self.blocks: dict[Multihash, bytes] = {}
        self.probes = 0
        self.reads = 0

    async def probe_head(self, url: str, etag: str | None, last_modified: str | None) -> HeadProbe:
        head = self.heads[self.probes % len(self.heads)]
        self.probes += 1
        return HeadProbe(True, head.to_multibase())

    async def read_block(self, url: str, block: Multihash) -> bytes:
        self.reads += 1
        return self.blocks[block]


class Pull:
    """The pull: diverged (``diverged``) or finding the local copy equal to what it read, or
    committing ``then`` (a block the source moved on to) first."""

    def __init__(self, repo: DatasetRepository, did: str) -> None:
        self.repo = repo
        self.did = did
        self.diverged = False
        self.then: m.MetadataBlock | None = None

    async def pull(self, url: str, *, alias: str | None, force: bool = False) -> dict[str, Any]:
        if self.diverged:
            raise PullDiverged("the source's chain does not descend from the local head")
        if self.then is not None:
            self.repo.open(self.did).append(self.then)
            self.then = None
            return {"id": self.did, "comparison": "local-behind"}
        return {"id": self.did, "comparison": "equal"}


class Gossip:
    def __init__(self) -> None:
        self.published = 0

    async def publish(self, did: DatasetId, envelope: bytes) -> None:
        self.published += 1

    def source_head_accepted(self, did: DatasetId, url: str, head: Multihash) -> None:
        pass


class Events:
    def publish(self, kind: str, data: dict[str, Any]) -> None:
        pass


class World:
    """A local chain ``… -> base -> ours`` and a fork ``base -> theirs`` the source shows."""

    def __init__(self, tmp: Path) -> None:
        self.clock = Clock()
        self.repo = DatasetRepository(
            tmp / "datasets", tmp / "keys", clock=lambda: m.Timestamp(self.clock.now), durable=False
        )
        self.sync = NodeState.in_memory(self.clock)
        self.state = cast(StatePort, InlineState(self.sync))
        datasets = DatasetUseCases(self.repo, cast(Any, lambda: None), state=self.state)
        (created,) = asyncio.run(datasets.create(ROOT))
        self.did = DatasetId.parse(str(created.id))
        ds = self.repo.open(self.did.as_did_str())
        st = ds.state()
        assert st.head is not None
        self.base, self.base_seq = st.head, st.sequence_number
        self.ours = ds.append(self.block("ours", self.base, self.base_seq + 1))
        theirs_block = self.block("theirs", self.base, self.base_seq + 1)
        self.source = Source()
        self.theirs = Multihash.sha3_256(encode_block(theirs_block))
        self.source.blocks[self.theirs] = encode_block(theirs_block)
        self.source.blocks[self.ours] = encode_block(ds.get_block(self.ours))
        self.pull = Pull(self.repo, self.did.as_did_str())
        self.gossip = Gossip()
        self.follower = SourceFollower(
            self.repo,
            self.state,
            cast(Any, self.pull),
            cast(Any, self.source),
            cast(Any, self.gossip),
            CommitLocks(),
            NodeMetrics(),
            cast(Any, Events()),
            self.clock,
            generate_private_key(b"\x02" * 32),
            self._accept,
            settings=FollowSettings(),
            rng=lambda: 0.5,
            monotonic=lambda: self.clock.now / S,
        )
        src = _Source(self.did, URL, "a", head=self.ours, sequence=self.base_seq + 1)
        self.follower._by_did[self.did] = src

    async def _accept(self, did: DatasetId, head: Multihash, seq: int) -> None:
        pass

    def block(self, text: str, prev: Multihash, seq: int) -> m.MetadataBlock:
        return m.MetadataBlock(
            system_time=m.Timestamp(self.clock.now),
            prev_block_hash=prev,
            sequence_number=seq,
            event=m.SetInfo(description=text),
        )

    def poll(self, times: int) -> None:
        for _ in range(times):
            self.clock.now += 2 * S  # a poll every 2 s: each one's observations are new
            asyncio.run(self.follower.poll(self.did))


def test_a_source_that_stays_diverged_is_one_split_view_counted_per_poll(tmp_path: Path) -> None:
    w = World(tmp_path)
    w.source.heads = [w.theirs]
    w.pull.diverged = True
    w.poll(10)
    (sv,) = w.sync.split_views()
    assert sv.seen == 10 and sv.last_seen_ns == w.clock.now > sv.detected_ns
    assert {sv.first.head, sv.second.head} == {w.ours.to_multibase(), w.theirs.to_multibase()}
    # Our observations are signed once, not once per poll.
    assert len(w.sync.observations(w.did.as_did_str())) == 2
    assert len([e for e in w.sync.events(kind="source.split_view")]) == 1


def test_a_source_naming_two_forks_within_one_poll_is_recorded(tmp_path: Path) -> None:
    """refs/head names the other fork while the pull (reading refs/head again) gets ours: the
    pull finds nothing new, and the split was never recorded."""
    w = World(tmp_path)
    w.source.heads = [w.theirs]
    w.pull.diverged = False  # the pull read our head this time
    w.poll(3)
    (sv,) = w.sync.split_views()
    assert sv.seen == 3
    assert {sv.first.head, sv.second.head} == {w.ours.to_multibase(), w.theirs.to_multibase()}
    assert "in one poll" in sv.detail
    assert w.source.reads == 1  # the two heads' relation judged once, not walked every poll
    # Seen by the other path too (the pull diverges now): still the same record.
    w.pull.diverged = True
    w.poll(1)
    (sv,) = w.sync.split_views()
    assert sv.seen == 4


def test_a_source_that_moved_on_between_probe_and_pull_is_no_split_view(tmp_path: Path) -> None:
    w = World(tmp_path)
    # refs/head named an older head (a lagging cache) and the pull got a newer one, a
    # descendant of it: two heads in one poll, but one history.
    nxt = w.block("next", w.ours, w.base_seq + 2)
    w.source.heads = [w.base]
    w.source.blocks[w.base] = encode_block(w.repo.open(w.did.as_did_str()).get_block(w.base))
    w.pull.then = nxt
    w.poll(1)
    assert w.sync.split_views() == []


def test_migration_merges_the_split_views_of_one_fork(tmp_path: Path) -> None:
    """A node that recorded a new split view on every poll keeps one per fork after the
    upgrade: the oldest row's evidence, the count, the latest time."""
    conn = sqlite3.connect(tmp_path / "state.db", isolation_level=None)
    migrate(conn, target=9)
    did = "did:odf:fed01" + "aa" * 32
    for i, head in enumerate(("h-ours", "h-theirs", "h-theirs", "h-theirs", "h-other")):
        conn.execute(
            "INSERT INTO observations (content_id, did, source, head, sequence, signer, "
            "envelope, own, observed_ns, received_ns) VALUES (?, ?, ?, ?, 1, 's', x'00', 1, 0, 0)",
            (f"c{i}", did, URL, head),
        )
    for i, (a, b) in enumerate((("c0", "c1"), ("c0", "c2"), ("c0", "c3"), ("c0", "c4"))):
        conn.execute(
            "INSERT INTO split_views (did, source, first, second, detail, detected_ns) "
            "VALUES (?, ?, ?, ?, 'x', ?)",
            (did, URL, a, b, 100 + i),
        )
    assert migrate(conn) == LATEST_VERSION
    got = conn.execute(
        "SELECT id, fork, seen, detected_ns, last_seen_ns FROM split_views ORDER BY id"
    ).fetchall()
    assert got == [
        (1, "h-ours h-theirs", 3, 100, 102),
        (4, "h-other h-ours", 1, 103, 103),
    ]
    conn.close()
