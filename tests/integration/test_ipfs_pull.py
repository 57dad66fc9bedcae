"""Publish on one embedded IPFS node, pull via ipfs:// on another (bitswap over 127.0.0.1).

Needs the loopback-only namespace (``unshare -rn``) and ``js/node_modules`` (``npm ci``).
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from factories import pull_repo
from netns import ipfs_pair  # noqa: F401 - pytest fixture
from typer.testing import CliRunner

from coordinator.identity.dataset_id import DatasetId
from coordinator.storage.dataset import Dataset
from coordinator.storage.repository import DatasetRepository
from coordinator.verify import verify_integrity
from node.ipfs.client import GatewayReader, IpfsClient
from node.ipfs.embedded import EmbeddedIpfs
from node.transfer.publish import publish_dataset
from node.transfer.pull import HeadComparison, PullOptions, pull_url
from node.transfer.testing import add_data, build_dataset

pytestmark = pytest.mark.integration
OPTS = PullOptions(attempts=3, backoff_s=0.05, durable=False)


def _hosted(tmp_path: Path, alias: str) -> tuple[DatasetRepository, Dataset]:
    repo = pull_repo(tmp_path / "owner")
    probe = build_dataset(tmp_path / "probe", 6, 300_000)
    did = probe.state().dataset_id
    assert isinstance(did, DatasetId)
    handle, _ = repo.create_empty(did, alias)
    shutil.rmtree(handle.root)
    shutil.copytree(probe.layout.root, handle.root)
    (handle.root / "info" / "alias").write_text(alias)
    return repo, repo.open(alias)


async def _connect(a: EmbeddedIpfs, b: EmbeddedIpfs) -> None:
    async with IpfsClient(a.api_url) as ca, IpfsClient(b.api_url) as cb:
        peer = (await ca.id())["ID"]
        await cb.swarm_connect(f"{a.swarm_addr}/p2p/{peer}")
        assert peer in await cb.swarm_peers()


def test_publish_on_a_pull_on_b(
    tmp_path: Path,
    ipfs_pair: tuple[EmbeddedIpfs, EmbeddedIpfs],  # noqa: F811
) -> None:
    a, b = ipfs_pair
    _, src = _hosted(tmp_path, "weather")
    dst = pull_repo(tmp_path / "subscriber")

    async def go() -> None:
        await _connect(a, b)
        async with IpfsClient(a.api_url) as ca:
            pub = await publish_dataset(ca, src)
            # info/ is not published; the layout directories are.
            names = {e["Name"] for e in await ca.ls(f"/ipfs/{pub.cid}")}
            assert names == {"blocks", "checkpoints", "data", "refs"}
        assert pub.cid.startswith("bafy")
        r = await pull_url(dst, f"{pub.url}", alias="weather", ipfs_api=b.api_url, options=OPTS)
        assert r.created and r.new_head == src.head()
        assert verify_integrity(dst.open("weather")).ok

        # Incremental: extend, republish, pull only what is new (default alias = last segment).
        add_data(src, 3, 50_000)
        async with IpfsClient(a.api_url) as ca:
            pub2 = await publish_dataset(ca, src)
        assert pub2.cid != pub.cid
        r = await pull_url(dst, pub2.url, alias="weather", ipfs_api=b.api_url, options=OPTS)
        assert r.comparison is HeadComparison.LOCAL_BEHIND and r.new_blocks == 3
        assert dst.open("weather").head() == src.head()
        assert verify_integrity(dst.open("weather")).ok

        # Republish from B what B verified, read it through B's gateway into a third store.
        async with IpfsClient(b.api_url) as cb:
            pub3 = await publish_dataset(cb, dst.open("weather"))
        assert pub3.cid == pub2.cid  # same bytes, same layout -> same root CID
        third = pull_repo(tmp_path / "third")
        r = await pull_url(
            third, f"ipfs://{pub3.cid}", alias="w", ipfs_gateway=b.gateway_url, options=OPTS
        )
        assert r.new_head == src.head()
        gw = GatewayReader(b.gateway_url)
        try:
            head = await gw.cat(f"/ipfs/{pub3.cid}/refs/head", max_size=100)
        finally:
            await gw.close()
        assert head.decode() == str(src.head())

    asyncio.run(go())


def test_cli_publish_and_pull(
    tmp_path: Path,
    ipfs_pair: tuple[EmbeddedIpfs, EmbeddedIpfs],  # noqa: F811
) -> None:
    from node.cli import dataset_app as app  # dataset pull, dataset publish, ...
    from node.home import NodeHome

    a, b = ipfs_pair
    asyncio.run(_connect(a, b))
    owner = NodeHome(tmp_path / "home-a")
    owner.init()
    probe = build_dataset(tmp_path / "probe", 3, 1000)
    did = probe.state().dataset_id
    assert isinstance(did, DatasetId)
    handle, _ = owner.repository().create_empty(did, "temps")
    shutil.rmtree(handle.root)
    shutil.copytree(probe.layout.root, handle.root)
    (handle.root / "info" / "alias").write_text("temps")

    runner = CliRunner()
    res = runner.invoke(
        app, ["publish", "temps", "--ipfs-api", a.api_url, "--home", str(owner.path), "--json"]
    )
    assert res.exit_code == 0, res.output
    import json

    url = json.loads(res.stdout)["url"]
    sub = tmp_path / "home-b"
    NodeHome(sub).init()  # a command on a path that is not a home fails
    res = runner.invoke(
        app, ["pull", f"{url}/", "--as", "temps", "--ipfs-api", b.api_url, "--home", str(sub)]
    )
    assert res.exit_code == 0, res.output
    assert "created" in res.stdout
    res = runner.invoke(
        app, ["pull", url, "--as", "temps", "--ipfs-api", b.api_url, "--home", str(sub)]
    )
    assert res.exit_code == 0 and "up to date" in res.stdout
    assert NodeHome(sub).repository().open("temps").head() == probe.head()


def test_tampered_dataset_on_ipfs_rejected(
    tmp_path: Path,
    ipfs_pair: tuple[EmbeddedIpfs, EmbeddedIpfs],  # noqa: F811
) -> None:
    from node.transfer.errors import ObjectHashMismatch

    a, b = ipfs_pair
    src = build_dataset(tmp_path / "evil" / "ds", 4, 5000, seed=b"evil")
    part = next(src.data.iter_hashes())
    path = src.data.path_of(part)
    raw = bytearray(path.read_bytes())
    raw[100] ^= 0xFF
    path.write_bytes(bytes(raw))
    dst = pull_repo(tmp_path / "victim")

    async def go() -> None:
        await _connect(a, b)
        async with IpfsClient(a.api_url) as ca:
            cid = await ca.add_directory(src.layout.root, exclude_top=frozenset({"info"}))
        with pytest.raises(ObjectHashMismatch) as info:
            await pull_url(dst, f"ipfs://{cid}", alias="evil", ipfs_api=b.api_url, options=OPTS)
        assert info.value.object == f"data/{part}"

    asyncio.run(go())
    assert dst.list() == []
