"""The read-only Simple Transfer Protocol server: what it serves and what it refuses."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import aiohttp
import pytest
from factories import pull_repo

from coordinator.storage.repository import DatasetRepository
from node.transfer.server import start_server
from node.transfer.testing import build_dataset


@pytest.fixture
def hosted(tmp_path: Path) -> DatasetRepository:
    repo = pull_repo(tmp_path / "home")
    probe = build_dataset(tmp_path / "probe", 2, 777)
    did = probe.state().dataset_id
    assert did is not None
    handle, _ = repo.create_empty(did, "alpha")
    shutil.rmtree(handle.root)
    shutil.copytree(probe.layout.root, handle.root)
    (handle.root / "info" / "alias").write_text("alpha")
    return repo


def test_serves_layout_paths_only(hosted: DatasetRepository) -> None:
    ds = hosted.open("alpha")
    head = ds.head()
    assert head is not None
    part = next(ds.data.iter_hashes())
    did = hosted.resolve("alpha").id.as_did_str()

    async def go() -> None:
        runner, port = await start_server(hosted)
        base = f"http://127.0.0.1:{port}"
        try:
            async with aiohttp.ClientSession() as s:

                async def get(path: str) -> tuple[int, bytes]:
                    async with s.get(base + path) as r:
                        return r.status, await r.read()

                assert await get("/alpha/refs/head") == (200, str(head).encode())
                assert (await get(f"/{did}/refs/head"))[0] == 200
                st, body = await get(f"/alpha/blocks/{head}")
                assert st == 200 and body == ds.get_block_bytes(head)
                st, body = await get(f"/alpha/data/{part}")
                assert st == 200 and body == ds.data.get_bytes(part)
                assert (await get("/alpha/info/alias"))[0] == 404
                assert (await get("/alpha/blocks/..%2Finfo%2Falias"))[0] == 404
                assert (await get("/alpha/blocks/nothex"))[0] == 404
                assert (await get(f"/alpha/data/{head}"))[0] == 404
                assert (await get("/nosuch/refs/head"))[0] == 404
                async with s.put(f"{base}/alpha/data/{part}", data=b"x") as r:
                    assert r.status == 405
                whole = ds.data.get_bytes(part)
                for rng, status, body in (
                    ("bytes=0-3", 206, whole[:4]),
                    ("bytes=-4", 206, whole[-4:]),
                    ("bytes=-0", 416, None),
                    ("bytes=-000", 416, None),
                ):
                    async with s.get(f"{base}/alpha/data/{part}", headers={"Range": rng}) as r:
                        assert r.status == status, rng
                        if body is not None:
                            assert await r.read() == body, rng
                        else:
                            assert r.headers["Content-Range"] == f"bytes */{len(whole)}"
        finally:
            await runner.cleanup()

    asyncio.run(go())
