"""``Container`` polling sources run by a real podman (Debian's podman and runc; the image is
built here from Debian's ``busybox-static`` with ``podman import``, no registry), through
``odf-node dataset pull`` and a daemon's schedule (node/transfer/container_fetch.py,
docs/ingest-polling.md, "Container").

The suite runs in an unprivileged user namespace (``unshare -rn``): podman runs there as the
node runs it, rootless in a mount namespace of its own, its images under ``[ingest]
container_storage`` (a directory this module shares with the node).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_harness import NodeProcess
from netns import require_loopback_only
from polling_cli import head_of, new_home, pull, run

from node.transfer.container_fetch import find_runtime

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

IMAGE = "localhost/odf-busybox:test"
APPLETS = ("sh", "echo", "cat", "printf", "sleep", "touch", "test", "[", "env", "true")

# Two rounds then up to date, as a real source would: no state -> row 1, etag v1 and "more
# data"; v1 -> row 2, etag v2; v2 -> the same state and no output. Each row shows the variables
# the container was given.
SCRIPT = r"""
row() { printf '{"n":%s,"etag":"%s","batch":"%s","greet":"%s"}\n' \
  "$1" "$ODF_ETAG" "$ODF_BATCH_SIZE" "$GREETING"; }
case "$ODF_ETAG" in
  "") row 1; printf v1 > "$ODF_NEW_ETAG_PATH"; touch "$ODF_NEW_HAS_MORE_DATA_PATH" ;;
  v1) row 2; printf v2 > "$ODF_NEW_ETAG_PATH" ;;
  *) printf '%s' "$ODF_ETAG" > "$ODF_NEW_ETAG_PATH" ;;
esac
"""


@pytest.fixture(scope="module")
def storage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """podman's storage with the busybox image imported (shared with the nodes)."""
    require_loopback_only()
    busybox = shutil.which("busybox") or "/bin/busybox"
    if shutil.which("podman") is None or not Path(busybox).exists():
        pytest.fail("podman and busybox-static are needed: `make test-deps` installs them")
    folder = tmp_path_factory.mktemp("containers")
    tar_path = folder / "busybox.tar"
    with tarfile.open(tar_path, "w") as tar:
        info = tar.gettarinfo(busybox, "bin/busybox")
        with open(busybox, "rb") as f:
            tar.addfile(info, f)
        for name in APPLETS:
            link = tarfile.TarInfo(f"bin/{name}")
            link.type = tarfile.SYMTYPE
            link.linkname = "busybox"
            tar.addfile(link)
    runtime = find_runtime("auto", str(folder / "store"), None)
    env = runtime.environment()
    done = subprocess.run(
        [*runtime.command(), "import", str(tar_path), IMAGE],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    yield folder / "store"


def snapshot(name: str, image: str, script: str) -> str:
    return f"""\
kind: DatasetSnapshot
version: 1
content:
  name: {name}
  kind: Root
  metadata:
    - kind: SetPollingSource
      fetch:
        kind: Container
        image: {image}
        command: [/bin/sh, -c]
        args: [{json.dumps(script)}]
        env:
          - name: GREETING
            value: "hello ${{{{ env.ODF_TEST_NAME }}}}"
      read:
        kind: NdJson
        schema: ["n BIGINT", "etag STRING", "batch STRING", "greet STRING"]
      merge:
        kind: Ledger
        primaryKey: [n]
"""


def create(home: Path, tmp: Path, name: str, script: str, image: str = IMAGE) -> None:
    path = tmp / f"{name}.yaml"
    path.write_text(snapshot(name, image, script))
    code, text = run(home, "dataset", "create", str(path))
    assert code == 0, text


@pytest.fixture
def env(storage: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ODF_NODE_INGEST_CONTAINER_STORAGE", str(storage))
    monkeypatch.setenv("ODF_TEST_NAME", "odf")
    return storage


def test_a_container_source_ingests_rounds_then_is_up_to_date(tmp_path: Path, env: Path) -> None:
    home = new_home(tmp_path / "home")
    create(home, tmp_path, "boxed", SCRIPT)
    code, out = pull(home, "boxed")
    assert code == 0 and isinstance(out, dict), out
    assert out["records"] == 2 and out["source_state"] == {"kind": "odf/etag", "value": "v2"}
    code, text = run(home, "dataset", "tail", "boxed", "-n", "5", "--json")
    assert code == 0, text
    tail = json.loads(text)
    rows = sorted(
        (dict(zip(tail["columns"], r, strict=True)) for r in tail["rows"]), key=lambda r: r["n"]
    )
    # The ODF_* variables kamu passes, and the step's env with its template resolved.
    assert [(r["n"], r["etag"], r["batch"], r["greet"]) for r in rows] == [
        (1, "", "10000", "hello odf"),
        (2, "v1", "10000", "hello odf"),
    ]
    head = head_of(home, "boxed")
    code, out = pull(home, "boxed")
    assert code == 0 and isinstance(out, dict)
    assert out["comparison"] == "equal" and out["new_blocks"] == 0
    assert head_of(home, "boxed") == head


def test_bad_container_sources_commit_nothing_and_say_why(
    tmp_path: Path, env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = new_home(tmp_path / "home")

    def refused(name: str, script: str, *words: str, image: str = IMAGE) -> None:
        create(home, tmp_path, name, script, image)
        head = head_of(home, name)
        code, text = pull(home, name)
        assert code == 1, text
        for w in words:
            assert w in str(text), (w, text)
        assert head_of(home, name) == head

    refused("fails", "echo broken input >&2; exit 3", "exited with code 3", "broken input")
    refused("noimage", "true", "is not present", "podman pull", image="localhost/nope:1")
    monkeypatch.setenv("ODF_NODE_INGEST_CONTAINER_TIMEOUT_S", "2")
    refused("slow", "sleep 30", "container_timeout_s")
    monkeypatch.setenv("ODF_NODE_INGEST_CONTAINER_RUNTIME", "no-such-runtime")
    refused("noruntime", "true", "container_runtime", "no-such-runtime")


def test_a_daemon_schedule_runs_a_container_source(tmp_path: Path, storage: Path) -> None:
    node = NodeProcess(
        tmp_path / "node",
        "containers",
        config={
            "ipfs": {"mode": "none"},
            "flows": {"tick_s": 0.2},
            "ingest": {"container_storage": str(storage)},
        },
        env={"ODF_TEST_NAME": "daemon"},
    )
    node.init()
    node.launch()
    try:
        node.wait_ready()
        node.call("dataset.create", snapshot_yaml=snapshot("boxed", IMAGE, SCRIPT))
        node.call("dataset.schedule", ref="boxed", every="1s")

        def records() -> int | None:
            (row,) = [r for r in node.call("dataset.list") if r["alias"] == "boxed"]
            return int(row["records"]) or None

        assert node.wait_for("the scheduled container run", lambda: records() == 2 or None)
    finally:
        node.stop()
