"""Start and stop the embedded IPFS node: Helia behind kubo's RPC subset (``js/helia-ipfs.mjs``,
installed by ``npm ci`` in ``js/``).

The node gets its own repo directory and random loopback ports for its RPC API and gateway. Its
swarm listens on ``127.0.0.1`` unless configured otherwise; it has no bootstrap peers, no MDNS,
no DHT or delegated routing, no relay, AutoNAT or UPnP, and dials only what ``swarm/connect``
names (``docs/ipfs.md``). Only the process this object started is ever signalled, by its PID.
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

#: V8 flags sizing the IPFS node's heap for a home node (each measured in docs/resource-budget.md,
#: "Idle memory"): a 1 MiB young generation, where V8's default semi-spaces (16 MiB) stay
#: resident in an idle node. Capping the old generation and `--optimize-for-size` saved a few MB
#: more but cost 1.5-2x the node's CPU per byte served, so they are not used.
NODE_HEAP_FLAGS = ("--max-semi-space-size=1",)


class IpfsStartError(IpfsError):
    """The embedded IPFS node could not be started; the message says what to change."""


# js-ipfs needed ~10-20 s to start on an idle 2-core machine and over 60 s under heavy load
# (measured in a full CI run next to three daemons and their JVMs); Helia loads fewer modules,
# but a loaded machine still makes start-up slow, and waiting longer is harmless.
_READY_TIMEOUT_S = 180.0


def js_dir() -> Path:
    """The npm project holding the IPFS node (``<checkout>/js``, or ``$ODF_NODE_JS_DIR``)."""
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


def node_config(
    api: int,
    gateway: int,
    swarm: int,
    *,
    swarm_host: str = "127.0.0.1",
    announce: tuple[str, ...] = (),
    pubsub: bool = False,
) -> dict[str, Any]:
    """The ``config.json`` that ``js/helia-ipfs.mjs`` reads: API and gateway on 127.0.0.1, the
    swarm on ``swarm_host`` (127.0.0.1 unless the node runs in open mode), announcing
    ``announce``, IPNS over pubsub when ``pubsub``. Nothing else is configurable: the node has
    no bootstrap, discovery or public routing to turn off (``docs/ipfs.md``)."""
    return {
        "api_port": api,
        "gateway_port": gateway,
        "swarm": [f"/ip4/{swarm_host}/tcp/{swarm}"],
        "announce": list(announce),
        "pubsub": pubsub,
    }


@dataclass
class EmbeddedIpfs:
    """One embedded IPFS node (Helia) with its own repo.

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
    #: IPNS over pubsub (floodsub and libp2p-fetch on the swarm connections). Without it a node
    #: resolves the IPNS names it published itself (from its datastore) and no others, as
    #: js-ipfs did with ``Routing.Type none``. With it a node resolves a foreign name after its
    #: first ``name/resolve`` (which fails and subscribes to the name's topic) and the owner's
    #: next ``name/publish`` over a swarm connection (``docs/ipfs.md``).
    ipns_pubsub: bool = False
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

    def _script(self) -> Path:
        return self.js / "helia-ipfs.mjs"

    def _installed(self) -> bool:
        return self._script().exists() and (self.js / "node_modules" / "helia").is_dir()

    def _env(self) -> dict[str, str]:
        return {**os.environ, "IPFS_PATH": str(self.repo)}

    def init(self) -> None:
        """Create the repo (if missing) and write its config with fresh ports."""
        self.repo.mkdir(parents=True, exist_ok=True)
        api, gateway, swarm = _free_ports(3)
        if self.fixed_swarm_port:
            swarm = self.fixed_swarm_port
        cfg = node_config(
            api,
            gateway,
            swarm,
            swarm_host=self.swarm_host,
            announce=self.announce,
            pubsub=self.ipns_pubsub,
        )
        (self.repo / "config.json").write_text(json.dumps(cfg, indent=2))
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
        if not self._installed():
            raise IpfsStartError(
                f"the IPFS node (Helia) is not installed in {self.js}: run `make setup` (or "
                '`npm ci` in js/), or set [ipfs] mode = "external" (a kubo RPC URL) or "none"'
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
                    *NODE_HEAP_FLAGS,
                    str(self.js / "lifeline.mjs"),
                    str(self._script()),
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
                raise IpfsStartError(f"the IPFS node exited during start-up:\n{out}")
            if self._api_ready():
                return
            time.sleep(0.2)
        self.stop()
        raise IpfsStartError(
            f"the IPFS node is not ready after {timeout:.0f} s (a loaded machine: start again, or "
            'set [ipfs] mode = "none")'
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

    def __enter__(self) -> EmbeddedIpfs:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
