"""Backups of a node home and their restore (``node/backup.py``, docs/backup.md), offline:
the round trip keeps the node id, state, keys (mode 0600) and datasets with their heads; a
restore refuses an existing home, an unknown newer format, a newer state schema, a damaged or
hostile archive, and leaves nothing behind when it refuses."""

from __future__ import annotations

import io
import json
import sqlite3
import stat
import tarfile
import time
from pathlib import Path

import pytest

from coordinator.identity import generate_private_key
from node.backup import (
    FORMAT_VERSION,
    HEADER,
    BackupError,
    BackupFormatTooNew,
    read_header,
    restore_backup,
    write_backup,
)
from node.home import NodeHome
from node.state import LATEST_VERSION, NodeState

CITIES = """\
kind: DatasetSnapshot
version: 1
content:
  name: cities
  kind: Root
  metadata:
    - kind: AddPushSource
      sourceName: default
      read:
        kind: Csv
        header: true
        schema: ["event_time TIMESTAMP", "city STRING", "population BIGINT"]
      merge:
        kind: Append
"""


def did() -> str:
    return generate_private_key().dataset_id().as_did_str()


def make_home(path: Path, subscriptions: int = 25) -> NodeHome:
    from coordinator.metadata.snapshot import snapshots_from_yaml

    home = NodeHome(path)
    home.init()
    repo = home.repository()
    for snap in snapshots_from_yaml(CITIES):
        repo.create_from_snapshot(snap)
    with NodeState.open(path / "state.db", time.time_ns) as st:
        for _ in range(subscriptions):
            st.subscribe(did(), None, None)
        d = did()
        st.add_attestation(d, "f1620" + "a" * 64, "verified", "did:key:z6Mk", b"att", True)
        st.add_dispute(d, "f1620" + "b" * 64, "replay-mismatch", "did:key:z6Mk", b"d", True, "x")
    return home


def heads(home: Path) -> dict[str, str]:
    return {
        h.id.as_did_str(): (h.root / "refs" / "head").read_text()
        for h in NodeHome(home).repository().list()
    }


def test_round_trip(tmp_path: Path) -> None:
    src = make_home(tmp_path / "src")
    archive = tmp_path / "b.tar"
    summary = write_backup(src.path, archive, datasets=True)
    assert summary.subscriptions == 25 and summary.attestations == 1 and summary.disputes == 1
    assert summary.state_schema_version == LATEST_VERSION
    assert [d["alias"] for d in summary.datasets] == ["cities"]
    assert stat.S_IMODE(archive.stat().st_mode) == 0o600  # it holds private keys
    assert read_header(archive) == FORMAT_VERSION

    restored = restore_backup(archive, tmp_path / "dst")
    dst = NodeHome(tmp_path / "dst")
    assert restored.node_id == summary.node_id == dst.node_key().dataset_id().as_did_key()
    assert restored.subscriptions == 25 and restored.datasets == 1
    assert heads(dst.path) == heads(src.path)
    assert dst.config_path.read_text() == src.config_path.read_text()
    with (
        NodeState.open(dst.path / "state.db", time.time_ns) as a,
        NodeState.open(src.path / "state.db", time.time_ns) as b,
    ):
        assert a.subscriptions() == b.subscriptions()
        assert a.attestations() == b.attestations() and a.disputes() == b.disputes()
    keys = [dst.node_key_path, *dst.dataset_keys_path.glob("*.key")]
    assert len(keys) == 2
    for key in keys:
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
    for d in (dst.path, dst.path / "keys", dst.dataset_keys_path):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left


def test_without_datasets_keeps_the_keys(tmp_path: Path) -> None:
    src = make_home(tmp_path / "src", subscriptions=3)
    summary = write_backup(src.path, tmp_path / "b.tar", datasets=False)
    assert summary.datasets == [] and summary.owned_dataset_keys == 1
    restored = restore_backup(tmp_path / "b.tar", tmp_path / "dst")
    assert restored.datasets == 0 and restored.subscriptions == 3
    assert len(list((tmp_path / "dst" / "keys" / "datasets").glob("*.key"))) == 1


def test_backup_never_overwrites(tmp_path: Path) -> None:
    src = make_home(tmp_path / "src", subscriptions=0)
    (tmp_path / "b.tar").write_text("precious")
    with pytest.raises(BackupError, match="never overwrites a file"):
        write_backup(src.path, tmp_path / "b.tar", datasets=False)
    assert (tmp_path / "b.tar").read_text() == "precious"


def test_restore_refuses_an_existing_home(tmp_path: Path) -> None:
    src = make_home(tmp_path / "src", subscriptions=0)
    write_backup(src.path, tmp_path / "b.tar", datasets=False)
    with pytest.raises(BackupError, match="exists and is not empty"):
        restore_backup(tmp_path / "b.tar", src.path)
    (tmp_path / "empty").mkdir()  # an empty directory (a mounted volume) is fine
    assert restore_backup(tmp_path / "b.tar", tmp_path / "empty").node_id


def rewrite(archive: Path, out: Path, change: dict[str, bytes | None]) -> None:
    """Copy ``archive`` to ``out`` replacing (or, with None, dropping) members by name; new
    names are appended before the manifest."""
    with tarfile.open(archive) as src, tarfile.open(out, "w") as dst:
        members = src.getmembers()
        for m in members:
            if m.name == "manifest.json":
                for name, data in change.items():
                    if data is not None and name not in {x.name for x in members}:
                        add(dst, name, data)
            if m.name in change:
                data = change[m.name]
                if data is not None:
                    add(dst, m.name, data)
                continue
            f = src.extractfile(m)
            dst.addfile(m, f)


def add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    src = make_home(tmp_path / "src", subscriptions=2)
    write_backup(src.path, tmp_path / "b.tar", datasets=True)
    return tmp_path / "b.tar"


def test_newer_format_is_refused_by_version(archive: Path, tmp_path: Path) -> None:
    newer = tmp_path / "newer.tar"
    header = json.dumps({"format": "odf-node-backup", "version": FORMAT_VERSION + 1}).encode()
    rewrite(archive, newer, {HEADER: header})
    with pytest.raises(BackupFormatTooNew, match=f"format version {FORMAT_VERSION + 1} is newer"):
        restore_backup(newer, tmp_path / "dst")
    assert not (tmp_path / "dst").exists()


def test_newer_state_schema_is_refused(archive: Path, tmp_path: Path) -> None:
    with tarfile.open(archive) as t:
        f = t.extractfile("manifest.json")
        assert f is not None
        manifest = json.loads(f.read())
    manifest["state_schema_version"] = LATEST_VERSION + 1
    bad = tmp_path / "bad.tar"
    rewrite(archive, bad, {"manifest.json": json.dumps(manifest).encode()})
    with pytest.raises(BackupError, match=f"state schema version {LATEST_VERSION + 1} is newer"):
        restore_backup(bad, tmp_path / "dst")
    assert not (tmp_path / "dst").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".dst")]


def test_damaged_member_is_refused(archive: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.tar"
    rewrite(archive, bad, {"config.toml": b"[node]\nlog_level = 'debug'\n"})
    with pytest.raises(BackupError, match=r"'config\.toml' is damaged"):
        restore_backup(bad, tmp_path / "dst")
    assert not (tmp_path / "dst").exists()


@pytest.mark.parametrize("name", ["../evil", "/etc/evil", "ipfs/x", "keys/../../evil"])
def test_hostile_member_names_are_refused(archive: Path, tmp_path: Path, name: str) -> None:
    bad = tmp_path / "bad.tar"
    rewrite(archive, bad, {name: b"x"})
    with pytest.raises(BackupError, match="refusing archive member"):
        restore_backup(bad, tmp_path / "dst")
    assert not (tmp_path / "evil").exists() and not (tmp_path / "dst").exists()


def test_links_are_refused(archive: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.tar"
    with tarfile.open(archive) as src, tarfile.open(bad, "w") as dst:
        for m in src.getmembers():
            if m.name == "manifest.json":
                link = tarfile.TarInfo("keys/link")
                link.type = tarfile.SYMTYPE
                link.linkname = "/etc/passwd"
                dst.addfile(link)
            dst.addfile(m, src.extractfile(m))
    with pytest.raises(BackupError, match="not a regular file"):
        restore_backup(bad, tmp_path / "dst")


def test_not_a_backup(tmp_path: Path) -> None:
    junk = tmp_path / "junk.tar"
    with tarfile.open(junk, "w") as t:
        add(t, "hello.txt", b"hi")
    with pytest.raises(BackupError, match="not an odf-node backup"):
        restore_backup(junk, tmp_path / "dst")
    (tmp_path / "text").write_text("not a tar")
    with pytest.raises(BackupError, match="cannot read the backup"):
        restore_backup(tmp_path / "text", tmp_path / "dst")


def test_state_copy_is_consistent_while_another_connection_writes(tmp_path: Path) -> None:
    """The online backup copies a committed state: an open write transaction is not in it."""
    src = make_home(tmp_path / "src", subscriptions=5)
    writer = sqlite3.connect(src.path / "state.db", isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute(
        "INSERT INTO subscriptions (did, created_ns, updated_ns) VALUES ('did:odf:x', 0, 0)"
    )
    try:
        summary = write_backup(src.path, tmp_path / "b.tar", datasets=False)
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert summary.subscriptions == 5


def test_thousand_subscriptions_round_trip_quickly(tmp_path: Path) -> None:
    """The suite's small twin of ``make bench-backup``: 1,000 subscriptions, state only."""
    home = NodeHome(tmp_path / "src")
    home.init()
    followed = sorted(did() for _ in range(1000))
    with NodeState.open(home.path / "state.db", time.time_ns) as st, st.batch():
        for d in followed:
            st.subscribe(d, None, None)
    summary = write_backup(home.path, tmp_path / "b.tar", datasets=False)
    assert summary.subscriptions == 1000
    assert summary.seconds < 10  # the bound; ~0.1 s measured
    restore_backup(tmp_path / "b.tar", tmp_path / "dst")
    with NodeState.open(tmp_path / "dst" / "state.db", time.time_ns) as st:
        assert sorted(s.did for s in st.subscriptions()) == followed
