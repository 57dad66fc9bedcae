"""``node.rpc.http_body.read_bounded``: a request body read to its end, or only until it is over the
bound (the JSON-RPC server and the data API refuse what is over it)."""

from __future__ import annotations

import asyncio
from unittest import mock

from aiohttp import StreamReader

from node.rpc.http_body import read_bounded


def _content(*chunks: bytes) -> StreamReader:
    """A request's body stream, all of it received (made on the running loop)."""
    reader = StreamReader(mock.Mock(_reading_paused=False), 2**16, loop=asyncio.get_running_loop())
    for c in chunks:
        reader.feed_data(c)
    reader.feed_eof()
    return reader


async def _read(limit: int, *chunks: bytes) -> bytearray:
    return await read_bounded(_content(*chunks), limit)


def test_a_body_within_the_bound_is_read_whole() -> None:
    assert asyncio.run(_read(4, b"ab", b"cd")) == b"abcd"


def test_an_empty_body() -> None:
    assert asyncio.run(_read(10)) == b""


def test_a_body_over_the_bound_stops_being_read() -> None:
    async def run() -> tuple[bytearray, bytes]:
        content = _content(b"x" * 70_000, b"y" * 70_000, b"z" * 10)
        body = await read_bounded(content, 1000)
        return body, await content.read()

    body, rest = asyncio.run(run())
    assert len(body) > 1000
    assert body == b"x" * len(body)  # the first chunk only
    assert rest.endswith(b"z" * 10)  # the rest left unread
