"""A local repository of many datasets, keyed by DID, with local aliases.

Layout (kamu-cli HEAD's ID-keyed multi-dataset layout)::

    <datasets root>/<did multibase>/...      one dataset directory (see dataset.py)
    <datasets root>/<did multibase>/info/alias
    <datasets root>/<did multibase>/info/snapshot-dir   where a relative FilesGlob resolves
    <keys root>/<did multibase>.key          private key of datasets this node owns (0600)

Creation is atomic: a dataset is assembled under a hidden staging name and renamed into place
only once its whole initial chain is written.
"""

from __future__ import annotations

import builtins
import os
import re
import secrets
import shutil
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from coordinator.clock import TimestampClock
from coordinator.errors import (
    DatasetAlreadyExists,
    DatasetNotFound,
    InvalidDatasetId,
    InvalidSnapshot,
)
from coordinator.identity.dataset_id import DatasetId
from coordinator.identity.keys import PrivateKey, generate_private_key, save_private_key
from coordinator.metadata import model as m
from coordinator.metadata.flatbuffers_serde import encode_block
from coordinator.metadata.snapshot import DatasetSnapshot
from coordinator.storage import aliases
from coordinator.storage.dataset import HEAD_REF, Dataset
from coordinator.storage.fs import atomic_write_bytes

# kamu's DatasetName grammar: hostname-like labels of alphanumerics and inner dashes, dotted.
_LABEL = r"[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*"
_NAME_RE: Final = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*$")
_ALIAS_RE: Final = re.compile(rf"^(?:{_LABEL}/)?{_LABEL}(?:\.{_LABEL})*$")
_STAGING_PREFIX: Final = ".staging-"
#: ``info/`` entry: the directory the dataset's snapshot was created from (absolute), kept when
#: its polling source is a ``FilesGlob`` with a relative path (resolved against it at pull).
SNAPSHOT_DIR_INFO: Final = "snapshot-dir"

KeySource = Callable[[], PrivateKey]


def _read_small(path: str) -> str | None:
    """A small text file's stripped content; None if it is missing or empty."""
    # os.open/os.read: three system calls and no file object (a third of open()'s cost).
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        return os.read(fd, 4096).decode("utf-8").strip() or None
    finally:
        os.close(fd)


def validate_alias(alias: str) -> str:
    """Check a local alias (``name`` or ``account/name``, kamu's grammar)."""
    if not _ALIAS_RE.match(alias):
        raise InvalidSnapshot(
            f"invalid dataset name {alias!r}: use letters, digits, inner '-' and '.' "
            "(optionally prefixed by 'account/')"
        )
    return alias


def did_shaped(alias: str) -> DatasetId | None:
    """The DID an alias spells as its multibase form (how pulled datasets without a name are
    called), else ``None``."""
    try:
        did = DatasetId.from_multibase(alias)
    except InvalidDatasetId:
        return None
    return did if did.as_multibase() == alias else None


def check_alias_for(alias: str, did: DatasetId) -> None:
    """An alias spelled like a DID must be the dataset's own DID.

    This keeps :meth:`DatasetRepository.resolve` of a DID-shaped alias (every pulled dataset
    without a name) a single directory lookup: no other dataset can carry that alias, so a
    missing directory is a definite miss and never costs a scan of every alias.
    """
    if did_shaped(alias) is not None and alias != did.as_multibase():
        raise InvalidSnapshot(f"alias {alias!r} spells another dataset's DID")


@dataclass(frozen=True, slots=True)
class DatasetHandle:
    """A dataset's identity, local alias and directory."""

    id: DatasetId
    alias: str
    root: Path


@dataclass(frozen=True)
class CatalogEntry:
    """One dataset as :meth:`DatasetRepository.catalog` reads it."""

    handle: DatasetHandle
    head_ref: str | None
    """The head ref's text as stored (multibase), None for an empty chain; not parsed here."""
    owned: bool
    """Whether this node keeps the dataset's private key."""


class DatasetRepository:
    """Datasets stored under one directory, addressable by DID or alias."""

    def __init__(
        self,
        datasets_root: Path,
        keys_root: Path,
        *,
        clock: TimestampClock,
        key_source: KeySource = generate_private_key,
        durable: bool = True,
    ) -> None:
        self.root = datasets_root
        self.keys_root = keys_root
        self.clock = clock
        self.key_source = key_source
        self.durable = durable
        self._alias_index: dict[str, DatasetHandle] = {}
        # The DID each dataset directory's name spells, parsed once (:meth:`_dataset_dirs`).
        self._dir_dids: dict[str, DatasetId] = {}
        self.root.mkdir(parents=True, exist_ok=True)

    # -- lookup ---------------------------------------------------------------------------------

    def list(self) -> list[DatasetHandle]:
        """All datasets, sorted by alias."""
        out = []
        for e, did in self._dataset_dirs():
            p = Path(e.path)
            out.append(DatasetHandle(did, self._read_alias(p) or e.name, p))
        return sorted(out, key=lambda h: h.alias)

    def catalog(self) -> builtins.list[CatalogEntry]:
        """Every dataset with its alias, head ref and ownership, sorted by alias.

        For pages that list every dataset (the console): one listing of each root and two small
        reads per dataset (alias, head ref), on plain string paths. Going through :meth:`list`,
        ``key_path`` and ``Dataset(...).head()`` costs ~0.18 s for 1,000 datasets, mostly
        ``pathlib`` objects and a ``stat`` per dataset; this costs a quarter of that.
        """
        try:
            owned = {n.removesuffix(".key") for n in os.listdir(self.keys_root)}
        except (FileNotFoundError, NotADirectoryError):
            owned = set()
        out = []
        for e, did in self._dataset_dirs():
            alias = _read_small(os.path.join(e.path, "info", "alias"))
            head = _read_small(os.path.join(e.path, "refs", HEAD_REF))
            handle = DatasetHandle(did, alias or e.name, Path(e.path))
            out.append(CatalogEntry(handle, head, e.name in owned))
        out.sort(key=lambda c: c.handle.alias)
        return out

    def count(self) -> int:
        """How many datasets there are (one directory listing; aliases are not read).

        The entry types come with the listing (``os.scandir``): no ``stat`` per dataset. In a
        busy daemon every system call gives up the GIL and waits to get it back, and 1,000
        ``stat`` calls made ``node.status`` take over 100 ms.
        """
        return sum(1 for _ in self._dataset_dirs())

    def _dataset_dirs(self) -> Iterator[tuple[os.DirEntry[str], DatasetId]]:
        """Each dataset directory under the root with the DID its name spells, from one
        listing (``os.scandir``: the entry types come with it, no ``stat`` per entry); hidden
        entries, files and names that spell no DID are skipped. A name is parsed once."""
        try:
            entries = os.scandir(self.root)
        except (FileNotFoundError, NotADirectoryError):
            return
        with entries:
            for e in entries:
                if e.name.startswith(".") or not e.is_dir():
                    continue
                did = self._dir_dids.get(e.name)
                if did is None:
                    try:
                        did = DatasetId.from_multibase(e.name)
                    except InvalidDatasetId:
                        continue
                    self._dir_dids[e.name] = did
                yield e, did

    def __iter__(self) -> Iterator[DatasetHandle]:
        return iter(self.list())

    def resolve(self, ref: str) -> DatasetHandle:
        """Find a dataset by ``did:odf:…`` or by local alias.

        Raises:
            DatasetNotFound: no such dataset.
        """
        if ref.startswith("did:"):
            did = DatasetId.parse(ref)
            p = self.root / did.as_multibase()
            if not p.is_dir():
                raise DatasetNotFound(f"dataset not found: {ref}")
            return DatasetHandle(did, self._read_alias(p) or p.name, p)
        shaped = did_shaped(ref)
        if shaped is not None:
            # A DID-shaped alias belongs only to that DID's directory (check_alias_for).
            p = self.root / ref
            if p.is_dir() and (self._read_alias(p) or p.name) == ref:
                handle = DatasetHandle(shaped, ref, p)
                self._alias_index[ref] = handle
                return handle
            raise DatasetNotFound(f"dataset not found: {ref}")
        # A remembered alias is confirmed by re-reading that one alias file (another process
        # may have renamed it); only a miss or a stale entry pays for a full directory scan.
        cached = self._alias_index.get(ref)
        if cached is not None and self._read_alias(cached.root) == ref and cached.root.is_dir():
            return cached
        self._alias_index = {h.alias: h for h in self.list()}
        found = self._alias_index.get(ref)
        if found is None:
            raise DatasetNotFound(f"dataset not found: {ref}")
        return found

    def open(self, ref: str) -> Dataset:
        """Open a dataset by DID or alias."""
        return Dataset(self.resolve(ref).root, durable=self.durable)

    def contains(self, ref: str) -> bool:
        """Whether ``ref`` resolves."""
        try:
            self.resolve(ref)
        except (DatasetNotFound, InvalidDatasetId):
            return False
        return True

    def key_path(self, did: DatasetId) -> Path:
        """Where the private key of an owned dataset is kept."""
        return self.keys_root / f"{did.as_multibase()}.key"

    # -- creation -------------------------------------------------------------------------------

    def create_empty(self, did: DatasetId, alias: str) -> tuple[DatasetHandle, Dataset]:
        """Create an empty dataset directory for ``did`` (e.g. as the target of a pull)."""
        validate_alias(alias)
        self._check_free(did, alias)
        root = self.root / did.as_multibase()
        ds = Dataset.create(root, durable=self.durable)
        self._write_alias(root, alias)
        return DatasetHandle(did, alias, root), ds

    def create_from_snapshot(
        self,
        snapshot: DatasetSnapshot,
        *,
        account: str | None = None,
        snapshot_dir: Path | None = None,
    ) -> DatasetHandle:
        """Create a dataset from a ``DatasetSnapshot`` as kamu does.

        A Seed with a fresh key (kept by the node, mode 0600) is generated; every event becomes
        one block, all with the same system time; transforms are normalised and ``SetTransform``
        inputs are resolved to DIDs (alias defaulting to the original reference).

        ``account``: the account the dataset is created as (kamu's ``--account`` in a
        multi-tenant workspace): an unqualified name becomes ``account/name`` and inputs
        resolve as :mod:`coordinator.storage.aliases` says. ``snapshot_dir``: the absolute
        directory the snapshot file is in, recorded (``info/snapshot-dir``) when the polling
        source is a ``FilesGlob`` with a relative path, which a pull resolves against it.

        Raises:
            InvalidSnapshot: forbidden events, unknown inputs, bad name or account.
            DatasetAlreadyExists: the alias is taken.
        """
        alias = validate_alias(aliases.qualify(snapshot.name, account))
        events = [self._prepare_event(snapshot.kind, e, account=account) for e in snapshot.metadata]
        record_dir = _snapshot_dir_to_record(events, snapshot_dir)
        key = self.key_source()
        did = key.dataset_id()
        self._check_free(did, alias)
        now = self.clock()

        blocks: list[bytes] = []
        seed = m.MetadataBlock(
            system_time=now,
            sequence_number=0,
            event=m.Seed(dataset_id=did, dataset_kind=snapshot.kind),
        )
        from coordinator.metadata.flatbuffers_serde import block_hash

        data = encode_block(seed)
        blocks.append(data)
        prev = block_hash(data)
        for seq, event in enumerate(events, start=1):
            b = m.MetadataBlock(
                system_time=now, prev_block_hash=prev, sequence_number=seq, event=event
            )
            data = encode_block(b)
            blocks.append(data)
            prev = block_hash(data)

        # Keep the key before the dataset appears, so an owned dataset never lacks its key.
        save_private_key(self.key_path(did), key)
        staging = self.root / f"{_STAGING_PREFIX}{secrets.token_hex(6)}"
        try:
            ds = Dataset.create(staging, durable=self.durable)
            ds.append_many_bytes(blocks)
            self._write_alias(staging, alias)
            if record_dir is not None:
                atomic_write_bytes(
                    staging / "info" / SNAPSHOT_DIR_INFO,
                    os.fsencode(record_dir),
                    durable=self.durable,
                )
            staging.rename(self.root / did.as_multibase())
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return DatasetHandle(did, alias, self.root / did.as_multibase())

    def create_from_snapshots(
        self,
        snapshots: Sequence[DatasetSnapshot],
        *,
        account: str | None = None,
        snapshot_dir: Path | None = None,
    ) -> builtins.list[DatasetHandle]:
        """Create several datasets from snapshots (one ``dataset create`` file): all or none.

        Every snapshot is checked before any dataset is created: its name (also against the
        names of the other snapshots), its events, and its transform inputs, which may name an
        existing dataset or an *earlier* snapshot of the same batch (they are created in order).
        If a creation still fails (a name taken meanwhile, an I/O error), the datasets already
        created by this call are removed again, with their keys. ``account`` and
        ``snapshot_dir``: as :meth:`create_from_snapshot`.

        Raises:
            InvalidSnapshot: no snapshot at all, or one or more invalid snapshots (every problem
                is listed, each with its 1-based document number and name).
            DatasetAlreadyExists: every problem found is a name already taken.
        """
        if not snapshots:
            raise InvalidSnapshot("no DatasetSnapshot to create")
        taken = {aliases.alias_key(h.alias) for h in self.list()}
        earlier: set[str] = set()
        problems: list[tuple[int, str, Exception]] = []
        for number, snapshot in enumerate(snapshots, start=1):
            try:
                self._check_snapshot(snapshot, taken, earlier, account)
            except (InvalidSnapshot, DatasetAlreadyExists) as e:
                problems.append((number, snapshot.name, e))
            try:
                earlier.add(aliases.alias_key(aliases.qualify(snapshot.name, account)))
            except InvalidSnapshot:
                pass  # already reported by the check
        if problems:
            if len(snapshots) == 1:
                raise problems[0][2]
            detail = "; ".join(f"document {n} ({name!r}): {e}" for n, name, e in problems)
            message = f"nothing was created: {detail}"
            if all(isinstance(e, DatasetAlreadyExists) for _, _, e in problems):
                raise DatasetAlreadyExists(message)
            raise InvalidSnapshot(message)
        created: builtins.list[DatasetHandle] = []  # ``list`` is a method here
        try:
            for snapshot in snapshots:
                created.append(
                    self.create_from_snapshot(snapshot, account=account, snapshot_dir=snapshot_dir)
                )
        except BaseException:
            for handle in reversed(created):
                self._remove_created(handle)
            raise
        return created

    def delete(self, ref: str) -> None:
        """Remove a dataset directory (its key, if owned, is kept)."""
        h = self.resolve(ref)
        trash = self.root / f"{_STAGING_PREFIX}deleted-{secrets.token_hex(6)}"
        h.root.rename(trash)
        shutil.rmtree(trash, ignore_errors=True)

    def rename(self, ref: str, new_alias: str) -> DatasetHandle:
        """Change a dataset's local alias."""
        validate_alias(new_alias)
        h = self.resolve(ref)
        check_alias_for(new_alias, h.id)
        if new_alias != h.alias and self.contains(new_alias):
            raise DatasetAlreadyExists(f"alias {new_alias!r} is already used")
        self._write_alias(h.root, new_alias)
        return replace(h, alias=new_alias)

    # -- helpers --------------------------------------------------------------------------------

    def _check_snapshot(
        self,
        snapshot: DatasetSnapshot,
        taken: Collection[str],
        earlier: Collection[str],
        account: str | None,
    ) -> None:
        """What :meth:`create_from_snapshot` would refuse, without creating anything.

        ``taken`` are the names of existing datasets; ``earlier`` the names of snapshots of
        the same batch that will be created first (valid transform inputs, invalid names);
        both in :func:`~coordinator.storage.aliases.alias_key` form.
        """
        alias = validate_alias(aliases.qualify(snapshot.name, account))
        if aliases.alias_key(alias) in taken:
            raise DatasetAlreadyExists(f"a dataset named {alias!r} already exists")
        if aliases.alias_key(alias) in earlier:
            raise InvalidSnapshot(f"the name {alias!r} is used by an earlier document")
        for e in snapshot.metadata:
            self._prepare_event(snapshot.kind, e, earlier, account=account)

    def _remove_created(self, handle: DatasetHandle) -> None:
        """Undo a creation of this call: the dataset directory and its key (never handed out)."""
        trash = self.root / f"{_STAGING_PREFIX}deleted-{secrets.token_hex(6)}"
        try:
            handle.root.rename(trash)
        except OSError:
            trash = handle.root
        shutil.rmtree(trash, ignore_errors=True)
        self.key_path(handle.id).unlink(missing_ok=True)
        self._alias_index.pop(handle.alias, None)

    def _check_free(self, did: DatasetId, alias: str) -> None:
        check_alias_for(alias, did)
        if (self.root / did.as_multibase()).exists():
            raise DatasetAlreadyExists(f"dataset {did} already exists")
        # Names compare ignoring ASCII case, as kamu compares them.
        key = aliases.alias_key(alias)
        if any(aliases.alias_key(h.alias) == key for h in self.list()):
            raise DatasetAlreadyExists(f"a dataset named {alias!r} already exists")

    def _read_alias(self, root: Path) -> str | None:
        try:
            return (root / "info" / "alias").read_text(encoding="utf-8").strip() or None
        except FileNotFoundError:
            return None

    def snapshot_dir(self, handle: DatasetHandle) -> Path | None:
        """The directory ``handle``'s snapshot was created from, if it was recorded (see
        :meth:`create_from_snapshot`)."""
        text = _read_small(os.path.join(handle.root, "info", SNAPSHOT_DIR_INFO))
        return Path(text) if text is not None else None

    def _write_alias(self, root: Path, alias: str) -> None:
        (root / "info").mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(root / "info" / "alias", alias.encode("utf-8"), durable=self.durable)

    def _prepare_event(
        self,
        kind: m.DatasetKind,
        e: m.MetadataEvent,
        pending: Collection[str] = (),
        *,
        account: str | None = None,
    ) -> m.MetadataEvent:
        """Check an event of a snapshot and normalise it, as kamu's ``add`` does (nothing
        about the polling source is checked here: what cannot run is refused at pull).

        ``pending`` are the names (:func:`~coordinator.storage.aliases.alias_key` form) of
        datasets that do not exist yet but will when it is applied: inputs naming them are
        only checked, not resolved."""
        name = type(e).__name__
        if isinstance(
            e,
            m.Seed | m.AddData | m.ExecuteTransform | m.DisablePushSource | m.DisablePollingSource,
        ):
            raise InvalidSnapshot(f"{name} is not allowed in a DatasetSnapshot")
        if isinstance(e, m.SetPollingSource | m.AddPushSource) and kind != m.DatasetKind.ROOT:
            raise InvalidSnapshot(f"{name} is only allowed in root datasets")
        if isinstance(e, m.SetTransform) and kind != m.DatasetKind.DERIVATIVE:
            raise InvalidSnapshot("SetTransform is only allowed in derivative datasets")
        if isinstance(e, m.SetPollingSource | m.AddPushSource) and e.preprocess is not None:
            return replace(e, preprocess=normalize_transform(e.preprocess))
        if isinstance(e, m.SetTransform):
            transform = normalize_transform(e.transform)
            return replace(
                e, inputs=self._resolve_inputs(e.inputs, pending, account), transform=transform
            )
        return e

    def _resolve_inputs(
        self,
        inputs: Sequence[m.TransformInput],
        pending: Collection[str],
        account: str | None,
    ) -> tuple[m.TransformInput, ...]:
        """Each input's reference as the input's DID, its alias defaulting to the reference
        as written (kamu's ``resolve_transform_inputs``); an input naming a ``pending``
        dataset is kept as it is. Every missing input is named at once, as kamu does."""
        by_key = aliases.index((h.alias, h) for h in self.list())
        out, missing = [], []
        for i in inputs:
            ref = i.dataset_ref
            handle: DatasetHandle | None
            if ref.startswith("did:"):
                try:
                    handle = self.resolve(ref)
                except (DatasetNotFound, InvalidDatasetId):
                    handle = None
            else:
                handle = aliases.find(ref, account, by_key)
            if handle is None:
                if aliases.find(ref, account, {k: k for k in pending}) is None:
                    missing.append(ref)
                out.append(i)
                continue
            alias = i.alias if i.alias is not None else ref
            out.append(m.TransformInput(dataset_ref=handle.id.as_did_str(), alias=alias))
        if missing:
            raise InvalidSnapshot(f"transform input not found: {', '.join(missing)}")
        return tuple(out)


def _snapshot_dir_to_record(
    events: Sequence[m.MetadataEvent], snapshot_dir: Path | None
) -> str | None:
    """The snapshot's directory, if a ``FilesGlob`` source of ``events`` has a relative path."""
    if snapshot_dir is None:
        return None
    if not snapshot_dir.is_absolute():
        raise InvalidSnapshot(
            f"the snapshot's directory {str(snapshot_dir)[:200]!r} is not absolute"
        )
    relative = any(
        isinstance(e, m.SetPollingSource)
        and isinstance(e.fetch, m.FetchStepFilesGlob)
        and not os.path.isabs(e.fetch.path)
        for e in events
    )
    return str(snapshot_dir) if relative else None


def normalize_transform(t: m.TransformSql) -> m.TransformSql:
    """kamu's normalisation: a single ``query`` becomes ``queries: [{query}]``; at most one
    query may lack an alias (it is the output), as kamu's ``add`` checks."""
    if t.query is not None:
        if t.queries:
            raise InvalidSnapshot("a transform cannot have both `query` and `queries`")
        t = replace(t, query=None, queries=(m.SqlQueryStep(query=t.query),))
    if sum(q.alias is None for q in t.queries or ()) > 1:
        raise InvalidSnapshot(
            "the transform has several queries without an alias: only one, the output, may "
            "have none"
        )
    return t
