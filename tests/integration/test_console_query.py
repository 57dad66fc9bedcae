"""The console's query page, a dataset's tail and the event sentences, in headless Chromium.

One real daemon (IPFS off) owns ``cities``, made and filled with the CLI (25 rows), so its head
is readable (owned). The browser logs in through ``odf-node ui``'s one-time URL and then: runs
SQL on the query page (Ctrl+Enter) and pages through the answer, sees who stands behind each
input, gets the signed commitment; sees a refused query's error; sees the last rows of the
dataset on its page (``data.tail``); and reads the overview's events as sentences, with the
JSON only behind a toggle. Screenshots go to ``build/console-screenshots/`` (git-ignored).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from browser import SCREENSHOTS, start_chromium
from daemon_harness import BIG_CITIES_DF_SNAPSHOTS, CITIES_SNAPSHOT, ROOT, NodeProcess
from netns import require_loopback_only

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

ROWS = 25
DEADLINE_S = 3.0
# 25^7 rows to add up (a count(*) would be answered from the row counts without running).
EXPLODE = (
    "select sum("
    + " + ".join(f"t{i}.population" for i in range(7))
    + ") from "
    + ", ".join(f'"cities" t{i}' for i in range(7))
)
CSV = "event_time,city,population\n" + "".join(
    f"2020-01-{i + 1:02d}T00:00:00Z,city-{i:02d},{(i + 1) * 100}\n" for i in range(ROWS)
)


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


def _node_id(home: Path) -> str:
    """A node key that exists but never runs: an attester that never attests."""
    out = subprocess.run(
        [sys.executable, "-m", "node.cli", "init", "--json", "--home", str(home)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return str(json.loads(out)["node_id"])


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    require_loopback_only()
    base = tmp_path_factory.mktemp("console-query")
    # A light node whose quorum (2 attesters that never run) is never met: a dataset it follows
    # stays untrusted, and only the untrusted box reads it. Its own dataset is readable.
    silent = [_node_id(base / f"silent{i}") for i in range(2)]
    config = {
        "ipfs": {"mode": "none"},
        "query": {"deadline_s": DEADLINE_S},
        "pipeline": {"replay": False},
        "trust": {"policy": "quorum", "k": 2, "trusted_attesters": silent},
    }
    proc = NodeProcess(base / "q", "q", config=config)
    try:
        proc.init()
        proc.launch()
        proc.wait_ready()
        snap = base / "cities.yaml"
        snap.write_text(CITIES_SNAPSHOT.removesuffix("---\n"))
        _cli(proc, "dataset", "create", str(snap))
        csv = base / "cities.csv"
        csv.write_text(CSV)
        _cli(proc, "dataset", "ingest", "cities", str(csv))
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def followed(node: NodeProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An owner's derivative ``big-towns`` that the console's node pulled and cannot trust."""
    base = tmp_path_factory.mktemp("owner")
    owner = NodeProcess(base / "owner", "owner", config={"ipfs": {"mode": "none"}})
    try:
        owner.init()
        owner.launch()
        owner.wait_ready()
        snapshots = BIG_CITIES_DF_SNAPSHOTS.replace("cities", "towns")
        created = owner.call("dataset.create", snapshot_yaml=snapshots)
        csv = base / "towns.csv"
        csv.write_text(CSV)
        owner.call("dataset.ingest", ref="towns", files=[str(csv)])
        head = owner.call("dataset.transform", ref="big-towns")["new_head"]
        did = {c["alias"]: c["id"] for c in created}["big-towns"]
        owner.wait_for(
            "publications",
            lambda: (
                not owner.call("work.list", state="pending")
                and not owner.call("work.list", state="claimed")
            ),
        )
        node.call("peers.connect", multiaddr=owner.call("node.status")["p2p"]["listen_addrs"][0])
        node.call("subscriptions.add", did=did, alias="big-towns")
        node.wait_for(
            "big-towns pulled",
            lambda: any(d["id"] == did and d["head"] == head for d in node.call("dataset.list")),
            timeout=120,
        )
        yield did
    finally:
        owner.stop()


@pytest.fixture(scope="module")
def downloads(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("downloads")


@pytest.fixture(scope="module")
def browser(
    node: NodeProcess, downloads: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    driver = start_chromium(tmp_path_factory.mktemp("chromium-profile"))
    driver.set_page_load_timeout(30)
    # The page's downloads land here (headless Chromium otherwise drops them).
    driver.execute_cdp_cmd(
        "Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)}
    )
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    try:
        url = json.loads(_cli(node, "ui", "--json"))["url"]
        _open(driver, url, "overview")
        yield driver
    finally:
        driver.quit()


def _base(node: NodeProcess) -> str:
    return node.url.removesuffix("/rpc")


def _js(driver: Any, script: str, *args: Any) -> Any:
    return driver.execute_script(script, *args)


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
    driver.save_screenshot(str(SCREENSHOTS / f"FAILED-{what.replace(' ', '-')}.png"))
    raise AssertionError(f"timed out waiting for {what} (last error: {last!r})")


def _texts(driver: Any, selector: str) -> list[str]:
    return list(
        _js(
            driver,
            "return [...document.querySelectorAll(arguments[0])].map(e => e.textContent)",
            selector,
        )
    )


def _ready(driver: Any) -> int:
    return int(_js(driver, "return Number(document.body.dataset.ready || 0)"))


def _open(driver: Any, url: str, page: str) -> None:
    driver.get(url)
    _wait(driver, f"{page} page rendered", lambda: _ready(driver))
    assert _js(driver, "return document.body.dataset.page") == page


def _run(driver: Any, sql: str) -> None:
    """Type ``sql`` into the box and press Ctrl+Enter; wait for the answer or the error."""
    from selenium.webdriver.common.keys import Keys

    before = _ready(driver)
    box = driver.find_element("id", "sql")
    box.clear()
    box.send_keys(sql)
    box.send_keys(Keys.CONTROL, Keys.ENTER)
    _wait(driver, "query answered", lambda: _ready(driver) > before, timeout=60)


def _click(driver: Any, element_id: str) -> None:
    before = _ready(driver)
    driver.find_element("id", element_id).click()
    _wait(driver, f"{element_id} answered", lambda: _ready(driver) > before, timeout=60)


def _downloaded(driver: Any, path: Path) -> str:
    """The text of a file the page downloaded, once Chromium finished writing it."""
    _wait(driver, f"download of {path.name}", lambda: path.is_file() and path.stat().st_size)
    return path.read_text()


def _first_column(driver: Any, table: str) -> list[str]:
    return _texts(driver, f"#{table} tbody tr td:first-child")


def test_query_page_runs_pages_and_names_its_inputs(
    node: NodeProcess, browser: Any, downloads: Path
) -> None:
    did = {d["alias"]: d for d in node.call("dataset.list")}["cities"]["id"]
    _open(browser, _base(node) + "/ui/query", "query")
    # The readable tables are listed, each with its trust.
    assert '"cities"' in _texts(browser, "#query-tables li button")
    browser.find_element("css selector", "#page-size option[value='10']").click()
    _run(browser, 'select city, population from "cities" order by population')
    assert browser.find_element("id", "query-error").is_displayed() is False
    assert _texts(browser, "#query-rows thead th") == ["city", "population"]
    assert _first_column(browser, "query-rows") == [f"city-{i:02d}" for i in range(10)]
    assert "Rows 1–10" in browser.find_element("id", "query-status").text
    assert browser.find_element("id", "prev-btn").is_enabled() is False
    # The input behind the answer: the dataset at its head, owned by this node.
    head = node.call("console.dataset", ref="cities")["head"]
    inputs = browser.find_elements("css selector", "#query-inputs tbody tr")
    assert len(inputs) == 1
    assert inputs[0].get_attribute("data-did") == did
    assert inputs[0].get_attribute("data-trust") == "owned"
    assert (
        browser.find_element("css selector", "#query-inputs a.block").get_attribute("title") == head
    )
    browser.save_screenshot(str(SCREENSHOTS / "20-query.png"))

    # Paging: 25 rows in pages of 10.
    _click(browser, "next-btn")
    assert _first_column(browser, "query-rows") == [f"city-{i:02d}" for i in range(10, 20)]
    _click(browser, "next-btn")
    assert _first_column(browser, "query-rows") == [f"city-{i:02d}" for i in range(20, 25)]
    assert browser.find_element("id", "next-btn").is_enabled() is False
    _click(browser, "prev-btn")
    assert _first_column(browser, "query-rows")[0] == "city-10"

    # Downloads of the page shown (rows 11-20): CSV, JSON, and its signed commitment (kamu's
    # /query answer with its proof), which `odf-node query verify` reproduces and accepts.
    browser.find_element("id", "download-csv").click()
    lines = _downloaded(browser, downloads / "query.csv").splitlines()
    assert lines[0] == "city,population"
    assert lines[1:] == [f"city-{i:02d},{(i + 1) * 100}" for i in range(10, 20)]
    browser.find_element("id", "download-json").click()
    answer = json.loads(_downloaded(browser, downloads / "query.json"))
    assert answer["rows"][0] == ["city-10", 1100] and answer["inputs"][0]["did"] == did
    browser.find_element("id", "download-proof").click()
    proof = json.loads(_downloaded(browser, downloads / "query-commitment.json"))
    assert proof["output"]["data"][0] == {"city": "city-10", "population": 1100}
    assert proof["input"]["skip"] == 10 and "commitment" in proof
    verified = json.loads(
        _cli(node, "query", "verify", str(downloads / "query-commitment.json"), "--json")
    )
    assert verified["ok"] is True
    # CSV quoting of the fields that need it.
    csv = _js(browser, "return toCsv({columns: ['a', 'b'], rows: [['x,y', null], ['q\"', 2]]})")
    assert csv == 'a,b\r\n"x,y",\r\n"q""",2\r\n'


def test_refused_query_shows_the_error(node: NodeProcess, browser: Any) -> None:
    _open(browser, _base(node) + "/ui/query", "query")
    _run(browser, 'select * from "no-such-table"')
    error = browser.find_element("id", "query-error")
    assert error.is_displayed()
    assert "no-such-table" in error.text and "cities" in error.text  # it lists the readable
    assert _texts(browser, "#query-rows tbody tr") == []
    # The sandbox refuses a file read, and the page says so instead of showing rows.
    _run(browser, "select * from read_csv('/etc/passwd')")
    error = browser.find_element("id", "query-error")
    assert error.is_displayed() and error.text
    assert "root:" not in browser.find_element("id", "main").text
    # A query past its deadline is stopped, and the page names the setting.
    t0 = time.monotonic()
    _run(browser, EXPLODE)
    assert time.monotonic() - t0 < DEADLINE_S + 10
    error = browser.find_element("id", "query-error")
    assert error.is_displayed() and "[query] deadline_s" in error.text, error.text
    browser.save_screenshot(str(SCREENSHOTS / "21-query-refused.png"))


def test_tail_on_the_dataset_page(node: NodeProcess, browser: Any) -> None:
    did = {d["alias"]: d for d in node.call("dataset.list")}["cities"]["id"]
    _open(browser, _base(node) + "/ui/dataset?id=" + did, "dataset")
    _wait(browser, "tail", lambda: len(_texts(browser, "#tail-table tbody tr")) == 10)
    headers = _texts(browser, "#tail-table thead th")
    col = headers.index("city")
    cities = _texts(browser, f"#tail-table tbody tr td:nth-child({col + 1})")
    assert cities == [f"city-{i:02d}" for i in range(ROWS - 10, ROWS)]
    assert "owned" in browser.find_element("id", "tail-note").text
    browser.find_element("css selector", "#tail-n option[value='20']").click()
    _wait(browser, "tail of 20", lambda: len(_texts(browser, "#tail-table tbody tr")) == 20)
    _js(browser, "document.getElementById('tail').scrollIntoView()")
    browser.save_screenshot(str(SCREENSHOTS / "22-dataset-tail.png"))


def test_events_read_as_sentences(node: NodeProcess, browser: Any) -> None:
    _open(browser, _base(node) + "/ui/", "overview")
    items = browser.find_elements("css selector", "#events li")
    kinds = [li.get_attribute("data-kind") for li in items]
    assert {"daemon.start", "dataset.create", "dataset.ingest"} <= set(kinds)
    texts = {li.get_attribute("data-kind"): li.text for li in reversed(items)}
    assert "The node started" in texts["daemon.start"]
    assert "Created dataset cities" in texts["dataset.create"]
    assert f"Ingested {ROWS} records into cities" in texts["dataset.ingest"]
    # No raw JSON on the page unless asked for; the dataset is a link.
    assert not [t for t in texts.values() if '{"' in t]
    create = items[kinds.index("dataset.create")]
    assert (
        create.find_element("css selector", ".sentence a")
        .get_attribute("href")
        .startswith(_base(node) + "/ui/dataset?id=did%3Aodf%3A")
    )
    create.find_element("css selector", "details.event-json summary").click()
    assert '"alias":"cities"' in create.text
    browser.save_screenshot(str(SCREENSHOTS / "23-events.png"))


def test_untrusted_head_only_when_asked(node: NodeProcess, browser: Any, followed: str) -> None:
    _open(browser, _base(node) + "/ui/query", "query")
    sql = 'select city, pop2 from "big-towns" order by pop2'
    _run(browser, sql)
    error = browser.find_element("id", "query-error")
    tables = {t["name"]: t["trust"] for t in node.call("data.tables", untrusted=True)}
    assert error.is_displayed() and "big-towns" in error.text, tables
    assert _texts(browser, "#query-rows tbody tr") == []
    # Ticked: the rows, and the input marked untrusted.
    browser.find_element("id", "untrusted").click()
    _run(browser, sql)
    assert browser.find_element("id", "query-error").is_displayed() is False
    cities = _first_column(browser, "query-rows")
    assert cities == [f"city-{i:02d}" for i in range(1, ROWS)]  # population > 100
    [row] = browser.find_elements("css selector", "#query-inputs tbody tr")
    assert row.get_attribute("data-did") == followed
    assert row.get_attribute("data-trust") == "untrusted"
    browser.save_screenshot(str(SCREENSHOTS / "24-query-untrusted.png"))

    # The tail on its page: refused until the box is ticked.
    _open(browser, _base(node) + "/ui/dataset?id=" + followed, "dataset")
    _wait(browser, "tail refused", lambda: browser.find_element("id", "tail-error").text)
    # Centred first: scrolled only to the window's bottom edge, the fixed footer covers it.
    _js(browser, "document.getElementById('tail-untrusted').scrollIntoView({block: 'center'})")
    browser.find_element("id", "tail-untrusted").click()
    _wait(browser, "untrusted tail", lambda: len(_texts(browser, "#tail-table tbody tr")) == 10)
    assert "untrusted" in browser.find_element("id", "tail-note").text


def test_every_logged_event_kind_has_a_sentence() -> None:
    """Each kind the node logs with a literal name has its own sentence in console.js (the
    computed ones, ``verify.<outcome>`` and ``<work kind>.error``, are matched by pattern)."""
    import re

    logged: set[str] = set()
    for path in (ROOT / "node").rglob("*.py"):
        text = path.read_text()
        logged |= set(re.findall(r'(?:log_event|_log)\(\s*"([a-z_.]+)"', text))
        logged |= set(re.findall(r'_log\(lambda: self\._log\("([a-z_.]+)"', text))
    script = (ROOT / "node" / "console" / "static" / "console.js").read_text()
    block = script[script.index("const SENTENCES = {") : script.index("const VERIFY_OUTCOMES")]
    sentences = set(re.findall(r'^  "([a-z_.]+)":', block, re.MULTILINE))
    logged.discard("tick")  # node/state/bench.py's synthetic events
    logged = {k for k in logged if not k.endswith(".")}  # "verify." + outcome: by pattern
    assert len(logged) > 30, logged
    assert logged <= sentences, sorted(logged - sentences)
