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
  before anything was ingested is an error (kamu: "not found").

* ``Mqtt``: the messages received since the last poll, fetched by the node's MQTT client
  (``node/transfer/mqtt_fetch.py``, under the node's source policy); no source state (kamu
  records none: the broker's persistent session says where the next poll resumes); the event
  time is the system time unless the rows carry one.

``dataset create`` accepts every fetch step kamu's ``add`` accepts (:func:`check_polling_source`
checks only what does not depend on the node); a step this node cannot run as it is set up
(``Container`` without a container runtime, ``EthereumLogs`` without a node URL, a URL scheme it
does not fetch) is refused when it is pulled (``node/app/polling.py``), naming the setting.

This module does not import pyarrow (``dataset create`` checks sources with it).
"""

from __future__ import annotations

import datetime as dt
import glob
import hashlib
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from email.utils import format_datetime, parsedate_to_datetime
from pathlib import Path
from typing import Final
from urllib.parse import unquote, urlsplit

from coordinator.errors import FetchError, InvalidSnapshot, OdfNodeError, SourceNotFound
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
    """Refuse, when the dataset is created, a polling source that cannot run anywhere.

    What depends on the node (a container runtime, an Ethereum node, the URL schemes it
    fetches) is checked when the source is pulled, as kamu does.

    Raises:
        InvalidSnapshot: a glob is not an absolute path, the event time source does not apply
            to the step, a ``fromPath`` pattern does not compile, or an ``Mqtt`` step has no
            host, a port out of range or no topic.
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
            raise InvalidSnapshot(
                "SetPollingSource: a Url source does not support the fromPath event time "
                "source (kamu refuses it too)"
            )
    else:
        if not os.path.isabs(fetch.path):
            raise InvalidSnapshot(
                f"SetPollingSource: FilesGlob path {fetch.path[:200]!r} must be absolute "
                "(the daemon and the CLI run in different directories)"
            )
        if fetch.order not in (None, m.SourceOrdering.BY_NAME):
            raise InvalidSnapshot("SetPollingSource: FilesGlob can only be ordered byName")
        if isinstance(fetch.event_time, m.EventTimeSourceFromMetadata):
            raise InvalidSnapshot(
                "SetPollingSource: FilesGlob does not support the fromMetadata event time "
                "source; use fromPath (as kamu says)"
            )
    if isinstance(fetch.event_time, m.EventTimeSourceFromPath):
        try:
            _compile_path_pattern(fetch.event_time.pattern)
        except FetchError as e:
            raise InvalidSnapshot(f"SetPollingSource: {e}") from None


def _check_mqtt(fetch: m.FetchStepMqtt) -> None:
    if not fetch.host.strip():
        raise InvalidSnapshot("SetPollingSource: Mqtt host is empty")
    if not 0 < fetch.port < 65536:
        raise InvalidSnapshot(f"SetPollingSource: Mqtt port {fetch.port} is not in 1-65535")
    if not fetch.topics:
        raise InvalidSnapshot("SetPollingSource: Mqtt has no topic to subscribe to")
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
            raise InvalidSnapshot(
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


def fetch_glob(
    step: m.FetchStepFilesGlob, prev: m.SourceState | None, system_time: Timestamp
) -> list[Fetched]:
    """The files of a ``FilesGlob`` not ingested yet, in name order (empty: up to date).

    A file is new if its name sorts after the previous state's (kind ``odf/etag``, the last
    ingested file name), so each is ingested once, across restarts; a file added later under an
    earlier name is never picked up (as in kamu).

    Raises:
        SourceNotFound: nothing matches and nothing was ingested before.
        FetchError: an event time cannot be taken from a file name.
    """
    last = prev.value if prev is not None and prev.kind == KIND_ETAG else None
    matched: dict[str, Path] = {}
    for p in glob.glob(step.path):
        path = Path(p)
        name = path.name
        if not path.is_file() or (last is not None and name <= last):
            continue
        # Two directories may hold the same file name: kamu keeps one of them; so do we.
        matched.setdefault(name, path)
    if not matched:
        if prev is None:
            raise SourceNotFound(f"no file matches {step.path[:200]!r}")
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
