"""Engine version policy: candidate order, kamu's release table, version sensitivity."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from coordinator.metadata import model as m
from coordinator.metadata.timestamp import Timestamp
from coordinator.transform.engines import (
    DATAFUSION_VERSIONS,
    candidate_versions,
    datafusion_core,
    inferred_datafusion_version,
    version_sensitivity,
)

ALL = ("51.0.0", "41.0.0")


def sql(q: str, version: str | None = None, engine: str = "datafusion") -> m.TransformSql:
    return m.TransformSql(engine=engine, version=version, queries=(m.SqlQueryStep(query=q),))


@pytest.mark.parametrize(
    ("at", "expected"),
    [
        ("2024-03-01T00:00:00Z", None),  # engine 0.7.2 (DataFusion 34)
        ("2024-08-22T00:00:00Z", "41.0.0"),  # kamu-cli v0.197.0: engine 0.8.0
        ("2025-12-31T00:00:00Z", "41.0.0"),
        ("2026-01-17T00:00:00Z", "51.0.0"),  # kamu-cli v0.256.1: engine 0.9.0
        ("2050-01-01T00:00:00Z", "51.0.0"),
    ],
)
def test_release_table(at: str, expected: str | None) -> None:
    assert inferred_datafusion_version(Timestamp.parse(at)) == expected


@pytest.mark.parametrize(
    ("version", "core"),
    [
        ("0.9.0", "51.0.0"),
        ("0.8.1", "41.0.0"),
        ("0.8.0", "41.0.0"),
        ("51", "51.0.0"),
        ("41.0.0", "41.0.0"),
        ("v0.9.0", "51.0.0"),
        ("0.7.2", None),
        ("55.0.0", None),
        (None, None),
    ],
)
def test_version_field_mapping(version: str | None, core: str | None) -> None:
    assert datafusion_core(version) == core


def test_candidates_version_field_then_time_then_others() -> None:
    late = Timestamp.parse("2026-05-01T00:00:00Z")
    early = Timestamp.parse("2025-05-01T00:00:00Z")
    assert candidate_versions(sql("q"), late, ALL) == ("51.0.0", "41.0.0")
    assert candidate_versions(sql("q"), early, ALL) == ("41.0.0", "51.0.0")
    assert candidate_versions(sql("q", "0.8.1"), late, ALL) == ("41.0.0", "51.0.0")
    assert candidate_versions(sql("q", "0.7.2"), late, ALL) == ("51.0.0", "41.0.0")
    # before DataFusion 41: the oldest pinned release first
    assert candidate_versions(sql("q"), Timestamp.parse("2023-01-01T00:00:00Z"), ALL) == (
        "41.0.0",
        "51.0.0",
    )
    assert candidate_versions(sql("q"), early, ("51.0.0",)) == ("51.0.0",)
    assert candidate_versions(sql("q", engine="spark"), early, ("3.5",)) == ("3.5",)


@pytest.mark.parametrize(
    "query",
    [
        "SELECT event_time, extract(year from event_time) AS y FROM t",
        "SELECT event_time, date_part('year', event_time) AS y FROM t",
        "SELECT event_time, power(x, 2) AS p FROM t",
        "SELECT event_time, CAST(x AS VARCHAR) AS s FROM t",
        "SELECT event_time, x::text AS s FROM t",
        "SELECT a.event_time FROM a JOIN b ON a.k = b.k",
        "SELECT event_time, count(*) FROM t GROUP BY event_time",
    ],
)
def test_version_sensitive(query: str) -> None:
    assert version_sensitivity(sql(query)) != ()


@pytest.mark.parametrize(
    "query",
    [
        "SELECT op, event_time, city, population * 10 AS p FROM root",
        "SELECT event_time, upper(city) AS c, coalesce(x, 0) AS x FROM t WHERE x > 1",
        "SELECT event_time, 'extract(year from x)' AS s FROM t -- power(1)",
        "SELECT event_time, CAST(x AS BIGINT) AS b FROM t",
    ],
)
def test_version_insensitive(query: str) -> None:
    assert version_sensitivity(sql(query)) == ()


def test_makefile_pins_the_same_releases() -> None:
    text = (Path(__file__).resolve().parents[2] / "Makefile").read_text()
    match = re.search(r"^DATAFUSION_VERSIONS := (.+)$", text, re.M)
    assert match is not None
    assert tuple(match.group(1).split()) == DATAFUSION_VERSIONS
