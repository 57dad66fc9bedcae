"""node/app/polling.py: a fetch step this node cannot run is refused at pull, naming why (a step
that needs the transfer port, where the application has none, too)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import cast

import pytest

from coordinator.errors import SourceNotRunnable
from coordinator.ingest.push import PushSourceInfo
from coordinator.metadata import model as m
from coordinator.metadata.timestamp import Timestamp
from node.app.errors import InvalidArgument
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


@pytest.mark.parametrize(
    ("fetch", "refusal"),
    [
        (m.FetchStepUrl(url="https://example.org/a"), "fetching URL sources"),
        (
            m.FetchStepMqtt(
                host="example.org", port=1883, topics=(m.MqttTopicSubscription(path="t"),)
            ),
            "fetching MQTT sources",
        ),
        (m.FetchStepContainer(image="example.org/img"), "running Container sources"),
        (
            m.FetchStepEthereumLogs(chain_id=1, node_url="https://example.org/eth"),
            "fetching EthereumLogs sources",
        ),
    ],
)
def test_a_step_that_needs_the_transfer_port_is_refused_without_it(
    tmp_path: Path, fetch: m.FetchStep, refusal: str
) -> None:
    with pytest.raises(InvalidArgument) as e:
        asyncio.run(
            fetch_polling(
                info(fetch),
                tmp_path,
                Timestamp.parse("2050-01-01T00:00:00Z"),
                "did:odf:fed01",
                transfer=None,
                opts=PollingOptions(),
            )
        )
    assert str(e.value) == f"{refusal} is not available here"
