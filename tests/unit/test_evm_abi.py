"""Pure parts of the EthereumLogs fetch (node/transfer/evm_fetch.py): the event signature's
parsing, selector and decoding, and the SQL filter's translation into an eth_getLogs filter."""

from __future__ import annotations

import pytest

from coordinator.errors import FetchError
from node.transfer.evm_fetch import (
    AbiParam,
    decode_event,
    event_selector,
    parse_filter,
    parse_signature,
)

TRANSFER = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"


def _word(n: int, signed: bool = False) -> bytes:
    return n.to_bytes(32, "big", signed=signed)


def test_signature_parses_multiline_and_gives_the_known_selector() -> None:
    name, params = parse_signature(
        "Transfer(\n  address indexed from,\n  address indexed to,\n  uint256 value\n)"
    )
    assert name == "Transfer"
    assert params == [
        AbiParam("from", "address", True),
        AbiParam("to", "address", True),
        AbiParam("value", "uint256", False),
    ]
    assert "0x" + event_selector(name, params).hex() == TRANSFER


def test_uint_alias_and_unsupported_type_named() -> None:
    _, params = parse_signature("E(uint a, int b)")
    assert [p.type for p in params] == ["uint256", "int256"]
    with pytest.raises(FetchError, match="'tuple"):
        parse_signature("E(tuple(uint a) x)")
    with pytest.raises(FetchError, match="does not parse"):
        parse_signature("not a signature")


def test_decode_static_and_dynamic_values() -> None:
    _, params = parse_signature(
        "E(address indexed who, uint8 small, int64 neg, bool ok, bytes4 tag, string s, uint256 big)"
    )
    who = bytes(12) + bytes.fromhex("11" * 20)
    head = [
        _word(7),
        _word(-5, signed=True),
        _word(1),
        b"\xde\xad\xbe\xef" + bytes(28),
        _word(32 * 6),  # offset of the string's tail after six head words
        _word(2**200),
    ]
    text = "héllo".encode()
    data = b"".join(head) + _word(len(text)) + text.ljust(32, b"\0")
    got = decode_event(params, [b"topic0", who], data)
    assert got == {
        "who": bytes.fromhex("11" * 20),
        "small": 7,
        "neg": -5,
        "ok": True,
        "tag": b"\xde\xad\xbe\xef",
        "s": "héllo",
        "big": str(2**200),
    }


def test_decode_refuses_a_log_that_does_not_fit() -> None:
    _, params = parse_signature("E(address indexed a, uint256 v)")
    with pytest.raises(FetchError, match="fewer topics"):
        decode_event(params, [b"t0"], _word(1))
    with pytest.raises(FetchError, match="shorter"):
        decode_event(params, [b"t0", bytes(32)], b"")


def test_filter_translation() -> None:
    f = parse_filter(
        "address = X'AE78736cd615f374d3085123a210448e74fc6393'\nand\nblock_number > 13325304"
    )
    assert f.address == "0xae78736cd615f374d3085123a210448e74fc6393"
    assert f.from_block == 13325305 and f.to_block is None
    f = parse_filter("topic1 = 0x01 and block_number >= 5 and block_number < 10")
    assert f.topics == (None, "0x" + "0" * 63 + "1", None, None)
    assert (f.from_block, f.to_block) == (5, 9)
    assert parse_filter(None) == parse_filter("  ")


@pytest.mark.parametrize(
    "bad", ["address = 0x1 or topic0 = 0x2", "data = 0x00", "topic0 > 0x1", "value = 3"]
)
def test_filters_that_cannot_be_pushed_down_are_refused(bad: str) -> None:
    with pytest.raises(FetchError, match=r"eth_getLogs|compared"):
        parse_filter(bad)
