"""The Simple Transfer Protocol over libp2p streams (node/transfer/streams.py): a pull through
``libp2p://peer/dataset`` against the serving side in-process, and what the server refuses."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from coordinator.metadata.timestamp import Timestamp
from coordinator.storage.repository import DatasetRepository
from node.transfer.errors import InvalidSourceUrl, SourceUnavailable
from node.transfer.pull import PullOptions, pull_url
from node.transfer.streams import MAX_CHUNK, PROTOCOL, StreamSource, serve
from node.transfer.testing import build_dataset

FAST = PullOptions(attempts=2, backoff_s=0.0, backoff_max_s=0.0, durable=False)


def _repo(path: Path) -> DatasetRepository:
    return DatasetRepository(
        path / "datasets",
        path / "keys",
        clock=lambda: Timestamp.parse("2024-06-01T00:00:00Z"),
        durable=False,
    )


@pytest.fixture
def served(tmp_path: Path) -> tuple[DatasetRepository, str, str]:
    """A repository holding one dataset whose data parts span several chunks."""
    ds = build_dataset(tmp_path / "build", 2, MAX_CHUNK + 100_000)
    did = ds.state().dataset_id
    head = ds.head()
    assert did is not None and head is not None
    repo = _repo(tmp_path / "src")
    repo.root.mkdir(parents=True, exist_ok=True)
    (tmp_path / "build").rename(repo.root / did.as_multibase())
    return repo, did.as_did_str(), str(head)


def _ask(repo: DatasetRepository, **req: object) -> tuple[dict[str, object], bytes]:
    raw = serve(repo, None, json.dumps(req).encode())
    header, _, body = raw.partition(b"\n")
    return json.loads(header), body


def test_a_pull_over_streams_verifies_every_byte(
    tmp_path: Path, served: tuple[DatasetRepository, str, str]
) -> None:
    repo, did, head = served
    asked: list[str] = []

    async def request(peer: str, protocol: str, data: bytes, timeout_s: float) -> bytes:
        assert peer == "12D3KooWOwner" and protocol == PROTOCOL
        asked.append(json.loads(data)["path"])
        return serve(repo, None, data)

    dst = _repo(tmp_path / "dst")
    result = asyncio.run(
        pull_url(
            dst,
            f"libp2p://12D3KooWOwner/{did}",
            alias="copy",
            options=FAST,
            p2p_request=request,
        )
    )
    assert str(result.new_head) == head and result.objects_downloaded >= 2
    # A part larger than one response came in several requests.
    assert len([p for p in asked if p.startswith("data/")]) > result.objects_downloaded


def test_the_server_serves_only_object_paths(served: tuple[DatasetRepository, str, str]) -> None:
    repo, did, head = served
    meta, body = _ask(repo, dataset=did, path="refs/head", offset=0, length=MAX_CHUNK)
    assert body.decode() == head and meta["size"] == len(head)
    for path in ("info/alias", "blocks/../refs/head", "blocks/zzz", "data", "../keys"):
        meta, _ = _ask(repo, dataset=did, path=path, offset=0, length=10)
        assert meta["error"] == "not-found", path
    meta, _ = _ask(repo, dataset="did:odf:fed01" + "ab" * 32, path="refs/head", offset=0, length=1)
    assert meta["error"] == "not-found"
    meta, _ = _ask(repo, dataset=did, path="refs/head", offset=0, length=MAX_CHUNK + 1)
    assert meta["error"] == "bad-request"
    assert json.loads(serve(repo, None, b"\xff").partition(b"\n")[0])["error"] == "bad-request"


def test_the_served_head_follows_trust(served: tuple[DatasetRepository, str, str]) -> None:
    repo, did, _ = served
    untrusted = serve(
        repo,
        lambda d: "",
        json.dumps({"dataset": did, "path": "refs/head", "offset": 0, "length": 100}).encode(),
    )
    assert json.loads(untrusted.partition(b"\n")[0])["error"] == "not-found"
    older = serve(
        repo,
        lambda d: "zOlder",
        json.dumps({"dataset": did, "path": "refs/head", "offset": 0, "length": 100}).encode(),
    )
    assert older.partition(b"\n")[2] == b"zOlder"


def test_a_stream_source_needs_a_peer_and_a_dataset() -> None:
    async def request(peer: str, protocol: str, data: bytes, timeout_s: float) -> bytes:
        raise AssertionError("not called")

    for url in ("libp2p://", "libp2p://peer", "libp2p://peer/a/b"):
        with pytest.raises(InvalidSourceUrl):
            StreamSource(url, request)


def test_a_pull_walks_from_the_requested_head_not_the_peers(
    tmp_path: Path, served: tuple[DatasetRepository, str, str]
) -> None:
    """``?head=``: exactly the announced head (here an older one of the peer's chain); a head
    whose blocks the peer lacks is "not found", never another chain."""
    repo, did, head = served
    blocks = [str(h) for h, _ in repo.open(did).iter_blocks(verify=False)]
    assert blocks[0] == head
    older = blocks[1]

    async def request(peer: str, protocol: str, data: bytes, timeout_s: float) -> bytes:
        assert json.loads(data)["path"] != "refs/head"  # the head comes from the URL
        return serve(repo, None, data)

    result = asyncio.run(
        pull_url(
            _repo(tmp_path / "dst"),
            f"libp2p://12D3KooWOwner/{did}?head={older}",
            alias="copy",
            options=FAST,
            p2p_request=request,
        )
    )
    assert str(result.new_head) == older
    with pytest.raises(InvalidSourceUrl):
        StreamSource(f"libp2p://p/{did}?head=not-a-hash", request)
    with pytest.raises(SourceUnavailable, match="not found"):
        asyncio.run(
            pull_url(
                _repo(tmp_path / "dst2"),
                f"libp2p://12D3KooWOwner/{did}?head={blocks[0][:-4]}abcd",
                alias="copy",
                options=FAST,
                p2p_request=request,
            )
        )
