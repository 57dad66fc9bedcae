"""An engine worker: a long-lived process serving the ODF engine gRPC protocol.

``python -m engine.worker --listen 127.0.0.1:2884`` (or ``--listen unix:/path/engine.sock``)
serves Spark; ``--engine datafusion`` serves the DataFusion release importable by the Python
that runs it (the node starts one worker per pinned release, each from its own virtual
environment; ``READY`` then also names the version).

Service ``engine.Engine`` (``schemas/engine.proto``), both RPCs server-streaming, payloads are
FlatBuffers in the single ``bytes flatbuffer = 1`` field of each protobuf message (encoded by
hand: one length-delimited field needs no protobuf runtime):

* ``ExecuteTransform(TransformRequest) -> stream TransformResponse``: one ``Progress``, then
  ``Success`` / ``InvalidQuery`` / ``InternalError``;
* ``ExecuteRawQuery(RawQueryRequest) -> stream RawQueryResponse``: the query over the view
  ``input`` (the given parquet files), one parquet file out (ingest preprocessing);
* ``ExecuteTransformBatch`` (odf-node's extension, not in kamu's engines): several
  ``TransformRequest`` flatbuffers in one message (``repeated bytes flatbuffers = 1``), run one
  after the other; the answer is one message holding a ``TransformResponseRoot`` per request, in
  order (no ``Progress``). A replay sends its blocks this way so that the per-call cost of
  Python gRPC (~2-4 ms on the development machine, more than DataFusion's own work on a small
  block) is paid once per batch rather than once per block.

``--protocol frames`` (DataFusion only; the node's own DataFusion workers run so) serves
odf-node's framed protocol (:mod:`coordinator.transform.frames`) on the ``unix:`` socket
instead of gRPC: batches of ``TransformRequest`` in, their answers out, in order, one connection
at a time. A replay's request asks for its output as an Arrow IPC file rather than Parquet
(``arrow_output``; the node hashes it, see ``coordinator/transform/output.py``), and the
answer says which the worker wrote.

The SparkSession is created once, before the server starts listening (so "connectable" means
"warm"), and every request runs in ``spark.newSession()``. Requests are served one at a time.
``READY <address>`` is printed on stdout once serving.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any, TypeVar

from coordinator.transform.fbs import (
    decode_raw_query_request,
    decode_transform_request,
    encode_raw_query_response,
    encode_transform_response,
    unwrap_protobuf,
    unwrap_protobuf_many,
    wrap_protobuf,
    wrap_protobuf_many,
)
from coordinator.transform.frames import (
    ARROW_OUTPUT,
    PROTOCOL_ERROR,
    TRANSFORM_ANSWERS,
    TRANSFORM_BATCH,
    ConnectionLost,
    FrameError,
    decode_request,
    read_frame,
    write_frame,
)
from coordinator.transform.model import (
    TransformInternalError,
    TransformRequest,
    TransformResponse,
    TransformSuccess,
)
from coordinator.transform.output import remove_outputs
from engine.lifeline import watch_lifeline

SERVICE = "engine.Engine"
DEFAULT_ADDRESS = "127.0.0.1:2884"
CRASH_ENV = "ODF_ENGINE_CRASH_FILE"
"""Test hook: if this names a file holding N > 0, the worker writes N - 1 to it, leaves a partial
output file and dies mid-request (so N consecutive requests crash)."""


_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")


class EngineServicer:
    """Holds the warm engine; serialises requests."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.lock = threading.Lock()

    def execute_transform(self, request: bytes, context: Any) -> Iterator[bytes]:
        """``ExecuteTransform``: one transform, streamed as ``Progress`` then its answer."""
        return self._stream(request, decode_transform_request, encode_transform_response, self._run)

    def execute_transform_batch(self, requests: list[bytes], context: Any) -> Iterator[list[bytes]]:
        """The batch extension: every request in order, one message with all the answers."""
        with self.lock:
            answers = [self.answer(request, decode_transform_request) for request in requests]
        yield [encode_transform_response(resp) for resp in answers]

    def answer(
        self, payload: bytes, decode: Callable[[bytes], TransformRequest]
    ) -> TransformResponse:
        """One request of a batch, decoded by ``decode`` and run (the caller holds the lock);
        one that does not decode is answered as an internal error, the others still run."""
        try:
            req = decode(payload)
        except Exception as e:
            return TransformInternalError(message=f"bad request: {e}")
        return self._run(req)

    def _run(self, req: Any) -> TransformResponse:
        """One transform (the caller holds the lock); the crash hook of the tests first."""
        crash = os.environ.get(CRASH_ENV)
        if crash and os.path.exists(crash) and int(Path(crash).read_text() or 0) > 0:
            with open(crash, "r+") as f:
                n = int(f.read())
                f.seek(0)
                f.truncate()
                f.write(str(n - 1))
            req.new_data_path.parent.mkdir(parents=True, exist_ok=True)
            req.new_data_path.write_bytes(b"partial output of a crashed engine")
            os._exit(17)
        # A request's outputs start empty: the node removes what a crashed attempt left before
        # it retries, and this makes it hold even if the crashed worker's last write landed
        # after that removal.
        remove_outputs(req.new_data_path, req.new_checkpoint_path)
        resp: TransformResponse = self.engine.execute_transform(req)
        return resp

    def execute_raw_query(self, request: bytes, context: Any) -> Iterator[bytes]:
        """``ExecuteRawQuery``: one raw query, streamed as ``Progress`` then its answer."""
        return self._stream(
            request,
            decode_raw_query_request,
            encode_raw_query_response,
            self.engine.execute_raw_query,
        )

    def _stream(
        self,
        request: bytes,
        decode: Callable[[bytes], _Req],
        encode: Callable[[_Resp | TransformInternalError | None], bytes],
        run: Callable[[_Req], _Resp],
    ) -> Iterator[bytes]:
        """The shape of both server-streaming RPCs: ``Progress``, then the answer of ``run``
        (under the lock), or an internal error if ``request`` does not decode."""
        yield encode(None)  # Progress
        try:
            req = decode(request)
        except Exception as e:
            yield encode(TransformInternalError(message=f"bad request: {e}"))
            return
        with self.lock:
            resp = run(req)
        yield encode(resp)


def answer_batch(servicer: EngineServicer, payloads: list[bytes]) -> list[bytes]:
    """The parts of a ``TRANSFORM_ANSWERS`` frame for one ``TRANSFORM_BATCH`` frame."""
    out: list[bytes] = []
    with servicer.lock:
        for payload in payloads:
            resp = servicer.answer(payload, decode_request)
            arrow = isinstance(resp, TransformSuccess) and resp.arrow_output
            out.append(encode_transform_response(resp))
            out.append(ARROW_OUTPUT if arrow else b"")
    return out


def frames_listener(path: str) -> socket.socket:
    """A listening Unix socket at ``path`` (only this user may connect)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        server.bind(path)
    finally:
        os.umask(old)
    server.listen(1)
    return server


def serve_frames(servicer: EngineServicer, server: socket.socket, stop: threading.Event) -> None:
    """Serve the framed protocol on the listening ``server`` socket until ``stop`` (one
    connection at a time: the node that started the worker is its only client)."""
    server.settimeout(0.5)  # wake up to look at ``stop``
    while not stop.is_set():
        try:
            conn, _ = server.accept()
        except TimeoutError:
            continue
        with conn:
            conn.settimeout(None)
            while True:
                try:
                    kind, parts = read_frame(conn)
                    if kind != TRANSFORM_BATCH:
                        raise FrameError(f"unknown frame kind {kind}")
                except ConnectionLost:
                    break
                except FrameError as e:
                    with contextlib.suppress(OSError):
                        write_frame(conn, PROTOCOL_ERROR, [str(e).encode()])
                    break
                try:
                    write_frame(conn, TRANSFORM_ANSWERS, answer_batch(servicer, parts))
                except OSError:
                    break
    server.close()


def build_server(servicer: EngineServicer, address: str) -> Any:
    """A grpc server with the ``engine.Engine`` service bound to ``address``."""
    import grpc

    handlers = {
        "ExecuteTransform": grpc.unary_stream_rpc_method_handler(
            servicer.execute_transform,
            request_deserializer=unwrap_protobuf,
            response_serializer=wrap_protobuf,
        ),
        "ExecuteTransformBatch": grpc.unary_stream_rpc_method_handler(
            servicer.execute_transform_batch,
            request_deserializer=unwrap_protobuf_many,
            response_serializer=wrap_protobuf_many,
        ),
        "ExecuteRawQuery": grpc.unary_stream_rpc_method_handler(
            servicer.execute_raw_query,
            request_deserializer=unwrap_protobuf,
            response_serializer=wrap_protobuf,
        ),
    }
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=2),
        options=[("grpc.max_receive_message_length", 64 << 20)],
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    if server.add_insecure_port(address) == 0 and not address.startswith("unix:"):
        raise SystemExit(f"cannot bind {address}")
    return server


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    # First of all, before argument parsing or Spark: die with the node (engine/lifeline.py).
    watch_lifeline()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--listen", default=DEFAULT_ADDRESS, help="host:port or unix:/path")
    p.add_argument("--engine", default="spark", choices=("spark", "datafusion"))
    p.add_argument(
        "--protocol",
        default="grpc",
        choices=("grpc", "frames"),
        help="frames: odf-node's framed protocol on a unix: socket (DataFusion only)",
    )
    p.add_argument(
        "--master",
        default="local[*]",
        help="spark.master (local[N], spark://…, k8s://…); sc:// (Spark Connect) is refused",
    )
    p.add_argument(
        "--conf", action="append", default=[], help="extra Spark setting key=value (repeatable)"
    )
    args = p.parse_args(argv)
    if args.engine == "datafusion":
        return _serve_datafusion(args.listen, args.protocol)
    if args.protocol != "grpc":
        p.error("--protocol frames is for --engine datafusion")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from engine.spark_engine import (
        CONNECT_REFUSAL,
        SparkEngine,
        create_spark_session,
        is_connect_master,
    )

    if is_connect_master(args.master):
        # Refused before any session exists: a Connect session would run the query text on
        # the server before the sandbox could look at it (see docs/spark-engine.md).
        print(f"odf engine worker: {CONNECT_REFUSAL}", file=sys.stderr, flush=True)
        return 2

    extra = dict(kv.split("=", 1) for kv in args.conf)
    spark = create_spark_session(args.master, extra)
    server = build_server(EngineServicer(SparkEngine(spark)), args.listen)
    server.start()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    parent = os.getppid()

    def watch_parent() -> None:
        # If the node that started us dies (even by SIGKILL), we are re-parented: stop, so no
        # orphaned Spark JVM keeps gigabytes of memory for nobody.
        while not stop.wait(1.0):
            if os.getppid() != parent:
                stop.set()

    threading.Thread(target=watch_parent, name="parent-watch", daemon=True).start()
    print(f"READY {args.listen}", flush=True)
    stop.wait()
    server.stop(grace=2).wait()
    try:
        spark.stop()
    except Exception:
        pass
    return 0


def _serve_datafusion(listen: str, protocol: str) -> int:
    from engine.datafusion_engine import DataFusionEngine

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if protocol == "frames":
        if not listen.startswith("unix:"):
            raise SystemExit("--protocol frames needs a unix: socket")
        engine = DataFusionEngine()
        listener = frames_listener(listen.removeprefix("unix:"))  # connectable from here on
        threading.Thread(
            target=serve_frames,
            args=(EngineServicer(engine), listener, stop),
            name="frames",
            daemon=True,
        ).start()
        print(f"READY {listen} datafusion {engine.version}", flush=True)
        stop.wait()
        return 0
    engine = DataFusionEngine()
    server = build_server(EngineServicer(engine), listen)
    server.start()
    print(f"READY {listen} datafusion {engine.version}", flush=True)
    stop.wait()
    server.stop(grace=2).wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
