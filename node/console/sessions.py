"""One-time login tokens and console sessions, in memory (a restart logs everybody out).

``odf-node ui`` asks the daemon (over the token-authenticated RPC) for a login token and prints
a URL carrying it; the page exchanges it once for a session, whose id travels only in an
``HttpOnly; SameSite=Strict`` cookie. Only SHA-256 digests of tokens and session ids are kept,
so a lookup's timing says nothing about a secret. Both tables are bounded: a new entry beyond
the bound evicts the oldest one.
"""

from __future__ import annotations

import hashlib
import secrets
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

NS_PER_S: Final = 1_000_000_000
LOGIN_TTL_S: Final = 120.0
"""A login URL must be opened within two minutes of ``odf-node ui``."""
SESSION_TTL_S: Final = 12 * 3600.0
"""A session ends 12 hours after login (log in again with ``odf-node ui``)."""
MAX_LOGINS: Final = 16
MAX_SESSIONS: Final = 64
SECRET_BYTES: Final = 32


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


@dataclass(frozen=True)
class Session:
    """A logged-in browser: when it logged in and until when the session is valid."""

    created_ns: int
    expires_ns: int


class ConsoleSessions:
    """Issues one-time login tokens, redeems them for sessions and checks sessions.

    Args:
        clock: nanoseconds since the Unix epoch.
        rng: ``n -> n random bytes`` (``secrets.token_bytes`` in the daemon).
    """

    def __init__(
        self,
        clock: Callable[[], int],
        rng: Callable[[int], bytes] = secrets.token_bytes,
        *,
        login_ttl_s: float = LOGIN_TTL_S,
        session_ttl_s: float = SESSION_TTL_S,
    ) -> None:
        self._clock = clock
        self._rng = rng
        self._login_ttl_ns = int(login_ttl_s * NS_PER_S)
        self._session_ttl_ns = int(session_ttl_s * NS_PER_S)
        self._logins: OrderedDict[bytes, int] = OrderedDict()  # digest -> expiry
        self._sessions: OrderedDict[bytes, Session] = OrderedDict()

    def _secret(self) -> str:
        raw = self._rng(SECRET_BYTES)
        if len(raw) != SECRET_BYTES:
            raise ValueError(f"rng returned {len(raw)} bytes, expected {SECRET_BYTES}")
        return raw.hex()

    def issue_login(self) -> tuple[str, float]:
        """A new one-time login token and its lifetime in seconds."""
        self._expire()
        token = self._secret()
        self._logins[_digest(token)] = self._clock() + self._login_ttl_ns
        while len(self._logins) > MAX_LOGINS:
            self._logins.popitem(last=False)
        return token, self._login_ttl_ns / NS_PER_S

    def redeem(self, token: str) -> str | None:
        """Exchange a login token for a new session id; None if unknown, used or expired."""
        self._expire()
        expiry = self._logins.pop(_digest(token), None)  # one use only, whatever happens next
        if expiry is None:
            return None
        now = self._clock()
        session_id = self._secret()
        self._sessions[_digest(session_id)] = Session(now, now + self._session_ttl_ns)
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.popitem(last=False)
        return session_id

    def check(self, session_id: str | None) -> Session | None:
        """The session of ``session_id`` if it is valid now."""
        if not session_id:
            return None
        session = self._sessions.get(_digest(session_id))
        if session is None or session.expires_ns <= self._clock():
            return None
        return session

    def end(self, session_id: str | None) -> bool:
        """Log a session out; whether it existed."""
        if not session_id:
            return False
        return self._sessions.pop(_digest(session_id), None) is not None

    @property
    def session_count(self) -> int:
        """Sessions not yet expired."""
        self._expire()
        return len(self._sessions)

    def _expire(self) -> None:
        now = self._clock()
        for digest in [d for d, exp in self._logins.items() if exp <= now]:
            del self._logins[digest]
        for digest in [d for d, s in self._sessions.items() if s.expires_ns <= now]:
            del self._sessions[digest]


__all__ = ["LOGIN_TTL_S", "SESSION_TTL_S", "ConsoleSessions", "Session"]
