"""One-time login tokens and console sessions (virtual clock, deterministic randomness)."""

from __future__ import annotations

import itertools

import pytest

from node.console.sessions import MAX_LOGINS, ConsoleSessions

NS = 1_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000 * NS

    def __call__(self) -> int:
        return self.now


def _rng() -> object:
    counter = itertools.count(1)
    return lambda n: next(counter).to_bytes(n, "big")


def _sessions(clock: Clock, **kw: float) -> ConsoleSessions:
    return ConsoleSessions(clock, _rng(), **kw)  # type: ignore[arg-type]


def test_a_login_token_is_redeemed_once() -> None:
    clock = Clock()
    s = _sessions(clock)
    token, ttl = s.issue_login()
    assert ttl == 120
    session = s.redeem(token)
    assert session is not None and session != token
    assert s.check(session) is not None
    assert s.redeem(token) is None  # reused
    assert s.redeem("0" * 64) is None  # never issued


def test_login_tokens_and_sessions_expire() -> None:
    clock = Clock()
    s = _sessions(clock, login_ttl_s=10, session_ttl_s=100)
    late, _ = s.issue_login()
    token, _ = s.issue_login()
    clock.now += 9 * NS
    session = s.redeem(token)
    assert session is not None
    clock.now += 2 * NS
    assert s.redeem(late) is None  # 11 s after issue
    clock.now += 97 * NS  # 99 s after its login: valid until 100 s
    assert s.check(session) is not None
    clock.now += 1 * NS
    assert s.check(session) is None
    assert s.session_count == 0


def test_logout_and_bounds() -> None:
    clock = Clock()
    s = _sessions(clock)
    tokens = [s.issue_login()[0] for _ in range(MAX_LOGINS + 1)]
    assert s.redeem(tokens[0]) is None  # the oldest was evicted
    session = s.redeem(tokens[-1])
    assert s.end(session) is True
    assert s.check(session) is None
    assert s.end(session) is False
    assert s.check(None) is None and s.check("") is None


def test_rng_must_give_full_length() -> None:
    s = ConsoleSessions(Clock(), lambda n: b"\x00" * (n - 1))
    with pytest.raises(ValueError, match="expected 32"):
        s.issue_login()
