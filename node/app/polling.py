"""Fetching a polling source (``SetPollingSource.fetch``) when an owned root is pulled.

One function, :func:`fetch_polling`, turns the source's fetch step into the inputs to ingest
(:class:`~coordinator.ingest.fetch.Fetched`; empty: up to date). Each step kind is fetched by
the adapter that can reach it: ``http(s)`` URLs and MQTT brokers through the transfer port
(under the node's source policy), ``ftp(s)`` URLs the same way (their modification time
as the source state), ``file://`` URLs and ``FilesGlob`` here. A step this node
cannot run as it is set up raises :class:`~coordinator.errors.SourceNotRunnable` naming the
setting that would make it run: ``dataset create`` accepted it, as kamu's ``add`` does, and the
refusal comes at pull time, with nothing committed.

The bounds of a poll are :class:`PollingOptions` (the ``[ingest]`` section). This module does
not import pyarrow (an idle daemon imports it): the ingest machinery is imported when a poll runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from coordinator.errors import FetchError, SourceNotRunnable
from coordinator.ingest.fetch import (
    Fetched,
    check_polling_source,
    conditional_headers,
    container_env,
    container_previous,
    container_state,
    http_fetched,
    mqtt_client_id,
    mqtt_fetched,
    mqtt_topics,
    resolve_template,
    url_scheme,
)
from coordinator.metadata import model as m
from coordinator.metadata.timestamp import Timestamp
from node.app.errors import InvalidArgument
from node.app.ports import ContainerRequest, MqttRequest, TransferPort

if TYPE_CHECKING:
    from coordinator.ingest.push import PushSourceInfo

__all__ = ["PollingOptions", "fetch_polling"]


@dataclass(frozen=True, slots=True)
class PollingOptions:
    """Bounds of a polling source's run (``[ingest]`` of the node's configuration)."""

    max_fetch_bytes: int = 1 << 30
    """``ingest.max_fetch_bytes``: the largest HTTP body a poll downloads."""
    max_decompressed_bytes: int = 1 << 30
    """``ingest.max_decompressed_bytes``: the most bytes one prepare step (or one
    ``EsriShapefile`` archive read) may produce."""
    allow_pipe: bool = False
    """``ingest.allow_pipe``: run ``Pipe`` prepare steps (commands with the node's rights)."""
    mqtt_max_records: int = 10_000
    """``ingest.mqtt_max_records``: the most MQTT messages one poll takes (kamu's
    ``target_records_per_slice``)."""
    mqtt_idle_timeout_s: float = 1.0
    """``ingest.mqtt_idle_timeout_s``: an MQTT poll ends once the broker is idle this long."""
    mqtt_max_message_bytes: int = 16 << 20
    """``ingest.mqtt_max_message_bytes``: the largest MQTT message a poll reads."""
    mqtt_max_poll_s: float = 60.0
    """``ingest.mqtt_max_poll_s``: the longest an MQTT poll reads messages."""
    files_root: str | None = None
    """``ingest.files_root``: the directory relative ``FilesGlob`` paths resolve against
    (``None``: each dataset's snapshot directory, recorded when it was created)."""
    container_runtime: str = "auto"
    """``ingest.container_runtime``: what runs ``Container`` steps (``auto``: podman, docker)."""
    container_network: bool = False
    """``ingest.container_network``: give the container a network (and pull missing images)."""
    container_timeout_s: float = 600.0
    """``ingest.container_timeout_s``: the container is stopped after this long."""
    container_memory_bytes: int = 2 << 30
    """``ingest.container_memory_bytes``: the container's memory cap."""
    container_storage: str = ""
    """Where podman keeps its images inside an unprivileged user namespace
    (``ingest.container_storage``, else ``<home>/containers``; ``""``: none known)."""
    eth_node_urls: tuple[str, ...] = ()
    """``ingest.eth_node_urls``: ``CHAIN_ID=URL`` entries, the node URL of ``EthereumLogs``
    sources without a ``nodeUrl``."""
    environ: Mapping[str, str] = field(default_factory=dict)
    """The variables ``Container`` steps may name (``${{ env.NAME }}``, value-less ``env``
    entries): the node's environment (kamu reads the dataset's own variables instead)."""


def _step_name(fetch: m.FetchStep) -> str:
    return type(fetch).__name__.removeprefix("FetchStep")


def _needed(transfer: TransferPort | None, doing: str) -> TransferPort:
    """``transfer``, which a step that reaches beyond the local files needs (``doing``: what
    the step does, for the refusal where the application has none)."""
    if transfer is None:
        raise InvalidArgument(f"{doing} sources is not available here")
    return transfer


async def fetch_polling(
    info: PushSourceInfo,
    workdir: Path,
    now: Timestamp,
    dataset_id: str,
    *,
    transfer: TransferPort | None,
    opts: PollingOptions,
    snapshot_dir: Path | None = None,
) -> list[Fetched]:
    """Fetch what the source has that was not ingested yet, into ``workdir``.

    A relative ``FilesGlob`` path resolves against ``opts.files_root`` if set, else against
    ``snapshot_dir`` (the directory the dataset's snapshot was created from, if recorded).

    Raises:
        SourceNotRunnable: the step cannot run on this node (the message names the setting).
        SourceNotFound, SourceUnreachable, FetchError: the fetch failed, or the source cannot
            run anywhere (:func:`~coordinator.ingest.fetch.check_polling_source`).
        PullRefused: the source policy refuses the address.
    """
    from coordinator.ingest.polling import fetch_local

    source = info.source
    assert isinstance(source, m.SetPollingSource)
    check_polling_source(source)  # kamu's add accepts what cannot run; its pull refuses it
    fetch = source.fetch
    if isinstance(fetch, m.FetchStepUrl):
        scheme = url_scheme(fetch.url)
        if scheme in ("http", "https", "ftp", "ftps"):
            return await _fetch_url(
                fetch, info, workdir, now, _needed(transfer, "fetching URL"), opts
            )
        if scheme == "file":
            return await asyncio.to_thread(fetch_local, info, now)
        raise SourceNotRunnable(
            f"fetch Url {fetch.url[:200]!r}: this node fetches http, https, ftp, ftps and file "
            f"URLs, not {scheme or '(no scheme)'!r}"
        )
    if isinstance(fetch, m.FetchStepFilesGlob):
        base = Path(opts.files_root) if opts.files_root else snapshot_dir
        return await asyncio.to_thread(fetch_local, info, now, base)
    if isinstance(fetch, m.FetchStepEthereumLogs):
        return await _fetch_ethereum_logs(
            fetch, info, workdir, _needed(transfer, "fetching EthereumLogs"), opts
        )
    if isinstance(fetch, m.FetchStepMqtt):
        return await _fetch_mqtt(
            fetch, workdir, dataset_id, _needed(transfer, "fetching MQTT"), opts
        )
    if isinstance(fetch, m.FetchStepContainer):
        return await _fetch_container(
            fetch, info, workdir, _needed(transfer, "running Container"), opts
        )
    raise SourceNotRunnable(
        f"fetch step {_step_name(fetch)} cannot run on this node: odf-node does not run "
        f"{_step_name(fetch)} sources yet (the dataset is stored as kamu stores it: `kamu "
        "pull` ingests it, or give it a Url, FilesGlob or Mqtt source); nothing was committed"
    )


async def _fetch_url(
    fetch: m.FetchStepUrl,
    info: PushSourceInfo,
    workdir: Path,
    now: Timestamp,
    transfer: TransferPort,
    opts: PollingOptions,
) -> list[Fetched]:
    # An ftp(s) source has no headers; its previous state still makes it up to date or not.
    headers = {h.name: h.value for h in fetch.headers or ()}
    headers.update(conditional_headers(info.source_state))
    target = workdir / "fetched"
    got = await transfer.fetch_source(fetch.url, headers, target, opts.max_fetch_bytes)
    if not got.modified:
        return []
    return [http_fetched(fetch, target, got.etag, got.last_modified, now)]


async def _fetch_mqtt(
    fetch: m.FetchStepMqtt,
    workdir: Path,
    dataset_id: str,
    transfer: TransferPort,
    opts: PollingOptions,
) -> list[Fetched]:
    topics = mqtt_topics(fetch)
    target = workdir / "messages"
    request = MqttRequest(
        host=fetch.host,
        port=fetch.port,
        topics=topics,
        client_id=mqtt_client_id(dataset_id, topics),
        username=fetch.username,
        password=fetch.password,
        max_bytes=opts.max_fetch_bytes,
        max_records=opts.mqtt_max_records,
        idle_timeout_s=opts.mqtt_idle_timeout_s,
        max_message_bytes=opts.mqtt_max_message_bytes,
        max_poll_s=opts.mqtt_max_poll_s,
    )
    count = await transfer.fetch_mqtt(request, target)
    return [mqtt_fetched(target)] if count else []


_ROUNDS = 100
"""``Container`` rounds one poll runs while the container says it has more data (each round's
output is one input of the same commit)."""


async def _fetch_container(
    fetch: m.FetchStepContainer,
    info: PushSourceInfo,
    workdir: Path,
    transfer: TransferPort,
    opts: PollingOptions,
) -> list[Fetched]:
    """Run the container (again while it says it has more data, as kamu's polling loop does),
    each round given the state the previous one wrote."""
    state = info.source_state
    fetched: list[Fetched] = []
    for k in range(_ROUNDS):
        target = workdir / f"container-{k}.out"
        got = await transfer.fetch_container(
            container_request(fetch, state, opts), target, workdir / f"container-{k}"
        )
        new_state = container_state(got.etag, got.last_modified)
        if new_state is not None and state is not None and _same_state(new_state, state):
            if got.size:
                raise FetchError(
                    f"container {fetch.image}: the source state did not change but it wrote "
                    f"{got.size} bytes (the container protocol: unchanged state, no output)"
                )
            break  # up to date
        fetched.append(Fetched(target, None, new_state))
        state = new_state
        if not got.has_more:
            break
    return fetched


def _same_state(a: m.SourceState, b: m.SourceState) -> bool:
    return (a.kind, a.value) == (b.kind, b.value)


def container_request(
    fetch: m.FetchStepContainer, state: m.SourceState | None, opts: PollingOptions
) -> ContainerRequest:
    """The run of ``fetch`` after ``state``: its values resolved (``${{ env.NAME }}`` and
    value-less ``env`` entries from the node's environment), ``ODF_BATCH_SIZE`` set."""
    env_list, batch = container_env(fetch, opts.environ)
    etag, last_modified = container_previous(state)
    odf = (
        ("ODF_ETAG", etag),
        ("ODF_LAST_MODIFIED", last_modified),
        ("ODF_NEW_ETAG_PATH", "/opt/odf/out/new-etag"),
        ("ODF_NEW_LAST_MODIFIED_PATH", "/opt/odf/out/new-last-modified"),
        ("ODF_NEW_HAS_MORE_DATA_PATH", "/opt/odf/out/new-has-more-data"),
        ("ODF_BATCH_SIZE", str(batch)),
    )
    return ContainerRequest(
        image=resolve_template(fetch.image, opts.environ),
        command=tuple(fetch.command) if fetch.command is not None else None,
        args=tuple(resolve_template(a, opts.environ) for a in fetch.args or ()),
        env=(*env_list, *odf),
        prev_etag=etag,
        prev_last_modified=last_modified,
        runtime=opts.container_runtime,
        storage=opts.container_storage,
        network=opts.container_network,
        timeout_s=opts.container_timeout_s,
        memory_bytes=opts.container_memory_bytes,
        max_bytes=opts.max_fetch_bytes,
    )


async def _fetch_ethereum_logs(
    fetch: m.FetchStepEthereumLogs,
    info: PushSourceInfo,
    workdir: Path,
    transfer: TransferPort,
    opts: PollingOptions,
) -> list[Fetched]:
    """Poll the Ethereum node for the logs after the recorded block (kamu's ``ETag`` state);
    without ``nodeUrl``, the ``[ingest] eth_node_urls`` entry of the chain (as kamu's config)."""
    from coordinator.ingest.fetch import DEFAULT_SOURCE_NAME, KIND_ETAG
    from node.app.ports import EthereumLogsRequest

    node_url = fetch.node_url
    if not node_url:
        configured = {c.strip(): u.strip() for c, _, u in map(_split_eq, opts.eth_node_urls)}
        node_url = configured.get(str(fetch.chain_id)) or None
    if not node_url:
        raise SourceNotRunnable(
            f"EthereumLogs source for chain {fetch.chain_id}: the step has no nodeUrl and "
            f"[ingest] eth_node_urls has no '{fetch.chain_id}=URL' entry; nothing was committed"
        )
    prev = info.source_state
    request = EthereumLogsRequest(
        node_url=node_url,
        chain_id=fetch.chain_id,
        filter=fetch.filter,
        signature=fetch.signature,
        previous_state=prev.value if prev is not None and prev.kind == KIND_ETAG else None,
        max_bytes=opts.max_fetch_bytes,
    )
    target = workdir / "logs.parquet"
    state = await transfer.fetch_ethereum_logs(request, target)
    if state is None:
        return []
    source_state = m.SourceState(source_name=DEFAULT_SOURCE_NAME, kind=KIND_ETAG, value=state)
    return [Fetched(target, None, source_state)]


def _split_eq(entry: str) -> tuple[str, str, str]:
    return entry.partition("=")
