"""The child side of :class:`~p2p.libp2p_process.Libp2pProcessTransport`.

``python -m p2p.libp2p_child FD``: ``FD`` is this end of the socket pair the daemon made. The
first frame carries the :class:`~p2p.libp2p_host.Libp2pConfig`; this process then runs a
:class:`~p2p.libp2p_host.Libp2pTransport` (its libp2p host in a trio thread, as in a daemon
without the process split) and relays calls, messages, validations and requests over the socket
(frame format in ``p2p/libp2p_process.py``).

It follows the daemon and nothing else: SIGINT and SIGTERM are ignored (a Ctrl-C or a service
manager's stop reaches the daemon, which sends ``stop``), and end of file on the socket (the
daemon ended, however it ended) stops the host and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import json
import logging
import os
import signal
import socket
import sys
import time
from typing import Any

from p2p import libp2p_unloaded
from p2p.libp2p_host import Libp2pConfig, Libp2pTransport
from p2p.libp2p_process import (
    ANSWER_TIMEOUT_S,
    MAX_FRAME,
    error_kind,
    read_frame,
    write_frame,
)
from p2p.transport import TransportError, ValidationResult
from procutil.heap import trim_heap

_TRIM_HEAP_EVERY_S = 60.0

log = logging.getLogger("p2p.libp2p_child")


class _Relay:
    """One transport and the socket to the daemon."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.transport: Libp2pTransport | None = None
        self.ids = itertools.count(1)
        self.waiting: dict[int, asyncio.Future[Any]] = {}
        self.tasks: set[asyncio.Task[Any]] = set()
        self.stopped = asyncio.Event()

    def send(self, frame: tuple[Any, ...]) -> None:
        if not self.writer.is_closing():
            write_frame(self.writer, frame)

    def spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def ask(self, frame_of: Any) -> Any:
        """Send a question to the daemon and wait for its answer (``None`` on timeout)."""
        qid = next(self.ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiting[qid] = fut
        self.send(frame_of(qid))
        try:
            return await asyncio.wait_for(fut, ANSWER_TIMEOUT_S)
        except TimeoutError:
            return None
        finally:
            self.waiting.pop(qid, None)

    # ---- calls from the daemon

    async def call(self, cid: int, name: str, args: tuple[Any, ...]) -> None:
        t = self.transport
        assert t is not None
        try:
            value: Any = None
            if name == "connect":
                value = await t.connect(args[0], exact=len(args) > 1 and bool(args[1]))
            elif name == "publish":
                await t.publish(args[0], args[1])
            elif name == "topic_peers":
                value = {k: sorted(v) for k, v in (await t.topic_peers()).items()}
            elif name == "request":
                value = await t.request(args[0], args[1], args[2], args[3])
            elif name == "subscribe":
                await self.subscribe(args[0])
            elif name == "join":
                await t.join(args[0])
            elif name == "set_validator":
                self.set_validator(args[0])
            elif name == "set_request_handler":
                self.set_request_handler(args[0])
            elif name == "reachability":
                value = t.reachability()
            elif name == "hole_punching":
                value = t.hole_punching()
            else:
                raise TransportError(f"unknown call {name!r}")
        except Exception as e:
            self.send(("result", cid, False, (error_kind(e), str(e)[:500])))
            return
        self.send(("result", cid, True, value))

    async def subscribe(self, topic: str) -> None:
        t = self.transport
        assert t is not None
        messages = t.subscribe(topic)
        await t.wait_joined(topic)

        async def pump() -> None:
            async for gm in messages:
                self.send(("msg", gm.topic, gm.data, gm.source))
                await self.writer.drain()

        self.spawn(pump())

    def set_validator(self, topic: str) -> None:
        async def validate(peer: str, data: bytes) -> ValidationResult:
            answer = await self.ask(lambda qid: ("validate", qid, topic, peer, data))
            return ValidationResult(answer) if answer is not None else ValidationResult.IGNORE

        assert self.transport is not None
        self.transport.set_validator(topic, validate)

    def set_request_handler(self, protocol: str) -> None:
        async def handle(peer: str, data: bytes) -> bytes:
            answer = await self.ask(lambda qid: ("handle", qid, protocol, peer, data))
            if answer is None or not answer[0]:
                raise TransportError(f"{protocol}: no answer")
            return bytes(answer[1])

        assert self.transport is not None
        self.transport.set_request_handler(protocol, handle)

    async def watch_peers(self, interval_s: float) -> None:
        last: tuple[str, ...] | None = None
        next_trim = time.monotonic() + _TRIM_HEAP_EVERY_S
        while True:
            assert self.transport is not None
            peers = tuple(self.transport.connected_peers())
            if peers != last:
                last = peers
                self.send(("peers", peers))
            if time.monotonic() >= next_trim:
                next_trim = time.monotonic() + _TRIM_HEAP_EVERY_S
                # Cyclic garbage first (closed connections' coroutines, frames and tracebacks
                # wait for a full collection, which at this heap's size comes about every ten
                # minutes: one found 2,168 such objects, 0.4 MB, in a bench-longrun child;
                # ~50 ms), then freed memory back to the OS (procutil/heap.py).
                gc.collect()
                trim_heap()
            await asyncio.sleep(interval_s)


def _report_memory() -> None:
    """``SIGUSR2`` on a traced process: baseline first, then growth, on standard error."""
    from procutil.memdebug import debug_memory

    sys.stderr.write(f"memdebug {json.dumps(debug_memory())}\n")
    sys.stderr.flush()


async def _main(fd: int) -> None:
    from procutil.memdebug import start_if_requested

    if start_if_requested():
        # A leak hunt (docs/operations.md): the daemon's RPC cannot reach into this process.
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR2, _report_memory)
    sock = socket.socket(fileno=fd)
    reader, writer = await asyncio.open_unix_connection(sock=sock, limit=MAX_FRAME)
    relay = _Relay(writer)
    first = await read_frame(reader)
    if first is None or first[0] != "start":
        return
    config = Libp2pConfig.from_frame(dict(first[1]))
    transport = Libp2pTransport(config)
    try:
        await transport.start()
    except Exception as e:
        write_frame(writer, ("failed", error_kind(e), str(e)[:500]))
        with contextlib.suppress(Exception):
            await writer.drain()
        return
    relay.transport = transport
    write_frame(writer, ("ready", transport.peer_id, transport.listen_addrs()))
    relay.spawn(relay.watch_peers(config.peer_watch_interval_s))
    try:
        while True:
            frame = await read_frame(reader)
            if frame is None or frame[0] == "stop":
                break
            kind = frame[0]
            if kind == "call":
                relay.spawn(relay.call(frame[1], frame[2], tuple(frame[3])))
            elif kind == "verdict":
                fut = relay.waiting.get(frame[1])
                if fut is not None and not fut.done():
                    fut.set_result(frame[2])
            elif kind == "response":
                fut = relay.waiting.get(frame[1])
                if fut is not None and not fut.done():
                    fut.set_result((frame[2], frame[3]))
            # Bulk sends (message pumps) drain here, where the loop reads anyway.
            await writer.drain()
    finally:
        for task in list(relay.tasks):
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(transport.stop(), 10)
        writer.close()


def main() -> None:
    """Entry point: ``python -m p2p.libp2p_child FD``."""
    # Before anything imports libp2p: its subsystems odf-node never starts stay unloaded.
    libp2p_unloaded.install()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s libp2p-process %(name)s: %(message)s",
    )
    # The same GIL switch interval as the daemon: the relay loop answers validations promptly
    # while the trio thread runs.
    sys.setswitchinterval(0.001)
    asyncio.run(_main(int(sys.argv[1])))
    # The trio thread is a daemon thread; leave without waiting on anything it holds.
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
