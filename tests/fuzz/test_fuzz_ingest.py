"""Fuzz: files pushed into root datasets (CSV, NDJSON, JSON).

An ingest reads whatever file its caller names. For every input the reader must yield record
batches of the declared schema or raise an :class:`~coordinator.errors.OdfNodeError` naming the
problem (never a ``csv.Error``, ``RecursionError`` or ``UnicodeDecodeError`` traceback), with
memory that does not follow the input's size and time linear in its size and its columns.
"""

from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path
from typing import Any

import pytest
from fuzz_profile import fuzz
from hypothesis import given
from hypothesis import strategies as st

from coordinator.errors import OdfNodeError
from coordinator.ingest.readers import read_batches
from coordinator.metadata import model as m

SCHEMA = ("city STRING", "population BIGINT", "at TIMESTAMP")
READS: list[m.ReadStep] = [
    m.ReadStepCsv(ddl_schema=SCHEMA, header=True),
    m.ReadStepCsv(ddl_schema=SCHEMA, header=False, separator=";"),
    m.ReadStepNdJson(ddl_schema=SCHEMA),
    m.ReadStepJson(ddl_schema=SCHEMA),
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


# -- Huge and wide inputs at reduced size: memory bounded, time linear -------------------------
#
# The full-size runs (1 GiB, 20,000 columns) are ``make bench-ingest-hostile``; here each shape
# is ingested (the real ``ingest``, Append) at two sizes, each in a fresh child process that
# reports its own peak RSS (``ru_maxrss``) over its RSS before the ingest. Comparing the two
# sizes of one run keeps the assertions independent of the machine's speed: memory must not
# follow the input (it fills its fixed buffers by about 48 MiB of input) and time must not grow
# faster than the input (a quadratic step would take 9x the time for 3x the input).

_BENCH = Path(__file__).parents[1] / "bench" / "bench_ingest_hostile.py"
_SMALL, _LARGE = 48 << 20, 144 << 20
_MIB = 1 << 20


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_ingest_hostile", _BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "case",
    [
        "csv-sparse",
        "csv-line",
        "ndjson-line",
        "json-string",
        "csv-rows",
        "ndjson-rows",
        "json-rows",
    ],
)
def test_huge_input_takes_bounded_memory_and_linear_time(case: str, tmp_path: Path) -> None:
    bench = _bench()
    fmt, generate, sub_path = bench.GENERATORS[case]
    reports = []
    for size in (_SMALL, _LARGE):
        path = tmp_path / f"{case}-{size}"
        generate(path, size)
        spec = {
            "format": fmt,
            "schema": list(bench.SCHEMA),
            "sub_path": sub_path,
            "input": str(path),
            "dataset": str(tmp_path / f"ds-{size}"),
        }
        reports.append(bench.run_child(spec))
        path.unlink()
    small, large = reports
    for r in reports:
        assert r["outcome"].startswith(("ok:", "BadInputData:")), r
        assert r["peak_extra_mib"] <= 256, r
    growth = large["peak_extra_mib"] - small["peak_extra_mib"]
    assert growth <= 0.25 * (_LARGE - _SMALL) / _MIB + 24, (small, large)
    assert large["seconds"] <= 6 * small["seconds"] + 1.0, (small, large)


def test_wide_input_takes_time_linear_in_its_columns(tmp_path: Path) -> None:
    bench = _bench()
    seconds = {}
    for n in (1250, 5000):
        path = tmp_path / f"wide-{n}.csv"
        bench.wide_row(path, n)
        spec = {
            "format": "csv",
            "schema": [f"c{i} STRING" for i in range(n)],
            "input": str(path),
            "dataset": str(tmp_path / f"ds-{n}"),
        }
        report = bench.run_child(spec)
        assert report["outcome"] == "ok: 1 records", report
        assert report["peak_extra_mib"] <= 256, report
        seconds[n] = report["seconds"]
    # 4x the columns: linear is 4x the time; the quadratic step took 13x (0.68 s -> 8.7 s)
    assert seconds[5000] <= 8 * seconds[1250] + 0.5, seconds
