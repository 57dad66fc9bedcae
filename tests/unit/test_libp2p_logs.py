"""The gossipsub pending-queue warning is filtered; other library warnings are kept."""

from __future__ import annotations

import logging

import pytest

from p2p.libp2p_host import _quiet_gossipsub_logs


def test_pending_queue_warning_is_dropped_others_kept(caplog: pytest.LogCaptureFixture) -> None:
    _quiet_gossipsub_logs()
    _quiet_gossipsub_logs()  # idempotent: one filter
    lg = logging.getLogger("libp2p.pubsub.gossipsub")
    assert len(lg.filters) == 1
    with caplog.at_level(logging.WARNING, logger="libp2p.pubsub.gossipsub"):
        lg.warning(
            "pending message queue for peer %s exceeded limit (%d > %d), dropping oldest messages",
            "12D3KooW",
            17,
            16,
        )
        lg.warning("Cannot flush pending messages for %s: no stream available", "12D3KooW")
    assert [r.getMessage() for r in caplog.records] == [
        "Cannot flush pending messages for 12D3KooW: no stream available"
    ]
