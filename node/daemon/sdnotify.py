"""systemd's notification protocol (``sd_notify``), without a dependency: one datagram per
message to the Unix socket named by ``$NOTIFY_SOCKET``.

The protocol (``man 3 sd_notify``; the reference implementation is
``src/libsystemd/sd-daemon/sd-daemon.c`` in ``github.com/systemd/systemd``): newline-separated
``KEY=VALUE`` assignments in one ``SOCK_DGRAM`` datagram to ``$NOTIFY_SOCKET``, a filesystem
path or, when it starts with ``@``, an abstract socket (the ``@`` stands for a leading NUL byte).
The daemon sends ``STATUS=`` lines while its services start, ``READY=1`` once every one is up
(with ``Type=notify`` systemd holds dependent units until then), ``WATCHDOG=1`` every half of
``$WATCHDOG_USEC`` from its event loop (with ``WatchdogSec=`` systemd restarts a node whose loop
stopped turning: a blocked loop stops pinging) and ``STOPPING=1`` when shutdown begins.

Without ``$NOTIFY_SOCKET`` (not under systemd) every call does nothing. A send never blocks and
never raises: the socket is non-blocking and a failure is logged once, since a notification
must not be what stops a node.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Mapping

log = logging.getLogger("odf_node.daemon")


class Notifier:
    """Sends notifications to ``$NOTIFY_SOCKET`` (no-op without it); see the module docstring."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        raw = env.get("NOTIFY_SOCKET", "")
        self.address: str | None = None
        if raw.startswith("@"):
            self.address = "\0" + raw[1:]
        elif raw.startswith("/"):
            self.address = raw
        self.watchdog_usec = _watchdog_usec(env)
        self._sock: socket.socket | None = None
        self._warned = False

    @property
    def enabled(self) -> bool:
        """Whether a notification socket is configured."""
        return self.address is not None

    @property
    def watchdog_interval_s(self) -> float | None:
        """How often to send ``WATCHDOG=1``: half of ``$WATCHDOG_USEC`` (``None``: no watchdog)."""
        if not self.enabled or not self.watchdog_usec:
            return None
        return self.watchdog_usec / 2 / 1_000_000

    def send(self, *assignments: str) -> bool:
        """Send ``KEY=VALUE`` assignments in one datagram; whether it was sent."""
        if self.address is None:
            return False
        message = "\n".join(assignments).encode("utf-8", "replace")
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                self._sock.setblocking(False)
            self._sock.sendto(message, self.address)
            return True
        except OSError as e:
            if not self._warned:
                self._warned = True
                log.warning("systemd notification to %r failed: %s", self.address, e)
            return False

    def status(self, text: str) -> bool:
        """``STATUS=text`` (``systemctl status`` shows it)."""
        return self.send(f"STATUS={text}")

    def ready(self, text: str) -> bool:
        """``READY=1`` with a status line."""
        return self.send("READY=1", f"STATUS={text}")

    def stopping(self) -> bool:
        """``STOPPING=1``."""
        return self.send("STOPPING=1", "STATUS=stopping")

    def close(self) -> None:
        """Close the socket (idempotent)."""
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()


def _watchdog_usec(env: Mapping[str, str]) -> int:
    """``$WATCHDOG_USEC`` if it is meant for this process (``$WATCHDOG_PID`` unset or ours)."""
    pid = env.get("WATCHDOG_PID")
    if pid and pid.strip() != str(os.getpid()):
        return 0
    try:
        return max(0, int(env.get("WATCHDOG_USEC", "0")))
    except ValueError:
        return 0


async def ping_watchdog(
    notifier: Notifier,
    interval_s: float,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> None:
    """Send ``WATCHDOG=1`` every ``interval_s`` until cancelled. It runs on the event loop on
    purpose: a loop that is blocked does not ping, and systemd restarts the node."""
    while True:
        notifier.send("WATCHDOG=1")
        await sleep(interval_s)


__all__ = ["Notifier", "ping_watchdog"]
