"""A private multi-host test network: each "host" is a network namespace on one bridge.

Layout (everything inside the caller's own namespaces; nothing has an uplink)::

    caller's namespace (must be loopback-only: only ``lo``, no default route)
      └─ lab namespace (net + mount, held by one ``sleep`` process; tmpfs on /run)
           bridge odflab0 ── vethK ══ eth0 in netns hK, address 10.77.0.(10+K)/24

The lab namespace is created by ``unshare --net --mount`` from the caller's namespace, so it
starts empty and the only interfaces ever added to it are the bridge and the veth pairs made
here; it has no route out of 10.77.0.0/24 (the fixed test subnet, which exists only inside
these namespaces). Every command started on a host goes through :func:`guard_exec` (``python
-m sim.netlab guard -- argv``), which re-checks *inside the host's namespace* that the only
interfaces are ``lo`` and ``eth0``, that ``eth0``'s address is in the test subnet and that
there is no default route, and only then ``exec``s the command. :meth:`NetLab.start` refuses
to build the lab unless the caller's namespace is loopback-only, and checks the lab
namespace's interfaces and routes after building it.

Faults: :meth:`NetLab.link_down` / :meth:`NetLab.link_up` take a host's bridge port down and up
(a partition and its healing); a host's processes are the caller's to restart (the harness
in ``tests/multihost.py`` does it by PID). :meth:`NetLab.close` ends the holder process, which
takes the namespaces with it.

Needs ``unshare``, ``nsenter`` (util-linux) and ``ip`` (iproute2), and the rights of root in the
caller's user namespace (the test command runs under ``unshare -rn``; ``python -m sim.netlab``
arranges it). Run ``python -m sim.netlab check --hosts 3`` for a self-test.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from p2p.errors import NetworkNotIsolated

SUBNET = ipaddress.IPv4Network("10.77.0.0/24")
"""The one private test subnet; it exists only inside the lab's namespaces."""
BRIDGE = "odflab0"
HOST_IFACE = "eth0"
TCP_RETRIES2 = 3
"""``net.ipv4.tcp_retries2`` in every host: retransmits before a connection is given up."""
_HOST_BASE = 10


def host_address(k: int) -> str:
    """The IPv4 address of host ``k`` (1-based): 10.77.0.(10+k)."""
    if not 1 <= k <= 200:
        raise ValueError(f"host index {k} out of range 1..200")
    return str(SUBNET.network_address + _HOST_BASE + k)


def _interfaces() -> set[str]:
    return {name for _, name in socket.if_nameindex()}


def _has_default_route() -> bool:
    """Whether this namespace has an IPv4 or IPv6 default route (read from /proc/net)."""
    try:
        for line in Path("/proc/net/route").read_text().splitlines()[1:]:
            fields = line.split()
            if len(fields) > 7 and fields[1] == "00000000" and fields[7] == "00000000":
                return True
    except OSError:
        pass
    try:
        for line in Path("/proc/net/ipv6_route").read_text().splitlines():
            fields = line.split()
            # destination ::/0 on an interface other than lo (lo carries the unreachable entries)
            if fields and fields[0] == "0" * 32 and fields[1] == "00" and fields[-1] != "lo":
                return True
    except OSError:
        pass
    return False


def _ipv4_addresses(iface: str) -> list[ipaddress.IPv4Interface]:
    out = subprocess.run(
        ["ip", "-j", "-4", "addr", "show", "dev", iface],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    addrs = []
    for entry in json.loads(out or "[]"):
        for a in entry.get("addr_info", []):
            addrs.append(ipaddress.IPv4Interface(f"{a['local']}/{a['prefixlen']}"))
    return addrs


def check_outer_namespace() -> None:
    """Refuse unless this process's namespace is loopback-only (only ``lo``, no default route).

    Raises:
        NetworkNotIsolated: another interface or a default route exists.
    """
    extra = sorted(_interfaces() - {"lo"})
    if extra or _has_default_route():
        raise NetworkNotIsolated(
            "refusing to build the multi-host test network outside a loopback-only namespace "
            f"(interfaces besides lo: {extra or 'none'}; default route: {_has_default_route()}); "
            "run it under: unshare -rn bash -c 'ip link set lo up; ...'"
        )


def check_host_namespace() -> str:
    """Refuse unless this is a lab host: only ``lo`` and ``eth0`` in 10.77.0.0/24, no default
    route. Returns the host's address.

    Raises:
        NetworkNotIsolated: anything else.
    """
    names = _interfaces()
    if names != {"lo", HOST_IFACE}:
        raise NetworkNotIsolated(
            f"refusing to start: not a test-network host (interfaces {sorted(names)}, "
            f"expected lo and {HOST_IFACE} only)"
        )
    if _has_default_route():
        raise NetworkNotIsolated("refusing to start: this namespace has a default route")
    addrs = _ipv4_addresses(HOST_IFACE)
    if not addrs or any(a.network != SUBNET for a in addrs):
        raise NetworkNotIsolated(
            f"refusing to start: {HOST_IFACE} has {[str(a) for a in addrs]}, expected one "
            f"address in {SUBNET}"
        )
    return str(addrs[0].ip)


def guard_exec(argv: Sequence[str]) -> None:
    """Check the host namespace (:func:`check_host_namespace`), then ``exec`` ``argv``."""
    check_host_namespace()
    os.execvp(argv[0], list(argv))


class NetLab:
    """``n`` hosts on one bridge inside a private lab namespace; see the module docstring."""

    def __init__(self, n_hosts: int) -> None:
        """Describe the lab; :meth:`start` builds it."""
        if not 1 <= n_hosts <= 200:
            raise ValueError("1..200 hosts")
        self.n_hosts = n_hosts
        self._holder: subprocess.Popen[bytes] | None = None

    # ---- life cycle

    def start(self) -> None:
        """Build the lab (refusing outside a loopback-only namespace) and check it.

        Raises:
            NetworkNotIsolated: the caller's namespace is not loopback-only, or the built lab
                has an interface or route it should not have.
            RuntimeError: a tool is missing or a step failed.
        """
        check_outer_namespace()
        for tool in ("unshare", "nsenter", "ip"):
            if shutil.which(tool) is None:
                raise RuntimeError(f"the multi-host test network needs `{tool}`")
        # The holder keeps the lab's net and mount namespaces alive; ending it ends them.
        self._holder = subprocess.Popen(
            ["unshare", "--net", "--mount", "--propagation", "private", "sleep", "infinity"],
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            self._wait_holder()
            script = [
                "mount -t tmpfs odflab /run",
                "ip link set lo up",
                f"ip link add {BRIDGE} type bridge",
                f"ip link set {BRIDGE} up",
            ]
            for k in range(1, self.n_hosts + 1):
                h = f"h{k}"
                script += [
                    f"ip netns add {h}",
                    f"ip link add veth{k} type veth peer name {HOST_IFACE} netns {h}",
                    f"ip link set veth{k} master {BRIDGE} up",
                    f"ip -n {h} link set lo up",
                    f"ip -n {h} addr add {host_address(k)}/{SUBNET.prefixlen} dev {HOST_IFACE}",
                    f"ip -n {h} link set {HOST_IFACE} up",
                    # A connection across a cut link dies after ~3 s of unanswered retransmits
                    # (the kernel default, 15 retries, takes ~15 minutes): a test's short
                    # partition then stands for a long outage, where gossip sent meanwhile is
                    # lost with the connection and only anti-entropy can repair it.
                    f"ip netns exec {h} sh -c "
                    f"'echo {TCP_RETRIES2} > /proc/sys/net/ipv4/tcp_retries2'",
                ]
            self._lab_sh(" && ".join(script))
            self._check_lab()
        except BaseException:
            self.close()
            raise

    def _wait_holder(self) -> None:
        assert self._holder is not None
        me = os.readlink("/proc/self/ns/net")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self._holder.poll() is not None:
                raise RuntimeError("could not create the lab namespace (unshare failed)")
            try:
                # `unshare` execs `sleep` once the namespaces exist: the holder's net namespace
                # differs from ours from then on.
                if os.readlink(f"/proc/{self._holder.pid}/ns/net") != me:
                    return
            except OSError:
                pass
            time.sleep(0.01)
        raise RuntimeError("the lab namespace holder did not start")

    def _check_lab(self) -> None:
        expected = {"lo", BRIDGE, *(f"veth{k}" for k in range(1, self.n_hosts + 1))}
        links = json.loads(self._lab(["ip", "-j", "link", "show"]).stdout)
        names = {entry["ifname"] for entry in links}
        if names != expected:
            raise NetworkNotIsolated(f"lab namespace has interfaces {sorted(names)}")
        routes = json.loads(self._lab(["ip", "-j", "route", "show", "table", "all"]).stdout)
        for r in routes:
            if r.get("dst") == "default":
                raise NetworkNotIsolated(f"lab namespace has a default route: {r}")

    def close(self) -> None:
        """End the holder (by PID); the namespaces go with it once their processes are gone."""
        holder, self._holder = self._holder, None
        if holder is not None and holder.poll() is None:
            holder.send_signal(signal.SIGKILL)
            holder.wait(10)

    def __enter__(self) -> NetLab:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- commands

    @property
    def holder_pid(self) -> int:
        """PID of the process holding the lab namespaces."""
        if self._holder is None:
            raise RuntimeError("the lab is not running")
        return self._holder.pid

    def _enter(self, cwd: str | os.PathLike[str] | None = None) -> list[str]:
        # nsenter --mount changes to / unless told where to work.
        wd = os.fspath(cwd) if cwd is not None else os.getcwd()
        return ["nsenter", "-t", str(self.holder_pid), "--net", "--mount", f"--wd={wd}"]

    def lab_run(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in the lab namespace itself (the bridge's side; faults, tests)."""
        return self._lab(argv)

    def _lab(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [*self._enter(), *argv], check=False, capture_output=True, text=True, timeout=60
        )
        if proc.returncode != 0:
            raise RuntimeError(f"lab command {list(argv)} failed: {proc.stderr.strip()}")
        return proc

    def _lab_sh(self, script: str) -> None:
        self._lab(["sh", "-c", script])

    def address(self, k: int) -> str:
        """Host ``k``'s address."""
        self._check_index(k)
        return host_address(k)

    def _check_index(self, k: int) -> None:
        if not 1 <= k <= self.n_hosts:
            raise ValueError(f"no host {k} (1..{self.n_hosts})")

    def command(
        self, k: int, argv: Sequence[str], cwd: str | os.PathLike[str] | None = None
    ) -> list[str]:
        """The argv that runs ``argv`` on host ``k``, behind the host guard.

        ``nsenter`` and ``ip netns exec`` exec in place and the guard execs the command, so
        the PID of a process started with this argv is the command's own PID.
        """
        self._check_index(k)
        return [
            *self._enter(cwd),
            "ip",
            "netns",
            "exec",
            f"h{k}",
            sys.executable,
            "-m",
            "sim.netlab",
            "guard",
            "--",
            *argv,
        ]

    def popen(self, k: int, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        """Start ``argv`` on host ``k`` (arguments as :class:`subprocess.Popen`)."""
        cwd = kwargs.pop("cwd", None)
        return subprocess.Popen(self.command(k, argv, cwd), **kwargs)

    def run(
        self,
        k: int,
        argv: Sequence[str],
        timeout: float = 60.0,
        *,
        cwd: str | os.PathLike[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on host ``k`` to completion; its output as text."""
        return subprocess.run(
            self.command(k, argv, cwd),
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )

    # ---- faults

    def link_down(self, k: int) -> None:
        """Cut host ``k`` off the bridge (its own interface stays up: a partition).

        TCP connections through the cut die once they have had unanswered data for ~3 s
        (:data:`TCP_RETRIES2`); idle ones survive until they next send.
        """
        self._check_index(k)
        self._lab(["ip", "link", "set", f"veth{k}", "down"])

    def link_up(self, k: int) -> None:
        """Reattach host ``k`` to the bridge (heal)."""
        self._check_index(k)
        self._lab(["ip", "link", "set", f"veth{k}", "up"])


_PROBE = """
import socket, sys
host, port = sys.argv[1], int(sys.argv[2])
try:
    s = socket.create_connection((host, port), timeout=float(sys.argv[3]))
    s.sendall(b"ping"); print(s.recv(16).decode()); s.close()
except OSError as e:
    print("unreachable:", type(e).__name__)
"""
_ECHO = """
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 7700)); s.listen(8); print("ready", flush=True)
while True:
    c, _ = s.accept(); c.sendall(c.recv(16).replace(b"ping", b"pong")); c.close()
"""


def self_check(n_hosts: int) -> dict[str, Any]:
    """Build a lab, check every host reaches every other, partition host 1 and heal it."""
    result: dict[str, Any] = {"hosts": n_hosts}
    with NetLab(n_hosts) as lab:
        echoes = [
            lab.popen(k, [sys.executable, "-c", _ECHO], stdout=subprocess.PIPE)
            for k in range(1, n_hosts + 1)
        ]
        try:
            for e in echoes:
                assert e.stdout is not None
                e.stdout.readline()

            def probe(src: int, dst: int) -> str:
                out = lab.run(src, [sys.executable, "-c", _PROBE, lab.address(dst), "7700", "1"])
                return out.stdout.strip() or out.stderr.strip()

            pairs = [(a, b) for a in range(1, n_hosts + 1) for b in range(1, n_hosts + 1) if a != b]
            result["reachable"] = all(probe(a, b) == "pong" for a, b in pairs)
            if n_hosts > 1:
                lab.link_down(1)
                result["partitioned"] = probe(2, 1)
                lab.link_up(1)
                time.sleep(0.5)
                result["healed"] = probe(2, 1)
        finally:
            for e in echoes:
                e.kill()
                e.wait(10)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """``guard -- argv`` (used by :meth:`NetLab.command`) or ``check --hosts N``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["guard"]:
        rest = args[1:]
        if rest[:1] == ["--"]:
            rest = rest[1:]
        if not rest:
            print("usage: python -m sim.netlab guard -- COMMAND...", file=sys.stderr)
            return 2
        try:
            guard_exec(rest)
        except NetworkNotIsolated as e:
            print(f"sim.netlab guard: {e}", file=sys.stderr)
            return 3
        return 0  # not reached: exec replaced the process
    parser = argparse.ArgumentParser(prog="python -m sim.netlab")
    sub = parser.add_subparsers(dest="cmd", required=True)
    check = sub.add_parser("check", help="build a lab, test reachability, partition and heal")
    check.add_argument("--hosts", type=int, default=3)
    ns = parser.parse_args(args)
    if ns.cmd == "check":
        if os.geteuid() != 0 or _interfaces() != {"lo"}:
            # Arrange the loopback-only outer namespace ourselves.
            os.execvp(
                "unshare",
                [
                    "unshare",
                    "-rn",
                    "sh",
                    "-c",
                    'ip link set lo up && exec "$0" -m sim.netlab "$@"',
                    sys.executable,
                    *args,
                ],
            )
        print(json.dumps(self_check(ns.hosts)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
