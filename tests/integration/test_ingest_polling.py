"""Polling ingest end to end on a real on-disk dataset (``coordinator/ingest/polling.py``).

The ``file://`` cases are the polling cases of kamu-cli's ingest tests (kamu-cli,
``src/infra/core/tests/tests/ingest/test_polling_ingest.rs``): the same inputs, rows, offsets,
operation codes, event times, watermarks and source-state commits. ``FilesGlob`` follows
kamu-cli's fetch service (``src/infra/core/src/services/ingest/fetch_service/file.rs``): files
in name order, each once (the last file name is the ``odf/etag`` state), event time from the
name. Every failure leaves the chain unchanged.
"""

from __future__ import annotations

import gzip
import io
import os
import zipfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from shapefiles import one_point_zip, regions_members, regions_zip

from coordinator.data import logical_hash
from coordinator.errors import (
    BadInputData,
    BadInputSchema,
    DecompressBudgetExceeded,
    FetchError,
    IngestError,
    PollingSourceNotFound,
    PrepareError,
    SourceNotFound,
    SourceNotRunnable,
    UnsupportedPreprocess,
)
from coordinator.identity import DatasetId
from coordinator.ingest import ingest
from coordinator.ingest.fetch import check_polling_source
from coordinator.ingest.polling import fetch_local, ingest_fetched, resolve_polling_source
from coordinator.ingest.push import IngestResult
from coordinator.metadata import model as m
from coordinator.metadata.timestamp import Timestamp
from coordinator.multiformats import Multihash
from coordinator.storage import Dataset
from node.engine_client import EngineClient
from node.engine_router import EngineRouter

T1 = Timestamp.parse("2050-01-01T12:00:00Z")  # kamu's test clock
T2 = Timestamp.parse("2050-02-01T12:00:00Z")
SYSTEM_TIME = m.EventTimeSourceFromSystemTime()


def make_dataset(
    root: Path, source: m.SetPollingSource, vocab: m.SetVocab | None = None
) -> Dataset:
    check_polling_source(source)
    ds = Dataset.create(root / "ds")
    events: list[m.MetadataEvent] = [
        m.Seed(dataset_id=DatasetId.new_seeded_ed25519(b"poll"), dataset_kind=m.DatasetKind.ROOT),
        source,
    ]
    if vocab is not None:
        events.append(vocab)
    for ev in events:
        st = ds.state()
        ds.append(
            m.MetadataBlock(
                system_time=T1,
                prev_block_hash=st.head,
                sequence_number=st.sequence_number + 1,
                event=ev,
            )
        )
    return ds


def poll(ds: Dataset, now: Timestamp, **kwargs: object) -> IngestResult | None:
    """One run of the polling source, as ``dataset pull`` does for local sources."""
    info = resolve_polling_source(ds)
    fetched = fetch_local(info, now)
    if not fetched:
        return None
    work = ds.layout.info_dir / "poll-test"
    work.mkdir(parents=True, exist_ok=True)
    return ingest_fetched(ds, info, fetched, work, clock=lambda: now, **kwargs)  # type: ignore[arg-type]


def write(path: Path, text: str, mtime_s: int) -> None:
    """Write ``text`` with a distinct modification time (the source state of a file URL)."""
    path.write_text(text)
    os.utime(path, (mtime_s, mtime_s))


def last_add_data(ds: Dataset) -> m.AddData:
    for _, b in ds.iter_blocks():
        if isinstance(b.event, m.AddData):
            return b.event
    raise AssertionError("no AddData")


def last_data(ds: Dataset) -> list[dict[str, object]]:
    for _, b in ds.iter_blocks():
        if isinstance(b.event, m.AddData) and b.event.new_data is not None:
            s = b.event.new_data
            path = ds.data.path_of(s.physical_hash)
            # Content and logical hashes as kamu computes them.
            assert Multihash.sha3_256(path.read_bytes()) == s.physical_hash
            assert Multihash.from_multibase(logical_hash(path)) == s.logical_hash
            return pq.read_table(path).to_pylist()
    raise AssertionError("no data")


def ts(text: str) -> object:
    return Timestamp.parse(text).to_datetime()


def url_source(
    path: Path,
    read: m.ReadStep,
    merge: m.MergeStrategy,
    *,
    prepare: tuple[m.PrepStep, ...] | None = None,
    event_time: m.EventTimeSource | None = SYSTEM_TIME,
) -> m.SetPollingSource:
    return m.SetPollingSource(
        fetch=m.FetchStepUrl(url=path.as_uri(), event_time=event_time),
        prepare=prepare,
        read=read,
        merge=merge,
    )


CITY_POP = m.ReadStepCsv(header=True, ddl_schema=("city STRING", "population BIGINT"))


# ---------------------------------------------------------------------------------------------
# kamu-cli test_polling_ingest.rs
# ---------------------------------------------------------------------------------------------


def test_polling_snapshot(tmp_path: Path) -> None:
    """kamu's ``test_ingest_polling_snapshot`` (without its preprocess query)."""
    src = tmp_path / "data.csv"
    ds = make_dataset(
        tmp_path, url_source(src, CITY_POP, m.MergeStrategySnapshot(primary_key=("city",)))
    )
    write(src, "city,population\nA,1000\nB,2000\nC,3000\n", 1_000)
    res = poll(ds, T1)
    assert res is not None and res.num_records == 3
    assert last_data(ds) == [
        {"offset": i, "op": 0, "system_time": ts("2050-01-01T12:00:00Z"),
         "event_time": ts("2050-01-01T12:00:00Z"), "city": c, "population": p}
        for i, (c, p) in enumerate((("A", 1000), ("B", 2000), ("C", 3000)))
    ]  # fmt: skip
    add = last_add_data(ds)
    assert add.new_watermark == T1
    # The file's modification time is the source state (odf/last-modified, AutoSi RFC 3339).
    assert add.new_source_state == m.SourceState(
        source_name="default", kind="odf/last-modified", value="1970-01-01T00:16:40Z"
    )

    # Round 2: C changed -> retraction + correction.
    write(src, "city,population\nA,1000\nB,2000\nC,4000\n", 2_000)
    poll(ds, T2)
    assert [(r["offset"], r["op"], r["system_time"], r["event_time"], r["city"],
             r["population"]) for r in last_data(ds)] == [
        (3, 2, ts("2050-02-01T12:00:00Z"), ts("2050-01-01T12:00:00Z"), "C", 3000),
        (4, 3, ts("2050-02-01T12:00:00Z"), ts("2050-02-01T12:00:00Z"), "C", 4000),
    ]  # fmt: skip
    assert last_add_data(ds).new_watermark == T2

    # Round 3: same content, new modification time: only the source state is committed.
    write(src, "city,population\nA,1000\nB,2000\nC,4000\n", 3_000)
    head = ds.state().head
    res = poll(ds, T2)
    assert res is not None and len(res.new_blocks) == 1 and res.num_records == 0
    add = last_add_data(ds)
    assert add.new_data is None and add.new_watermark == T2
    assert add.new_source_state is not None and add.new_source_state.value == "1970-01-01T00:50:00Z"
    assert add.prev_offset == 4
    assert ds.get_block(res.new_blocks[0]).prev_block_hash == head

    # Round 4: the file is untouched: up to date, no block (kamu's FetchResult::UpToDate).
    head = ds.state().head
    assert poll(ds, T2) is None
    assert ds.state().head == head


def test_polling_ledger(tmp_path: Path) -> None:
    """kamu's ``test_ingest_polling_ledger``: five rounds, the last two only update the state."""
    src = tmp_path / "data.csv"
    ds = make_dataset(
        tmp_path,
        url_source(
            src,
            m.ReadStepCsv(
                header=True, ddl_schema=("date TIMESTAMP", "city STRING", "population BIGINT")
            ),
            m.MergeStrategyLedger(primary_key=("date", "city")),
        ),
        m.SetVocab(event_time_column="date"),
    )
    write(src, "date,city,population\n2020-01-01,A,1000\n2020-01-01,B,2000\n2020-01-01,C,3000\n", 1)
    poll(ds, T1)
    assert [(r["offset"], r["op"], r["system_time"], r["date"], r["city"], r["population"])
            for r in last_data(ds)] == [
        (0, 0, ts("2050-01-01T12:00:00Z"), ts("2020-01-01T00:00:00Z"), "A", 1000),
        (1, 0, ts("2050-01-01T12:00:00Z"), ts("2020-01-01T00:00:00Z"), "B", 2000),
        (2, 0, ts("2050-01-01T12:00:00Z"), ts("2020-01-01T00:00:00Z"), "C", 3000),
    ]  # fmt: skip
    assert last_add_data(ds).new_watermark == Timestamp.parse("2020-01-01T00:00:00Z")

    write(src, "date,city,population\n2020-01-01,B,2000\n2020-01-01,C,3000\n2021-01-01,C,4000\n", 2)
    poll(ds, T1)
    assert [(r["offset"], r["op"], r["date"], r["city"], r["population"])
            for r in last_data(ds)] == [
        (3, 0, ts("2021-01-01T00:00:00Z"), "C", 4000)
    ]  # fmt: skip
    assert last_add_data(ds).new_watermark == Timestamp.parse("2021-01-01T00:00:00Z")

    write(src, "date,city,population\n2020-01-01,D,4000\n", 3)
    poll(ds, T1)
    assert [(r["offset"], r["op"], r["date"], r["city"]) for r in last_data(ds)] == [
        (4, 0, ts("2020-01-01T00:00:00Z"), "D")
    ]
    # The watermark never goes back.
    assert last_add_data(ds).new_watermark == Timestamp.parse("2021-01-01T00:00:00Z")

    # Round 4: duplicate data; round 5: an empty file. Each commits only the source state.
    for mtime, text in ((4, "date,city,population\n2020-01-01,D,4000\n"), (5, "")):
        write(src, text, mtime)
        res = poll(ds, T1)
        assert res is not None and res.num_records == 0 and len(res.new_blocks) == 1
        add = last_add_data(ds)
        assert add.new_data is None
        assert add.new_watermark == Timestamp.parse("2021-01-01T00:00:00Z")
        assert add.new_source_state is not None
        assert add.new_source_state.value == f"1970-01-01T00:00:0{mtime}Z"
    assert ds.state().next_offset == 5


def test_polling_empty_data(tmp_path: Path) -> None:
    """kamu's ``test_ingest_polling_empty_data``: an empty first file commits the source state
    without data or watermark. (kamu's case reads without a schema, so it has none to record;
    here the read step's schema is known, and is recorded by a ``SetDataSchema`` first.)"""
    src = tmp_path / "data.csv"
    ds = make_dataset(
        tmp_path,
        url_source(
            src,
            m.ReadStepCsv(ddl_schema=("date TIMESTAMP", "city STRING", "population BIGINT")),
            m.MergeStrategyLedger(primary_key=("date", "city")),
        ),
        m.SetVocab(event_time_column="date"),
    )
    write(src, "", 7)
    res = poll(ds, T1)
    assert res is not None
    kinds = [type(ds.get_block(h).event).__name__ for h in res.new_blocks]
    assert kinds == ["SetDataSchema", "AddData"]
    add = last_add_data(ds)
    assert add.new_data is None and add.new_watermark is None and add.prev_offset is None
    assert add.new_source_state is not None


def test_polling_event_time_as_date(tmp_path: Path) -> None:
    """kamu's ``test_ingest_polling_event_time_as_date``."""
    src = tmp_path / "data.csv"
    ds = make_dataset(
        tmp_path,
        url_source(
            src,
            m.ReadStepCsv(
                header=True, ddl_schema=("date DATE", "city STRING", "population BIGINT")
            ),
            m.MergeStrategySnapshot(primary_key=("date", "city")),
        ),
        m.SetVocab(event_time_column="date"),
    )
    write(src, "date,city,population\n2020-01-01,A,1000\n2020-01-01,B,2000\n2020-01-01,C,3000\n", 1)
    poll(ds, T1)
    schema = pq.read_schema(ds.data.path_of(last_add_data(ds).new_data.physical_hash))  # type: ignore[union-attr]
    assert str(schema.field("date").type) == "date32[day]"
    assert [(r["offset"], r["op"], r["city"]) for r in last_data(ds)] == [
        (0, 0, "A"), (1, 0, "B"), (2, 0, "C")
    ]  # fmt: skip
    assert last_add_data(ds).new_watermark == Timestamp.parse("2020-01-01T00:00:00Z")


def test_polling_event_time_of_invalid_type(tmp_path: Path) -> None:
    """kamu's ``test_ingest_polling_event_time_of_invalid_type``: BadInputSchema, nothing
    committed."""
    src = tmp_path / "data.csv"
    ds = make_dataset(
        tmp_path,
        url_source(
            src,
            m.ReadStepCsv(
                header=True, ddl_schema=("date STRING", "city STRING", "population BIGINT")
            ),
            m.MergeStrategyAppend(),
        ),
        m.SetVocab(event_time_column="date"),
    )
    write(src, "date,city,population\n2020-01-01,A,1000\n", 1)
    head = ds.state().head
    with pytest.raises(BadInputSchema):
        poll(ds, T1)
    assert ds.state().head == head


# ---------------------------------------------------------------------------------------------
# Event time from the URL's metadata; failures
# ---------------------------------------------------------------------------------------------


def test_file_url_event_time_from_metadata(tmp_path: Path) -> None:
    src = tmp_path / "data.csv"
    ds = make_dataset(tmp_path, url_source(src, CITY_POP, m.MergeStrategyAppend(), event_time=None))
    write(src, "city,population\nA,1\n", 86_400)
    poll(ds, T1)
    assert last_data(ds)[0]["event_time"] == ts("1970-01-02T00:00:00Z")


def test_missing_file_and_bad_file_commit_nothing(tmp_path: Path) -> None:
    src = tmp_path / "data.csv"
    ds = make_dataset(tmp_path, url_source(src, CITY_POP, m.MergeStrategyAppend()))
    head = ds.state().head
    with pytest.raises(SourceNotFound, match="source file not found"):
        poll(ds, T1)
    write(src, "city,population\nA,not-a-number\n", 1)
    with pytest.raises(BadInputData, match="population"):
        poll(ds, T1)
    assert ds.state().head == head
    assert not any(ds.layout.data_dir.iterdir())


def test_polling_needs_a_polling_source(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "ds")
    ds.append(
        m.MetadataBlock(
            system_time=T1,
            sequence_number=0,
            event=m.Seed(
                dataset_id=DatasetId.new_seeded_ed25519(b"x"), dataset_kind=m.DatasetKind.ROOT
            ),
        )
    )
    with pytest.raises(PollingSourceNotFound, match="no active polling source"):
        resolve_polling_source(ds)


@pytest.mark.parametrize(
    ("fetch", "message"),
    [
        (
            m.FetchStepUrl(
                url="https://example.org/a.csv",
                event_time=m.EventTimeSourceFromPath(pattern="(.*)"),
            ),
            "fromPath",
        ),
        (
            m.FetchStepFilesGlob(
                path="/data/*.csv", event_time=m.EventTimeSourceFromPath(pattern="no-group")
            ),
            "no group 1",
        ),
        (
            m.FetchStepFilesGlob(path="/data/*.csv", event_time=m.EventTimeSourceFromMetadata()),
            "fromMetadata",
        ),
    ],
)
def test_sources_that_cannot_run_are_refused_at_pull(fetch: m.FetchStep, message: str) -> None:
    """kamu's ``add`` accepts them (so does ``dataset create``); its pull refuses them."""
    source = m.SetPollingSource(fetch=fetch, read=CITY_POP, merge=m.MergeStrategyAppend())
    with pytest.raises(FetchError, match=message):
        check_polling_source(source)


def test_a_relative_glob_without_a_base_is_not_runnable(tmp_path: Path) -> None:
    """A relative FilesGlob resolves against a base directory (``[ingest] files_root`` or the
    snapshot's, tests/integration/test_create_kamu_features.py); with none it cannot run."""
    ds = make_dataset(tmp_path, glob_source(tmp_path))
    info = resolve_polling_source(ds)
    assert isinstance(info.source, m.SetPollingSource)
    relative = replace(info.source, fetch=m.FetchStepFilesGlob(path="data/*.csv"))
    with pytest.raises(SourceNotRunnable, match="files_root"):
        fetch_local(replace(info, source=relative), T2)


@pytest.mark.parametrize(
    "fetch",
    [
        m.FetchStepContainer(image="ghcr.io/kamu-data/fetch:1"),
        m.FetchStepEthereumLogs(chain_id=1, signature="Transfer(address,uint256)"),
        m.FetchStepUrl(url="gopher://example.org/a.csv"),
    ],
)
def test_node_dependent_sources_are_accepted_at_create(fetch: m.FetchStep) -> None:
    """kamu's ``add`` accepts them; whether they run here is decided at pull."""
    source = m.SetPollingSource(fetch=fetch, read=CITY_POP, merge=m.MergeStrategyAppend())
    check_polling_source(source)


# ---------------------------------------------------------------------------------------------
# FilesGlob
# ---------------------------------------------------------------------------------------------


def glob_source(directory: Path) -> m.SetPollingSource:
    return m.SetPollingSource(
        fetch=m.FetchStepFilesGlob(
            path=str(directory / "pop-*.csv"),
            event_time=m.EventTimeSourceFromPath(
                pattern=r"pop-(\d+-\d+-\d+)\.csv", timestamp_format="%Y-%m-%d"
            ),
        ),
        read=CITY_POP,
        merge=m.MergeStrategyLedger(primary_key=("city",)),
    )


def test_files_glob_in_order_each_once_across_restarts(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    ds = make_dataset(tmp_path, glob_source(inbox))
    with pytest.raises(SourceNotFound, match="no file matches"):
        poll(ds, T1)
    # Written out of order: ingested in name order, one AddData each.
    (inbox / "pop-2020-01-02.csv").write_text("city,population\nB,2\n")
    (inbox / "pop-2020-01-01.csv").write_text("city,population\nA,1\n")
    (inbox / "other.csv").write_text("city,population\nZ,9\n")  # not matched
    res = poll(ds, T1)
    assert res is not None and res.num_records == 2 and len(res.slices) == 2
    adds = [b.event for _, b in ds.iter_blocks() if isinstance(b.event, m.AddData)][::-1]
    assert [a.new_source_state.value for a in adds if a.new_source_state] == [
        "pop-2020-01-01.csv",
        "pop-2020-01-02.csv",
    ]
    assert {a.new_source_state.kind for a in adds if a.new_source_state} == {"odf/etag"}
    assert [a.new_watermark for a in adds] == [
        Timestamp.parse("2020-01-01T00:00:00Z"),
        Timestamp.parse("2020-01-02T00:00:00Z"),
    ]
    assert [(r["offset"], r["city"], r["event_time"]) for r in last_data(ds)] == [
        (1, "B", ts("2020-01-02T00:00:00Z"))
    ]

    # A "restart": a fresh Dataset object reads the state from the chain; nothing is new.
    ds = Dataset(ds.layout.root)
    assert poll(ds, T2) is None
    # Touching an ingested file does not ingest it again; a new later file is picked up.
    os.utime(inbox / "pop-2020-01-01.csv", (10, 10))
    (inbox / "pop-2020-01-03.csv").write_text("city,population\nC,3\nA,1\n")
    res = poll(ds, T2)
    assert res is not None and res.num_records == 1  # A is already in the ledger
    assert last_add_data(ds).new_source_state.value == "pop-2020-01-03.csv"  # type: ignore[union-attr]
    assert ds.state().next_offset == 3
    # An earlier name added late is never picked up (kamu: names after the last one only).
    (inbox / "pop-2019-12-31.csv").write_text("city,population\nD,4\n")
    assert poll(ds, T2) is None


def test_files_glob_bad_file_commits_nothing(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    ds = make_dataset(tmp_path, glob_source(inbox))
    (inbox / "pop-2020-01-01.csv").write_text("city,population\nA,1\n")
    (inbox / "pop-2020-01-02.csv").write_text("city,population\nB,two\n")
    head = ds.state().head
    with pytest.raises(BadInputData, match=r"pop-2020-01-02\.csv"):
        poll(ds, T1)
    assert ds.state().head == head
    assert not any(ds.layout.data_dir.iterdir())  # the first file's part was removed again
    (inbox / "pop-2020-01-02.csv").write_text("city,population\nB,2\n")  # fixed
    res = poll(ds, T1)
    assert res is not None and res.num_records == 2


def test_files_glob_name_without_a_date(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    ds = make_dataset(tmp_path, glob_source(inbox))
    (inbox / "pop-2020-13-45.csv").write_text("city,population\nA,1\n")
    with pytest.raises(FetchError, match="timestampFormat"):
        poll(ds, T1)


# ---------------------------------------------------------------------------------------------
# Decompress
# ---------------------------------------------------------------------------------------------

CSV = b"city,population\nA,1000\nB,2000\n"


def _zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


@pytest.mark.parametrize(
    ("name", "payload", "step"),
    [
        # mtime=0: the bytes (and so the test's id) must not depend on the second they were
        # made in, or two pytest-xdist workers collect different tests.
        (
            "data.csv.gz",
            gzip.compress(CSV, mtime=0),
            m.PrepStepDecompress(format=m.CompressionFormat.GZIP),
        ),
        ("data.zip", _zip({"data.csv": CSV}), m.PrepStepDecompress(format=m.CompressionFormat.ZIP)),
        (
            "data.zip",
            _zip({"README": b"not csv", "dir/data.csv": CSV}),
            m.PrepStepDecompress(format=m.CompressionFormat.ZIP, sub_path="dir/data.csv"),
        ),
    ],
    ids=["gzip", "zip", "zip-sub-path"],
)
def test_decompress(tmp_path: Path, name: str, payload: bytes, step: m.PrepStep) -> None:
    src = tmp_path / name
    src.write_bytes(payload)
    ds = make_dataset(tmp_path, url_source(src, CITY_POP, m.MergeStrategyAppend(), prepare=(step,)))
    res = poll(ds, T1)
    assert res is not None and res.num_records == 2
    assert [(r["city"], r["population"]) for r in last_data(ds)] == [("A", 1000), ("B", 2000)]
    assert src.read_bytes() == payload  # the source is left as it was


@pytest.mark.parametrize("fmt", [m.CompressionFormat.GZIP, m.CompressionFormat.ZIP])
def test_zip_bomb_is_refused_by_the_budget(tmp_path: Path, fmt: m.CompressionFormat) -> None:
    # 64 MiB of zeros compress to ~64 KiB; the budget here is 1 MiB.
    zeros = b"0" * (64 << 20)
    payload = gzip.compress(zeros, 9) if fmt == m.CompressionFormat.GZIP else _zip({"a": zeros})
    assert len(payload) < 1 << 20
    src = tmp_path / "bomb"
    src.write_bytes(payload)
    ds = make_dataset(
        tmp_path,
        url_source(
            src, CITY_POP, m.MergeStrategyAppend(), prepare=(m.PrepStepDecompress(format=fmt),)
        ),
    )
    head = ds.state().head
    with pytest.raises(DecompressBudgetExceeded, match=r"ingest\.max_decompressed_bytes"):
        poll(ds, T1, max_decompressed_bytes=1 << 20)
    assert ds.state().head == head
    work = ds.layout.info_dir / "poll-test"
    assert sum(p.stat().st_size for p in work.rglob("*") if p.is_file()) <= 1 << 20


def test_bad_archive_and_missing_member(tmp_path: Path) -> None:
    src = tmp_path / "data.zip"
    src.write_bytes(b"PK\x03\x04 not really a zip")
    step = m.PrepStepDecompress(format=m.CompressionFormat.ZIP)
    ds = make_dataset(tmp_path, url_source(src, CITY_POP, m.MergeStrategyAppend(), prepare=(step,)))
    with pytest.raises(PrepareError, match="not a readable zip archive"):
        poll(ds, T1)
    src.write_bytes(_zip({"x.csv": CSV}))
    ds2 = make_dataset(
        tmp_path / "2",
        url_source(
            src,
            CITY_POP,
            m.MergeStrategyAppend(),
            prepare=(m.PrepStepDecompress(format=m.CompressionFormat.ZIP, sub_path="y.csv"),),
        ),
    )
    with pytest.raises(PrepareError, match=r"no member 'y\.csv'"):
        poll(ds2, T1)


def test_pipe_needs_the_switch(tmp_path: Path) -> None:
    src = tmp_path / "data.csv"
    src.write_text("city,population\nb,2\na,1\n")
    pipe = m.PrepStepPipe(command=("tr", "a-z", "A-Z"))
    ds = make_dataset(tmp_path, url_source(src, CITY_POP, m.MergeStrategyAppend(), prepare=(pipe,)))
    head = ds.state().head
    with pytest.raises(PrepareError, match=r"ingest\.allow_pipe"):
        poll(ds, T1)
    assert ds.state().head == head
    res = poll(ds, T1, allow_pipe=True)
    assert res is not None
    assert [r["city"] for r in last_data(ds)] == ["B", "A"]


def test_failing_pipe_commits_nothing(tmp_path: Path) -> None:
    src = tmp_path / "data.csv"
    src.write_text("city,population\na,1\n")
    pipe = m.PrepStepPipe(command=("sh", "-c", "echo broken >&2; exit 3"))
    ds = make_dataset(tmp_path, url_source(src, CITY_POP, m.MergeStrategyAppend(), prepare=(pipe,)))
    head = ds.state().head
    with pytest.raises(PrepareError, match="exited with code 3: broken"):
        poll(ds, T1, allow_pipe=True)
    assert ds.state().head == head


# ---------------------------------------------------------------------------------------------
# Every read step through a polling source
# ---------------------------------------------------------------------------------------------

GEOMETRY = '{"coordinates":[1.0,2.0],"type":"Point"}'
FEATURE = (
    '{"type": "Feature", "properties": {"city": "A", "population": 1000}, '
    '"geometry": {"type": "Point", "coordinates": [1.0, 2.0]}}'
)


def _parquet_bytes() -> bytes:
    import pyarrow as pa

    buf = io.BytesIO()
    pq.write_table(pa.table({"city": ["A"], "population": [1000]}), buf)
    return buf.getvalue()


@pytest.mark.parametrize(
    ("read", "payload", "expected"),
    [
        (CITY_POP, b"city,population\nA,1000\n", {}),
        (
            m.ReadStepNdJson(ddl_schema=("city STRING", "population BIGINT")),
            b'{"city": "A", "population": 1000}\n',
            {},
        ),
        (
            m.ReadStepJson(sub_path="data", ddl_schema=("city STRING", "population BIGINT")),
            b'{"data": [{"city": "A", "population": 1000}]}',
            {},
        ),
        (m.ReadStepParquet(ddl_schema=("city STRING", "population BIGINT")), _parquet_bytes(), {}),
        (
            m.ReadStepGeoJson(ddl_schema=("city STRING", "population BIGINT", "geometry STRING")),
            ('{"type": "FeatureCollection", "features": [' + FEATURE + "]}").encode(),
            {"geometry": GEOMETRY},
        ),
        (
            m.ReadStepNdGeoJson(ddl_schema=("city STRING", "population BIGINT", "geometry STRING")),
            FEATURE.encode() + b"\n",
            {"geometry": GEOMETRY},
        ),
        (
            m.ReadStepEsriShapefile(
                ddl_schema=("city STRING", "population BIGINT", "geometry STRING")
            ),
            one_point_zip(),
            {"geometry": GEOMETRY},
        ),
    ],
    ids=["csv", "ndjson", "json", "parquet", "geojson", "ndgeojson", "esrishapefile"],
)
def test_every_read_step(
    tmp_path: Path, read: m.ReadStep, payload: bytes, expected: dict[str, object]
) -> None:
    src = tmp_path / "input"
    src.write_bytes(payload)
    ds = make_dataset(tmp_path, url_source(src, read, m.MergeStrategyAppend()))
    poll(ds, T1)
    (row,) = last_data(ds)
    assert row == {
        "offset": 0,
        "op": 0,
        "system_time": T1.to_datetime(),
        "event_time": T1.to_datetime(),
        "city": "A",
        "population": 1000,
        **expected,
    }


def shapefile_glob_source(directory: Path) -> m.SetPollingSource:
    return m.SetPollingSource(
        fetch=m.FetchStepFilesGlob(
            path=str(directory / "regions-*.zip"),
            event_time=m.EventTimeSourceFromPath(
                pattern=r"regions-(\d+-\d+-\d+)\.zip", timestamp_format="%Y-%m-%d"
            ),
        ),
        read=m.ReadStepEsriShapefile(
            ddl_schema=("iso STRING", "name_1 STRING", "id_1 BIGINT", "geometry STRING"),
            sub_path="*.shp",
        ),
        merge=m.MergeStrategyLedger(primary_key=("id_1",)),
    )


def test_esri_shapefile_files_glob_in_order_each_once(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    ds = make_dataset(tmp_path, shapefile_glob_source(inbox))
    (inbox / "regions-2020-01-02.zip").write_bytes(regions_zip())
    (inbox / "regions-2020-01-01.zip").write_bytes(one_point_zip())  # no id_1: nulls
    res = poll(ds, T1)
    assert res is not None and res.num_records == 5 and len(res.slices) == 2
    rows = last_data(ds)  # logical and physical hashes checked as kamu computes them
    assert [(r["offset"], r["name_1"], r["id_1"], r["event_time"]) for r in rows] == [
        (1, "Cherkasy", 1, ts("2020-01-02T00:00:00Z")),
        (2, "Chernihiv", 2, ts("2020-01-02T00:00:00Z")),
        (3, "Crimea", 3, ts("2020-01-02T00:00:00Z")),
        (4, "Kiev City", 11, ts("2020-01-02T00:00:00Z")),
    ]
    assert {r["op"] for r in rows} == {0} and {r["iso"] for r in rows} == {"UKR"}
    assert str(rows[0]["geometry"]).startswith('{"coordinates":[[[[0.0,0.0],[0.0,10.0],')
    assert last_add_data(ds).new_source_state.value == "regions-2020-01-02.zip"  # type: ignore[union-attr]
    # A restart reads nothing new; a later archive adds only the regions the ledger lacks.
    ds = Dataset(ds.layout.root)
    assert poll(ds, T2) is None
    (inbox / "regions-2020-01-03.zip").write_bytes(regions_zip())
    res = poll(ds, T2)
    assert res is not None and res.num_records == 0
    assert last_add_data(ds).new_source_state.value == "regions-2020-01-03.zip"  # type: ignore[union-attr]


def test_esri_shapefile_bad_archives_commit_nothing(tmp_path: Path) -> None:
    src = tmp_path / "regions.zip"
    read = m.ReadStepEsriShapefile(ddl_schema=("name_1 STRING",))
    ds = make_dataset(tmp_path, url_source(src, read, m.MergeStrategyAppend()))
    head = ds.state().head
    two = _zip(
        {
            **{f"a/{k}": v for k, v in regions_members().items()},
            **{f"b/{k}": v for k, v in regions_members().items()},
        }
    )
    members = regions_members()
    corrupt = _zip({**members, "regions.shp": members["regions.shp"][:-7]})
    # The archive's .shp and .dbf hold 1,389 bytes.
    for data, error, message, budget in [
        (_zip({"readme.txt": b"no shapes"}), BadInputData, r"does not contain any \.shp", 1 << 20),
        (two, BadInputData, r"multiple \.shp files\. Specify `subPath`", 1 << 20),
        (corrupt, BadInputData, "truncated", 1 << 20),
        (regions_zip(), DecompressBudgetExceeded, r"ingest\.max_decompressed_bytes", 1388),
    ]:
        src.write_bytes(data)
        with pytest.raises(error, match=message):
            poll(ds, T1, max_decompressed_bytes=budget)
        assert ds.state().head == head
        assert not any(ds.layout.data_dir.iterdir())
    src.write_bytes(regions_zip())
    res = poll(ds, T1, max_decompressed_bytes=1389)
    assert res is not None and res.num_records == 4


# ---------------------------------------------------------------------------------------------
# Preprocess queries on a real DataFusion engine worker (kamu's snapshot case with its
# two-step preprocess query; the query runs in the engine's sandbox like a transform)
# ---------------------------------------------------------------------------------------------

KAMU_STEPS = (
    m.SqlQueryStep(alias="step1", query="select city, population * 10 as population from input"),
    m.SqlQueryStep(query="select city, population + 1 as population from step1"),
)


def no_spark() -> EngineClient:
    raise AssertionError("Spark must not be started for a DataFusion preprocess")


@pytest.fixture(scope="module")
def engine() -> Iterator[EngineRouter]:
    router = EngineRouter(no_spark, idle_timeout=0)
    yield router
    router.close()


def test_polling_snapshot_with_preprocess(tmp_path: Path, engine: EngineRouter) -> None:
    src = tmp_path / "data.csv"
    source = url_source(src, CITY_POP, m.MergeStrategySnapshot(primary_key=("city",)))
    source = m.SetPollingSource(
        fetch=source.fetch,
        read=source.read,
        merge=source.merge,
        preprocess=m.TransformSql(engine="datafusion", queries=KAMU_STEPS),
    )
    ds = make_dataset(tmp_path, source)
    write(src, "city,population\nA,1000\nB,2000\nC,3000\n", 1)
    with pytest.raises(UnsupportedPreprocess):
        poll(ds, T1)  # no engine given
    poll(ds, T1, engine=engine)
    assert [(r["offset"], r["op"], r["event_time"], r["city"], r["population"])
            for r in last_data(ds)] == [
        (0, 0, ts("2050-01-01T12:00:00Z"), "A", 10001),
        (1, 0, ts("2050-01-01T12:00:00Z"), "B", 20001),
        (2, 0, ts("2050-01-01T12:00:00Z"), "C", 30001),
    ]  # fmt: skip
    assert last_add_data(ds).new_watermark == T1

    write(src, "city,population\nA,1000\nB,2000\nC,4000\n", 2)
    poll(ds, T2, engine=engine)
    assert [(r["offset"], r["op"], r["system_time"], r["event_time"], r["city"],
             r["population"]) for r in last_data(ds)] == [
        (3, 2, ts("2050-02-01T12:00:00Z"), ts("2050-01-01T12:00:00Z"), "C", 30001),
        (4, 3, ts("2050-02-01T12:00:00Z"), ts("2050-02-01T12:00:00Z"), "C", 40001),
    ]  # fmt: skip

    # Round 3 (no-op, only updates source state)
    write(src, "city,population\nA,1000\nB,2000\nC,4000\n", 3)
    poll(ds, T2, engine=engine)
    add = last_add_data(ds)
    assert add.new_data is None and add.new_watermark == T2 and add.new_source_state is not None


def test_push_preprocess_and_sandbox(tmp_path: Path, engine: EngineRouter) -> None:
    ds = Dataset.create(tmp_path / "ds")
    bad = "select city, population from read_csv('/etc/passwd')"
    events: list[m.MetadataEvent] = [
        m.Seed(dataset_id=DatasetId.new_seeded_ed25519(b"pp"), dataset_kind=m.DatasetKind.ROOT),
        m.AddPushSource(
            source_name="default",
            read=CITY_POP,
            merge=m.MergeStrategyAppend(),
            preprocess=m.TransformSql(engine="datafusion", queries=(m.SqlQueryStep(query=bad),)),
        ),
    ]
    for ev in events:
        st = ds.state()
        ds.append(
            m.MetadataBlock(
                system_time=T1,
                prev_block_hash=st.head,
                sequence_number=st.sequence_number + 1,
                event=ev,
            )
        )
    f = tmp_path / "a.csv"
    f.write_text("city,population\nA,1\n")
    head = ds.state().head
    with pytest.raises(IngestError, match="preprocess query is invalid"):
        ingest(ds, [f], clock=lambda: T1, engine=engine)
    assert ds.state().head == head

    # The same source with an ordinary query (a new AddPushSource replaces it).
    good = m.AddPushSource(
        source_name="default",
        read=CITY_POP,
        merge=m.MergeStrategyAppend(),
        preprocess=m.TransformSql(
            engine="datafusion",
            queries=(m.SqlQueryStep(query="select upper(city) as city, population from input"),),
        ),
    )
    st = ds.state()
    ds.append(
        m.MetadataBlock(
            system_time=T1,
            prev_block_hash=st.head,
            sequence_number=st.sequence_number + 1,
            event=good,
        )
    )
    f.write_text("city,population\na,1\nb,2\n")
    res = ingest(ds, [f], clock=lambda: T1, engine=engine)
    assert res.num_records == 2
    assert [(r["city"], r["population"]) for r in last_data(ds)] == [("A", 1), ("B", 2)]
