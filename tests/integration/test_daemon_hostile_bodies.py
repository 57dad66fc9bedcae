"""Acceptance of issue 26, item 1: a 1 MiB adversarial body never freezes a real daemon.

The former nesting scan backtracked on an unterminated string of escaped quotes
(``tests/hostile_bodies.py``): a token-authenticated 40 KB request took 9.4 s to answer and
``node.status`` did not answer meanwhile; 1 MiB, the largest body allowed, would have taken
about an hour. Here one real daemon (``odf-node run``, IPFS off) receives each shape at 1 MiB
over HTTP POST, over the WebSocket and through the console's ``/ui/rpc`` (with a session
obtained through ``console.login``), while a thread calls ``node.status`` every 50 ms on its
own connection. Each answer must come within 1 s (the median of three sends) and every
``node.status`` within 1 s. Against the former scanner the first send times out (10 s).

The bounds are an order of magnitude above the targets (100 ms an answer, 250 ms a status), which
``make bench-hostile`` measures: what this test guards is that nothing backtracks (the former
scanner took hours at 1 MiB), and on a 2-core machine running CI beside other work (load 20+)
a linear scan of 1 MiB was measured at a 101.8 ms median, so a 100 ms bound here would fail on
load, not on a defect.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import statistics
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from daemon_harness import NodeProcess
from hostile_bodies import adversarial_body
from netns import require_loopback_only

from node.rpc.errors import PARSE_ERROR

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

SIZE = (1 << 20) - 1
"""The largest body every transport admits under the default ``[rpc] max_body_bytes`` (1 MiB):
aiohttp closes an uncompressed WebSocket message of exactly the limit with 1009."""
ANSWER_S = 1.0
STATUS_S = 1.0
SENDS = 3
SHAPES = (
    "escaped-quotes",
    "request-escaped-quotes",
    "backslashes",
    "quote-escape-runs",
    "brackets-in-strings",
    "open-brackets",
)
TRANSPORTS = ("http", "ws", "ui")


class StatusProbe(threading.Thread):
    """``node.status`` every 50 ms on a keep-alive connection of its own; latencies in s."""

    def __init__(self, node: NodeProcess) -> None:
        super().__init__(daemon=True, name="status-probe")
        u = urllib.parse.urlsplit(node.url)
        self.host, self.port, self.path = u.hostname or "127.0.0.1", u.port or 80, u.path
        self.token = node.token
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=5)
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "node.status"}).encode()
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        while not self.stop_event.wait(0.05):
            t0 = time.perf_counter()
            try:
                conn.request("POST", self.path, body, headers)
                reply = json.loads(conn.getresponse().read())
                assert "uptime_s" in reply["result"], reply
            except Exception as e:  # recorded: a failed probe fails the test
                self.failures.append(f"{type(e).__name__}: {e}")
                conn.close()
                conn = http.client.HTTPConnection(self.host, self.port, timeout=5)
            self.latencies.append(time.perf_counter() - t0)
        conn.close()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    require_loopback_only()
    node = NodeProcess(
        tmp_path_factory.mktemp("bodies") / "node", "bodies", config={"ipfs": {"mode": "none"}}
    )
    node.init()
    node.launch()
    try:
        node.wait_ready()
        yield node
    finally:
        node.stop()


async def timed_answers(node: NodeProcess, ui_headers: dict[str, str]) -> dict[str, Any]:
    """``(transport, shape) -> (median s, worst s, the last reply)`` over :data:`SENDS` sends."""
    auth = {"Authorization": f"Bearer {node.token}", "Content-Type": "application/json"}
    base = node.url.removesuffix("/rpc")
    ws_url = node.url.replace("http://", "ws://") + "/ws"
    out: dict[str, Any] = {}
    limit = aiohttp.ClientTimeout(total=10)
    async with (
        aiohttp.ClientSession(timeout=limit) as s,
        s.ws_connect(ws_url, headers=auth, max_msg_size=0) as ws,
    ):
        for shape in SHAPES:
            body = adversarial_body(shape, SIZE)
            for transport in TRANSPORTS:
                took: list[float] = []
                reply: Any = None
                for _ in range(SENDS):
                    t0 = time.perf_counter()
                    try:
                        if transport == "ws":
                            await ws.send_str(body.decode())
                            msg = await ws.receive(timeout=10)
                            assert msg.type == aiohttp.WSMsgType.TEXT, (shape, msg)
                            reply = json.loads(msg.data)
                        else:
                            url, headers = (
                                (node.url, auth)
                                if transport == "http"
                                else (base + "/ui/rpc", ui_headers)
                            )
                            async with s.post(url, data=body, headers=headers) as r:
                                reply = await r.json()
                    except TimeoutError:
                        # The daemon is stuck (the former scanner): the next sends would only
                        # queue behind this one.
                        out[f"{transport}:{shape}"] = (10.0, 10.0, "no answer within 10 s")
                        return out
                    took.append(time.perf_counter() - t0)
                out[f"{transport}:{shape}"] = (statistics.median(took), max(took), reply)
    return out


def test_a_1_mib_adversarial_body_is_answered_at_once_and_status_stays_fast(
    daemon: NodeProcess,
) -> None:
    ui_headers = daemon.console_headers()
    assert ui_headers["Cookie"].startswith("odf_console_")
    probe = StatusProbe(daemon)
    probe.start()
    try:
        time.sleep(0.3)  # a few probes before the first body
        answers = asyncio.run(timed_answers(daemon, ui_headers))
        time.sleep(0.3)
    finally:
        probe.stop_event.set()
        probe.join(10)
    report = {
        k: f"median {m * 1000:.1f} ms, max {w * 1000:.1f} ms" for k, (m, w, _) in answers.items()
    }
    worst_status = max(probe.latencies)
    print(json.dumps(report, indent=1))
    print(f"node.status: {len(probe.latencies)} probes, max {worst_status * 1000:.1f} ms")
    assert len(answers) == len(SHAPES) * len(TRANSPORTS), report
    for key, (median, _, reply) in answers.items():
        assert isinstance(reply, dict) and reply["error"]["code"] == PARSE_ERROR, (key, reply)
        assert "nested deeper" in reply["error"]["message"], (key, reply)
        assert median < ANSWER_S, (key, report[key])
    assert not probe.failures, probe.failures[:3]
    assert len(probe.latencies) >= 10
    assert worst_status < STATUS_S, f"node.status took {worst_status * 1000:.0f} ms"
    daemon.call("node.status")


def test_the_daemon_logged_no_traceback(daemon: NodeProcess, tmp_path: Path) -> None:
    assert "Traceback" not in daemon.tail(1 << 20)
