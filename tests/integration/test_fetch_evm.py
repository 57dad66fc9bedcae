"""EthereumLogs fetch against a real local Ethereum node (anvil, from tests/evm's npm package).

A hand-assembled contract emits ``Transfer(address indexed from, address indexed to, uint256
value)`` (from = the caller, to = the contract, value = the call data's first word) on every call.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from coordinator.errors import FetchError, SourceUnreachable
from node.transfer.evm_fetch import AbiParam, event_selector, fetch_ethereum_logs

ANVIL = Path(__file__).resolve().parents[1] / "evm" / "node_modules" / ".bin" / "anvil"
SIG = "Transfer(address indexed from, address indexed to, uint256 value)"
TOPIC0 = event_selector(
    "Transfer",
    [
        AbiParam("from", "address", True),
        AbiParam("to", "address", True),
        AbiParam("value", "uint256", False),
    ],
)


def _runtime() -> bytes:
    # CALLDATALOAD(0) -> mem[0]; LOG3(mem[0:32], topic0, CALLER, ADDRESS); STOP
    return bytes.fromhex("6000356000523033") + b"\x7f" + TOPIC0 + bytes.fromhex("60206000a300")


def _init_code() -> bytes:
    rt = _runtime()
    n = len(rt)
    return bytes([0x60, n, 0x60, 0x0C, 0x60, 0x00, 0x39, 0x60, n, 0x60, 0x00, 0xF3]) + rt


def _rpc(url: str, method: str, *params: object) -> object:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": list(params)})
    req = urllib.request.Request(url, body.encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        reply = json.loads(r.read())
    assert "error" not in reply, reply
    return reply["result"]


def _receipt(url: str, tx: object) -> object:
    """The transaction's receipt, once anvil's automine has it (it may lag the reply)."""
    for _ in range(200):
        got = _rpc(url, "eth_getTransactionReceipt", tx)
        if got is not None:
            return got
        time.sleep(0.02)
    raise AssertionError(f"no receipt for {tx}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def node() -> Iterator[tuple[str, str, str]]:
    """A running anvil (chain 31337): its URL, the deployed contract and the sender."""
    port = _free_port()
    proc = subprocess.Popen(
        [str(ANVIL), "--host", "127.0.0.1", "--port", str(port), "--silent"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                _rpc(url, "eth_chainId")
                break
            except OSError:
                time.sleep(0.05)
        sender = _rpc(url, "eth_accounts")[0]  # type: ignore[index]
        tx = _rpc(url, "eth_sendTransaction", {"from": sender, "data": "0x" + _init_code().hex()})
        receipt = _receipt(url, tx)
        contract = receipt["contractAddress"]  # type: ignore[index]
        yield url, contract, sender
    finally:
        proc.terminate()
        proc.wait(10)


def _emit(url: str, contract: str, sender: str, value: int) -> None:
    tx = _rpc(
        url,
        "eth_sendTransaction",
        {"from": sender, "to": contract, "data": "0x" + value.to_bytes(32, "big").hex()},
    )
    _receipt(url, tx)  # mined before the test reads the logs


def test_rows_schema_state_and_resume(node: tuple[str, str, str], tmp_path: Path) -> None:
    url, contract, sender = node
    for v in (1, 2, 3):
        _emit(url, contract, sender, v)
    t1 = tmp_path / "a.parquet"
    r1 = fetch_ethereum_logs(
        node_url=url,
        chain_id=31337,
        filter_text=f"address = {contract}",
        signature=SIG,
        previous_state=None,
        target=t1,
    )
    assert r1.rows == 3 and r1.state is not None
    tab = pq.read_table(t1)
    assert tab.column_names == [
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
        "event",
    ]
    rows = tab.to_pylist()
    assert [r["event"]["value"] for r in rows] == ["1", "2", "3"]
    # Addresses are Binary, as kamu's decoder (datafusion-ethers) gives them.
    assert rows[0]["event"]["from"] == bytes.fromhex(sender.lower().removeprefix("0x"))
    assert rows[0]["event"]["to"] == bytes.fromhex(contract.lower().removeprefix("0x"))
    assert rows[0]["topic0"] == TOPIC0 and rows[0]["topic3"] is None
    num, _, h = r1.state.partition("@")
    assert int(num) == rows[-1]["block_number"] and len(h) == 64
    # second poll: only what came after the recorded block
    _emit(url, contract, sender, 4)
    t2 = tmp_path / "b.parquet"
    r2 = fetch_ethereum_logs(
        node_url=url,
        chain_id=31337,
        filter_text=f"address = {contract}",
        signature=SIG,
        previous_state=r1.state,
        target=t2,
    )
    assert r2.rows == 1 and [r["event"]["value"] for r in pq.read_table(t2).to_pylist()] == ["4"]
    # up to date
    r3 = fetch_ethereum_logs(
        node_url=url,
        chain_id=31337,
        filter_text=None,
        signature=SIG,
        previous_state=r2.state,
        target=tmp_path / "c.parquet",
    )
    assert r3.rows == 0 and not (tmp_path / "c.parquet").exists()


def test_chain_id_mismatch_and_unreachable(node: tuple[str, str, str], tmp_path: Path) -> None:
    url, _, _ = node
    with pytest.raises(FetchError, match="chain 31337"):
        fetch_ethereum_logs(
            node_url=url,
            chain_id=1,
            filter_text=None,
            signature=SIG,
            previous_state=None,
            target=tmp_path / "x",
        )
    with pytest.raises(SourceUnreachable, match="unreachable"):
        fetch_ethereum_logs(
            node_url=f"http://127.0.0.1:{_free_port()}",
            chain_id=1,
            filter_text=None,
            signature=SIG,
            previous_state=None,
            target=tmp_path / "x",
        )
    assert not (tmp_path / "x").exists()


def test_a_poll_stops_at_max_fetch_bytes_and_the_next_goes_on(
    node: tuple[str, str, str], tmp_path: Path
) -> None:
    """``[ingest] max_fetch_bytes`` bounds the log replies one poll reads: the poll stops after
    the range that reached it, records that range's last block and says there is more; the
    following polls go on from there and together read every log once. A single reply larger
    than the setting fails the poll, naming it, and writes nothing."""
    url, contract, sender = node
    for v in (11, 12, 13, 14):
        _emit(url, contract, sender, v)  # one block each (anvil mines every transaction)

    def poll(state: str | None, name: str, max_bytes: int) -> Any:
        return fetch_ethereum_logs(
            node_url=url,
            chain_id=31337,
            filter_text=f"address = {contract}",
            signature=SIG,
            previous_state=state,
            target=tmp_path / name,
            block_step=1,
            max_bytes=max_bytes,
        )

    whole = poll(None, "whole.parquet", 1 << 30)
    assert not whole.has_more and whole.rows >= 4
    values = [r["event"]["value"] for r in pq.read_table(tmp_path / "whole.parquet").to_pylist()]
    one_log = len(json.dumps(_rpc(url, "eth_getLogs", {"address": contract})[0]))  # type: ignore[index]
    state, got, polls = None, [], 0
    while True:
        r = poll(state, f"p{polls}.parquet", 2 * one_log)
        polls += 1
        if r.state is None:
            break
        got += [
            x["event"]["value"]
            for x in pq.read_table(tmp_path / f"p{polls - 1}.parquet").to_pylist()
        ]
        state = r.state
        assert r.rows <= 3  # at most two replies' worth of logs, plus the range that crossed
        if not r.has_more:
            break
    assert got == values
    assert polls >= 2
    with pytest.raises(FetchError, match=r"max_fetch_bytes"):
        poll(None, "small.parquet", one_log // 2)
    assert not (tmp_path / "small.parquet").exists()


def test_reorg_fails_and_writes_nothing(node: tuple[str, str, str], tmp_path: Path) -> None:
    url, contract, sender = node
    snap = _rpc(url, "evm_snapshot")
    _emit(url, contract, sender, 7)
    r1 = fetch_ethereum_logs(
        node_url=url,
        chain_id=31337,
        filter_text=None,
        signature=SIG,
        previous_state=None,
        target=tmp_path / "a.parquet",
    )
    assert r1.state is not None
    _rpc(url, "evm_revert", snap)
    _rpc(url, "evm_mine")  # another block at the same height: a different hash
    _emit(url, contract, sender, 8)
    with pytest.raises(FetchError, match="chain reorganization"):
        fetch_ethereum_logs(
            node_url=url,
            chain_id=31337,
            filter_text=None,
            signature=SIG,
            previous_state=r1.state,
            target=tmp_path / "b.parquet",
        )
    assert not (tmp_path / "b.parquet").exists()


def _cli(home: Path, *args: str) -> tuple[int, str]:
    from typer.testing import CliRunner

    from node.cli import app

    result = CliRunner().invoke(app, [*args, "--home", str(home)])
    return result.exit_code, result.output


def _new_home(path: Path) -> Path:
    code, text = _cli(path, "init")
    assert code == 0, text
    return path


def _snapshot(name: str, url: str | None, contract: str, chain: int = 31337) -> str:
    node_url = f"nodeUrl: {url}" if url else "# no nodeUrl: [ingest] eth_node_urls"
    return f"""\
kind: DatasetSnapshot
version: 1
content:
  name: {name}
  kind: Root
  metadata:
    - kind: SetPollingSource
      fetch:
        kind: EthereumLogs
        chainId: {chain}
        {node_url}
        signature: |
          Transfer(
            address indexed from,
            address indexed to,
            uint256 value
          )
        filter: |
          address = X'{contract.removeprefix("0x")}'
          and
          block_number > 0
      read:
        kind: Parquet
        # This node's ingest needs a read schema (no inference); the decoded ``event`` struct
        # has no DDL spelling here, so the raw log columns are read.
        schema:
          - block_number BIGINT UNSIGNED
          - block_hash BYTEA
          - block_timestamp TIMESTAMP
          - transaction_index BIGINT UNSIGNED
          - transaction_hash BYTEA
          - log_index BIGINT UNSIGNED
          - address BYTEA
          - topic0 BYTEA
          - topic1 BYTEA
          - topic2 BYTEA
          - topic3 BYTEA
          - data BYTEA
      merge:
        kind: Append
"""


def _create(
    home: Path, tmp: Path, name: str, url: str | None, contract: str, chain: int = 31337
) -> None:
    snap = tmp / f"{name}.yaml"
    snap.write_text(_snapshot(name, url, contract, chain))
    code, text = _cli(home, "dataset", "create", str(snap))
    assert code == 0, text


def _pull(home: Path, alias: str) -> tuple[int, Any]:
    code, text = _cli(home, "dataset", "pull", alias, "--json")
    return code, (json.loads(text) if code == 0 else text)


def test_dataset_pull_ingests_logs_and_resumes_from_the_state(
    node: tuple[str, str, str], tmp_path: Path
) -> None:
    url, contract, sender = node
    home = _new_home(tmp_path / "home")
    _create(home, tmp_path, "transfers", url, contract)
    code, out = _pull(home, "transfers")
    assert code == 0, out
    first = out["records"]
    assert first >= 1 and out["source_state"]["kind"] == "odf/etag"
    _emit(url, contract, sender, 42)
    code, out = _pull(home, "transfers")
    assert code == 0, out
    assert out["records"] == 1, out
    num, _, h = out["source_state"]["value"].partition("@")
    assert int(num) > 0 and len(h) == 64
    code, out = _pull(home, "transfers")
    assert code == 0 and out["records"] == 0 and out["new_blocks"] == 0, out


def test_dataset_pull_bad_node_commits_nothing(node: tuple[str, str, str], tmp_path: Path) -> None:
    url, contract, _ = node
    home = _new_home(tmp_path / "home")
    _create(home, tmp_path, "gone", f"http://127.0.0.1:{_free_port()}", contract)
    code, out = _pull(home, "gone")
    assert code != 0 and "unreachable" in out and "nothing was committed" in out, out
    _create(home, tmp_path, "wrongchain", url, contract, chain=1)
    code, out = _pull(home, "wrongchain")
    assert code != 0 and "chain 31337" in out, out
    _create(home, tmp_path, "nourl", None, contract)
    code, out = _pull(home, "nourl")
    assert code != 0 and "eth_node_urls" in out and "nothing was committed" in out, out
    # The source policy: a private address is refused before any connection (the test runs in
    # a loopback-only namespace, so nothing could be reached anyway).
    _create(home, tmp_path, "private", "http://10.1.2.3:8545", contract)
    code, out = _pull(home, "private")
    assert code != 0 and "10.1.2.3" in out and "unreachable" not in out, out


def test_dataset_pull_after_a_reorg_commits_nothing(
    node: tuple[str, str, str], tmp_path: Path
) -> None:
    url, contract, sender = node
    home = _new_home(tmp_path / "home")
    _create(home, tmp_path, "reorged", url, contract)
    snap = _rpc(url, "evm_snapshot")
    _emit(url, contract, sender, 9)
    code, out = _pull(home, "reorged")
    assert code == 0 and out["records"] >= 1, out
    _rpc(url, "evm_revert", snap)  # the pulled block is replaced by another at its height
    _rpc(url, "evm_mine")
    _emit(url, contract, sender, 10)
    code, before = _cli(home, "dataset", "log", "reorged")
    assert code == 0 and "AddData" in before, before
    code, out = _pull(home, "reorged")
    assert code != 0 and "chain reorganization" in out and "nothing was committed" in out, out
    assert _cli(home, "dataset", "log", "reorged") == (0, before)


def test_a_daemon_schedule_polls_an_ethereum_source(
    node: tuple[str, str, str], tmp_path: Path
) -> None:
    from daemon_harness import NodeProcess

    url, contract, sender = node
    proc = NodeProcess(
        tmp_path / "node",
        "evm",
        config={
            "ipfs": {"mode": "none"},
            "flows": {"tick_s": 0.2},
            # The source has no nodeUrl: the node's per-chain URL is used (kamu's config too).
            "ingest": {"eth_node_urls": [f"31337={url}"]},
        },
    )
    proc.init()
    proc.launch()
    try:
        proc.wait_ready()
        proc.call("dataset.create", snapshot_yaml=_snapshot("sched", None, contract))
        proc.call("dataset.schedule", ref="sched", every="1s")

        def records() -> int | None:
            (row,) = [r for r in proc.call("dataset.list") if r["alias"] == "sched"]
            return int(row["records"]) or None

        first = proc.wait_for("the first scheduled poll", records)
        assert first
        _emit(url, contract, sender, 11)
        assert proc.wait_for("the new log to be polled", lambda: records() == first + 1 or None)
    finally:
        proc.stop()


def test_a_kamu_contrib_shaped_source_reads_the_decoded_event(
    node: tuple[str, str, str], tmp_path: Path
) -> None:
    """As kamu-contrib's EthereumLogs datasets are written: ``read: Parquet`` with no schema (the
    fetched file's own) and a preprocess query over the decoded ``event`` struct."""
    url, contract, sender = node
    _emit(url, contract, sender, 777)
    snapshot = _snapshot("decoded", url, contract)
    start = snapshot.index("      read:")
    end = snapshot.index("      merge:")
    snapshot = (
        snapshot[:start]
        + """\
      read:
        kind: Parquet
      preprocess:
        kind: Sql
        engine: datafusion
        query: |
          select
            coalesce(block_timestamp, to_timestamp_seconds(0)) as event_time,
            cast(block_number as bigint) as block_number,
            event.to as to,
            cast(event.value as double) as value
          from input
"""
        + snapshot[end:]
    )
    home = _new_home(tmp_path / "home")
    (tmp_path / "decoded.yaml").write_text(snapshot)
    code, text = _cli(home, "dataset", "create", str(tmp_path / "decoded.yaml"))
    assert code == 0, text
    code, out = _pull(home, "decoded")
    assert code == 0 and out["records"] >= 1, out
    code, text = _cli(home, "dataset", "tail", "decoded", "-n", "100", "--json")
    assert code == 0, text
    tail = json.loads(text)
    rows = [dict(zip(tail["columns"], r, strict=True)) for r in tail["rows"]]
    assert 777.0 in {r["value"] for r in rows}, rows
    # An address is Binary, as kamu's decoder gives it (the JSON shows its hex).
    assert all(r["to"] == contract.lower().removeprefix("0x") for r in rows if r["value"] == 777.0)
