"""The fetch step of a polling source (``SetPollingSource.fetch``): what to read next, and the
source state (``AddData.newSourceState``) that says where the next poll resumes.

kamu-cli's fetch service (kamu-cli, ``src/infra/core/src/services/ingest/fetch_service/``)
defines the behaviour reproduced here:

* ``Url`` with a ``file://`` URL: the file itself; its modification time (rounded to
  milliseconds) is the source state (``odf/last-modified``), and an unchanged one means "up to
  date" (no block). The event time is that modification time (``fromMetadata``, the default)
  or the system time (``fromSystemTime``); ``fromPath`` is refused.
* ``Url`` with ``http://`` / ``https://``: fetched by the node's HTTP client
  (``node/adapters/source_fetch.py``, under the node's source policy); the request carries
  ``If-None-Match`` / ``If-Modified-Since`` from the previous state; ``304 Not Modified`` means
  "up to date". The response's ``ETag`` (else ``Last-Modified``) becomes the new state. Event
  time: ``Last-Modified`` (``fromMetadata``, the default; none if the server sends none) or the
  system time.
* ``FilesGlob``: the regular files matching the pattern whose *file name* sorts after the last
  ingested one (kept as the state, kind ``odf/etag``), in name order, each once. Event time from
  the file name (``fromPath``: the regex's group 1 parsed with ``timestampFormat``, default
  ``%Y-%m-%d``) or the system time (the default); ``fromMetadata`` is refused. No match at all
  before anything was ingested is an error (kamu: "not found"). A relative pattern is kept as
  written in the block and resolved when it is pulled, against a base directory the caller
  gives (kamu resolves it against its working directory; ``..`` is followed as there).

* ``Mqtt``: the messages received since the last poll, fetched by the node's MQTT client
  (``node/transfer/mqtt_fetch.py``, under the node's source policy); no source state (kamu
  records none: the broker's persistent session says where the next poll resumes); the event
  time is the system time unless the rows carry one.

``dataset create`` accepts every polling source kamu's ``add`` accepts: kamu checks a source
only when it is pulled, and so does this node. :func:`check_polling_source` refuses, at pull,
a source that cannot run anywhere (an event time source the step does not support, a ``fromPath``
pattern that does not compile, an ``Mqtt`` step with no host, topic or valid port); a step this
node cannot run as it is set up (``Container`` without a container runtime, ``EthereumLogs``
without a node URL, a URL scheme it does not fetch, a relative glob with no base directory) is
refused when it is pulled too (``node/app/polling.py``), naming the setting.

This module does not import pyarrow (``dataset create`` checks sources with it).
"""

from __future__ import annotations

import datetime as dt
import glob
import hashlib
import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from email.utils import format_datetime, parsedate_to_datetime
from pathlib import Path
from typing import Final
from urllib.parse import unquote, urlsplit

from coordinator.errors import FetchError, OdfNodeError, SourceNotFound, SourceNotRunnable
from coordinator.metadata import model as m
from coordinator.metadata.timestamp import Timestamp

__all__ = [
    "DEFAULT_SOURCE_NAME",
    "KIND_ETAG",
    "KIND_LAST_MODIFIED",
    "Fetched",
    "check_polling_source",
    "conditional_headers",
    "event_time_from_path",
    "fetch_file_url",
    "fetch_glob",
    "glob_pattern",
    "http_fetched",
    "mqtt_client_id",
    "mqtt_fetched",
    "mqtt_topics",
    "url_scheme",
]

#: ``SourceState.sourceName`` of a polling source (kamu's ``DEFAULT_SOURCE_NAME``).
DEFAULT_SOURCE_NAME: Final = "default"
#: Source state kinds of the ODF spec.
KIND_ETAG: Final = "odf/etag"
KIND_LAST_MODIFIED: Final = "odf/last-modified"
#: kamu's default ``timestampFormat`` of ``EventTimeSourceFromPath``.
DEFAULT_PATH_TIME_FORMAT: Final = "%Y-%m-%d"


@dataclass(frozen=True, slots=True)
class Fetched:
    """One fetched input: its bytes at ``path``, the event time of its rows (None: the
    system time) and the source state to commit with it."""

    path: Path
    event_time: Timestamp | None
    source_state: m.SourceState | None


def _state(kind: str, value: str) -> m.SourceState:
    return m.SourceState(source_name=DEFAULT_SOURCE_NAME, kind=kind, value=value)


def _step_name(step: object, prefix: str) -> str:
    return type(step).__name__.removeprefix(prefix)


def url_scheme(url: str) -> str:
    """The lower-case scheme of ``url`` (``""`` if it has none)."""
    return urlsplit(url).scheme.lower()


def check_polling_source(source: m.SetPollingSource) -> None:
    """Refuse, when it is pulled, a polling source that cannot run anywhere.

    ``dataset create`` does not call this: kamu's ``add`` accepts these sources and its pull
    refuses them (kamu-cli ``src/infra/core/src/services/ingest/fetch_service/``), so a
    snapshot kamu accepts is accepted here too. What depends on the node (a container runtime,
    an Ethereum node, the URL schemes it fetches) is checked by the pull's dispatch.

    Raises:
        FetchError: the event time source does not apply to the step, a ``FilesGlob`` is not
            ordered by name, a ``fromPath`` pattern does not compile, or an ``Mqtt`` step has
            no host, a port out of range, no topic or an invalid topic filter.
    """
    fetch = source.fetch
    if isinstance(fetch, m.FetchStepMqtt):
        _check_mqtt(fetch)
        return
    if not isinstance(fetch, m.FetchStepUrl | m.FetchStepFilesGlob):
        # Container, EthereumLogs: whether they run depends on the node (a container runtime,
        # an Ethereum node URL); they are checked when pulled (node/app/polling.py).
        return
    if isinstance(fetch, m.FetchStepUrl):
        if isinstance(fetch.event_time, m.EventTimeSourceFromPath):
            raise FetchError(
                "SetPollingSource: a Url source does not support the fromPath event time "
                "source (kamu refuses it too); nothing was committed"
            )
    else:
        if fetch.order not in (None, m.SourceOrdering.BY_NAME):
            raise FetchError("SetPollingSource: FilesGlob can only be ordered byName")
        if isinstance(fetch.event_time, m.EventTimeSourceFromMetadata):
            raise FetchError(
                "SetPollingSource: FilesGlob does not support the fromMetadata event time "
                "source; use fromPath (as kamu says); nothing was committed"
            )
    if isinstance(fetch.event_time, m.EventTimeSourceFromPath):
        try:
            _compile_path_pattern(fetch.event_time.pattern)
        except FetchError as e:
            raise FetchError(f"SetPollingSource: {e}") from None


def _check_mqtt(fetch: m.FetchStepMqtt) -> None:
    if not fetch.host.strip():
        raise FetchError("SetPollingSource: Mqtt host is empty")
    if not 0 < fetch.port < 65536:
        raise FetchError(f"SetPollingSource: Mqtt port {fetch.port} is not in 1-65535")
    if not fetch.topics:
        raise FetchError("SetPollingSource: Mqtt has no topic to subscribe to")
    for t in fetch.topics:
        # MQTT 3.1.1, 4.7: a filter is non-empty; '#' only last and alone in its level; '+'
        # alone in its level.
        levels = t.path.split("/")
        bad = (
            not t.path
            or "\0" in t.path
            or any(("#" in lv or "+" in lv) and lv not in ("#", "+") for lv in levels)
            or "#" in levels[:-1]
        )
        if bad:
            raise FetchError(
                f"SetPollingSource: Mqtt topic {t.path[:200]!r} is not a valid topic filter"
            )


def mqtt_topics(fetch: m.FetchStepMqtt) -> tuple[tuple[str, int], ...]:
    """The topics of an ``Mqtt`` step with their QoS (``AtMostOnce`` when not given, as kamu)."""
    return tuple((t.path, int(t.qos) if t.qos is not None else 0) for t in fetch.topics)


def mqtt_client_id(dataset_id: str, topics: Sequence[tuple[str, int]]) -> str:
    """The MQTT client id of a dataset's source: its DID and a digest of its topics, so that
    a source whose topics change gets a broker session of its own (kamu: ``kamu-ingest-<id>``)."""
    digest = hashlib.sha256(repr(sorted(topics)).encode()).hexdigest()[:12]
    return f"odf-node-ingest-{dataset_id.removeprefix('did:odf:')}-{digest}"


def mqtt_fetched(path: Path) -> Fetched:
    """An ``Mqtt`` fetch written at ``path``: no event time (the rows' own, else the system
    time) and no source state, as kamu."""
    return Fetched(path, None, None)


def _compile_path_pattern(pattern: str) -> re.Pattern[str]:
    try:
        compiled = re.compile(pattern)
    except re.error as e:
        raise FetchError(f"eventTime pattern {pattern!r} does not compile: {e}") from None
    if compiled.groups < 1:
        raise FetchError(f"eventTime pattern {pattern!r} has no group 1 (the timestamp)")
    return compiled


def event_time_from_path(name: str, source: m.EventTimeSourceFromPath) -> Timestamp:
    """The event time in file name ``name`` (kamu's ``extract_event_time_from_path``).

    Group 1 of the first match of ``source.pattern`` is parsed with ``timestampFormat``
    (``strptime`` directives; default ``%Y-%m-%d``). A value with a zone is converted to UTC;
    one without a time of day is midnight UTC; a time without a zone is taken as UTC.

    Raises:
        FetchError: the pattern does not match, has no group 1, or the value does not parse.
    """
    compiled = _compile_path_pattern(source.pattern)
    found = compiled.search(name)
    if found is None or found.group(1) is None:
        raise FetchError(f"eventTime pattern {source.pattern!r} does not match {name!r}")
    text = found.group(1)
    fmt = source.timestamp_format or DEFAULT_PATH_TIME_FORMAT
    try:
        value = dt.datetime.strptime(text, fmt)
    except ValueError as e:
        raise FetchError(
            f"file {name!r}: {text!r} does not parse with timestampFormat {fmt!r}: {e}"
        ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return Timestamp.from_datetime(value)


def _mtime_ms(path: Path) -> Timestamp:
    """The file's modification time rounded to milliseconds (kamu: ``round_subsecs(3)``)."""
    ns = os.stat(path).st_mtime_ns
    return Timestamp((ns + 500_000) // 1_000_000 * 1_000_000)


def _parse_state_time(state: m.SourceState | None) -> Timestamp | None:
    if state is None or state.kind != KIND_LAST_MODIFIED:
        return None
    try:
        return Timestamp.parse(state.value)
    except OdfNodeError:  # an unreadable state is ignored, as kamu does
        return None


def fetch_file_url(
    step: m.FetchStepUrl, prev: m.SourceState | None, system_time: Timestamp
) -> Fetched | None:
    """Fetch a ``file://`` URL: the file itself, or None if its modification time is the one
    of ``prev`` (up to date).

    Raises:
        SourceNotFound: the file does not exist.
        FetchError: it is not a regular file.
    """
    parts = urlsplit(step.url)
    if parts.netloc not in ("", "localhost"):
        raise FetchError(f"file URL {step.url[:200]!r} names a remote host")
    path = Path(unquote(parts.path))
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise SourceNotFound(f"source file not found: {step.url[:200]}") from None
    except OSError as e:
        raise FetchError(f"cannot read {step.url[:200]}: {e.strerror}") from None
    if not stat.S_ISREG(mode):
        raise FetchError(f"source {step.url[:200]} is not a regular file")
    mtime = _mtime_ms(path)
    if _parse_state_time(prev) == mtime:
        return None
    if isinstance(step.event_time, m.EventTimeSourceFromSystemTime):
        event_time: Timestamp | None = system_time
    else:
        event_time = mtime
    return Fetched(path, event_time, _state(KIND_LAST_MODIFIED, mtime.to_rfc3339()))


def glob_pattern(step: m.FetchStepFilesGlob, base: Path | None) -> str:
    """The pattern a ``FilesGlob`` matches: its path, or a relative one joined to ``base``.

    Raises:
        SourceNotRunnable: the path is relative and there is no base directory.
    """
    if os.path.isabs(step.path):
        return step.path
    if base is None:
        raise SourceNotRunnable(
            f"FilesGlob path {step.path[:200]!r} is relative and this dataset has no base "
            "directory to resolve it against (it was not created from a snapshot file): set "
            "[ingest] files_root, or give the source an absolute path; nothing was committed"
        )
    return os.path.join(base, step.path)


def fetch_glob(
    step: m.FetchStepFilesGlob,
    prev: m.SourceState | None,
    system_time: Timestamp,
    base: Path | None = None,
) -> list[Fetched]:
    """The files of a ``FilesGlob`` not ingested yet, in name order (empty: up to date).

    A file is new if its name sorts after the previous state's (kind ``odf/etag``, the last
    ingested file name), so each is ingested once, across restarts; a file added later under an
    earlier name is never picked up (as in kamu). A relative path is resolved against ``base``
    (:func:`glob_pattern`).

    Raises:
        SourceNotFound: nothing matches and nothing was ingested before.
        SourceNotRunnable: a relative path and no ``base``.
        FetchError: an event time cannot be taken from a file name.
    """
    pattern = glob_pattern(step, base)
    last = prev.value if prev is not None and prev.kind == KIND_ETAG else None
    matched: dict[str, Path] = {}
    for p in glob.glob(pattern):
        path = Path(p)
        name = path.name
        if not path.is_file() or (last is not None and name <= last):
            continue
        # Two directories may hold the same file name: kamu keeps one of them; so do we.
        matched.setdefault(name, path)
    if not matched:
        if prev is None:
            raise SourceNotFound(f"no file matches {pattern[:200]!r}")
        return []
    out = []
    for name in sorted(matched):
        if isinstance(step.event_time, m.EventTimeSourceFromPath):
            event_time = event_time_from_path(name, step.event_time)
        else:
            event_time = system_time
        out.append(Fetched(matched[name], event_time, _state(KIND_ETAG, name)))
    return out


def conditional_headers(prev: m.SourceState | None) -> dict[str, str]:
    """The conditional request headers for the previous state (kamu's ``fetch_http``)."""
    if prev is None:
        return {}
    if prev.kind == KIND_ETAG:
        return {"If-None-Match": prev.value}
    when = _parse_state_time(prev)
    if when is not None:
        return {"If-Modified-Since": format_datetime(when.to_datetime(), usegmt=True)}
    return {}


def http_fetched(
    step: m.FetchStepUrl,
    path: Path,
    etag: str | None,
    last_modified: str | None,
    system_time: Timestamp,
) -> Fetched:
    """A ``200`` response saved at ``path``: its source state (``ETag``, else
    ``Last-Modified``) and event time.

    Raises:
        FetchError: ``Last-Modified`` is needed and is not an HTTP date.
    """
    modified: Timestamp | None = None
    if last_modified is not None and (
        etag is None or not isinstance(step.event_time, m.EventTimeSourceFromSystemTime)
    ):
        try:
            modified = Timestamp.from_datetime(parsedate_to_datetime(last_modified))
        except (TypeError, ValueError):
            raise FetchError(
                f"{step.url[:200]}: Last-Modified {last_modified[:100]!r} is not an HTTP date"
            ) from None
    state: m.SourceState | None
    if etag is not None:
        state = _state(KIND_ETAG, etag)
    elif modified is not None:
        state = _state(KIND_LAST_MODIFIED, modified.to_rfc3339())
    else:
        state = None
    if isinstance(step.event_time, m.EventTimeSourceFromSystemTime):
        event_time: Timestamp | None = system_time
    else:
        event_time = modified
    return Fetched(path, event_time, state)


# ---- Container (kamu-cli, src/infra/core/src/services/ingest/fetch_service/container.rs)

CONTAINER_BATCH_SIZE: Final = 10_000
"""``ODF_BATCH_SIZE`` when the step sets none (kamu's ``target_records_per_slice``)."""
_TEMPLATE = "${{"


def resolve_template(text: str, environ: Mapping[str, str]) -> str:
    """``text`` with each ``${{ env.NAME }}`` replaced by ``environ[NAME]`` (kamu's
    ``template_string``, whose variables are the dataset's; here, the node's environment).

    Raises:
        FetchError: a variable that is not set, or a ``${{`` that is not ``${{ env.NAME }}``.
    """
    out: list[str] = []
    rest = text
    while True:
        start = rest.find(_TEMPLATE)
        if start < 0:
            out.append(rest)
            return "".join(out)
        end = rest.find("}}", start)
        if end < 0:
            raise FetchError(f"{text[:200]!r}: an unclosed ${{{{ template")
        inner = rest[start + len(_TEMPLATE) : end].strip()
        name = inner.removeprefix("env.").strip() if inner.startswith("env.") else ""
        if not name:
            raise FetchError(f"{text[:200]!r}: only ${{{{ env.NAME }}}} templates are supported")
        if name not in environ:
            raise FetchError(
                f"{text[:200]!r} needs the environment variable {name}, which the node does not "
                "have (set it where the node runs)"
            )
        out.append(rest[:start])
        out.append(environ[name])
        rest = rest[end + 2 :]


def container_env(
    step: m.FetchStepContainer, environ: Mapping[str, str]
) -> tuple[tuple[tuple[str, str], ...], int]:
    """The step's ``env`` entries resolved (a value-less entry takes the node's variable of that
    name), without ``ODF_BATCH_SIZE``; and the batch size (that entry's value, else
    :data:`CONTAINER_BATCH_SIZE`).

    Raises:
        FetchError: a variable the node does not have, or an ``ODF_BATCH_SIZE`` not a number.
    """
    pairs: list[tuple[str, str]] = []
    batch = CONTAINER_BATCH_SIZE
    for var in step.env or ():
        if var.value is not None:
            value = resolve_template(var.value, environ)
        elif var.name in environ:
            value = environ[var.name]
        else:
            raise FetchError(
                f"container env {var.name} has no value and the node has no such environment "
                "variable (set it where the node runs)"
            )
        if var.name == "ODF_BATCH_SIZE":
            if not value.isdigit() or int(value) < 1:
                raise FetchError(f"ODF_BATCH_SIZE = {value[:50]!r}: expected a positive number")
            batch = int(value)
            continue
        pairs.append((var.name, value))
    return tuple(pairs), batch


def container_previous(state: m.SourceState | None) -> tuple[str, str]:
    """``ODF_ETAG`` and ``ODF_LAST_MODIFIED`` for the previous source state (``""`` if none)."""
    if state is None:
        return "", ""
    if state.kind == KIND_ETAG:
        return state.value, ""
    when = _parse_state_time(state)
    return "", when.to_rfc3339() if when is not None else ""


def container_state(etag: str | None, last_modified: str | None) -> m.SourceState | None:
    """The source state a container wrote: ``new-etag``, else ``new-last-modified`` (RFC 3339).

    Raises:
        FetchError: ``new-last-modified`` is not an RFC 3339 time.
    """
    if etag is not None:
        return _state(KIND_ETAG, etag)
    if last_modified is not None:
        try:
            when = Timestamp.parse(last_modified)
        except OdfNodeError:
            raise FetchError(
                f"the container wrote new-last-modified {last_modified[:100]!r}, not an RFC 3339 "
                "time"
            ) from None
        return _state(KIND_LAST_MODIFIED, when.to_rfc3339())
    return None
