"""Following remote datasets: ``subscribe``, ``unsubscribe``, ``subscriptions`` (docs/follow.md)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from node.app import Application
from node.app.results import (
    SubscriptionRow,
    Unsubscribed,
)
from node.commands import spec
from node.commands.spec import Cli, Command, CommandParam, Context, Output


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


def _render_subscriptions(
    value: list[SubscriptionRow], out: Output, opts: Mapping[str, Any]
) -> None:
    """One line per followed dataset: its twelve fields as JSON cells did not fit a terminal
    (`--json` has them all, the source URL too). The DID comes last, where a narrow terminal
    cuts it."""
    if not value:
        out.print("(none)")
        return
    rows = []
    for r in value:
        trust = str(r.trust.get("state")) if r.trust else ""
        pull = ""
        if r.pull is not None:
            failed = r.pull.get("attempts") or []
            pull = f"{len(failed)} failed: {failed[0].get('reason')}" if failed else "ok"
        rows.append(
            [
                r.alias or "",
                "" if r.sequence is None else str(r.sequence),
                r.verification or "",
                trust,
                r.accepted_head[-8:] if r.accepted_head else "-",
                pull,
                r.did,
            ]
        )
    columns = ["alias", "seq", "outcome", "trust", "head", "pull", "did"]
    out.table(columns, rows, markup=False)


def _render_subscribed(row: SubscriptionRow, out: Output, opts: Mapping[str, Any]) -> None:
    """What was followed and where to watch it (the row's twelve fields were mostly empty)."""
    name = f"{row.alias} ({row.did})" if row.alias else row.did
    source = f" from {row.source}" if row.source else ""
    head = (
        f"; accepted head {row.accepted_head[-8:]} (#{row.sequence})" if row.accepted_head else ""
    )
    out.print(f"following {name}{source}{head}")
    out.print("`odf-node subscriptions` shows its pull, verification and trust as they happen")


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
        result_type=SubscriptionRow,
        render=_render_subscribed,
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
        result_type=SubscriptionRow,
        render=_render_subscriptions,
    ),
)
"""In the order of ``rpc.discover``."""

__all__ = ["SUBSCRIPTION_COMMANDS"]
