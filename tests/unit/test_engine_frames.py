"""The framed worker protocol's codec (``coordinator.transform.frames``) and the worker's
in-memory hash of the files it writes (``coordinator.data.WrittenFileHasher``)."""

from __future__ import annotations

import pickle
import socket
import struct
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from coordinator.data import WrittenFileHasher, logical_hash
from coordinator.transform import OutputPaths
from coordinator.transform.frames import (
    MAX_FRAME,
    TRANSFORM_ANSWERS,
    TRANSFORM_BATCH,
    ConnectionLost,
    FrameError,
    decode_body,
    decode_request,
    encode_frame,
    encode_request,
    read_frame,
    write_frame,
)
from coordinator.transform.plan import plan_transform
from coordinator.transform.testing import StepClock, inputs_of, make_derivative, make_root, push_csv

# -- frames --------------------------------------------------------------------------------


def test_a_frame_round_trips_its_kind_and_parts() -> None:
    parts = [b"", b"a", bytes(range(256)) * 10]
    frame = encode_frame(TRANSFORM_ANSWERS, parts)
    (n,) = struct.unpack_from("<I", frame)
    assert n == len(frame) - 4
    assert decode_body(frame[4:]) == (TRANSFORM_ANSWERS, parts)
    assert decode_body(encode_frame(TRANSFORM_BATCH, [])[4:]) == (TRANSFORM_BATCH, [])


@pytest.mark.parametrize("cut", [1, 4, 6, 9, 12])
def test_a_truncated_body_is_refused(cut: int) -> None:
    body = encode_frame(TRANSFORM_BATCH, [b"abc", b"defg"])[4:]
    with pytest.raises(FrameError):
        decode_body(body[: len(body) - cut])


def test_stray_bytes_and_a_wrong_count_are_refused() -> None:
    body = encode_frame(TRANSFORM_BATCH, [b"abc"])[4:]
    with pytest.raises(FrameError, match="stray"):
        decode_body(body + b"x")
    lying = body[:1] + struct.pack("<I", 2) + body[5:]  # says two parts, holds one
    with pytest.raises(FrameError, match="truncated"):
        decode_body(lying)


def test_frames_travel_over_a_socket_and_end_of_stream_is_connection_lost() -> None:
    a, b = socket.socketpair()
    a.settimeout(10)
    b.settimeout(10)
    with a, b:

        def send() -> None:  # more than a socket buffer: written while the other end reads
            write_frame(a, TRANSFORM_BATCH, [b"x" * 300_000, b"y"])
            write_frame(a, TRANSFORM_ANSWERS, [b"z"])

        writer = threading.Thread(target=send)
        writer.start()
        assert read_frame(b) == (TRANSFORM_BATCH, [b"x" * 300_000, b"y"])
        assert read_frame(b) == (TRANSFORM_ANSWERS, [b"z"])
        writer.join()
        frame = encode_frame(TRANSFORM_ANSWERS, [b"half of me"])
        a.sendall(frame[:7])
        a.shutdown(socket.SHUT_WR)
        with pytest.raises(ConnectionLost, match="mid-frame"):
            read_frame(b)
        with pytest.raises(ConnectionLost):
            read_frame(b)


def test_an_oversized_frame_is_refused_before_reading_it() -> None:
    a, b = socket.socketpair()
    with a, b:
        a.sendall(struct.pack("<I", MAX_FRAME + 1))
        with pytest.raises(FrameError, match="exceeds"):
            read_frame(b)


def test_a_request_round_trips_and_nothing_else_is_accepted(tmp_path: Path) -> None:
    clock = StepClock()
    root = make_root(tmp_path, "root")
    push_csv(root, tmp_path / "in", "event_time,city,population\n2020-01-01T00:00:00Z,A,1\n", clock)
    der = make_derivative(
        tmp_path, "der", [(root, "cities")], [(None, "SELECT * FROM cities")], engine="datafusion"
    )
    plan = plan_transform(
        der, inputs_of(root), system_time=clock(), paths=OutputPaths.under(tmp_path / "w")
    )
    assert plan is not None
    assert decode_request(encode_request(plan.request)) == plan.request
    with pytest.raises(FrameError, match="not a TransformRequest"):
        decode_request(pickle.dumps({"not": "a request"}))


# -- the worker's hash of what it wrote ----------------------------------------------------


def write(table: pa.Table, path: Any) -> None:
    """The DataFusion worker's writer options (engine/datafusion_engine.py ``_write``)."""
    pq.write_table(
        table,
        path,
        compression="snappy",
        data_page_version="1.0",
        use_dictionary=True,
        store_schema=False,
    )


TABLES = {
    "system columns and strings": pa.table(
        {
            "offset": pa.array([0, 1, 2], pa.int64()),
            "op": pa.array([0, 0, 1], pa.int32()),
            "system_time": pa.array([1, 2, 3], pa.timestamp("ms", tz="UTC")),
            "event_time": pa.array([10, None, 30], pa.timestamp("ms", tz="UTC")),
            "city": pa.array(["a", None, "ccc"]),
        }
    ),
    "numbers with nulls": pa.table(
        {
            "i8": pa.array([1, None, -3], pa.int8()),
            "u16": pa.array([1, 2, None], pa.uint16()),
            "u32": pa.array([1, 2, 4_000_000_000], pa.uint32()),
            "f32": pa.array([1.5, float("nan"), None], pa.float32()),
            "f64": pa.array([-0.0, 2.5, None], pa.float64()),
            "dec": pa.array([Decimal("1.25"), None, Decimal("-3.50")], pa.decimal128(10, 2)),
            "b": pa.array([True, None, False]),
        }
    ),
    "dates, times, binary, lists": pa.table(
        {
            "d32": pa.array([0, 18000, None], pa.date32()),
            "d64": pa.array([0, 86_400_000 * 3, None], pa.date64()),
            "t_us": pa.array([1, None, 3], pa.time64("us")),
            "ts_s": pa.array([1, 2, None], pa.timestamp("s")),
            "ts_ns": pa.array([1_000_000, 2, 3], pa.timestamp("ns", tz="UTC")),
            "bin": pa.array([b"x", None, b""], pa.binary()),
            "big": pa.array(["x", "yy", None], pa.large_string()),
            "list": pa.array([[1, 2], None, []], pa.list_(pa.int64())),
        }
    ),
}


@pytest.mark.parametrize("name", list(TABLES))
def test_the_in_memory_hash_is_the_hash_of_the_file(tmp_path: Path, name: str) -> None:
    table = TABLES[name]
    hasher = WrittenFileHasher()
    path = tmp_path / "out.parquet"
    write(table, path)
    lh = hasher.hash(table, path)
    assert lh is not None and lh.to_multibase() == logical_hash(path)
    # A second file of the same schema: the remembered schema serves, the file is not read.
    other = table.slice(1)
    path.unlink()
    missing = tmp_path / "never-written.parquet"
    lh2 = hasher.hash(other, missing)
    write(other, path)
    assert lh2 is not None and lh2.to_multibase() == logical_hash(path)
    assert lh2 != lh


@pytest.mark.parametrize("name", list(TABLES))
def test_the_in_memory_hash_of_an_unwritten_file_is_the_hash_of_the_file(
    tmp_path: Path, name: str
) -> None:
    """A replay that writes nothing: the footer schema comes from an empty file in memory."""
    table = TABLES[name]
    lh = WrittenFileHasher(write=write).hash(table)
    path = tmp_path / "out.parquet"
    write(table, path)
    assert lh is not None and lh.to_multibase() == logical_hash(path)


def test_without_a_file_or_a_writer_the_hasher_refuses() -> None:
    with pytest.raises(ValueError, match="no writer"):
        WrittenFileHasher().hash(TABLES[next(iter(TABLES))])


def test_struct_columns_are_left_to_the_file_hash(tmp_path: Path) -> None:
    table = pa.table({"s": pa.array([{"a": 1}, None, {"a": None}], pa.struct([("a", pa.int64())]))})
    path = tmp_path / "s.parquet"
    write(table, path)
    assert WrittenFileHasher().hash(table, path) is None
