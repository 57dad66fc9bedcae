"""The addresses a node advertises (node/daemon/addresses.py)."""

from __future__ import annotations

from node.daemon.addresses import advertised_http_url, advertised_multiaddrs

PID = "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"


def test_loopback_only_keeps_loopback_addresses() -> None:
    addrs = [f"/ip4/127.0.0.1/tcp/4001/p2p/{PID}"]
    assert advertised_multiaddrs(addrs, "", loopback_only=True) == addrs


def test_open_mode_drops_loopback_and_keeps_host_addresses() -> None:
    addrs = [f"/ip4/127.0.0.1/tcp/4001/p2p/{PID}", f"/ip4/10.77.0.11/tcp/4001/p2p/{PID}"]
    assert advertised_multiaddrs(addrs, "", loopback_only=False) == [addrs[1]]


def test_advertise_host_rewrites_and_deduplicates() -> None:
    addrs = [f"/ip4/127.0.0.1/tcp/4001/p2p/{PID}", f"/ip4/192.168.1.5/tcp/4001/p2p/{PID}"]
    assert advertised_multiaddrs(addrs, "203.0.113.7", loopback_only=False) == [
        f"/ip4/203.0.113.7/tcp/4001/p2p/{PID}"
    ]
    assert advertised_multiaddrs(addrs[:1], "node.example.org", loopback_only=False) == [
        f"/dns4/node.example.org/tcp/4001/p2p/{PID}"
    ]
    assert advertised_multiaddrs(addrs[:1], "2001:db8::1", loopback_only=False) == [
        f"/ip6/2001:db8::1/tcp/4001/p2p/{PID}"
    ]


def test_http_url() -> None:
    assert advertised_http_url("https://data.example.org/", "http://0.0.0.0:8080", "x") == (
        "https://data.example.org"
    )
    assert advertised_http_url("", "http://0.0.0.0:8080", "203.0.113.7") == (
        "http://203.0.113.7:8080"
    )
    assert advertised_http_url("", "http://10.77.0.11:8080", "") == "http://10.77.0.11:8080"
    assert advertised_http_url("", "http://0.0.0.0:8080", "2001:db8::1") == (
        "http://[2001:db8::1]:8080"
    )
