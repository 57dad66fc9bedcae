"""Every user-facing command of the node, assembled from its families (``node/commands/spec.py``).

Each family module declares its commands beside their use case calls and renderings:
``status``, ``peers``, ``backup``, ``subscriptions``, ``datasets``, ``chains`` (publish, pull,
log), ``work`` (schedules, flows, work items), ``attestations``, ``data`` (SQL, tail, export,
/query), ``console`` and ``node_family`` (the daemon's console login and memory figures).

Adding a command: write its use case in ``node/app`` (typed result in ``node/app/results.py``),
then one :class:`~node.commands.spec.Command` in its family; ``docs/commands.md`` walks through
it. The order here is the order ``rpc.discover`` and ``odf-node --help`` list them.
"""

from __future__ import annotations

from node.commands.attestations import ATTESTATION_COMMANDS
from node.commands.backup import BACKUP_COMMANDS
from node.commands.chains import CHAIN_COMMANDS
from node.commands.console import CONSOLE_COMMANDS
from node.commands.data import DATA_COMMANDS, render_rows
from node.commands.datasets import DATASET_COMMANDS
from node.commands.node_family import NODE_COMMANDS
from node.commands.peers import PEER_COMMANDS
from node.commands.spec import Command
from node.commands.status import STATUS_COMMANDS
from node.commands.subscriptions import SUBSCRIPTION_COMMANDS
from node.commands.work import WORK_COMMANDS

COMMANDS: tuple[Command, ...] = (
    *STATUS_COMMANDS,
    *PEER_COMMANDS,
    *BACKUP_COMMANDS,
    *SUBSCRIPTION_COMMANDS,
    *DATASET_COMMANDS,
    *CHAIN_COMMANDS,
    *WORK_COMMANDS,
    *ATTESTATION_COMMANDS,
    *DATA_COMMANDS,
    *CONSOLE_COMMANDS,
    *NODE_COMMANDS,
)
"""Every command, in the order ``rpc.discover`` and ``odf-node --help`` list them."""

BY_NAME: dict[str, Command] = {c.name: c for c in COMMANDS}
"""The declarations by JSON-RPC method name."""

__all__ = ["BY_NAME", "COMMANDS", "render_rows"]
