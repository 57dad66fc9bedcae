"""Ingest readers on hostile files: huge CSV fields, deep JSON, bad UTF-8, files that are not.

Each of these once escaped as an untyped error (``_csv.Error: field larger than field limit``,
``RecursionError``, ``UnicodeDecodeError``), made a valid file impossible to ingest (a CSV field
over Arrow's 1 MiB parse block), or read something that is not a file (a FIFO, a directory,
``/dev/zero``). Every case is now records or a :class:`~coordinator.errors.BadInputData`.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from coordinator.errors import BadInputData
from coordinator.ingest import readers
from coordinator.ingest.readers import read_batches
from coordinator.metadata import model as m

SCHEMA = ("city STRING", "population BIGINT")
CSV = m.ReadStepCsv(ddl_schema=SCHEMA)
STEPS: list[m.ReadStep] = [
    CSV,
    m.ReadStepNdJson(ddl_schema=SCHEMA),
    m.ReadStepJson(ddl_schema=SCHEMA),
    m.ReadStepParquet(ddl_schema=SCHEMA),
]


def rows(step: m.ReadStep, path: Path, **kw: int) -> list[dict[str, object]]:
    return [r for b in read_batches(step, path, **kw) for r in b.to_pylist()]  # type: ignore[arg-type]


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Fail instead of hanging (a blocked ``open`` of a FIFO is interrupted by the alarm)."""

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError("the reader blocked")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# -- CSV records larger than a parse block ------------------------------------------------------


def test_csv_field_over_one_mib_is_ingested(tmp_path: Path) -> None:
    big = "x" * (3 << 20)
    p = tmp_path / "big.csv"
    p.write_text(f'a,1\n{big},2\n"q,{big}",3\nb,4\n')
    got = rows(CSV, p)
    assert [r["population"] for r in got] == [1, 2, 3, 4]
    assert got[1]["city"] == big and got[2]["city"] == "q," + big


def test_csv_reread_neither_repeats_nor_loses_rows(tmp_path: Path) -> None:
    # Small batches are yielded before the big record forces a re-read with larger blocks.
    lines = [f"r{i},{i}" for i in range(3000)]
    lines.insert(2500, "big" + "y" * 200_000 + ",-1")
    p = tmp_path / "mixed.csv"
    p.write_text("\n".join(lines) + "\n")
    seen: list[int] = []
    got = [
        r
        for b in read_batches(CSV, p, block_bytes=4096, on_bytes=seen.append)
        for r in b.to_pylist()
    ]
    assert [r["population"] for r in got] == [*range(2500), -1, *range(2500, 3000)]
    assert seen == sorted(seen), "progress never moves back on a re-read"
    assert seen[-1] == p.stat().st_size


def test_csv_record_over_the_limit_is_a_typed_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(readers, "MAX_CSV_RECORD_BYTES", 64 << 10)
    p = tmp_path / "huge.csv"
    # Arrow reads a record spanning two parse blocks, not three: 200 KiB > 2 x 64 KiB.
    p.write_text("a,1\n" + "z" * (200 << 10) + ",2\n")
    with pytest.raises(BadInputData, match="larger than 65536 bytes"):
        rows(CSV, p, block_bytes=4096)


def test_csv_structure_error_next_to_a_field_over_128_kib_is_diagnosed(tmp_path: Path) -> None:
    # Python's csv module (used to find the bad record) refuses fields over 128 KiB by default.
    p = tmp_path / "wide.csv"
    p.write_text("a,1\n" + "w" * (300 << 10) + ",2\nb,3,extra\n")
    with pytest.raises(BadInputData, match=r"expected 2 fields .*got 3") as info:
        rows(CSV, p)
    assert info.value.row == 3


# -- JSON nesting -------------------------------------------------------------------------------


def test_ndjson_deeply_nested_value_is_a_typed_error(tmp_path: Path) -> None:
    p = tmp_path / "deep.ndjson"
    deep = "[" * 1000 + "1" + "]" * 1000
    p.write_text(f'{{"city": "a", "population": 1}}\n{{"city": {deep}}}\n')
    with pytest.raises(BadInputData) as info:
        rows(m.ReadStepNdJson(ddl_schema=SCHEMA), p)
    assert info.value.row == 2


def test_ndjson_deep_value_in_an_ignored_field_is_fine(tmp_path: Path) -> None:
    p = tmp_path / "deep-ignored.ndjson"
    deep = "[" * 5000 + "]" * 5000
    p.write_text(f'{{"other": {deep}, "city": "a", "population": 1}}\n')
    assert rows(m.ReadStepNdJson(ddl_schema=SCHEMA), p) == [{"city": "a", "population": 1}]


def test_json_document_deeply_nested_is_a_typed_error(tmp_path: Path) -> None:
    # The elements are delimited without decoding them and parsed by Arrow (iteratively), as
    # NDJSON records are: deep nesting is refused in a declared column, read past elsewhere.
    p = tmp_path / "deep.json"
    deep = "[" * 5000 + "]" * 5000
    p.write_text(f'[{{"city": "a", "population": 1}}, {{"city": {deep}}}]')
    with pytest.raises(BadInputData, match="nested too deeply") as info:
        rows(m.ReadStepJson(ddl_schema=SCHEMA), p)
    assert info.value.row == 2
    p.write_text(f'[{{"city": "a", "population": 1, "x": {deep}}}]')
    assert rows(m.ReadStepJson(ddl_schema=SCHEMA), p) == [{"city": "a", "population": 1}]


# -- UTF-8 --------------------------------------------------------------------------------------


@pytest.mark.parametrize("step", STEPS[:3], ids=lambda s: type(s).__name__)
@pytest.mark.parametrize(
    "data",
    [
        b'{"city": "a\xff", "population": 1}\n',
        b"[" + b'{"city": "a", "population": 1}' + b"]\xc3",  # truncated sequence at EOF
        b"\xc2",
        b'[{"city": "\xe2\x82"}]',
    ],
)
def test_invalid_utf8_is_a_typed_error(step: m.ReadStep, data: bytes, tmp_path: Path) -> None:
    p = tmp_path / "bad"
    p.write_bytes(data)
    with pytest.raises(BadInputData):
        rows(step, p)


# -- not regular files --------------------------------------------------------------------------


@pytest.mark.parametrize("step", STEPS, ids=lambda s: type(s).__name__)
def test_fifo_directory_and_devices_are_not_regular_files(step: m.ReadStep, tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for p in (fifo, tmp_path, Path("/dev/zero"), Path("/dev/null")):
        with deadline(10), pytest.raises(BadInputData, match="not a regular file"):
            rows(step, p)
    with pytest.raises(BadInputData, match="input file not found"):
        rows(step, tmp_path / "missing.csv")


def test_use_case_check_names_non_regular_files(tmp_path: Path) -> None:
    from node.app.datasets import check_input_files
    from node.app.errors import InvalidArgument

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for p in (fifo, tmp_path, Path("/dev/zero")):
        with pytest.raises(InvalidArgument, match="not a regular file"):
            check_input_files([p])
    with pytest.raises(InvalidArgument, match="not found"):
        check_input_files([tmp_path / "missing.csv"])


def test_ndjson_invalid_utf8_names_row_and_line(tmp_path: Path) -> None:
    # Arrow's JSON reader copies string bytes unchecked: the batch would hold invalid UTF-8.
    p = tmp_path / "bad.ndjson"
    p.write_bytes(b'{"city": "a", "population": 1}\n\n{"city": "b\xff", "population": 2}\n')
    with pytest.raises(BadInputData, match="invalid UTF-8") as info:
        rows(m.ReadStepNdJson(ddl_schema=SCHEMA), p)
    assert (info.value.row, info.value.line) == (2, 3)


def test_json_document_is_read_to_its_end(tmp_path: Path) -> None:
    step = m.ReadStepJson(ddl_schema=SCHEMA)
    p = tmp_path / "doc.json"
    p.write_text('[{"city": "a", "population": 1}]  \n')
    assert rows(step, p) == [{"city": "a", "population": 1}]
    p.write_text('[{"city": "a", "population": 1}] [')
    with pytest.raises(BadInputData, match="trailing characters"):
        rows(step, p)
    # With a subPath the rest of the enclosing object is only checked to be UTF-8.
    sub = m.ReadStepJson(ddl_schema=SCHEMA, sub_path="data")
    p.write_text('{"data": [{"city": "a", "population": 1}], "more": {"x": [1, 2]}}')
    assert rows(sub, p) == [{"city": "a", "population": 1}]
    p.write_bytes(b'{"data": [], "more": "\xe2\x82"}')
    with pytest.raises(BadInputData, match="invalid UTF-8"):
        rows(sub, p)


# -- Records of any size: refused at the limit, never held whole ------------------------------


def test_ndjson_line_over_the_limit_is_refused_without_reading_it_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(readers, "MAX_JSON_RECORD_BYTES", 64 << 10)
    p = tmp_path / "long.ndjson"
    p.write_bytes(b'{"city": "a"}\n{"city": "b"}\n' + b"\0" * (1 << 20))
    read: list[int] = []
    with pytest.raises(BadInputData, match="larger than 65536 bytes") as info:
        rows(m.ReadStepNdJson(ddl_schema=SCHEMA), p, block_bytes=4096, on_bytes=read.append)  # type: ignore[arg-type]
    assert info.value.line == 3
    assert read[-1] < 128 << 10, "refused once the limit is passed, not at the end of the file"
    # a line just under the limit is read
    p.write_text('{"city": "' + "c" * (60 << 10) + '"}\n')
    assert rows(m.ReadStepNdJson(ddl_schema=SCHEMA), p, block_bytes=4096) == [
        {"city": "c" * (60 << 10), "population": None}
    ]


@pytest.mark.parametrize("read_bytes", [7, 1000])
def test_json_document_element_over_the_limit_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read_bytes: int
) -> None:
    monkeypatch.setattr(readers, "MAX_JSON_RECORD_BYTES", 16 << 10)
    monkeypatch.setattr(readers, "_JSON_READ_BYTES", read_bytes)
    p = tmp_path / "big.json"
    p.write_text('[{"city": "a"}, {"city": "' + "x" * (100 << 10) + '"}]')
    with pytest.raises(BadInputData, match="JSON array element is larger than 16384 bytes"):
        rows(m.ReadStepJson(ddl_schema=SCHEMA), p)


@pytest.mark.parametrize("read_bytes", [1, 3, 64, 1 << 20])
def test_json_document_values_on_the_way_to_the_sub_path_may_be_of_any_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read_bytes: int
) -> None:
    # Values before the array are scanned and dropped as they go, whatever their size, even
    # when a read ends between a backslash and the character it escapes.
    monkeypatch.setattr(readers, "MAX_JSON_RECORD_BYTES", 1 << 10)
    monkeypatch.setattr(readers, "_JSON_READ_BYTES", read_bytes)
    skipped = '"' + '\\"' * 2000 + '"'
    nested = "[" * 50 + '"]}{"' + "]" * 50
    p = tmp_path / "doc.json"
    p.write_text(
        f'{{"x": {skipped}, "y": {nested}, "n": -12.5e3, "data": {{"z": 1, "items": '
        '[{"city": "a"}, {"city": "b", "population": 2}]}}'
    )
    step = m.ReadStepJson(ddl_schema=SCHEMA, sub_path="data.items")
    assert rows(step, p) == [{"city": "a", "population": None}, {"city": "b", "population": 2}]


@pytest.mark.parametrize("read_bytes", [1, 5, 1 << 20])
def test_json_document_elements_are_delimited_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read_bytes: int
) -> None:
    # Flat objects go through the one-regex fast path, nested ones through the scanner; the
    # strings hold every character that could fool a delimiter.
    monkeypatch.setattr(readers, "_JSON_READ_BYTES", read_bytes)
    cities = ['},{"city": "no"}', "a]b[c", 'q"uo\\"te', "\\", "line\nbreak", "é€😀", ""]
    elements = []
    for i, c in enumerate(cities):
        elements.append({"city": c, "population": i})
        elements.append({"city": c, "population": -i, "nested": [{"x": [c]}, {}]})
    p = tmp_path / "doc.json"
    p.write_text("[\n" + ",\n  ".join(json.dumps(e, indent=1) for e in elements) + "\n]\n")
    got = rows(m.ReadStepJson(ddl_schema=SCHEMA), p, block_bytes=64)
    assert got == [{"city": e["city"], "population": e["population"]} for e in elements]


def test_json_document_raw_control_character_in_a_string_is_refused(tmp_path: Path) -> None:
    # JSON forbids them; a raw newline would otherwise be turned into a space with the others.
    p = tmp_path / "doc.json"
    p.write_bytes(b'[{"city": "a\nb"}]')
    with pytest.raises(BadInputData, match="control character in a string"):
        rows(m.ReadStepJson(ddl_schema=SCHEMA), p)


def test_error_messages_quote_at_most_an_excerpt_of_the_input(tmp_path: Path) -> None:
    big = "9" * (2 << 20) + "x"
    cases: list[tuple[m.ReadStep, str, int]] = [
        (CSV, f"a,1\nb,{big}\n", 2),
        (m.ReadStepNdJson(ddl_schema=SCHEMA), f'{{"city": "a"}}\n{{"population": "{big}"}}\n', 2),
        (m.ReadStepJson(ddl_schema=SCHEMA), f'[{{"city": "a"}}, {{"population": "{big}"}}]', 2),
    ]
    for step, text, row in cases:
        p = tmp_path / "in"
        p.write_text(text)
        with pytest.raises(BadInputData) as info:
            rows(step, p)
        assert info.value.row == row
        assert len(str(info.value)) < 1000, str(info.value)[:300]
