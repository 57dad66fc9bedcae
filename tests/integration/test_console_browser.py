"""The node console in a real headless Chromium, against two real daemons.

An owner and a subscriber (``console``) run with their own homes, libp2p and Spark, IPFS off:
the subscriber pulls over HTTP from the owner's transfer server. The browser logs into the
subscriber's console through the one-time URL ``odf-node ui`` prints, sees a dataset created
with the CLI, subscribes to the owner's derivative from the datasets page and watches it turn
"verified" without a reload, then sees the dispute (with expected vs computed hashes) of a
forged block. Requests without the session cookie, a reused login token and a foreign Origin
are refused. Every page is checked in the DOM the script built, and a screenshot of each is
written to ``build/console-screenshots/`` (git-ignored). The daemons and the browser are
shared by the module's tests, which run in order.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from browser import SCREENSHOTS, start_chromium
from daemon_harness import CITIES_SNAPSHOT, ROOT, NodeProcess, forge_next_step
from netns import require_loopback_only

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

SNAPSHOTS = (
    CITIES_SNAPSHOT
    + """\
kind: DatasetSnapshot
version: 1
content:
  name: big-cities
  kind: Derivative
  metadata:
    - kind: SetTransform
      inputs:
        - datasetRef: cities
      transform:
        kind: Sql
        engine: spark
        queries:
          - query: >-
              SELECT op, event_time, city, population * 2 AS pop2 FROM cities
              WHERE population > 100
"""
)
LOCAL_SNAPSHOT = """\
kind: DatasetSnapshot
version: 1
content:
  name: made-by-cli
  kind: Root
  metadata:
    - kind: AddPushSource
      sourceName: default
      read:
        kind: Csv
        header: true
        schema: ["event_time TIMESTAMP", "value BIGINT"]
      merge:
        kind: Append
    - kind: SetVocab
      eventTimeColumn: event_time
"""
CSV1 = (
    "event_time,city,population\n"
    "2020-01-01T00:00:00Z,A,1000\n2020-01-02T00:00:00Z,B,2000\n2020-01-03T00:00:00Z,C,30\n"
)
CSV2 = "event_time,city,population\n2020-01-04T00:00:00Z,D,4000\n2020-01-05T00:00:00Z,E,5\n"
NO_IPFS = {"ipfs": {"mode": "none"}}


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, NodeProcess]]:
    require_loopback_only()
    base = tmp_path_factory.mktemp("console")
    procs = {n: NodeProcess(base / n, n, config=NO_IPFS) for n in ("owner", "console")}
    try:
        for p in procs.values():
            p.init()
            p.launch()
        for p in procs.values():
            p.wait_ready()
        addr = procs["owner"].call("node.status")["p2p"]["listen_addrs"][0]
        procs["console"].call("peers.connect", multiaddr=addr)
        yield procs
    finally:
        for p in procs.values():
            p.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    driver = start_chromium(tmp_path_factory.mktemp("chromium-profile"))
    driver.set_page_load_timeout(30)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    try:
        yield driver
    finally:
        driver.quit()


def _cli(node: NodeProcess, *args: str) -> str:
    proc = subprocess.run(  # noqa: PLW1510 - the status is checked below, with stderr shown
        [sys.executable, "-m", "node.cli", *args, "--home", str(node.home)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _login_url(node: NodeProcess) -> str:
    url = json.loads(_cli(node, "ui", "--json"))["url"]
    assert isinstance(url, str)
    return url


def _base(node: NodeProcess) -> str:
    return node.url.removesuffix("/rpc")


def _wait(driver: Any, what: str, probe: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = probe()
            if value:
                return value
        except Exception as e:  # the element may not exist yet or be replaced while read
            last = e
        time.sleep(0.1)
    name = what.replace(" ", "-")
    driver.save_screenshot(str(SCREENSHOTS / f"FAILED-{name}.png"))
    raise AssertionError(f"timed out waiting for {what} (last error: {last!r})")


def _js(driver: Any, script: str, *args: Any) -> Any:
    return driver.execute_script(script, *args)


def _texts(driver: Any, selector: str) -> list[str]:
    """The ``textContent`` of every element matching ``selector`` (as the script built it)."""
    return list(
        _js(
            driver,
            "return [...document.querySelectorAll(arguments[0])].map(e => e.textContent)",
            selector,
        )
    )


def _data(driver: Any, selector: str, key: str) -> list[str]:
    """``dataset[key]`` of every element matching ``selector``."""
    return list(
        _js(
            driver,
            "return [...document.querySelectorAll(arguments[0])].map(e => e.dataset[arguments[1]])",
            selector,
            key,
        )
    )


def _open_page(driver: Any, url: str, page: str) -> None:
    driver.get(url)
    _wait(
        driver, f"{page} page rendered", lambda: _js(driver, "return document.body.dataset.ready")
    )
    assert _js(driver, "return document.body.dataset.page") == page


def _shot(driver: Any, name: str) -> None:
    driver.save_screenshot(str(SCREENSHOTS / f"{name}.png"))


def _request(
    url: str,
    *,
    method: str = "GET",
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _session_cookie(driver: Any, node: NodeProcess) -> tuple[str, str]:
    port = node.url.rsplit(":", 1)[1].split("/")[0]
    for c in driver.get_cookies():
        if c["name"] == f"odf_console_{port}":
            return c["name"], c["value"]
    raise AssertionError(f"no console session cookie in {driver.get_cookies()}")


def _ws_handshake(base: str, headers: dict[str, str]) -> int:
    """The HTTP status of a WebSocket handshake to ``/ui/ws`` (101 = accepted)."""
    hdrs = {
        "Connection": "Upgrade",
        "Upgrade": "websocket",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        **headers,
    }
    import http.client

    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", "/ui/ws", headers=hdrs)
        return conn.getresponse().status
    finally:
        conn.close()


# ---- the tests (in order; they share the daemons and the browser)


def test_login_through_the_one_time_url(nodes: dict[str, NodeProcess], browser: Any) -> None:
    node = nodes["console"]
    url = _login_url(node)
    assert url.startswith(_base(node) + "/ui/login#")
    _open_page(browser, url, "overview")
    # The script rendered the node's live status into the page.
    node_id = node.call("node.status")["node_id"]
    status = browser.find_element("id", "status").text
    assert node_id in status
    assert browser.current_url == _base(node) + "/ui/"  # the token left the address bar
    _wait(
        browser,
        "live event stream",
        lambda: _js(browser, "return document.getElementById('live').dataset.state") == "open",
    )
    cookie = next(c for c in browser.get_cookies() if c["name"].startswith("odf_console_"))
    assert cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Strict"
    assert cookie["path"] == "/ui"
    # The event list holds the daemon's start, rendered by the script (not in the HTML source).
    kinds = _data(browser, "#events li", "kind")
    assert "daemon.start" in kinds
    assert b"daemon.start" not in _request(_base(node) + "/ui/")[1]
    headers = urllib.request.urlopen(_base(node) + "/ui/login", timeout=10).headers
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    _shot(browser, "01-overview")


def test_refusals(nodes: dict[str, NodeProcess], browser: Any, tmp_path: Path) -> None:
    node = nodes["console"]
    base = _base(node)
    own_origin = base
    json_headers = {"Content-Type": "application/json", "Origin": own_origin}
    call = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "node.status"}).encode()

    # Without the session cookie: pages, the API and the event stream are refused.
    status, body = _request(base + "/ui/rpc", method="POST", body=call, headers=json_headers)
    assert status == 401, body
    assert _request(base + "/ui/datasets")[0] == 401
    assert _ws_handshake(base, {"Origin": own_origin}) == 401

    # With the browser's session cookie the same call works (the refusal is the cookie's) ...
    name, value = _session_cookie(browser, node)
    with_cookie = {**json_headers, "Cookie": f"{name}={value}"}
    status, body = _request(base + "/ui/rpc", method="POST", body=call, headers=with_cookie)
    assert status == 200 and json.loads(body)["result"]["node_id"]
    assert _ws_handshake(base, {"Origin": own_origin, "Cookie": f"{name}={value}"}) == 101
    # ... but not from a foreign Origin, nor through a foreign Host (DNS rebinding) ...
    foreign = {**with_cookie, "Origin": "http://evil.example"}
    assert _request(base + "/ui/rpc", method="POST", body=call, headers=foreign)[0] == 403
    rebound = {**with_cookie, "Host": "evil.example"}
    assert _request(base + "/ui/rpc", method="POST", body=call, headers=rebound)[0] == 403
    assert (
        _ws_handshake(base, {"Origin": "http://evil.example", "Cookie": f"{name}={value}"}) == 403
    )
    # ... and a method the console does not offer is not reachable through it.
    create = json.dumps(
        {"jsonrpc": "2.0", "id": 2, "method": "dataset.pull", "params": {"url": "/etc"}}
    ).encode()
    status, body = _request(base + "/ui/rpc", method="POST", body=create, headers=with_cookie)
    assert json.loads(body)["error"]["code"] == -32601

    # A login token works once: the second use is refused, in the browser and over HTTP.
    url = _login_url(node)
    token = url.split("#", 1)[1]
    redeem = json.dumps({"token": token}).encode()
    assert (
        _request(base + "/ui/session", method="POST", body=redeem, headers=json_headers)[0] == 200
    )
    assert (
        _request(base + "/ui/session", method="POST", body=redeem, headers=json_headers)[0] == 401
    )
    browser.delete_all_cookies()
    browser.get(url)
    _wait(
        browser,
        "login refused",
        lambda: (
            _js(browser, "return document.getElementById('login-status').dataset.state")
            == "refused"
        ),
    )
    _shot(browser, "02-login-refused")
    browser.get(base + "/ui/datasets")
    assert _js(browser, "return document.getElementById('login-status') !== null")
    # A foreign page cannot redeem a token either.
    fresh = _login_url(node).split("#", 1)[1]
    evil = {"Content-Type": "application/json", "Origin": "http://evil.example"}
    body = json.dumps({"token": fresh}).encode()
    assert _request(base + "/ui/session", method="POST", body=body, headers=evil)[0] == 403
    # Log the browser in again for the next tests.
    _open_page(browser, _login_url(node), "overview")


def test_dataset_created_by_the_cli(
    nodes: dict[str, NodeProcess], browser: Any, tmp_path: Path
) -> None:
    node = nodes["console"]
    snap = tmp_path / "local.yaml"
    snap.write_text(LOCAL_SNAPSHOT)
    _cli(node, "dataset", "create", str(snap))
    csv = tmp_path / "v.csv"
    csv.write_text("event_time,value\n2021-01-01T00:00:00Z,7\n2021-01-02T00:00:00Z,8\n")
    _cli(node, "dataset", "ingest", "made-by-cli", str(csv))
    listed = {d["alias"]: d for d in node.call("dataset.list")}["made-by-cli"]
    did = listed["id"]
    _open_page(browser, _base(node) + "/ui/datasets", "datasets")
    row = f'tr[data-did="{did}"]'
    cells = _texts(browser, f"{row} td")
    assert cells[0] == "made-by-cli"
    assert cells[2] == "root" and cells[3] == "owned"
    assert listed["records"] == 2
    assert cells[5] == str(listed["blocks"]) and cells[6] == "2"  # blocks, records
    _shot(browser, "03-datasets")

    # Its page: the chain as kamu log shows it, the slice with offsets and hashes, the rows.
    browser.find_element("css selector", f"{row} td a").click()
    _wait(
        browser,
        "dataset page",
        lambda: (
            _js(browser, "return document.body.dataset.page") == "dataset"
            and _js(browser, "return document.body.dataset.ready")
        ),
    )
    chain = _texts(browser, "#chain pre.block")
    assert len(chain) == listed["blocks"]
    assert chain[0].startswith(f"Block #{listed['blocks'] - 1}: {listed['head']}")
    assert "kind: AddData" in chain[0]
    slices = _texts(browser, "#slices-table tbody tr")
    assert len(slices) == 1 and "0..1" in slices[0]
    last_column = _texts(browser, "#preview-table tbody tr td:last-child")
    assert last_column == ["7", "8"]
    # Verify from the page: the same use case as `dataset.verify`.
    browser.find_element("id", "verify-btn").click()
    _wait(
        browser, "verify result", lambda: "Verify: ok" in browser.find_element("id", "flash").text
    )
    _shot(browser, "04-dataset-local")


def _own_published(owner: NodeProcess) -> None:
    owner.wait_for(
        "publications",
        lambda: (
            not owner.call("work.list", state="pending")
            and not owner.call("work.list", state="claimed")
        ),
    )


def test_subscribe_from_the_page_turns_verified_live(
    nodes: dict[str, NodeProcess], browser: Any, tmp_path: Path
) -> None:
    owner, node = nodes["owner"], nodes["console"]
    ids = {c["alias"]: c["id"] for c in owner.call("dataset.create", snapshot_yaml=SNAPSHOTS)}
    csv = tmp_path / "c1.csv"
    csv.write_text(CSV1)
    owner.call("dataset.ingest", ref="cities", files=[str(csv)])
    head = owner.call("dataset.transform", ref="big-cities")["new_head"]
    _own_published(owner)
    der = ids["big-cities"]

    _open_page(browser, _base(node) + "/ui/datasets", "datasets")
    _js(browser, "window.__sameDocument = true")  # gone if the page reloads
    browser.find_element("id", "subscribe-did").send_keys(der)
    browser.find_element("id", "subscribe-btn").click()
    row = f'tr[data-did="{der}"]'
    _wait(
        browser,
        "followed row",
        lambda: _js(browser, f"return document.querySelector('{row}') !== null"),
    )
    outcome = (
        f"return document.querySelector('{row} td.verification [data-outcome]')?.dataset.outcome"
    )
    _wait(
        browser, "verified without reload", lambda: _js(browser, outcome) == "verified", timeout=420
    )
    assert _js(browser, "return window.__sameDocument === true")
    head_cell = _js(browser, f"return document.querySelector('{row} td:nth-child(5) code').title")
    assert head_cell == head
    # The input was pulled recursively and shows too.
    _wait(
        browser,
        "input row",
        lambda: _js(
            browser, f"return document.querySelector('tr[data-did=\"{ids['cities']}\"]') !== null"
        ),
    )
    _shot(browser, "05-datasets-verified")


def test_dispute_with_evidence_after_a_forged_block(
    nodes: dict[str, NodeProcess], browser: Any, tmp_path: Path
) -> None:
    owner, node = nodes["owner"], nodes["console"]
    der = {d["alias"]: d["id"] for d in owner.call("dataset.list")}["big-cities"]
    csv = tmp_path / "c2.csv"
    csv.write_text(CSV2)
    owner.call("dataset.ingest", ref="cities", files=[str(csv)])
    _own_published(owner)
    from node.engine_client import EngineClient

    with EngineClient(master="local[1]", idle_timeout=0) as engine:
        forged = forge_next_step(owner.home, "big-cities", tmp_path / "forge", engine)
    owner.call("dataset.publish", ref="big-cities")

    _open_page(browser, _base(node) + "/ui/dataset?id=" + der, "dataset")
    _js(browser, "window.__sameDocument = true")
    article = f'article.dispute[data-block="{forged}"]'
    _wait(
        browser,
        "dispute on the page",
        lambda: _js(browser, f"return document.querySelector('{article}') !== null"),
        timeout=420,
    )
    assert _js(browser, "return window.__sameDocument === true")
    kind = _js(browser, f"return document.querySelector('{article} .kind').textContent")
    assert kind == "replay_mismatch"
    differs = _data(browser, f"{article} tr.differs", "field")
    assert "logical_hash" in differs
    cells = _texts(browser, f"{article} tr[data-field=logical_hash] code")
    assert all(c.startswith("f9680c00120") for c in cells) and cells[0] != cells[1]
    own = node.call("disputes.list", did=der)[0]
    assert own["block"] == forged and own["own"]
    _wait(
        browser,
        "failed badge",
        lambda: (
            _js(browser, "return document.querySelector('h1 [data-outcome]').dataset.outcome")
            == "failed"
        ),
    )
    lineage = _data(browser, "#lineage a", "did")
    assert len(lineage) == 2
    _shot(browser, "06-dataset-dispute")


def test_peers_work_and_charts(nodes: dict[str, NodeProcess], browser: Any) -> None:
    node, owner = nodes["console"], nodes["owner"]
    base = _base(node)
    _open_page(browser, base + "/ui/peers", "peers")
    owner_peer = owner.call("node.status")["p2p"]["peer_id"]
    peers = _data(browser, "#peers-table tbody tr", "peer")
    assert owner_peer in peers
    _shot(browser, "07-peers")
    _open_page(browser, base + "/ui/work", "work")
    states = _data(browser, "#work-table tbody tr", "state")
    kinds = _texts(browser, "#work-table tbody tr td:nth-child(2)")
    assert "verify" in kinds and "done" in states
    _shot(browser, "08-work")
    _open_page(browser, base + "/ui/flows", "flows")
    assert _js(browser, "return !!document.querySelector('#flows-schedules')")
    assert _js(browser, "return !!document.querySelector('#flows-runs')")
    _open_page(browser, base + "/ui/", "overview")
    outcomes = _data(browser, "#chart-verify circle", "outcome")
    assert "verified" in outcomes and "failed" in outcomes
    _shot(browser, "09-overview-charts")
