"""The multi-host test network (sim/netlab.py): hosts reach each other on 10.77.0.0/24, a link
goes down and up, NAT routers masquerade their private hosts (endpoint-independent and
symmetric mappings), and nothing starts outside the private namespaces it builds."""

from __future__ import annotations

import subprocess
import sys

import pytest
from netns import require_loopback_only

from sim.netlab import (
    TCP_RETRIES2,
    Nat,
    NetLab,
    check_outer_namespace,
    host_address,
    nat_check,
    private_address,
    router_address,
    self_check,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def test_hosts_reach_each_other_and_a_link_partitions_and_heals() -> None:
    require_loopback_only()
    result = self_check(3)
    assert result["reachable"] is True
    assert result["partitioned"].startswith("unreachable")
    assert result["healed"] == "pong"


def test_refuses_to_build_outside_a_loopback_only_namespace() -> None:
    require_loopback_only()
    check_outer_namespace()  # the suite's namespace passes
    # A namespace with an interface besides lo (a veth pair): the lab refuses to start there.
    script = (
        "ip link add odfx0 type veth peer name odfx1 && "
        f'exec {sys.executable} -c "from sim.netlab import NetLab; NetLab(1).start()"'
    )
    proc = subprocess.run(
        ["unshare", "--net", "sh", "-c", script],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "NetworkNotIsolated" in proc.stderr
    assert "odfx0" in proc.stderr


def test_guard_refuses_anything_but_a_lab_host() -> None:
    require_loopback_only()
    # In the suite's own namespace (only lo) the guard refuses to run the command.
    proc = subprocess.run(
        [sys.executable, "-m", "sim.netlab", "guard", "--", "true"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 3, proc.stderr
    assert "not a test-network host" in proc.stderr
    with NetLab(2) as lab:
        ok = lab.run(1, [sys.executable, "-c", "print('ran')"])
        assert ok.returncode == 0 and ok.stdout.strip() == "ran", ok.stderr
        ip = lab.run(2, ["ip", "-4", "-o", "addr", "show", "dev", "eth0"])
        assert f"{host_address(2)}/24" in ip.stdout
        # Connections across a cut link die in seconds, not the kernel's default ~15 minutes.
        retries = lab.run(2, ["cat", "/proc/sys/net/ipv4/tcp_retries2"])
        assert retries.stdout.strip() == str(TCP_RETRIES2), retries.stderr
        # A default route on host 1: refused.
        lab.lab_run(["ip", "-n", "h1", "route", "add", "default", "dev", "eth0"])
        refused = lab.run(1, ["true"])
        assert refused.returncode == 3 and "default route" in refused.stderr
        # An extra interface on host 2: refused.
        lab.lab_run(
            ["ip", "link", "add", "odfx", "type", "veth", "peer", "name", "x1", "netns", "h2"]
        )
        refused = lab.run(2, ["true"])
        assert refused.returncode == 3 and "x1" in refused.stderr
    # Closing the lab ended its holder: the namespaces are gone with it.
    with pytest.raises(RuntimeError):
        lab.holder_pid  # noqa: B018


def test_both_nat_kinds_behave_as_specified() -> None:
    """A private host behind each router kind probes two public hosts from one UDP socket and
    one TCP source port: both see the router's address; behind the endpoint-independent NAT
    the mapped port is the same for both destinations (the source port kept), behind the
    symmetric one it differs per destination. Nothing reaches a private host unasked."""
    require_loopback_only()
    got = nat_check()
    eim, sym = got["eim"], got["symmetric"]
    assert eim["router"] == router_address(1) and sym["router"] == router_address(2)
    for kind in (eim, sym):
        for proto in ("udp", "tcp"):
            seen = kind[proto]
            assert len(seen) == 2, kind
            assert all(s.startswith(f"{kind['router']}:") for s in seen), kind
        # No public host has a route to a private subnet; no router forwards unsolicited
        # datagrams to the mapped port of a flow opened with another host.
        assert kind["direct"].startswith("unreachable"), kind
        assert kind["inbound"] == "nothing", kind
        # The router drops an unsolicited SYN to a mapped port rather than refusing it: a RST
        # would kill the first half of a TCP simultaneous open (sim.netlab.nat_ruleset).
        assert kind["inbound_tcp"] == "unreachable: TimeoutError", kind
    assert eim["udp"] == [f"{eim['router']}:40000"] * 2
    assert eim["tcp"] == [f"{eim['router']}:40001"] * 2
    assert sym["udp"][0] != sym["udp"][1], sym
    assert sym["tcp"][0] != sym["tcp"][1], sym


def test_guard_accepts_routers_and_private_hosts_and_nothing_else() -> None:
    require_loopback_only()
    guard = [sys.executable, "-m", "sim.netlab", "guard", "--"]
    with NetLab(1, [Nat("eim")]) as lab:
        assert lab.nat_of(2) == 1 and lab.nat_of(1) is None
        assert lab.address(2) == private_address(1, 1)
        ok = lab.run(2, ["ip", "-4", "-o", "addr", "show", "dev", "eth0"])
        assert ok.returncode == 0 and f"{private_address(1, 1)}/24" in ok.stdout, ok.stderr
        routed = lab.router_run(1, [*guard, "ip", "-4", "-o", "addr", "show"])
        assert router_address(1) in routed.stdout and "lan0" in routed.stdout
        ruleset = lab.router_run(1, ["nft", "list", "ruleset"]).stdout
        assert "masquerade" in ruleset and "fully-random" not in ruleset
        # A route out of the lab's networks on the private host: refused.
        lab.lab_run(["ip", "-n", "h2", "route", "add", "192.168.0.0/16", "via", "10.77.1.1"])
        refused = lab.run(2, ["true"])
        assert refused.returncode == 3 and "leaves the lab" in refused.stderr
        # A router with a third interface is no router.
        lab.lab_run(
            ["ip", "link", "add", "odfy", "type", "veth", "peer", "name", "y1", "netns", "r1"]
        )
        with pytest.raises(RuntimeError, match="y1"):
            lab.router_run(1, [*guard, "true"])
        # A public host with an address in a NAT subnet: refused.
        lab.lab_run(["ip", "-n", "h1", "addr", "add", "10.77.1.99/24", "dev", "eth0"])
        refused = lab.run(1, ["true"])
        assert refused.returncode == 3 and "expected one address" in refused.stderr
