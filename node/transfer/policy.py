"""Which HTTP sources the node will contact: a guard against server-side request forgery.

A pull's HTTP base URL may come from a stranger (``http_urls`` of a gossiped head
announcement) and every hop of a redirect comes from the source. Without a policy, one
announcement in open mode makes every subscriber send requests to addresses of the
subscriber's own network: cloud metadata endpoints (169.254.169.254, fd00:ec2::254), admin
ports on the LAN, services bound to loopback.

:class:`SourcePolicy` decides per IP address:

* ``loopback-only`` isolation: loopback addresses only (127.0.0.0/8, ::1), nothing else.
* open isolation: public (globally routable) addresses. Private (RFC 1918, fc00::/7),
  loopback, link-local, shared (CGNAT 100.64.0.0/10) and other non-global ranges only with
  ``allow_private`` or an ``allowed_networks`` entry; cloud metadata endpoints only with an
  ``allowed_networks`` entry; unspecified, multicast, broadcast and reserved addresses never
  (they name no single host: 0.0.0.0 reaches the local host on Linux).

IPv6 forms that carry an IPv4 address (``::ffff:a.b.c.d``, NAT64 ``64:ff9b::/96``, 6to4) are
judged by the IPv4 address they lead to.

:meth:`SourcePolicy.check_url` checks a URL's scheme and, if its host is an IP literal, that
address; hostnames are checked where they are resolved, by :class:`PolicyResolver`, which the
HTTP client uses for every connection: every address a name resolves to must be allowed, and
the connection goes to one of those checked addresses, so a name that resolves differently on
a second lookup (DNS rebinding) cannot bypass the check.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver
from yarl import URL

from coordinator.errors import SourceUnreachable
from node.transfer.errors import InvalidSourceUrl, SourceRefused

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

HTTP_SCHEMES = frozenset({"http", "https"})


def _nets(*cidrs: str) -> tuple[IpNetwork, ...]:
    return tuple(ipaddress.ip_network(c) for c in cidrs)


# Instance metadata / platform services that hand out credentials: AWS, GCP, Azure, OpenStack,
# Oracle (169.254.169.254), AWS ECS task metadata (169.254.170.2), AWS IPv6 (fd00:ec2::254),
# Alibaba (100.100.100.200), Oracle legacy (192.0.0.192), Azure WireServer (168.63.129.16, a
# public address that only answers inside Azure).
METADATA_NETWORKS = _nets(
    "169.254.169.254/32",
    "169.254.170.2/32",
    "fd00:ec2::254/128",
    "100.100.100.200/32",
    "192.0.0.192/32",
    "168.63.129.16/32",
)
_PRIVATE = _nets("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")
_SHARED = _nets("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")
_BROADCAST = ipaddress.ip_address("255.255.255.255")

SETTING_ALLOWED_NETWORKS = "[transfer] allowed_source_networks"
"""The setting that allows a refused private, loopback or metadata address (one CIDR entry; the
broader ``[transfer] allow_private_sources`` allows every non-public range but metadata)."""
SETTING_ISOLATION = "[network] isolation"
"""In ``loopback-only`` isolation only loopback sources are allowed, whatever ``[transfer]``."""

# Categories no setting can allow: they name no single remote host.
NEVER_ALLOWED = frozenset({"unspecified", "multicast", "broadcast", "reserved"})


def _embedded_v4(ip: IpAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address leads to (mapped, NAT64, 6to4), if any."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip.sixtofour


def _category(ip: IpAddress) -> str | None:
    """Why ``ip`` is not an ordinary public address (``None``: it is one)."""
    if ip.is_unspecified or ip in _THIS_NETWORK:
        return "unspecified"
    if ip.is_multicast:
        return "multicast"
    if ip == _BROADCAST:
        return "broadcast"
    if any(ip in n for n in METADATA_NETWORKS):
        return "cloud metadata endpoint"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if any(ip in n for n in _SHARED):
        return "shared address space (CGNAT)"
    if any(ip in n for n in _PRIVATE):
        return "private"
    if ip.is_reserved:
        return "reserved"
    if not ip.is_global:
        return "not globally routable"
    return None


def classify(ip: IpAddress) -> str | None:
    """The category of ``ip`` the policy cares about, judging embedded IPv4 addresses.

    ``None`` for an ordinary public address; otherwise one of ``unspecified``, ``multicast``,
    ``broadcast``, ``cloud metadata endpoint``, ``loopback``, ``link-local``,
    ``shared address space (CGNAT)``, ``private``, ``reserved``, ``not globally routable``.
    """
    v4 = _embedded_v4(ip)
    if isinstance(ip, ipaddress.IPv6Address) and v4 is not None:
        inner = _category(v4)
        # Mapped and NAT64 addresses *are* the IPv4 host; a 6to4 address is also judged as IPv6.
        if inner is not None or ip.ipv4_mapped is not None or ip in _NAT64:
            return inner
    return _category(ip)


def parse_address(text: str) -> IpAddress | None:
    """``text`` as an IP address (an IPv6 zone ``%eth0`` and brackets dropped), else ``None``."""
    text = text.strip("[]").split("%", 1)[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def parse_networks(cidrs: Iterable[str]) -> tuple[IpNetwork, ...]:
    """CIDR strings as networks (host bits allowed); :class:`ValueError` names a bad entry."""
    out: list[IpNetwork] = []
    for c in cidrs:
        try:
            out.append(ipaddress.ip_network(c.strip(), strict=False))
        except ValueError as e:
            raise ValueError(f"{c!r} is not an IP network in CIDR form ({e})") from None
    return tuple(out)


@dataclass(frozen=True)
class SourcePolicy:
    """Which addresses HTTP pulls may connect to (see the module docstring).

    The default is the policy of a node with the default configuration: loopback only.
    """

    loopback_only: bool = True
    allow_private: bool = False
    allowed_networks: tuple[IpNetwork, ...] = ()

    @classmethod
    def open(
        cls, *, allow_private: bool = False, allowed_networks: Iterable[str] = ()
    ) -> SourcePolicy:
        """The open-isolation policy."""
        return cls(False, allow_private, parse_networks(allowed_networks))

    def refusal(self, ip: IpAddress) -> str | None:
        """Why ``ip`` must not be contacted (``None``: it may be)."""
        found = self.refusal_and_setting(ip)
        return None if found is None else found[0]

    def refusal_and_setting(self, ip: IpAddress) -> tuple[str, str] | None:
        """Why ``ip`` must not be contacted and the setting that would allow it (``""``: no
        setting can), or ``None`` when it may be contacted."""
        category = classify(ip)
        if self.loopback_only:
            if category == "loopback":
                return None
            return (
                f"{category or 'public'} address, but network.isolation is 'loopback-only' "
                "(only loopback sources)",
                SETTING_ISOLATION,
            )
        if category is None:
            return None
        if category in NEVER_ALLOWED:
            return f"{category} address", ""
        v4 = _embedded_v4(ip)
        candidates = [ip] if v4 is None else [ip, v4]
        if any(a in n for a in candidates for n in self.allowed_networks if a.version == n.version):
            return None
        if category == "cloud metadata endpoint":
            return (
                f"{category} (allowed only by a transfer.allowed_source_networks entry)",
                SETTING_ALLOWED_NETWORKS,
            )
        if self.allow_private:
            return None
        return (
            f"{category} address (set transfer.allow_private_sources or list it in "
            "transfer.allowed_source_networks to allow it)",
            SETTING_ALLOWED_NETWORKS,
        )

    def check_address(self, address: str, context: str) -> None:
        """Raise :class:`SourceRefused` unless ``address`` (an IP literal) may be contacted.

        ``context`` says what led there (the URL, a host name, a redirect) for the message;
        the error's ``setting`` names what would allow the address.
        """
        ip = parse_address(address)
        if ip is None:
            raise SourceRefused(f"{context}: {address!r} is not an IP address")
        found = self.refusal_and_setting(ip)
        if found is not None:
            why, setting = found
            raise SourceRefused(f"{context}: {ip} is refused: {why}", setting)

    def checked_addresses(self, host: str, port: int | None, server: str) -> list[str]:
        """``host`` resolved and every address it resolves to checked (all must pass, as for
        HTTP), for a client that connects to an address itself (FTP, MQTT, an Ethereum node);
        ``server`` names it in errors. Blocking: call it in a worker thread.

        Raises:
            SourceUnreachable: the name does not resolve.
            SourceRefused: the policy refuses one of its addresses.
        """
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as e:
            raise SourceUnreachable(f"{server}: cannot resolve: {e}") from None
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        if not addresses:  # pragma: no cover - getaddrinfo raises instead
            raise SourceUnreachable(f"{server}: no address")
        for a in addresses:
            self.check_address(a, server)
        return addresses

    def check_url(self, url: str | URL, context: str = "source") -> URL:
        """The parsed ``url`` if its scheme is HTTP(S) and its host literal (if any) is allowed.

        Host names pass here; :class:`PolicyResolver` checks what they resolve to.

        Raises:
            InvalidSourceUrl: not an absolute ``http://`` / ``https://`` URL with a host.
            SourceRefused: the host is an IP address the policy refuses.
        """
        try:
            u = url if isinstance(url, URL) else URL(url)
        except (ValueError, TypeError) as e:
            raise InvalidSourceUrl(f"{context}: malformed URL {str(url)!r}: {e}") from None
        if u.scheme not in HTTP_SCHEMES:
            raise InvalidSourceUrl(
                f"{context}: scheme {u.scheme!r} of {str(u)!r} is not http or https"
            )
        if not u.raw_host:
            raise InvalidSourceUrl(f"{context}: {str(u)!r} has no host")
        ip = parse_address(u.raw_host)
        if ip is not None:
            self.check_address(str(ip), f"{context} {str(u)!r}")
        return u


class PolicyResolver(AbstractResolver):
    """An aiohttp resolver that refuses a host name if any address it resolves to is refused.

    aiohttp connects only to addresses its resolver returned, so the checked addresses are the
    ones connected to. IP literals never reach a resolver: :meth:`SourcePolicy.check_url`
    checks those before each request.
    """

    def __init__(self, policy: SourcePolicy, inner: AbstractResolver | None = None) -> None:
        self.policy = policy
        self._inner = inner if inner is not None else DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """Resolve with the inner resolver; :class:`SourceRefused` if any address is refused."""
        results = await self._inner.resolve(host, port, family)
        for r in results:
            self.policy.check_address(r["host"], f"host {host!r}")
        return results

    async def close(self) -> None:
        """Close the inner resolver."""
        await self._inner.close()


__all__ = [
    "HTTP_SCHEMES",
    "METADATA_NETWORKS",
    "NEVER_ALLOWED",
    "SETTING_ALLOWED_NETWORKS",
    "SETTING_ISOLATION",
    "InvalidSourceUrl",
    "PolicyResolver",
    "SourcePolicy",
    "SourceRefused",
    "classify",
    "parse_address",
    "parse_networks",
]
