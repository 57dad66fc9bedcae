"""The DHT driver's counters and the one row ``status`` shows of them (``p2p.dht``).

Pure data, in the sans-IO package, so that the application layer can show the same row (all
zeros, ``running`` false) when no DHT runs: ``status`` keeps one JSON shape with and without a
daemon.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class DhtStats:
    """Counters for status, logs and tests."""

    served: int = 0
    served_rate_limited: int = 0
    served_invalid: int = 0
    records_stored: int = 0
    records_refused: int = 0
    lookups: int = 0
    queries: int = 0
    query_failures: int = 0
    rate_limited_by_peers: int = 0
    """Answers ``RATE_LIMITED`` this node received."""
    held_back: int = 0
    """Queries not sent because the peer's ``retry_after`` had not passed."""
    bad_records: int = 0
    provides: int = 0
    providers_found: int = 0
    """Distinct providers whose checked records this node's lookups received (per lookup)."""
    providers_confirmed: int = 0
    """Of them, those a dial authenticated (an open connection counts)."""
    providers_failed: int = 0
    """Those whose dial failed or reached another peer (a Sybil's fake records end here)."""


def status_row(
    stats: DhtStats | None = None, *, routing_table: int = 0, records: int = 0
) -> dict[str, int | bool]:
    """``status``' ``p2p.dht``: ``running`` and every counter (zeros when ``stats`` is None)."""
    return {
        "running": stats is not None,
        **asdict(stats if stats is not None else DhtStats()),
        "routing_table": routing_table,
        "records": records,
    }
