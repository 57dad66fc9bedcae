"""A dataset's metadata chain between homes and back: ``dataset publish`` (IPFS and a signed
announcement), ``dataset pull`` (every block verified before the commit), ``dataset log``."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from node.app import Application
from node.app.errors import InvalidArgument
from node.app.results import (
    LogEntry,
    PublishResult,
    PullResult,
)
from node.commands import spec
from node.commands.params import ref_param
from node.commands.spec import Cli, Command, CommandParam, Context, Output

_NEEDS_IPFS = (
    "publishing without a daemon needs a reachable IPFS RPC API; "
    "tests/integration/test_ipfs_pull.py publishes and pulls through one"
)


async def _dataset_publish(
    app: Application, ctx: Context, ref: str, ipns_key: str | None = None
) -> PublishResult:
    return await app.publish.publish(ref, ipns_key=ipns_key, now=not app.info.live)


async def _dataset_pull(
    app: Application,
    ctx: Context,
    url: str,
    alias: str | None = None,
    force: bool = False,
    publish: bool = True,
) -> PullResult:
    datasets = app.datasets
    if await asyncio.to_thread(datasets.polling_source_of, url):
        # A local root with a polling source: run the source once, as ``kamu pull`` does.
        if alias is not None or force:
            raise InvalidArgument(
                f"{url[:200]} is a local dataset with a polling source: --as and --force apply "
                "to pulls of remote datasets only"
            )
        return await datasets.poll(url, publish=publish, progress=ctx.ingest_progress)
    return PullResult.from_summary(await datasets.pull(url, alias=alias, force=force))


async def _dataset_log(
    app: Application, ctx: Context, ref: str, limit: int | None = 50
) -> list[LogEntry]:
    return await app.datasets.log(ref, limit)


def _prepare_publish(values: dict[str, Any]) -> dict[str, Any]:
    if values.pop("ipns", False) and values.get("ipns_key") is None:
        values["ipns_key"] = "self"
    return values


def _render_log(value: list[LogEntry], out: Output, opts: Mapping[str, Any]) -> None:
    from coordinator.metadata.yaml_serde import KIND_METADATA_BLOCK, write_manifest

    fmt = opts.get("output_format", "table")
    if fmt == "yaml":
        # A YAML stream as kamu-cli's `log -o yaml` writes it: `---`, a `# Block:` comment, the
        # manifest, blank lines. Each block keeps its own manifest version (kamu HEAD labels
        # every block with its current version 3).
        for e in value:
            manifest = write_manifest(KIND_METADATA_BLOCK, e.version, e.block)
            out.raw(f"---\n# Block: {e.hash}\n{manifest}\n\n")
    elif fmt == "table":
        out.table(
            ["seq", "hash", "system time", "event"],
            [
                [
                    str(e.block["sequenceNumber"]),
                    _short(e.hash),
                    str(e.block["systemTime"]),
                    str(e.block["event"]["kind"]),
                ]
                for e in value
            ],
        )


def _short(multihash: str) -> str:
    from coordinator.multiformats import Multihash

    return Multihash.from_multibase(multihash).short()


def _check_log_format(values: dict[str, Any]) -> dict[str, Any]:
    fmt = values.get("output_format", "table")
    if fmt not in ("yaml", "json", "table"):
        raise InvalidArgument(f"unknown output format {fmt!r} (yaml, json, table)")
    return values


def _render_pull(value: PullResult, out: Output, opts: Mapping[str, Any]) -> None:
    if value.source == "polling":
        if value.comparison == "equal":
            out.print(f"{value.alias}: up to date (the polling source has nothing new)")
        else:
            out.print(
                f"{value.alias}: polled, {value.new_blocks} new block(s), "
                f"{value.records} record(s); head {value.new_head}"
            )
        return
    if value.comparison == "equal":
        out.print(f"{value.alias}: up to date")
    elif value.comparison == "local-ahead":
        out.print(f"{value.alias}: local copy is ahead of the source; nothing pulled")
    else:
        verb = "created" if value.created else ("replaced" if value.forced else "updated")
        out.print(
            f"{value.alias}: {verb}, {value.new_blocks} new block(s), "
            f"{value.objects_downloaded} object(s) downloaded; head {value.new_head}"
        )


def _render_publish(value: PublishResult, out: Output, opts: Mapping[str, Any]) -> None:
    if value.cid is not None:
        out.print(f"{value.url}" + (f"  (ipns://{value.ipns})" if value.ipns else ""))
    else:
        out.print(
            f"{value.alias}: publication queued as work item {value.work_id} (head {value.head})"
        )


CHAIN_COMMANDS: tuple[Command, ...] = (
    Command(
        "dataset.publish",
        "Publish a dataset to IPFS and announce it.",
        _dataset_publish,
        (
            ref_param(),
            CommandParam(
                "ipns_key",
                spec.STR,
                False,
                "Also publish IPNS under this key name.",
                Cli(type=str),
            ),
            CommandParam(
                "ipns",
                description="Also publish IPNS under the node's own key (self).",
                cli=Cli(type=bool, default=False),
                role="cli",
            ),
            CommandParam(
                "ipfs_api",
                description="kubo-compatible RPC API, e.g. http://127.0.0.1:5001 "
                "(without a daemon).",
                cli=Cli(type=str, default="http://127.0.0.1:5001", envvar="ODF_NODE_IPFS_API"),
                role="offline",
            ),
        ),
        cli=("dataset", "publish"),
        doc="With a daemon: queue the publication and a signed head announcement of an owned "
        "dataset. Without one (or with an IPNS name): add it to IPFS as kamu does (without "
        "info/), pin it and print the root CID.",
        render=_render_publish,
        prepare=_prepare_publish,
        parity=_NEEDS_IPFS,
        result=spec.object_of(PublishResult),
        result_type=PublishResult,
    ),
    Command(
        "dataset.pull",
        "Pull a dataset, verifying every block, data part and checkpoint before committing.",
        _dataset_pull,
        (
            CommandParam(
                "url",
                spec.STR,
                True,
                "ipfs://CID, ipfs://CID/path, ipns://…, http(s)://… or a path.",
                Cli("argument"),
            ),
            CommandParam(
                "alias",
                spec.STR,
                False,
                "Local name (default: the URL's last segment).",
                Cli(flags=("--as",), type=str),
            ),
            CommandParam(
                "force", spec.BOOL, False, "Replace the local chain if it has diverged.", Cli()
            ),
            CommandParam(
                "publish",
                spec.BOOL,
                False,
                "After polling an owned root: publish and announce it (a pull of a remote "
                "dataset ignores it).",
            ),
            CommandParam(
                "ipfs_api",
                description="IPFS RPC API URL (kubo; without a daemon).",
                cli=Cli(type=str, envvar="ODF_IPFS_API"),
                role="offline",
            ),
            CommandParam(
                "ipfs_gateway",
                description="IPFS HTTP gateway URL (without a daemon).",
                cli=Cli(type=str, envvar="ODF_IPFS_GATEWAY"),
                role="offline",
            ),
        ),
        cli=("dataset", "pull"),
        doc="An alias (or did:odf) of an owned root dataset with a polling source "
        "(SetPollingSource) runs that source once, as `kamu pull` does: fetch, prepare, read, "
        "merge, commit (all or nothing), then publish like an ingest.",
        render=_render_pull,
        write=True,
        result=spec.object_of(PullResult),
        result_type=PullResult,
    ),
    Command(
        "dataset.log",
        "Show a dataset's metadata blocks, newest first (like `kamu log`).",
        _dataset_log,
        (
            ref_param(),
            CommandParam(
                "limit", spec.LIMIT, False, "Show at most this many blocks.", Cli(type=int)
            ),
            CommandParam(
                "output_format",
                description="yaml | json | table",
                cli=Cli(flags=("--output-format", "-o"), type=str, default="table"),
                role="cli",
            ),
        ),
        cli=("dataset", "log"),
        result=spec.array_of(LogEntry),
        result_type=LogEntry,
        render=_render_log,
        prepare=_check_log_format,
        in_process="a read of the repository, safe beside a daemon; without --limit it shows "
        "the whole chain, more than one RPC reply carries (limit <= 1000)",
    ),
)
"""In the order of ``rpc.discover``."""

__all__ = ["CHAIN_COMMANDS"]
