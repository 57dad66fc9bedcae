"""Polling ingest: run a root dataset's ``SetPollingSource`` once (kamu's ``kamu pull`` of a
root), committing what it fetched as ``AddData`` blocks with the new source state.

One poll is: resolve the source and the writer's metadata state from the chain
(:func:`resolve_polling_source`); fetch (:mod:`coordinator.ingest.fetch`: local files here,
HTTP and MQTT by the node's clients); then, for each fetched input in order, prepare
(:mod:`coordinator.ingest.prepare`), read, merge and write it exactly as a push ingest does
(:func:`coordinator.ingest.push.ingest_resolved`), the input's event time filling rows that
have none and its source state written into its ``AddData``. An input that adds no rows still
commits an ``AddData`` when its source state changed (kamu: "only updates source state").

All blocks of one poll are committed at once, or none: a fetched file that does not match the
schema, an archive over the decompression budget, a prepare step that fails, leave the chain
as it was (kamu commits each ``FilesGlob`` file separately; here a glob's pending files are one
commit, so a bad file holds back the files after it until it is fixed or removed).

The polling cases of kamu-cli's ingest tests (kamu-cli,
``src/infra/core/tests/tests/ingest/test_polling_ingest.rs``) are reproduced in
``tests/integration/test_ingest_polling.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from coordinator.clock import TimestampClock
from coordinator.errors import PollingSourceNotFound, UnsupportedPreprocess
from coordinator.ingest.fetch import Fetched, fetch_file_url, fetch_glob, url_scheme
from coordinator.ingest.inputs import InputFile
from coordinator.ingest.prepare import DEFAULT_MAX_DECOMPRESSED_BYTES, prepare
from coordinator.ingest.preprocess import PreprocessEngine, preprocess_inputs
from coordinator.ingest.push import (
    MAX_SNAPSHOT_BYTES,
    PREPROCESS_UNSUPPORTED,
    IngestProgress,
    IngestResult,
    PushSourceInfo,
    ingest_resolved,
    scan_source,
)
from coordinator.metadata import model as m
from coordinator.metadata.timestamp import Timestamp
from coordinator.storage.dataset import Dataset

__all__ = [
    "fetch_local",
    "ingest_fetched",
    "is_http_source",
    "is_mqtt_source",
    "resolve_polling_source",
]


def resolve_polling_source(dataset: Dataset) -> PushSourceInfo:
    """The active ``SetPollingSource`` and the writer's metadata state (with the newest
    ``AddData``'s source state).

    Raises:
        PollingSourceNotFound: not a root dataset, or no active polling source.
    """
    state = dataset.state()
    if state.is_empty:
        raise PollingSourceNotFound("the dataset has no metadata chain")
    if state.dataset_kind != m.DatasetKind.ROOT:
        raise PollingSourceNotFound("only a root dataset has a polling source")
    if not state.polling_source:
        raise PollingSourceNotFound(
            "the dataset has no active polling source (SetPollingSource); push files into it "
            "with `odf-node dataset ingest`"
        )
    info = scan_source(
        dataset, state, lambda e: isinstance(e, m.SetPollingSource), source_state=True
    )
    if info is None:  # pragma: no cover - ChainState says it is active
        raise PollingSourceNotFound("the dataset has no active polling source")
    return info


def _polling(info: PushSourceInfo) -> m.SetPollingSource:
    assert isinstance(info.source, m.SetPollingSource)
    return info.source


def is_http_source(info: PushSourceInfo) -> bool:
    """Whether the source fetches an ``http(s)://`` URL (fetched by the node's HTTP client)."""
    fetch = _polling(info).fetch
    return isinstance(fetch, m.FetchStepUrl) and url_scheme(fetch.url) in ("http", "https")


def is_mqtt_source(info: PushSourceInfo) -> bool:
    """Whether the source subscribes to MQTT topics (fetched by the node's MQTT client)."""
    return isinstance(_polling(info).fetch, m.FetchStepMqtt)


def fetch_local(
    info: PushSourceInfo, system_time: Timestamp, base: Path | None = None
) -> list[Fetched]:
    """Fetch a ``file://`` URL or a ``FilesGlob``: the inputs to ingest (empty: up to date).

    ``base``: the directory a relative ``FilesGlob`` path is resolved against.

    Raises:
        SourceNotFound, SourceNotRunnable, FetchError: see :mod:`coordinator.ingest.fetch`.
        PollingSourceNotFound: the fetch step is one this node does not run (an old chain).
    """
    fetch = _polling(info).fetch
    if isinstance(fetch, m.FetchStepFilesGlob):
        return fetch_glob(fetch, info.source_state, system_time, base)
    if isinstance(fetch, m.FetchStepUrl) and url_scheme(fetch.url) == "file":
        got = fetch_file_url(fetch, info.source_state, system_time)
        return [got] if got is not None else []
    raise PollingSourceNotFound(
        f"fetch step {type(fetch).__name__.removeprefix('FetchStep')} is not fetched locally"
    )


def ingest_fetched(
    dataset: Dataset,
    info: PushSourceInfo,
    fetched: Sequence[Fetched],
    workdir: Path,
    *,
    clock: TimestampClock | None = None,
    progress: Callable[[IngestProgress], None] | None = None,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    allow_pipe: bool = False,
    snapshot_bytes: int = MAX_SNAPSHOT_BYTES,
    engine: PreprocessEngine | None = None,
) -> IngestResult:
    """Prepare, read, merge and commit the fetched inputs (see the module docstring).

    ``workdir`` holds the prepared files (the caller removes it). ``clock`` should return the
    system time the fetch used, so that ``fromSystemTime`` event times equal the blocks'.
    ``engine`` runs the source's preprocess query (:mod:`coordinator.ingest.preprocess`).

    Raises:
        UnsupportedPreprocess: the source has a preprocess query and no engine is given.
        PrepareError, DecompressBudgetExceeded, and every error of a push ingest: nothing was
        committed.
    """
    source = _polling(info)
    if source.preprocess is not None and engine is None:
        raise UnsupportedPreprocess(PREPROCESS_UNSUPPORTED)
    steps = source.prepare

    def prepared(path: Path, index: int) -> Path:
        if not steps:
            return path
        step_dir = workdir / f"input-{index}"
        step_dir.mkdir(parents=True, exist_ok=True)
        return prepare(
            steps, path, step_dir, max_bytes=max_decompressed_bytes, allow_pipe=allow_pipe
        )

    inputs = [InputFile(f.path, f.event_time, f.source_state) for f in fetched]
    if source.preprocess is not None:
        assert engine is not None
        schema, outputs = preprocess_inputs(
            source.read,
            source.preprocess,
            inputs,
            workdir,
            engine,
            prepare=prepared,
            max_decompressed_bytes=max_decompressed_bytes,
        )
        return ingest_resolved(
            dataset,
            info,
            outputs,
            clock=clock,
            progress=progress,
            snapshot_bytes=snapshot_bytes,
            preprocessed=schema,
        )
    return ingest_resolved(
        dataset,
        info,
        inputs,
        clock=clock,
        progress=progress,
        snapshot_bytes=snapshot_bytes,
        prepare=prepared,
        max_decompressed_bytes=max_decompressed_bytes,
    )
