"""RFC 3339 timestamps in metadata (``Timestamp.parse``): strict offsets, exact values."""

from __future__ import annotations

import pytest

from coordinator.errors import DecodeError
from coordinator.metadata.timestamp import Timestamp

BASE = Timestamp.parse("2020-01-01T00:00:00Z")


@pytest.mark.parametrize(
    ("text", "shift_min"),
    [("+00:00", 0), ("-00:00", 0), ("+23:59", -(23 * 60 + 59)), ("-23:59", 23 * 60 + 59)],
)
def test_offsets_from_minus_to_plus_23_59(text: str, shift_min: int) -> None:
    got = Timestamp.parse(f"2020-01-01T00:00:00{text}")
    assert got.to_rfc3339() == Timestamp(BASE.epoch_ns + shift_min * 60 * 10**9).to_rfc3339()


@pytest.mark.parametrize("offset", ["+25:00", "-24:00", "+99:00", "+23:60", "+00:99", "+0100"])
def test_out_of_range_or_malformed_offsets_are_refused(offset: str) -> None:
    with pytest.raises(DecodeError, match="invalid RFC 3339"):
        Timestamp.parse(f"2020-01-01T00:00:00{offset}")
