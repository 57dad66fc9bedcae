"""The relay service's and MQTT sources' bounds are settings with sane defaults, and a bound that
would switch the limit off is refused naming it (docs/nat.md "The relay under abuse",
docs/ingest-polling.md "Under floods")."""

from __future__ import annotations

from pathlib import Path

import pytest

from node.config import ConfigError, load_config


def test_defaults() -> None:
    cfg = load_config(None, environ={})
    p, i = cfg.p2p, cfg.ingest
    assert (p.relay_max_reservations, p.relay_max_circuits, p.relay_max_circuits_per_peer) == (
        16,
        16,
        4,
    )
    assert (p.relay_circuit_duration_s, p.relay_circuit_bytes) == (600, 64 << 20)
    assert (p.relay_peer_bytes, p.relay_total_bytes, p.relay_bytes_window_s) == (
        256 << 20,
        1 << 30,
        3600,
    )
    assert (i.mqtt_max_message_bytes, i.mqtt_max_poll_s) == (16 << 20, 60.0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[p2p]\nrelay_max_circuits_per_peer = 0\n", "relay_max_circuits_per_peer"),
        ("[p2p]\nrelay_peer_bytes = 0\n", "relay_peer_bytes"),
        ("[p2p]\nrelay_total_bytes = 0\n", "relay_total_bytes"),
        ("[p2p]\nrelay_bytes_window_s = 0\n", "relay_bytes_window_s"),
        ("[ingest]\nmqtt_max_message_bytes = 0\n", "mqtt_max_message_bytes"),
        ("[ingest]\nmqtt_max_poll_s = 0\n", "mqtt_max_poll_s"),
    ],
)
def test_a_bound_switched_off_is_refused(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "config.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(f, environ={})
