"""Push ingest end to end on a real on-disk dataset.

Covers every merge strategy, every input format, failures that must leave the store unchanged,
offsets/watermarks across ingests, the exact output schema kamu writes, content addressing of
the parts and acceptance of the resulting chain by ``Dataset.state()``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from coordinator.data import logical_hash
from coordinator.identity import DatasetId
from coordinator.ingest import (
    BadInputData,
    ConcurrentModification,
    DanglingObjectLink,
    IncompatibleSchema,
    IngestError,
    IngestProgress,
    LinkedObjects,
    MergeError,
    PushSourceNotFound,
    UnsupportedPreprocess,
    ingest,
)
from coordinator.ingest.linked import extra_attributes_json
from coordinator.metadata import model as m
from coordinator.metadata.arrow_schema import encode_arrow_schema
from coordinator.metadata.timestamp import Timestamp
from coordinator.multiformats import Multihash
from coordinator.storage import Dataset

UTC = dt.UTC
T1 = Timestamp.parse("2010-01-01T12:00:00Z")
T2 = Timestamp.parse("2010-01-02T12:00:00Z")
T3 = Timestamp.parse("2010-01-03T12:00:00Z")
E1 = Timestamp.parse("2000-01-01T12:00:00Z")
E2 = Timestamp.parse("2000-01-02T12:00:00Z")
MS_UTC = pa.timestamp("ms", tz="UTC")
CITY_POP = ("city STRING", "population BIGINT")


def make_dataset(root: Path, *sources: m.AddPushSource, vocab: m.SetVocab | None = None) -> Dataset:
    ds = Dataset.create(root / "ds")
    events: list[m.MetadataEvent] = [
        m.Seed(dataset_id=DatasetId.new_seeded_ed25519(b"ingest"), dataset_kind=m.DatasetKind.ROOT)
    ]
    if vocab is not None:
        events.append(vocab)
    events.extend(sources)
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


def csv_source(
    merge: m.MergeStrategy,
    schema: tuple[str, ...] = CITY_POP,
    name: str = "src",
    preprocess: m.TransformSql | None = None,
) -> m.AddPushSource:
    return m.AddPushSource(
        source_name=name,
        read=m.ReadStepCsv(ddl_schema=schema, header=True),
        merge=merge,
        preprocess=preprocess,
    )


def write(tmp: Path, name: str, text: str) -> Path:
    p = tmp / name
    p.write_text(text)
    return p


def slice_table(ds: Dataset, s: m.DataSlice) -> pa.Table:
    return pq.read_table(ds.data.path_of(s.physical_hash))


def rows(ds: Dataset, s: m.DataSlice, *cols: str) -> list[tuple[object, ...]]:
    t = slice_table(ds, s)
    return [tuple(r[c] for c in cols) for r in t.to_pylist()]


def events(ds: Dataset) -> list[m.MetadataEvent]:
    return [b.event for _, b in reversed(list(ds.iter_blocks()))]


def data_files(ds: Dataset) -> set[str]:
    return {p.name for p in ds.layout.data_dir.iterdir()}


def kamu_schema(*data: pa.Field, event_time: pa.DataType = MS_UTC) -> pa.Schema:
    """What kamu's writer produces (see writer.py's module docstring)."""
    return pa.schema(
        [
            pa.field("offset", pa.int64(), nullable=False),
            pa.field("op", pa.int32(), nullable=False),
            pa.field("system_time", MS_UTC, nullable=False),
            pa.field("event_time", event_time, nullable=False),
            *data,
        ]
    )


# ---------------------------------------------------------------------------------------------
# Append
# ---------------------------------------------------------------------------------------------


def test_append_csv_writes_kamus_slice(tmp_path: Path) -> None:
    ds = make_dataset(
        tmp_path,
        csv_source(
            m.MergeStrategyAppend(), ("event_time TIMESTAMP", "city STRING", "population BIGINT")
        ),
    )
    f = write(
        tmp_path,
        "a.csv",
        "event_time,city,population\n"
        "2021-01-01,A,1000\n2023-01-01,B,2000\n2022-01-01T00:00:00.000999Z,C,3000\n",
    )
    res = ingest(ds, [f], clock=lambda: T1)
    assert len(res.slices) == 1 and res.num_records == 3
    s = res.slices[0]
    path = ds.data.path_of(s.physical_hash)

    # The part is content-addressed: its name is the SHA3-256 multihash of its bytes.
    assert path.name == s.physical_hash.to_multibase()
    assert Multihash.sha3_256(path.read_bytes()) == s.physical_hash
    assert s.size == path.stat().st_size
    assert Multihash.from_multibase(logical_hash(path)) == s.logical_hash

    # Schema: column order, types and nullability as kamu writes them.
    expected = kamu_schema(pa.field("city", pa.string()), pa.field("population", pa.int64()))
    assert pq.read_schema(path).remove_metadata() == expected
    pf = pq.ParquetFile(path)
    assert [pf.schema.column(i).max_definition_level for i in range(6)] == [0, 0, 0, 0, 1, 1]
    assert pf.metadata.row_group(0).column(0).compression == "SNAPPY"

    # Rows sorted by event time, offsets from 0, one system time.
    t = slice_table(ds, s)
    assert t.column("offset").to_pylist() == [0, 1, 2]
    assert t.column("city").to_pylist() == ["A", "C", "B"]
    assert set(t.column("op").to_pylist()) == {0}
    assert set(t.column("system_time").to_pylist()) == {T1.to_datetime()}
    assert s.offset_interval == m.OffsetInterval(start=0, end=2)

    # Blocks: SetDataSchema (the output schema) before the first AddData.
    evs = events(ds)
    assert [type(e).__name__ for e in evs] == [
        "Seed",
        "AddPushSource",
        "SetDataSchema",
        "AddData",
    ]
    assert isinstance(evs[2], m.SetDataSchema) and evs[2].raw_arrow_schema == encode_arrow_schema(
        expected
    )
    add = evs[3]
    assert isinstance(add, m.AddData)
    assert add.prev_offset is None and add.new_source_state is None and add.prev_checkpoint is None
    assert add.new_watermark == Timestamp.parse("2023-01-01T00:00:00Z")
    assert ds.state().head == res.new_head
    Dataset(ds.layout.root).state()  # a fresh instance validates the whole chain


def test_offsets_contiguous_and_watermark_monotonic(tmp_path: Path) -> None:
    ds = make_dataset(
        tmp_path,
        csv_source(m.MergeStrategyAppend(), ("event_time TIMESTAMP", "v BIGINT")),
    )
    batches = [
        ("2020-01-05", [1, 2, 3]),
        ("2020-01-01", [4, 5]),  # older data: watermark must not go back
        ("2020-02-01", [6, 7, 8, 9]),
    ]
    expected_wm = ["2020-01-05", "2020-01-05", "2020-02-01"]
    next_offset = 0
    for i, (day, values) in enumerate(batches):
        f = write(tmp_path, f"{i}.csv", "h,h\n" + "".join(f"{day},{v}\n" for v in values))
        res = ingest(ds, [f], clock=lambda: T1)
        (s,) = res.slices
        assert s.offset_interval.start == next_offset
        assert slice_table(ds, s).column("offset").to_pylist() == list(
            range(next_offset, next_offset + len(values))
        )
        next_offset += len(values)
        assert res.watermark == Timestamp.parse(f"{expected_wm[i]}T00:00:00Z")
        assert ds.state().watermark == res.watermark
    assert ds.state().next_offset == 9


def test_missing_event_time_uses_fallback_and_system_time(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path, csv_source(m.MergeStrategyAppend()))
    f = write(tmp_path, "a.csv", "city,population\nA,1\n")
    res = ingest(ds, [f], clock=lambda: T1, event_time=E1)
    assert rows(ds, res.slices[0], "system_time", "event_time") == [
        (T1.to_datetime(), E1.to_datetime())
    ]
    # Without an explicit event time the system time is the fallback (kamu's push ingest).
    res = ingest(ds, [write(tmp_path, "b.csv", "h,h\nB,2\n")], clock=lambda: T2)
    assert rows(ds, res.slices[0], "event_time") == [(T2.to_datetime(),)]
    assert res.watermark == T2


def test_date_event_time(tmp_path: Path) -> None:
    ds = make_dataset(
        tmp_path, csv_source(m.MergeStrategyAppend(), ("event_time DATE", "city STRING"))
    )
    f = write(tmp_path, "a.csv", "d,c\n2021-01-01,A\n2023-01-01,B\n2022-01-01,C\n")
    res = ingest(ds, [f], clock=lambda: T1)
    path = ds.data.path_of(res.slices[0].physical_hash)
    assert pq.read_schema(path).remove_metadata() == kamu_schema(
        pa.field("city", pa.string()), event_time=pa.date32()
    )
    assert slice_table(ds, res.slices[0]).column("city").to_pylist() == ["A", "C", "B"]
    assert res.watermark == Timestamp.parse("2023-01-01T00:00:00Z")


def test_out_of_order_input_uses_the_external_sort(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import coordinator.ingest.writer as writer_module

    spills: list[int] = []
    real_spill = writer_module.spill_runs

    def counting_spill(*args: object, **kwargs: object) -> object:
        runs = real_spill(*args, **kwargs)  # type: ignore[arg-type]
        spills.append(len(runs))
        return runs

    monkeypatch.setattr(writer_module, "spill_runs", counting_spill)
    ds = make_dataset(
        tmp_path, csv_source(m.MergeStrategyAppend(), ("event_time TIMESTAMP", "i BIGINT"))
    )
    rng = random.Random(7)
    days = [rng.randrange(0, 50) for _ in range(30_000)]
    # Start in order (so the writer streams first, then falls back), then scramble.
    days[:5000] = sorted(days[:5000])
    text = "h,h\n" + "".join(f"2020-01-01T00:00:{d % 60:02d}Z,{i}\n" for i, d in enumerate(days))
    f = write(tmp_path, "a.csv", text)
    res = ingest(ds, [f], clock=lambda: T1, block_bytes=8 * 1024, run_bytes=64 * 1024)
    t = slice_table(ds, res.slices[0])
    keys = np.array([d % 60 for d in days])
    assert t.column("i").to_pylist() == list(np.argsort(keys, kind="stable"))
    assert t.column("offset").to_pylist() == list(range(30_000))
    assert Multihash.from_multibase(logical_hash(ds.data.path_of(res.slices[0].physical_hash))) == (
        res.slices[0].logical_hash
    )
    assert spills and spills[0] > 3, "the external sort was not used"
    assert not list((ds.layout.info_dir).glob("ingest-*")), "spill directory not removed"


# ---------------------------------------------------------------------------------------------
# Ledger
# ---------------------------------------------------------------------------------------------


def test_ledger(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path, csv_source(m.MergeStrategyLedger(primary_key=("city",)), CITY_POP))
    # Duplicate keys within one file are all kept, as kamu does.
    res = ingest(ds, [write(tmp_path, "1.csv", "h,h\nA,1\nB,2\nA,3\n")], clock=lambda: T1)
    assert rows(ds, res.slices[0], "offset", "op", "city", "population") == [
        (0, 0, "A", 1),
        (1, 0, "B", 2),
        (2, 0, "A", 3),
    ]
    # Keys seen before are dropped.
    res = ingest(ds, [write(tmp_path, "2.csv", "h,h\nB,20\nC,30\nA,10\nD,40\n")], clock=lambda: T2)
    assert rows(ds, res.slices[0], "offset", "city", "population") == [
        (3, "C", 30),
        (4, "D", 40),
    ]
    # Nothing new: up to date, nothing committed.
    head = ds.head()
    res = ingest(ds, [write(tmp_path, "3.csv", "h,h\nA,1\nD,4\n")], clock=lambda: T3)
    assert res.up_to_date and ds.head() == head


# ---------------------------------------------------------------------------------------------
# Snapshot
# ---------------------------------------------------------------------------------------------


def test_snapshot_matches_kamu_writer_test(tmp_path: Path) -> None:
    """kamu-cli ``test_data_writer_snapshot_orders_by_pk_and_operation_type`` (and round 3 of
    ``test_data_writer_happy_path``)."""
    ds = make_dataset(
        tmp_path, csv_source(m.MergeStrategySnapshot(primary_key=("city",)), CITY_POP)
    )
    f1 = write(tmp_path, "1.csv", "city,population\nC,3000\nA,1000\nD,4000\nB,2000\n")
    res = ingest(ds, [f1], clock=lambda: T1, event_time=E1)
    assert rows(ds, res.slices[0], "offset", "op", "city", "population") == [
        (0, 0, "A", 1000),
        (1, 0, "B", 2000),
        (2, 0, "C", 3000),
        (3, 0, "D", 4000),
    ]
    assert res.watermark == E1

    f2 = write(tmp_path, "2.csv", "city,population\nC,3000\nB,4000\nD,5000\n")
    res = ingest(ds, [f2], clock=lambda: T2, event_time=E2)
    e1, e2, t2 = E1.to_datetime(), E2.to_datetime(), T2.to_datetime()
    assert rows(
        ds, res.slices[0], "offset", "op", "system_time", "event_time", "city", "population"
    ) == [
        (4, 1, t2, e1, "A", 1000),
        (5, 2, t2, e1, "B", 2000),
        (6, 3, t2, e2, "B", 4000),
        (7, 2, t2, e1, "D", 4000),
        (8, 3, t2, e2, "D", 5000),
    ]
    assert res.watermark == E2
    expected = kamu_schema(pa.field("city", pa.string()), pa.field("population", pa.int64()))
    assert (
        pq.read_schema(ds.data.path_of(res.slices[0].physical_hash)).remove_metadata() == expected
    )

    # Same snapshot again: nothing to commit.
    head = ds.head()
    res = ingest(ds, [f2], clock=lambda: T3, event_time=Timestamp.parse("2000-01-03T00:00:00Z"))
    assert res.up_to_date and ds.head() == head

    # A key comes back after its retraction: +A.
    f3 = write(tmp_path, "3.csv", "city,population\nA,1\nB,4000\nC,3000\nD,5000\n")
    res = ingest(ds, [f3], clock=lambda: T3, event_time=E2)
    assert rows(ds, res.slices[0], "offset", "op", "city") == [(9, 0, "A")]
    ds.state()


def test_multiple_files_in_one_call(tmp_path: Path) -> None:
    ds = make_dataset(
        tmp_path, csv_source(m.MergeStrategySnapshot(primary_key=("city",)), CITY_POP)
    )
    f1 = write(tmp_path, "1.csv", "h,h\nA,1\nB,2\n")
    f2 = write(tmp_path, "2.csv", "h,h\nA,1\nB,3\n")
    res = ingest(ds, [f1, f2], clock=lambda: T1)
    assert len(res.slices) == 2 and len(res.new_blocks) == 3  # schema + 2 x AddData
    assert rows(ds, res.slices[1], "offset", "op", "city", "population") == [
        (2, 2, "B", 2),
        (3, 3, "B", 3),
    ]


# ---------------------------------------------------------------------------------------------
# Formats
# ---------------------------------------------------------------------------------------------

TEXT_ROWS = [("A", 1, "2020-01-01T00:00:00Z"), ("B", 2, "2020-01-02T00:00:00Z")]
SCHEMA3 = ("city STRING", "population BIGINT", "event_time TIMESTAMP")


def _ndjson(tmp: Path) -> tuple[m.ReadStep, Path]:
    text = "".join(
        json.dumps({"city": c, "population": p, "event_time": t}) + "\n" for c, p, t in TEXT_ROWS
    )
    return m.ReadStepNdJson(ddl_schema=SCHEMA3), write(tmp, "a.ndjson", text)


def _json(tmp: Path) -> tuple[m.ReadStep, Path]:
    doc = {
        "result": {"rows": [{"city": c, "population": p, "event_time": t} for c, p, t in TEXT_ROWS]}
    }
    return m.ReadStepJson(ddl_schema=SCHEMA3, sub_path="result.rows"), write(
        tmp, "a.json", json.dumps(doc)
    )


def _parquet(tmp: Path) -> tuple[m.ReadStep, Path]:
    t = pa.table(
        {
            "city": [c for c, _, _ in TEXT_ROWS],
            "population": pa.array([p for _, p, _ in TEXT_ROWS], pa.int32()),
            "event_time": pa.array(
                [dt.datetime.fromisoformat(t) for _, _, t in TEXT_ROWS], pa.timestamp("us", "UTC")
            ),
        }
    )
    p = tmp / "a.parquet"
    pq.write_table(t, p)
    return m.ReadStepParquet(ddl_schema=SCHEMA3), p


def _csv(tmp: Path) -> tuple[m.ReadStep, Path]:
    text = "c,p,t\n" + "".join(f"{c},{p},{t}\n" for c, p, t in TEXT_ROWS)
    return m.ReadStepCsv(ddl_schema=SCHEMA3, header=True), write(tmp, "a.csv", text)


def _ingest_format(
    root: Path, make: Callable[[Path], tuple[m.ReadStep, Path]]
) -> tuple[Dataset, m.DataSlice, Timestamp | None]:
    root.mkdir()
    read, f = make(root)
    ds = make_dataset(
        root, m.AddPushSource(source_name="src", read=read, merge=m.MergeStrategyAppend())
    )
    res = ingest(ds, [f], clock=lambda: T1)
    return ds, res.slices[0], res.watermark


@pytest.mark.parametrize("make", [_csv, _ndjson, _json, _parquet])
def test_formats_give_the_same_slice(
    tmp_path: Path, make: Callable[[Path], tuple[m.ReadStep, Path]]
) -> None:
    ds, s, wm = _ingest_format(tmp_path / "x", make)
    t = slice_table(ds, s)
    assert t.column("city").to_pylist() == ["A", "B"]
    assert t.column("population").to_pylist() == [1, 2]
    assert wm == Timestamp.parse("2020-01-02T00:00:00Z")
    # Same rows and system time -> the same logical hash whatever the input format.
    _, ref, _ = _ingest_format(tmp_path / "ref", _csv)
    assert s.logical_hash == ref.logical_hash


# ---------------------------------------------------------------------------------------------
# Failures leave the chain (and data/) unchanged
# ---------------------------------------------------------------------------------------------


def test_schema_mismatch_is_rejected_and_nothing_is_committed(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path, csv_source(m.MergeStrategyAppend()))
    ingest(ds, [write(tmp_path, "ok.csv", "h,h\nA,1\n")], clock=lambda: T1)
    head, files = ds.head(), data_files(ds)
    good = write(tmp_path, "good.csv", "h,h\nB,2\n")
    bad = write(tmp_path, "bad.csv", "city,population\nC,3\nD,lots\nE,5\n")
    with pytest.raises(BadInputData) as e:
        ingest(ds, [good, bad], clock=lambda: T2)
    assert e.value.column == "population" and e.value.row == 2
    assert "bad.csv" in str(e.value)
    assert ds.head() == head
    assert data_files(ds) == files  # the part written for good.csv was removed again
    ds.state()


def test_empty_file_is_a_noop(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path, csv_source(m.MergeStrategyAppend()))
    head = ds.head()
    res = ingest(ds, [write(tmp_path, "empty.csv", "")], clock=lambda: T1)
    assert res.up_to_date and ds.head() == head and not ds.state().has_schema
    # A file with only a header has no rows either.
    res = ingest(ds, [write(tmp_path, "header.csv", "city,population\n")], clock=lambda: T1)
    assert res.up_to_date and ds.head() == head


def test_empty_snapshot_file_vs_headers_only(tmp_path: Path) -> None:
    ds = make_dataset(
        tmp_path, csv_source(m.MergeStrategySnapshot(primary_key=("city",)), CITY_POP)
    )
    ingest(ds, [write(tmp_path, "1.csv", "h,h\nA,1\n")], clock=lambda: T1)
    # 0 bytes: no-op. Headers only: an empty snapshot, i.e. everything is retracted (kamu).
    assert ingest(ds, [write(tmp_path, "e.csv", "")], clock=lambda: T2).up_to_date
    res = ingest(ds, [write(tmp_path, "h.csv", "city,population\n")], clock=lambda: T2)
    assert rows(ds, res.slices[0], "op", "city") == [(1, "A")]


def test_preprocess_without_an_engine_is_rejected(tmp_path: Path) -> None:
    # With an engine it runs: tests/integration/test_ingest_polling.py (preprocess cases).
    pre = m.TransformSql(engine="spark", queries=(m.SqlQueryStep(query="SELECT * FROM input"),))
    ds = make_dataset(tmp_path, csv_source(m.MergeStrategyAppend(), preprocess=pre))
    with pytest.raises(UnsupportedPreprocess, match="runs on an engine"):
        ingest(ds, [write(tmp_path, "a.csv", "h,h\nA,1\n")], clock=lambda: T1)


def test_push_source_selection(tmp_path: Path) -> None:
    ds = make_dataset(
        tmp_path,
        csv_source(m.MergeStrategyAppend(), name="one"),
        csv_source(m.MergeStrategyAppend(), name="two"),
    )
    f = write(tmp_path, "a.csv", "h,h\nA,1\n")
    with pytest.raises(PushSourceNotFound, match="Explicit source name"):
        ingest(ds, [f], clock=lambda: T1)
    with pytest.raises(PushSourceNotFound, match="three"):
        ingest(ds, [f], source_name="three", clock=lambda: T1)
    assert ingest(ds, [f], source_name="two", clock=lambda: T1).num_records == 1


def test_incompatible_schema_between_sources(tmp_path: Path) -> None:
    ds = make_dataset(
        tmp_path,
        csv_source(m.MergeStrategyAppend(), name="one"),
        csv_source(m.MergeStrategyAppend(), ("city STRING", "population DOUBLE"), name="two"),
    )
    ingest(ds, [write(tmp_path, "a.csv", "h,h\nA,1\n")], source_name="one", clock=lambda: T1)
    head = ds.head()
    with pytest.raises(IncompatibleSchema, match="population"):
        ingest(ds, [write(tmp_path, "b.csv", "h,h\nB,2\n")], source_name="two", clock=lambda: T2)
    assert ds.head() == head


def test_system_column_conflict(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path, csv_source(m.MergeStrategyAppend(), ("offset BIGINT", "x INT")))
    with pytest.raises(IngestError, match="conflicts with the system column"):
        ingest(ds, [write(tmp_path, "a.csv", "h,h\n1,2\n")], clock=lambda: T1)


def test_concurrent_append_is_detected(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path, csv_source(m.MergeStrategyAppend()))
    other = Dataset(ds.layout.root)

    def racing_clock() -> Timestamp:
        st = other.state()
        other.append(
            m.MetadataBlock(
                system_time=T1,
                prev_block_hash=st.head,
                sequence_number=st.sequence_number + 1,
                event=m.SetInfo(description="racing writer"),
            )
        )
        return T2

    files = data_files(ds)
    with pytest.raises(ConcurrentModification):
        ingest(ds, [write(tmp_path, "a.csv", "h,h\nA,1\n")], clock=racing_clock)
    assert isinstance(events(Dataset(ds.layout.root))[-1], m.SetInfo)
    assert data_files(ds) == files


# ---------------------------------------------------------------------------------------------
# Vocabulary, watermarks, progress
# ---------------------------------------------------------------------------------------------


def test_set_vocab_renames_system_columns(tmp_path: Path) -> None:
    vocab = m.SetVocab(
        offset_column="o",
        operation_type_column="kind",
        system_time_column="st",
        event_time_column="et",
    )
    ds = make_dataset(
        tmp_path,
        csv_source(m.MergeStrategyAppend(), ("et TIMESTAMP", "city STRING")),
        vocab=vocab,
    )
    res = ingest(ds, [write(tmp_path, "a.csv", "h,h\n2020-01-01,A\n")], clock=lambda: T1)
    schema = pq.read_schema(ds.data.path_of(res.slices[0].physical_hash))
    assert schema.names == ["o", "kind", "st", "et", "city"]


def test_explicit_watermark(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path, csv_source(m.MergeStrategyAppend()))
    wm = Timestamp.parse("2030-01-01T00:00:00Z")
    res = ingest(ds, [write(tmp_path, "a.csv", "h,h\nA,1\n")], clock=lambda: T1, watermark=wm)
    assert res.watermark == wm
    with pytest.raises(IngestError, match="never decrease"):
        ingest(ds, [write(tmp_path, "b.csv", "h,h\nB,1\n")], clock=lambda: T2, watermark=E1)
    # A header-only file with a newer explicit watermark commits the watermark alone.
    later = Timestamp.parse("2031-01-01T00:00:00Z")
    res = ingest(ds, [write(tmp_path, "c.csv", "h,h\n")], clock=lambda: T2, watermark=later)
    assert not res.slices and len(res.new_blocks) == 1
    last = events(ds)[-1]
    assert isinstance(last, m.AddData) and last.new_data is None and last.new_watermark == later
    assert last.prev_offset == 0


def test_progress_reports(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path, csv_source(m.MergeStrategyAppend()))
    seen: list[IngestProgress] = []
    f = write(tmp_path, "a.csv", "h,h\n" + "A,1\n" * 1000)
    ingest(ds, [f], clock=lambda: T1, progress=seen.append)
    stages = [p.stage for p in seen]
    assert stages[0] == "read" and "write" in stages and stages[-1] == "commit"
    assert max(p.bytes_read for p in seen if p.stage == "read") == f.stat().st_size


# ---------------------------------------------------------------------------------------------
# Linked objects (RFC-017)
# ---------------------------------------------------------------------------------------------


def _has_add_data_extra() -> bool:
    return "extra" in m.AddData.__dataclass_fields__


def test_linked_objects(tmp_path: Path) -> None:
    ds = make_dataset(
        tmp_path, csv_source(m.MergeStrategyAppend(), ("name STRING", "content STRING"))
    )
    obj1 = write(tmp_path, "o1.bin", "x" * 100)
    obj2 = write(tmp_path, "o2.bin", "y" * 50)
    h1 = Multihash.sha3_256(obj1.read_bytes()).to_multibase()
    h2 = Multihash.sha3_256(obj2.read_bytes()).to_multibase()
    f = write(tmp_path, "a.csv", f"n,c\na,{h1}\nb,{h2}\nc,{h1}\nd,\n")
    links = LinkedObjects(columns=("content",), objects=(obj1, obj2))

    # A link to an object that was not supplied is refused; nothing is committed.
    missing = Multihash.sha3_256(b"missing").to_multibase()
    bad = write(tmp_path, "bad.csv", f"n,c\na,{h1}\nz,{missing}\n")
    head = ds.head()
    with pytest.raises(DanglingObjectLink, match=missing):
        ingest(ds, [bad], clock=lambda: T1, linked_objects=links)
    assert ds.head() == head

    if not _has_add_data_extra():
        with pytest.raises(IngestError, match=r"AddData\.extra"):
            ingest(ds, [f], clock=lambda: T1, linked_objects=links)
        assert ds.head() == head
        # The supplied objects are stored (content-addressed) even so.
        assert ds.data.contains(Multihash.from_multibase(h1))
        return
    res = ingest(ds, [f], clock=lambda: T1, linked_objects=links)
    assert res.linked_objects is not None
    assert (res.linked_objects.num_objects_naive, res.linked_objects.size_naive) == (3, 250)
    last = events(ds)[-1]
    assert getattr(last, "extra").entries == extra_attributes_json(res.linked_objects)  # noqa: B009
    # Datasets without link columns never carry `extra`.
    ds2 = make_dataset(tmp_path / "2", csv_source(m.MergeStrategyAppend()))
    ingest(ds2, [write(tmp_path, "p.csv", "h,h\nA,1\n")], clock=lambda: T1)
    assert getattr(events(ds2)[-1], "extra") is None  # noqa: B009


def test_linked_objects_stored_under_their_hash(tmp_path: Path) -> None:
    from coordinator.ingest.linked import store_objects

    ds = make_dataset(tmp_path, csv_source(m.MergeStrategyAppend()))
    obj = write(tmp_path, "o.bin", "payload")
    (h,) = store_objects(ds.data, [obj])
    assert h.to_multibase() == "f1620" + hashlib.sha3_256(b"payload").hexdigest()
    assert ds.data.path_of(h).read_bytes() == b"payload"


def test_ledger_orders_by_event_time(tmp_path: Path) -> None:
    """kamu-cli ``test_data_writer_ledger_orders_by_event_time`` (with a Ledger)."""
    ds = make_dataset(
        tmp_path,
        csv_source(
            m.MergeStrategyLedger(primary_key=("city",)),
            ("event_time DATE", "city STRING", "population BIGINT"),
        ),
    )
    f = write(tmp_path, "a.csv", "h,h,h\n2021-01-01,A,1000\n2023-01-01,B,2000\n2022-01-01,C,3000\n")
    res = ingest(ds, [f], clock=lambda: T1)
    assert rows(ds, res.slices[0], "offset", "city") == [(0, "A"), (1, "C"), (2, "B")]
    assert res.watermark == Timestamp.parse("2023-01-01T00:00:00Z")


def test_disabled_push_source_is_not_used(tmp_path: Path) -> None:
    ds = make_dataset(
        tmp_path, csv_source(m.MergeStrategyAppend()), m.DisablePushSource(source_name="src")
    )  # type: ignore[arg-type]
    with pytest.raises(PushSourceNotFound):
        ingest(ds, [write(tmp_path, "a.csv", "h,h\nA,1\n")], clock=lambda: T1)


def test_unstorable_column_type(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path, csv_source(m.MergeStrategyAppend(), ("i INTERVAL",)))
    with pytest.raises(IngestError, match="cannot be stored in Parquet"):
        ingest(ds, [write(tmp_path, "a.csv", "h\n1\n")], clock=lambda: T1)


def test_snapshot_larger_than_the_limit_is_refused(tmp_path: Path) -> None:
    # The Snapshot merge holds the whole new snapshot in memory: past ``snapshot_bytes`` it
    # is a MergeError naming the setting, nothing is written or committed.
    ds = make_dataset(
        tmp_path, csv_source(m.MergeStrategySnapshot(primary_key=("city",)), CITY_POP)
    )
    head = ds.state().head
    text = "city,population\n" + "".join(f"c{i},{i}\n" for i in range(5000))
    f = write(tmp_path, "big.csv", text)
    with pytest.raises(MergeError, match="snapshot_bytes"):
        ingest(ds, [f], clock=lambda: T1, block_bytes=4096, snapshot_bytes=16 << 10)
    assert ds.state().head == head
    assert not any(ds.layout.data_dir.glob("*"))
    assert ingest(ds, [f], clock=lambda: T1, block_bytes=4096).num_records == 5000


# ---------------------------------------------------------------------------------------------
# ChangelogStream / UpsertStream (spec v0.37)
# ---------------------------------------------------------------------------------------------

OP_CITY_POP = ("op INT", "city STRING", "population BIGINT")


def test_changelog_stream_passes_the_changelog_through_sorted_by_key_and_op(
    tmp_path: Path,
) -> None:
    ds = make_dataset(
        tmp_path, csv_source(m.MergeStrategyChangelogStream(primary_key=("city",)), OP_CITY_POP)
    )
    f1 = write(tmp_path, "1.csv", "op,city,population\n0,B,2\n0,A,1\n3,A,5\n2,A,1\n")
    res = ingest(ds, [f1], clock=lambda: T1, event_time=E1)
    # Passed through as given (kamu does not check the pairing), sorted by key then op.
    assert rows(ds, res.slices[0], "offset", "op", "city", "population") == [
        (0, 0, "A", 1),
        (1, 2, "A", 1),
        (2, 3, "A", 5),
        (3, 0, "B", 2),
    ]
    assert pq.read_schema(ds.data.path_of(res.slices[0].physical_hash)).remove_metadata() == (
        kamu_schema(pa.field("city", pa.string()), pa.field("population", pa.int64()))
    )
    # The previous data is not consulted: a -R is stored even for a key never seen.
    f2 = write(tmp_path, "2.csv", "op,city,population\n1,Z,9\n")
    res = ingest(ds, [f2], clock=lambda: T2, event_time=E2)
    assert rows(ds, res.slices[0], "offset", "op", "city") == [(4, 1, "Z")]
    assert ds.state().last_offset == 4


@pytest.mark.parametrize(
    ("schema", "text", "message"),
    [
        (CITY_POP, "city,population\nA,1\n", "must read the op column 'op'"),
        (("op BIGINT", *CITY_POP), "op,city,population\n0,A,1\n", r"must be INT \(int32\)"),
        (OP_CITY_POP, "op,city,population\n0,A,1\n7,B,2\n", "has 7 in row 2"),
        (OP_CITY_POP, "op,city,population\n0,A,1\n,B,2\n", "is null in row 2"),
        (("op INT", "population BIGINT"), "op,population\n0,1\n", "primary key column"),
    ],
)
def test_changelog_stream_bad_input_is_refused_chain_unchanged(
    tmp_path: Path, schema: tuple[str, ...], text: str, message: str
) -> None:
    ds = make_dataset(
        tmp_path, csv_source(m.MergeStrategyChangelogStream(primary_key=("city",)), schema)
    )
    head = ds.state().head
    with pytest.raises(MergeError, match=message):
        ingest(ds, [write(tmp_path, "a.csv", text)], clock=lambda: T1)
    assert ds.state().head == head
    assert not any(ds.layout.data_dir.glob("*"))


def test_op_column_is_still_a_conflict_for_the_other_strategies(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path, csv_source(m.MergeStrategyAppend(), OP_CITY_POP))
    with pytest.raises(IngestError, match="conflicts with the system column name"):
        ingest(ds, [write(tmp_path, "a.csv", "op,city,population\n0,A,1\n")], clock=lambda: T1)


def test_upsert_stream_without_op_column(tmp_path: Path) -> None:
    ds = make_dataset(
        tmp_path, csv_source(m.MergeStrategyUpsertStream(primary_key=("city",)), CITY_POP)
    )
    f1 = write(tmp_path, "1.csv", "city,population\nB,2\nA,1\nA,3\n")
    res = ingest(ds, [f1], clock=lambda: T1, event_time=E1)
    assert rows(ds, res.slices[0], "offset", "op", "city", "population") == [
        (0, 0, "A", 3),
        (1, 0, "B", 2),
    ]
    # The same upserts again: no change. (The null event time of the input is no change.)
    res = ingest(ds, [f1], clock=lambda: T2, event_time=E2)
    assert res.up_to_date
    f2 = write(tmp_path, "2.csv", "city,population\nC,7\nB,4\n")
    res = ingest(ds, [f2], clock=lambda: T2, event_time=E2)
    e1, e2 = E1.to_datetime(), E2.to_datetime()
    assert rows(ds, res.slices[0], "offset", "op", "event_time", "city", "population") == [
        (2, 2, e1, "B", 2),
        (3, 3, e2, "B", 4),
        (4, 0, e2, "C", 7),
    ]
    assert pq.read_schema(ds.data.path_of(res.slices[0].physical_hash)).remove_metadata() == (
        kamu_schema(pa.field("city", pa.string()), pa.field("population", pa.int64()))
    )


def test_upsert_stream_with_op_column_retracts(tmp_path: Path) -> None:
    ds = make_dataset(
        tmp_path,
        csv_source(
            m.MergeStrategyUpsertStream(primary_key=("city",)),
            ("op TINYINT", "event_time TIMESTAMP", *CITY_POP),
        ),
    )
    head = "op,event_time,city,population\n"
    f1 = write(tmp_path, "1.csv", head + "0,2000-01-01T00:00:00Z,A,1\n0,2000-01-01T00:00:00Z,B,2\n")
    ingest(ds, [f1], clock=lambda: T1)
    # -R of A (with the stored values), -R of a never-seen key (ignored), B changed twice (the
    # last row wins), then A comes back in a later file.
    f2 = write(
        tmp_path,
        "2.csv",
        head
        + "1,2000-02-01T00:00:00Z,A,0\n1,2000-02-01T00:00:00Z,Q,0\n"
        + "0,2000-02-01T00:00:00Z,B,3\n3,2000-02-02T00:00:00Z,B,4\n",
    )
    res = ingest(ds, [f2], clock=lambda: T2)
    d = dt.datetime
    assert rows(ds, res.slices[0], "offset", "op", "event_time", "city", "population") == [
        (2, 1, d(2000, 1, 1, tzinfo=UTC), "A", 1),
        (3, 2, d(2000, 1, 1, tzinfo=UTC), "B", 2),
        (4, 3, d(2000, 2, 2, tzinfo=UTC), "B", 4),
    ]
    assert res.watermark == Timestamp.parse("2000-02-02T00:00:00Z")
    f3 = write(tmp_path, "3.csv", head + "0,2000-03-01T00:00:00Z,A,5\n")
    res = ingest(ds, [f3], clock=lambda: T3)
    assert rows(ds, res.slices[0], "offset", "op", "city", "population") == [(5, 0, "A", 5)]
    ds.state()


@pytest.mark.parametrize(
    "merge",
    [
        m.MergeStrategyChangelogStream(primary_key=("city",)),
        m.MergeStrategyUpsertStream(primary_key=("city",)),
    ],
)
def test_stream_input_larger_than_the_limit_is_refused(
    tmp_path: Path, merge: m.MergeStrategy
) -> None:
    # Both stream merges sort the whole file by key: past ``stream_bytes`` it is a MergeError
    # naming the setting, nothing is written or committed.
    ds = make_dataset(tmp_path, csv_source(merge, OP_CITY_POP))
    head = ds.state().head
    text = "op,city,population\n" + "".join(f"0,c{i},{i}\n" for i in range(5000))
    f = write(tmp_path, "big.csv", text)
    with pytest.raises(MergeError, match=r"stream_bytes, default push\.MAX_STREAM_BYTES"):
        ingest(ds, [f], clock=lambda: T1, block_bytes=4096, stream_bytes=16 << 10)
    assert ds.state().head == head
    assert not any(ds.layout.data_dir.glob("*"))
    assert ingest(ds, [f], clock=lambda: T1, block_bytes=4096).num_records == 5000


def test_upsert_stream_reads_the_history_of_the_input_keys_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The previous state an UpsertStream merge holds is one row per key of the input, however
    # many keys the history has.
    from coordinator.ingest import merge as mg

    ds = make_dataset(
        tmp_path, csv_source(m.MergeStrategyUpsertStream(primary_key=("city",)), CITY_POP)
    )
    history = "city,population\n" + "".join(f"c{i},{i}\n" for i in range(2000))
    ingest(ds, [write(tmp_path, "1.csv", history)], clock=lambda: T1, event_time=E1)
    ingest(ds, [write(tmp_path, "2.csv", history.replace(",1", ",2"))], clock=lambda: T2)
    seen: list[int] = []
    fold = mg.fold_latest

    def spy(slices, primary_key, keys=None):  # type: ignore[no-untyped-def]
        out = fold(slices, primary_key, keys)
        seen.append(out.num_rows if out is not None else 0)
        return out

    monkeypatch.setattr(mg, "fold_latest", spy)
    res = ingest(
        ds,
        [write(tmp_path, "3.csv", "city,population\nc5,50\nc7,7\nnew,1\n")],
        clock=lambda: T3,
        event_time=E2,
    )
    assert seen == [2]
    assert rows(ds, res.slices[0], "op", "city", "population") == [
        (2, "c5", 5),
        (3, "c5", 50),
        (0, "new", 1),
    ]
