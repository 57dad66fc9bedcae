"""A polling source's ``Container`` fetch step run by a container runtime (podman or docker).

What the container gets and what it gives back follow kamu-cli (kamu-cli,
``src/infra/core/src/services/ingest/fetch_service/container.rs``):

* the image, run with the step's ``command`` as its entry point and ``args`` after the image;
  its ``env`` entries (``ODF_BATCH_SIZE`` among them sets the batch size instead), then
  ``ODF_ETAG`` and ``ODF_LAST_MODIFIED`` (the previous source state, ``""`` when none),
  ``ODF_NEW_ETAG_PATH``, ``ODF_NEW_LAST_MODIFIED_PATH``, ``ODF_NEW_HAS_MORE_DATA_PATH`` (files
  under ``/opt/odf/out``, a directory of the node's mounted there) and ``ODF_BATCH_SIZE``
  (default 10,000: kamu's ``target_records_per_slice``);
* the data is what the container writes to standard output; standard error is kept for the
  error message; a non-zero exit fails the fetch;
* the new source state is the ``new-etag`` file's text, else ``new-last-modified`` (RFC 3339);
  the same state as before means up to date (and output with it is a protocol error); the
  ``new-has-more-data`` file asks for another round at once.

What a node adds (docs/ingest-polling.md, "Container"):

* the runtime is ``[ingest] container_runtime`` (``auto``: podman, else docker);
* **no network** for the container (``--network none``) unless ``[ingest] container_network``
  is true; an image that is not present is pulled only then (a node in ``loopback-only``
  isolation never reaches a registry), otherwise the fetch fails naming ``podman pull IMAGE``;
* a deadline (``[ingest] container_timeout_s``: the container is killed), a memory cap
  (``[ingest] container_memory_bytes``: the runtime's ``--memory``; inside an unprivileged user
  namespace, where cgroups cannot be written, a data-segment limit instead) and the output
  bounded by ``[ingest] max_fetch_bytes``;
* **inside an unprivileged user namespace** (``make run`` and the test suite run the node in
  ``unshare -rn``): podman runs in a mount namespace of its own, as a rootless podman, with its
  images under ``[ingest] container_storage`` (default ``<home>/containers``) and the settings
  that work there (runc, cgroupfs, no default ulimits) in a ``containers.conf`` written beside.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from coordinator.errors import FetchError, SourceNotRunnable

__all__ = [
    "BATCH_SIZE",
    "ContainerFetch",
    "ContainerOutcome",
    "ContainerRuntime",
    "find_runtime",
    "run_container",
]

BATCH_SIZE = 10_000
"""``ODF_BATCH_SIZE`` when the step sets none (kamu's ``target_records_per_slice``)."""
OUT_DIR = "/opt/odf/out"
_CONTAINERS_CONF = """\
# Written by odf-node for podman inside an unprivileged user namespace
# (node/transfer/container_fetch.py): no systemd, no cgroup writes, no raised ulimits.
[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""


@dataclass(frozen=True)
class ContainerRuntime:
    """How to invoke the runtime: its program, and for podman inside an unprivileged user
    namespace the storage and settings it needs there."""

    program: str
    kind: str
    """``podman`` or ``docker``."""
    storage: Path | None = None
    """Set: podman runs rootless-in-a-namespace with its images under this directory."""

    @property
    def runroot(self) -> Path:
        """podman's transient state (locks, sockets): a short path of its own in the temporary
        directory (podman refuses a run root longer than 50 characters), one per storage."""
        assert self.storage is not None
        digest = hashlib.sha256(str(self.storage).encode()).hexdigest()[:12]
        return Path(tempfile.gettempdir()) / f"odf-podman-{digest}"

    def command(self) -> list[str]:
        """The runtime's command line up to its subcommand."""
        if self.storage is None:
            return [self.program]
        return [
            self.program,
            "--root",
            str(self.storage / "storage"),
            "--runroot",
            str(self.runroot),
            "--storage-driver",
            "vfs",
        ]

    def environment(self) -> dict[str, str]:
        """The environment the runtime runs with."""
        env = dict(os.environ)
        if self.storage is not None:
            conf = self.storage / "containers.conf"
            if not conf.exists():
                self.storage.mkdir(parents=True, exist_ok=True)
                conf.write_text(_CONTAINERS_CONF)
            env["CONTAINERS_CONF"] = str(conf)
            # podman's own switch for "already inside the user namespace it would create".
            env["_CONTAINERS_USERNS_CONFIGURED"] = "done"
        return env

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` as run: in a mount namespace of its own when rootless-in-a-namespace (the
        container's ``/dev/shm`` is mounted by podman itself)."""
        if self.storage is None:
            return argv
        return ["unshare", "-m", "--propagation", "private", *argv]


def in_user_namespace() -> bool:
    """Whether this process runs in a user namespace that maps only part of the ids (the node
    under ``unshare -r``): ``/proc/self/uid_map`` is not the identity map of the host."""
    try:
        lines = Path("/proc/self/uid_map").read_text().split("\n")
    except OSError:
        return False
    first = lines[0].split()
    return not (
        len(first) == 3 and first[0] == "0" and first[1] == "0" and first[2] == "4294967295"
    )


def find_runtime(setting: str, storage: str, home: Path | None) -> ContainerRuntime:
    """The runtime ``[ingest] container_runtime`` names (``auto``: podman, else docker).

    Raises:
        SourceNotRunnable: no runtime found (naming the setting).
    """
    names = ("podman", "docker") if setting in ("", "auto") else (setting,)
    for name in names:
        program = shutil.which(name)
        if program is None:
            continue
        kind = "docker" if Path(program).name.startswith("docker") else "podman"
        rootless_ns = kind == "podman" and in_user_namespace()
        where = None
        if rootless_ns:
            where = Path(storage) if storage else (home / "containers" if home else None)
            if where is None:
                raise SourceNotRunnable(
                    "podman inside a user namespace needs a storage directory: set [ingest] "
                    "container_storage"
                )
        return ContainerRuntime(program, kind, where)
    raise SourceNotRunnable(
        f"a Container fetch step needs a container runtime: {' or '.join(names)} not found "
        "(install podman or docker, or set [ingest] container_runtime to its path); nothing "
        "was committed"
    )


@dataclass(frozen=True)
class ContainerFetch:
    """One run of a ``Container`` fetch step (its values already resolved)."""

    image: str
    command: tuple[str, ...] | None
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    prev_etag: str = ""
    prev_last_modified: str = ""
    network: bool = False
    may_pull: bool = False
    timeout_s: float = 600.0
    memory_bytes: int = 2 << 30
    max_bytes: int = 1 << 30


@dataclass(frozen=True)
class ContainerOutcome:
    """What a run gave: the output's size and the new state the container wrote."""

    size: int
    etag: str | None = None
    last_modified: str | None = None
    has_more: bool = False
    stderr_tail: str = ""
    seconds: float = 0.0
    argv: tuple[str, ...] = field(default=(), repr=False)


def run_container(
    runtime: ContainerRuntime, fetch: ContainerFetch, target: Path, workdir: Path
) -> ContainerOutcome:
    """Run the container once; its standard output becomes ``target``.

    Raises:
        FetchError: the image is missing, the container exited non-zero, ran past its deadline,
            wrote more than ``max_bytes``, or broke the protocol (a bad state file).
    """
    out = workdir / "out"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    env = runtime.environment()
    _ensure_image(runtime, fetch, env)
    name = f"odf-fetch-{uuid.uuid4().hex[:12]}"
    argv = runtime.wrap([*runtime.command(), "run", *_run_options(runtime, fetch, out, name)])
    stderr_path = workdir / "fetch.err.txt"
    t0 = time.monotonic()
    with open(target, "wb") as sink, open(stderr_path, "wb") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, env=env)
        copied, over = _copy(proc, sink, fetch.max_bytes, t0 + fetch.timeout_s)
        timed_out = False
        try:
            proc.wait(timeout=max(0.0, fetch.timeout_s - (time.monotonic() - t0)))
        except subprocess.TimeoutExpired:
            timed_out = True
        if timed_out or over:
            _kill(runtime, name, proc, env)
    tail = stderr_path.read_text(errors="replace")[-2000:].strip()
    if over:
        raise FetchError(
            f"container {fetch.image}: wrote more than {fetch.max_bytes} bytes ([ingest] "
            "max_fetch_bytes); it was stopped and nothing was kept"
        )
    if timed_out:
        raise FetchError(
            f"container {fetch.image}: still running after {fetch.timeout_s:g} s ([ingest] "
            "container_timeout_s); it was stopped and nothing was kept"
        )
    if proc.returncode != 0:
        raise FetchError(
            f"container {fetch.image} exited with code {proc.returncode}: "
            f"{tail[-800:] or '(no error output)'}"
        )
    return ContainerOutcome(
        copied,
        _read_state(out / "new-etag"),
        _read_state(out / "new-last-modified"),
        (out / "new-has-more-data").exists(),
        tail,
        round(time.monotonic() - t0, 3),
        tuple(argv),
    )


def _run_options(
    runtime: ContainerRuntime, fetch: ContainerFetch, out: Path, name: str
) -> list[str]:
    opts = ["--rm", "--name", name, "-v", f"{out}:{OUT_DIR}"]
    if not fetch.network:
        opts += ["--network", "none"]
    if runtime.storage is None:
        opts += ["--memory", str(fetch.memory_bytes)]
    else:
        # No cgroups to write in the namespace: the data segment (heap, anonymous maps) is what
        # a limit can bound there.
        opts += ["--ulimit", f"data={fetch.memory_bytes}:{fetch.memory_bytes}"]
    for key, value in fetch.env:
        opts += ["--env", f"{key}={value}"]
    if fetch.command is not None:
        opts += ["--entrypoint", json.dumps(list(fetch.command))]
    return [*opts, fetch.image, *fetch.args]


def _ensure_image(runtime: ContainerRuntime, fetch: ContainerFetch, env: dict[str, str]) -> None:
    exists = [*runtime.command(), "image", "inspect", fetch.image]
    if runtime.kind == "podman":
        exists = [*runtime.command(), "image", "exists", fetch.image]
    found = (
        subprocess.run(exists, check=False, env=env, capture_output=True, timeout=60).returncode
        == 0
    )
    if found:
        return
    if not fetch.may_pull:
        raise FetchError(
            f"container image {fetch.image} is not present and this node does not pull images "
            f"(no network for containers: [ingest] container_network, or network.isolation "
            f"'loopback-only'): `{runtime.kind} pull {fetch.image}` (or load it) first; nothing "
            "was committed"
        )
    pulled = subprocess.run(
        [*runtime.command(), "pull", fetch.image],
        check=False,
        env=env,
        capture_output=True,
        timeout=fetch.timeout_s,
    )
    if pulled.returncode != 0:
        raise FetchError(
            f"container image {fetch.image} could not be pulled: "
            f"{pulled.stderr.decode(errors='replace')[-500:].strip()}"
        )


def _copy(
    proc: subprocess.Popen[bytes], sink: BinaryIO, max_bytes: int, deadline: float
) -> tuple[int, bool]:
    """Copy the container's output to ``sink`` until it ends, passes ``max_bytes`` (True) or
    the ``deadline`` (monotonic time) passes; the bytes copied."""
    state = {"total": 0, "over": False}
    done = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        while True:
            block = proc.stdout.read(1 << 16)
            if not block:
                break
            state["total"] += len(block)
            if state["total"] > max_bytes:
                state["over"] = True
                break
            sink.write(block)
        done.set()

    threading.Thread(target=pump, daemon=True).start()
    done.wait(max(0.0, deadline - time.monotonic()))
    return state["total"], bool(state["over"])


def _kill(
    runtime: ContainerRuntime, name: str, proc: subprocess.Popen[bytes], env: dict[str, str]
) -> None:
    with contextlib.suppress(Exception):
        subprocess.run(
            runtime.wrap([*runtime.command(), "kill", name]),
            check=False,
            env=env,
            capture_output=True,
            timeout=30,
        )
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    with contextlib.suppress(Exception):
        proc.wait(timeout=30)


def _read_state(path: Path) -> str | None:
    if not path.exists():
        return None
    return path.read_text(errors="replace").strip()
