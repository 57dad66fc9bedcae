"""The JSON-RPC methods: a driving adapter over the application's use cases.

Every method takes validated keyword arguments, calls one use case of
:class:`~node.app.Application` and returns its typed result as JSON (the same ``to_json`` the
offline CLI prints). Errors are :class:`~coordinator.errors.OdfNodeError` subclasses, mapped to
JSON-RPC codes only by the RPC layer. :data:`METHODS` describes each method's parameters (JSON
schema) for validation and the OpenRPC document.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from node.app import Application
from node.app.errors import InvalidArgument
from node.app.rows import WorkState
from node.app.subscriptions import parse_did

_STR = {"type": "string"}
_INT = {"type": "integer", "minimum": 0}
_BOOL = {"type": "boolean"}
_LIMIT = {"type": "integer", "minimum": 1, "maximum": 1000}
_STRS = {"type": "array", "items": {"type": "string"}}
_OBJ = {"type": "object"}
_ARR = {"type": "array"}


@dataclass(frozen=True)
class Param:
    """One named parameter of a method."""

    name: str
    schema: dict[str, Any]
    required: bool = True
    description: str = ""


@dataclass(frozen=True)
class MethodSpec:
    """A method: its name, the :class:`NodeApi` attribute, params, result schema, summary."""

    name: str
    attr: str
    params: tuple[Param, ...]
    result: dict[str, Any]
    summary: str


class NodeApi:
    """The node's control surface over one :class:`~node.app.Application`."""

    def __init__(self, app: Application) -> None:
        self.app = app

    # ---- node

    async def status(self) -> dict[str, Any]:
        """Identity, uptime, addresses, counts and queue depths."""
        return await self.app.status()

    async def config_show(self) -> dict[str, Any]:
        """The effective configuration."""
        return dict(self.app.info.config)

    async def events(
        self, after_id: int = 0, limit: int = 100, kind: str | None = None
    ) -> list[dict[str, Any]]:
        """The event log (oldest first, after ``after_id``)."""
        return [
            {"id": e.id, "at_ns": e.ts_ns, "kind": e.kind, "did": e.did, "data": e.data}
            for e in await self.app.state.events(after_id, limit, kind)
        ]

    # ---- peers

    async def peers(self) -> list[dict[str, Any]]:
        """Known gossip peers with score and last contact."""
        return [
            {
                "peer_id": p.peer_id,
                "connected": p.connected,
                "score": p.score,
                "addrs": list(p.addrs),
                "last_seen_ns": p.last_seen_ns,
            }
            for p in await self.app.state.peers()
        ]

    async def peers_connect(self, multiaddr: str) -> dict[str, Any]:
        """Dial a gossip peer (``/ip4/…/tcp/…/p2p/…``)."""
        return {"peer_id": await self.app.subscriptions.connect_peer(multiaddr)}

    async def ipfs_connect(self, multiaddr: str) -> dict[str, Any]:
        """Connect this node's IPFS to another IPFS node (swarm connect)."""
        await self.app.subscriptions.connect_ipfs(multiaddr)
        return {"connected": multiaddr}

    # ---- subscriptions

    async def subscribe(self, did: str, alias: str | None = None) -> dict[str, Any]:
        """Follow a remote dataset: pull, verify, republish and attest every new head."""
        return (await self.app.subscriptions.subscribe(did, alias)).to_json()

    async def unsubscribe(self, did: str) -> dict[str, Any]:
        """Stop following a dataset (its local copy is kept)."""
        return await self.app.subscriptions.unsubscribe(did)

    async def subscriptions(self) -> list[dict[str, Any]]:
        """Followed datasets with their accepted head and last verification."""
        return [r.to_json() for r in await self.app.subscriptions.subscriptions()]

    # ---- datasets

    async def dataset_list(self) -> list[dict[str, Any]]:
        """Datasets stored on this node."""
        return [r.to_json() for r in await self.app.datasets.list()]

    async def dataset_create(self, snapshot_yaml: str) -> list[dict[str, Any]]:
        """Create datasets from DatasetSnapshot YAML (kamu's format); this node owns them."""
        return [c.to_json() for c in await self.app.datasets.create(snapshot_yaml)]

    async def dataset_ingest(
        self, ref: str, files: list[str], source: str | None = None, publish: bool = True
    ) -> dict[str, Any]:
        """Push local files into a root dataset; then publish and announce it (owned datasets)."""
        result = await self.app.datasets.ingest(
            ref, [Path(f) for f in files], source=source, publish=publish
        )
        return result.to_json()

    async def dataset_transform(self, ref: str, publish: bool = True) -> dict[str, Any]:
        """Run the next transform step of a derivative on the engine; then publish it."""
        return (await self.app.datasets.transform(ref, publish=publish)).to_json()

    async def dataset_verify(self, ref: str, integrity: bool = False) -> dict[str, Any]:
        """Verify a stored dataset now (integrity; replay for derivatives unless ``integrity``).

        Progress goes to the event stream (``verify.progress`` with ``manual: true``).
        """
        events = self.app.events
        did = self.app.repo.resolve(ref).id.as_did_str()

        def listener(phase: str, done: int, total: int) -> None:
            if events is not None:
                events.publish_threadsafe(
                    "verify.progress",
                    {"did": did, "phase": phase, "done": done, "total": total, "manual": True},
                )

        result = await self.app.datasets.verify(ref, integrity=integrity, listener=listener)
        return result.to_json()

    async def dataset_publish(self, ref: str) -> dict[str, Any]:
        """Queue publication to IPFS and a signed head announcement of an owned dataset."""
        handle = self.app.repo.resolve(ref)
        item = await self.app.publish.queue(handle.id)
        return {"id": handle.id.as_did_str(), "work_id": item.id, "head": item.head}

    async def dataset_pull(
        self, url: str, alias: str | None = None, force: bool = False
    ) -> dict[str, Any]:
        """Pull a dataset from ``ipfs://``, ``ipns://``, ``http(s)://`` or a local path."""
        result: dict[str, Any] = await self.app.datasets.pull(url, alias=alias, force=force)
        return result

    async def dataset_log(self, ref: str, limit: int = 50) -> list[dict[str, Any]]:
        """The newest ``limit`` metadata blocks of a dataset (kamu's YAML form as JSON)."""
        return [e.to_json() for e in await self.app.datasets.log(ref, limit)]

    async def work(
        self, state: WorkState | None = None, did: str | None = None
    ) -> list[dict[str, Any]]:
        """Work items (verify, publish, dispute) and their states."""
        return [
            {
                "id": w.id,
                "kind": w.kind,
                "did": w.did,
                "head": w.head,
                "state": w.state,
                "attempts": w.attempts,
                "last_error": w.last_error,
            }
            for w in await self.app.state.work(state=state, did=did)
        ]

    # ---- the console's read models

    def _console(self) -> Any:
        if self.app.console is None:
            raise InvalidArgument("the console queries are not available on this node")
        return self.app.console

    async def console_datasets(self) -> list[dict[str, Any]]:
        """Stored and followed datasets in one table (the console's datasets page)."""
        rows: list[dict[str, Any]] = await self._console().datasets()
        return rows

    async def console_dataset(self, ref: str) -> dict[str, Any]:
        """One dataset: summary, data slices, lineage, verification."""
        out: dict[str, Any] = await self._console().dataset(ref)
        return out

    async def console_preview(self, ref: str, limit: int = 20) -> dict[str, Any]:
        """The last rows of a dataset's newest data slice."""
        out: dict[str, Any] = await self._console().preview(ref, limit)
        return out

    async def console_disputes(
        self, did: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """Disputes with their signed evidence (expected vs computed)."""
        out: list[dict[str, Any]] = await self._console().disputes(did, limit)
        return out

    async def console_peers(self) -> dict[str, Any]:
        """Peers with live scores and graylist state; penalties by reason."""
        out: dict[str, Any] = await self._console().peers()
        return out

    async def console_events(self, limit: int = 50) -> list[dict[str, Any]]:
        """The newest events, newest first."""
        out: list[dict[str, Any]] = await self._console().recent_events(limit)
        return out

    async def console_charts(self) -> dict[str, Any]:
        """Verification durations/outcomes over time and counter samples for rate charts."""
        out: dict[str, Any] = await self._console().charts()
        return out

    # ---- trust

    async def attestations(
        self, did: str | None = None, head: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """Attestations received or made (newest first)."""
        if did is not None:
            did = parse_did(did).as_did_str()
        return [
            {
                "did": a.did,
                "head": a.head,
                "verdict": a.verdict,
                "signer": a.signer,
                "own": a.own,
                "at_ns": a.received_ns,
                **_attested_engine(a.envelope),
            }
            for a in await self.app.state.attestations(did=did, head=head, limit=limit)
        ]

    async def disputes(self, did: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """Disputes received or made (newest first)."""
        if did is not None:
            did = parse_did(did).as_did_str()
        return [
            {
                "did": x.did,
                "block": x.head,
                "kind": x.kind,
                "signer": x.signer,
                "own": x.own,
                "detail": x.detail,
                "at_ns": x.received_ns,
            }
            for x in await self.app.state.disputes(did=did, limit=limit)
        ]

    async def equivocations(self, did: str | None = None) -> list[dict[str, Any]]:
        """Equivocation proofs known to this node."""
        if did is not None:
            did = parse_did(did).as_did_str()
        return [
            {"did": p.did, "content_id": p.content_id, "at_ns": p.received_ns}
            for p in await self.app.state.equivocation_proofs(did)
        ]


def _m(
    name: str, attr: str, summary: str, *params: Param, result: dict[str, Any] | None = None
) -> MethodSpec:
    return MethodSpec(name, attr, params, result or _OBJ, summary)


METHODS: tuple[MethodSpec, ...] = (
    _m("node.status", "status", "Identity, uptime, addresses, counts and queue depths."),
    _m("node.config", "config_show", "The effective configuration."),
    _m(
        "node.events",
        "events",
        "The event log, oldest first.",
        Param("after_id", _INT, False),
        Param("limit", _LIMIT, False),
        Param("kind", _STR, False),
        result=_ARR,
    ),
    _m("peers.list", "peers", "Known gossip peers.", result=_ARR),
    _m("peers.connect", "peers_connect", "Dial a gossip peer.", Param("multiaddr", _STR)),
    _m("ipfs.connect", "ipfs_connect", "Swarm-connect the node's IPFS.", Param("multiaddr", _STR)),
    _m(
        "subscriptions.add",
        "subscribe",
        "Follow a remote dataset DID.",
        Param("did", _STR),
        Param("alias", _STR, False),
    ),
    _m("subscriptions.remove", "unsubscribe", "Stop following a dataset.", Param("did", _STR)),
    _m("subscriptions.list", "subscriptions", "Followed datasets.", result=_ARR),
    _m("dataset.list", "dataset_list", "Datasets stored on this node.", result=_ARR),
    _m(
        "dataset.create",
        "dataset_create",
        "Create datasets from DatasetSnapshot YAML.",
        Param("snapshot_yaml", _STR),
        result=_ARR,
    ),
    _m(
        "dataset.ingest",
        "dataset_ingest",
        "Push files into a root dataset.",
        Param("ref", _STR),
        Param("files", _STRS),
        Param("source", _STR, False),
        Param("publish", _BOOL, False),
    ),
    _m(
        "dataset.transform",
        "dataset_transform",
        "Run the next transform step of a derivative.",
        Param("ref", _STR),
        Param("publish", _BOOL, False),
    ),
    _m(
        "dataset.verify",
        "dataset_verify",
        "Verify a stored dataset.",
        Param("ref", _STR),
        Param("integrity", _BOOL, False),
    ),
    _m(
        "dataset.publish",
        "dataset_publish",
        "Publish and announce an owned dataset.",
        Param("ref", _STR),
    ),
    _m(
        "dataset.pull",
        "dataset_pull",
        "Pull a dataset from a URL.",
        Param("url", _STR),
        Param("alias", _STR, False),
        Param("force", _BOOL, False),
    ),
    _m(
        "dataset.log",
        "dataset_log",
        "Newest metadata blocks of a dataset.",
        Param("ref", _STR),
        Param("limit", _LIMIT, False),
        result=_ARR,
    ),
    _m(
        "work.list",
        "work",
        "Pipeline work items.",
        Param("state", {"type": "string", "enum": ["pending", "claimed", "done", "failed"]}, False),
        Param("did", _STR, False),
        result=_ARR,
    ),
    _m(
        "attestations.list",
        "attestations",
        "Attestations received or made.",
        Param("did", _STR, False),
        Param("head", _STR, False),
        Param("limit", _LIMIT, False),
        result=_ARR,
    ),
    _m(
        "disputes.list",
        "disputes",
        "Disputes received or made.",
        Param("did", _STR, False),
        Param("limit", _LIMIT, False),
        result=_ARR,
    ),
    _m("console.datasets", "console_datasets", "Stored and followed datasets.", result=_ARR),
    _m("console.dataset", "console_dataset", "One dataset in detail.", Param("ref", _STR)),
    _m(
        "console.preview",
        "console_preview",
        "Last rows of the newest data slice.",
        Param("ref", _STR),
        Param("limit", {"type": "integer", "minimum": 1, "maximum": 100}, False),
    ),
    _m(
        "console.disputes",
        "console_disputes",
        "Disputes with their evidence.",
        Param("did", _STR, False),
        Param("limit", _LIMIT, False),
        result=_ARR,
    ),
    _m("console.peers", "console_peers", "Peers, scores, graylist, penalties."),
    _m(
        "console.events",
        "console_events",
        "The newest events.",
        Param("limit", _LIMIT, False),
        result=_ARR,
    ),
    _m("console.charts", "console_charts", "Data of the console's charts."),
    _m(
        "equivocations.list",
        "equivocations",
        "Equivocation proofs.",
        Param("did", _STR, False),
        result=_ARR,
    ),
)

__all__ = ["METHODS", "InvalidArgument", "MethodSpec", "NodeApi", "Param"]


def _attested_engine(envelope: bytes) -> dict[str, str]:
    """The engine name and version an attestation signs (what reproduced the head)."""
    from p2p.errors import WireDecodeError
    from p2p.wire import Attestation, SignedMessage, decode_unverified

    try:
        signed = decode_unverified(envelope)
    except WireDecodeError:  # stored envelopes were decoded and verified on receipt
        return {}
    msg = signed.message if isinstance(signed, SignedMessage) else None
    if not isinstance(msg, Attestation):
        return {}
    return {"engine": msg.engine_name, "engine_version": msg.engine_version}
