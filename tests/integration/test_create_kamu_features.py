"""``dataset create`` accepts what kamu's ``add`` accepts (issue 41), through the CLI (no daemon).

The snapshots are written here, one per feature (not copies of kamu's files); the sweep over
kamu's own repository is ``tests/bench/kamu_contrib_sweep.py``.

* **Relative ``FilesGlob`` paths** (kamu's examples write ``path: data/orders-*.csv``) are kept
  in the block as written and resolved when pulled: against ``[ingest] files_root`` if set,
  else against the directory the snapshot file was in (recorded in ``info/snapshot-dir``;
  standard input: the working directory). ``..`` is followed, as kamu's glob follows it.
* **Account-qualified aliases** (kamu's multi-tenant ``alice/1pub1``): ``--account`` creates
  ``account/name``; inputs resolve as kamu's multi-tenant registry resolves them, names
  compared ignoring ASCII case; the input's alias stays as written, so its SQL view is
  ``"alice/…"`` (a DataFusion transform reads it).
* **Sources kamu checks only at pull** (an event time source the step does not support, a
  pattern that does not compile, an ``Mqtt`` step with a bad topic or port, ``Container``,
  ``EthereumLogs``, a URL scheme the node does not fetch) are accepted, and refused at pull
  with the reason, nothing committed; a derivative of them is accepted too.
* What kamu's ``add`` refuses is still refused (a ``Seed``, two nameless queries, missing
  inputs, a name in another account than the one created as).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from node.cli import app

pytestmark = pytest.mark.integration

CSV_READ = """\
      read:
        kind: Csv
        header: true
        schema: ["id BIGINT", "qty BIGINT"]
      merge:
        kind: Ledger
        primaryKey: [id]
"""


def run(home: Path, *args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> Any:
    """``odf-node ARGS --home HOME --json``: ``(exit code, JSON or the output text)``."""
    result = CliRunner().invoke(app, [*args, "--home", str(home), "--json"], env=env, input=stdin)
    text = result.output
    try:
        return result.exit_code, json.loads(text)
    except ValueError:
        return result.exit_code, text


def ok(home: Path, *args: str, **kw: Any) -> Any:
    code, out = run(home, *args, **kw)
    assert code == 0, out
    return out


def root_snapshot(name: str, fetch: str) -> str:
    return f"""\
kind: DatasetSnapshot
version: 1
content:
  name: {name}
  kind: Root
  metadata:
    - kind: SetPollingSource
      fetch:
{fetch}
{CSV_READ}"""


def glob_snapshot(name: str, path: str) -> str:
    return root_snapshot(name, f"        kind: FilesGlob\n        path: {path}")


def derivative(name: str, *inputs: str, query: str | None = None) -> str:
    refs = "".join(f"        - datasetRef: {i}\n" for i in inputs)
    sql = query or f'SELECT event_time, id, qty FROM "{inputs[0]}"'
    return f"""\
kind: DatasetSnapshot
version: 1
content:
  name: {name}
  kind: Derivative
  metadata:
    - kind: SetTransform
      inputs:
{refs}      transform:
        kind: Sql
        engine: datafusion
        query: '{sql}'
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def orders(directory: Path, name: str, *rows: tuple[int, int]) -> None:
    lines = "".join(f"{i},{q}\n" for i, q in rows)
    write(directory / name, "id,qty\n" + lines)


def ids(home: Path, alias: str) -> list[int]:
    out = ok(home, "dataset", "tail", alias, "-n", "100")
    column = out["columns"].index("id")
    return sorted(row[column] for row in out["rows"])


def events(home: Path, alias: str) -> list[dict[str, Any]]:
    blocks = ok(home, "dataset", "log", alias, "-o", "json")
    return [b["block"]["event"] for b in sorted(blocks, key=lambda b: b["block"]["sequenceNumber"])]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    ok(h, "init")
    return h


# ---- relative FilesGlob ------------------------------------------------------------------------


def test_relative_glob_is_kept_and_pulled_from_the_snapshot_directory(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    snap = write(project / "orders.yaml", glob_snapshot("shop.orders", "data/orders-*.csv"))
    orders(project / "data", "orders-001.csv", (1, 10), (2, 20))
    monkeypatch.chdir(tmp_path)  # neither the snapshot's directory nor the home

    ok(home, "dataset", "create", str(snap.relative_to(tmp_path)))
    (fetch,) = [e["fetch"] for e in events(home, "shop.orders") if e["kind"] == "SetPollingSource"]
    assert fetch["path"] == "data/orders-*.csv"  # stored as written, as kamu stores it
    (info,) = (home / "datasets").glob("*/info/snapshot-dir")
    assert info.read_text() == str(project)

    monkeypatch.chdir(home)  # a pull from anywhere reads the snapshot's directory
    assert ok(home, "dataset", "pull", "shop.orders")["records"] == 2
    orders(project / "data", "orders-002.csv", (3, 30))
    assert ok(home, "dataset", "pull", "shop.orders")["records"] == 1
    assert ids(home, "shop.orders") == [1, 2, 3]


def test_relative_glob_follows_dotdot_and_stdin_resolves_in_the_working_directory(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    orders(tmp_path / "inbox", "orders-001.csv", (7, 70))
    snap = write(tmp_path / "specs" / "o.yaml", glob_snapshot("up", "../inbox/orders-*.csv"))
    ok(home, "dataset", "create", str(snap))
    assert ok(home, "dataset", "pull", "up")["records"] == 1

    work = tmp_path / "work"
    orders(work / "in", "orders-001.csv", (8, 80), (9, 90))
    monkeypatch.chdir(work)
    ok(home, "dataset", "create", "-", stdin=glob_snapshot("piped", "in/orders-*.csv"))
    monkeypatch.chdir(tmp_path)
    assert ok(home, "dataset", "pull", "piped")["records"] == 2


def test_files_root_is_the_base_when_set(home: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    snap = write(project / "orders.yaml", glob_snapshot("shop.orders", "data/orders-*.csv"))
    orders(project / "data", "orders-001.csv", (1, 10))
    mounted = tmp_path / "mounted"
    orders(mounted / "data", "orders-001.csv", (5, 50), (6, 60), (7, 70))
    ok(home, "dataset", "create", str(snap))

    env = {"ODF_NODE_INGEST_FILES_ROOT": str(mounted)}
    assert ok(home, "dataset", "pull", "shop.orders", env=env)["records"] == 3
    assert ids(home, "shop.orders") == [5, 6, 7]

    code, out = run(
        home, "dataset", "pull", "shop.orders", env={"ODF_NODE_INGEST_FILES_ROOT": "rel"}
    )
    assert code != 0 and "files_root" in str(out) and "absolute" in str(out), out


def test_relative_glob_without_a_recorded_directory_names_files_root(tmp_path: Path) -> None:
    """Created through the RPC without ``snapshot_dir`` (a client that sends only the text):
    accepted; the pull says what to set."""
    import asyncio

    from coordinator.errors import SourceNotRunnable
    from node.compose import OfflineOptions, offline_application
    from node.home import NodeHome

    h = tmp_path / "home"
    ok(h, "init")
    snapshot = glob_snapshot("loose", "data/*.csv")
    with offline_application(NodeHome(h), OfflineOptions()) as application:
        asyncio.run(application.datasets.create(snapshot))
        with pytest.raises(SourceNotRunnable, match=r"\[ingest\] files_root"):
            asyncio.run(application.datasets.poll("loose"))
    assert not list((h / "datasets").glob("*/info/snapshot-dir"))


# ---- account-qualified aliases -----------------------------------------------------------------


def test_account_qualified_aliases_resolve_as_in_kamu_multi_tenant_workspaces(
    home: Path, tmp_path: Path
) -> None:
    alice, bob = tmp_path / "alice", tmp_path / "bob"
    orders(alice / "data", "orders-001.csv", (1, 10), (2, 20))
    write(alice / "orders.yaml", glob_snapshot("orders", "data/orders-*.csv"))
    write(alice / "own.yaml", glob_snapshot("own", "data/orders-*.csv"))
    # Created as alice: an unqualified name becomes alice/orders (kamu --account alice add).
    (created,) = ok(home, "dataset", "create", str(alice / "orders.yaml"), "--account", "alice")
    assert created["alias"] == "alice/orders"
    ok(home, "dataset", "create", str(alice / "own.yaml"))  # no account: the node's own "own"
    ok(home, "dataset", "pull", "alice/orders")

    # alice's derivative: "orders" resolves in alice's account first; "alice/own" finds the
    # node's own "own" for the account it is created as; names compare ignoring case.
    write(
        alice / "big.yaml",
        derivative(
            "big",
            "orders",
            "ALICE/Own",
            query="SELECT event_time, id, qty FROM orders WHERE qty > 10",
        ),
    )
    ok(home, "dataset", "create", str(alice / "big.yaml"), "--account", "alice")
    # bob's derivative names alice's dataset with its account, as kamu's examples do.
    write(bob / "mirror.yaml", derivative("mirror", "alice/orders"))
    ok(home, "dataset", "create", str(bob / "mirror.yaml"), "--account", "bob")

    dids = {r["alias"]: r["id"] for r in ok(home, "dataset", "list")}
    assert {"alice/orders", "alice/big", "bob/mirror", "own"} <= set(dids)
    (big,) = [e for e in events(home, "alice/big") if e["kind"] == "SetTransform"]
    assert big["inputs"] == [
        {"datasetRef": dids["alice/orders"], "alias": "orders"},
        {"datasetRef": dids["own"], "alias": "ALICE/Own"},
    ]
    (mirror,) = [e for e in events(home, "bob/mirror") if e["kind"] == "SetTransform"]
    assert mirror["inputs"] == [{"datasetRef": dids["alice/orders"], "alias": "alice/orders"}]

    # The input's alias is its view: a DataFusion transform reads "alice/orders".
    ok(home, "dataset", "transform", "bob/mirror")
    assert ids(home, "bob/mirror") == [1, 2]

    # What kamu refuses: a name in another account than the one created as; a name taken
    # (ignoring case); an input no account resolves (all named at once).
    write(bob / "steal.yaml", derivative("alice/steal", "alice/orders"))
    code, out = run(home, "dataset", "create", str(bob / "steal.yaml"), "--account", "bob")
    assert code != 0 and "account 'alice'" in str(out), out
    write(bob / "dup.yaml", derivative("Alice/Orders", "own"))
    code, out = run(home, "dataset", "create", str(bob / "dup.yaml"))
    assert code != 0 and "already exists" in str(out), out
    write(bob / "lost.yaml", derivative("lost", "orders", "carol/orders"))
    code, out = run(home, "dataset", "create", str(bob / "lost.yaml"), "--account", "bob")
    assert code != 0 and "orders, carol/orders" in str(out), out


# ---- sources kamu checks only when pulled --------------------------------------------------------

PULL_TIME = {
    "url-frompath": (
        "        kind: Url\n        url: file:///nowhere/a.csv\n"
        "        eventTime:\n          kind: FromPath\n          pattern: '(.*)'",
        "fromPath",
    ),
    "glob-frommetadata": (
        "        kind: FilesGlob\n        path: /nowhere/*.csv\n"
        "        eventTime:\n          kind: FromMetadata",
        "fromMetadata",
    ),
    "glob-bad-pattern": (
        "        kind: FilesGlob\n        path: /nowhere/*.csv\n"
        "        eventTime:\n          kind: FromPath\n          pattern: 'no-group'",
        "no group 1",
    ),
    "glob-by-event-time": (
        "        kind: FilesGlob\n        path: /nowhere/*.csv\n        order: ByEventTime",
        "byName",
    ),
    "mqtt-bad-topic": (
        "        kind: Mqtt\n        host: 127.0.0.1\n        port: 1883\n"
        "        topics:\n          - path: 'a/#/b'",
        "not a valid topic filter",
    ),
    "mqtt-port": (
        "        kind: Mqtt\n        host: 127.0.0.1\n        port: 70000\n"
        "        topics:\n          - path: a",
        "port 70000",
    ),
}
# Container, EthereumLogs and other URL schemes: accepted at create since 0b461a9; Container and
# ftp sources run (tests/integration/test_fetch_container.py, test_fetch_ftp.py).


def test_sources_kamu_checks_at_pull_are_accepted_and_refused_at_pull(
    home: Path, tmp_path: Path
) -> None:
    for name, (fetch, _) in PULL_TIME.items():
        ok(
            home,
            "dataset",
            "create",
            str(write(tmp_path / f"{name}.yaml", root_snapshot(name, fetch))),
        )
    # A derivative of such a root is accepted too (kamu-contrib has 8).
    ok(
        home,
        "dataset",
        "create",
        str(write(tmp_path / "d.yaml", derivative("of-mqtt", "mqtt-port"))),
    )

    for name, (_, reason) in PULL_TIME.items():
        before = len(events(home, name))
        code, out = run(home, "dataset", "pull", name)
        assert code != 0 and reason in str(out), (name, out)
        assert len(events(home, name)) == before, name


def test_what_kamu_add_refuses_is_still_refused(home: Path, tmp_path: Path) -> None:
    seed = """\
kind: DatasetSnapshot
version: 1
content:
  name: seeded
  kind: Root
  metadata:
    - kind: Seed
      datasetId: did:odf:fed012ed3150d001fb1fbdc48a5c14dfd10efa48f91fdf466d24b779c188b7553212f
      datasetKind: Root
"""
    code, out = run(home, "dataset", "create", str(write(tmp_path / "s.yaml", seed)))
    assert code != 0 and "Seed" in str(out), out

    ok(home, "dataset", "create", str(write(tmp_path / "r.yaml", glob_snapshot("r", "/x/*.csv"))))
    two = derivative("two", "r").replace(
        "        query: 'SELECT event_time, id, qty FROM \"r\"'\n",
        "        queries:\n          - query: SELECT 1\n          - query: SELECT 2\n",
    )
    code, out = run(home, "dataset", "create", str(write(tmp_path / "two.yaml", two)))
    assert code != 0 and "without an alias" in str(out), out
