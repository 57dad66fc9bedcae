"""A plain threaded HTTP server on 127.0.0.1 serving a dataset directory, with scripted
misbehaviour per path (trickle, delayed headers, redirect). Runs in its own thread, so a
trickling response does not share the event loop of the pull under test."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@dataclass
class Trickle:
    """Send the body ``chunk`` bytes at a time, ``interval_s`` apart."""

    interval_s: float
    chunk: int = 1
    content_length: bool = True


@dataclass
class Behaviour:
    """What the server does; paths are relative to ``/ds/``."""

    trickle: dict[str, Trickle] = field(default_factory=dict)
    header_delay_s: dict[str, float] = field(default_factory=dict)
    redirect: dict[str, str] = field(default_factory=dict)
    hits: Counter[str] = field(default_factory=Counter)


@contextmanager
def serve_dir(root: Path, behaviour: Behaviour | None = None) -> Iterator[tuple[str, Behaviour]]:
    """Serve ``root`` at ``http://127.0.0.1:<port>/ds``; yields the base URL and the script."""
    b = behaviour or Behaviour()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            try:
                self._get()
            except OSError:
                pass  # the client gave up (a deadline met, a redirect refused): expected

        def _get(self) -> None:
            rel = self.path.split("/ds/", 1)[-1] if self.path.startswith("/ds/") else self.path
            b.hits[rel] += 1
            if rel in b.header_delay_s:
                time.sleep(b.header_delay_s[rel])
            if rel in b.redirect:
                self.send_response(302)
                self.send_header("Location", b.redirect[rel])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            path = root / rel
            if not path.is_file():
                self.send_error(404)
                return
            body = path.read_bytes()
            t = b.trickle.get(rel)
            self.send_response(200)
            if t is None or t.content_length:
                self.send_header("Content-Length", str(len(body)))
            else:
                self.send_header("Connection", "close")
            self.end_headers()
            if t is None:
                self.wfile.write(body)
                return
            for i in range(0, len(body), t.chunk):
                self.wfile.write(body[i : i + t.chunk])
                self.wfile.flush()
                time.sleep(t.interval_s)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/ds", b
    finally:
        server.shutdown()
        server.server_close()
