"""Logging set-up: human-readable text or one JSON object per line (for log collectors)."""

from __future__ import annotations

import json
import logging
import sys
import time


class JsonFormatter(logging.Formatter):
    """``{"ts": ..., "level": ..., "logger": ..., "msg": ..., "exc": ...}`` per record."""

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as one JSON line."""
        value = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            value["exc"] = self.formatException(record.exc_info)
        return json.dumps(value, ensure_ascii=False)


def setup_logging(level: str, fmt: str) -> None:
    """Configure the root logger once for the daemon (stderr)."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Third-party chatter (py-libp2p, aiohttp access) stays at warning unless debugging.
    if level != "debug":
        for noisy in ("libp2p", "multiaddr", "aiohttp.access", "py4j", "asyncio"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
