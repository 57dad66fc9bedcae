"""A private multi-host test network: each "host" is a network namespace on one bridge.

Layout (everything inside the caller's own namespaces; nothing has an uplink)::

    caller's namespace (must be loopback-only: only ``lo``, no default route)
      └─ lab namespace (net + mount, held by one ``sleep`` process; tmpfs on /run)
           bridge odflab0 ── vethK ══ eth0 in netns hK, address 10.77.0.(10+K)/24
                         ── vrJ   ══ eth0 in netns rJ (NAT router J), 10.77.0.(240+J)/24
           bridge odfnatJ ── vrlJ ══ lan0 in netns rJ, 10.77.J.1/24
                          ── vpJxI ══ eth0 in netns hK (a private host behind router J),
                                      10.77.J.(10+I)/24, route to 10.77.0.0/24 via 10.77.J.1

**NAT.** ``NetLab(n, nats=[Nat("eim", 1), Nat("symmetric", 1)])`` adds, after the ``n`` public
hosts, one router per :class:`Nat` and its private hosts (numbered on from ``n + 1``). A router
forwards between its LAN and the public bridge and masquerades what leaves its ``eth0``
(nftables, ``table ip odfnat``): ``eim`` keeps the source port where it can, so one private
socket has one public mapping whatever the destination (endpoint-independent mapping, as most
home routers; Linux conntrack still filters inbound packets per flow); ``symmetric`` maps
every new flow to a random port (``masquerade fully-random``), so the mapping changes with the
destination and hole punching cannot guess it. No router forwards anything inbound: a public
host has no route to a private subnet and reaches a private host only through a connection the
private host opened. Private hosts have no default route either: their one route beyond their
LAN is the public test subnet, via their router.

The lab namespace is created by ``unshare --net --mount`` from the caller's namespace, so it
starts empty and the only interfaces ever added to it are the bridges and the veth pairs made
here; nothing in it routes out of 10.77.0.0/16 (the fixed test networks, which exist only
inside these namespaces). Every command started on a host goes through :func:`guard_exec`
(``python -m sim.netlab guard -- argv``), which re-checks *inside the host's namespace* that it
is a lab host -- ``lo`` and ``eth0`` in the test subnet or a NAT subnet, or a router's ``lo``,
``eth0`` and ``lan0`` --, that there is no default route and that every route stays in the lab's
networks, and only then ``exec``s the command. :meth:`NetLab.start` refuses to build the lab
unless the caller's namespace is loopback-only, and checks the lab namespace's interfaces and
routes after building it.

Faults: :meth:`NetLab.link_down` / :meth:`NetLab.link_up` take a host's bridge port down and up
(a partition and its healing); a host's processes are the caller's to restart (the harness
in ``tests/multihost.py`` does it by PID). :meth:`NetLab.close` ends the holder process, which
takes the namespaces with it.

Needs ``unshare``, ``nsenter`` (util-linux) and ``ip`` (iproute2), ``nft`` (nftables, installed
by ``make test``) for a lab with NAT routers, and the rights of root in the caller's user
namespace (the test command runs under ``unshare -rn``; ``python -m sim.netlab`` arranges it).
Run ``python -m sim.netlab check --hosts 3`` for a self-test, ``python -m sim.netlab
nat-check`` for one of both NAT kinds.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from p2p.errors import NetworkNotIsolated

SUBNET = ipaddress.IPv4Network("10.77.0.0/24")
"""The public test subnet; it exists only inside the lab's namespaces."""
LAB_NETWORKS = ipaddress.IPv4Network("10.77.0.0/16")
"""Every address of the lab (the public subnet and the NAT subnets) is in here."""
MAX_NATS = 9
BRIDGE = "odflab0"
HOST_IFACE = "eth0"
ROUTER_LAN_IFACE = "lan0"
NatKind = Literal["eim", "symmetric"]
NAT_KINDS: tuple[NatKind, ...] = ("eim", "symmetric")
TCP_RETRIES2 = 3
"""``net.ipv4.tcp_retries2`` in every host: retransmits before a connection is given up."""
_HOST_BASE = 10


def host_address(k: int) -> str:
    """The IPv4 address of host ``k`` (1-based): 10.77.0.(10+k)."""
    if not 1 <= k <= 200:
        raise ValueError(f"host index {k} out of range 1..200")
    return str(SUBNET.network_address + _HOST_BASE + k)


def nat_subnet(j: int) -> ipaddress.IPv4Network:
    """The private subnet behind NAT router ``j`` (1-based): 10.77.j.0/24."""
    if not 1 <= j <= MAX_NATS:
        raise ValueError(f"NAT index {j} out of range 1..{MAX_NATS}")
    return ipaddress.IPv4Network(f"10.77.{j}.0/24")


def router_address(j: int) -> str:
    """NAT router ``j``'s public address: 10.77.0.(240+j)."""
    nat_subnet(j)
    return str(SUBNET.network_address + 240 + j)


def router_lan_address(j: int) -> str:
    """NAT router ``j``'s address on its LAN: 10.77.j.1."""
    return str(nat_subnet(j).network_address + 1)


def private_address(j: int, i: int) -> str:
    """The address of the ``i``-th (1-based) private host behind router ``j``: 10.77.j.(10+i)."""
    if not 1 <= i <= 200:
        raise ValueError(f"private host index {i} out of range 1..200")
    return str(nat_subnet(j).network_address + _HOST_BASE + i)


_NAT_SUBNETS = tuple(nat_subnet(j) for j in range(1, MAX_NATS + 1))


@dataclass(frozen=True)
class Nat:
    """A NAT router with ``hosts`` private hosts behind it; ``kind`` is ``"eim"``
    (endpoint-independent mapping) or ``"symmetric"`` (module docstring)."""

    kind: NatKind
    hosts: int = 1

    def __post_init__(self) -> None:
        if self.kind not in NAT_KINDS:
            raise ValueError(f"NAT kind {self.kind!r}: one of {', '.join(NAT_KINDS)}")
        if not 1 <= self.hosts <= 200:
            raise ValueError("1..200 hosts behind a NAT")


@dataclass(frozen=True)
class _Host:
    netns: str
    address: str
    port: str  # its veth's name on the lab side (a bridge port)
    nat: int | None  # the router it sits behind


def nat_ruleset(j: int, kind: NatKind) -> str:
    """The nftables ruleset of router ``j``: masquerade what its LAN sends out of ``eth0``, and
    drop what arrives on ``eth0`` outside a connection the LAN opened.

    The drop is what a home router's firewall does, and TCP hole punching depends on it: without
    it the router's own stack answers an unsolicited SYN to a mapped port with a RST, which
    kills the peer's half of a simultaneous open (the SYN that crosses first arrives before the
    other side's SYN has opened the mapping) -- measured in the lab: every punch failed with
    "Connection refused" on both ends. A dropped SYN leaves no trace (its conntrack entry is
    never confirmed), so the other side's SYN, a moment later, opens the mapping and the next
    SYN gets through (docs/nat.md, "Hole punching").
    """
    flags = " fully-random" if kind == "symmetric" else ""
    wan = f'iifname "{HOST_IFACE}"'
    return (
        "table ip odfnat {\n"
        " chain post {\n"
        "  type nat hook postrouting priority srcnat; policy accept;\n"
        f'  ip saddr {nat_subnet(j)} oifname "{HOST_IFACE}" masquerade{flags}\n'
        " }\n"
        " chain wan_in {\n"
        "  type filter hook input priority filter; policy accept;\n"
        f"  {wan} ct state established,related accept\n"
        f"  {wan} drop\n"
        " }\n"
        " chain wan_fwd {\n"
        "  type filter hook forward priority filter; policy accept;\n"
        f"  {wan} ct state established,related accept\n"
        f"  {wan} drop\n"
        " }\n"
        "}\n"
    )


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


def _ipv4_routes() -> list[dict[str, Any]]:
    out = subprocess.run(
        ["ip", "-j", "-4", "route", "show"], capture_output=True, text=True, check=True
    ).stdout
    routes: list[dict[str, Any]] = json.loads(out or "[]")
    return routes


def check_host_namespace() -> str:
    """Refuse unless this is a lab host, and return its address. A lab host is either

    * a public host: ``lo`` and ``eth0``, with one address in 10.77.0.0/24;
    * a private host behind a NAT router: ``lo`` and ``eth0``, with one address in a NAT
      subnet (10.77.1-9.0/24);
    * a NAT router: ``lo``, ``eth0`` in 10.77.0.0/24 and ``lan0`` in a NAT subnet;

    with no default route and no route leaving 10.77.0.0/16.

    Raises:
        NetworkNotIsolated: anything else.
    """
    names = _interfaces()
    router = names == {"lo", HOST_IFACE, ROUTER_LAN_IFACE}
    if names != {"lo", HOST_IFACE} and not router:
        raise NetworkNotIsolated(
            f"refusing to start: not a test-network host (interfaces {sorted(names)}, "
            f"expected lo and {HOST_IFACE} only, or lo, {HOST_IFACE} and {ROUTER_LAN_IFACE} "
            "on a NAT router)"
        )
    if _has_default_route():
        raise NetworkNotIsolated("refusing to start: this namespace has a default route")
    addrs = _ipv4_addresses(HOST_IFACE)
    allowed = (SUBNET,) if router else (SUBNET, *_NAT_SUBNETS)
    if len(addrs) != 1 or addrs[0].network not in allowed:
        raise NetworkNotIsolated(
            f"refusing to start: {HOST_IFACE} has {[str(a) for a in addrs]}, expected one "
            f"address in {SUBNET}" + ("" if router else " or a NAT subnet")
        )
    if router:
        lan = _ipv4_addresses(ROUTER_LAN_IFACE)
        if len(lan) != 1 or lan[0].network not in _NAT_SUBNETS:
            raise NetworkNotIsolated(
                f"refusing to start: {ROUTER_LAN_IFACE} has {[str(a) for a in lan]}, expected "
                "one address in a NAT subnet"
            )
    for r in _ipv4_routes():
        dst = r.get("dst", "")
        try:
            net = ipaddress.IPv4Network(dst if "/" in dst else f"{dst}/32")
        except ValueError:
            raise NetworkNotIsolated(f"refusing to start: route {r}") from None
        if not net.subnet_of(LAB_NETWORKS):
            raise NetworkNotIsolated(f"refusing to start: route to {dst} leaves the lab")
    return str(addrs[0].ip)


def guard_exec(argv: Sequence[str]) -> None:
    """Check the host namespace (:func:`check_host_namespace`), then ``exec`` ``argv``."""
    check_host_namespace()
    os.execvp(argv[0], list(argv))


class NetLab:
    """``n`` public hosts on one bridge inside a private lab namespace, and NAT routers with
    private hosts behind them; see the module docstring."""

    def __init__(self, n_hosts: int, nats: Sequence[Nat] = ()) -> None:
        """Describe the lab; :meth:`start` builds it. Host ``k`` is public for ``k <=
        n_hosts``; the private hosts of ``nats[0]`` follow, then those of ``nats[1]``..."""
        if not 1 <= n_hosts <= 200:
            raise ValueError("1..200 hosts")
        if len(nats) > MAX_NATS:
            raise ValueError(f"at most {MAX_NATS} NAT routers")
        self.nats = tuple(nats)
        self._hosts = [
            _Host(f"h{k}", host_address(k), f"veth{k}", None) for k in range(1, n_hosts + 1)
        ]
        for j, nat in enumerate(self.nats, start=1):
            for i in range(1, nat.hosts + 1):
                k = len(self._hosts) + 1
                self._hosts.append(_Host(f"h{k}", private_address(j, i), f"vp{j}x{i}", j))
        self.n_hosts = len(self._hosts)
        self.n_public = n_hosts
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
        tools = ("unshare", "nsenter", "ip", *(("nft",) if self.nats else ()))
        for tool in tools:
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
            for j in range(1, len(self.nats) + 1):
                script += self._router_script(j)
            for h in self._hosts:
                bridge = BRIDGE if h.nat is None else f"odfnat{h.nat}"
                subnet = SUBNET if h.nat is None else nat_subnet(h.nat)
                script += [
                    f"ip netns add {h.netns}",
                    f"ip link add {h.port} type veth peer name {HOST_IFACE} netns {h.netns}",
                    f"ip link set {h.port} master {bridge} up",
                    f"ip -n {h.netns} link set lo up",
                    f"ip -n {h.netns} addr add {h.address}/{subnet.prefixlen} dev {HOST_IFACE}",
                    f"ip -n {h.netns} link set {HOST_IFACE} up",
                    # A connection across a cut link dies after ~3 s of unanswered retransmits
                    # (the kernel default, 15 retries, takes ~15 minutes): a test's short
                    # partition then stands for a long outage, where gossip sent meanwhile is
                    # lost with the connection and only anti-entropy can repair it.
                    f"ip netns exec {h.netns} sh -c "
                    f"'echo {TCP_RETRIES2} > /proc/sys/net/ipv4/tcp_retries2'",
                ]
                if h.nat is not None:
                    # The public subnet through the router; nothing else (no default route).
                    script.append(
                        f"ip -n {h.netns} route add {SUBNET} via {router_lan_address(h.nat)}"
                    )
            self._lab_sh(" && ".join(script))
            for j, nat in enumerate(self.nats, start=1):
                self._lab_input(
                    ["ip", "netns", "exec", f"r{j}", "nft", "-f", "-"], nat_ruleset(j, nat.kind)
                )
            self._check_lab()
        except BaseException:
            self.close()
            raise

    def _router_script(self, j: int) -> list[str]:
        r, lan = f"r{j}", f"odfnat{j}"
        return [
            f"ip link add {lan} type bridge",
            f"ip link set {lan} up",
            f"ip netns add {r}",
            f"ip link add vr{j} type veth peer name {HOST_IFACE} netns {r}",
            f"ip link set vr{j} master {BRIDGE} up",
            f"ip link add vrl{j} type veth peer name {ROUTER_LAN_IFACE} netns {r}",
            f"ip link set vrl{j} master {lan} up",
            f"ip -n {r} link set lo up",
            f"ip -n {r} addr add {router_address(j)}/{SUBNET.prefixlen} dev {HOST_IFACE}",
            f"ip -n {r} link set {HOST_IFACE} up",
            f"ip -n {r} addr add {router_lan_address(j)}/24 dev {ROUTER_LAN_IFACE}",
            f"ip -n {r} link set {ROUTER_LAN_IFACE} up",
            f"ip netns exec {r} sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward'",
        ]

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
        expected = {"lo", BRIDGE, *(h.port for h in self._hosts)}
        for j in range(1, len(self.nats) + 1):
            expected |= {f"odfnat{j}", f"vr{j}", f"vrl{j}"}
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

    def _lab_input(self, argv: Sequence[str], text: str) -> None:
        proc = subprocess.run(
            [*self._enter(), *argv],
            input=text,
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"lab command {list(argv)} failed: {proc.stderr.strip()}")

    def address(self, k: int) -> str:
        """Host ``k``'s address (a private one for a host behind a NAT router)."""
        self._check_index(k)
        return self._hosts[k - 1].address

    def nat_of(self, k: int) -> int | None:
        """The NAT router host ``k`` sits behind (``None``: a public host)."""
        self._check_index(k)
        return self._hosts[k - 1].nat

    def public_address(self, k: int) -> str:
        """Where public hosts see host ``k``'s connections come from (its router's address)."""
        nat = self.nat_of(k)
        return self.address(k) if nat is None else router_address(nat)

    def router_run(self, j: int, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in NAT router ``j``'s namespace (inspection: ``nft list ruleset``)."""
        if not 1 <= j <= len(self.nats):
            raise ValueError(f"no NAT router {j}")
        return self._lab(["ip", "netns", "exec", f"r{j}", *argv])

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
            self._hosts[k - 1].netns,
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
        self._lab(["ip", "link", "set", self._hosts[k - 1].port, "down"])

    def link_up(self, k: int) -> None:
        """Reattach host ``k`` to the bridge (heal)."""
        self._check_index(k)
        self._lab(["ip", "link", "set", self._hosts[k - 1].port, "up"])


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


_REFLECT = """
import socket, sys, threading
port = int(sys.argv[1])
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", port))
t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind(("0.0.0.0", port)); t.listen(8)
def tcp():
    while True:
        c, a = t.accept(); c.sendall(f"{a[0]}:{a[1]}".encode()); c.close()
threading.Thread(target=tcp, daemon=True).start()
print("ready", flush=True)
while True:
    d, a = u.recvfrom(64)
    u.sendto(f"{a[0]}:{a[1]}".encode(), a)
"""
_OBSERVE = """
import json, socket, sys
src, targets = int(sys.argv[1]), sys.argv[2:]
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", src)); u.settimeout(2)
out = {"udp": [], "tcp": [], "unsolicited": []}
for t in targets:
    host, port = t.split(":")
    u.sendto(b"probe", (host, int(port)))
    try:
        out["udp"].append(u.recvfrom(64)[0].decode())
    except OSError as e:
        out["udp"].append(f"unreachable: {type(e).__name__}")
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", src + 1)); s.settimeout(2)
    try:
        s.connect((host, int(port))); out["tcp"].append(s.recv(64).decode())
    except OSError as e:
        out["tcp"].append(f"unreachable: {type(e).__name__}")
    s.close()
print(json.dumps(out))
"""
_LISTEN = """
import socket, sys
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", int(sys.argv[1])))
u.settimeout(float(sys.argv[2]))
try:
    print(u.recvfrom(64)[0].decode())
except OSError:
    print("nothing")
"""


def nat_check() -> dict[str, Any]:
    """Build a lab with two public hosts and one private host behind each NAT kind; probe.

    For each private host: the addresses and ports two public hosts observe for one UDP socket
    and one TCP source port (``udp`` / ``tcp``, as ``ip:port``), and whether a public host can
    reach the private host on its own (``direct``: no route), send it an unsolicited datagram
    to the router's mapped port (``inbound``) or open a TCP connection to the mapped TCP port
    (``inbound_tcp``: ``unreachable: TimeoutError`` when the router drops it, as it must).
    """
    port, src = 7701, 40000
    result: dict[str, Any] = {}
    with NetLab(2, [Nat("eim"), Nat("symmetric")]) as lab:
        reflectors = [
            lab.popen(k, [sys.executable, "-c", _REFLECT, str(port)], stdout=subprocess.PIPE)
            for k in (1, 2)
        ]
        try:
            for r in reflectors:
                assert r.stdout is not None
                r.stdout.readline()
            targets = [f"{lab.address(k)}:{port}" for k in (1, 2)]
            for k, nat in ((3, "eim"), (4, "symmetric")):
                seen = json.loads(
                    lab.run(k, [sys.executable, "-c", _OBSERVE, str(src), *targets]).stdout
                )
                direct = lab.run(
                    1, [sys.executable, "-c", _PROBE, lab.address(k), str(port), "1"]
                ).stdout.strip()
                # A third public host's datagram to the router's mapped port: does it get in?
                mapped = int(seen["udp"][0].rsplit(":", 1)[1])
                listener = lab.popen(
                    k, [sys.executable, "-c", _LISTEN, str(src), "2"], stdout=subprocess.PIPE
                )
                time.sleep(0.3)
                lab.run(
                    2,
                    [
                        sys.executable,
                        "-c",
                        "import socket,sys; socket.socket(socket.AF_INET, socket.SOCK_DGRAM)"
                        ".sendto(b'unsolicited', (sys.argv[1], int(sys.argv[2])))",
                        lab.public_address(k),
                        str(mapped),
                    ],
                )
                out, _ = listener.communicate(timeout=10)
                # And a TCP connection to the router's mapped port: dropped (a timeout), not
                # refused by the router's stack (TCP hole punching needs that: nat_ruleset).
                tcp_mapped = int(seen["tcp"][0].rsplit(":", 1)[1])
                inbound_tcp = lab.run(
                    2,
                    [sys.executable, "-c", _PROBE, lab.public_address(k), str(tcp_mapped), "1"],
                ).stdout.strip()
                result[nat] = {
                    "private": lab.address(k),
                    "router": lab.public_address(k),
                    "udp": seen["udp"],
                    "tcp": seen["tcp"],
                    "direct": direct,
                    "inbound": out.decode().strip(),
                    "inbound_tcp": inbound_tcp,
                }
        finally:
            for r in reflectors:
                r.kill()
                r.wait(10)
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
    sub.add_parser("nat-check", help="build a lab with both NAT kinds and probe the mappings")
    ns = parser.parse_args(args)
    if ns.cmd in ("check", "nat-check"):
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
        print(json.dumps(self_check(ns.hosts) if ns.cmd == "check" else nat_check()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
