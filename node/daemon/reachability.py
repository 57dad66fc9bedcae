"""What an open-mode node can tell at start about being reachable, and what its peers can tell
it about the providers they cannot reach.

:func:`start_warnings` looks at the addresses the node advertises once its listeners run: in
``open`` isolation an IPFS swarm, HTTP surface or gossip host that only listens on loopback is
advertised to nobody (``node.daemon.addresses`` drops loopback addresses in open mode), so no
peer on another host can fetch from it. Each problem becomes a warning (log, a
``node.reachability`` event and ``status``' ``warnings``) naming the setting to change.

:func:`ipfs_hints` turns discovery's failed IPFS connects, and the loopback IPFS addresses a
provider withheld from its record, into the reasons a pull names when its IPFS source got
nothing (``node.app.fetch``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlparse

from node.app.fetch import IpfsHint

SETTING_IPFS_SWARM = "[ipfs] swarm_host"
SETTING_HTTP_HOST = "[http] host"
SETTING_P2P_HOST = "[p2p] listen_host"


def _host_of_multiaddr(addr: str) -> str | None:
    parts = addr.split("/")
    if len(parts) >= 3 and parts[1] in ("ip4", "ip6"):
        return parts[2]
    return None


def is_loopback_host(host: str | None) -> bool:
    """Whether ``host`` (an IP literal or ``localhost``) names the local host only."""
    if not host:
        return False
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def withheld_ipfs(listening: Sequence[str], advertised: Sequence[str]) -> list[str]:
    """The loopback listen addresses of an IPFS node that advertises nothing else: what it
    would be reachable at from its own host only (empty when peers have an address)."""
    if advertised:
        return []
    return [a for a in listening if is_loopback_host(_host_of_multiaddr(a))]


def start_warnings(
    *,
    open_mode: bool,
    ipfs_mode: str | None,
    ipfs_advertised: Sequence[str],
    ipfs_withheld: Sequence[str],
    http_url: str,
    gossip_advertised: Sequence[str] | None,
) -> list[dict[str, Any]]:
    """The reachability problems of a started node (``{"kind", "message", "setting"}``).

    ``ipfs_mode`` ``None``: no IPFS node; ``http_url`` ``""``: no HTTP surface;
    ``gossip_advertised`` ``None``: gossip disabled. Loopback-only nodes have none by design.
    """
    if not open_mode:
        return []
    out: list[dict[str, Any]] = []
    if ipfs_mode is not None and not ipfs_advertised:
        where = ", ".join(ipfs_withheld) or "no address"
        fix = (
            "set [ipfs] swarm_host to an address peers reach (or 0.0.0.0 with [network] "
            "advertise_host)"
            if ipfs_mode == "embedded"
            else "make kubo listen on an address peers reach (its Addresses.Swarm)"
        )
        out.append(
            {
                "kind": "ipfs-unreachable",
                "message": f"the IPFS node listens on {where} only: peers on other hosts cannot "
                f"fetch from it; {fix}",
                "setting": SETTING_IPFS_SWARM if ipfs_mode == "embedded" else "",
                "addresses": list(ipfs_withheld),
            }
        )
    if http_url and is_loopback_host(urlparse(http_url).hostname):
        out.append(
            {
                "kind": "http-unreachable",
                "message": f"the HTTP surface is advertised at {http_url}, which peers on other "
                "hosts cannot reach; set [http] host to an address they reach (or [http] "
                "public_url / [network] advertise_host)",
                "setting": SETTING_HTTP_HOST,
            }
        )
    if gossip_advertised is not None and not gossip_advertised:
        out.append(
            {
                "kind": "p2p-unreachable",
                "message": "the gossip host advertises no address peers on other hosts can dial "
                "(it listens on loopback); set [p2p] listen_host to an address they reach (or "
                "[network] advertise_host)",
                "setting": SETTING_P2P_HOST,
            }
        )
    return out


def ipfs_hints(failed: Sequence[tuple[str, str]], withheld: Sequence[str]) -> list[IpfsHint]:
    """Why a pull's IPFS source got nothing: each provider IPFS address a connect failed on
    (``failed``), and each loopback address a provider listens on but cannot offer
    (``withheld``, from its discovery record)."""
    out = []
    for addr, error in failed:
        if is_loopback_host(_host_of_multiaddr(addr)):
            out.append(
                IpfsHint(
                    addr,
                    f"loopback address, unreachable from this host ({error})",
                    f"{SETTING_IPFS_SWARM} (on the provider)",
                )
            )
        else:
            out.append(IpfsHint(addr, error))
    for addr in withheld:
        out.append(
            IpfsHint(
                addr,
                "the provider's IPFS node listens on loopback only (not advertised to peers)",
                f"{SETTING_IPFS_SWARM} (on the provider)",
            )
        )
    return out


__all__ = ["ipfs_hints", "is_loopback_host", "start_warnings", "withheld_ipfs"]
