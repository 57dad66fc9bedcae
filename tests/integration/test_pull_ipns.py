"""``publish --ipns`` and ``ipns://`` pulls against real embedded IPFS (Helia) nodes.

The nodes have no DHT. By default a node resolves the names it published itself, offline, and
no foreign names. With IPNS over pubsub (``EmbeddedIpfs.ipns_pubsub``), a node resolves a
foreign name once it has subscribed to it (its first ``name/resolve`` fails and subscribes) and
the owner publishes again over the swarm connection. Needs the loopback-only namespace
(``unshare -rn``) and ``js/node_modules``.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from netns import ipfs_node, require_loopback_only  # noqa: F401 - pytest fixture
from typer.testing import CliRunner

from coordinator.identity.dataset_id import DatasetId
from coordinator.verify import verify_integrity
from node.cli import dataset_app
from node.home import NodeHome
from node.ipfs.client import IpfsClient, IpfsError
from node.ipfs.embedded import EmbeddedIpfs
from node.transfer.errors import SourceUnavailable
from node.transfer.publish import publish_dataset
from node.transfer.pull import HeadComparison, PullOptions, pull_url
from node.transfer.testing import add_data, build_dataset

pytestmark = pytest.mark.integration
OPTS = PullOptions(attempts=2, backoff_s=0.05, durable=False)


def _app() -> typer.Typer:
    return dataset_app  # dataset pull, dataset publish, ...


def _owner(tmp: Path) -> NodeHome:
    home = NodeHome(tmp / "home-a")
    home.init()
    probe = build_dataset(tmp / "probe", 4, 2000)
    did = probe.state().dataset_id
    assert isinstance(did, DatasetId)
    handle, _ = home.repository().create_empty(did, "temps")
    shutil.rmtree(handle.root)
    shutil.copytree(probe.layout.root, handle.root)
    (handle.root / "info" / "alias").write_text("temps")
    return home


async def _connect(a: EmbeddedIpfs, b: EmbeddedIpfs) -> None:
    async with IpfsClient(a.api_url) as ca, IpfsClient(b.api_url) as cb:
        peer = (await ca.id())["ID"]
        await cb.swarm_connect(f"{a.swarm_addr}/p2p/{peer}")


@pytest.fixture(scope="module")
def pubsub_pair(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[EmbeddedIpfs, EmbeddedIpfs]]:
    """Two embedded IPFS nodes with IPNS over pubsub (loopback-only, stopped by PID)."""
    require_loopback_only()
    root = tmp_path_factory.mktemp("ipfs-pubsub")
    nodes = [EmbeddedIpfs(root / n, ipns_pubsub=True) for n in ("a", "b")]
    try:
        for n in nodes:
            n.launch()
        for n in nodes:
            n.wait_ready()
        asyncio.run(_connect(nodes[0], nodes[1]))
        yield nodes[0], nodes[1]
    finally:
        for n in nodes:
            n.stop()


def test_cli_publish_ipns_and_pull_ipns_same_node(
    tmp_path: Path,
    ipfs_node: EmbeddedIpfs,  # noqa: F811 - default flags: own names resolve offline
) -> None:
    a = ipfs_node
    owner = _owner(tmp_path)
    runner, app = CliRunner(), _app()
    common = ["--ipfs-api", a.api_url, "--home", str(owner.path), "--json"]
    res = runner.invoke(app, ["publish", "temps", "--ipns", *common])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    name = out["ipns"]
    assert name and name.startswith("12D3Koo")  # the embedded node names keys by peer id

    sub = tmp_path / "home-b"
    NodeHome(sub).init()  # a command on a path that is not a home fails
    pull_args = ["pull", f"ipns://{name}", "--as", "temps", "--ipfs-api", a.api_url]
    res = runner.invoke(app, [*pull_args, "--home", str(sub)])
    assert res.exit_code == 0, res.output
    got = NodeHome(sub).repository().open("temps")
    src = owner.repository().open("temps")
    assert got.head() == src.head()

    # The owner appends and re-publishes under the same name: the pull follows it.
    add_data(src, 2, 700)
    res = runner.invoke(app, ["publish", "temps", "--ipns", *common])
    assert res.exit_code == 0 and json.loads(res.stdout)["ipns"] == name
    res = runner.invoke(app, [*pull_args, "--home", str(sub), "--json"])
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)
    assert r["comparison"] == "local-behind" and r["new_blocks"] == 2
    assert got.head() == src.head() and verify_integrity(got).ok

    # Through the gateway (it resolves /ipns/ paths itself) the result is the same.
    async def via_gateway() -> None:
        repo = NodeHome(tmp_path / "home-c").repository()
        r = await pull_url(
            repo, f"ipns://{name}", alias="temps", ipfs_gateway=a.gateway_url, options=OPTS
        )
        assert r.created and r.new_head == src.head()

    asyncio.run(via_gateway())


def test_ipns_pull_across_nodes(
    tmp_path: Path, pubsub_pair: tuple[EmbeddedIpfs, EmbeddedIpfs]
) -> None:
    a, b = pubsub_pair
    src = build_dataset(tmp_path / "src" / "ds", 3, 1500, seed=b"ipns-x")

    async def go() -> None:
        async with IpfsClient(a.api_url, timeout_s=10) as ca, IpfsClient(b.api_url) as cb:
            pub = await publish_dataset(ca, src, ipns_key="self")
            name = pub.ipns_name
            assert name is not None
            # B has no record yet: "unknown" (retried, then SourceUnavailable), never "absent".
            repo = NodeHome(tmp_path / "home-b").repository()
            with pytest.raises(SourceUnavailable, match="resolve"):
                await pull_url(repo, f"ipns://{name}", alias="x", ipfs_api=b.api_url, options=OPTS)
            assert repo.list() == []
            # B's failed resolve subscribed it to the name's topic; the next publish reaches it.
            for _ in range(50):
                await ca.name_publish(f"/ipfs/{pub.cid}")
                try:
                    await cb.name_resolve(name)
                    break
                except IpfsError:
                    await asyncio.sleep(0.1)
            r = await pull_url(repo, f"ipns://{name}", alias="x", ipfs_api=b.api_url, options=OPTS)
            assert r.created and r.new_head == src.head()
            assert r.comparison is HeadComparison.LOCAL_BEHIND
            assert verify_integrity(repo.open("x")).ok

    asyncio.run(go())
