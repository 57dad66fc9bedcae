"""Orchestration helpers for clusters of :mod:`p2p.devnode` processes (tests and benchmarks).

Run only inside a loopback-only network namespace; the node processes refuse to start otherwise.
Processes are started by this module and stopped by their own PID only.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


class DevNode:
    """One ``python -m p2p.devnode`` child process and the JSON events it printed."""

    def __init__(self, idx: int, seed: bytes, did: str) -> None:
        """Describe node ``idx`` with its 32-byte ``seed``, following dataset ``did``."""
        self.idx, self.seed, self.did = idx, seed, did
        self.events: list[dict[str, Any]] = []
        self.proc: asyncio.subprocess.Process | None = None
        self.ready = asyncio.Event()
        self.addr = ""
        self.peer_id = ""
        self.life = 0
        self._reader: asyncio.Future[None] | None = None

    async def start(self) -> None:
        """Spawn the process (again, for a restart: ``life`` counts the incarnations)."""
        self.life += 1
        self.ready = asyncio.Event()
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "p2p.devnode",
            "--seed",
            self.seed.hex(),
            "--follow",
            self.did,
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self._reader = asyncio.ensure_future(self._read(self.proc, self.life))

    async def _read(self, proc: asyncio.subprocess.Process, life: int) -> None:
        assert proc.stdout is not None
        async for line in proc.stdout:
            ev = json.loads(line)
            ev["life"] = life
            self.events.append(ev)
            if ev["event"] == "ready":
                self.addr, self.peer_id = ev["addr"], ev["peer_id"]
                self.ready.set()

    async def send(self, line: str) -> None:
        """Write a command line (``connect <multiaddr>`` or ``quit``) to the node's stdin."""
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write((line + "\n").encode())
        await self.proc.stdin.drain()

    async def stop(self) -> None:
        """Ask the node to quit; kill it by PID after 10 s."""
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        try:
            await self.send("quit")
            await asyncio.wait_for(proc.wait(), 10)
        except (TimeoutError, ConnectionError):
            proc.kill()
            await proc.wait()

    def cpu_seconds(self) -> float:
        """User + system CPU time of the live process (``/proc/<pid>/stat``)."""
        if self.proc is None or self.proc.returncode is not None:
            return 0.0
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def of(self, kind: str, life: int | None = None) -> list[dict[str, Any]]:
        """Events of type ``kind`` (of one incarnation, if given)."""
        return [
            e for e in self.events if e["event"] == kind and (life is None or e["life"] == life)
        ]


async def wait_until(pred: Callable[[], bool], timeout: float) -> bool:
    """Poll ``pred`` every 50 ms for up to ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        await asyncio.sleep(0.05)
    return bool(pred())
