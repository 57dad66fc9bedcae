"""Which sources a pull will contact: the address policy, URL schemes, redirects, host names,
and the announcement path (``ChainFetcher`` -> ``TransferAdapter``) under the node's config.

Servers are real, on 127.0.0.1; refused addresses are never connected to (the tests would fail
or hang if they were: nothing listens there in the test sandbox).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from pathlib import Path
from typing import Any

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult
from scripted_http import Behaviour, serve_dir

from coordinator.errors import INVALID_INPUT, OdfNodeError
from coordinator.metadata.timestamp import Timestamp
from coordinator.storage.dataset import Dataset
from coordinator.storage.repository import DatasetRepository
from node.adapters.transfer import TransferAdapter, source_policy
from node.app.datasets import CommitLocks
from node.app.errors import RetryLater
from node.app.fetch import ChainFetcher, PullRefused
from node.app.metrics import NodeMetrics
from node.config import NodeConfig, load_config
from node.rpc.errors import code_for
from node.transfer.errors import InvalidSourceUrl, SourceRefused
from node.transfer.policy import PolicyResolver, SourcePolicy, classify
from node.transfer.pull import PullOptions, pull_url
from node.transfer.sources import HttpSource, open_source
from node.transfer.testing import build_dataset
from p2p.core import RequestFetch
from p2p.wire import FetchLocations

FAST = PullOptions(attempts=2, backoff_s=0.01, backoff_max_s=0.02, durable=False)
LOOPBACK = SourcePolicy()
OPEN = SourcePolicy.open()
OPEN_PRIVATE = SourcePolicy.open(allow_private=True)
OPEN_LISTED = SourcePolicy.open(allowed_networks=["10.1.0.0/16", "169.254.169.254/32"])
ALLOW, DENY = True, False

# (address, loopback-only, open, open + allow_private, open + allow-list 10.1/16 + metadata)
TABLE = [
    ("127.0.0.1", ALLOW, DENY, ALLOW, DENY),
    ("127.8.9.10", ALLOW, DENY, ALLOW, DENY),
    ("::1", ALLOW, DENY, ALLOW, DENY),
    ("::ffff:127.0.0.1", ALLOW, DENY, ALLOW, DENY),
    ("8.8.8.8", DENY, ALLOW, ALLOW, ALLOW),
    ("2606:4700:4700::1111", DENY, ALLOW, ALLOW, ALLOW),
    ("10.0.0.1", DENY, DENY, ALLOW, DENY),
    ("10.1.2.3", DENY, DENY, ALLOW, ALLOW),
    ("172.16.5.4", DENY, DENY, ALLOW, DENY),
    ("172.31.255.255", DENY, DENY, ALLOW, DENY),
    ("172.32.0.1", DENY, ALLOW, ALLOW, ALLOW),  # just outside 172.16/12: public
    ("192.168.1.1", DENY, DENY, ALLOW, DENY),
    ("fd12:3456::1", DENY, DENY, ALLOW, DENY),
    ("fc00::1", DENY, DENY, ALLOW, DENY),
    ("169.254.1.1", DENY, DENY, ALLOW, DENY),
    ("fe80::1", DENY, DENY, ALLOW, DENY),
    ("100.64.0.1", DENY, DENY, ALLOW, DENY),
    ("100.127.255.254", DENY, DENY, ALLOW, DENY),
    # cloud metadata: never by allow_private_sources, only by an explicit entry
    ("169.254.169.254", DENY, DENY, DENY, ALLOW),
    ("fd00:ec2::254", DENY, DENY, DENY, DENY),
    ("100.100.100.200", DENY, DENY, DENY, DENY),
    ("::ffff:169.254.169.254", DENY, DENY, DENY, ALLOW),
    ("64:ff9b::a9fe:a9fe", DENY, DENY, DENY, ALLOW),  # NAT64 of 169.254.169.254
    ("2002:a9fe:a9fe::1", DENY, DENY, DENY, ALLOW),  # 6to4 of 169.254.169.254
    ("64:ff9b::808:808", DENY, ALLOW, ALLOW, ALLOW),  # NAT64 of 8.8.8.8
    # never: no single host
    ("0.0.0.0", DENY, DENY, DENY, DENY),
    ("0.1.2.3", DENY, DENY, DENY, DENY),
    ("::", DENY, DENY, DENY, DENY),
    ("224.0.0.1", DENY, DENY, DENY, DENY),
    ("239.255.255.250", DENY, DENY, DENY, DENY),
    ("ff02::1", DENY, DENY, DENY, DENY),
    ("255.255.255.255", DENY, DENY, DENY, DENY),
    ("240.0.0.1", DENY, DENY, DENY, DENY),
    ("::a9fe:a9fe", DENY, DENY, DENY, DENY),  # IPv4-compatible (deprecated, reserved)
    # other non-public ranges: like private ones
    ("192.0.2.1", DENY, DENY, ALLOW, DENY),
    ("198.18.0.1", DENY, DENY, ALLOW, DENY),
    ("2001:db8::1", DENY, DENY, ALLOW, DENY),
]


@pytest.mark.parametrize(("address", "loopback", "open_", "private", "listed"), TABLE)
def test_policy_table(
    address: str, loopback: bool, open_: bool, private: bool, listed: bool
) -> None:
    ip = ipaddress.ip_address(address)
    got = [p.refusal(ip) is None for p in (LOOPBACK, OPEN, OPEN_PRIVATE, OPEN_LISTED)]
    assert got == [loopback, open_, private, listed], (address, classify(ip))


def test_refusals_explain_themselves() -> None:
    with pytest.raises(SourceRefused, match="cloud metadata endpoint"):
        OPEN_PRIVATE.check_address("169.254.169.254", "source")
    with pytest.raises(SourceRefused, match="allow_private_sources"):
        OPEN.check_address("10.0.0.1", "source")
    with pytest.raises(SourceRefused, match="loopback-only"):
        LOOPBACK.check_address("8.8.8.8", "source")
    with pytest.raises(SourceRefused, match="multicast"):
        SourcePolicy.open(allowed_networks=["0.0.0.0/0"]).check_address("224.0.0.1", "source")


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.org/ds",
        "did:odf:fed0119d2ae44bc5fc4d2ef5bd4ba0ec",
        "file:///etc",
        "gopher://x",
    ],
)
def test_only_http_schemes_are_sources(url: str) -> None:
    with pytest.raises(InvalidSourceUrl, match="not http or https"):
        OPEN.check_url(url)


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("http://169.254.169.254/latest/meta-data", SourceRefused),
        ("http://[fd00:ec2::254]/", SourceRefused),
        ("http://[::ffff:a9fe:a9fe]/", SourceRefused),
        ("http://10.0.0.1:8080/ds", SourceRefused),
        ("http://0.0.0.0:7374/ds", SourceRefused),
        ("http:///ds", InvalidSourceUrl),
        ("http://8.8.8.8/ds", None),
        ("https://example.org/ds", None),  # names are checked where they resolve
    ],
)
def test_url_hosts_are_checked_before_any_request(url: str, error: type[Exception] | None) -> None:
    if error is None:
        assert OPEN.check_url(url).scheme in ("http", "https")
        HttpSource(url, policy=OPEN)
    else:
        with pytest.raises(error):
            HttpSource(url, policy=OPEN)


def _repo(path: Path) -> DatasetRepository:
    return DatasetRepository(
        path / "datasets",
        path / "keys",
        clock=lambda: Timestamp.parse("2024-06-01T00:00:00Z"),
        durable=False,
    )


@pytest.mark.parametrize(
    "url", ["ftp://example.org/ds", "did:odf:fed0119d2ae44bc5fc4d2ef5bd4ba0ec", "", "  ", "/"]
)
def test_unusable_pull_urls_are_typed_invalid_input(tmp_path: Path, url: str) -> None:
    """``dataset.pull`` with these URLs answered -32603 (a bare ValueError); now INVALID_INPUT
    both below the port (``pull_url``) and through it (the RPC's ``TransferAdapter``)."""
    repo = _repo(tmp_path)
    with pytest.raises(InvalidSourceUrl) as direct:
        asyncio.run(pull_url(repo, url, options=FAST))
    assert code_for(direct.value) == INVALID_INPUT
    adapter = TransferAdapter(repo, lambda: None, config=load_config(None, environ={}))
    with pytest.raises(PullRefused) as through:
        asyncio.run(adapter.pull(url, alias=None))
    assert isinstance(through.value, OdfNodeError)
    assert code_for(through.value) == INVALID_INPUT


@pytest.fixture
def source_ds(tmp_path: Path) -> Dataset:
    return build_dataset(tmp_path / "src", 2, 500)


def test_redirect_to_metadata_endpoint_is_refused(tmp_path: Path, source_ds: Dataset) -> None:
    """Open mode with 127.0.0.1 allowed: the first host is fine, the hop it redirects to is not,
    and it is refused before any connection (no retry, the source is asked once)."""
    policy = SourcePolicy.open(allowed_networks=["127.0.0.1/32"])
    script = Behaviour(redirect={"refs/head": "http://169.254.169.254/latest/meta-data/"})
    with (
        serve_dir(source_ds.layout.root, script) as (url, b),
        pytest.raises(SourceRefused, match=r"169\.254\.169\.254") as info,
    ):
        asyncio.run(pull_url(_repo(tmp_path / "dst"), url, options=FAST, policy=policy))
    assert "redirect" in str(info.value)
    assert code_for(info.value) == INVALID_INPUT
    assert b.hits["refs/head"] == 1


def test_redirect_leaving_loopback_is_refused_in_loopback_only_mode(
    tmp_path: Path, source_ds: Dataset
) -> None:
    script = Behaviour(redirect={"refs/head": "http://10.0.0.1:7374/ds/refs/head"})
    with (
        serve_dir(source_ds.layout.root, script) as (url, _),
        pytest.raises(SourceRefused, match="loopback-only"),
    ):
        asyncio.run(pull_url(_repo(tmp_path / "dst"), url, options=FAST, policy=LOOPBACK))


@pytest.mark.parametrize("target", ["ftp://127.0.0.1/x", "file:///etc/passwd"])
def test_redirect_to_another_scheme_is_refused(
    tmp_path: Path, source_ds: Dataset, target: str
) -> None:
    script = Behaviour(redirect={"refs/head": target})
    with (
        serve_dir(source_ds.layout.root, script) as (url, _),
        pytest.raises(SourceRefused, match="not http or https"),
    ):
        asyncio.run(pull_url(_repo(tmp_path / "dst"), url, options=FAST))


def test_redirects_within_the_policy_are_followed(tmp_path: Path, source_ds: Dataset) -> None:
    with serve_dir(source_ds.layout.root) as (good, _):
        head_url = f"{good}/refs/head"
        script = Behaviour(redirect={"refs/head": head_url})
        with serve_dir(source_ds.layout.root, script) as (url, b):
            r = asyncio.run(pull_url(_repo(tmp_path / "dst"), url, alias="c", options=FAST))
    assert r.new_head == source_ds.head() and b.hits["refs/head"] == 1


class FakeDns(AbstractResolver):
    """Answers from a table (a host name may have several addresses, like a rebinding name)."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.asked: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.asked.append(host)
        return [
            ResolveResult(
                hostname=host,
                host=a,
                port=port,
                family=socket.AF_INET6 if ":" in a else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for a in self.table[host]
        ]

    async def close(self) -> None:
        pass


def test_host_names_are_checked_at_resolution(tmp_path: Path, source_ds: Dataset) -> None:
    """A name is allowed only if every address it resolves to is, and the connection goes to
    the checked address: ``good.test`` -> 127.0.0.1 works, ``evil.test`` (redirected to) is
    refused for its metadata address."""
    policy = SourcePolicy.open(allowed_networks=["127.0.0.0/8"])
    with serve_dir(source_ds.layout.root) as (url, _):
        port = url.split(":")[2].split("/")[0]
        dns = FakeDns({"good.test": ["127.0.0.1"], "evil.test": ["169.254.169.254"]})

        async def go(base: str) -> object:
            src = HttpSource(base, policy=policy, resolver=dns)
            try:
                async with src.open("refs/head") as chunks:
                    return b"".join([c async for c in chunks])
            finally:
                await src.close()

        assert (
            asyncio.run(go(f"http://good.test:{port}/ds"))
            == (source_ds.layout.root / "refs" / "head").read_bytes()
        )
        with pytest.raises(SourceRefused, match=r"evil\.test"):
            asyncio.run(go(f"http://evil.test:{port}/ds"))
        script = Behaviour(redirect={"refs/head": f"http://evil.test:{port}/ds/refs/head"})
        with (
            serve_dir(source_ds.layout.root, script) as (url2, _),
            pytest.raises(SourceRefused, match=r"evil\.test"),
        ):
            asyncio.run(go(url2.replace("127.0.0.1", "good.test")))


def test_a_name_with_any_refused_address_is_refused() -> None:
    dns = FakeDns({"mixed.test": ["8.8.8.8", "10.0.0.5"], "public.test": ["8.8.8.8", "1.1.1.1"]})
    resolver = PolicyResolver(OPEN, dns)
    with pytest.raises(SourceRefused, match=r"10\.0\.0\.5"):
        asyncio.run(resolver.resolve("mixed.test", 80))
    assert [r["host"] for r in asyncio.run(resolver.resolve("public.test", 80))] == [
        "8.8.8.8",
        "1.1.1.1",
    ]


def test_open_source_keeps_ipfs_and_local_paths(tmp_path: Path) -> None:
    """The policy is about HTTP hosts; user pulls from IPFS and local directories still work."""
    assert open_source("ipfs://bafyabc/p", ipfs_gateway="http://127.0.0.1:1").description
    assert open_source(str(tmp_path)).description == str(tmp_path)
    assert open_source(f"file://{tmp_path}").description == str(tmp_path)


# ---- configuration -> policy, and the announcement path -------------------------------------


def _config(**transfer: Any) -> NodeConfig:
    return load_config(
        None, environ={}, overrides={"network": {"isolation": "open"}, "transfer": transfer}
    )


def test_config_builds_the_policy() -> None:
    assert source_policy(load_config(None, environ={})) == SourcePolicy()
    assert source_policy(None) == SourcePolicy()
    p = source_policy(_config(allow_private_sources=True, allowed_source_networks=["10.1.2.0/24"]))
    assert not p.loopback_only and p.allow_private
    assert p.allowed_networks == (ipaddress.ip_network("10.1.2.0/24"),)


class _State:
    """The two StatePort methods the fetcher uses."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str | None, dict[str, Any]]] = []

    async def subscription(self, did: str) -> None:
        return None

    async def log_event(self, kind: str, did: str | None, data: dict[str, Any]) -> int:
        self.events.append((kind, did, data))
        return len(self.events)


def _fetch(repo: DatasetRepository, cfg: NodeConfig, ds: Dataset, urls: tuple[str, ...]) -> Any:
    state = _State()
    metrics = NodeMetrics()
    fetcher = ChainFetcher(
        repo,
        state,  # type: ignore[arg-type]
        TransferAdapter(repo, lambda: None, config=cfg),
        CommitLocks(),
        metrics,
        ipfs_enabled=lambda: False,
    )
    did = ds.state().dataset_id
    assert did is not None and ds.head() is not None
    req = RequestFetch(did, ds.head(), 1, 0, None, FetchLocations(http_urls=urls))  # type: ignore[arg-type]

    async def go() -> Any:
        try:
            return await fetcher(req)
        except RetryLater as e:
            return e

    return asyncio.run(go()), state, metrics


def test_announced_loopback_source_is_refused_in_open_mode(
    tmp_path: Path, source_ds: Dataset
) -> None:
    """A stranger's announcement naming an internal address: never contacted, logged."""
    repo = _repo(tmp_path / "dst")
    with serve_dir(source_ds.layout.root) as (url, b):
        result, state, metrics = _fetch(repo, _config(), source_ds, (url,))
    assert isinstance(result, RetryLater)
    assert sum(b.hits.values()) == 0
    assert [e[0] for e in state.events] == ["pull.refused", "pull.source_failed"]
    assert "127.0.0.1" in state.events[0][2]["error"]
    assert state.events[1][2]["reason"] == "refused"
    assert state.events[1][2]["setting"] == "[transfer] allowed_source_networks"
    assert metrics.pulls.labels("refused")._value.get() == 1


def test_announced_source_allowed_by_the_operator_is_pulled(
    tmp_path: Path, source_ds: Dataset
) -> None:
    repo = _repo(tmp_path / "dst")
    cfg = _config(allowed_source_networks=["127.0.0.0/8"])
    with serve_dir(source_ds.layout.root) as (url, _):
        result, state, _ = _fetch(repo, cfg, source_ds, ("file:///etc", url))
    assert result is True
    assert [e[0] for e in state.events] == ["pull.ok"]  # file:/// was never a candidate
