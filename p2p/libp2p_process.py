"""The gossip host in a process of its own: :class:`Libp2pProcessTransport`.

py-libp2p is pure Python. Run in a thread of the daemon (``p2p/libp2p_host.py``), it held the
daemon's GIL for about half of every second under the soak benchmark's load (50 announcements/s
from 25 peers), and every JSON-RPC call, gossip validation and loop turn of the daemon queued
behind it for the lock. This transport runs the same :class:`~p2p.libp2p_host.Libp2pTransport`
in a child process (``python -m p2p.libp2p_child``) and speaks to it over one Unix socket pair:
the daemon keeps its interpreter for its own work and the libp2p host gets a core of its own.

Frames are ``u32 length || marshal(tuple)``; both ends run the same code, and marshal carries
only plain values (str, bytes, int, float, bool, None, tuples, lists, dicts). The parent sends

* ``("start", config)`` once, then ``("call", id, name, args)`` for connect, publish, topic_peers,
  request, subscribe, join, set_validator, set_request_handler, reachability and
  hole_punching;
* ``("verdict", id, value)`` and ``("response", id, ok, payload)`` answering the child;

and the child sends ``("ready", peer_id, addrs)``, ``("result", id, ok, value)``,
``("msg", topic, data, source)``, ``("peers", peer_ids)``, and ``("validate", id, peer, topic,
data)`` / ``("handle", id, protocol, peer, data)`` when a topic validator or a request handler
(both run in this process, by the protocol core) has to decide.

The socket is the child's lifeline as well: when the daemon ends for any reason, including
SIGKILL, the child reads end-of-file and exits. When the child dies on its own, this side fails
the calls in flight with :class:`TransportError`, starts a new child after a backoff and
replays the topics, validators and request handlers it had (peers reconnect through the
bootstrap list and the daemon's own redial of known peers). See ``docs/libp2p.md``, "Process
model".
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import marshal
import os
import socket
import struct
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

from p2p.errors import InvalidPeerAddress, NetworkNotIsolated
from p2p.limits import MAX_MESSAGE_SIZE
from p2p.netguard import assert_loopback_multiaddr, assert_loopback_only
from p2p.transport import (
    GossipMessage,
    HostIdentity,
    RequestHandler,
    TransportError,
    ValidationResult,
    Validator,
    delivered,
)

log = logging.getLogger(__name__)

__all__ = ["Libp2pProcessTransport", "read_frame", "write_frame"]

_LEN = struct.Struct(">I")
# Largest frame either side accepts: a request/response body (1 MiB) plus its envelope.
MAX_FRAME = (1 << 20) + 4096
_RESTART_DELAYS_S = (1.0, 2.0, 5.0, 10.0, 30.0)
# A validator or handler the daemon does not answer in time counts as "ignore" in the child.
ANSWER_TIMEOUT_S = 30.0

# Error kinds that cross the socket, so callers keep catching the classes they act on.
_ERRORS: dict[str, type[Exception]] = {
    "transport": TransportError,
    "invalid-address": InvalidPeerAddress,
    "not-isolated": NetworkNotIsolated,
}


def error_kind(exc: BaseException) -> str:
    """The wire name of ``exc``'s class (``transport`` for anything unexpected)."""
    for kind, cls in _ERRORS.items():
        if isinstance(exc, cls) and kind != "transport":
            return kind
    return "transport"


def _raise(kind: str, message: str) -> None:
    raise _ERRORS.get(kind, TransportError)(message)


async def read_frame(reader: asyncio.StreamReader) -> tuple[Any, ...] | None:
    """One frame, or ``None`` at end of file."""
    try:
        head = await reader.readexactly(4)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    (n,) = _LEN.unpack(head)
    if n > MAX_FRAME:
        raise TransportError(f"libp2p process frame of {n} bytes")
    try:
        body = await reader.readexactly(n)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    frame = marshal.loads(body)
    if not isinstance(frame, tuple) or not frame:
        raise TransportError("malformed libp2p process frame")
    return frame


def write_frame(writer: asyncio.StreamWriter, frame: tuple[Any, ...]) -> None:
    """Queue one frame (the caller drains when it sends in bulk)."""
    body = marshal.dumps(frame)
    writer.write(_LEN.pack(len(body)) + body)


class Libp2pProcessTransport(HostIdentity):
    """:class:`~p2p.transport.GossipTransport` whose libp2p host runs in a child process.

    The public surface is that of :class:`~p2p.libp2p_host.Libp2pTransport` (``start``, ``stop``,
    ``peer_id``, ``listen_addrs``, ``connect``, ``publish``, ``topic_peers``, ``subscribe``,
    ``set_validator``, ``set_request_handler``, ``request``, ``connected_peers``), so the daemon
    can use either. ``config`` is a :class:`~p2p.libp2p_host.Libp2pConfig`.
    """

    def __init__(
        self,
        config: Any,
        *,
        python: str = sys.executable,
        on_restart: Callable[[], None] | None = None,
    ) -> None:
        """Prepare (nothing runs until :meth:`start`)."""
        super().__init__()
        self.config = config
        self._python = python
        self._proc: subprocess.Popen[bytes] | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._ids = itertools.count(1)
        self._calls: dict[int, asyncio.Future[Any]] = {}
        self._queues: dict[str, asyncio.Queue[GossipMessage]] = {}
        self._joined: dict[str, asyncio.Future[None]] = {}
        # Topics joined without delivery (``join``): no queue and no ``msg`` frames for them.
        self._joined_only: set[str] = set()
        self._validators: dict[str, Validator] = {}
        self._handlers: dict[str, RequestHandler] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._peer_snapshot: tuple[str, ...] = ()
        self._stopping = False
        self._up = asyncio.Event()
        self.restarts = 0
        """How many times the child was started again after it died (a metric)."""
        self.on_restart = on_restart

    # ---- lifecycle

    async def start(self) -> None:
        """Start the child and its host; returns once it listens.

        Raises:
            NetworkNotIsolated: a non-loopback interface exists or an address is not loopback.
            TransportError: the child could not start its host.
        """
        cfg = self.config
        if cfg.loopback_only:
            # Checked here as well as in the child, so the error names the daemon's own view.
            assert_loopback_only("the libp2p host")
            assert_loopback_multiaddr(f"/ip4/{cfg.listen_host}/tcp/{cfg.listen_port}")
            for addr in cfg.bootstrap:
                assert_loopback_multiaddr(addr)
        await self._spawn()

    async def _spawn(self) -> None:
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._proc = subprocess.Popen(
                [self._python, "-m", "p2p.libp2p_child", str(child_sock.fileno())],
                pass_fds=(child_sock.fileno(),),
                stdin=subprocess.DEVNULL,
                cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
            )
        finally:
            child_sock.close()
        reader, writer = await asyncio.open_unix_connection(sock=parent_sock, limit=MAX_FRAME)
        self._writer = writer
        write_frame(writer, ("start", dataclasses.asdict(self.config)))
        await writer.drain()
        first = await read_frame(reader)
        if first is None or first[0] != "ready":
            writer.close()
            await self._reap()
            if first is not None and first[0] == "failed":
                _raise(first[1], first[2])
            raise TransportError("the libp2p process exited during start-up")
        _, self._peer_id, addrs = first
        self._addrs = list(addrs)
        if self.config.listen_port == 0 and self._addrs:
            # A restarted child listens where its predecessor did: peers and the addresses
            # this node advertised keep working.
            port = self._addrs[0].split("/tcp/")[1].split("/")[0]
            self.config = dataclasses.replace(self.config, listen_port=int(port))
        self._reader_task = asyncio.create_task(self._read(reader), name="libp2p-process-reader")
        self._up.set()
        # What the previous child had (nothing but handlers at the first start).
        for protocol in self._handlers:
            self._send(("call", next(self._ids), "set_request_handler", (protocol,)))
        for topic in self._validators:
            self._send(("call", next(self._ids), "set_validator", (topic,)))
        for topic in self._queues:
            self._send(("call", next(self._ids), "subscribe", (topic,)))
        for topic in self._joined_only:
            self._send(("call", next(self._ids), "join", (topic,)))

    async def stop(self) -> None:
        """Stop the child (it closes its host first) and wait for it."""
        self._stopping = True
        self._up.clear()
        if self._writer is not None:
            with contextlib.suppress(Exception):
                write_frame(self._writer, ("stop",))
                await self._writer.drain()
        if self._reader_task is not None:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._reader_task), 15)
            self._reader_task.cancel()
        for t in list(self._tasks):
            t.cancel()
        if self._writer is not None:
            self._writer.close()
        await self._reap()

    async def _reap(self) -> None:
        proc = self._proc
        if proc is None:
            return
        try:
            await asyncio.wait_for(asyncio.to_thread(proc.wait), 10)
        except TimeoutError:
            proc.kill()
            await asyncio.to_thread(proc.wait)

    # ---- the child's frames

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                frame = await read_frame(reader)
                if frame is None:
                    break
                self._dispatch(frame)
        except Exception:
            log.exception("libp2p process: bad frame; restarting it")
            if self._proc is not None:
                self._proc.kill()
        self._up.clear()
        for fut in self._calls.values():
            if not fut.done():
                fut.set_exception(TransportError("the libp2p process exited"))
        self._calls.clear()
        self._peer_snapshot = ()
        if not self._stopping:
            self._spawn_task(self._restart())

    def _dispatch(self, frame: tuple[Any, ...]) -> None:
        kind = frame[0]
        if kind == "msg":
            _, topic, data, source = frame
            queue = self._queues.get(topic)
            if queue is not None:
                with contextlib.suppress(asyncio.QueueFull):
                    queue.put_nowait(GossipMessage(topic, data, source))
        elif kind == "result":
            _, cid, ok, value = frame
            fut = self._calls.pop(cid, None)
            if fut is not None and not fut.done():
                if ok:
                    fut.set_result(value)
                else:
                    fut.set_exception(_ERRORS.get(value[0], TransportError)(value[1]))
        elif kind == "validate":
            _, vid, topic, peer, data = frame
            self._spawn_task(self._validate(vid, topic, peer, data))
        elif kind == "handle":
            _, hid, protocol, peer, data = frame
            self._spawn_task(self._handle(hid, protocol, peer, data))
        elif kind == "peers":
            self._peer_snapshot = tuple(frame[1])

    async def _validate(self, vid: int, topic: str, peer: str, data: bytes) -> None:
        validator = self._validators.get(topic)
        verdict = ValidationResult.IGNORE
        if validator is not None:
            try:
                verdict = await validator(peer, data)
            except Exception:
                log.exception("validator of %s failed", topic)
        self._send(("verdict", vid, verdict.value))

    async def _handle(self, hid: int, protocol: str, peer: str, data: bytes) -> None:
        handler = self._handlers.get(protocol)
        try:
            if handler is None:
                raise TransportError(f"no handler for {protocol}")
            response = await handler(peer, data)
        except Exception as e:
            self._send(("response", hid, False, str(e)[:200]))
            return
        self._send(("response", hid, True, response))

    async def _restart(self) -> None:
        """Start a new child after the old one died; replay topics, validators and handlers."""
        code = self._proc.poll() if self._proc is not None else None
        log.error("the libp2p process exited (code %s); starting a new one", code)
        for attempt in itertools.count():
            if self._stopping:
                return
            await asyncio.sleep(_RESTART_DELAYS_S[min(attempt, len(_RESTART_DELAYS_S) - 1)])
            try:
                await self._spawn()
            except Exception as e:
                log.error("libp2p process restart failed: %s", e)
                continue
            break
        self.restarts += 1
        if self.on_restart is not None:
            self.on_restart()

    # ---- calls

    def _send(self, frame: tuple[Any, ...]) -> None:
        if self._writer is None or self._writer.is_closing():
            return
        write_frame(self._writer, frame)

    async def _call(self, name: str, *args: Any) -> Any:
        if not self._up.is_set():
            raise TransportError("the libp2p process is not running")
        cid = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._calls[cid] = fut
        self._send(("call", cid, name, args))
        try:
            return await fut
        finally:
            self._calls.pop(cid, None)

    def _spawn_task(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- GossipTransport (peer_id and listen_addrs: HostIdentity)

    async def connect(self, addr: str, *, exact: bool = False) -> str:
        """Dial a ``/ip4/.../tcp/N/p2p/ID`` multiaddr (loopback only unless open); the peer id.
        ``exact``: as :meth:`p2p.libp2p_host.Libp2pTransport.connect`."""
        if self.config.loopback_only:
            assert_loopback_multiaddr(addr)
        return str(await self._call("connect", addr, exact))

    async def publish(self, topic: str, data: bytes) -> None:
        """Publish on ``topic`` (size-capped)."""
        if len(data) > MAX_MESSAGE_SIZE:
            raise TransportError(f"message of {len(data)} bytes exceeds {MAX_MESSAGE_SIZE}")
        await self._call("publish", topic, bytes(data))

    async def topic_peers(self) -> dict[str, set[str]]:
        """Every topic's peers known to have joined it (copied from the child)."""
        raw = await self._call("topic_peers")
        return {t: set(ps) for t, ps in raw.items()}

    def subscribe(self, topic: str) -> AsyncIterator[GossipMessage]:
        """Join ``topic``; the child pumps its messages into this side's queue."""
        if topic in self._joined_only:
            raise TransportError(f"{topic} is joined without delivery; it cannot be subscribed")
        queue = self._queues.setdefault(topic, asyncio.Queue(10_000))
        joined = self._joined.get(topic)
        if joined is None:
            joined = self._joined[topic] = asyncio.ensure_future(self._call("subscribe", topic))
        return delivered(queue, joined)

    async def join(self, topic: str) -> None:
        """Join ``topic`` in the child without delivery: no ``msg`` frames, no queue."""
        if topic in self._queues:
            raise TransportError(f"{topic} is subscribed; it cannot also be joined")
        # Recorded before the call: a child that dies first is given it on its restart. Only
        # the name is kept (no future per topic); joining again is cheap and changes nothing.
        self._joined_only.add(topic)
        await self._call("join", topic)

    def set_validator(self, topic: str, validator: Validator) -> None:
        """Install an async validator (run in this process) for ``topic``."""
        if not self._up.is_set():
            raise TransportError("transport not started")
        self._validators[topic] = validator
        self._send(("call", next(self._ids), "set_validator", (topic,)))

    def set_request_handler(self, protocol: str, handler: RequestHandler) -> None:
        """Serve ``protocol`` (length-prefixed request, length-prefixed response)."""
        self._handlers[protocol] = handler
        self._send(("call", next(self._ids), "set_request_handler", (protocol,)))

    async def reachability(self) -> dict[str, Any]:
        """The host's reachability snapshot (``p2p/relay.py``; AutoNAT status, relayed
        addresses, relay service, why reservations failed)."""
        return dict(await self._call("reachability"))

    async def hole_punching(self) -> dict[str, Any]:
        """The host's hole punching (``p2p/holepunch.py``): whether it runs, the connection
        kind (``direct``/``relayed``) per connected peer and the last outcomes."""
        return dict(await self._call("hole_punching"))

    async def request(self, peer: str, protocol: str, data: bytes, timeout_s: float) -> bytes:
        """One request/response exchange on a fresh stream (run by the child)."""
        return bytes(await self._call("request", peer, protocol, bytes(data), float(timeout_s)))

    def connected_peers(self) -> list[str]:
        """Peers with an open connection: the latest snapshot the child posted."""
        return list(self._peer_snapshot)

    @property
    def pid(self) -> int | None:
        """The child's process id while it runs (for tests and the process metrics)."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None
