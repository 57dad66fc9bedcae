"""Following remote datasets: ``subscribe``, ``unsubscribe``, ``subscriptions`` (docs/follow.md)."""

from __future__ import annotations

from pathlib import Path

from node.app import Application
from node.app.results import (
    SubscriptionRow,
    Unsubscribed,
)
from node.commands import spec
from node.commands.spec import Cli, Command, CommandParam, Context


async def _subscribe(
    app: Application,
    ctx: Context,
    did: str,
    alias: str | None = None,
    policy: str | None = None,
    k: int | None = None,
    attesters: list[str] | None = None,
    source: str | None = None,
) -> SubscriptionRow:
    if source is not None and not source.startswith(("http:", "https:", "ipfs:", "ipns:", "file:")):
        source = str(Path(source).expanduser().absolute())  # the daemon has another cwd
    if did.startswith((".", "~")) or (did.startswith("/") and not did.startswith("//")):
        did = str(Path(did).expanduser().absolute())
    return await app.subscriptions.subscribe(
        did, alias, policy=policy, k=k, attesters=attesters, source=source
    )


async def _unsubscribe(app: Application, ctx: Context, did: str) -> Unsubscribed:
    return await app.subscriptions.unsubscribe(did)


async def _subscriptions(app: Application, ctx: Context) -> list[SubscriptionRow]:
    return await app.subscriptions.subscriptions()


SUBSCRIPTION_COMMANDS: tuple[Command, ...] = (
    Command(
        "subscriptions.add",
        "Follow a remote dataset: pull, verify, republish and attest each new head.",
        _subscribe,
        (
            CommandParam(
                "did",
                spec.STR,
                True,
                "did:odf:… of the dataset to follow (owner-signed heads over gossip), or the URL "
                "of its repository to poll: http(s)://, ipfs://, ipns:// or a path "
                "(docs/follow.md).",
                Cli("argument"),
            ),
            CommandParam("alias", spec.STR, False, "Local name.", Cli(type=str)),
            CommandParam(
                "policy",
                {"type": "string", "enum": ["verify-all", "quorum", "sample", "reputation"]},
                False,
                "Trust policy of this dataset, over the node's [trust] policy (docs/trust.md).",
                Cli(type=str),
            ),
            CommandParam(
                "k",
                {"type": "integer", "minimum": 1},
                False,
                "Attestations of trusted attesters needed (quorum, sample), over [trust] k.",
                Cli(type=int),
            ),
            CommandParam(
                "attesters",
                spec.STRS,
                False,
                "A trusted attester's node id (did:key:…), over [trust] trusted_attesters.",
                Cli(flags=("--attester",), type=list[str], metavar="NODE_ID"),
            ),
            CommandParam(
                "source",
                spec.STR,
                False,
                "Follow the DID from this URL (polled; the source is the authority).",
                Cli(type=str, metavar="URL"),
            ),
        ),
        cli=("subscribe",),
        write=True,
        result=spec.object_of(SubscriptionRow),
    ),
    Command(
        "subscriptions.remove",
        "Stop following a dataset (its local copy is kept).",
        _unsubscribe,
        (CommandParam("did", spec.STR, True, "did:odf:… to stop following.", Cli("argument")),),
        cli=("unsubscribe",),
        write=True,
        result=spec.object_of(Unsubscribed),
    ),
    Command(
        "subscriptions.list",
        "Followed datasets, their accepted heads, verification outcomes and trust.",
        _subscriptions,
        cli=("subscriptions",),
        result=spec.array_of(SubscriptionRow),
    ),
)
"""In the order of ``rpc.discover``."""

__all__ = ["SUBSCRIPTION_COMMANDS"]
