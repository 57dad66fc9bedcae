"""Backups of a node home and their restore (``node/adapters/backup_archive.py``,
docs/backup.md), offline:
the round trip keeps the node id, state, keys (mode 0600) and datasets with their heads; a
restore refuses an existing home, an unknown newer format, a newer state schema, a damaged or
hostile archive, and leaves nothing behind when it refuses."""

from __future__ import annotations

import hashlib
import io
import json
import sqlite3
import stat
import tarfile
import time
from pathlib import Path

import pytest

from coordinator.errors import OdfNodeError
from coordinator.identity import generate_private_key
from node.adapters.backup_archive import (
    FORMAT_VERSION,
    HEADER,
    BackupError,
    BackupFormatTooNew,
    MalformedArchive,
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


# ---- hostile archives (issue 39): each refused as a typed error naming the member, before
# it writes what it declares, and never as a Python traceback from the CLI.


def gnu_sparse_header(name: str, stored: int, realsize: int) -> bytes:
    """A GNU tar header of a sparse member (type ``S``): ``stored`` bytes in the archive, read
    back as ``realsize`` bytes (holes of zeros before them). tarfile reads these but cannot
    write them."""
    h = bytearray(512)

    def put(off: int, data: bytes) -> None:
        h[off : off + len(data)] = data

    put(0, name.encode())
    put(100, b"0000644\0")
    put(108, b"0000000\0")
    put(116, b"0000000\0")
    put(124, b"%011o\0" % stored)
    put(136, b"%011o\0" % 0)
    put(148, b" " * 8)
    put(156, b"S")
    put(257, b"ustar  \0")  # the GNU magic
    put(386, b"%011o\0" % (realsize - stored))  # one data run at the end of the file
    put(398, b"%011o\0" % stored)
    put(483, b"%011o\0" % realsize)
    put(148, b"%06o\0 " % sum(h))
    return bytes(h)


def insert_before_manifest(archive: Path, out: Path, raw: bytes) -> None:
    """Copy ``archive`` to ``out`` with raw tar blocks ``raw`` placed before the manifest."""
    with tarfile.open(archive) as t:
        manifest = t.getmember("manifest.json")
    data = archive.read_bytes()
    out.write_bytes(data[: manifest.offset] + raw + data[manifest.offset :])


def test_a_gnu_sparse_member_is_refused_before_it_is_written(archive: Path, tmp_path: Path) -> None:
    """A 2 KB member that tarfile expands to 64 MiB of zeros (the issue's 10 KB archive wrote
    2 GiB before the manifest check): refused by its type, nothing of it written."""
    bad = tmp_path / "sparse.tar"
    name = "datasets/sparse"
    insert_before_manifest(archive, bad, gnu_sparse_header(name, 512, 64 << 20) + b"x" * 512)
    with tarfile.open(bad) as t:
        assert t.getmember(name).size == 64 << 20  # what an extraction would write
    with pytest.raises(MalformedArchive, match="a GNU sparse file, not a regular file") as e:
        restore_backup(bad, tmp_path / "dst")
    assert e.value.member == name and isinstance(e.value, OdfNodeError)
    assert not (tmp_path / "dst").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".dst")]


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        (tarfile.CHRTYPE, "a character device"),
        (tarfile.BLKTYPE, "a block device"),
        (tarfile.FIFOTYPE, "a FIFO"),
        (tarfile.LNKTYPE, "a hard link"),
        (tarfile.DIRTYPE, "a directory"),
        (tarfile.CONTTYPE, "a contiguous file"),
    ],
)
def test_special_members_are_refused_by_kind(
    archive: Path, tmp_path: Path, kind: bytes, words: str
) -> None:
    bad = tmp_path / "bad.tar"
    with tarfile.open(archive) as src, tarfile.open(bad, "w", format=tarfile.GNU_FORMAT) as dst:
        for m in src.getmembers():
            if m.name == "manifest.json":
                special = tarfile.TarInfo("keys/special")
                special.type = kind
                special.linkname = "../../../etc/passwd"
                special.size = 4 if kind == tarfile.CONTTYPE else 0
                dst.addfile(special, io.BytesIO(b"abcd") if special.size else None)
            dst.addfile(m, src.extractfile(m))
    with pytest.raises(MalformedArchive, match=f"'keys/special': {words}, not a regular") as e:
        restore_backup(bad, tmp_path / "dst")
    assert e.value.member == "keys/special"


def test_a_member_larger_than_listed_is_refused_before_it_is_written(
    archive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from node.adapters import backup_archive as backup

    written: list[str] = []
    real = backup._extract
    monkeypatch.setattr(
        backup, "_extract", lambda tar, m, root: written.append(m.name) or real(tar, m, root)
    )
    bad = tmp_path / "bad.tar"
    rewrite(archive, bad, {"config.toml": b"x" * 100_000})
    with pytest.raises(MalformedArchive, match=r"'config\.toml' is damaged: 100000 bytes") as e:
        restore_backup(bad, tmp_path / "dst")
    assert e.value.member == "config.toml" and "config.toml" not in written


def manifest_of(archive: Path) -> dict[str, object]:
    with tarfile.open(archive) as t:
        f = t.extractfile("manifest.json")
        assert f is not None
        return json.loads(f.read())  # type: ignore[no-any-return]


def test_the_manifest_is_parsed_with_bounded_memory(archive: Path, tmp_path: Path) -> None:
    """4 MB of tiny objects in the file list: json.loads held ~1.4 M dicts (the issue's 48 MB
    manifest took 1.3 GB); entry by entry, the first bad one ends the parse."""
    import tracemalloc

    from node.adapters.backup_archive import _parse_manifest

    text = '{"files": [' + ",".join(["{}"] * 1_400_000) + "]}"
    tracemalloc.start()
    try:
        with pytest.raises(MalformedArchive, match=r"files\[0\] has no path"):
            _parse_manifest(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak
    # A well-formed manifest reads back its files and scalars.
    manifest = manifest_of(archive)
    fields, files = _parse_manifest(json.dumps(manifest, indent=1))
    assert files is not None and set(files) == {f["path"] for f in manifest["files"]}  # type: ignore[attr-defined]
    assert fields["node_id"] == manifest["node_id"]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"files": ' + "[" * 100_000 + "]" * 100_000 + "}", r"files\[0\] is not an object"),
        ('{"files": [], "node_id": ' + "[" * 100_000 + "}", "'node_id' is not a string"),
        ('{"files": [{"path": {"a": 1}}]}', "not a flat object|files\\[0\\]"),
        ('{"files": [{"path": "x", "size": "1", "sha256": "0"}]}', "'x' has no size"),
        ('{"files": [], "files": []}', "appears twice"),
        ('{"files": []} trailing', "data after the object"),
        ("[]", "expected '{'"),
        ('{"state_schema_version": 9' + "9" * 5000 + ', "files": []}', "state_schema_version"),
    ],
)
def test_a_hostile_manifest_is_a_typed_error(
    archive: Path, tmp_path: Path, text: str, words: str
) -> None:
    bad = tmp_path / "bad.tar"
    rewrite(archive, bad, {"manifest.json": text.encode()})
    with pytest.raises(MalformedArchive, match=words) as e:
        restore_backup(bad, tmp_path / "dst")
    assert e.value.member in ("manifest.json", "x")


def hostile_archives(archive: Path, tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Malformed archives that once raised past the CLI (a Python traceback), by the member
    the error must name."""
    out: dict[str, tuple[Path, str]] = {}
    sparse = tmp_path / "sparse.tar"
    insert_before_manifest(
        archive, sparse, gnu_sparse_header("datasets/s", 512, 1 << 20) + bytes(512)
    )
    out["sparse"] = (sparse, "datasets/s")
    deep = tmp_path / "deep.tar"
    rewrite(archive, deep, {"manifest.json": b'{"files": ' + b"[" * 100_000 + b"}"})
    out["deep manifest"] = (deep, "manifest.json")
    deep_header = tmp_path / "deep-header.tar"
    rewrite(archive, deep_header, {HEADER: b"[" * 4000})
    out["deep header"] = (deep_header, HEADER)
    schema = manifest_of(archive)
    schema["state_schema_version"] = "9"
    typed = tmp_path / "schema.tar"
    rewrite(archive, typed, {"manifest.json": json.dumps(schema).encode()})
    out["schema not a number"] = (typed, "manifest.json")
    # The same name twice, both listed sizes right: the second used to hit O_EXCL.
    dup = tmp_path / "dup.tar"
    with tarfile.open(archive) as src, tarfile.open(dup, "w") as dst:
        for m in src.getmembers():
            dst.addfile(m, src.extractfile(m))
            if m.name == "config.toml":
                dst.addfile(m, src.extractfile(m))
    out["duplicate"] = (dup, "config.toml")
    # A file where a directory must be: "keys" as a file before keys/node.key.
    clash = tmp_path / "clash.tar"
    manifest = manifest_of(archive)
    manifest["files"].insert(  # type: ignore[attr-defined]
        0, {"path": "keys", "size": 1, "sha256": hashlib.sha256(b"k").hexdigest()}
    )
    with tarfile.open(archive) as src, tarfile.open(clash, "w") as dst:
        for m in src.getmembers():
            if m.name == "config.toml":
                add(dst, "keys", b"k")
            if m.name == "manifest.json":
                add(dst, "manifest.json", json.dumps(manifest).encode())
                continue
            dst.addfile(m, src.extractfile(m))
    out["file for a directory"] = (clash, "keys/node.key")
    # Listed with the right size and hash, but not what its name says.
    for name, junk in (("state.db", b"not a database" * 100), ("keys/node.key", b"not a key")):
        relisted = manifest_of(archive)
        for f in relisted["files"]:  # type: ignore[attr-defined]
            if f["path"] == name:
                f.update(size=len(junk), sha256=hashlib.sha256(junk).hexdigest())
        path = tmp_path / f"junk-{name.replace('/', '-')}.tar"
        rewrite(archive, path, {name: junk, "manifest.json": json.dumps(relisted).encode()})
        out[f"junk {name}"] = (path, name)
    # Cut short inside a member's data.
    cut = tmp_path / "cut.tar"
    with tarfile.open(archive) as t:
        state = t.getmember("state.db")
    cut.write_bytes(archive.read_bytes()[: state.offset_data + 1000])
    out["truncated"] = (cut, "state.db")
    return out


def test_malformed_archives_are_typed_errors_naming_the_member(
    archive: Path, tmp_path: Path
) -> None:
    for what, (path, member) in hostile_archives(archive, tmp_path).items():
        with pytest.raises(MalformedArchive) as e:
            restore_backup(path, tmp_path / "dst")
        assert isinstance(e.value, OdfNodeError), what
        if member:
            assert e.value.member == member, (what, e.value.member, str(e.value))
        assert not (tmp_path / "dst").exists(), what


def test_the_cli_prints_no_traceback_for_a_malformed_archive(archive: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from node.cli import app

    for what, (path, _member) in hostile_archives(archive, tmp_path).items():
        result = CliRunner().invoke(app, ["restore", str(path), "--home", str(tmp_path / "dst")])
        assert result.exit_code == 1, (what, result.output)
        # A handled error ends in SystemExit; anything else escaped the CLI as a traceback.
        assert isinstance(result.exception, SystemExit), (what, result.exception)
        assert "Traceback" not in result.output, what


def test_a_backup_no_restore_would_read_is_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from node.adapters import backup_archive as backup

    src = make_home(tmp_path / "src", subscriptions=0)
    monkeypatch.setattr(backup, "MAX_MANIFEST_BYTES", 200)
    with pytest.raises(BackupError, match=r"more than a restore reads \(200\)"):
        write_backup(src.path, tmp_path / "b.tar", datasets=True)
    assert [p.name for p in tmp_path.iterdir()] == ["src"]  # no archive, no partial file


def extended_header(kind: bytes, declared: int, name: str = "././@LongLink") -> bytes:
    """One raw 512-byte header block of type ``kind`` declaring ``declared`` bytes of data
    (base-256 when too large for octal), with a correct checksum; the data is not there."""
    block = bytearray(tarfile.BLOCKSIZE)
    block[:100] = name.encode().ljust(100, b"\0")
    block[100:108] = b"0000644\0"
    block[108:116] = b"0000000\0"
    block[116:124] = b"0000000\0"
    if declared < 8**11:
        block[124:136] = f"{declared:011o}\0".encode()
    else:
        block[124:136] = b"\x80" + declared.to_bytes(11, "big")
    block[136:148] = b"00000000000\0"
    block[156:157] = kind
    block[257:265] = b"ustar  \0"
    block[148:156] = b" " * 8
    block[148:156] = f"{sum(block):06o}\0 ".encode()
    return bytes(block)


@pytest.mark.parametrize(
    ("kind", "declared", "words"),
    [
        (tarfile.GNUTYPE_LONGNAME, 8**11 - 1, "a GNU long-name header of 8589934591 bytes"),
        (tarfile.GNUTYPE_LONGLINK, 1 << 40, "a GNU long-link header of 1099511627776 bytes"),
        (tarfile.XHDTYPE, 1 << 40, "a pax extended header of 1099511627776 bytes"),
        (tarfile.XGLTYPE, 1 << 33, "a pax global header of 8589934592 bytes"),
    ],
)
def test_a_huge_extended_header_is_refused_before_it_is_read(
    archive: Path, tmp_path: Path, kind: bytes, declared: int, words: str
) -> None:
    """A few KB on disk declaring a pax or GNU long-name header of GiBs: tarfile reads such a
    header whole into memory (an 8 GiB or 1 TiB read) while parsing the member after it; the
    restore refuses it from its raw block, naming the member, before tarfile sees it."""
    bad = tmp_path / "huge-header.tar"
    insert_before_manifest(archive, bad, extended_header(kind, declared) + b"x" * 1024)
    with pytest.raises(MalformedArchive, match=words) as e:
        restore_backup(bad, tmp_path / "dst")
    assert e.value.member == "././@LongLink"
    assert "at most 65536" in str(e.value)
    assert not (tmp_path / "dst").exists()


def test_a_huge_extended_header_first_or_chained_is_refused(archive: Path, tmp_path: Path) -> None:
    """The first member (parsed by tarfile.open itself) and a huge GNU long name chained
    after a small valid pax header are checked too; a small long-name header still restores."""
    data = archive.read_bytes()
    first = tmp_path / "first.tar"
    first.write_bytes(extended_header(tarfile.XHDTYPE, 1 << 40, "PaxHeader/x") + data)
    with pytest.raises(MalformedArchive, match="a pax extended header of") as e:
        read_header(first)
    assert e.value.member == "PaxHeader/x"
    pax = b"20 comment=aaaaaaaa\n"
    chained = tmp_path / "chained.tar"
    insert_before_manifest(
        archive,
        chained,
        extended_header(tarfile.XHDTYPE, len(pax), "PaxHeader/y")
        + pax.ljust(512, b"\0")
        + extended_header(tarfile.GNUTYPE_LONGNAME, 1 << 36),
    )
    with pytest.raises(MalformedArchive, match="a GNU long-name header of 68719476736") as e:
        restore_backup(chained, tmp_path / "dst")
    assert e.value.member == "././@LongLink"
    # A long name the ordinary way (a GNU long-name header of a few hundred bytes) passes the
    # check: tarfile reads it, and the member is refused by its long name (not listed).
    long_name = "datasets/" + "n" * 300
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        add(t, long_name, b"x")
    small = tmp_path / "small-long-name.tar"
    insert_before_manifest(archive, small, buf.getvalue().rstrip(b"\0").ljust(2048, b"\0"))
    with pytest.raises(MalformedArchive, match="is not in the manifest") as e:
        restore_backup(small, tmp_path / "dst")
    assert e.value.member == long_name
