"""kamu's HTTP data API use case (``node/app/query_api.py``) over an in-memory data reader.

The expected answers are kamu's own, from kamu-data/kamu-cli
``src/adapter/http/tests/tests/test_data_query.rs``: the ``population`` dataset (offsets 0 and
1, cities A and B, populations 100 and 200, event and system time 2050-01-01T12:00:00Z), the
data formats, the tail handler's answer with its ArrowJson schema, and the verify handler's
proof made with the node key ``[123; 32]`` — reproduced byte for byte.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from coordinator.errors import DatasetNotFound
from coordinator.identity.keys import PrivateKey
from node.app.data import BlockNotOnChain
from node.app.errors import QueryBusy, QueryRejected
from node.app.query_api import (
    ApiRequestInvalid,
    ApiSettings,
    ClientLimiter,
    PinnedBlockNotFound,
    QueryApi,
    ResponseSigningNotConfigured,
    arrow_schema_json,
    encode_data,
    render_schema,
)
from node.app.query_proofs import CommitmentSigner, hash_of
from tests.unit.test_query_proofs import BLOCK, DATASET, KAMU_RESPONSE, QUERY

ALIAS = "kamu-server/population"
T2050 = 2524651200000  # 2050-01-01T12:00:00Z in ms
KEY = PrivateKey.from_seed(bytes([123] * 32))
SIGNER = CommitmentSigner(KEY.dataset_id().as_did_key(), KEY.sign)

POPULATION = pa.table(
    {
        "offset": pa.array([0, 1], pa.int64()),
        "op": pa.array([0, 0], pa.int32()),
        "system_time": pa.array([T2050, T2050], pa.timestamp("ms", "UTC")),
        "event_time": pa.array([T2050, T2050], pa.timestamp("ms", "UTC")),
        "city": pa.array(["A", "B"], pa.string()),
        "population": pa.array([100, 200], pa.uint64()),
    },
    schema=pa.schema(
        [
            pa.field("offset", pa.int64(), False),
            pa.field("op", pa.int32(), False),
            pa.field("system_time", pa.timestamp("ms", "UTC"), False),
            pa.field("event_time", pa.timestamp("ms", "UTC"), False),
            pa.field("city", pa.string(), False),
            pa.field("population", pa.uint64(), False),
        ]
    ),
)
# select offset, city, population ... order by offset desc
SELECTED = POPULATION.select(["offset", "city", "population"]).take([1, 0])


@dataclass(frozen=True)
class Readable:
    alias: str | None
    did: str
    head: str
    trusted: bool = True


@dataclass(frozen=True)
class Answer:
    table: pa.Table
    inputs: tuple[Readable, ...]


@dataclass
class FakeData:
    """One dataset, one head; a query answers ``SELECTED`` paged (the engine's job)."""

    result: pa.Table = field(default_factory=lambda: SELECTED)
    heads: tuple[str, ...] = (BLOCK,)
    calls: list[dict[str, Any]] = field(default_factory=list)

    async def resolve(
        self, ref: str, *, untrusted: bool = False, block: str | None = None
    ) -> Readable:
        if ref not in (ALIAS, DATASET):
            raise DatasetNotFound(f"dataset not found: {ref}")
        if block is not None and block not in self.heads:
            raise BlockNotOnChain(DATASET, block)
        return Readable(ALIAS, DATASET, block or self.heads[-1])

    async def query(
        self,
        sql: str,
        *,
        untrusted: bool = False,
        dialect: Any = "datafusion",
        pinned: Mapping[str, str] | None = None,
        skip: int = 0,
        limit: int | None = None,
    ) -> Answer:
        self.calls.append({"sql": sql, "pinned": pinned, "skip": skip, "limit": limit})
        head = (pinned or {}).get(DATASET, self.heads[-1])
        table = self.result.slice(skip, limit)
        return Answer(table, (Readable(ALIAS, DATASET, head),))

    async def tail(self, ref: str, n: int = 10, *, untrusted: bool = False) -> Answer:
        await self.resolve(ref)
        t = POPULATION
        return Answer(t.slice(max(0, t.num_rows - n)), (Readable(ALIAS, DATASET, BLOCK),))


def api(data: FakeData | None = None, signer: CommitmentSigner | None = SIGNER) -> QueryApi:
    return QueryApi(data or FakeData(), None, signer, ApiSettings())  # type: ignore[arg-type]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# ---- /query


def test_defaults_answer_the_output_only() -> None:
    assert run(api().query({"query": QUERY})) == {
        "output": {
            "data": [
                {"city": "B", "offset": 1, "population": 200},
                {"city": "A", "offset": 0, "population": 100},
            ],
            "dataFormat": "JsonAoS",
        }
    }


def test_a_proof_is_kamus_byte_for_byte() -> None:
    # test_data_verify_handler: the same request on the same data signs the same answer.
    got = run(api().query({"query": QUERY, "include": ["proof"]}))
    assert got == KAMU_RESPONSE
    assert list(got) == ["input", "output", "subQueries", "commitment", "proof"]


def test_input_and_schema_echo_kamus_defaults() -> None:
    got = run(api().query({"query": QUERY, "include": ["input", "schema"]}))
    assert got["input"] == {
        "query": QUERY,
        "queryDialect": "SqlDataFusion",
        "dataFormat": "JsonAoS",
        "include": ["Input", "Schema"],
        "schemaFormat": "ArrowJson",
        "datasets": [{"id": DATASET, "alias": ALIAS, "blockHash": BLOCK}],
        "skip": 0,
        "limit": 100,
    }
    assert got["output"]["schemaFormat"] == "ArrowJson"
    assert [f["name"] for f in got["output"]["schema"]["fields"]] == [
        "offset",
        "city",
        "population",
    ]


def test_data_formats() -> None:
    # test_data_query_handler_data_formats
    a = api()
    soa = run(a.query(a.parse_get({"query": QUERY, "dataFormat": "json-soa"})))
    assert soa == {
        "output": {
            "dataFormat": "JsonSoA",
            "data": {"offset": [1, 0], "city": ["B", "A"], "population": [200, 100]},
        }
    }
    aoa = run(a.query(a.parse_get({"query": QUERY, "format": "json-aoa"})))
    assert aoa["output"] == {"dataFormat": "JsonAoA", "data": [[1, "B", 200], [0, "A", 100]]}


def test_skip_and_limit_page() -> None:
    # test_data_query_handler_ranges
    a = api()
    got = run(a.query(a.parse_get({"query": QUERY, "limit": "1"})))
    assert got["output"]["data"] == [{"city": "B", "offset": 1, "population": 200}]
    got = run(a.query(a.parse_get({"query": QUERY, "skip": "1"})))
    assert got["output"]["data"] == [{"city": "A", "offset": 0, "population": 100}]


def test_get_parameters() -> None:
    a = api()
    assert a.parse_get({"query": "select 1", "include": "Input,proof", "schemaFormat": "odf-json"})[
        "include"
    ] == ["Input", "proof"]
    with pytest.raises(ApiRequestInvalid, match="unknown field `datasets`"):
        a.parse_get({"query": "select 1", "datasets": "x"})
    with pytest.raises(ApiRequestInvalid, match="missing field `query`"):
        a.parse_get({})


def test_malformed_requests_are_refused() -> None:
    a = api()
    cases: list[tuple[dict[str, Any], str]] = [
        ({"query": "x", "foo": 1}, "unknown field `foo`"),
        ({}, "missing field `query`"),
        ({"query": "x", "dataFormat": "Csv"}, "unknown variant `Csv`"),
        ({"query": "x", "include": ["Everything"]}, "unknown variant `Everything`"),
        ({"query": "x", "limit": -1}, "`limit`"),
        ({"query": "x", "queryDialect": "SqlFlink"}, "not supported"),
        ({"query": "x", "schemaFormat": "Parquet"}, "not supported"),
        ({"query": "x", "datasets": [{"id": "nonsense", "alias": "a"}]}, "bad dataset id"),
    ]
    for bad, match in cases:
        with pytest.raises(ApiRequestInvalid, match=match):
            a.normalise(bad)


def test_sql_and_limit_bounds_name_the_setting() -> None:
    a = QueryApi(FakeData(), None, SIGNER, ApiSettings(max_sql_bytes=10, max_rows=5))  # type: ignore[arg-type]
    with pytest.raises(QueryRejected, match=r"\[query\] max_sql_bytes"):
        a.normalise({"query": "select 1 from something_long"})
    with pytest.raises(QueryRejected, match=r"\[query\] max_rows"):
        a.normalise({"query": "select 1", "limit": 6})


def test_a_proof_without_a_key_is_not_configured() -> None:
    with pytest.raises(ResponseSigningNotConfigured):
        run(api(signer=None).query({"query": QUERY, "include": ["Proof"]}))


def test_pinned_datasets_reach_the_reader() -> None:
    data = FakeData(heads=("f1620" + "00" * 32, BLOCK))
    old = data.heads[0]
    got = run(
        api(data).query(
            {
                "query": QUERY,
                "include": ["Input"],
                "datasets": [{"id": DATASET, "alias": ALIAS, "blockHash": old}],
            }
        )
    )
    assert data.calls[-1]["pinned"] == {DATASET: old}
    assert got["input"]["datasets"] == [{"id": DATASET, "alias": ALIAS, "blockHash": old}]


def test_pinned_unknown_dataset_or_block_are_not_found() -> None:
    a = api()
    with pytest.raises(DatasetNotFound, match="Dataset not found: did:odf:"):
        run(
            a.query(
                {"query": QUERY, "datasets": [{"id": "did:odf:fed01" + "ab" * 32, "alias": ALIAS}]}
            )
        )
    with pytest.raises(PinnedBlockNotFound):
        run(
            a.query(
                {
                    "query": QUERY,
                    "datasets": [{"id": DATASET, "alias": ALIAS, "blockHash": "f1620" + "11" * 32}],
                }
            )
        )


def test_a_pinned_alias_other_than_the_local_one_is_refused() -> None:
    with pytest.raises(QueryRejected, match="not 'other/name'"):
        run(api().query({"query": QUERY, "datasets": [{"id": DATASET, "alias": "other/name"}]}))


# ---- /verify


def _request() -> dict[str, Any]:
    r = copy.deepcopy(KAMU_RESPONSE)
    del r["output"]
    return r


def _resign(r: dict[str, Any]) -> None:
    r["proof"] = SIGNER.proof(r["commitment"])


def test_verify_reproduces_kamus_commitment() -> None:
    assert run(api().verify(_request())) == {"ok": True}
    # A saved answer may be posted whole: its output is ignored (recomputed).
    assert run(api().verify(copy.deepcopy(KAMU_RESPONSE))) == {"ok": True}


def test_verify_names_a_forged_output_hash() -> None:
    r = _request()
    r["commitment"]["outputHash"] = (
        "f1620ff7f5beaf16900218a3ac4aae82cdccf764816986c7c739c716cf7dc03112a2d"
    )
    _resign(r)
    got = run(api().verify(r))
    assert got["ok"] is False
    assert got["error"]["kind"] == "VerificationFailed::OutputMismatch"
    assert got["error"]["expected_hash"] == r["commitment"]["outputHash"]
    assert got["error"]["actual_hash"] == KAMU_RESPONSE["commitment"]["outputHash"]


def test_verify_names_different_data() -> None:
    # The data changed under the pinned block (it cannot on a verified chain: a replay or a
    # falsified answer): the reproduction hashes differently.
    data = FakeData(result=SELECTED.set_column(2, "population", pa.array([201, 100], pa.uint64())))
    assert run(api(data).verify(_request()))["error"]["kind"] == (
        "VerificationFailed::OutputMismatch"
    )


def test_verify_names_a_missing_dataset_and_block() -> None:
    r = _request()
    foo = "did:odf:fed01666f6fb3b7370000666f6fb3b737000060f6f60600000000895cddbcb7f7b8cc"
    r["input"]["datasets"][0]["id"] = foo
    r["commitment"]["inputHash"] = hash_of(r["input"])
    _resign(r)
    got = run(api().verify(r))
    assert got["error"]["kind"] == "VerificationFailed::DatasetNotFound"
    assert got["error"]["dataset_id"] == foo

    r = _request()
    block = "f162076d3bc41c9f588f7fcd0d5bf4718f8f84b1c41b20882703100b9eb9413807c01"
    r["input"]["datasets"][0]["blockHash"] = block
    r["commitment"]["inputHash"] = hash_of(r["input"])
    _resign(r)
    got = run(api().verify(r))
    assert got["error"]["kind"] == "VerificationFailed::DatasetBlockNotFound"
    assert (got["error"]["dataset_id"], got["error"]["block_hash"]) == (DATASET, block)


def test_verify_refuses_what_is_not_a_commitment() -> None:
    with pytest.raises(ApiRequestInvalid):
        run(api().verify({"input": {}}))
    with pytest.raises(ApiRequestInvalid, match="unknown field"):
        run(api().verify({**_request(), "extra": 1}))


# ---- /{dataset}/tail


def test_tail_is_kamus() -> None:
    # test_data_tail_handler
    a = api()
    got = run(a.tail(ALIAS, {"schemaFormat": "ArrowJson"}))
    row = {"event_time": "2050-01-01T12:00:00Z", "op": 0, "system_time": "2050-01-01T12:00:00Z"}
    assert got["dataFormat"] == "JsonAoS"
    assert got["data"] == [
        {"city": "A", "offset": 0, "population": 100, **row},
        {"city": "B", "offset": 1, "population": 200, **row},
    ]
    assert got["schemaFormat"] == "ArrowJson"
    field = {"dict_id": 0, "dict_is_ordered": False, "metadata": {}, "nullable": False}
    ts = {"Timestamp": ["Millisecond", "UTC"]}
    assert got["schema"] == {
        "fields": [
            {"data_type": "Int64", "name": "offset", **field},
            {"data_type": "Int32", "name": "op", **field},
            {"data_type": ts, "name": "system_time", **field},
            {"data_type": ts, "name": "event_time", **field},
            {"data_type": "Utf8", "name": "city", **field},
            {"data_type": "UInt64", "name": "population", **field},
        ],
        "metadata": {},
    }
    assert run(a.tail(ALIAS, {"limit": "1"})) == {
        "dataFormat": "JsonAoS",
        "data": [{"city": "B", "offset": 1, "population": 200, **row}],
    }
    assert run(a.tail(ALIAS, {"skip": "1"}))["data"] == [
        {"city": "A", "offset": 0, "population": 100, **row}
    ]


def test_odf_schema_formats() -> None:
    # test_data_query_handler_schema_formats (OdfJson, OdfYaml)
    schema = SELECTED.schema
    assert render_schema(schema, "OdfJson") == {
        "fields": [
            {"name": "offset", "type": {"kind": "Int64"}},
            {"name": "city", "type": {"kind": "String"}},
            {"name": "population", "type": {"kind": "UInt64"}},
        ]
    }
    assert render_schema(schema, "OdfYaml") == (
        "fields:\n- name: offset\n  type:\n    kind: Int64\n- name: city\n  type:\n"
        "    kind: String\n- name: population\n  type:\n    kind: UInt64\n"
    )


# ---- cells


def test_cells_as_kamus_json_writer_writes_them() -> None:
    t = pa.table(
        {
            "f64": pa.array([2537.07, float("nan"), None], pa.float64()),
            "f32": pa.array([0.1, float("inf"), 1.5], pa.float32()),
            "bin": pa.array([b"foo", b"\x01\x02", None], pa.binary()),
            "dec": pa.array(
                [Decimal("123.45"), Decimal("-0.05"), Decimal("0")], pa.decimal128(10, 2)
            ),
            "ts_us": pa.array([0, 1577880000123456, 1577880000120000], pa.timestamp("us", "UTC")),
            "ts_naive": pa.array([0, 1577880000123, None], pa.timestamp("ms")),
            "date": pa.array([0, 18262, None], pa.date32()),
            "list": pa.array([[1, 2], [], None], pa.list_(pa.int32())),
            "struct": pa.array(
                [{"a": "foo", "b": "baz"}, {"a": "bar", "b": None}, None],
                pa.struct([("a", pa.string()), ("b", pa.string())]),
            ),
        }
    )
    aoa = encode_data(t, "JsonAoA")
    assert aoa[0] == [
        2537.07,
        0.1,
        "666f6f",
        "123.45",
        "1970-01-01T00:00:00Z",
        "1970-01-01T00:00:00",
        "1970-01-01",
        [1, 2],
        ["foo", "baz"],
    ]
    assert aoa[1] == [
        None,
        None,
        "0102",
        "-0.05",
        "2020-01-01T12:00:00.123456Z",
        "2020-01-01T12:00:00.123",
        "2020-01-01",
        [],
        ["bar", None],
    ]
    assert aoa[2][4] == "2020-01-01T12:00:00.120Z"
    assert aoa[2][8] is None
    assert encode_data(t, "JsonAoS")[0]["struct"] == {"a": "foo", "b": "baz"}


def test_a_string_view_schema_is_kamus_utf8() -> None:
    # DataFusion hands out view types; kamu's schema goes through the ODF schema (Utf8).
    schema = pa.schema([pa.field("s", pa.string_view(), True)])
    assert render_schema(schema, "ArrowJson")["fields"][0]["data_type"] == "Utf8"
    assert arrow_schema_json(schema)["fields"][0]["data_type"] == "Utf8View"


# ---- concurrency


def test_client_slots_are_bounded() -> None:
    async def scenario() -> None:
        limiter = ClientLimiter(per_client=1, total=2)
        async with limiter.slot("a"):
            with pytest.raises(QueryBusy, match="concurrency_per_client") as e:
                async with limiter.slot("a"):
                    pass
            assert getattr(e.value, "total", None) is False
            async with limiter.slot("b"):
                with pytest.raises(QueryBusy, match="concurrency_total") as e:
                    async with limiter.slot("c"):
                        pass
                assert getattr(e.value, "total", None) is True
        async with limiter.slot("a"):
            pass

    run(scenario())


# ---- the HTTP mapping (node/transfer/data_api.py), on mocked requests (no socket)


def _http_call(remote: str, *, public: bool, error: Exception | None = None) -> Any:
    from unittest import mock

    from aiohttp import web
    from aiohttp.test_utils import make_mocked_request

    from node.transfer import data_api

    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: (
        (remote, 40000) if name == "peername" else default
    )
    request = make_mocked_request("GET", "/query?query=select%201", transport=transport)

    async def handler(api: Any, req: web.Request, guard: Any) -> web.StreamResponse:
        if error is not None:
            raise error
        return web.json_response({"ok": True})

    guard = data_api._Guard(api, public=public, body_limit=1 << 20)
    return run(guard.wrap(handler)(request))


def test_only_loopback_clients_unless_public() -> None:
    for remote in ("127.0.0.1", "::1", "::ffff:127.0.0.1"):
        assert _http_call(remote, public=False).status == 200
    refused = _http_call("192.0.2.7", public=False)
    assert refused.status == 403
    assert "[query] public = true" in refused.text
    assert _http_call("192.0.2.7", public=True).status == 200


def test_typed_errors_get_their_status() -> None:
    from node.app.errors import HeadNotTrusted, QueryDeadlineExceeded

    cases: list[tuple[Exception, int]] = [
        (ApiRequestInvalid("bad"), 400),
        (QueryRejected("reads a file"), 400),
        (DatasetNotFound("Dataset not found: x"), 404),
        (PinnedBlockNotFound("did:odf:x", "f1620"), 404),
        (HeadNotTrusted("no trusted head"), 409),
        (QueryDeadlineExceeded("past 30 s"), 504),
        (ResponseSigningNotConfigured("no key"), 501),
    ]
    limiter = ClientLimiter(per_client=0, total=1)
    for total in (False, True):
        try:
            run(_enter(limiter if not total else ClientLimiter(per_client=1, total=0)))
        except QueryBusy as e:
            cases.append((e, 503 if total else 429))
    for error, status in cases:
        got = _http_call("127.0.0.1", public=False, error=error)
        assert got.status == status, (error, got.status)
        assert json.loads(got.text) == {"message": str(error), "kind": type(error).__name__}


async def _enter(limiter: ClientLimiter) -> None:
    async with limiter.slot("a"):
        pass


def test_the_fast_hash_is_taken_only_without_floats() -> None:
    from node.app.query_api import has_floats
    from node.app.query_proofs import canonical_json, canonical_json_without_floats

    ints = pa.table({"a": pa.array([1, 2], pa.int64()), "s": ["x", "ÿ"]})
    floats = pa.table({"a": pa.array([1.5, 2.0]), "l": pa.array([[1], [1]], pa.list_(pa.int8()))})
    nested = pa.table({"l": pa.array([[0.5]], pa.list_(pa.float32()))})
    assert not has_floats(ints.schema)
    assert has_floats(floats.schema) and has_floats(nested.schema)
    out = {"data": encode_data(ints, "JsonAoS"), "dataFormat": "JsonAoS"}
    assert canonical_json_without_floats(out) == canonical_json(out)
    data = {"data": encode_data(floats, "JsonAoA"), "dataFormat": "JsonAoA"}
    assert canonical_json(data) == b'{"data":[[1.5E0,[1]],[2E0,[1]]],"dataFormat":"JsonAoA"}'


def test_metadata_aspects_are_kamus() -> None:
    # test_metadata_handler_aspects ("Full"), the schema aside.
    from coordinator.identity import DatasetId
    from coordinator.metadata import model as m
    from node.app.query_api import _metadata_output

    did = DatasetId.parse(DATASET)
    found = {
        "SetAttachments": m.SetAttachments(
            attachments=m.AttachmentsEmbedded(
                items=(m.AttachmentEmbedded(path="README.md", content="Blah"),)
            )
        ),
        "SetInfo": m.SetInfo(description="Test dataset", keywords=("foo", "bar")),
        "SetLicense": m.SetLicense(
            short_name="apache-2.0",
            name="apache-2.0",
            website_url="https://www.apache.org/licenses/LICENSE-2.0",
        ),
        "Seed": m.Seed(dataset_id=did, dataset_kind=m.DatasetKind.ROOT),
    }
    include = {"Attachments", "Info", "License", "Refs", "Seed", "Vocab"}
    assert _metadata_output(found, include, "ArrowJson", BLOCK) == {
        "attachments": {
            "attachments": {"kind": "Embedded", "items": [{"path": "README.md", "content": "Blah"}]}
        },
        "info": {"description": "Test dataset", "keywords": ["foo", "bar"]},
        "license": {
            "name": "apache-2.0",
            "shortName": "apache-2.0",
            "websiteUrl": "https://www.apache.org/licenses/LICENSE-2.0",
        },
        "refs": [{"name": "head", "blockHash": BLOCK}],
        "seed": {"datasetId": DATASET, "datasetKind": "Root"},
        "vocab": {
            "eventTimeColumn": "event_time",
            "offsetColumn": "offset",
            "operationTypeColumn": "op",
            "systemTimeColumn": "system_time",
        },
    }


def test_verify_names_the_missing_one_of_several_datasets() -> None:
    r = _request()
    other = "did:odf:fed01" + "cd" * 32
    r["input"]["datasets"].append({"id": other, "alias": "other"})
    r["commitment"]["inputHash"] = hash_of(r["input"])
    _resign(r)
    got = run(api().verify(r))
    assert (got["error"]["kind"], got["error"]["dataset_id"]) == (
        "VerificationFailed::DatasetNotFound",
        other,
    )


def test_an_unexpected_failure_is_a_json_500() -> None:
    got = _http_call("127.0.0.1", public=False, error=ZeroDivisionError("boom"))
    assert got.status == 500
    assert json.loads(got.text) == {
        "message": "internal error (see the node's log)",
        "kind": "InternalError",
    }
