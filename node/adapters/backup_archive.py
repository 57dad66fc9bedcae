"""Backups of a node home, and their restore into a new home (docs/backup.md).

An archive is a POSIX tar file (uncompressed: parquet data does not compress, and a node key
is never worth a compression oracle). Its members, in order:

* ``odf-node-backup.json``: ``{"format": "odf-node-backup", "version": 1}``, first, so a restore
  refuses an archive of an unknown newer format before it reads anything else;
* ``config.toml``, ``keys/node.key``, ``keys/datasets/<did>.key`` (the keys of owned datasets),
  ``keys/retired/<did>.key`` (node keys retired by ``odf-node key rotate``);
* ``state.db``: a consistent copy of the state database (subscriptions, accepted heads,
  verifications, attestations, disputes, equivocation proofs, peers, events, work items) made
  with SQLite's online backup API, so it is taken while a daemon writes;
* with ``datasets=True``, ``datasets/<did>/...``: every dataset in kamu's layout; each dataset's
  ``refs/head`` is read before its other files, and blocks, data and checkpoints are immutable
  once written (a commit writes them before it moves the head), so the copy holds a complete
  chain even while a daemon commits;
* ``manifest.json``, last: the node id, the state schema version, counts, each dataset's head
  and the size and sha256 of every member before it. A restore checks them all.

Not included: the embedded IPFS repository (``ipfs/``: content the restored node republishes
from its datasets), the RPC cookie and socket, locks and logs.

A restore reads the archive twice. The first pass reads the members' headers only and the
manifest (parsed entry by entry: bounded memory and depth, at most ``MAX_MANIFEST_BYTES``).
Before tarfile parses a header, the raw 512-byte blocks of any pax extended or GNU
long-name/long-link headers are checked: one declaring more than ``MAX_EXTENDED_HEADER_BYTES``
is refused (tarfile reads them whole into memory).
The second extracts into a staging directory next to the target, checking every member against
the manifest *before* writing it: a plain regular file (no links, devices, FIFOs, directories or
sparse files) under the names above (no absolute or ``..`` paths), listed, once, with the listed
size; its sha256 as it is written. It gives keys mode 0600 and their directories 0700, opens
the state database once (which migrates an older schema and refuses a newer one), then renames
the staging directory to the target: an interrupted restore leaves no half-made home. It
refuses a target that exists and is not empty. Anything wrong with the archive is a
:class:`MalformedArchive` naming the member.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import shutil
import sqlite3
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any, Final, cast

from coordinator.errors import INVALID_INPUT, OdfNodeError
from coordinator.identity import load_private_key
from coordinator.storage.fs import (
    PENDING_PREFIX,
    can_sync_filesystem,
    fsync_dir,
    sync_filesystem,
)
from node.app.results import BackupResult, RestoreResult
from node.home import NodeHome

FORMAT: Final = "odf-node-backup"
FORMAT_VERSION: Final = 1
"""The archive format this code writes and the newest it reads."""
HEADER: Final = "odf-node-backup.json"
MANIFEST: Final = "manifest.json"
_CHUNK = 1 << 20


class BackupError(OdfNodeError):
    """A backup could not be written, or an archive cannot be restored (names the reason)."""

    rpc_code = INVALID_INPUT


class BackupFormatTooNew(BackupError):
    """The archive was written by a newer odf-node in a format this one does not read."""

    def __init__(self, found: int) -> None:
        super().__init__(
            f"backup format version {found} is newer than this odf-node reads "
            f"({FORMAT_VERSION}); restore it with a newer odf-node"
        )
        self.found = found


# ---- backup


def write_backup(
    home: Path, file: Path, *, datasets: bool, clock: Callable[[], int] = time.time_ns
) -> BackupResult:
    """Write a backup of ``home`` to ``file`` (refuses an existing file); see the module doc.

    The archive is written to a temporary name next to ``file`` and renamed when complete, so a
    failed backup leaves no partial archive under the name.
    """
    t0 = time.monotonic()
    h = NodeHome(home)
    if not h.node_key_path.is_file():
        raise BackupError(f"{home} is not a node home (no keys/node.key)")
    if file.exists():
        raise BackupError(f"{file} exists: a backup never overwrites a file")
    file.parent.mkdir(parents=True, exist_ok=True)
    node_id = h.node_key().dataset_id().as_did_key()
    fd, tmp_name = tempfile.mkstemp(prefix=f".{file.name}.", suffix=".partial", dir=file.parent)
    tmp = Path(tmp_name)
    try:
        with (
            tempfile.TemporaryDirectory(prefix=".odf-backup-", dir=file.parent) as scratch,
            os.fdopen(fd, "wb") as raw,
            tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar,
        ):
            summary = _write_members(
                tar, h, Path(scratch), file, node_id, datasets=datasets, clock=clock
            )
        _publish_archive(tmp, file)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return dataclasses.replace(summary, seconds=round(time.monotonic() - t0, 3))


def _write_members(
    tar: tarfile.TarFile,
    h: NodeHome,
    scratch: Path,
    file: Path,
    node_id: str,
    *,
    datasets: bool,
    clock: Callable[[], int],
) -> BackupResult:
    """Every member in the documented order, the manifest last; the backup's summary (its
    ``seconds`` left for the caller to fill)."""
    _add_bytes(
        tar, HEADER, json.dumps({"format": FORMAT, "version": FORMAT_VERSION}).encode(), 0o644
    )
    files: list[dict[str, Any]] = []
    owned_keys = _add_keys(tar, files, h)
    state = _snapshot_state(h.path / "state.db", scratch / "state.db")
    if state is not None:
        _add_file(tar, files, "state.db", scratch / "state.db", 0o600)
    stored = _add_datasets(tar, files, h) if datasets else []
    summary = BackupResult(
        file=str(file),
        format_version=FORMAT_VERSION,
        node_id=node_id,
        state_schema_version=state["schema_version"] if state else 0,
        subscriptions=state["subscriptions"] if state else 0,
        attestations=state["attestations"] if state else 0,
        disputes=state["disputes"] if state else 0,
        datasets=stored,
        owned_dataset_keys=owned_keys,
        files=len(files),
        bytes=sum(int(f["size"]) for f in files),
        seconds=0.0,
    )
    _add_manifest(tar, summary, files, datasets_included=datasets, created_ns=clock())
    return summary


def _add_keys(tar: tarfile.TarFile, files: list[dict[str, Any]], h: NodeHome) -> int:
    """The config and every key (mode 0600); the number of owned dataset keys."""
    _add_file(tar, files, "config.toml", h.config_path, 0o600)
    _add_file(tar, files, "keys/node.key", h.node_key_path, 0o600)
    keys = sorted(h.dataset_keys_path.glob("*.key"))
    for key in keys:
        _add_file(tar, files, f"keys/datasets/{key.name}", key, 0o600)
    # Retired node keys (odf-node key rotate): the restored node can still revoke them.
    for key in sorted((h.path / "keys" / "retired").glob("*.key")):
        _add_file(tar, files, f"keys/retired/{key.name}", key, 0o600)
    return len(keys)


def _add_manifest(
    tar: tarfile.TarFile,
    summary: BackupResult,
    files: list[dict[str, Any]],
    *,
    datasets_included: bool,
    created_ns: int,
) -> None:
    """The last member: the summary's facts and every member before it, refused when larger
    than a restore reads."""
    manifest = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "created_ns": created_ns,
        "node_id": summary.node_id,
        "state_schema_version": summary.state_schema_version,
        "subscriptions": summary.subscriptions,
        "attestations": summary.attestations,
        "disputes": summary.disputes,
        "datasets_included": datasets_included,
        "datasets": summary.datasets,
        "owned_dataset_keys": summary.owned_dataset_keys,
        "files": files,
    }
    body = json.dumps(manifest, indent=1).encode()
    if len(body) > MAX_MANIFEST_BYTES:
        raise BackupError(
            f"{len(files)} files make a {MANIFEST} of {len(body)} bytes, more than a "
            f"restore reads ({MAX_MANIFEST_BYTES}); back up without --datasets"
        )
    _add_bytes(tar, MANIFEST, body, 0o644)


def _publish_archive(tmp: Path, file: Path) -> None:
    """Make the complete archive at ``tmp`` durable and private, then rename it to ``file``."""
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.chmod(tmp, 0o600)  # it holds private keys
    if file.exists():
        raise BackupError(f"{file} appeared while the backup was written; not replaced")
    os.replace(tmp, file)
    fsync_dir(file.parent)


def _snapshot_state(src: Path, dest: Path) -> dict[str, int] | None:
    """A consistent copy of the state database (SQLite online backup) and its counts; ``None``
    when the home has none yet."""
    if not src.is_file():
        return None
    source = sqlite3.connect(str(src), timeout=30)
    try:
        target = sqlite3.connect(str(dest))
        try:
            # One step (pages=-1): one read transaction, so the copy is one consistent state;
            # in WAL mode the daemon's writer goes on meanwhile.
            source.backup(target)
            # A single self-contained file: no -wal beside it in the archive.
            target.execute("PRAGMA journal_mode=DELETE")
            version = int(target.execute("PRAGMA user_version").fetchone()[0])
            counts = {"schema_version": version}
            for table in ("subscriptions", "attestations", "disputes"):
                try:
                    row = target.execute(f"SELECT count(*) FROM {table}").fetchone()
                    counts[table] = int(row[0])
                except sqlite3.OperationalError:
                    counts[table] = 0  # an empty database (schema not created yet)
            return counts
        finally:
            target.close()
    except sqlite3.Error as e:
        raise BackupError(f"could not copy the state database {src}: {e}") from e
    finally:
        source.close()


def _add_datasets(
    tar: tarfile.TarFile, files: list[dict[str, Any]], h: NodeHome
) -> list[dict[str, str | None]]:
    stored: list[dict[str, str | None]] = []
    for handle in h.repository().list():
        root = handle.root
        name = root.name
        head_path = root / "refs" / "head"
        try:
            head: bytes | None = head_path.read_bytes()  # first: everything it names exists
        except FileNotFoundError:
            head = None
        for path in sorted(_walk(root)):
            rel = path.relative_to(root).as_posix()
            if rel == "refs/head":
                continue
            with contextlib.suppress(FileNotFoundError):  # a pending file renamed meanwhile
                _add_file(tar, files, f"datasets/{name}/{rel}", path, 0o644)
        if head is not None:
            _add_bytes(tar, f"datasets/{name}/refs/head", head, 0o644, files)
        stored.append(
            {
                "id": handle.id.as_did_str(),
                "alias": handle.alias,
                "head": head.decode("utf-8", "replace").strip() if head is not None else None,
            }
        )
    return stored


def _walk(root: Path) -> Iterator[Path]:
    """Regular files under ``root``, without the repository's pending (temporary) files."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(PENDING_PREFIX)]
        for f in filenames:
            if not f.startswith(PENDING_PREFIX):
                p = Path(dirpath) / f
                if p.is_file() and not p.is_symlink():
                    yield p


class _Hashing(io.RawIOBase):
    """Reads ``size`` bytes of a file, hashing them (tarfile copies exactly the declared size)."""

    def __init__(self, f: IO[bytes]) -> None:
        self._f = f
        self.sha256 = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self.sha256.update(data)
        return data


def _add_file(
    tar: tarfile.TarFile, files: list[dict[str, Any]], name: str, path: Path, mode: int
) -> None:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        info = _info(name, size, mode)
        reader = _Hashing(f)
        tar.addfile(info, reader)
    files.append({"path": name, "size": size, "sha256": reader.sha256.hexdigest()})


def _add_bytes(
    tar: tarfile.TarFile,
    name: str,
    data: bytes,
    mode: int,
    files: list[dict[str, Any]] | None = None,
) -> None:
    tar.addfile(_info(name, len(data), mode), io.BytesIO(data))
    if files is not None:
        files.append({"path": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})


def _info(name: str, size: int, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = mode
    info.mtime = int(time.time())
    return info


# ---- restore

#: The most bytes a manifest may have: ~283 bytes a dataset file, so ~470,000 files (a node
#: with 1,000 datasets of ~100 blocks and parts each holds ~200,000). It is parsed entry by
#: entry (below): a restore's memory is about this plus ~300 bytes a listed file. A backup
#: whose manifest would be larger is refused when it is written, never made unrestorable.
MAX_MANIFEST_BYTES: Final = 128 << 20
#: The most members (and manifest entries) an archive may have.
MAX_MEMBERS: Final = 1_000_000
#: The most bytes one manifest entry (``{"path", "size", "sha256"}``) may have.
_MAX_ENTRY_CHARS: Final = 4096
#: The most bytes one pax extended header or GNU long-name/long-link member may declare.
#: tarfile reads such a header whole into memory while it parses the member that follows
#: (a 10 KB archive may declare 8 GiB), so its size is checked in the raw 512-byte block
#: first. A backup writes pax headers only for names and sizes: a few hundred bytes.
MAX_EXTENDED_HEADER_BYTES: Final = 64 << 10
#: The most extended headers one member may have before its own header (a backup writes one).
_MAX_EXTENDED_CHAIN: Final = 8
#: Types of the headers tarfile reads whole before the member they describe.
_EXTENDED: Final = {
    tarfile.XHDTYPE: "a pax extended header",
    tarfile.XGLTYPE: "a pax global header",
    tarfile.SOLARIS_XHDTYPE: "a Solaris extended header",
    tarfile.GNUTYPE_LONGNAME: "a GNU long-name header",
    tarfile.GNUTYPE_LONGLINK: "a GNU long-link header",
}
#: The member types a backup writes: regular files only.
_REGULAR: Final = (tarfile.REGTYPE, tarfile.AREGTYPE)
_KINDS: Final = {
    tarfile.SYMTYPE: "a symbolic link",
    tarfile.LNKTYPE: "a hard link",
    tarfile.CHRTYPE: "a character device",
    tarfile.BLKTYPE: "a block device",
    tarfile.FIFOTYPE: "a FIFO",
    tarfile.DIRTYPE: "a directory",
    tarfile.CONTTYPE: "a contiguous file",
    tarfile.GNUTYPE_SPARSE: "a GNU sparse file",
}


class MalformedArchive(BackupError):
    """An archive that is not a backup this node restores; ``member`` names the archive member
    at fault (``None``: the archive as a whole)."""

    def __init__(self, member: str | None, reason: str) -> None:
        super().__init__(reason)
        self.member = member


@dataclass(frozen=True)
class _Listed:
    """A file the manifest lists: its size and sha256 (hex)."""

    size: int
    sha256: str


def read_header(archive: Path) -> int:
    """The format version of ``archive`` (:class:`BackupFormatTooNew` when newer than ours)."""
    with _open(archive) as tar:
        return _check_header(tar, _next(tar, None))


def restore_backup(archive: Path, target: Path) -> RestoreResult:
    """Restore ``archive`` into the new home ``target`` (see the module docstring).

    Two passes over the archive: the first reads only the members' headers and the manifest
    (the last member) and writes nothing; the second checks each member against the manifest
    (a regular file, listed once, of the listed size) *before* writing it, and its sha256 as it
    is written. So a hostile archive writes at most its own listed bytes before it is refused
    (a GNU sparse member once expanded 10 KB into 2 GiB before any check).

    Raises:
        BackupError: the target exists and is not empty, and (:class:`MalformedArchive`,
            naming the member) anything wrong with the archive; :class:`BackupFormatTooNew`.
    """
    from node.state import LATEST_VERSION

    target = target.absolute()
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise BackupError(
            f"refusing to restore into {target}: it exists and is not empty "
            "(a restore never overwrites a home)"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.restore-", dir=target.parent))
    try:
        version, manifest, listed = _read_manifest_pass(archive)
        schema = manifest["state_schema_version"]
        if schema > LATEST_VERSION:
            raise BackupError(
                f"the backup's state schema version {schema} is newer than this odf-node "
                f"knows ({LATEST_VERSION}); restore it with a newer odf-node"
            )
        files = _extract_pass(archive, staging, listed)
        node_id, subscriptions, datasets = _check_home(archive, staging, manifest)
        _fsync_tree(staging)
        if target.exists():
            target.rmdir()  # empty, checked above
        os.replace(staging, target)
        fsync_dir(target.parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return RestoreResult(
        home=str(target),
        node_id=node_id,
        format_version=version,
        state_schema_version=schema,
        subscriptions=subscriptions,
        datasets=datasets,
        files=files,
    )


def _read_manifest_pass(archive: Path) -> tuple[int, dict[str, Any], dict[str, _Listed]]:
    """First pass: the header's format version, the manifest and its file list (by path)."""
    with _open(archive) as tar:
        version = _check_header(tar, _next(tar, None))
        manifest: dict[str, Any] | None = None
        count = 0
        last = HEADER
        while (member := _next(tar, last)) is not None:
            last = member.name
            _forget_headers(tar)
            count += 1
            if count > MAX_MEMBERS:
                raise MalformedArchive(None, f"{archive}: more than {MAX_MEMBERS} members")
            if manifest is not None:
                raise MalformedArchive(
                    member.name, f"{archive}: a member follows {MANIFEST}: {member.name!r}"
                )
            if member.name == MANIFEST:
                _check_regular(member)
                manifest, listed = _read_manifest(tar, member)
    if manifest is None:
        raise MalformedArchive(MANIFEST, f"{archive}: no {MANIFEST} (an incomplete archive?)")
    return version, manifest, listed


def _extract_pass(archive: Path, staging: Path, listed: dict[str, _Listed]) -> int:
    """Second pass: extract each member checked against the manifest; the files written."""
    seen: set[str] = set()
    with _open(archive) as tar:
        last = HEADER
        _next(tar, None)  # the header, checked by the first pass
        while (member := _next(tar, last)) is not None:
            last = member.name
            _forget_headers(tar)
            if member.name == MANIFEST:
                break  # the last member (first pass)
            name = member.name
            _safe_name(name)
            _check_regular(member)
            want = listed.get(name)
            if want is None:
                raise MalformedArchive(name, f"archive member {name!r} is not in the manifest")
            if name in seen:
                raise MalformedArchive(name, f"archive member {name!r} appears twice")
            if member.size != want.size:  # before a byte of it is written
                raise MalformedArchive(
                    name,
                    f"archive member {name!r} is damaged: {member.size} bytes, the manifest "
                    f"says {want.size}",
                )
            got = _extract(tar, member, staging)
            if got != want:
                raise MalformedArchive(
                    name, f"archive member {name!r} is damaged (size or sha256 differ)"
                )
            seen.add(name)
    missing = sorted(set(listed) - seen)
    if missing:
        raise MalformedArchive(
            missing[0], f"the archive does not match its manifest: missing {missing[:5]}"
        )
    return len(seen)


def _check_home(archive: Path, staging: Path, manifest: dict[str, Any]) -> tuple[str, int, int]:
    """The restored home holds a node key (the manifest's) and a config, and its state opens
    (migrating an older schema); the node id, subscriptions and datasets."""
    from node.state import NodeState

    home = NodeHome(staging)
    if not home.node_key_path.is_file() or not home.config_path.is_file():
        raise MalformedArchive(None, f"{archive}: no keys/node.key or config.toml")
    try:
        node_id = load_private_key(home.node_key_path).dataset_id().as_did_key()
    except (OdfNodeError, OSError, ValueError) as e:
        raise MalformedArchive("keys/node.key", f"{archive}: keys/node.key: {e}") from e
    if node_id != manifest.get("node_id"):
        raise MalformedArchive(
            "keys/node.key",
            f"{archive}: its node key is {node_id}, the manifest says {manifest.get('node_id')}",
        )
    home.init()  # the directories a backup without datasets lacks; modes 0700
    subscriptions = 0
    if (staging / "state.db").is_file():
        # Opens (and migrates an older schema) now, so a bad file fails the restore.
        try:
            with NodeState.open(staging / "state.db", time.time_ns) as st:
                subscriptions = st.subscription_count()
        except (OdfNodeError, sqlite3.Error, OSError, ValueError) as e:
            raise MalformedArchive("state.db", f"{archive}: state.db does not open: {e}") from e
    try:
        datasets = sum(1 for _ in home.repository().list())
    except (OdfNodeError, OSError, ValueError) as e:
        raise MalformedArchive("datasets", f"{archive}: the datasets do not load: {e}") from e
    return node_id, subscriptions, datasets


@contextlib.contextmanager
def _open(archive: Path) -> Iterator[tarfile.TarFile]:
    try:
        raw = open(archive, "rb")  # noqa: SIM115 (closed by the with below)
    except OSError as e:
        raise MalformedArchive(None, f"cannot read the backup {archive}: {e}") from e
    with raw:
        # tarfile.open parses the first member: its extended headers are checked before.
        _check_extended_headers(raw, 0, None)
        raw.seek(0)
        try:
            tar = tarfile.open(fileobj=raw, mode="r:")  # noqa: SIM115 (closed below)
        except (OSError, tarfile.TarError) as e:
            raise MalformedArchive(None, f"cannot read the backup {archive}: {e}") from e
        with tar:
            yield tar


def _next(tar: tarfile.TarFile, after: str | None) -> tarfile.TarInfo | None:
    """The next member's header; a header tarfile cannot read (or the end of the data of the
    member ``after``, which it skips) is a typed error naming ``after``; so is an extended
    header larger than :data:`MAX_EXTENDED_HEADER_BYTES` (refused before tarfile reads it)."""
    if getattr(tar, "firstmember", None) is None:  # else parsed by tarfile.open, checked
        f = cast("IO[bytes]", tar.fileobj)
        pos = f.tell()
        _check_extended_headers(f, tar.offset, after)
        f.seek(pos)  # tarfile reads the next header from where the file stands
    try:
        return tar.next()
    except (tarfile.TarError, OSError, EOFError, ValueError, UnicodeError) as e:
        where = f" after {after!r}" if after else ""
        raise MalformedArchive(after, f"unreadable archive{where}: {e}") from e


def _check_extended_headers(f: IO[bytes], offset: int, after: str | None) -> None:
    """Refuse a pax extended header or GNU long-name/long-link member at ``offset`` (or
    chained after one) declaring more than :data:`MAX_EXTENDED_HEADER_BYTES`, reading only its
    raw 512-byte header block: tarfile would read all it declares into memory at once. Anything
    else (a short or invalid block) is left to tarfile, which reports it."""
    for _ in range(_MAX_EXTENDED_CHAIN + 1):
        f.seek(offset)
        block = f.read(tarfile.BLOCKSIZE)
        if len(block) < tarfile.BLOCKSIZE:
            return
        kind = _EXTENDED.get(block[156:157])
        if kind is None:
            return
        name = block[:100].split(b"\0", 1)[0].decode("utf-8", "replace") or "(unnamed)"
        field = block[124:136]
        if field[0] & 0x80:  # GNU base-256 (0xff: negative, which tarfile refuses itself)
            if field[0] == 0xFF:
                return
            size = int.from_bytes(field[1:], "big")
        else:
            try:
                size = int(field.split(b"\0", 1)[0].strip() or b"0", 8)
            except ValueError:
                return  # an invalid header: tarfile's error
        if size > MAX_EXTENDED_HEADER_BYTES or size < 0:
            where = f" after {after!r}" if after else ""
            raise MalformedArchive(
                name,
                f"refusing archive member {name!r}{where}: {kind} of {size} bytes "
                f"(at most {MAX_EXTENDED_HEADER_BYTES})",
            )
        offset += tarfile.BLOCKSIZE + -(-size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE
    where = f" after {after!r}" if after else ""
    raise MalformedArchive(
        after,
        f"refusing the archive{where}: more than {_MAX_EXTENDED_CHAIN} chained extended headers",
    )


def _forget_headers(tar: tarfile.TarFile) -> None:
    """Drop the headers tarfile keeps of every member read (its ``members`` list): a restore
    reads each member once, and an archive of a million tiny members must not stay in memory."""
    members = getattr(tar, "members", None)
    if isinstance(members, list):
        members.clear()


def _check_regular(member: tarfile.TarInfo) -> None:
    """Refuse anything but a plain regular file: links, devices, FIFOs, directories and sparse
    files (whose declared size is not the bytes the archive holds)."""
    if member.type in _REGULAR and member.sparse is None:
        return
    kind = _KINDS.get(member.type) or ("a sparse file" if member.sparse is not None else None)
    kind = kind or f"of type {member.type!r}"
    raise MalformedArchive(
        member.name, f"refusing archive member {member.name!r}: {kind}, not a regular file"
    )


def _check_header(tar: tarfile.TarFile, first: tarfile.TarInfo | None) -> int:
    if first is None or first.name != HEADER or first.size > 4096:
        raise MalformedArchive(
            None if first is None else first.name,
            f"not an odf-node backup: the first member is not {HEADER}",
        )
    _check_regular(first)
    try:
        f = tar.extractfile(first)
        assert f is not None
        header = json.loads(f.read())
        version = header["version"]
        fmt = header["format"]
    # RecursionError: 4 KB of brackets nest deeper than the decoder recurses.
    except (ValueError, KeyError, TypeError, RecursionError, tarfile.TarError, OSError) as e:
        raise MalformedArchive(
            HEADER, f"not an odf-node backup: unreadable {HEADER} ({e})"
        ) from None
    if fmt != FORMAT or not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise MalformedArchive(
            HEADER, f"not an odf-node backup: format {fmt!r} version {version!r}"
        )
    if version > FORMAT_VERSION:
        raise BackupFormatTooNew(version)
    return version


def _read_manifest(
    tar: tarfile.TarFile, member: tarfile.TarInfo
) -> tuple[dict[str, Any], dict[str, _Listed]]:
    """The manifest's scalar fields and its file list by path (:func:`_parse_manifest`)."""
    if member.size > MAX_MANIFEST_BYTES:
        raise MalformedArchive(
            MANIFEST,
            f"{MANIFEST} is implausibly large ({member.size} bytes; at most {MAX_MANIFEST_BYTES})",
        )
    try:
        f = tar.extractfile(member)
        assert f is not None
        text = f.read().decode("utf-8")
    except (tarfile.TarError, OSError, EOFError) as e:
        raise MalformedArchive(MANIFEST, f"unreadable {MANIFEST}: {e}") from e
    except UnicodeDecodeError as e:
        raise MalformedArchive(MANIFEST, f"unreadable {MANIFEST}: not UTF-8 ({e})") from None
    manifest, listed = _parse_manifest(text)
    if listed is None:
        raise MalformedArchive(MANIFEST, f"{MANIFEST} has no file list")
    schema = manifest.get("state_schema_version", 0)
    if not isinstance(schema, int) or isinstance(schema, bool) or schema < 0:
        raise MalformedArchive(MANIFEST, f"{MANIFEST}: state_schema_version {schema!r}")
    manifest["state_schema_version"] = schema
    return manifest, listed


def _parse_manifest(text: str) -> tuple[dict[str, Any], dict[str, _Listed] | None]:
    """The manifest's scalar fields, and its ``files`` by path (None: no file list).

    Parsed with bounded memory and depth: a JSON object whose ``files`` and ``datasets`` are
    lists of flat objects and whose other values are scalars (what :func:`write_backup`
    writes). Each list entry is decoded on its own (at most :data:`_MAX_ENTRY_CHARS`) and
    checked at once, a file kept as its size and hash, a dataset entry not kept (a restore
    reads the datasets themselves): never the whole document at once, as ``json.loads`` of a
    48 MB manifest of tiny objects took 1.3 GB, and of deep nesting raised a RecursionError.
    """
    return _ManifestParser(text).parse()


class _ManifestParser:
    """One pass over a manifest's text (:func:`_parse_manifest`): each method reads from an
    offset and returns the offset after what it read."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.decoder = json.JSONDecoder()
        self.manifest: dict[str, Any] = {}
        self.listed: dict[str, _Listed] | None = None

    def parse(self) -> tuple[dict[str, Any], dict[str, _Listed] | None]:
        """The top-level object: scalars kept, ``files`` and ``datasets`` read entry by entry."""
        text = self.text
        i = self.expect(0, "{")
        if text[self.ws(i) : self.ws(i) + 1] == "}":
            i = self.ws(i) + 1
        else:
            while True:
                i = self.member(self.ws(i))
                i = self.ws(i)
                if text[i : i + 1] == "}":
                    i += 1
                    break
                i = self.expect(i, ",")
        if self.ws(i) != len(text):
            raise self.bad(f"data after the object at offset {self.ws(i)}")
        return self.manifest, self.listed

    def member(self, i: int) -> int:
        """One ``"key": value`` of the top-level object."""
        if self.text[i : i + 1] != '"':
            raise self.bad(f"expected a key at offset {i}")
        key, i = self.scalar(i, "key")
        i = self.ws(self.expect(i, ":"))
        if key in self.manifest or (key == "files" and self.listed is not None):
            raise self.bad(f"{key!r} appears twice")
        if key == "files":
            self.listed = {}
            return self.entries(i, key, self.take_file)
        if key == "datasets":
            self.manifest[key] = True
            return self.entries(i, key, lambda _n, _d: None)
        self.manifest[key], i = self.scalar(i, key)
        return i

    def bad(self, why: str) -> MalformedArchive:
        return MalformedArchive(MANIFEST, f"unreadable {MANIFEST}: {why}")

    def ws(self, i: int) -> int:
        text = self.text
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        return i

    def expect(self, i: int, ch: str) -> int:
        i = self.ws(i)
        if self.text[i : i + 1] != ch:
            raise self.bad(f"expected {ch!r} at offset {i}")
        return i + 1

    def scalar(self, i: int, key: str) -> tuple[Any, int]:
        """A string, number, boolean or null (never a container: no depth to exhaust)."""
        first = self.text[i : i + 1]
        if first not in ('"', "-", "t", "f", "n") and not first.isdigit():
            raise self.bad(f"{key!r} is not a string, number, boolean or null")
        try:
            value, end = self.decoder.raw_decode(self.text, i)
        except ValueError as e:  # ValueError: also an integer of too many digits
            raise self.bad(f"{key!r}: {e}") from None
        return value, end

    def entries(self, i: int, key: str, take: Callable[[int, dict[str, Any]], None]) -> int:
        """A list of flat objects, each decoded alone and passed to ``take``."""
        text = self.text
        i = self.ws(self.expect(i, "["))
        if text[i : i + 1] == "]":
            return i + 1
        n = 0
        while True:
            i = self.ws(i)
            if text[i : i + 1] != "{":
                raise self.bad(f"{key}[{n}] is not an object")
            end = self.flat_object_end(i, key, n)
            take(n, self.flat_object(i, end, key, n))
            n += 1
            if n > MAX_MEMBERS:
                raise self.bad(f"{key} has more than {MAX_MEMBERS} entries")
            i = self.ws(end + 1)
            if text[i : i + 1] == "]":
                return i + 1
            i = self.expect(i, ",")

    def flat_object_end(self, i: int, key: str, n: int) -> int:
        # A flat object ends at its first "}" (no value a backup writes holds one).
        end = self.text.find("}", i, i + _MAX_ENTRY_CHARS)
        if end < 0:
            raise self.bad(f"{key}[{n}] is not a flat object of at most {_MAX_ENTRY_CHARS} bytes")
        return end

    def flat_object(self, i: int, end: int, key: str, n: int) -> dict[str, Any]:
        try:
            item = json.loads(self.text[i : end + 1])
        except ValueError as e:
            raise self.bad(f"{key}[{n}]: {e}") from None
        if not all(v is None or isinstance(v, (str, int, float)) for v in item.values()):
            raise self.bad(f"{key}[{n}] is not a flat object")
        return cast(dict[str, Any], item)

    def take_file(self, n: int, f: dict[str, Any]) -> None:
        """Keep ``files[n]`` as its size and hash, by path (each checked, none repeated)."""
        listed = self.listed
        assert listed is not None
        path, size, sha = f.get("path"), f.get("size"), f.get("sha256")
        if not isinstance(path, str) or path in listed:
            raise MalformedArchive(MANIFEST, f"{MANIFEST}: files[{n}] has no path or repeats one")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise MalformedArchive(path, f"{MANIFEST}: {path!r} has no size")
        if not isinstance(sha, str) or len(sha) != 64:
            raise MalformedArchive(path, f"{MANIFEST}: {path!r} has no sha256")
        listed[path] = _Listed(size, sha)


_TOP_LEVEL = frozenset({"config.toml", "state.db", "keys", "datasets"})


def _safe_name(name: str) -> PurePosixPath:
    p = PurePosixPath(name)
    if (
        p.is_absolute()
        or not p.parts
        or any(part in ("", ".", "..") for part in p.parts)
        or p.parts[0] not in _TOP_LEVEL
        or "\\" in name
        or "\0" in name
    ):
        raise MalformedArchive(
            name, f"refusing archive member {name!r}: not a path a backup writes"
        )
    return p


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, root: Path) -> _Listed:
    """Write one regular member under ``root`` (keys 0600, the rest 0644); its size and hash.

    A member whose path collides with another's (a file where a directory must be) or whose
    data ends early is a :class:`MalformedArchive` naming it."""
    rel = _safe_name(member.name)
    dest = root.joinpath(*rel.parts)
    mode = 0o600 if rel.parts[0] in ("keys", "config.toml", "state.db") else 0o644
    digest = hashlib.sha256()
    size = 0
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        src = tar.extractfile(member)
        assert src is not None
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "wb") as out:
            while chunk := src.read(_CHUNK):
                digest.update(chunk)
                size += len(chunk)
                out.write(chunk)
    except (OSError, tarfile.TarError, EOFError) as e:
        raise MalformedArchive(
            member.name, f"archive member {member.name!r} cannot be written: {e}"
        ) from e
    return _Listed(size, digest.hexdigest())


def _fsync_tree(root: Path) -> None:
    """Make everything under ``root`` durable before it is renamed into place: one ``syncfs``
    where Linux has it (a restore of 1,000 datasets writes ~5,000 files; one fsync each took
    ~35 s on the 2-core test machine), else an fsync of every file and directory."""
    if can_sync_filesystem():
        sync_filesystem(root)
        return
    for dirpath, _dirs, filenames in os.walk(root):
        for f in filenames:
            fd = os.open(Path(dirpath) / f, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(dirpath))


__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "BackupError",
    "BackupFormatTooNew",
    "MalformedArchive",
    "read_header",
    "restore_backup",
    "write_backup",
]
