"""Rule 8 of the sans-IO core: datasets followed from a source URL (``docs/follow.md``).

A peer's observation of a followed source showing another head makes the core ask for a poll;
a head the driver accepted from a source is judged like an announced head when its verification
completes.
"""

from __future__ import annotations

import random

from coordinator.identity import generate_private_key
from coordinator.multiformats import Multihash
from p2p.core import (
    NS_PER_S,
    Accept,
    CoreConfig,
    Forward,
    Ignore,
    MessageReceived,
    PollSource,
    ProtocolCore,
    PublishAttestation,
    PublishDispute,
    SourceHeadAccepted,
    VerificationCompleted,
)
from p2p.wire import FetchLocations, Observation, sign_message

T0 = 1_800_000_000 * NS_PER_S
OWNER = generate_private_key(b"\x01" * 32)
PEER_NODE = generate_private_key(b"\x02" * 32)
DID = OWNER.dataset_id()
SOURCE = "http://127.0.0.1:8090/ds"


def h(label: str) -> Multihash:
    return Multihash.sha3_256(label.encode())


def observed(head: str, *, source: str = SOURCE, at: int = T0) -> bytes:
    o = Observation(
        node=PEER_NODE.dataset_id(),
        dataset=DID,
        source=source,
        head=h(head),
        sequence=3,
        locations=FetchLocations(),
        issued_at_ns=at,
    )
    return sign_message(o, PEER_NODE).envelope


def core() -> ProtocolCore:
    c = ProtocolCore(CoreConfig(), random.Random(1))
    c.follow_source(DID, SOURCE)
    return c


def test_observation_of_a_followed_source_with_a_new_head_asks_for_a_poll() -> None:
    c = core()
    out = c.handle(MessageReceived("p1", observed("b"), T0))
    assert [type(d) for d in out] == [Accept, Forward, PollSource]
    poll = out[2]
    assert isinstance(poll, PollSource)
    assert (poll.dataset, poll.source, poll.head, poll.peer) == (DID, SOURCE, h("b"), "p1")


def test_observation_of_the_head_already_accepted_from_the_source_asks_nothing() -> None:
    c = core()
    c.handle(SourceHeadAccepted(DID, SOURCE, h("b"), T0))
    out = c.handle(MessageReceived("p1", observed("b"), T0))
    assert not any(isinstance(d, PollSource) for d in out)
    assert any(isinstance(d, Forward) for d in out)  # still gossiped on: others may need it


def test_observation_of_another_source_or_dataset_is_only_forwarded() -> None:
    c = core()
    out = c.handle(MessageReceived("p1", observed("b", source="https://other.example/ds"), T0))
    assert [type(d) for d in out] == [Accept, Forward]
    c.unfollow_source(DID, SOURCE)
    out = c.handle(MessageReceived("p2", observed("c"), T0))
    assert [type(d) for d in out] == [Accept, Forward]


def test_a_replayed_observation_is_a_duplicate_not_a_second_poll() -> None:
    c = core()
    env = observed("b")
    c.handle(MessageReceived("p1", env, T0))
    out = c.handle(MessageReceived("p2", env, T0 + 1))
    assert out == [Ignore("p2", "duplicate")]


def test_verification_of_a_source_head_is_attested_or_disputed() -> None:
    c = core()
    # Not accepted from the source yet: nothing to publish.
    assert c.handle(VerificationCompleted(DID, h("a"), True, T0)) == []
    c.handle(SourceHeadAccepted(DID, SOURCE, h("a"), T0))
    assert c.handle(VerificationCompleted(DID, h("a"), True, T0)) == [
        PublishAttestation(DID, h("a"))
    ]
    assert c.handle(VerificationCompleted(DID, h("a"), False, T0)) == [PublishDispute(DID, h("a"))]
    # A newer head accepted from the source supersedes it: the old verdict is not published.
    c.handle(SourceHeadAccepted(DID, SOURCE, h("b"), T0))
    assert c.handle(VerificationCompleted(DID, h("a"), True, T0)) == []


def test_source_head_of_an_unfollowed_source_is_ignored() -> None:
    c = core()
    c.handle(SourceHeadAccepted(DID, "https://other.example/ds", h("a"), T0))
    assert c.handle(VerificationCompleted(DID, h("a"), True, T0)) == []


def test_restart_restores_the_newest_source_head() -> None:
    c = ProtocolCore(CoreConfig(), random.Random(1))
    c.follow_source(DID, SOURCE, h("a"))
    c.follow_source(DID, SOURCE)  # a second follow keeps what is known
    out = c.handle(MessageReceived("p1", observed("a"), T0))
    assert not any(isinstance(d, PollSource) for d in out)
