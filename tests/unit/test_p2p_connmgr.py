"""The gossip host's connection manager (``p2p/connmgr.py``), on a fake clock."""

from __future__ import annotations

import pytest

from p2p.connmgr import ConnectionManager, ConnLimits, PeerConn


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _mgr(clock: Clock, **kw: object) -> ConnectionManager:
    limits = ConnLimits(**{"high_water": 4, "low_water": 2, "grace_s": 10.0, **kw})  # type: ignore[arg-type]
    return ConnectionManager(limits, clock, protected=frozenset({"boot"}))


def _conns(*names: str, ip: str = "10.0.0.1", inbound: bool = True) -> list[PeerConn]:
    return [PeerConn(n, ip, inbound) for n in names]


def test_trims_to_low_water_inbound_newest_first_sparing_grace_and_bootstrap() -> None:
    clock = Clock()
    mgr = _mgr(clock)
    out = [PeerConn("out1", "10.0.0.9", False)]
    assert mgr.update(_conns("boot", "old1") + out) == []
    clock.t += 1
    assert mgr.update(_conns("boot", "old1", "old2") + out) == []
    clock.t += 60
    # 6 > 4 peers: down to 2 if it can. new1 and new2 are within their grace period and boot is
    # protected, so old2 (the newer), old1 (inbound before outbound), then out1 go.
    peers = _conns("boot", "old1", "old2", "new1", "new2") + out
    assert mgr.update(peers) == ["old2", "old1", "out1"]
    assert mgr.trimmed == 3
    clock.t += 30
    assert mgr.update(_conns("boot", "new1", "new2")) == []  # under high water: nothing more


def test_outbound_trimmed_only_after_inbound() -> None:
    clock = Clock()
    mgr = _mgr(clock, grace_s=0.0)
    peers = _conns("in1") + [PeerConn(f"out{i}", "10.0.0.9", False) for i in range(4)]
    drop = mgr.update(peers)
    assert drop[0] == "in1" and len(drop) == 3 and "boot" not in drop


def test_per_ip_cap_disconnects_new_inbound_at_once() -> None:
    clock = Clock()
    mgr = _mgr(clock, max_per_ip=2, high_water=50, low_water=40)
    assert mgr.update(_conns("a", "b")) == []
    # A third inbound peer from the same address goes at once (no grace); another address and
    # the bootstrap peer are not capped, nor an outbound connection this node chose to make.
    new = _conns("a", "b", "c", "boot") + _conns("d", ip="10.0.0.2")
    new.append(PeerConn("e", "10.0.0.1", False))
    assert mgr.update(new) == ["c"]
    assert mgr.refused_per_ip == 1
    # Two arriving together past the cap: both go.
    assert mgr.update([*new[:2], *_conns("f", "g")]) == ["f", "g"]


PRIV = "/ip4/192.168.7.2/tcp/4001/p2p/p"
RELAYED = "/ip4/10.0.0.1/tcp/4001/p2p/relay/p2p-circuit/p2p/p"


def test_dial_backoff_doubles_resets_and_spares_bootstrap() -> None:
    clock = Clock()
    mgr = _mgr(clock, dial_backoff_base_s=5.0, dial_backoff_max_s=12.0)
    assert mgr.dial_wait_s("p", PRIV) == 0
    mgr.dial_failed("p", PRIV)
    assert mgr.dial_wait_s("p", PRIV) == 5.0
    clock.t += 5
    assert mgr.dial_wait_s("p", PRIV) == 0
    mgr.dial_failed("p", PRIV)
    assert mgr.dial_wait_s("p", PRIV) == 10.0
    clock.t += 10
    mgr.dial_failed("p", PRIV)
    assert mgr.dial_wait_s("p", PRIV) == 12.0  # capped
    mgr.dial_succeeded("p")
    assert mgr.dial_wait_s("p", PRIV) == 0
    mgr.dial_failed("boot", "/ip4/10.0.0.1/tcp/4001/p2p/boot")
    assert mgr.dial_wait_s("boot", "/ip4/10.0.0.1/tcp/4001/p2p/boot") == 0  # p2p/redial.py


def test_dial_backoff_is_per_address_a_new_address_is_dialled_at_once() -> None:
    # The NAT lab's case (docs/nat.md): the private address failed for a while; the relayed
    # address that a later discovery record brings is dialled at once, while the private one
    # still backs off. A success resets both.
    clock = Clock()
    mgr = _mgr(clock, dial_backoff_base_s=5.0, dial_backoff_max_s=300.0)
    for _ in range(3):
        mgr.dial_failed("p", PRIV)
        clock.t += 1
    assert mgr.dial_wait_s("p", PRIV) == 19.0  # 20 s after the third failure, 1 s ago
    assert mgr.dial_wait_s("p", RELAYED) == 0
    assert mgr.dial_wait_s("q", PRIV.replace("/p2p/p", "/p2p/q")) == 0  # another peer
    mgr.dial_failed("p", RELAYED)
    assert mgr.dial_wait_s("p", RELAYED) == 5.0  # its own first failure, not the peer's fourth
    assert mgr.dial_wait_s("p", PRIV) == 19.0
    mgr.dial_succeeded("p")
    assert mgr.dial_wait_s("p", PRIV) == mgr.dial_wait_s("p", RELAYED) == 0
    assert mgr._entries == 0 and mgr._backoff == {}


def test_dial_backoff_memory_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from p2p import connmgr

    monkeypatch.setattr(connmgr, "MAX_BACKOFF_ENTRIES", 8)
    clock = Clock()
    mgr = _mgr(clock, dial_backoff_base_s=5.0, dial_backoff_max_s=300.0)
    # Expired entries go first: four old failures, expired, then five fresh ones.
    for i in range(4):
        mgr.dial_failed(f"old{i}", f"/ip4/10.1.0.{i}/tcp/1/p2p/old{i}")
    clock.t += 60
    for i in range(5):
        mgr.dial_failed("flood", f"/ip4/10.2.0.{i}/tcp/1/p2p/flood")
    assert mgr._entries == 5 and set(mgr._backoff) == {"flood"}
    # All running: those ending soonest go, down to three quarters of the cap, and a later
    # failure of a kept address still doubles.
    for i in range(5, 9):
        clock.t += 1
        mgr.dial_failed("flood", f"/ip4/10.2.0.{i}/tcp/1/p2p/flood")
    assert mgr._entries == sum(len(a) for a in mgr._backoff.values()) <= 8
    kept = mgr._backoff["flood"]
    assert "/ip4/10.2.0.8/tcp/1/p2p/flood" in kept and "/ip4/10.2.0.0/tcp/1/p2p/flood" not in kept
    mgr.dial_failed("flood", "/ip4/10.2.0.8/tcp/1/p2p/flood")
    assert mgr.dial_wait_s("flood", "/ip4/10.2.0.8/tcp/1/p2p/flood") == 10.0


def test_limits_are_checked() -> None:
    with pytest.raises(ValueError, match="low_water"):
        ConnLimits(high_water=2, low_water=3)
    with pytest.raises(ValueError, match="dial_backoff"):
        ConnLimits(dial_backoff_base_s=10, dial_backoff_max_s=5)


def test_reservations_kept_spare_peers_from_trim_and_per_ip_cap() -> None:
    # On a relay, the peers holding a slot (``keep``, from p2p/relay.py) are reachable only
    # through their connection: neither the water marks nor the per-IP cap (private nodes
    # behind one NAT share its address) disconnect them; the others still go.
    clock = Clock()
    mgr = _mgr(clock, grace_s=0.0, max_per_ip=1)
    assert mgr.update(_conns("r1")) == []
    nat = _conns("r1", "r2", "r3")
    assert mgr.update(nat, keep={"r2"}) == ["r3"]
    clock.t += 1
    crowd = _conns("r1", "r2") + [PeerConn(f"p{i}", f"10.0.1.{i}", True) for i in range(4)]
    drop = mgr.update(crowd, keep={"r1", "r2"})
    assert len(drop) == 4 and not {"r1", "r2"} & set(drop)
    # Without the reservations they would be trimmed like any inbound peer.
    clock.t += 1
    crowd = _conns("r1", "r2") + [PeerConn(f"q{i}", f"10.0.2.{i}", False) for i in range(3)]
    assert {"r1", "r2"} <= set(mgr.update(crowd))
