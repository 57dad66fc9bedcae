"""Fetching an ``EthereumLogs`` polling source from an Ethereum node's JSON-RPC API.

What kamu does (kamu-cli ``src/infra/core/src/services/ingest/fetch_service/evm.rs``) and this
module reproduces:

* the node URL is the step's ``nodeUrl``, else the node's configured URL for ``chainId``; the
  node's ``eth_chainId`` must equal ``chainId`` when one is given;
* the ``filter`` is SQL over the logs table (``address = X and topic0 = Y and block_number >=
  N``); only conditions that become an ``eth_getLogs`` filter are accepted (kamu refuses a filter
  it cannot push down into the RPC request); with a ``signature`` the event's selector is ANDed
  in as ``topic0``;
* blocks are scanned from the one after the last seen block (the source state, kind ``ETag``,
  value ``<number>@<hash hex>``) up to the head, in ranges of ``block_step`` blocks;
* rows have kamu's raw log columns, then (with a ``signature``) the decoded parameters in one
  struct column ``event`` (kamu's example sources select ``event.to``); the file is parquet
  (the source's read step is ``Parquet``, as in kamu's examples).

Reorgs: kamu records the last block's hash but does not check it ("TODO: Reorg tolerance"). This
node does check it: if the block at the recorded number now has another hash the poll fails with
:class:`~coordinator.errors.FetchError` and nothing is committed.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from coordinator.errors import FetchError, SourceUnreachable

__all__ = [
    "AbiParam",
    "EvmFetchResult",
    "event_selector",
    "fetch_ethereum_logs",
    "parse_filter",
    "parse_signature",
]


def keccak256(data: bytes) -> bytes:
    """Keccak-256 (Ethereum's hash, not NIST SHA3-256)."""
    from Crypto.Hash import keccak

    return keccak.new(digest_bits=256, data=data).digest()


@dataclass(frozen=True, slots=True)
class AbiParam:
    """One parameter of an event signature."""

    name: str
    type: str
    indexed: bool


_INT_WIDTHS = frozenset(range(8, 257, 8))
_IDENT_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_IDENT = _IDENT_START | frozenset("0123456789")


def _is_static(typ: str) -> bool:
    """An ABI static type decoded here: address, bool, (u)intN, bytesN (1..32)."""
    if typ in ("address", "bool", "uint", "int"):
        return True
    for prefix in ("uint", "int"):
        if typ.startswith(prefix) and typ[len(prefix) :].isdigit():
            return int(typ[len(prefix) :]) in _INT_WIDTHS
    if typ.startswith("bytes") and typ[5:].isdigit():
        return 1 <= int(typ[5:]) <= 32
    return False


def _split_signature(signature: str) -> tuple[str, str] | None:
    """``Name(body)`` -> ``(Name, body)``: the name an identifier, the body up to the last
    ``)`` (linear; no regular expression runs on a source's text)."""
    text = signature.strip()
    open_at, close_at = text.find("("), text.rfind(")")
    if open_at < 1 or close_at != len(text) - 1:
        return None
    name = text[:open_at].strip()
    if not name or name[0] not in _IDENT_START or any(c not in _IDENT for c in name):
        return None
    return name, text[open_at + 1 : close_at]


def parse_signature(signature: str) -> tuple[str, list[AbiParam]]:
    """Parse ``Name(type [indexed] name, ...)`` into the event name and its parameters.

    Raises:
        FetchError: the signature does not parse, or a parameter's type is not decoded here
            (static types: address, bool, uintN, intN, bytesN; dynamic: string, bytes).
    """
    parts = _split_signature(signature.replace("\n", " "))
    if parts is None:
        raise FetchError(f"EthereumLogs signature {signature[:200]!r} does not parse")
    name, body = parts[0], parts[1].strip()
    params: list[AbiParam] = []
    for i, part in enumerate(p.strip() for p in body.split(",") if p.strip()):
        words = part.split()
        typ = words[0]
        indexed = "indexed" in words[1:]
        rest = [w for w in words[1:] if w != "indexed"]
        pname = rest[0] if rest else f"param{i}"
        if typ == "uint":
            typ = "uint256"
        if typ == "int":
            typ = "int256"
        if not (_is_static(typ) or typ in ("string", "bytes")):
            raise FetchError(
                f"EthereumLogs signature {signature[:200]!r}: parameter type {typ!r} is not "
                "decoded by this node (address, bool, uintN, intN, bytesN, string, bytes are)"
            )
        params.append(AbiParam(pname, typ, indexed))
    return name, params


def event_selector(name: str, params: list[AbiParam]) -> bytes:
    """topic0 of an event: keccak256 of its canonical signature."""
    return keccak256(f"{name}({','.join(p.type for p in params)})".encode())


def _decode_word(typ: str, word: bytes) -> Any:
    if typ == "address":
        return word[12:]  # 20 bytes, Binary as datafusion-ethers gives it
    if typ == "bool":
        return word[-1] != 0
    if typ.startswith("uint"):
        v = int.from_bytes(word, "big")
        return v if int(typ[4:]) <= 64 else str(v)
    if typ.startswith("int"):
        v = int.from_bytes(word, "big", signed=True)
        return v if int(typ[3:]) <= 64 else str(v)
    if typ.startswith("bytes"):
        return word[: int(typ[5:])]
    raise FetchError(f"EthereumLogs: cannot decode {typ!r}")


def decode_event(params: list[AbiParam], topics: list[bytes], data: bytes) -> dict[str, Any]:
    """Decode one log's parameters: indexed ones from topics 1.., the rest from ``data``.

    Indexed dynamic values are only their keccak hash in a log (kept as bytes).

    Raises:
        FetchError: the log does not match the signature (too few topics, short data).
    """
    out: dict[str, Any] = {}
    ti = 1
    head = 0
    for p in params:
        if p.indexed:
            if ti >= len(topics):
                raise FetchError("EthereumLogs: a log has fewer topics than the signature")
            t = topics[ti]
            ti += 1
            out[p.name] = t if p.type in ("string", "bytes") else _decode_word(p.type, t)
            continue
        word = data[head : head + 32]
        if len(word) != 32:
            raise FetchError("EthereumLogs: a log's data is shorter than the signature needs")
        head += 32
        if p.type in ("string", "bytes"):
            off = int.from_bytes(word, "big")
            n = int.from_bytes(data[off : off + 32], "big")
            raw = data[off + 32 : off + 32 + n]
            out[p.name] = raw.decode("utf-8", "replace") if p.type == "string" else raw
        else:
            out[p.name] = _decode_word(p.type, word)
    return out


@dataclass(frozen=True, slots=True)
class LogFilter:
    """An ``eth_getLogs`` filter from a source's ``filter``."""

    address: str | None = None
    topics: tuple[str | None, ...] = (None, None, None, None)
    from_block: int = 0
    to_block: int | None = None


_COLUMNS = frozenset(("address", "addr", "topic0", "topic1", "topic2", "topic3", "block_number"))
_OPERATORS = (">=", "<=", "=", ">", "<")  # two-character ones first
_HEX = frozenset("0123456789abcdefABCDEF")


def _conditions(text: str) -> list[str]:
    """The conditions of ``a AND b AND c`` (``and`` in any case, between whitespace)."""
    out: list[list[str]] = [[]]
    for word in text.split():
        if word.lower() == "and":
            out.append([])
        else:
            out[-1].append(word)
    return [" ".join(words) for words in out]


def _literal(value: str) -> str | None:
    """A hex (``0x..``, ``X'..'``, ``'0x..'``) or decimal literal as written, else None."""
    v = value.strip()
    if v.isdigit():
        return v
    for start, end in (("0x", ""), ("X'", "'"), ("'0x", "'")):
        if v.startswith(start) and v.endswith(end) and len(v) > len(start) + len(end):
            digits = v[len(start) : len(v) - len(end)]
            if all(c in _HEX for c in digits):
                return v
    return None


def _condition(cond: str) -> tuple[str, str, str] | None:
    """``column op literal`` of one condition, or None if it is not one this filter pushes
    down (linear; no regular expression runs on a source's text)."""
    for op in _OPERATORS:
        at = cond.find(op)
        if at < 0:
            continue
        col, val = cond[:at].strip(), _literal(cond[at + len(op) :])
        if col in _COLUMNS and val is not None:
            return col, op, val
        return None
    return None


def parse_filter(text: str | None) -> LogFilter:
    """Translate a source's SQL filter into an ``eth_getLogs`` filter.

    Accepted: conditions joined with ``and``: ``address = 0x..``, ``topicN = 0x..``,
    ``block_number`` compared with a number (``=``, ``>=``, ``>``, ``<=``, ``<``).

    Raises:
        FetchError: a condition cannot be pushed down into ``eth_getLogs`` (as kamu refuses it).
    """
    if not text or not text.strip():
        return LogFilter()
    address: str | None = None
    topics: list[str | None] = [None, None, None, None]
    lo, hi = 0, None
    for cond in _conditions(text.strip().strip("()")):
        found = _condition(cond.strip().strip("()"))
        if found is None:
            raise FetchError(
                f"EthereumLogs filter condition {cond[:100]!r} cannot be pushed down into an "
                "eth_getLogs request (address, topic0..3 and block_number comparisons joined "
                "with AND are): move it into the source's preprocess step"
            )
        col, op, val = found
        if col == "block_number":
            if not val.isdigit():
                raise FetchError(f"EthereumLogs filter: block_number compared with {val!r}")
            n = int(val)
            if op in ("=", ">="):
                lo = max(lo, n)
            if op == ">":
                lo = max(lo, n + 1)
            if op in ("=", "<="):
                hi = n if hi is None else min(hi, n)
            if op == "<":
                hi = n - 1 if hi is None else min(hi, n - 1)
            continue
        if op != "=":
            raise FetchError(f"EthereumLogs filter: {col} can only be compared with '='")
        hexval = "0x" + val.strip("'").removeprefix("X'").removeprefix("0x").lower()
        if col in ("address", "addr"):
            address = hexval
        else:
            topics[int(col[5])] = "0x" + hexval[2:].rjust(64, "0")
    return LogFilter(address, tuple(topics), lo, hi)


SETTING_MAX = "[ingest] max_fetch_bytes"
_MAX_REPLY = 64 << 20
"""The largest single JSON-RPC reply read, whatever the setting (a reply is parsed whole)."""


class _Rpc:
    """A minimal JSON-RPC 2.0 client over HTTP (blocking; run it in a thread).

    ``bytes_read`` counts the reply bodies so far; a reply longer than ``cap`` (at most
    :data:`_MAX_REPLY`) is refused without being read whole."""

    def __init__(self, url: str, timeout_s: float) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.bytes_read = 0
        self._id = 0

    def call(self, method: str, *params: Any, cap: int = _MAX_REPLY) -> Any:
        self._id += 1
        body = json.dumps(
            {"jsonrpc": "2.0", "id": self._id, "method": method, "params": list(params)}
        ).encode()
        req = urllib.request.Request(
            self.url, data=body, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                cap = min(cap, _MAX_REPLY)
                raw = resp.read(cap + 1)
                self.bytes_read += len(raw)
                if len(raw) > cap:
                    raise FetchError(
                        f"Ethereum node {self.url[:200]}: the {method} reply is larger than "
                        f"{cap:,} bytes ({SETTING_MAX}, at most "
                        f"{_MAX_REPLY:,} per reply); nothing was committed (raise the setting, "
                        "or narrow the source's filter)"
                    )
                reply = json.loads(raw)
        except (urllib.error.URLError, OSError, TimeoutError) as e:
            raise SourceUnreachable(
                f"Ethereum node {self.url[:200]} is unreachable ({method}): {e}; nothing was "
                "committed (check the source's nodeUrl or [ethereum] node_urls)"
            ) from None
        except ValueError as e:
            raise FetchError(
                f"Ethereum node {self.url[:200]}: {method} reply is not JSON: {e}"
            ) from None
        if "error" in reply:
            raise FetchError(f"Ethereum node {self.url[:200]}: {method} failed: {reply['error']}")
        return reply.get("result")


@dataclass(frozen=True, slots=True)
class EvmFetchResult:
    """What one poll got: the rows written (0: up to date) and the new source state."""

    rows: int
    state: str | None
    has_more: bool


def _b(h: str | None) -> bytes | None:
    return None if h is None else bytes.fromhex(h.removeprefix("0x"))


def fetch_ethereum_logs(
    *,
    node_url: str,
    chain_id: int | None,
    filter_text: str | None,
    signature: str | None,
    previous_state: str | None,
    target: Path,
    block_step: int = 10_000,
    max_blocks: int = 1_000_000,
    timeout_s: float = 30.0,
    max_bytes: int = 1 << 30,
) -> EvmFetchResult:
    """Fetch the logs after ``previous_state`` into a parquet file at ``target`` (written unless
    up to date: no new block).

    ``max_bytes`` (``[ingest] max_fetch_bytes``) bounds the logs one poll reads: ``eth_getLogs``
    goes ``block_step`` blocks at a time and stops after the range whose reply reaches it (so a
    poll holds at most ``max_bytes`` plus one reply); the state then records that range's last
    block, ``has_more`` is set and the next poll goes on from there. A single reply larger than
    ``max_bytes`` (or 64 MiB) fails the poll naming the setting.

    Raises:
        SourceUnreachable: the node does not answer.
        FetchError: chain id mismatch, bad filter or signature, or a reorg (the recorded last
            block is no longer on the chain); nothing is written then.
    """
    import pyarrow.parquet as pq

    flt = parse_filter(filter_text)
    params: list[AbiParam] = []
    topics = list(flt.topics)
    if signature:
        name, params = parse_signature(signature)
        topics[0] = "0x" + event_selector(name, params).hex()
    rpc = _Rpc(node_url, timeout_s)
    got_chain = int(rpc.call("eth_chainId"), 16)
    if chain_id is not None and got_chain != chain_id:
        raise FetchError(
            f"Ethereum node {node_url[:200]} is on chain {got_chain}, the source expects chain "
            f"{chain_id}; nothing was committed"
        )
    head = int(rpc.call("eth_blockNumber"), 16)
    start = max(flt.from_block, _resume_after(rpc, previous_state))
    end = head if flt.to_block is None else min(head, flt.to_block)
    end = min(end, start + max_blocks - 1)
    if start > end:
        return EvmFetchResult(0, None, False)
    logs, end = _get_logs(rpc, flt.address, topics, start, end, block_step, max_bytes)
    last_block = rpc.call("eth_getBlockByNumber", hex(end), False)
    state = f"{end}@{last_block['hash'].removeprefix('0x')}"
    # Written even without logs: the scanned blocks advance the state, and the empty file has
    # the schema the source's read step and queries expect.
    pq.write_table(_logs_table(logs, params), target)
    return EvmFetchResult(len(logs), state, end < head)


def _resume_after(rpc: _Rpc, previous_state: str | None) -> int:
    """The first block after the recorded one (0 with no state), once the recorded block is
    checked to be still on the chain.

    Raises:
        FetchError: a reorganization replaced (or removed) the recorded block.
    """
    if not previous_state:
        return 0
    num_s, _, hash_s = previous_state.partition("@")
    last = int(num_s)
    block = rpc.call("eth_getBlockByNumber", hex(last), False)
    if block is None or block["hash"].removeprefix("0x") != hash_s.removeprefix("0x"):
        raise FetchError(
            f"chain reorganization: block {last} recorded as {hash_s[:66]} is "
            f"{'gone' if block is None else block['hash']} on the node; odf-node does not "
            "rewrite ingested history (kamu does not handle reorgs either): nothing was "
            "committed"
        )
    return last + 1


def _get_logs(
    rpc: _Rpc,
    address: str | None,
    topics: list[str | None],
    start: int,
    end: int,
    block_step: int,
    max_bytes: int,
) -> tuple[list[dict[str, Any]], int]:
    """``eth_getLogs`` of ``start..end`` in ranges of ``block_step`` blocks, until the replies
    reach ``max_bytes``; the logs and the last block they cover."""
    while topics and topics[-1] is None:
        topics.pop()
    logs: list[dict[str, Any]] = []
    lo = start
    first = rpc.bytes_read
    while lo <= end:
        if lo > start and rpc.bytes_read - first >= max_bytes:
            return logs, lo - 1
        hi = min(end, lo + block_step - 1)
        q: dict[str, Any] = {"fromBlock": hex(lo), "toBlock": hex(hi)}
        if address:
            q["address"] = address
        if topics:
            q["topics"] = topics
        logs.extend(rpc.call("eth_getLogs", q, cap=max_bytes) or [])
        lo = hi + 1
    return logs, end


_RAW_COLUMNS = (
    "block_number",
    "block_hash",
    "block_timestamp",
    "transaction_index",
    "transaction_hash",
    "log_index",
    "address",
    "topic0",
    "topic1",
    "topic2",
    "topic3",
    "data",
)


def _raw_row(log: dict[str, Any]) -> dict[str, Any]:
    """One log's raw columns, as kamu's (datafusion-ethers') raw decoder gives them."""
    tps = [_b(t) for t in log["topics"]]
    # As kamu: the node's blockTimestamp if it gives one, else null (no extra block request).
    stamp = log.get("blockTimestamp")
    row: dict[str, Any] = {
        "block_number": int(log["blockNumber"], 16),
        "block_hash": _b(log["blockHash"]),
        "block_timestamp": None if stamp is None else int(stamp, 16),
        "transaction_index": int(log["transactionIndex"], 16),
        "transaction_hash": _b(log["transactionHash"]),
        "log_index": int(log["logIndex"], 16),
        "address": _b(log["address"]),
        "data": _b(log["data"]) or b"",
        "topics": tps,  # as the log has them (not a column)
    }
    for i in range(4):
        row[f"topic{i}"] = tps[i] if i < len(tps) else None
    return row


def _logs_table(logs: list[dict[str, Any]], params: list[AbiParam]) -> Any:
    """The logs as kamu's columns, and with a signature one struct column ``event`` holding
    the decoded parameters (as kamu puts them)."""
    import pyarrow as pa

    types: dict[str, Any] = {
        "block_number": pa.uint64(),
        "block_hash": pa.binary(),
        "block_timestamp": pa.timestamp("s", tz="UTC"),
        "transaction_index": pa.uint64(),
        "transaction_hash": pa.binary(),
        "log_index": pa.uint64(),
        "address": pa.binary(),
        "topic0": pa.binary(),
        "topic1": pa.binary(),
        "topic2": pa.binary(),
        "topic3": pa.binary(),
        "data": pa.binary(),
    }
    rows = [_raw_row(log) for log in logs]
    arrays = {k: pa.array([r[k] for r in rows], type=types[k]) for k in _RAW_COLUMNS}
    if params:
        decoded = [decode_event(params, [t or b"" for t in r["topics"]], r["data"]) for r in rows]
        arrays["event"] = pa.StructArray.from_arrays(
            [pa.array([d[p.name] for d in decoded], type=_arrow_type(p.type)) for p in params],
            names=[p.name for p in params],
        )
    return pa.table(arrays)


def _arrow_type(typ: str) -> Any:
    """The decoded column's type as kamu's decoder (datafusion-ethers,
    ``src/convert/decoded.rs``) gives it: addresses and bytes as Binary, 32- and 64-bit integers
    as such, wider ones as decimal text; other widths (not decoded there) as 64-bit."""
    import pyarrow as pa

    if typ == "string":
        return pa.string()
    if typ == "bool":
        return pa.bool_()
    for prefix, small, large in (
        ("uint", pa.uint32(), pa.uint64()),
        ("int", pa.int32(), pa.int64()),
    ):
        if typ.startswith(prefix):
            bits = int(typ[len(prefix) :])
            return small if bits == 32 else large if bits <= 64 else pa.string()
    return pa.binary()


def node_host(url: str) -> tuple[str, int]:
    """Host and port of a node URL (for the source policy)."""
    u = urlsplit(url)
    return u.hostname or "", u.port or (443 if u.scheme == "https" else 80)
