"""The console's datasets read model: one row per stored or followed dataset, always current."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import cast

from factories import T0

from coordinator.identity import generate_private_key
from coordinator.metadata import model as m
from coordinator.metadata.snapshot import DatasetSnapshot
from coordinator.storage.repository import DatasetRepository
from node.adapters.state import InlineState
from node.app.console import ConsoleQueries
from node.app.metrics import NodeMetrics
from node.app.ports import GossipPort, StatePort
from node.state import NodeState

ROOT = DatasetSnapshot(
    name="root",
    kind=m.DatasetKind.ROOT,
    metadata=(m.SetInfo(description="d"),),
)


def _queries(tmp_path: Path) -> tuple[DatasetRepository, NodeState, ConsoleQueries]:
    repo = DatasetRepository(
        tmp_path / "datasets",
        tmp_path / "keys",
        clock=lambda: T0,
        key_source=lambda: generate_private_key(b"\x01" * 32),
        durable=False,
    )
    state = NodeState.in_memory(lambda: 1)
    queries = ConsoleQueries(
        repo,
        cast(StatePort, InlineState(state)),
        cast(GossipPort, None),  # the datasets page does not ask the gossip layer
        NodeMetrics(),
    )
    return repo, state, queries


def test_rows_follow_new_heads_renames_and_subscriptions(tmp_path: Path) -> None:
    repo, state, q = _queries(tmp_path)
    created = repo.create_from_snapshot(ROOT)
    did = created.id.as_did_str()
    ds = repo.open("root")
    [row] = asyncio.run(q.datasets())
    assert row["id"] == did and row["alias"] == "root" and row["owned"]
    assert row["head"] == str(ds.head()) and row["blocks"] == 2 and not row["followed"]

    # A block appended by another Dataset object (as a pull or the CLI would) and a rename:
    # the next read shows both, although the previous read remembered the old head's state.
    prev = ds.state()
    assert prev.head is not None
    new_head = ds.append(
        m.MetadataBlock(
            system_time=T0,
            prev_block_hash=prev.head,
            sequence_number=prev.sequence_number + 1,
            event=m.SetInfo(description="e"),
        )
    )
    repo.rename("root", "renamed")
    [row] = asyncio.run(q.datasets())
    assert row["alias"] == "renamed" and row["head"] == str(new_head) and row["blocks"] == 3

    # Followed and verified: from the state, in the same row.
    state.subscribe(did, "renamed", "test")
    state.record_accepted_head(did, 0, 2, str(new_head), None, b"x")
    state.record_verification(did, str(new_head), "verified", "", 0.1)
    [row] = asyncio.run(q.datasets())
    assert row["followed"] and row["accepted_head"] == str(new_head)
    assert row["verification"] == "verified"


def test_a_broken_head_ref_is_a_row_with_an_error(tmp_path: Path) -> None:
    repo, _, q = _queries(tmp_path)
    created = repo.create_from_snapshot(ROOT)
    asyncio.run(q.datasets())
    (created.root / "refs" / "head").write_text("not-a-hash")
    [row] = asyncio.run(q.datasets())
    assert row["alias"] == "root" and row["head"] is None and row["error"]


def test_disputes_list_a_split_view_with_both_signed_observations(tmp_path: Path) -> None:
    """A split view found among observations of a source (``docs/follow.md``) is a row of the
    console's disputes, ``kind`` ``split-view``, holding both signed observations: heads,
    sequences, signers, which one is ours, and the envelopes that verify."""
    from coordinator.multiformats import Multihash
    from p2p.wire import FetchLocations, Observation, decode, sign_message

    _, state, q = _queries(tmp_path)
    dataset = generate_private_key(b"\x02" * 32).dataset_id()
    ours, theirs = generate_private_key(b"\x03" * 32), generate_private_key(b"\x04" * 32)
    source = "http://127.0.0.1:8090/cities"
    stored = []
    for key, head, at in ((ours, b"a", 10), (theirs, b"b", 20)):
        obs = Observation(
            node=key.dataset_id(),
            dataset=dataset,
            source=source,
            head=Multihash.sha3_256(head),
            sequence=3,
            locations=FetchLocations((), ()),
            issued_at_ns=at,
        )
        env = sign_message(obs, key).envelope
        did, mb, signer = dataset.as_did_str(), obs.head.to_multibase(), obs.node.as_did_key()
        assert state.add_observation(did, source, mb, 3, signer, env, key is ours, at)
        stored.append((mb, signer, env))
    [a, b] = state.observations(dataset.as_did_str(), source)
    assert state.add_split_view(dataset.as_did_str(), source, a.content_id, b.content_id, "why")

    rows = asyncio.run(q.disputes(dataset.as_did_str()))
    [row] = rows
    assert row["kind"] == "split-view" and row["source"] == source and row["detail"] == "why"
    assert row["signer"] == ours.dataset_id().as_did_key() and row["own"]
    by_head = {o["head"]: o for o in row["observations"]}
    assert set(by_head) == {mb for mb, _, _ in stored}
    for mb, signer, env in stored:
        o = by_head[mb]
        assert o["signer"] == signer and o["sequence"] == 3
        assert o["own"] == (signer == ours.dataset_id().as_did_key())
        assert o["envelope"] == env.hex()
        msg = decode(bytes.fromhex(o["envelope"]))  # verifies the signature
        assert msg.message.head.to_multibase() == mb  # type: ignore[union-attr]
    # Another dataset's disputes do not show it; all disputes do.
    other = generate_private_key(b"\x05" * 32).dataset_id()
    assert asyncio.run(q.disputes(other.as_did_str())) == []
    assert [r["kind"] for r in asyncio.run(q.disputes())] == ["split-view"]
