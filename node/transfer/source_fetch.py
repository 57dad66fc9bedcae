"""``GET`` of a polling source's ``http(s)://`` URL into a file, under the node's source policy.

The same client rules as a pull (:mod:`node.transfer.sources`): only addresses the
:class:`~node.transfer.policy.SourcePolicy` allows (``transfer.allow_private_sources``,
``transfer.allowed_source_networks``), every redirect hop checked, no proxy from the
environment. The body is streamed to disk and bounded by ``max_bytes``
(``ingest.max_fetch_bytes``); ``Accept-Encoding: identity`` is sent, so what is stored is what
the source serves (a compressed source is declared with a ``Decompress`` prepare step).

Outcomes follow kamu-cli's HTTP fetch (kamu-cli,
``src/infra/core/src/services/ingest/fetch_service/http.rs``): ``200`` fetched, ``304`` not
modified, ``404`` :class:`~coordinator.errors.SourceNotFound`, any other status or a
connection failure :class:`~coordinator.errors.SourceUnreachable`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import aiohttp

from coordinator.errors import FetchError, SourceNotFound, SourceUnreachable
from node.transfer.errors import TransientSourceError
from node.transfer.sources import SharedHttpSession, policy_get

__all__ = ["UrlFetch", "fetch_url_to_file"]

_PIECE = 1 << 16


@dataclass(frozen=True, slots=True)
class UrlFetch:
    """The answer to a polling ``GET``: ``modified`` False for ``304 Not Modified``."""

    modified: bool
    etag: str | None = None
    last_modified: str | None = None
    size: int = 0


async def fetch_url_to_file(
    http: SharedHttpSession,
    url: str,
    headers: dict[str, str],
    target: Path,
    *,
    max_bytes: int,
) -> UrlFetch:
    """``GET url`` with ``headers``; a ``200`` body is written to ``target``.

    Raises:
        SourceNotFound: 404.
        SourceUnreachable: cannot connect, a timeout, too many redirects, any other status.
        FetchError: the body is larger than ``max_bytes``.
        InvalidSourceUrl, SourceRefused: the policy refuses the URL or a redirect.
    """
    shown = url[:200]
    request_headers = {**headers, "Accept-Encoding": "identity"}
    try:
        async with await policy_get(http, url, request_headers) as r:
            if r.status == 304:
                return UrlFetch(False)
            if r.status == 404:
                raise SourceNotFound(f"{shown}: HTTP 404 Not Found")
            if r.status != 200:
                raise SourceUnreachable(f"{shown}: HTTP {r.status} {r.reason or ''}".rstrip())
            declared = r.content_length
            if declared is not None and declared > max_bytes:
                raise FetchError(
                    f"{shown}: the response is {declared:,} bytes, more than "
                    f"ingest.max_fetch_bytes ({max_bytes:,})"
                )
            size = 0
            with open(target, "wb") as out:
                async for piece in r.content.iter_chunked(_PIECE):
                    size += len(piece)
                    if size > max_bytes:
                        raise FetchError(
                            f"{shown}: the response is larger than ingest.max_fetch_bytes "
                            f"({max_bytes:,} bytes)"
                        )
                    out.write(piece)
            return UrlFetch(True, r.headers.get("ETag"), r.headers.get("Last-Modified"), size)
    except TransientSourceError as e:
        raise SourceUnreachable(f"{shown}: {e}") from None
    except (aiohttp.ClientError, TimeoutError, OSError) as e:
        why = str(e) or type(e).__name__
        raise SourceUnreachable(f"{shown}: unreachable: {why}") from None
