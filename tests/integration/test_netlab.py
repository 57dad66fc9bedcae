"""The multi-host test network (sim/netlab.py): hosts reach each other on 10.77.0.0/24, a link
goes down and up, and nothing starts outside the private namespaces it builds."""

from __future__ import annotations

import subprocess
import sys

import pytest
from netns import require_loopback_only

from sim.netlab import TCP_RETRIES2, NetLab, check_outer_namespace, host_address, self_check

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
