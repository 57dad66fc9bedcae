"""The ``odf-node`` command line: every command is a declaration, generated here.

The use-case commands (``node/commands/catalog.py``) go to the daemon's JSON-RPC when a daemon
runs on the home and run in-process otherwise; the home commands (``node/commands/home.py``:
``init``, ``run``, ``restore``, ``key rotate|revoke``, ``serve-http``, ``rpc``, ``sql``) run
here on the home directory. Each prints a human rendering by default and its JSON with
``--json``; failures print one clear line and exit with status 1. ``sim`` runs network
simulations (``sim/cli.py``).
"""

from __future__ import annotations

import typer

from node.commands.catalog import COMMANDS
from node.commands.cli import add_commands
from node.commands.home import HOME_COMMANDS

app = typer.Typer(
    name="odf-node",
    help="A peer-to-peer node for Open Data Fabric datasets (kamu-compatible).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
dataset_app = typer.Typer(help="Create, inspect and verify datasets.", no_args_is_help=True)
key_app = typer.Typer(
    help="Rotate or revoke the node key (the daemon must be stopped).", no_args_is_help=True
)
attestation_app = typer.Typer(
    help="Check exported attestations (in-toto/DSSE envelopes).", no_args_is_help=True
)
query_app = typer.Typer(
    help="Check query commitments of the HTTP data API (docs/query.md).", no_args_is_help=True
)
GROUPS = {
    "dataset": dataset_app,
    "key": key_app,
    "attestation": attestation_app,
    "query": query_app,
}
for _name, _group in GROUPS.items():
    app.add_typer(_group, name=_name)

add_commands(app, GROUPS, (*HOME_COMMANDS, *COMMANDS))


def _register_sim_commands() -> None:
    from sim.cli import sim_app

    app.add_typer(sim_app, name="sim")


_register_sim_commands()


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
