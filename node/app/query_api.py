"""kamu's HTTP data API as a use case: kamu request dicts in, kamu response dicts out.

The shapes follow kamu-node's REST API (its ``resources/openapi.json``) and kamu-cli's handlers
(``src/adapter/http/src/data/``: ``query_handler.rs``, ``query_types.rs``, ``verify_handler.rs``,
``tail_handler.rs``, ``metadata_handler.rs``), so a kamu client reads our answers and checks
our commitments, and ours check kamu's (``docs/query.md``, "HTTP data API"):

* :meth:`QueryApi.query`: ``{query, queryDialect, dataFormat, schemaFormat, include, datasets,
  skip, limit}`` -> ``{input?, output, subQueries?, commitment?, proof?}``. Defaults: dialect
  ``SqlDataFusion``, ``JsonAoS``, ``limit`` 100. Only trusted heads are read
  (:class:`~node.app.data.VerifiedData`'s rule) unless the request sets our extension
  ``untrusted: true``. ``datasets`` pins the inputs (``id`` -> ``blockHash``); without it the
  answer's ``input.datasets`` names the heads the query read. ``include: ["Proof"]`` signs
  the answer with the node key (:mod:`node.app.query_proofs`); our extension
  ``include: ["Attestations"]`` adds, per input block, the in-toto envelopes of the
  attestations this node holds for it (``odf-node attestations --format in-toto``), which
  ``odf-node attestation verify`` checks.
* :meth:`QueryApi.verify`: kamu's ``/verify``: the commitment's own hashes and signature, then
  the query reproduced at the pinned blocks on this node's copy; what does not match is named
  with kamu's error kinds.
* :meth:`QueryApi.tail` and :meth:`QueryApi.metadata`: ``/{dataset}/tail`` and
  ``/{dataset}/metadata``.

Bounds (``[query]``): the SQL's size (``max_sql_bytes``), ``limit`` (``max_rows``), and the
queries one client and the node run at once (``concurrency_per_client``,
``concurrency_total``: :class:`~node.app.errors.QueryBusy`). The engine enforces the rest
(deadline, memory, bytes).
"""

from __future__ import annotations

import asyncio
import copy
import json
import math
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from decimal import Decimal
from json.encoder import encode_basestring
from typing import TYPE_CHECKING, Any, Final, Protocol

from coordinator.errors import DatasetNotFound, OdfNodeError
from coordinator.identity import DatasetId
from coordinator.multiformats import Multihash
from node.app.data import BlockNotOnChain
from node.app.errors import (
    HeadNotTrusted,
    InvalidArgument,
    QueryBusy,
    QueryError,
    QueryRejected,
    Unavailable,
)
from node.app.query_proofs import (
    INCLUDE_ORDER,
    CommitmentError,
    CommitmentSigner,
    check_commitment,
    dataset_block_not_found_error,
    dataset_not_found_error,
    hash_of,
    make_commitment,
    output_mismatch_error,
    verify_response,
)

if TYPE_CHECKING:
    import pyarrow as pa

    from coordinator.storage.repository import DatasetRepository

DEFAULT_LIMIT: Final = 100
MAX_PAGE: Final = 100_000_000
"""kamu's schema maximum of ``skip`` and ``limit``."""

DIALECTS: Final = {"SqlDataFusion": "datafusion", "SqlSpark": "spark"}
KAMU_ONLY_DIALECTS: Final = ("SqlFlink", "SqlRisingWave")
DATA_FORMATS: Final = ("JsonAoS", "JsonSoA", "JsonAoA")
SCHEMA_FORMATS: Final = ("ArrowJson", "OdfJson", "OdfYaml")
KAMU_ONLY_SCHEMA_FORMATS: Final = ("Parquet", "ParquetJson")
METADATA_INCLUDE: Final = ("Attachments", "Info", "License", "Refs", "Schema", "Seed", "Vocab")

_QUERY_FIELDS: Final = (
    "query",
    "queryDialect",
    "dataFormat",
    "include",
    "schemaFormat",
    "datasets",
    "skip",
    "limit",
    "untrusted",
)
_GET_FIELDS: Final = (
    "query",
    "queryDialect",
    "skip",
    "limit",
    "dataFormat",
    "format",
    "schemaFormat",
    "include",
    "untrusted",
)
_MAX_SOA_BYTES: Final = 100_000_000


class ApiRequestInvalid(InvalidArgument):
    """The request is not one the data API accepts (an unknown field, a bad enum value...);
    kamu answers such a request with ``400 {"message": ...}``."""


class ResponseSigningNotConfigured(Unavailable):
    """``include: ["Proof"]`` on a node that cannot sign (kamu answers 501)."""


class PinnedBlockNotFound(QueryError):
    """A pinned ``blockHash`` is not on this node's chain of the dataset (kamu's
    ``DatasetBlockNotFound``); ``untrusted_here``: it is on the chain but past the head this
    node trusts (``/query`` answers 409, ``/verify`` names it ``DatasetBlockNotFound``)."""

    def __init__(self, did: str, block: str, *, untrusted_here: bool = False) -> None:
        what = (
            "is past the newest head this node trusts"
            if untrusted_here
            else "is not on this node's chain"
        )
        super().__init__(f"Block {block} of dataset {did} {what}")
        self.did = did
        self.block = block
        self.untrusted_here = untrusted_here


# ---- the data use case this one reads through (node/app/data.py)


class ReadableLike(Protocol):
    """What :class:`~node.app.data.ReadableTable` offers this use case."""

    @property
    def alias(self) -> str | None: ...
    @property
    def did(self) -> str: ...
    @property
    def head(self) -> str: ...
    @property
    def trusted(self) -> bool: ...


class AnswerLike(Protocol):
    """What :class:`~node.app.data.QueryAnswer` offers this use case."""

    @property
    def table(self) -> pa.Table: ...
    @property
    def inputs(self) -> Sequence[ReadableLike]: ...


class DataReader(Protocol):
    """The verified-data use case (``Application.data``, :class:`~node.app.data.VerifiedData`)."""

    async def resolve(
        self, ref: str, *, untrusted: bool = False, block: str | None = None
    ) -> ReadableLike: ...

    async def query(
        self,
        sql: str,
        *,
        untrusted: bool = False,
        dialect: Any = "datafusion",
        pinned: Mapping[str, str] | None = None,
        skip: int = 0,
        limit: int | None = None,
    ) -> AnswerLike: ...

    async def tail(self, ref: str, n: int = 10, *, untrusted: bool = False) -> AnswerLike: ...


Attestations = Callable[[str, str], Awaitable[list[dict[str, Any]]]]
"""``await attestations(did, block)``: the in-toto envelopes of the attestations of ``block``
the node holds (its own and the peers'; ``AttestationExport.attestations``)."""


@dataclass(frozen=True)
class ApiSettings:
    """The ``[query]`` bounds this use case applies itself."""

    max_rows: int = 100_000
    max_sql_bytes: int = 65_536
    concurrency_per_client: int = 4
    concurrency_total: int = 16

    @classmethod
    def from_config(cls, section: Mapping[str, Any]) -> ApiSettings:
        """From the ``query`` table of ``NodeConfig.to_dict()`` (missing keys: defaults)."""
        d = cls()
        return cls(
            max_rows=int(section.get("max_rows", d.max_rows)),
            max_sql_bytes=int(section.get("max_sql_bytes", d.max_sql_bytes)),
            concurrency_per_client=int(
                section.get("concurrency_per_client", d.concurrency_per_client)
            ),
            concurrency_total=int(section.get("concurrency_total", d.concurrency_total)),
        )


class ClientLimiter:
    """How many queries each client and the node run at once (no queueing: over the bound is
    :class:`QueryBusy` at once, which the HTTP layer answers 429 / 503)."""

    def __init__(self, per_client: int, total: int) -> None:
        self._per_client = per_client
        self._total = total
        self._running: dict[str, int] = {}
        self._all = 0

    @asynccontextmanager
    async def slot(self, client: str) -> AsyncIterator[None]:
        """Hold one of ``client``'s slots while the body runs.

        Raises:
            QueryBusy: ``total`` is True on it when the node-wide bound was hit.
        """
        if self._all >= self._total:
            raise _busy(
                f"the node already runs {self._total} queries ([query] concurrency_total); "
                "retry when one finishes",
                total=True,
            )
        if self._running.get(client, 0) >= self._per_client:
            raise _busy(
                f"this client already runs {self._per_client} queries "
                "([query] concurrency_per_client); retry when one finishes",
                total=False,
            )
        self._running[client] = self._running.get(client, 0) + 1
        self._all += 1
        try:
            yield
        finally:
            self._all -= 1
            left = self._running[client] - 1
            if left:
                self._running[client] = left
            else:
                del self._running[client]


def _busy(message: str, *, total: bool) -> QueryBusy:
    e = QueryBusy(message)
    e.total = total  # type: ignore[attr-defined]
    return e


# ---- the use case


class QueryApi:
    """See the module docstring."""

    def __init__(
        self,
        data: DataReader,
        repo: DatasetRepository,
        signer: CommitmentSigner | None,
        settings: ApiSettings,
        *,
        attestations: Attestations | None = None,
    ) -> None:
        self._data = data
        self._repo = repo
        self._signer = signer
        self._settings = settings
        self._attestations = attestations
        self.limiter = ClientLimiter(settings.concurrency_per_client, settings.concurrency_total)

    # ---- /query

    async def query(self, request: Mapping[str, Any], *, client: str = "local") -> dict[str, Any]:
        """``POST /query``: the kamu response to a kamu request (see the module docstring).

        Raises:
            ApiRequestInvalid: a malformed request (kamu: 400).
            DatasetNotFound / PinnedBlockNotFound: a pinned input is not here (kamu: 404).
            QueryError: the query was refused, ran too long, too large, or the client is busy.
            ResponseSigningNotConfigured: a proof was asked of a node that cannot sign.
        """
        req = self.normalise(request)
        async with self.limiter.slot(client):
            response, _ = await self._answer(req, data_text=False)
        return response

    async def query_json(self, request: Mapping[str, Any], *, client: str = "local") -> str:
        """:meth:`query`'s response as the JSON text the data API sends (:func:`response_json`
        of it, the same characters), its rows written straight to text by
        :func:`encode_data_json` unless a proof needs them as values.

        Raises:
            See :meth:`query`.
        """
        req = self.normalise(request)
        async with self.limiter.slot(client):
            response, data = await self._answer(req, data_text=True)
        text = response_json(response)
        if data is None:
            return text
        # The rows' place holds a random token until the rest is written (nothing before it,
        # the request's echo included, can hold a token drawn after the request was read).
        return text.replace(response_json(response["output"]["data"]), data, 1)

    def parse_get(self, params: Mapping[str, str]) -> dict[str, Any]:
        """``GET /query``'s query-string parameters as the request ``POST /query`` takes
        (``include`` comma-separated, ``format`` an alias of ``dataFormat``; no ``datasets``).

        Raises:
            ApiRequestInvalid: an unknown parameter or a malformed value.
        """
        unknown = [k for k in params if k not in _GET_FIELDS]
        if unknown:
            raise ApiRequestInvalid(
                f"Failed to deserialize query string: unknown field `{unknown[0]}`, expected one "
                f"of {', '.join(f'`{f}`' for f in _GET_FIELDS if f != 'format')}"
            )
        if "query" not in params:
            raise ApiRequestInvalid("Failed to deserialize query string: missing field `query`")
        req: dict[str, Any] = {"query": params["query"]}
        for name in ("queryDialect", "schemaFormat"):
            if name in params:
                req[name] = params[name]
        fmt = params.get("dataFormat", params.get("format"))
        if fmt is not None:
            req["dataFormat"] = fmt
        for name in ("skip", "limit"):
            if name in params:
                req[name] = _int_param(name, params[name])
        if params.get("include"):
            req["include"] = [p.strip() for p in params["include"].split(",") if p.strip()]
        if "untrusted" in params:
            req["untrusted"] = _bool_param("untrusted", params["untrusted"])
        return req

    def normalise(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """The request with kamu's defaults filled in and its enums in canonical spelling, in
        kamu's field order (the ``input`` a proof commits to).

        Raises:
            ApiRequestInvalid: see :meth:`query`.
        """
        if not isinstance(request, Mapping):
            raise ApiRequestInvalid("the request must be a JSON object")
        unknown = [k for k in request if k not in _QUERY_FIELDS]
        if unknown:
            raise ApiRequestInvalid(
                f"unknown field `{unknown[0]}`, expected one of "
                + ", ".join(f"`{f}`" for f in _QUERY_FIELDS)
            )
        sql = request.get("query")
        if not isinstance(sql, str):
            raise ApiRequestInvalid("missing field `query`" if sql is None else "`query` is text")
        if len(sql.encode("utf-8")) > self._settings.max_sql_bytes:
            raise QueryRejected(
                f"the query is {len(sql.encode('utf-8'))} bytes, over [query] max_sql_bytes "
                f"({self._settings.max_sql_bytes})"
            )
        dialect = _enum("queryDialect", request.get("queryDialect", "SqlDataFusion"), DIALECTS)
        data_format = _enum("dataFormat", request.get("dataFormat", "JsonAoS"), DATA_FORMATS)
        include = _include(request.get("include", []))
        schema_format = request.get("schemaFormat")
        if schema_format is not None:
            schema_format = _schema_format(schema_format)
        skip = _page("skip", request.get("skip", 0))
        limit = _page("limit", request.get("limit", DEFAULT_LIMIT))
        if limit > self._settings.max_rows:
            raise QueryRejected(
                f"limit {limit} is over [query] max_rows ({self._settings.max_rows}); "
                "page with skip and limit"
            )
        datasets = request.get("datasets")
        if datasets is not None:
            datasets = _datasets(datasets)
        untrusted = request.get("untrusted", False)
        if not isinstance(untrusted, bool):
            raise ApiRequestInvalid("`untrusted` is true or false")
        # kamu: a proof needs the input it commits to; a schema format asks for the schema.
        if "Proof" in include:
            include.add("Input")
        if schema_format is not None:
            include.add("Schema")
        out: dict[str, Any] = {
            "query": sql,
            "queryDialect": dialect,
            "dataFormat": data_format,
            "include": [i for i in INCLUDE_ORDER if i in include],
        }
        if schema_format is not None:
            out["schemaFormat"] = schema_format
        if datasets is not None:
            out["datasets"] = datasets
        out["skip"] = skip
        out["limit"] = limit
        if untrusted:
            out["untrusted"] = True
        return out

    async def _answer(
        self, req: dict[str, Any], *, data_text: bool
    ) -> tuple[dict[str, Any], str | None]:
        """The response to ``req``; with ``data_text`` (and no proof asked), its rows as JSON
        text beside it, a token in their place in the response."""
        include = set(req["include"])
        if "Proof" in include and self._signer is None:
            raise ResponseSigningNotConfigured(
                "Response signing is not enabled by the node operator"
            )
        answer, output, aliases, data = await self._output(
            req, data_text=data_text and "Proof" not in include
        )
        table = answer.table
        response: dict[str, Any] = {}
        if "Input" in include:
            inp = dict(req)
            # kamu echoes the schema format only with the schema (defaulted to ArrowJson).
            if "Schema" in include:
                inp["schemaFormat"] = req.get("schemaFormat", "ArrowJson")
            inp["datasets"] = _read_inputs(answer.inputs, req, aliases)
            response["input"] = _ordered_input(inp)
        response["output"] = output
        if "Proof" in include:
            assert self._signer is not None
            sub_queries: list[Any] = []
            commitment = make_commitment(
                response["input"], output, sub_queries, output_floats=has_floats(table.schema)
            )
            response["subQueries"] = sub_queries
            response["commitment"] = commitment
            response["proof"] = self._signer.proof(commitment)
        if "Attestations" in include:
            response["attestations"] = await self._envelopes(
                response["input"]["datasets"]
                if "input" in response
                else _read_inputs(answer.inputs, req, aliases)
            )
        return response, data

    async def _output(
        self, req: dict[str, Any], *, data_text: bool = False
    ) -> tuple[AnswerLike, dict[str, Any], dict[str, str], str | None]:
        """Run the request's query: the answer, kamu's ``output`` of it, the pinned
        datasets' aliases as the request names them, and with ``data_text`` the rows as JSON
        text (:func:`encode_data_json`; a random token stands for them in ``output``)."""
        untrusted = bool(req.get("untrusted", False))
        pinned, aliases = await self._pins(req.get("datasets"), untrusted)
        answer = await self._data.query(
            req["query"],
            untrusted=untrusted,
            dialect=DIALECTS[req["queryDialect"]],
            pinned=pinned or None,
            skip=req["skip"],
            limit=req["limit"],
        )
        table = answer.table
        data: str | None = None
        if data_text:
            data = encode_data_json(table, req["dataFormat"])
        output: dict[str, Any] = {
            "data": (
                encode_data(table, req["dataFormat"])
                if data is None
                else f"\x00odf-data-{secrets.token_hex(16)}"
            ),
            "dataFormat": req["dataFormat"],
        }
        if "Schema" in req["include"]:
            fmt = req.get("schemaFormat", "ArrowJson")
            output["schema"] = render_schema(table.schema, fmt)
            output["schemaFormat"] = fmt
        return answer, output, aliases, data

    async def _pins(
        self, datasets: list[dict[str, Any]] | None, untrusted: bool
    ) -> tuple[dict[str, str], dict[str, str]]:
        """``did -> block`` of the request's ``datasets`` (each resolved: a missing one raises
        kamu's not-found errors), and ``did -> alias`` as the request names them."""
        pinned: dict[str, str] = {}
        aliases: dict[str, str] = {}
        for d in datasets or ():
            did = d["id"]
            try:
                readable = await self._data.resolve(
                    did, untrusted=untrusted, block=d.get("blockHash")
                )
            except DatasetNotFound as e:
                missing = DatasetNotFound(f"Dataset not found: {did}")
                missing.did = did  # type: ignore[attr-defined]
                raise missing from e
            except BlockNotOnChain as e:
                raise PinnedBlockNotFound(did, d["blockHash"]) from e
            except HeadNotTrusted as e:
                if not d.get("blockHash"):
                    raise
                # On the chain, past what this node trusts: it cannot vouch for it (yet).
                raise PinnedBlockNotFound(did, d["blockHash"], untrusted_here=True) from e
            pinned[readable.did] = d.get("blockHash") or readable.head
            aliases[readable.did] = d["alias"]
            local = readable.alias or readable.did
            if d["alias"] != local and d["alias"] != readable.did:
                # Tables are named by their local alias (or DID): a query naming the
                # committing node's alias reads another table here, or none.
                raise QueryRejected(
                    f"dataset {readable.did} is {local!r} on this node, not {d['alias']!r}: "
                    "its table here is the local alias or the quoted did:odf"
                )
        return pinned, aliases

    async def _envelopes(self, datasets: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Per input block, the in-toto envelopes this node holds for it."""
        if self._attestations is None:
            raise Unavailable("the attestation export is not available on this node")
        out = []
        for d in datasets:
            block = d.get("blockHash")
            envelopes = await self._attestations(d["id"], block) if block else []
            out.append({"id": d["id"], "blockHash": block, "envelopes": envelopes})
        return out

    # ---- /verify

    async def verify(self, request: Mapping[str, Any], *, client: str = "local") -> dict[str, Any]:
        """kamu's ``POST /verify`` over ``{input, subQueries, commitment, proof}`` (an
        ``output`` or ``attestations`` beside them, as a saved response has, is ignored):
        ``{"ok": true}`` or ``{"ok": false, "error": {"kind", "message", ...}}``.

        Raises:
            ApiRequestInvalid: not shaped like a commitment.
            QueryError: reproducing the query failed otherwise than on a missing input.
        """
        if not isinstance(request, Mapping):
            raise ApiRequestInvalid("the request must be a JSON object")
        body = {k: v for k, v in request.items() if k not in ("output", "attestations")}
        unknown = [k for k in body if k not in ("input", "subQueries", "commitment", "proof")]
        if unknown:
            raise ApiRequestInvalid(
                f"unknown field `{unknown[0]}`, expected one of `input`, `subQueries`, "
                "`commitment`, `proof`"
            )
        try:
            error = check_commitment(body)
        except CommitmentError as e:
            raise ApiRequestInvalid(str(e)) from e
        if error is not None:
            return verify_response(error)
        # Reproduce: only the output matters (kamu clears include; a schema format still
        # asks for the schema the output hash covered).
        reproduce = dict(copy.deepcopy(body["input"]))
        reproduce["include"] = []
        try:
            req = self.normalise(reproduce)
            async with self.limiter.slot(client):
                answer, output, _, _ = await self._output(req)
        except DatasetNotFound as e:
            did = getattr(e, "did", None) or _missing_dataset(body["input"])
            return verify_response(dataset_not_found_error(did))
        except PinnedBlockNotFound as e:
            err = dataset_block_not_found_error(e.did, e.block)
            if e.untrusted_here:
                err["message"] = (
                    f"{e}: this node has not verified the dataset up to that block (yet), "
                    "so it cannot reproduce the query there"
                )
            return verify_response(err)
        actual = hash_of(output, floats=has_floats(answer.table.schema))
        expected = body["commitment"]["outputHash"]
        if actual != expected:
            return verify_response(output_mismatch_error(expected, actual))
        return verify_response(None)

    # ---- /{dataset}/tail

    async def tail(
        self, ref: str, params: Mapping[str, str], *, client: str = "local"
    ) -> dict[str, Any]:
        """``GET /{dataset}/tail``: the newest records, oldest first (``skip`` drops the
        newest ``skip``; ``limit`` default 100), as kamu-node answers it.

        Raises:
            ApiRequestInvalid: an unknown parameter or malformed value.
            DatasetNotFound / HeadNotTrusted: no such dataset, or no trusted head yet.
        """
        allowed = ("skip", "limit", "dataFormat", "format", "schemaFormat", "untrusted")
        unknown = [k for k in params if k not in allowed]
        if unknown:
            raise ApiRequestInvalid(
                f"Failed to deserialize query string: unknown field `{unknown[0]}`"
            )
        skip = _int_param("skip", params.get("skip", "0"))
        limit = _int_param("limit", params.get("limit", str(DEFAULT_LIMIT)))
        if skip + limit > self._settings.max_rows:
            raise QueryRejected(
                f"skip + limit = {skip + limit} is over [query] max_rows "
                f"({self._settings.max_rows})"
            )
        fmt = _enum(
            "dataFormat", params.get("dataFormat", params.get("format", "JsonAoS")), DATA_FORMATS
        )
        schema_format = params.get("schemaFormat")
        if schema_format is not None:
            schema_format = _schema_format(schema_format)
        untrusted = _bool_param("untrusted", params.get("untrusted", "false"))
        async with self.limiter.slot(client):
            answer = await self._data.tail(ref, max(1, skip + limit), untrusted=untrusted)
        table = answer.table
        # The newest ``skip`` rows are dropped; of the rest, the newest ``limit``, oldest first.
        kept = max(0, table.num_rows - skip)
        table = table.slice(max(0, kept - limit), min(kept, limit))
        out: dict[str, Any] = {"data": encode_data(table, fmt), "dataFormat": fmt}
        if schema_format is not None:
            out["schema"] = render_schema(table.schema, schema_format)
            out["schemaFormat"] = schema_format
        return out

    # ---- /{dataset}/metadata

    async def metadata(self, ref: str, params: Mapping[str, str]) -> dict[str, Any]:
        """``GET /{dataset}/metadata``: the latest ``Seed`` (default), ``SetInfo``,
        ``SetLicense``, ``SetAttachments``, ``SetDataSchema``, ``SetVocab`` and the head ref, at
        the head this node reads (trusted unless ``untrusted=true``).

        Raises:
            ApiRequestInvalid: an unknown parameter or aspect.
            DatasetNotFound / HeadNotTrusted: no such dataset, or no trusted head yet.
        """
        unknown = [k for k in params if k not in ("include", "schemaFormat", "untrusted")]
        if unknown:
            raise ApiRequestInvalid(
                f"Failed to deserialize query string: unknown field `{unknown[0]}`"
            )
        include = {"Seed"}
        if "include" in params:
            include = set()
            for part in params["include"].split(","):
                name = _case_insensitive(part.strip(), METADATA_INCLUDE)
                if name is None:
                    raise ApiRequestInvalid(
                        f"unknown include {part.strip()!r}, expected {', '.join(METADATA_INCLUDE)}"
                    )
                include.add(name)
        schema_format = _schema_format(params.get("schemaFormat", "ArrowJson"))
        untrusted = _bool_param("untrusted", params.get("untrusted", "false"))
        readable = await self._data.resolve(ref, untrusted=untrusted)
        handle = self._repo.resolve(readable.did)
        found = await asyncio.to_thread(_latest_events, handle.root, readable.head, include)
        return {"output": _metadata_output(found, include, schema_format, readable.head)}


def _ordered_input(inp: Mapping[str, Any]) -> dict[str, Any]:
    """kamu's field order (cosmetic: the hash sorts keys)."""
    return {k: inp[k] for k in _QUERY_FIELDS if k in inp}


def _read_inputs(
    inputs: Sequence[ReadableLike], req: Mapping[str, Any], aliases: Mapping[str, str]
) -> list[dict[str, Any]]:
    """``input.datasets``: the pinned ones as asked (blocks resolved), else the tables the
    query names (a table the SQL text does not mention cannot have been read)."""
    if req.get("datasets") is not None:
        by_did = {r.did: r for r in inputs}
        out = []
        for d in req["datasets"]:
            r = by_did.get(d["id"])
            block = d.get("blockHash") or (r.head if r is not None else None)
            entry = {"id": d["id"], "alias": d["alias"]}
            if block:
                entry["blockHash"] = block
            out.append(entry)
        return out
    sql = req["query"].lower()
    out = []
    for r in inputs:
        name = r.alias or r.did
        if name.lower() in sql or r.did.lower() in sql:
            out.append({"id": r.did, "alias": aliases.get(r.did, name), "blockHash": r.head})
    return out


def _missing_dataset(inp: Any) -> str:
    """A DID for a reproduction that found no dataset without saying which (the first pinned
    one; without pins, the error's subject is unknown)."""
    for d in (inp.get("datasets") or []) if isinstance(inp, Mapping) else []:
        return str(d.get("id"))
    return ""


# ---- request fields


def _enum(name: str, value: Any, allowed: Iterable[str]) -> str:
    """kamu's enum spelling of ``value``: exact, PascalCase in any case, or the ``json-aos``
    kebab aliases kamu accepts."""
    choices = tuple(allowed)
    if isinstance(value, str):
        found = _case_insensitive(value.replace("-", ""), choices)
        if found is not None:
            return found
        if name == "queryDialect" and value in KAMU_ONLY_DIALECTS:
            raise ApiRequestInvalid(f"queryDialect {value} is not supported by this node")
    raise ApiRequestInvalid(
        f"unknown variant `{value}` of `{name}`, expected one of "
        + ", ".join(f"`{c}`" for c in choices)
    )


def _schema_format(value: Any) -> str:
    if isinstance(value, str) and _case_insensitive(
        value.replace("-", ""), KAMU_ONLY_SCHEMA_FORMATS
    ):
        raise ApiRequestInvalid(
            f"schemaFormat {value} is not supported by this node; use one of "
            + ", ".join(SCHEMA_FORMATS)
        )
    return _enum("schemaFormat", value, SCHEMA_FORMATS)


def _case_insensitive(value: str, choices: Iterable[str]) -> str | None:
    low = value.lower()
    return next((c for c in choices if c.lower() == low), None)


def _include(value: Any) -> set[str]:
    if not isinstance(value, list):
        raise ApiRequestInvalid("`include` is an array of Input, Proof, Schema, Attestations")
    out = set()
    for v in value:
        found = _case_insensitive(v, INCLUDE_ORDER) if isinstance(v, str) else None
        if found is None:
            raise ApiRequestInvalid(
                f"unknown variant `{v}` of `include`, expected one of "
                + ", ".join(f"`{c}`" for c in INCLUDE_ORDER)
            )
        out.add(found)
    return out


def _page(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_PAGE:
        raise ApiRequestInvalid(f"`{name}` is an integer 0..{MAX_PAGE}")
    return value


def _int_param(name: str, value: str) -> int:
    if not value.isdigit():
        raise ApiRequestInvalid(f"Failed to deserialize query string: `{name}` is not a number")
    return _page(name, int(value))


def _bool_param(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    low = str(value).lower()
    if low in ("true", "1"):
        return True
    if low in ("false", "0"):
        return False
    raise ApiRequestInvalid(f"`{name}` is true or false")


def _datasets(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise ApiRequestInvalid("`datasets` is an array of {id, alias, blockHash}")
    out = []
    for d in value:
        if not isinstance(d, Mapping):
            raise ApiRequestInvalid("`datasets` is an array of {id, alias, blockHash}")
        unknown = [k for k in d if k not in ("id", "alias", "blockHash")]
        if unknown:
            raise ApiRequestInvalid(
                f"unknown field `{unknown[0]}`, expected one of `id`, `alias`, `blockHash`"
            )
        if not isinstance(d.get("id"), str) or not isinstance(d.get("alias"), str):
            raise ApiRequestInvalid("missing field `id` or `alias` in `datasets`")
        try:
            did = DatasetId.parse(d["id"]).as_did_str()
        except OdfNodeError as e:
            raise ApiRequestInvalid(f"bad dataset id {d['id']!r}: {e}") from e
        entry: dict[str, Any] = {"id": did, "alias": d["alias"]}
        block = d.get("blockHash")
        if block is not None:
            try:
                entry["blockHash"] = Multihash.from_multibase(str(block)).to_multibase()
            except (OdfNodeError, ValueError) as e:
                raise ApiRequestInvalid(f"bad blockHash {block!r}: {e}") from e
        out.append(entry)
    return out


# ---- data and schema encodings (kamu-cli src/odf/data-utils/src/data/format/json.rs)


def encode_data(table: pa.Table, data_format: str) -> Any:
    """``table`` as kamu lays it out: ``JsonAoS`` (a list of objects), ``JsonAoA`` (a list of
    lists) or ``JsonSoA`` (an object of column lists). Cells are as kamu's JSON writer makes
    them: integers, floats (NaN and infinities as null), strings, binary as hex, decimals as
    strings, timestamps as RFC 3339 (``Z`` for UTC; fractions only when not zero, in 3, 6 or 9
    digits), dates ``YYYY-MM-DD``, lists and structs nested.
    """
    names = table.column_names
    columns = [_column(table.column(i), data_format) for i in range(table.num_columns)]
    if data_format == "JsonSoA":
        return {n: c for n, c in zip(names, columns, strict=True)}
    # The columns all have the table's rows and a row all the names: zip's strict checks (a
    # third of the rows' cost) could not fail.
    if data_format == "JsonAoA":
        return [list(row) for row in zip(*columns, strict=False)] if columns else []
    return [dict(zip(names, row, strict=False)) for row in zip(*columns, strict=False)]


def response_json(body: Any) -> str:
    """``body`` as the data API writes it: compact JSON, non-ASCII characters as they are."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def encode_data_json(table: pa.Table, data_format: str) -> str:
    """``response_json(encode_data(table, data_format))``, the same characters, made column by
    column: each cell's text once per column by the function ``json.dumps`` itself applies to
    it (a string's escaping, an integer's or float's ``repr``), each name's once, then one
    ``%`` formatting per row, instead of a dictionary per row that the encoder walks again
    (about half the time for a 1,000-row x 4-column answer)."""
    names = table.column_names
    if data_format == "JsonSoA" or len(set(names)) != len(names):
        # A column list per name is the encoder's fast case already; a repeated name is one
        # key in a row object (the last column's value): both left to the encoder.
        return response_json(encode_data(table, data_format))
    if not names:
        return "[]"
    texts = [_texts(table.column(i), data_format) for i in range(table.num_columns)]
    if data_format == "JsonAoA":
        row = "[" + ",".join(["%s"] * len(names)) + "]"
    else:
        row = "{" + ",".join(encode_basestring(n).replace("%", "%%") + ":%s" for n in names) + "}"
    return "[" + ",".join(map(row.__mod__, zip(*texts, strict=False))) + "]"


def _texts(col: Any, data_format: str) -> list[str]:
    """The JSON text of each of :func:`_column`'s cells, as ``json.dumps`` writes it."""
    import pyarrow as pa

    t = col.type
    if pa.types.is_integer(t):
        # Arrow's decimal text of an integer is the encoder's (int.__repr__; never a bool
        # here), made without a Python int per cell (a 1,000-row column's text 0.08 -> 0.05 ms).
        import pyarrow.compute as pc

        texts = pc.cast(col, pa.string())
        if col.null_count:
            texts = pc.fill_null(texts, _NULL)
        return list(texts.to_pylist())
    values = _column(col, data_format)
    text: Callable[[Any], str]
    if pa.types.is_float64(t):
        # The encoder's for a finite float; NaN and infinities are nulls already (_column),
        # so a column without nulls may hold some.
        return [_NULL if v is None else float.__repr__(v) for v in values]
    elif (
        _is_string(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_time(t)
        or pa.types.is_date(t)
        or pa.types.is_decimal(t)
        or _is_binary(t)
    ):
        # Text cells (_column's for these types): the encoder's own escaping, which raises on
        # anything that is not a string rather than write it wrongly.
        text = encode_basestring
    else:
        text = response_json
    if col.null_count:
        return [_NULL if v is None else text(v) for v in values]
    return list(map(text, values))


_NULL: Final = "null"


def _is_string(t: Any) -> bool:
    """Whether ``t`` is one of Arrow's string types (``string_view`` matched by its name)."""
    import pyarrow as pa

    return pa.types.is_string(t) or pa.types.is_large_string(t) or str(t) == "string_view"


def _is_binary(t: Any) -> bool:
    """Whether ``t`` is a binary type whose cells are written as hex (variable or fixed size)."""
    import pyarrow as pa

    return bool(
        pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
    )


def _is_list(t: Any) -> bool:
    """Whether ``t`` is a list type (its items are ``t.value_type``)."""
    import pyarrow as pa

    return bool(pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t))


def has_floats(schema: pa.Schema) -> bool:
    """Whether an answer of ``schema`` may hold a float anywhere (nested too): without one,
    its canonical JSON is the C encoder's (:func:`canonical_json_without_floats`)."""
    import pyarrow as pa

    def floating(t: Any) -> bool:
        if pa.types.is_floating(t):
            return True
        if pa.types.is_struct(t):
            return any(floating(t.field(i).type) for i in range(t.num_fields))
        if _is_list(t):
            return floating(t.value_type)
        # Anything _cell does not know passes through as pyarrow gives it: take the slow path.
        known = (
            pa.types.is_integer(t)
            or pa.types.is_boolean(t)
            or _is_string(t)
            or _is_binary(t)
            or pa.types.is_decimal(t)
            or pa.types.is_temporal(t)
            or pa.types.is_null(t)
            or str(t) == "binary_view"
        )
        return not known

    return any(floating(f.type) for f in schema)


def _column(col: Any, data_format: str) -> list[Any]:
    import pyarrow as pa

    t = col.type
    if pa.types.is_timestamp(t) or pa.types.is_time(t):
        return _temporal(col)
    if pa.types.is_integer(t) or pa.types.is_boolean(t) or _is_string(t) or pa.types.is_null(t):
        # Python's values are kamu's cells already: no per-cell work (the bulk of answers).
        return list(col.to_pylist())
    if pa.types.is_float64(t):
        values = col.to_pylist()
        isfinite = math.isfinite
        return [v if v is None or isfinite(v) else None for v in values]
    return [_cell(v, t, data_format) for v in col.to_pylist()]


def _cell(v: Any, t: Any, data_format: str) -> Any:
    import datetime as dt

    import pyarrow as pa

    if v is None:
        return None
    if pa.types.is_floating(t):
        if not math.isfinite(v):
            return None
        if t.bit_width < 64:
            # serde_json writes an f32 in its shortest f32 form, which kamu reads back as f64.
            import numpy as np

            return float(str(np.float32(v)))
        return float(v)
    if pa.types.is_decimal(t):
        return format(Decimal(v), "f")
    # _is_binary and _is_list spelled out: this runs per cell, where the two calls cost ~13%
    # of a nested or binary cell's time.
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return bytes(v).hex()
    if hasattr(pa.types, "is_binary_view") and pa.types.is_binary_view(t):
        return bytes(v).hex()
    if isinstance(v, dt.datetime):
        return _datetime_text(v, getattr(t, "tz", None))
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, dt.time):
        return v.isoformat()
    if isinstance(v, dt.timedelta):
        return f"PT{v.total_seconds():g}S"
    if pa.types.is_struct(t):
        fields = [t.field(i) for i in range(t.num_fields)]
        if data_format == "JsonAoA":
            return [_cell(v.get(f.name), f.type, data_format) for f in fields]
        return {f.name: _cell(v.get(f.name), f.type, data_format) for f in fields}
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [_cell(x, t.value_type, data_format) for x in v]
    return v


def _temporal(col: Any) -> list[Any]:
    """Timestamps and times as arrow's display writes them (chrono ``AutoSi`` fractions)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = col.type
    if pa.types.is_timestamp(t):
        tz = t.tz
        if tz is not None and not _is_utc(tz):
            return [_datetime_text(v, tz) if v is not None else None for v in col.to_pylist()]
        texts = pc.strftime(col, format="%Y-%m-%dT%H:%M:%S").to_pylist()
        suffix = "Z" if tz is not None else ""
        return [_auto_si(s) + suffix if s is not None else None for s in texts]
    texts = [v.isoformat() if v is not None else None for v in col.to_pylist()]
    return [_auto_si(s) if s is not None else None for s in texts]


def _is_utc(tz: str) -> bool:
    return tz.upper() in ("UTC", "Z", "+00:00", "ETC/UTC", "+0000", "GMT")


def _auto_si(text: str) -> str:
    """Drop a zero fraction; shorten a fraction to 3 or 6 digits when the rest are zeros."""
    head, dot, frac = text.partition(".")
    if not dot:
        return text
    frac = frac.rstrip("0")
    if not frac:
        return head
    width = 3 if len(frac) <= 3 else 6 if len(frac) <= 6 else 9
    return f"{head}.{frac.ljust(width, '0')}"


def _datetime_text(v: Any, tz: str | None) -> str:
    text = _auto_si(v.replace(tzinfo=None).isoformat())
    if tz is None:
        return text
    off = v.utcoffset()
    if off is None or off.total_seconds() == 0:
        return text + "Z"
    total = int(off.total_seconds())
    sign = "+" if total >= 0 else "-"
    hh, mm = divmod(abs(total) // 60, 60)
    return f"{text}{sign}{hh:02d}:{mm:02d}"


def render_schema(schema: pa.Schema, schema_format: str) -> Any:
    """The schema of an answer as kamu renders it: through the ODF schema with encodings
    stripped (kamu's ``strip_encoding``), then ``ArrowJson`` (arrow-rs' serde form),
    ``OdfJson`` or ``OdfYaml``."""
    from coordinator.errors import UnsupportedOdfSchema
    from coordinator.metadata import odf_schema as osc
    from coordinator.metadata.yaml_serde import dump_yaml, to_dict

    try:
        odf = osc.strip_encoding(osc.from_arrow(schema))
    except UnsupportedOdfSchema:
        if schema_format != "ArrowJson":
            raise
        return arrow_schema_json(schema)
    if schema_format == "ArrowJson":
        return arrow_schema_json(osc.to_arrow(odf))
    plain = to_dict(odf, legacy=False)
    return plain if schema_format == "OdfJson" else dump_yaml(plain)


_UNITS: Final = {"s": "Second", "ms": "Millisecond", "us": "Microsecond", "ns": "Nanosecond"}


def arrow_schema_json(schema: pa.Schema) -> dict[str, Any]:
    """arrow-rs' serde JSON of a schema (``{"fields": [...], "metadata": {}}``)."""
    return {"fields": [_field_json(f) for f in schema], "metadata": _meta(schema.metadata)}


def _meta(metadata: Mapping[bytes, bytes] | None) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in (metadata or {}).items()}


def _field_json(f: Any) -> dict[str, Any]:
    return {
        "name": f.name,
        "data_type": _type_json(f.type),
        "nullable": f.nullable,
        "dict_id": 0,
        "dict_is_ordered": False,
        "metadata": _meta(f.metadata),
    }


def _type_json(t: Any) -> Any:
    import pyarrow as pa

    simple = {
        pa.null(): "Null",
        pa.bool_(): "Boolean",
        pa.int8(): "Int8",
        pa.int16(): "Int16",
        pa.int32(): "Int32",
        pa.int64(): "Int64",
        pa.uint8(): "UInt8",
        pa.uint16(): "UInt16",
        pa.uint32(): "UInt32",
        pa.uint64(): "UInt64",
        pa.float16(): "Float16",
        pa.float32(): "Float32",
        pa.float64(): "Float64",
        pa.string(): "Utf8",
        pa.large_string(): "LargeUtf8",
        pa.binary(): "Binary",
        pa.large_binary(): "LargeBinary",
        pa.date32(): "Date32",
        pa.date64(): "Date64",
    }
    if t in simple:
        return simple[t]
    if hasattr(pa, "string_view") and t == pa.string_view():
        return "Utf8View"
    if hasattr(pa, "binary_view") and t == pa.binary_view():
        return "BinaryView"
    if pa.types.is_timestamp(t):
        return {"Timestamp": [_UNITS[t.unit], t.tz]}
    if pa.types.is_time32(t):
        return {"Time32": _UNITS[t.unit]}
    if pa.types.is_time64(t):
        return {"Time64": _UNITS[t.unit]}
    if pa.types.is_duration(t):
        return {"Duration": _UNITS[t.unit]}
    if pa.types.is_decimal(t):
        return {f"Decimal{t.bit_width}": [t.precision, t.scale]}
    if pa.types.is_fixed_size_binary(t):
        return {"FixedSizeBinary": t.byte_width}
    if pa.types.is_list(t):
        return {"List": _field_json(t.value_field)}
    if pa.types.is_large_list(t):
        return {"LargeList": _field_json(t.value_field)}
    if pa.types.is_fixed_size_list(t):
        return {"FixedSizeList": [_field_json(t.value_field), t.list_size]}
    if pa.types.is_struct(t):
        return {"Struct": [_field_json(t.field(i)) for i in range(t.num_fields)]}
    return str(t)


# ---- metadata


_EVENT_OF: Final = {
    "Attachments": "SetAttachments",
    "Info": "SetInfo",
    "License": "SetLicense",
    "Schema": "SetDataSchema",
    "Seed": "Seed",
    "Vocab": "SetVocab",
}


def _latest_events(root: Any, head: str, include: set[str]) -> dict[str, Any]:
    """The newest event of each asked kind, walking back from ``head``."""
    from coordinator.storage.dataset import Dataset

    wanted = {_EVENT_OF[i] for i in include if i in _EVENT_OF}
    found: dict[str, Any] = {}
    ds = Dataset(root, durable=False)
    for _, block in ds.iter_blocks(Multihash.from_multibase(head)):
        kind = type(block.event).__name__
        if kind in wanted and kind not in found:
            found[kind] = block.event
            if len(found) == len(wanted):
                break
    return found


_VOCAB_DEFAULTS: Final = {
    "offsetColumn": "offset",
    "operationTypeColumn": "op",
    "systemTimeColumn": "system_time",
    "eventTimeColumn": "event_time",
}


def _metadata_output(
    found: Mapping[str, Any], include: set[str], schema_format: str, head: str
) -> dict[str, Any]:
    from coordinator.metadata import odf_schema as osc
    from coordinator.metadata.yaml_serde import dump_yaml, to_dict

    def plain(event: Any) -> dict[str, Any]:
        d = dict(to_dict(event, legacy=False))
        d.pop("kind", None)
        return d

    out: dict[str, Any] = {}
    if "Attachments" in include and "SetAttachments" in found:
        out["attachments"] = plain(found["SetAttachments"])
    if "Info" in include and "SetInfo" in found:
        out["info"] = plain(found["SetInfo"])
    if "License" in include and "SetLicense" in found:
        out["license"] = plain(found["SetLicense"])
    if "Refs" in include:
        out["refs"] = [{"name": "head", "blockHash": head}]
    if "Schema" in include and "SetDataSchema" in found:
        odf = osc.upgrade(found["SetDataSchema"])
        if schema_format == "ArrowJson":
            out["schema"] = arrow_schema_json(osc.to_arrow(odf))
        else:
            d = to_dict(odf, legacy=False)
            out["schema"] = d if schema_format == "OdfJson" else dump_yaml(d)
        out["schemaFormat"] = schema_format
    if "Seed" in include and "Seed" in found:
        out["seed"] = plain(found["Seed"])
    if "Vocab" in include:
        vocab = plain(found["SetVocab"]) if "SetVocab" in found else {}
        out["vocab"] = {**_VOCAB_DEFAULTS, **{k: v for k, v in vocab.items() if v is not None}}
    return out


__all__ = [
    "DEFAULT_LIMIT",
    "ApiRequestInvalid",
    "ApiSettings",
    "ClientLimiter",
    "DataReader",
    "PinnedBlockNotFound",
    "QueryApi",
    "ResponseSigningNotConfigured",
    "arrow_schema_json",
    "encode_data",
    "render_schema",
]
