"""Pulls say why they wait (node/app/fetch.py, node/daemon/reachability.py): every failed
source is a ``pull.source_failed`` event with a reason and the setting that would help, shown
in ``subscriptions``; a source that says nothing is given up after ``first_contact_s``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from coordinator.identity.keys import generate_private_key
from coordinator.metadata.timestamp import Timestamp
from coordinator.multiformats import Multihash
from coordinator.storage.repository import DatasetRepository
from node.app.datasets import CommitLocks
from node.app.errors import RetryLater
from node.app.fetch import (
    ChainFetcher,
    IpfsHint,
    PullRefused,
    PullRejected,
    PullTooSlow,
    PullUnreachable,
    pull_attempts,
)
from node.app.metrics import NodeMetrics
from node.app.rows import EventRecord
from node.daemon.reachability import ipfs_hints, start_warnings, withheld_ipfs
from node.transfer.errors import SourceHeadUnreachable, SourceRefused, TransientSourceError
from node.transfer.policy import SourcePolicy
from node.transfer.pull import PullOptions, pull
from p2p.core import RequestFetch
from p2p.wire import FetchLocations


def _repo(path: Path) -> DatasetRepository:
    return DatasetRepository(
        path / "datasets",
        path / "keys",
        clock=lambda: Timestamp.parse("2024-06-01T00:00:00Z"),
        durable=False,
    )


DID = generate_private_key(bytes([3]) * 32).dataset_id()
HEAD = Multihash.sha3_256(b"head")
OWNER_IPFS = "/ip4/127.0.0.1/tcp/4003/p2p/12D3KooWOwner"


class _State:
    def __init__(self) -> None:
        self.events: list[tuple[str, str | None, dict[str, Any]]] = []

    async def subscription(self, did: str) -> None:
        return None

    async def log_event(self, kind: str, did: str | None, data: dict[str, Any]) -> int:
        self.events.append((kind, did, data))
        return len(self.events)


class _Transfer:
    """Fails each URL with the error ``errors`` maps it to."""

    def __init__(self, errors: dict[str, Exception]) -> None:
        self.errors = errors
        self.tried: list[str] = []

    async def pull(self, url: str, *, alias: str | None, force: bool = False) -> dict[str, Any]:
        self.tried.append(url)
        raise self.errors[url]


def _fetcher(
    tmp_path: Path,
    transfer: _Transfer,
    state: _State,
    clock: Callable[[], float],
    hints: list[IpfsHint] | None = None,
) -> ChainFetcher:
    return ChainFetcher(
        _repo(tmp_path),
        state,  # type: ignore[arg-type]
        transfer,  # type: ignore[arg-type]
        CommitLocks(),
        NodeMetrics(),
        ipfs_enabled=lambda: True,
        ipfs_hints=(lambda did: hints or []),
        clock=clock,
    )


def _request(*http: str) -> RequestFetch:
    return RequestFetch(
        DID, HEAD, 1, 0, None, FetchLocations(ipfs_cids=("bafyroot",), http_urls=http)
    )


HTTP = "http://10.77.0.11:7374/did:odf:x"


def test_every_failed_source_is_named_with_its_reason_and_setting(tmp_path: Path) -> None:
    with pytest.raises(SourceRefused) as refused:
        SourcePolicy.open().check_url(HTTP)  # what the transfer adapter turns into PullRefused
    policy_error = refused.value
    transfer = _Transfer(
        {
            "ipfs://bafyroot": PullUnreachable("refs/head: no answer from /ipfs/bafyroot in 20 s"),
            HTTP: PullRefused(str(policy_error), policy_error.setting),
        }
    )
    state = _State()
    hint = ipfs_hints([], [OWNER_IPFS])
    fetcher = _fetcher(tmp_path, transfer, state, lambda: 0.0, hint)
    with pytest.raises(RetryLater) as e:
        asyncio.run(fetcher(_request(HTTP)))
    # The provider's IPFS node is known unreachable: IPFS is tried last, after HTTP.
    assert transfer.tried == [HTTP, "ipfs://bafyroot"]
    assert "10.77.0.11" in str(e.value)
    failed = [d for k, _, d in state.events if k == "pull.source_failed"]
    assert [f["reason"] for f in failed] == ["refused", "unreachable"]
    http, ipfs = failed
    assert ipfs["addresses"] == [OWNER_IPFS]
    assert OWNER_IPFS in ipfs["error"] and "loopback" in ipfs["error"]
    assert ipfs["setting"] == "[ipfs] swarm_host (on the provider)"
    assert http["setting"] == "[transfer] allowed_source_networks"
    assert "allow_private_sources" in http["error"]
    # The documented pull.refused event is still logged.
    assert [k for k, _, _ in state.events].count("pull.refused") == 1


def test_connected_carriers_are_tried_over_streams_and_ipfs_waits_for_evidence(
    tmp_path: Path,
) -> None:
    def fetcher(hints: list[IpfsHint]) -> ChainFetcher:
        return ChainFetcher(
            _repo(tmp_path),
            _State(),  # type: ignore[arg-type]
            _Transfer({}),  # type: ignore[arg-type]
            CommitLocks(),
            NodeMetrics(),
            ipfs_enabled=lambda: True,
            ipfs_hints=lambda did: hints,
            stream_peers=lambda did: ["12D3KooWOwner"] if did == DID else [],
        )

    where = FetchLocations(ipfs_cids=("bafyroot",), http_urls=(HTTP,))
    stream = f"libp2p://12D3KooWOwner/{DID.as_did_str()}"
    assert fetcher([]).sources(where, DID) == ["ipfs://bafyroot", HTTP, stream]
    unreachable = [IpfsHint(OWNER_IPFS, "HTTP 500")]
    assert fetcher(unreachable).sources(where, DID) == [HTTP, stream, "ipfs://bafyroot"]
    assert fetcher([]).sources(where) == ["ipfs://bafyroot", HTTP]


def test_a_repeated_failure_is_logged_again_only_after_a_while(tmp_path: Path) -> None:
    now = [0.0]
    transfer = _Transfer(
        {
            "ipfs://bafyroot": PullTooSlow("data/x: slower than 16384 B/s"),
            HTTP: PullRejected("blocks/x: hash mismatch"),
        }
    )
    state = _State()
    fetcher = _fetcher(tmp_path, transfer, state, lambda: now[0])

    def attempt() -> list[str]:
        with pytest.raises(RetryLater):
            asyncio.run(fetcher(_request(HTTP)))
        return [d["reason"] for k, _, d in state.events if k == "pull.source_failed"]

    assert attempt() == ["too-slow", "bad-bytes"]
    now[0] = 10.0
    assert attempt() == ["too-slow", "bad-bytes"]  # the core retried: nothing new logged
    now[0] = 400.0
    assert attempt() == ["too-slow", "bad-bytes"] * 2
    slow = next(d for k, _, d in state.events if k == "pull.source_failed")
    assert "[transfer] min_rate_bytes_per_s" in slow["setting"]


def test_an_unreachable_ipfs_source_with_no_known_provider_says_so(tmp_path: Path) -> None:
    transfer = _Transfer({"ipfs://bafyroot": PullUnreachable("refs/head: no answer")})
    state = _State()
    with pytest.raises(RetryLater):
        asyncio.run(_fetcher(tmp_path, transfer, state, lambda: 0.0)(_request()))
    (failed,) = [d for k, _, d in state.events if k == "pull.source_failed"]
    assert failed["reason"] == "unreachable"
    assert "no provider's IPFS node is connected" in failed["error"]
    assert "setting" not in failed and "addresses" not in failed


def test_subscriptions_show_the_attempts_since_the_last_success() -> None:
    def ev(i: int, kind: str, did: str, **data: Any) -> EventRecord:
        return EventRecord(i, i * 10, kind, did, data)

    newest_first = [
        ev(6, "pull.source_failed", "a", url="http://x", reason="refused", error="e"),
        ev(5, "pull.source_failed", "a", url="ipfs://c", reason="unreachable", error="e"),
        ev(4, "pull.ok", "a", url="ipfs://b"),
        ev(3, "pull.source_failed", "a", url="ipfs://b", reason="unreachable", error="old"),
        ev(2, "pull.ok", "b", url="ipfs://d"),
        ev(1, "pull.refused", "c", url="http://y", error="e"),
    ]
    got = pull_attempts(newest_first)
    assert got["a"]["last_ok_ns"] == 40
    assert [(a["url"], a["reason"], a["at_ns"]) for a in got["a"]["attempts"]] == [
        ("http://x", "refused", 60),
        ("ipfs://c", "unreachable", 50),
    ]
    assert got["b"] == {"last_ok_ns": 20, "attempts": []}
    assert got["c"] == {"last_ok_ns": None, "attempts": []}


class _SilentSource:
    """A source whose refs/head never answers (an IPFS node with no connected provider)."""

    description = "/ipfs/bafysilent"

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    @asynccontextmanager
    async def open(self, rel: str) -> AsyncIterator[AsyncIterator[bytes]]:
        if self.fail:
            raise TransientSourceError("connection refused")
        await asyncio.Event().wait()
        yield self._never()  # pragma: no cover - never reached

    async def _never(self) -> AsyncIterator[bytes]:  # pragma: no cover
        yield b""

    async def list_names(self, rel_dir: str) -> None:
        return None

    async def export_blocks(self, max_bytes: int, on_block: Any = None) -> None:
        return None

    async def close(self) -> None:
        return None


def test_a_silent_source_is_given_up_after_first_contact_s(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    opts = PullOptions(first_contact_s=0.01)
    with pytest.raises(SourceHeadUnreachable, match="first_contact_s"):
        asyncio.run(pull(repo, _SilentSource(), "x", options=opts))  # type: ignore[arg-type]


def test_a_source_that_refuses_every_first_read_is_unreachable(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    opts = PullOptions(attempts=1)
    with pytest.raises(SourceHeadUnreachable, match="connection refused"):
        asyncio.run(pull(repo, _SilentSource(fail=True), "x", options=opts))  # type: ignore[arg-type]


def test_a_refusal_names_the_setting_that_would_allow_it() -> None:
    policy = SourcePolicy.open()
    with pytest.raises(SourceRefused) as e:
        policy.check_url("http://10.77.0.11:7374/x")
    assert e.value.setting == "[transfer] allowed_source_networks"
    with pytest.raises(SourceRefused) as e:
        SourcePolicy().check_url("http://10.77.0.11:7374/x")
    assert e.value.setting == "[network] isolation"
    with pytest.raises(SourceRefused) as e:
        policy.check_url("http://224.0.0.1/x")
    assert e.value.setting == ""  # no setting allows multicast


def test_start_warnings_name_loopback_listeners_in_open_mode() -> None:
    listening = ["/ip4/127.0.0.1/tcp/4003"]
    withheld = withheld_ipfs(listening, [])
    assert withheld == listening
    assert (
        withheld_ipfs([*listening, "/ip4/10.77.0.11/tcp/4003"], ["/ip4/10.77.0.11/tcp/4003"]) == []
    )
    warnings = start_warnings(
        open_mode=True,
        ipfs_mode="embedded",
        ipfs_advertised=[],
        ipfs_withheld=withheld,
        http_url="http://127.0.0.1:7374",
        gossip_advertised=[],
    )
    assert [w["kind"] for w in warnings] == [
        "ipfs-unreachable",
        "http-unreachable",
        "p2p-unreachable",
    ]
    assert warnings[0]["setting"] == "[ipfs] swarm_host"
    assert "127.0.0.1/tcp/4003" in warnings[0]["message"]
    assert warnings[1]["setting"] == "[http] host"
    assert warnings[2]["setting"] == "[p2p] listen_host"
    fine = start_warnings(
        open_mode=True,
        ipfs_mode="embedded",
        ipfs_advertised=["/ip4/10.77.0.11/tcp/4003/p2p/Qm"],
        ipfs_withheld=[],
        http_url="http://10.77.0.11:7374",
        gossip_advertised=["/ip4/10.77.0.11/tcp/7375/p2p/12D3"],
    )
    assert fine == []
    # A loopback-only node listens on loopback by design; no IPFS / HTTP / gossip: no warning.
    assert (
        start_warnings(
            open_mode=False,
            ipfs_mode="embedded",
            ipfs_advertised=[],
            ipfs_withheld=[],
            http_url="http://127.0.0.1:7374",
            gossip_advertised=[],
        )
        == []
    )
    assert (
        start_warnings(
            open_mode=True,
            ipfs_mode=None,
            ipfs_advertised=[],
            ipfs_withheld=[],
            http_url="",
            gossip_advertised=None,
        )
        == []
    )


def test_ipfs_hints_say_which_setting_of_the_provider_to_change() -> None:
    hints = ipfs_hints(
        [(OWNER_IPFS, "HTTP 500"), ("/ip4/10.77.0.12/tcp/4003/p2p/Qm", "timeout")], []
    )
    assert [(h.address, h.setting) for h in hints] == [
        (OWNER_IPFS, "[ipfs] swarm_host (on the provider)"),
        ("/ip4/10.77.0.12/tcp/4003/p2p/Qm", ""),
    ]
    assert "HTTP 500" in hints[0].error and hints[1].error == "timeout"


def test_an_input_is_pulled_from_the_peer_its_derivative_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The NAT lab's case (docs/nat.md): the derivative came from its owner over libp2p
    # streams; discovery has no provider record for the input yet and the owner's HTTP URL
    # is refused by the source policy. The owner is tried for the input at once.
    deriv = generate_private_key(bytes([4]) * 32).dataset_id()
    owner, other = "12D3KooWOwner", "12D3KooWOther"
    connected = {owner, other}
    carriers = {deriv: [owner]}  # discovery knows the derivative's carrier only
    refused = PullRefused("10.77.0.11 is private", "[transfer] allowed_source_networks")
    transfer = _Transfer({HTTP: refused})
    served: list[str] = []

    async def pull(url: str, *, alias: str | None, force: bool = False) -> dict[str, Any]:
        transfer.tried.append(url)
        if url.startswith("libp2p://"):
            served.append(url)
            return {}
        raise transfer.errors[url]

    monkeypatch.setattr(transfer, "pull", pull)
    monkeypatch.setattr("node.app.fetch.descends", lambda ds, head, base: True)
    fetcher = ChainFetcher(
        _repo(tmp_path),
        _State(),  # type: ignore[arg-type]
        transfer,  # type: ignore[arg-type]
        CommitLocks(),
        NodeMetrics(),
        ipfs_enabled=lambda: False,
        stream_peers=lambda did: carriers.get(did, []),
        peer_connected=connected.__contains__,
    )
    monkeypatch.setattr(fetcher._repo, "open", lambda did: None)
    where = FetchLocations(ipfs_cids=(), http_urls=(HTTP,))
    at = f"?head={HEAD.to_multibase()}"
    from_owner = f"libp2p://{owner}/{DID.as_did_str()}{at}"

    # Noted before the derivative was pulled: nobody to ask yet.
    fetcher.note_input(deriv, DID)
    assert fetcher.sources(where, DID, HEAD) == [HTTP]
    assert asyncio.run(fetcher(RequestFetch(deriv, HEAD, 1, 0, None, where)))
    assert served == [f"libp2p://{owner}/{deriv.as_did_str()}{at}"]
    assert fetcher.sources(where, DID, HEAD) == [HTTP, from_owner]
    transfer.tried.clear()
    assert asyncio.run(fetcher(RequestFetch(DID, HEAD, 1, 0, None, where)))
    assert transfer.tried == [HTTP, from_owner]
    # Once discovery names the owner as a carrier too, it is tried once, discovery's first.
    carriers[DID] = [other, owner]
    assert fetcher.sources(where, DID, HEAD) == [
        HTTP,
        f"libp2p://{other}/{DID.as_did_str()}{at}",
        from_owner,
    ]
    # A disconnected owner is no source.
    del carriers[DID]
    connected.discard(owner)
    assert fetcher.sources(where, DID, HEAD) == [HTTP]
    connected.add(owner)
    assert fetcher.input_origins(DID) == [owner]
    assert fetcher.input_origins(deriv) == []  # not anyone's input


def test_the_fetchers_memory_of_origins_is_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("node.app.fetch._MAX_REMEMBERED", 3)
    fetcher = _fetcher(tmp_path, _Transfer({}), _State(), lambda: 0.0)
    ids = [generate_private_key(bytes([10 + i]) * 32).dataset_id() for i in range(12)]
    for i, of in enumerate(ids[:10]):
        fetcher.note_input(of, ids[10])  # one input of many derivatives: the newest 8
        fetcher._served(of, f"libp2p://peer{i}/{of.as_did_str()}")
    assert fetcher._input_of[ids[10]] == ids[2:10]
    assert list(fetcher._served_by) == ids[7:10]
    for of in ids[:5]:
        fetcher.note_input(of, of)
    assert len(fetcher._input_of) == 3
    fetcher._served(ids[0], "http://10.0.0.1:7374/x")  # only libp2p sources are remembered
    assert ids[0] not in fetcher._served_by
