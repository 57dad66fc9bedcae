"""Real ``odf-node run`` daemons on the hosts of a multi-host test network (``sim.netlab``).

Each :class:`HostNode` is a :class:`daemon_harness.NodeProcess` started on lab host ``k``
through the host guard (``python -m sim.netlab guard``), so it only ever starts inside a lab
host; it runs in ``[network] isolation = "open"`` with its gossip, IPFS swarm and HTTP listeners
on the host's address. The test talks to it over the home's Unix socket (``rpc.sock``), which
works across network namespaces. Only processes started here are signalled, by PID; the lab is
closed (its namespaces gone) by the fixture even when a test fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from daemon_harness import ROOT, NodeProcess

from node.rpc.client import RpcCallError, call_sync
from node.rpc.cookie import cookie_path, read_cookie
from sim.netlab import SUBNET, NetLab


def open_config(address: str, bootstrap: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """The config of an open-mode node listening on ``address`` (random ports)."""
    return {
        "network": {"isolation": "open"},
        "http": {"host": address, "port": 0},
        "p2p": {
            "listen_host": address,
            "port": 0,
            "bootstrap": bootstrap or [],
            "discovery_interval_s": 2.0,
            "anti_entropy_interval_s": 4.0,
        },
        "ipfs": {"swarm_host": address, "swarm_port": 0},
        # The lab's addresses are private: allow exactly the test subnet as an HTTP source.
        "transfer": {"allowed_source_networks": [str(SUBNET)]},
    }


class HostNode(NodeProcess):
    """A daemon on lab host ``host`` (see the module docstring)."""

    def __init__(
        self,
        lab: NetLab,
        host: int,
        home: Path,
        name: str,
        *,
        config: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        """Describe the node; :meth:`init` and :meth:`launch` start it."""
        super().__init__(home, name, config=config)
        self.lab = lab
        self.host = host
        self.address = lab.address(host)

    def launch(self) -> None:
        """Start the daemon on the node's lab host without waiting."""
        cookie_path(self.home).unlink(missing_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("ODF_NODE_")}
        with open(self.log_path, "ab") as log:
            self.proc = self.lab.popen(
                self.host,
                [sys.executable, "-m", "node.cli", "run", "--home", str(self.home)],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def wait_ready(self, timeout: float = 180.0) -> None:
        """Wait until ``rpc.ping`` answers on the home's Unix socket."""
        deadline = time.monotonic() + timeout
        sock = self.home / "rpc.sock"
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited during start-up:\n{self.tail()}")
            if cookie_path(self.home).exists() and sock.exists():
                _, self.token = read_cookie(self.home)
                self.url = f"unix:{sock}"
                try:
                    call_sync(self.url, self.token, "rpc.ping", None, 5)
                    return
                except RpcCallError:
                    pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} not ready after {timeout:.0f} s:\n{self.tail()}")

    def gossip_addr(self) -> str:
        """The node's advertised gossip multiaddr."""
        addrs: list[str] = self.call("node.status")["p2p"]["listen_addrs"]
        return addrs[0]


BOOTSTRAP_PORT = 7375
"""The gossip port of the lab's bootstrap node (fixed: its multiaddr is given before it runs)."""


def peer_id_of(home: Path) -> str:
    """The libp2p peer id of a node home (as its gossip host derives it from the node key)."""
    from libp2p.crypto.ed25519 import create_new_key_pair
    from libp2p.peer.id import ID

    from node.home import NodeHome

    return str(ID.from_pubkey(create_new_key_pair(NodeHome(home).node_key().seed()).public_key))


def relay_bootstrap(lab: NetLab, home: Path, k: int = 1) -> tuple[HostNode, str]:
    """A public bootstrap node on lab host ``k`` offering a circuit relay (no IPFS node, no HTTP
    listener), initialised but not started, and its multiaddr for the others' bootstrap list."""
    boot = HostNode(lab, k, home, "boot")
    boot.config.update(open_config(boot.address))
    boot.config["p2p"].update(port=BOOTSTRAP_PORT, relay_service=True)
    boot.config["ipfs"] = {"mode": "none"}
    boot.config["http"] = {"enabled": False}
    boot.init()
    return boot, f"/ip4/{boot.address}/tcp/{BOOTSTRAP_PORT}/p2p/{peer_id_of(home)}"


def stop_all(nodes: list[HostNode]) -> None:
    """Stop the nodes in parallel (each stop waits for its daemon's orderly shutdown)."""
    threads = [threading.Thread(target=n.stop) for n in nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


@contextmanager
def lab_network(n_hosts: int) -> Iterator[NetLab]:
    """A started :class:`NetLab`, closed on exit whatever happens."""
    lab = NetLab(n_hosts)
    lab.start()
    try:
        yield lab
    finally:
        lab.close()
