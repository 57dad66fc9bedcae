"""Reading an HTTP request's body under a size bound: the JSON-RPC endpoint's
(``node/rpc/server.py``), and the data API's (``node/transfer/data_api.py``), which reads its
bodies as this server does."""

from __future__ import annotations

from aiohttp import StreamReader

_CHUNK = 65536


async def read_bounded(content: StreamReader, limit: int) -> bytearray:
    """The body of ``content``, read in chunks to its end or until it is over ``limit`` bytes
    (the rest left unread): a result longer than ``limit`` means the body is too large.

    Content-Length may be absent (a chunked body), so the read is bounded here, not by the
    header; a caller bounds its time."""
    body = bytearray()
    while len(body) <= limit:
        chunk = await content.read(_CHUNK)
        if not chunk:
            break
        body += chunk
    return body
