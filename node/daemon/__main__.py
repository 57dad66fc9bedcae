"""``python -m node.daemon``: the process ``odf-node run`` becomes.

``odf-node run`` parses and checks its options with the CLI toolkit (typer, click, rich), then
replaces itself with this entry (``exec``: the same PID, stdio, environment and working
directory), so the process that runs for months does not keep the toolkit loaded: about 4 MB of
an idle node's 150 MB budget (issue 15). Not meant to be typed by hand; its arguments are:

    python -m node.daemon --home DIR [--overrides JSON] [--ephemeral] [--remove-home-on-exit]

``--overrides`` is the JSON of the config overrides built from ``run``'s options (the same
``{section: {key: value}}`` :meth:`node.home.NodeHome.config` takes). Errors that stop the
start are printed as ``error: ...`` on stderr with exit status 1, as the CLI prints them.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import shutil
import sys
from pathlib import Path
from typing import Any


def run_daemon(
    home: Path, overrides: dict[str, dict[str, Any]], *, ephemeral: bool, remove_home: bool
) -> int:
    """Run the daemon in the foreground until SIGINT/SIGTERM; the process exit status."""
    from coordinator.errors import OdfNodeError
    from node.config import ConfigError, check_listeners
    from node.daemon.daemon import Daemon, install_signal_handlers
    from node.daemon.logs import setup_logging
    from node.home import NodeHome
    from node.home_lock import HomeLocked

    try:
        h = NodeHome(home)
        if not h.initialized:
            h.init()
        try:
            cfg = h.config(overrides)
            check_listeners(cfg)
        except ConfigError as e:
            return _fail(str(e))
        setup_logging(cfg.node.log_level, cfg.node.log_format)
        daemon = Daemon(h, cfg, ephemeral=ephemeral)

        async def main() -> None:
            stop = asyncio.Event()
            install_signal_handlers(stop)
            await daemon.run(stop)

        try:
            asyncio.run(main())
        except (HomeLocked, ConfigError) as e:
            return _fail(str(e))
        except OdfNodeError as e:
            return _fail(f"the node could not start: {e}")
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                raise
            # A second node started with the first one's ports: one line, not a traceback.
            return _fail(
                f"the node could not start: {e}; another process listens there: give this node "
                "other ports (odf-node run --rpc-port, --http-port, --p2p-port; [query] "
                "flight_sql_port)"
            )
        return 0
    finally:
        if remove_home:
            shutil.rmtree(home, ignore_errors=True)


def _fail(message: str) -> int:
    sys.stderr.write(f"error: {message}\n")
    return 1


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments ``odf-node run`` passes and run the daemon."""
    p = argparse.ArgumentParser(prog="python -m node.daemon", description=__doc__)
    p.add_argument("--home", type=Path, required=True)
    p.add_argument("--overrides", default="{}")
    p.add_argument("--ephemeral", action="store_true")
    p.add_argument("--remove-home-on-exit", action="store_true")
    args = p.parse_args(argv)
    return run_daemon(
        args.home,
        json.loads(args.overrides),
        ephemeral=args.ephemeral,
        remove_home=args.remove_home_on_exit,
    )


if __name__ == "__main__":
    sys.exit(main())
