"""Writer pieces: output layout, schema checks, staging, AddData/watermark rules, the part file."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from coordinator.data import logical_hash
from coordinator.errors import BadInputSchema, IncompatibleSchema, IngestError
from coordinator.ingest.writer import (
    MS_UTC,
    SliceFileWriter,
    Vocab,
    WrittenSlice,
    add_data_event,
    check_schema_compatible,
    event_time_type,
    fill_event_time,
    output_schema,
    stage_batch,
    staged_schema,
    validate_input_schema,
    with_event_time,
    write_slice,
)
from coordinator.metadata import model as m
from coordinator.metadata.timestamp import Timestamp
from coordinator.multiformats import Multihash

V = Vocab()
READ = pa.schema([("city", pa.string()), ("population", pa.int64())])


def test_output_layout() -> None:
    new = with_event_time(READ, V, event_time_type(READ, V))
    assert new.names == ["city", "population", "event_time"]
    out = output_schema(new, V)
    assert [(f.name, str(f.type), f.nullable) for f in out] == [
        ("offset", "int64", False),
        ("op", "int32", False),
        ("system_time", "timestamp[ms, tz=UTC]", False),
        ("event_time", "timestamp[ms, tz=UTC]", False),
        ("city", "string", True),
        ("population", "int64", True),
    ]
    assert staged_schema(new, V) == pa.schema(list(out)[1:])


def test_event_time_in_the_middle_moves_to_the_front() -> None:
    read = pa.schema([("a", pa.int32()), ("event_time", pa.date32()), ("b", pa.string())])
    out = output_schema(with_event_time(read, V, event_time_type(read, V)), V)
    assert out.names == ["offset", "op", "system_time", "event_time", "a", "b"]
    assert out.field("event_time").type == pa.date32()


def test_vocab() -> None:
    v = Vocab.of(m.SetVocab(event_time_column="ts"))
    assert (v.offset_column, v.operation_type_column, v.system_time_column) == (
        "offset",
        "op",
        "system_time",
    )
    assert v.event_time_column == "ts"
    assert Vocab.of(None) == Vocab()


def test_validate_input_schema() -> None:
    for bad in ("offset", "op", "system_time"):
        with pytest.raises(BadInputSchema, match=bad):
            validate_input_schema(pa.schema([(bad, pa.int64())]), V)
    with pytest.raises(BadInputSchema, match="Date or Timestamp"):
        validate_input_schema(pa.schema([("event_time", pa.string())]), V)
    validate_input_schema(pa.schema([("event_time", pa.date32())]), V)


def test_schema_compatibility_ignores_nullability_only() -> None:
    a = pa.schema([pa.field("x", pa.int64(), nullable=False), ("y", pa.string())])
    check_schema_compatible(a, pa.schema([("x", pa.int64()), ("y", pa.string())]))
    with pytest.raises(IncompatibleSchema, match="changed type"):
        check_schema_compatible(a, pa.schema([("x", pa.int32()), ("y", pa.string())]))
    with pytest.raises(IncompatibleSchema, match="columns"):
        check_schema_compatible(a, pa.schema([("x", pa.int64())]))
    with pytest.raises(IncompatibleSchema, match="became"):
        check_schema_compatible(a, pa.schema([("x", pa.int64()), ("z", pa.string())]))


def test_fill_event_time() -> None:
    fallback = Timestamp.parse("2020-05-06T07:08:09.123456Z")
    ts = fill_event_time(pa.array([None, 5], MS_UTC), MS_UTC, fallback)
    assert ts.cast(pa.int64()).to_pylist() == [fallback.epoch_ns // 1_000_000, 5]
    d = fill_event_time(pa.array([None, 1], pa.date32()), pa.date32(), fallback)
    assert d.to_pylist()[0].isoformat() == "2020-05-06"


def test_stage_batch() -> None:
    new = with_event_time(READ, V, MS_UTC)
    merged = pa.table(
        {
            "op": pa.array([0], pa.int32()),
            "city": ["A"],
            "population": [1],
            "event_time": pa.nulls(1, MS_UTC),
        }
    )
    st = Timestamp.parse("2010-01-01T12:00:00.999999Z")
    staged = stage_batch(merged, staged_schema(new, V), V, system_time=st, fallback_event_time=st)
    assert staged.column_names == ["op", "system_time", "event_time", "city", "population"]
    assert staged.column("system_time").cast(pa.int64()).to_pylist() == [1262347200999]
    assert staged.column("event_time").cast(pa.int64()).to_pylist() == [1262347200999]


def _written(max_et: str) -> WrittenSlice:
    h = Multihash.sha3_256(b"x")
    return WrittenSlice(
        path=Path("/x"),
        physical_hash=h,
        logical_hash=Multihash(0x300016, h.digest),
        size=1,
        offset_interval=m.OffsetInterval(start=5, end=9),
        max_event_time=Timestamp.parse(max_et),
        schema=pa.schema([]),
    )


def test_add_data_watermark_rules() -> None:
    prev = Timestamp.parse("2020-01-02T00:00:00Z")
    common = {"prev_offset": 4, "prev_checkpoint": None}
    ev = add_data_event(**common, prev_watermark=prev, written=_written("2020-01-03T00:00:00Z"))
    assert ev is not None and ev.new_watermark == Timestamp.parse("2020-01-03T00:00:00Z")
    assert ev.prev_offset == 4 and ev.new_data is not None
    ev = add_data_event(**common, prev_watermark=prev, written=_written("2020-01-01T00:00:00Z"))
    assert ev is not None and ev.new_watermark == prev  # never decreases
    ev = add_data_event(**common, prev_watermark=None, written=_written("2020-01-01T00:00:00Z"))
    assert ev is not None and ev.new_watermark == Timestamp.parse("2020-01-01T00:00:00Z")
    # No data: nothing to commit unless an explicit watermark advances.
    assert add_data_event(**common, prev_watermark=prev, written=None) is None
    later = Timestamp.parse("2021-01-01T00:00:00Z")
    ev = add_data_event(**common, prev_watermark=prev, written=None, explicit_watermark=later)
    assert ev is not None and ev.new_data is None and ev.new_watermark == later
    with pytest.raises(IngestError):
        add_data_event(
            **common,
            prev_watermark=prev,
            written=None,
            explicit_watermark=Timestamp.parse("2019-01-01T00:00:00Z"),
        )
    cp = Multihash.sha3_256(b"cp")
    ev = add_data_event(
        prev_offset=4,
        prev_checkpoint=cp,
        prev_watermark=prev,
        written=None,
        explicit_watermark=later,
    )
    assert ev is not None and ev.prev_checkpoint == cp and ev.new_checkpoint is None


def test_slice_file_writer(tmp_path: Path) -> None:
    new = with_event_time(READ, V, MS_UTC)
    out = output_schema(new, V)
    staged = staged_schema(new, V)
    st = Timestamp.parse("2010-01-01T00:00:00Z")
    batches = [
        stage_batch(
            pa.table(
                {
                    "op": pa.array([0] * n, pa.int32()),
                    "city": [f"c{i}" for i in range(n)],
                    "population": list(range(n)),
                    "event_time": pa.array([i * 1000 for i in range(n)], MS_UTC),
                }
            ),
            staged,
            V,
            system_time=st,
            fallback_event_time=st,
        )
        for n in (3, 0, 5)
    ]
    written = write_slice(
        batches,
        directory=tmp_path / "data",
        schema=out,
        vocab=V,
        start_offset=10,
        sort_by_event_time=False,
        spill_dir=tmp_path / "spill",
        durable=False,
    )
    assert written is not None
    assert written.offset_interval == m.OffsetInterval(start=10, end=17)
    assert written.num_records == 8
    assert written.path.name == written.physical_hash.to_multibase()
    assert Multihash.sha3_256(written.path.read_bytes()) == written.physical_hash
    assert Multihash.from_multibase(logical_hash(written.path)) == written.logical_hash
    assert pq.read_table(written.path).column("offset").to_pylist() == list(range(10, 18))
    assert written.max_event_time == Timestamp.parse("1970-01-01T00:00:04Z")
    assert [p.name for p in (tmp_path / "data").iterdir()] == [written.path.name]

    # No rows: no file at all.
    empty = SliceFileWriter(tmp_path / "data", out, V, 0, durable=False)
    assert empty.finish() is None
    assert [p.name for p in (tmp_path / "data").iterdir()] == [written.path.name]
