"""Dataset use cases: create, ingest, transform, verify, pull, log, list, publish.

One implementation for both ways a user reaches them: the daemon's JSON-RPC methods and the
offline CLI (no daemon running) build a :class:`DatasetUseCases` over their own adapters and
return the same typed results (:mod:`node.app.results`). Heavy work (ingest, engine calls, chain
reads) runs in worker threads; commits to one dataset are serialised by :class:`CommitLocks`.
"""

from __future__ import annotations

import asyncio
import functools
import os
import stat
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coordinator.errors import OdfNodeError
from coordinator.identity import DatasetId
from coordinator.metadata.flatbuffers_serde import decode_block, decode_manifest
from coordinator.metadata.snapshot import snapshots_from_yaml
from coordinator.metadata.yaml_serde import block_to_dict
from coordinator.storage.dataset import Dataset
from coordinator.storage.repository import DatasetRepository
from node.app.errors import InvalidArgument, NotOwner, UntrustedInput
from node.app.polling import PollingOptions
from node.app.ports import EnginePort, StatePort, TransferPort
from node.app.results import (
    CreatedDataset,
    DatasetRow,
    IngestSummary,
    LogEntry,
    PullResult,
    TransformResult,
    VerifyResult,
)

if TYPE_CHECKING:
    # Ingest, transform and replay import pyarrow (and numpy): each use case imports them when it
    # runs, so that an idle daemon never loads them (docs/resource-budget.md, idle RSS).
    from coordinator.ingest.linked import LinkedObjects
    from coordinator.ingest.push import IngestProgress
    from coordinator.verify import IntegrityReport

OnCommit = Callable[[DatasetId], Awaitable[int | None]]
"""Called after a commit to an owned dataset; returns the publish work item id (daemon only)."""
VerifyListener = Callable[[str, int, int], None]
"""``listener(phase, done, total)``, called from a worker thread during verification."""


class CommitLocks:
    """One asyncio lock per dataset: pulls, ingests and transforms of a dataset never overlap."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}

    def of(self, did: DatasetId) -> asyncio.Lock:
        """The lock of ``did``."""
        return self._locks.setdefault(did.as_did_str(), asyncio.Lock())


def check_input_files(files: Sequence[Path]) -> None:
    """Every input must be an existing regular file (not a FIFO, directory or device)."""
    for p in files:
        shown = str(p)[:200]
        try:
            exists, regular = p.exists(), p.is_file()
        except (OSError, ValueError) as e:  # a name too long, a NUL byte: not a usable path
            why = e.strerror if isinstance(e, OSError) else str(e)  # strerror: no path echo
            raise InvalidArgument(f"not a usable input file name {shown!r}: {why}") from None
        if not exists:
            raise InvalidArgument(f"input file not found: {shown}")
        if not regular:
            raise InvalidArgument(f"input is not a regular file: {shown}")


def read_snapshot_file(path: Path, limit: int, what: str = "snapshot file") -> bytes:
    """The bytes of a DatasetSnapshot file, at most ``limit + 1`` of them (the caller refuses more).

    The file must be a regular file. It is opened with ``O_NONBLOCK`` and checked with ``fstat``
    on the open descriptor, so a FIFO with no writer cannot block the command forever (a plain
    ``open`` waits for a writer) and a file swapped for a FIFO between a check and the open is
    still refused. ``-`` reads standard input instead, bounded the same way, for piping YAML.
    ``what`` names the file in errors (the same rules serve other input files).
    """
    if str(path) == "-":
        return sys.stdin.buffer.read(limit + 1)
    shown = str(path)[:200]
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except (OSError, ValueError) as e:
        why = e.strerror if isinstance(e, OSError) else str(e)  # strerror: no path echo
        raise InvalidArgument(f"cannot read {shown}: {why}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise InvalidArgument(
            f"{what} {shown} is {_file_kind(mode)}; "
            "give a regular file, or '-' to read standard input"
        )
    with os.fdopen(fd, "rb") as f:
        os.set_blocking(fd, True)
        try:
            return f.read(limit + 1)
        except OSError as e:
            raise InvalidArgument(f"cannot read {shown}: {e.strerror}") from None


def _import_data_stack() -> None:
    """Import the modules that load pyarrow (ingest, transform planning, replay)."""
    import coordinator.ingest.linked
    import coordinator.ingest.push
    import coordinator.transform.plan
    import coordinator.transform.run
    import coordinator.transform.verify  # noqa: F401


async def load_data_stack() -> None:
    """Import pyarrow and the data modules in a worker thread, once.

    The daemon does not load them while idle (docs/resource-budget.md), so the first ingest,
    transform or verification imports them: about 0.2 s of module initialisation that, on the
    event loop, held every RPC answer for as long. After this, the use cases' own local imports
    are look-ups in ``sys.modules``.
    """
    if "coordinator.transform.verify" not in sys.modules:
        await asyncio.to_thread(_import_data_stack)


def _file_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


class _LazyEngine:
    """The engine for a source's preprocess query, obtained only if the source has one."""

    def __init__(self, engine: Callable[[], EnginePort]) -> None:
        self._engine = engine

    def execute_raw_query(self, request: Any) -> Any:
        return self._engine().execute_raw_query(request)


class DatasetUseCases:
    """The dataset commands over a repository, an engine and (in a daemon) state and publishing.

    Args:
        repo: the node's datasets.
        engine: returns the transform engine, started on first use.
        state: the daemon's state (``None`` offline: no accepted heads or verifications).
        transfer: pulls (``None`` where pulling is not offered).
        on_commit: queues publication after a commit to an owned dataset (daemon only).
        locks: per-dataset commit locks shared with the node's pulls.
        polling: bounds of polling-source runs (``dataset pull`` of an owned root).

    New blocks take their system time from the repository's injected clock (``repo.clock``).
    """

    def __init__(
        self,
        repo: DatasetRepository,
        engine: Callable[[], EnginePort],
        *,
        state: StatePort | None = None,
        transfer: TransferPort | None = None,
        on_commit: OnCommit | None = None,
        locks: CommitLocks | None = None,
        polling: PollingOptions | None = None,
        untrusted_input: Callable[[DatasetId], str | None] | None = None,
    ) -> None:
        self.repo = repo
        self.polling = polling or PollingOptions()
        self._engine = engine
        # Why an input cannot be used now (its head is not trusted yet), or None.
        self._untrusted_input = untrusted_input
        self._state = state
        self.transfer = transfer
        self._on_commit = on_commit
        self.locks = locks or CommitLocks()

    def owns(self, did: DatasetId) -> bool:
        """Whether this node holds the dataset key of ``did``."""
        return self.repo.key_path(did).is_file()

    async def _log(self, kind: str, did: str, data: dict[str, Any]) -> None:
        if self._state is not None:
            await self._state.log_event(kind, did, data)

    async def _published(self, did: DatasetId, committed: bool, publish: bool) -> int | None:
        if not (committed and publish and self._on_commit is not None and self.owns(did)):
            return None
        return await self._on_commit(did)

    # ---- commands

    async def create(
        self,
        snapshot_yaml: str,
        *,
        snapshot_dir: str | None = None,
        account: str | None = None,
    ) -> list[CreatedDataset]:
        """Create datasets from DatasetSnapshot YAML (kamu's format); this node owns them.

        All or none: every document is parsed and checked before any dataset is created, so a
        file whose second document is invalid creates nothing and can be fixed and retried.
        Text holding no document at all is refused.

        ``snapshot_dir``: the absolute directory the snapshot file is in (the CLI gives it),
        recorded for a source whose ``FilesGlob`` path is relative. ``account``: the account
        the datasets are created as (``account/name``; see
        :mod:`coordinator.storage.aliases`).
        """
        if snapshot_dir is not None and not Path(snapshot_dir).is_absolute():
            raise InvalidArgument(f"snapshot_dir {snapshot_dir[:200]!r} is not an absolute path")
        snapshots = snapshots_from_yaml(snapshot_yaml)
        handles = await asyncio.to_thread(
            functools.partial(
                self.repo.create_from_snapshots,
                snapshots,
                account=account,
                snapshot_dir=Path(snapshot_dir) if snapshot_dir is not None else None,
            )
        )
        created = []
        for h in handles:
            await self._log("dataset.create", h.id.as_did_str(), {"alias": h.alias})
            created.append(CreatedDataset(alias=h.alias, id=h.id.as_did_str()))
        return created

    async def ingest(
        self,
        ref: str,
        files: Sequence[Path],
        *,
        source: str | None = None,
        linked: LinkedObjects | None = None,
        publish: bool = True,
        progress: Callable[[IngestProgress], None] | None = None,
    ) -> IngestSummary:
        """Push local files into a root dataset; then publish and announce it (daemon)."""
        check_input_files([*files, *(linked.objects if linked else ())])
        await load_data_stack()
        from coordinator.ingest.push import ingest  # pyarrow: keeps the idle daemon small

        handle = self.repo.resolve(ref)
        did = handle.id
        async with self.locks.of(did):
            result = await asyncio.to_thread(
                ingest,
                self.repo.open(did.as_did_str()),
                list(files),
                source_name=source,
                progress=progress,
                linked_objects=linked,
                engine=_LazyEngine(self._engine),
                max_decompressed_bytes=self.polling.max_decompressed_bytes,
            )
        lo = result.linked_objects
        out = IngestSummary(
            id=did.as_did_str(),
            alias=handle.alias,
            up_to_date=result.up_to_date,
            new_head=str(result.new_head) if result.new_head else None,
            new_blocks=[str(b) for b in result.new_blocks],
            records=result.num_records,
            watermark=str(result.watermark) if result.watermark else None,
            linked_objects=(
                {"num_objects_naive": lo.num_objects_naive, "size_naive": lo.size_naive}
                if lo
                else None
            ),
            publish_work_id=await self._published(did, not result.up_to_date, publish),
        )
        await self._log("dataset.ingest", did.as_did_str(), out.to_json())
        return out

    async def _check_inputs_trusted(self, ds: Dataset) -> None:
        """Refuse a transform one of whose inputs' stored head is not trusted yet."""
        assert self._untrusted_input is not None
        chain = await asyncio.to_thread(ds.state)
        st = chain.set_transform
        for i in st.inputs if st is not None else ():
            reason = self._untrusted_input(DatasetId.parse(i.dataset_ref))
            if reason is not None:
                raise UntrustedInput(f"{reason}; transform again once it is trusted")

    async def transform(self, ref: str, *, publish: bool = True) -> TransformResult:
        """Run the next transform step of a derivative on the engine; then publish it (daemon)."""
        await load_data_stack()
        from coordinator.transform.plan import resolve_inputs  # pyarrow: keeps idle daemon small
        from coordinator.transform.run import run_transform

        handle = self.repo.resolve(ref)
        did = handle.id
        async with self.locks.of(did):
            ds = self.repo.open(did.as_did_str())
            if self._untrusted_input is not None:
                await self._check_inputs_trusted(ds)
            inputs = await asyncio.to_thread(resolve_inputs, ds, self.repo.open)
            engine = self._engine()
            result = await asyncio.to_thread(
                run_transform, ds, inputs, engine, clock=self.repo.clock, alias=handle.alias
            )
        if result is None or result.new_head is None:
            return TransformResult(id=did.as_did_str(), alias=handle.alias, up_to_date=True)
        nd = result.event.new_data
        wm = result.event.new_watermark
        out = TransformResult(
            id=did.as_did_str(),
            alias=handle.alias,
            up_to_date=False,
            new_head=str(result.new_head),
            new_blocks=[str(b) for b in result.new_blocks],
            offsets=[nd.offset_interval.start, nd.offset_interval.end] if nd else None,
            watermark=str(wm) if wm else None,
            publish_work_id=await self._published(did, True, publish),
        )
        await self._log("dataset.transform", did.as_did_str(), out.to_json())
        return out

    async def verify(
        self, ref: str, *, integrity: bool = False, listener: VerifyListener | None = None
    ) -> VerifyResult:
        """Verify a stored dataset now (integrity; replay for derivatives unless ``integrity``)."""
        await load_data_stack()
        from coordinator.transform.plan import resolve_inputs  # pyarrow: keeps idle daemon small
        from coordinator.transform.verify import verify_dataset

        handle = self.repo.resolve(ref)
        ds = self.repo.open(handle.id.as_did_str())

        def inputs_of() -> dict[DatasetId, Any]:
            try:
                if ds.state().set_transform is not None:
                    return dict(resolve_inputs(ds, self.repo.open))
            except OdfNodeError:
                pass  # a broken chain or a missing input is reported by the phases below
            return {}

        inputs = {} if integrity else await asyncio.to_thread(inputs_of)
        engine = None if integrity else self._engine()
        t0 = time.monotonic()
        report = await asyncio.to_thread(
            verify_dataset, ds, inputs, engine, integrity_only=integrity, listener=listener
        )
        integ: IntegrityReport = report.integrity
        value = integ.to_dict()
        problems = [*value.pop("problems"), *report.problems]
        return VerifyResult(
            id=handle.id.as_did_str(),
            alias=handle.alias,
            ok=report.ok,
            seconds=round(time.monotonic() - t0, 3),
            integrity=value,
            replay=report.replay.to_dict() if report.replay is not None else None,
            problems=problems,
        )

    async def pull(self, url: str, *, alias: str | None = None, force: bool = False) -> Any:
        """Pull a dataset from ``ipfs://``, ``ipns://``, ``http(s)://`` or a local path."""
        if self.transfer is None:
            raise InvalidArgument("pulling is not available here")
        return await self.transfer.pull(url, alias=alias, force=force)

    def polling_source_of(self, ref: str) -> bool:
        """Whether ``ref`` names a local dataset with an active polling source (so that
        ``dataset pull ALIAS`` runs it instead of pulling a remote copy)."""
        if "://" in ref:
            return False
        try:
            handle = self.repo.resolve(ref)
            return self.repo.open(handle.id.as_did_str()).state().polling_source
        except (OdfNodeError, OSError, ValueError):
            return False

    async def poll(
        self,
        ref: str,
        *,
        publish: bool = True,
        progress: Callable[[IngestProgress], None] | None = None,
    ) -> PullResult:
        """Run an owned root's polling source once (``kamu pull`` of a root); publish it.

        Fetch (``http(s)`` by the transfer port, under the source policy; ``file://`` and
        ``FilesGlob`` here), prepare, read, merge and commit: all or nothing, see
        :mod:`coordinator.ingest.polling`.
        """
        await load_data_stack()
        from coordinator.ingest.polling import ingest_fetched, resolve_polling_source
        from coordinator.metadata import model as m
        from node.app.polling import fetch_polling

        handle = self.repo.resolve(ref)
        did = handle.id
        self.require_owned(did)
        opts = self.polling
        async with self.locks.of(did):
            ds = self.repo.open(did.as_did_str())
            info = await asyncio.to_thread(resolve_polling_source, ds)
            now = self.repo.clock()
            ds.layout.info_dir.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(prefix="poll-", dir=ds.layout.info_dir) as tmp:
                workdir = Path(tmp)
                fetched = await fetch_polling(
                    info,
                    workdir,
                    now,
                    did.as_did_str(),
                    transfer=self.transfer,
                    opts=opts,
                    snapshot_dir=self.repo.snapshot_dir(handle),
                )
                result = None
                if fetched:
                    result = await asyncio.to_thread(
                        ingest_fetched,
                        ds,
                        info,
                        fetched,
                        workdir,
                        clock=lambda: now,
                        progress=progress,
                        max_decompressed_bytes=opts.max_decompressed_bytes,
                        allow_pipe=opts.allow_pipe,
                        engine=_LazyEngine(self._engine),
                    )
        committed = result is not None and not result.up_to_date
        old_head = str(info.state.head) if info.state.head else None
        state_now = info.source_state
        if result is not None and committed and result.new_head is not None:
            last = (await asyncio.to_thread(ds.get_block, result.new_head)).event
            if isinstance(last, m.AddData):
                state_now = last.new_source_state
        out = PullResult(
            alias=handle.alias,
            id=did.as_did_str(),
            comparison="local-behind" if committed else "equal",
            old_head=old_head,
            new_head=str(result.new_head) if result and result.new_head else old_head,
            created=False,
            forced=False,
            new_blocks=len(result.new_blocks) if result else 0,
            objects_downloaded=len(result.slices) if result else 0,
            bytes_downloaded=sum(s.size for s in result.slices) if result else 0,
            source="polling",
            records=result.num_records if result else 0,
            watermark=str(result.watermark) if result and result.watermark else None,
            source_state=(
                {"kind": state_now.kind, "value": state_now.value} if state_now else None
            ),
            publish_work_id=await self._published(did, committed, publish),
        )
        await self._log("dataset.poll", did.as_did_str(), out.to_json())
        return out

    async def log(self, ref: str, limit: int | None = 50) -> list[LogEntry]:
        """The newest ``limit`` metadata blocks (kamu's YAML form as JSON), newest first.

        Each entry carries its block's manifest version; a version-3 block uses the spec v0.38
        keys (``ddlSchema``, ``rawArrowSchema``), a version-2 block the v0.34 ones.
        """
        ds = self.repo.open(ref)

        def read() -> list[LogEntry]:
            out: list[LogEntry] = []
            h = ds.head()
            while h is not None and (limit is None or len(out) < limit):
                data = ds.get_block_bytes(h)
                # The block's own manifest version (2 or 3) decides its field names, as
                # kamu's YAML of a version-3 block uses the spec v0.38 keys.
                version, _ = decode_manifest(data)
                block = decode_block(data)
                out.append(
                    LogEntry(
                        hash=str(h),
                        block=block_to_dict(block, legacy=version == 2),
                        version=version,
                    )
                )
                h = block.prev_block_hash
            return out

        return await asyncio.to_thread(read)

    async def list(self) -> list[DatasetRow]:
        """Datasets stored on this node, with accepted head and verification (daemon)."""

        def read() -> list[tuple[Any, Any, str | None]]:
            rows: list[tuple[Any, Any, str | None]] = []
            for h in self.repo.list():
                try:
                    rows.append((h, self.repo.open(h.id.as_did_str()).state(), None))
                except OdfNodeError as e:
                    rows.append((h, None, str(e)))
            return rows

        out: list[DatasetRow] = []
        for h, st, error in await asyncio.to_thread(read):
            did = h.id.as_did_str()
            head = str(st.head) if st is not None and st.head else None
            acc = await self._state.accepted_head(did) if self._state else None
            ver = await self._state.verification(did, head) if self._state and head else None
            out.append(
                DatasetRow(
                    alias=h.alias,
                    id=did,
                    kind=(
                        st.dataset_kind.name.lower()
                        if st is not None and st.dataset_kind is not None
                        else None
                    ),
                    head=head,
                    blocks=st.sequence_number + 1 if st is not None else None,
                    records=st.next_offset if st is not None else None,
                    owned=self.owns(h.id),
                    accepted_head=acc.head if acc else None,
                    verification=ver.outcome if ver else None,
                    error=error,
                )
            )
        return out

    def require_owned(self, did: DatasetId) -> None:
        """Raise :class:`NotOwner` unless this node holds ``did``'s key."""
        if not self.owns(did):
            raise NotOwner(f"this node does not hold the key of {did.as_did_str()}")


__all__ = ["CommitLocks", "DatasetUseCases", "PollingOptions", "check_input_files"]
