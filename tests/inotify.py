"""Every inotify event on some paths, whichever process causes it (tests of file access).

The kernel reports opens, reads, listings and writes of a watched file or directory by any
process, in any language (a JVM, a Rust library, Python), which makes it the witness of the
sandbox tests: a hostile query must cause no event on a canary.
"""

from __future__ import annotations

import ctypes
import os
import struct
from pathlib import Path

IN_ACCESS = 0x001
IN_OPEN = 0x020
IN_ALL_EVENTS = 0xFFF


class Inotify:
    """Every inotify event on the watched paths (via libc; sees all processes)."""

    def __init__(self, *paths: Path) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK)
        assert self.fd >= 0
        for p in paths:
            assert self.libc.inotify_add_watch(self.fd, str(p).encode(), IN_ALL_EVENTS) >= 0

    def events(self) -> list[tuple[int, str]]:
        out: list[tuple[int, str]] = []
        while True:
            try:
                buf = os.read(self.fd, 65536)
            except BlockingIOError:
                return out
            i = 0
            while i < len(buf):
                _wd, mask, _cookie, length = struct.unpack_from("iIII", buf, i)
                name = buf[i + 16 : i + 16 + length].rstrip(b"\0").decode()
                out.append((mask, name))
                i += 16 + length

    def close(self) -> None:
        os.close(self.fd)
