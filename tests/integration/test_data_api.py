"""kamu's HTTP data API on real daemons (issue 40 items 2 and 3; ``docs/query.md``).

Two daemons (no gossip, no IPFS), shared by the module: node 1 owns ``cities`` (three rows
ingested); node 2 follows it by URL (node 1's Simple Transfer Protocol on the same listener),
verifies it and attests its head. Over HTTP:

* ``/query`` without and with a proof (the commitment's hashes and signature hold; the signer is
  node 1's ``did:key``), GET and POST, paging and data formats, kamu's error shapes;
* ``/verify`` on node 1: ok, then each error kind after tampering (input hash, sub-queries hash,
  signature; a forged ``outputHash`` re-signed with node 1's key file, an unknown dataset and an
  unknown block re-hashed and re-signed);
* node 1's commitment checked ok by node 2's ``/verify`` and by ``odf-node query verify`` (on
  node 2, and ``--node`` node 2); the forged one is ``VerificationFailed::OutputMismatch`` there;
* ``include: ["Attestations"]`` on node 2 carries node 2's in-toto envelope of the head, which
  ``odf-node attestation verify`` accepts;
* ``/{dataset}/tail`` and ``/{dataset}/metadata``; bounded bodies and SQL.

Run in a loopback-only namespace (``make test`` does).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import CITIES_SNAPSHOT, ROOT, NodeProcess
from netns import require_loopback_only

from coordinator.identity import DatasetId
from coordinator.multiformats import Multihash
from node.app.query_proofs import CommitmentSigner, check_commitment, hash_of
from node.home import NodeHome

CSV = """event_time,city,population
2020-01-01T00:00:00Z,A,1000
2020-01-02T00:00:00Z,B,2000
2020-01-03T00:00:00Z,C,3000
"""
QUERY = 'select offset, city, population from "cities" order by offset desc'


class Nodes:
    """The module's two daemons and their HTTP base URLs."""

    def __init__(self, one: NodeProcess, two: NodeProcess, url1: str, url2: str) -> None:
        self.one, self.two = one, two
        self.url1, self.url2 = url1, url2
        self.did = ""
        self.head = ""


def _node(base: Path, name: str) -> NodeProcess:
    n = NodeProcess(
        base / name,
        name,
        config={
            "ipfs": {"mode": "none"},
            "p2p": {"enabled": False},
            "query": {"flight_sql_enabled": False, "max_sql_bytes": 4096},
            "follow": {"poll_interval_s": 600.0},
        },
    )
    n.init()
    n.launch()
    return n


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    require_loopback_only()
    base = tmp_path_factory.mktemp("data-api")
    started: list[NodeProcess] = []
    try:
        one = _node(base, "one")
        started.append(one)
        two = _node(base, "two")
        started.append(two)
        one.wait_ready()
        two.wait_ready()
        csv = base / "cities.csv"
        csv.write_text(CSV)
        one.call("dataset.create", snapshot_yaml=CITIES_SNAPSHOT.rstrip().removesuffix("---"))
        one.call("dataset.ingest", ref="cities", files=[str(csv)])
        n = Nodes(
            one, two, one.call("node.status")["http_url"], two.call("node.status")["http_url"]
        )
        [row] = [d for d in one.call("dataset.list") if d["alias"] == "cities"]
        n.did, n.head = row["id"], row["head"]
        sub = two.call("subscriptions.add", did=f"{n.url1}/cities")
        assert sub["did"] == n.did
        two.wait_for(
            "node 2 verifies and trusts cities",
            lambda: next(
                (
                    s
                    for s in two.call("subscriptions.list")
                    if s["did"] == n.did and s["trusted_head"] == n.head
                ),
                None,
            ),
            timeout=240,
        )
        yield n
    finally:
        for node in started:
            node.stop()


def http(method: str, url: str, body: Any = None, *, raw: bytes | None = None) -> tuple[int, Any]:
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        text = e.read()
        try:
            return e.code, json.loads(text)
        except ValueError:
            return e.code, text.decode(errors="replace")


def get(url: str, **params: str) -> tuple[int, Any]:
    return http("GET", url + ("?" + urllib.parse.urlencode(params) if params else ""))


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "node.cli", *args],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def signer_of(node: NodeProcess) -> CommitmentSigner:
    """Node ``node``'s own key, read from its key file (the forger's tool)."""
    key = NodeHome(node.home).node_key()
    return CommitmentSigner(key.dataset_id().as_did_key(), key.sign)


ROWS = [
    {"city": "C", "offset": 2, "population": 3000},
    {"city": "B", "offset": 1, "population": 2000},
    {"city": "A", "offset": 0, "population": 1000},
]


def proven(n: Nodes) -> dict[str, Any]:
    status, answer = http("POST", n.url1 + "/query", {"query": QUERY, "include": ["proof"]})
    assert status == 200 and isinstance(answer, dict), answer
    return answer


def request_of(answer: dict[str, Any]) -> dict[str, Any]:
    r = copy.deepcopy(answer)
    r.pop("output", None)
    return r


# ---- /query


def test_query_without_a_proof(nodes: Nodes) -> None:
    status, answer = http("POST", nodes.url1 + "/query", {"query": QUERY})
    assert status == 200, answer
    assert answer == {"output": {"data": ROWS, "dataFormat": "JsonAoS"}}
    status, answer = get(nodes.url1 + "/query", query=QUERY, limit="1", dataFormat="json-aoa")
    assert (status, answer) == (
        200,
        {"output": {"data": [[2, "C", 3000]], "dataFormat": "JsonAoA"}},
    )
    status, answer = get(nodes.url1 + "/query", query=QUERY, skip="2", include="input,schema")
    assert status == 200, answer
    assert answer["output"]["data"] == [ROWS[2]]
    assert answer["input"]["datasets"] == [
        {"id": nodes.did, "alias": "cities", "blockHash": nodes.head}
    ]
    assert answer["output"]["schemaFormat"] == "ArrowJson"
    assert [f["data_type"] for f in answer["output"]["schema"]["fields"]] == [
        "Int64",
        "Utf8",
        "Int64",
    ]


def test_query_with_a_proof(nodes: Nodes) -> None:
    answer = proven(nodes)
    assert answer["output"] == {"data": ROWS, "dataFormat": "JsonAoS"}
    assert answer["input"] == {
        "query": QUERY,
        "queryDialect": "SqlDataFusion",
        "dataFormat": "JsonAoS",
        "include": ["Input", "Proof"],
        "datasets": [{"id": nodes.did, "alias": "cities", "blockHash": nodes.head}],
        "skip": 0,
        "limit": 100,
    }
    assert answer["subQueries"] == []
    assert answer["proof"]["verificationMethod"] == nodes.one.call("node.status")["node_id"]
    assert answer["commitment"]["outputHash"] == hash_of(answer["output"])
    assert check_commitment(request_of(answer)) is None


def test_query_errors_are_kamus_shapes(nodes: Nodes) -> None:
    status, body = http("POST", nodes.url1 + "/query", {"query": QUERY, "nonsense": 1})
    assert status == 400 and "unknown field `nonsense`" in body["message"], body
    status, body = http(
        "POST",
        nodes.url1 + "/query",
        {"query": QUERY, "datasets": [{"id": "did:odf:fed01" + "ab" * 32, "alias": "cities"}]},
    )
    assert status == 404 and body["message"].startswith("Dataset not found: did:odf:"), body
    missing = Multihash.sha3_256(b"does-not-exist").to_multibase()
    status, body = http(
        "POST",
        nodes.url1 + "/query",
        {"query": QUERY, "datasets": [{"id": nodes.did, "alias": "cities", "blockHash": missing}]},
    )
    assert status == 404, body
    status, body = http("POST", nodes.url1 + "/query", {"query": "select * from '/etc/passwd'"})
    # No file is read (the sandbox refuses it, or there is no such table): a typed 400.
    assert status == 400 and body["kind"] in ("QueryRejected", "QueryError", "UnknownTable"), body
    assert "root:" not in body["message"]
    # [query] max_sql_bytes is 4096 here; a body past it + 1 MiB is not even read.
    status, body = http("POST", nodes.url1 + "/query", {"query": "select 1" + " " * 5000})
    assert status == 400 and "max_sql_bytes" in body["message"], body
    status, body = http("POST", nodes.url1 + "/query", raw=b"{" + b" " * (2 << 20) + b"}")
    assert status == 413, body


# ---- /verify


def test_verify_ok_and_each_error_kind(nodes: Nodes) -> None:
    url = nodes.url1 + "/verify"
    request = request_of(proven(nodes))
    assert http("POST", url, request) == (200, {"ok": True})

    def kind_of(r: dict[str, Any]) -> tuple[int, str, dict[str, Any]]:
        status, body = http("POST", url, r)
        return status, body["error"]["kind"], body["error"]

    r = copy.deepcopy(request)
    r["commitment"]["inputHash"] = Multihash.sha3_256(b"x").to_multibase()
    assert kind_of(r)[:2] == (400, "InvalidRequest::InputHash")
    r = copy.deepcopy(request)
    r["commitment"]["subQueriesHash"] = Multihash.sha3_256(b"x").to_multibase()
    assert kind_of(r)[:2] == (400, "InvalidRequest::SubQueriesHash")
    r = copy.deepcopy(request)
    r["proof"] = signer_of(nodes.two).proof(r["commitment"])  # another key, same did claimed
    r["proof"]["verificationMethod"] = request["proof"]["verificationMethod"]
    assert kind_of(r)[:2] == (400, "InvalidRequest::BadSignature")

    one = signer_of(nodes.one)
    r = copy.deepcopy(request)
    r["commitment"]["outputHash"] = Multihash.sha3_256(b"forged").to_multibase()
    r["proof"] = one.proof(r["commitment"])
    status, kind, err = kind_of(r)
    assert (status, kind) == (400, "VerificationFailed::OutputMismatch")
    assert err["expected_hash"] == r["commitment"]["outputHash"]
    assert err["actual_hash"] == request["commitment"]["outputHash"]

    r = copy.deepcopy(request)
    foo = DatasetId.new_seeded_ed25519(b"foo").as_did_str()
    r["input"]["datasets"][0]["id"] = foo
    r["commitment"]["inputHash"] = hash_of(r["input"])
    r["proof"] = one.proof(r["commitment"])
    status, kind, err = kind_of(r)
    assert (status, kind, err["dataset_id"]) == (400, "VerificationFailed::DatasetNotFound", foo)

    r = copy.deepcopy(request)
    block = Multihash.sha3_256(b"foo").to_multibase()
    r["input"]["datasets"][0]["blockHash"] = block
    r["commitment"]["inputHash"] = hash_of(r["input"])
    r["proof"] = one.proof(r["commitment"])
    status, kind, err = kind_of(r)
    assert (status, kind) == (400, "VerificationFailed::DatasetBlockNotFound")
    assert (err["dataset_id"], err["block_hash"]) == (nodes.did, block)


def test_another_node_checks_the_commitment(nodes: Nodes, tmp_path: Path) -> None:
    answer = proven(nodes)
    # Node 2 reproduces node 1's answer on the copy it verified itself.
    assert http("POST", nodes.url2 + "/verify", request_of(answer)) == (200, {"ok": True})
    forged = request_of(answer)
    forged["commitment"]["outputHash"] = Multihash.sha3_256(b"forged").to_multibase()
    forged["proof"] = signer_of(nodes.one).proof(forged["commitment"])
    status, body = http("POST", nodes.url2 + "/verify", forged)
    assert status == 400 and body["error"]["kind"] == "VerificationFailed::OutputMismatch", body

    # The CLI: reproduced by node 2's daemon, or asked of node 2's /verify from anywhere.
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(answer))
    bad.write_text(json.dumps(forged))
    p = cli("query", "verify", str(good), "--json", "--home", str(nodes.two.home))
    assert p.returncode == 0, p.stdout + p.stderr
    assert json.loads(p.stdout) == {
        "ok": True,
        "checkedBy": nodes.two.call("node.status")["node_id"],
    }
    p = cli("query", "verify", str(bad), "--node", nodes.url2, "--home", str(nodes.one.home))
    assert p.returncode == 2, p.stdout + p.stderr
    assert "VerificationFailed::OutputMismatch" in p.stdout + p.stderr


def test_attestations_carry_the_envelopes_that_made_the_head_trusted(
    nodes: Nodes, tmp_path: Path
) -> None:
    status, answer = http(
        "POST", nodes.url2 + "/query", {"query": QUERY, "include": ["Proof", "Attestations"]}
    )
    assert status == 200, answer
    assert answer["output"]["data"] == ROWS
    [entry] = answer["attestations"]
    assert (entry["id"], entry["blockHash"]) == (nodes.did, nodes.head)
    assert entry["envelopes"], entry
    export = tmp_path / "envelopes.json"
    export.write_text(json.dumps(entry["envelopes"]))
    p = cli("attestation", "verify", str(export), "--json", "--home", str(nodes.two.home))
    assert p.returncode == 0, p.stdout + p.stderr
    checked = json.loads(p.stdout)
    assert all(v["ok"] for v in checked)
    two = nodes.two.call("node.status")["node_id"]
    assert any(v["node"] == two and v["block"] == nodes.head for v in checked), checked
    # The attestations are beside the commitment: the proof still holds.
    assert check_commitment(request_of(answer)) is None


# ---- /{dataset}/tail and /{dataset}/metadata


def test_tail(nodes: Nodes) -> None:
    status, body = get(nodes.url1 + "/cities/tail", limit="2", schemaFormat="ArrowJson")
    assert status == 200, body
    assert [(r["offset"], r["city"]) for r in body["data"]] == [(1, "B"), (2, "C")]
    assert body["data"][0]["event_time"] == "2020-01-02T00:00:00Z"
    assert body["dataFormat"] == "JsonAoS"
    assert [f["name"] for f in body["schema"]["fields"]][:4] == [
        "offset",
        "op",
        "system_time",
        "event_time",
    ]
    status, body = get(f"{nodes.url2}/{nodes.did}/tail", skip="2", dataFormat="JsonSoA")
    assert status == 200, body
    assert body["data"]["city"] == ["A"]
    assert get(nodes.url1 + "/nosuch/tail")[0] == 404


def test_metadata(nodes: Nodes) -> None:
    status, body = get(nodes.url1 + "/cities/metadata")
    assert (status, body) == (
        200,
        {"output": {"seed": {"datasetId": nodes.did, "datasetKind": "Root"}}},
    )
    status, body = get(
        nodes.url2 + "/cities/metadata", include="refs,schema,seed,vocab", schemaFormat="OdfJson"
    )
    assert status == 200, body
    out = body["output"]
    assert out["refs"] == [{"name": "head", "blockHash": nodes.head}]
    assert out["seed"]["datasetId"] == nodes.did
    assert out["vocab"]["eventTimeColumn"] == "event_time"
    assert out["schemaFormat"] == "OdfJson"
    assert [f["name"] for f in out["schema"]["fields"]][-2:] == ["city", "population"]
