"""Start and stop an embedded js-ipfs daemon (``js/``, installed by ``npm ci``).

The daemon gets its own repo directory and random loopback ports, and a config that keeps it on
the loopback interface: empty bootstrap, no MDNS / webRTCStar, routing ``none`` (no DHT), no
delegates, NAT port mapping off, every address on ``127.0.0.1``, and ``--enable-preload=false``.
Only the process this object started is ever signalled, by its PID.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from node.ipfs.client import IpfsError
from node.lifeline import Lifeline
from p2p.netguard import assert_loopback_only


class IpfsStartError(IpfsError):
    """The embedded IPFS node could not be started; the message says what to change."""


# js-ipfs needs ~10-20 s to start on an idle 2-core machine and over 60 s under heavy load
# (measured in a full CI run next to three daemons and their JVMs); waiting longer is harmless.
_READY_TIMEOUT_S = 180.0


def js_dir() -> Path:
    """The npm project holding js-ipfs (``<checkout>/js``, or ``$ODF_NODE_JS_DIR``)."""
    env = os.environ.get("ODF_NODE_JS_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "js"


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def loopback_config(
    config: dict[str, Any],
    api: int,
    gateway: int,
    rpc: int,
    swarm: int,
    *,
    swarm_host: str = "127.0.0.1",
    announce: tuple[str, ...] = (),
) -> None:
    """Rewrite a js-ipfs config in place: API, gateway and RPC on 127.0.0.1, the swarm on
    ``swarm_host`` (127.0.0.1 unless the node runs in open mode), announcing ``announce``."""
    config.setdefault("Addresses", {}).update(
        API=f"/ip4/127.0.0.1/tcp/{api}",
        Gateway=f"/ip4/127.0.0.1/tcp/{gateway}",
        RPC=f"/ip4/127.0.0.1/tcp/{rpc}",
        Swarm=[f"/ip4/{swarm_host}/tcp/{swarm}"],
        Delegates=[],
        Announce=list(announce),
        NoAnnounce=[],
    )
    config["Bootstrap"] = []
    config["Discovery"] = {
        "MDNS": {"Enabled": False, "Interval": 10},
        "webRTCStar": {"Enabled": False},
    }
    config["Routing"] = {"Type": "none"}
    config.setdefault("Swarm", {})["DisableNatPortMap"] = True
    config["Pubsub"] = {"Router": "gossipsub", "Enabled": True}


@dataclass
class EmbeddedIpfs:
    """One js-ipfs daemon with its own repo.

    Use :meth:`start` / :meth:`stop` (or ``with``). ``require_isolation`` (default True) makes
    :meth:`start` refuse to run unless ``lo`` is the only network interface.
    """

    repo: Path
    js: Path = field(default_factory=js_dir)
    require_isolation: bool = True
    #: Swarm listener (open mode: the host's address and, behind NAT, a fixed forwarded port).
    swarm_host: str = "127.0.0.1"
    fixed_swarm_port: int = 0
    #: Multiaddrs (without /p2p/) the node announces instead of its listen address.
    announce: tuple[str, ...] = ()
    api_port: int = 0
    gateway_port: int = 0
    swarm_port: int = 0
    #: ``jsipfs daemon`` flags beyond ``--enable-preload=false``. Measured with js-ipfs 0.66.1
    #: and ``Routing.Type none`` (no DHT): by default a node resolves the IPNS names it
    #: published itself (from its datastore) and no others ("record ... was not found in the
    #: network"). With ``("--enable-namesys-pubsub",)`` a node resolves a foreign name after
    #: its first ``name/resolve`` (which fails and subscribes to the name's topic) and the
    #: owner's next ``name/publish`` over a swarm connection -- but then a node without peers
    #: cannot resolve even its own names, so it is not the default.
    daemon_args: tuple[str, ...] = ()
    process: subprocess.Popen[bytes] | None = None
    _lifeline: Lifeline | None = field(default=None, repr=False)

    @property
    def api_url(self) -> str:
        """Base URL of the RPC API (``http://127.0.0.1:PORT``)."""
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def gateway_url(self) -> str:
        """Base URL of the read-only gateway."""
        return f"http://127.0.0.1:{self.gateway_port}"

    @property
    def swarm_addr(self) -> str:
        """The swarm multiaddr without the peer id."""
        return f"/ip4/{self.swarm_host}/tcp/{self.swarm_port}"

    @property
    def log_path(self) -> Path:
        """Where the daemon's stdout/stderr go."""
        return self.repo.with_name(self.repo.name + ".log")

    def _bin(self) -> Path:
        return self.js / "node_modules" / ".bin" / "jsipfs"

    def _env(self) -> dict[str, str]:
        return {**os.environ, "IPFS_PATH": str(self.repo)}

    def init(self) -> None:
        """Create the repo (if missing) and write a loopback-only config with fresh ports."""
        if not (self.repo / "config").exists():
            self.repo.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(
                [str(self._bin()), "init", "--empty-repo", "--profile", "test"],
                env=self._env(),
                check=True,
                capture_output=True,
                timeout=120,
            )
        api, gateway, rpc, swarm = _free_ports(4)
        if self.fixed_swarm_port:
            swarm = self.fixed_swarm_port
        cfg_path = self.repo / "config"
        cfg = json.loads(cfg_path.read_text())
        loopback_config(
            cfg, api, gateway, rpc, swarm, swarm_host=self.swarm_host, announce=self.announce
        )
        cfg_path.write_text(json.dumps(cfg, indent=2))
        self.api_port, self.gateway_port, self.swarm_port = api, gateway, swarm

    def start(self, timeout: float = _READY_TIMEOUT_S) -> None:
        """Start the daemon and wait until ``/api/v0/id`` answers.

        Raises:
            NetworkNotIsolated: a non-loopback interface exists (and isolation is required).
            RuntimeError: the daemon exited or did not become ready in time.
        """
        self.launch()
        self.wait_ready(timeout)

    def launch(self) -> None:
        """Start the daemon process without waiting (see :meth:`wait_ready`)."""
        if self.require_isolation:
            assert_loopback_only("the embedded IPFS node")
        if self.process is not None:
            raise RuntimeError("daemon already started")
        if not self._bin().exists():
            raise IpfsStartError(
                f"js-ipfs is not installed in {self.js}: run `make setup` (or `npm ci` in js/), "
                "or set [ipfs] mode = \"external\" (a kubo RPC URL) or \"none\""
            )
        self.init()
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child process
        # Started through js/lifeline.mjs with a lifeline (node/lifeline.py): the IPFS node dies
        # the instant the process that started it does, even by SIGKILL.
        self._lifeline = Lifeline()
        try:
            self.process = subprocess.Popen(  # type: ignore[call-overload]
                [
                    shutil.which("node") or "node",
                    str(self.js / "lifeline.mjs"),
                    str(self._bin()),
                    "daemon",
                    "--enable-preload=false",
                    *self.daemon_args,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                **self._lifeline.popen_kwargs(self._env()),
            )
        finally:
            self._lifeline.spawned()
            log.close()

    def wait_ready(self, timeout: float = _READY_TIMEOUT_S) -> None:
        """Wait until the API answers; else stop the daemon and raise :class:`IpfsStartError`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is None:
                raise RuntimeError("daemon not launched")
            if self.process.poll() is not None:
                out = self.log_path.read_text(errors="replace")[-2000:]
                self.process = None
                raise IpfsStartError(f"js-ipfs daemon exited during start-up:\n{out}")
            if self._api_ready():
                return
            time.sleep(0.2)
        self.stop()
        raise IpfsStartError(
            f"js-ipfs daemon not ready after {timeout:.0f} s (a loaded machine: start again, or "
            "set [ipfs] mode = \"none\")"
        )

    def _api_ready(self) -> bool:
        req = urllib.request.Request(f"{self.api_url}/api/v0/id", method="POST")
        try:
            with urllib.request.urlopen(req, timeout=2) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the daemon this object started (SIGTERM, then SIGKILL), by its PID only."""
        p = self.process
        if p is None:
            return
        self.process = None
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout)
        if self._lifeline is not None:
            self._lifeline.cut()
            self._lifeline = None
        # A crashed shutdown can leave the repo lock behind; the next start would refuse it.
        (self.repo / "repo.lock").unlink(missing_ok=True)

    def __enter__(self) -> EmbeddedIpfs:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
