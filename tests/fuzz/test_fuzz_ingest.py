"""Fuzz: files pushed into root datasets (CSV, NDJSON, JSON).

An ingest reads whatever file its caller names. For every input the reader must yield record
batches of the declared schema or raise an :class:`~coordinator.errors.OdfNodeError` naming the
problem (never a ``csv.Error``, ``RecursionError`` or ``UnicodeDecodeError`` traceback).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from fuzz_profile import fuzz
from hypothesis import given
from hypothesis import strategies as st

from coordinator.errors import OdfNodeError
from coordinator.ingest.readers import read_batches
from coordinator.metadata import model as m

SCHEMA = ("city STRING", "population BIGINT", "at TIMESTAMP")
READS: list[m.ReadStep] = [
    m.ReadStepCsv(schema=SCHEMA, header=True),
    m.ReadStepCsv(schema=SCHEMA, header=False, separator=";"),
    m.ReadStepNdJson(schema=SCHEMA),
    m.ReadStepJson(schema=SCHEMA),
]


def read_all(read: m.ReadStep, data: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "input"
        path.write_bytes(data)
        try:
            for _ in read_batches(read, path, block_bytes=4096):
                pass
        except OdfNodeError:
            pass


@st.composite
def csv_like(draw: st.DrawFn) -> bytes:
    cell = st.one_of(
        st.text(max_size=20),
        st.integers().map(str),
        st.sampled_from(['"', '""', '"a,b"', "\r", "\n", "2020-01-01T00:00:00Z", "x" * 5000]),
    )
    rows = draw(st.lists(st.lists(cell, max_size=5), max_size=20))
    sep = draw(st.sampled_from([",", ";"]))
    text = "city,population,at\n" + "\n".join(sep.join(r) for r in rows)
    return text.encode("utf-8", "surrogatepass")


@st.composite
def json_like(draw: st.DrawFn) -> bytes:
    depth = draw(st.integers(0, 2000))
    lines = [
        '{"city": "A", "population": 1, "at": "2020-01-01T00:00:00Z"}',
        '{"city": ' + "[" * depth + "1" + "]" * depth + "}",
        draw(st.text(max_size=100)),
        '{"population": 99999999999999999999999}',
        '{"city": "\\ud800"}',
    ]
    return "\n".join(draw(st.permutations(lines))).encode("utf-8", "surrogatepass")


@fuzz(150)
@given(st.sampled_from(READS), st.binary(max_size=4096))
def test_random_bytes_are_records_or_a_typed_error(read: m.ReadStep, data: bytes) -> None:
    read_all(read, data)


@fuzz(150)
@given(st.sampled_from(READS[:2]), csv_like())
def test_csv_like_input_is_records_or_a_typed_error(read: m.ReadStep, data: bytes) -> None:
    read_all(read, data)


@fuzz(150)
@given(st.sampled_from(READS[2:]), json_like())
def test_json_like_input_is_records_or_a_typed_error(read: m.ReadStep, data: bytes) -> None:
    read_all(read, data)
