"""The addresses a node advertises to peers (gossip multiaddrs, IPFS swarm, HTTP base URL).

A listener bound to a wildcard or to an address peers cannot use (a LAN address behind NAT)
is advertised under ``[network] advertise_host``: the IP component of each multiaddr is
replaced (``/ip4/`` for an IPv4 address, ``/ip6/`` for IPv6, ``/dns4/`` for a name). In open
mode, loopback addresses are never advertised (a peer on another host would dial itself).
"""

from __future__ import annotations

import ipaddress


def _host_component(host: str) -> str:
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return f"/dns4/{host}"
    return f"/ip4/{ip}" if ip.version == 4 else f"/ip6/{ip}"


def _is_loopback(addr: str) -> bool:
    parts = addr.split("/")
    if len(parts) < 3 or parts[1] not in ("ip4", "ip6"):
        return False
    try:
        return ipaddress.ip_address(parts[2]).is_loopback
    except ValueError:
        return False


def advertised_multiaddrs(
    addrs: list[str], advertise_host: str, *, loopback_only: bool
) -> list[str]:
    """``addrs`` as peers should dial them (see the module docstring), in order, deduplicated.

    Only ``/ip4|ip6/<host>/tcp/<port>[/p2p/<id>]`` addresses are rewritten; others (websocket,
    circuit) are kept as they are unless they are loopback in open mode.
    """
    out: list[str] = []
    for addr in addrs:
        parts = addr.split("/")
        rewrite = len(parts) >= 5 and parts[1] in ("ip4", "ip6") and parts[3] == "tcp"
        if advertise_host and rewrite:
            dial = f"{_host_component(advertise_host)}/{'/'.join(parts[3:])}"
        elif not loopback_only and _is_loopback(addr):
            continue
        else:
            dial = addr
        if dial not in out:
            out.append(dial)
    return out


def advertised_http_url(public_url: str, bound_url: str, advertise_host: str) -> str:
    """The HTTP base URL peers pull from: ``public_url`` if set, else the bound URL with its host
    replaced by ``advertise_host`` (if set)."""
    if public_url:
        return public_url.rstrip("/")
    if not bound_url or not advertise_host:
        return bound_url
    scheme, _, rest = bound_url.partition("://")
    port = rest.rsplit(":", 1)[1] if ":" in rest else ""
    host = f"[{advertise_host}]" if ":" in advertise_host else advertise_host
    return f"{scheme}://{host}:{port}" if port else f"{scheme}://{host}"
