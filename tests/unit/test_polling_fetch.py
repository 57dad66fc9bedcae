"""node/app/polling.py: a fetch step this node cannot run is refused at pull, naming why."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import cast

import pytest

from coordinator.errors import SourceNotRunnable
from coordinator.ingest.push import PushSourceInfo
from coordinator.metadata import model as m
from coordinator.metadata.timestamp import Timestamp
from node.app.polling import PollingOptions, fetch_polling

READ = m.ReadStepNdJson(schema=("a BIGINT",))


def info(fetch: m.FetchStep) -> PushSourceInfo:
    source = m.SetPollingSource(fetch=fetch, read=READ, merge=m.MergeStrategyAppend())
    # Only .source and .source_state are read by the fetch dispatch.
    return cast(PushSourceInfo, type("Info", (), {"source": source, "source_state": None})())


def test_unknown_url_scheme_is_refused_at_pull(tmp_path: Path) -> None:
    with pytest.raises(SourceNotRunnable, match="'gopher'"):
        asyncio.run(
            fetch_polling(
                info(m.FetchStepUrl(url="gopher://example.org/a")),
                tmp_path,
                Timestamp.parse("2050-01-01T00:00:00Z"),
                "did:odf:fed01",
                transfer=None,
                opts=PollingOptions(),
            )
        )
