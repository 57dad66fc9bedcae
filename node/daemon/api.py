"""What the node can be asked to do: the JSON-RPC methods, independent of the transport.

Every method takes validated keyword arguments and returns JSON-friendly values; errors are
:class:`~coordinator.errors.OdfNodeError` subclasses, mapped to JSON-RPC codes only by the RPC
layer. :data:`METHODS` describes each method's parameters (JSON schema) for validation and the
OpenRPC document.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coordinator.errors import OdfNodeError
from coordinator.identity import DatasetId
from coordinator.metadata.yaml_serde import block_to_dict

if TYPE_CHECKING:
    from node.daemon.daemon import Daemon
    from node.state import WorkState

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


class InvalidArgument(OdfNodeError):
    """A parameter is well-typed but not acceptable (bad DID, missing file...)."""


def _did(text: str) -> DatasetId:
    try:
        return DatasetId.parse(text)
    except OdfNodeError as e:
        raise InvalidArgument(f"not a dataset DID: {text!r}") from e


class NodeApi:
    """The node's control surface over one :class:`Daemon`."""

    def __init__(self, daemon: Daemon) -> None:
        self.d = daemon

    # ---- node

    async def status(self) -> dict[str, Any]:
        """Identity, uptime, addresses, counts and queue depths."""
        d = self.d
        st = d.state
        return {
            "node_id": d.node_id,
            "home": str(d.home.path),
            "uptime_s": round((d.clock() - d.started_at_ns) / 1e9, 3) if d.started_at_ns else 0,
            "rpc_url": d.rpc_url,
            "http_url": f"http://{d.config.http.host}:{d.http_port}" if d.http_port else None,
            "p2p": {
                "peer_id": d.transport.peer_id if d.transport else None,
                "listen_addrs": d.transport.listen_addrs() if d.transport else [],
                "peers": len(d.transport.connected_peers()) if d.transport else 0,
            },
            "ipfs": d.ipfs_info or None,
            "engine": {
                "running": bool(d._engine and d._engine.running),
                "starts": d._engine.starts if d._engine else 0,
                "spark_master": d.config.engine.spark_master,
            },
            "datasets": d.repo.count(),
            "subscriptions": len(st.subscriptions()),
            "work": {k: st.pending_count(k) for k in ("verify", "publish", "dispute")},
            "running_work": len(d._running_items),
        }

    async def config_show(self) -> dict[str, Any]:
        """The effective configuration."""
        return self.d.config.to_dict()

    async def events(
        self, after_id: int = 0, limit: int = 100, kind: str | None = None
    ) -> list[dict[str, Any]]:
        """The event log (oldest first, after ``after_id``)."""
        return [
            {"id": e.id, "at_ns": e.ts_ns, "kind": e.kind, "did": e.did, "data": e.data}
            for e in self.d.state.events(after_id, limit, kind)
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
            for p in self.d.state.peers()
        ]

    async def peers_connect(self, multiaddr: str) -> dict[str, Any]:
        """Dial a gossip peer (``/ip4/…/tcp/…/p2p/…``)."""
        return {"peer_id": await self.d.connect_peer(multiaddr)}

    async def ipfs_connect(self, multiaddr: str) -> dict[str, Any]:
        """Connect this node's IPFS to another IPFS node (swarm connect)."""
        await self.d.ipfs_connect(multiaddr)
        return {"connected": multiaddr}

    # ---- subscriptions

    async def subscribe(self, did: str, alias: str | None = None) -> dict[str, Any]:
        """Follow a remote dataset: pull, verify, republish and attest every new head."""
        dataset = _did(did)
        if alias is not None:
            from coordinator.storage.repository import validate_alias

            validate_alias(alias)
        if self.d.owns(dataset):
            raise InvalidArgument(f"{did} is owned by this node; nothing to subscribe to")
        sub = self.d.state.subscribe(dataset.as_did_str(), alias, "rpc")
        self.d.state.log_event("subscribe", sub.did, {"alias": alias})
        await self.d.follow(dataset)
        return _subscription(sub)

    async def unsubscribe(self, did: str) -> dict[str, Any]:
        """Stop following a dataset (its local copy is kept)."""
        dataset = _did(did)
        removed = self.d.state.unsubscribe(dataset.as_did_str())
        if self.d.gossip is not None:
            self.d.gossip.unfollow(dataset)
        return {"did": dataset.as_did_str(), "removed": removed}

    async def subscriptions(self) -> list[dict[str, Any]]:
        """Followed datasets with their accepted head and last verification."""
        out = []
        for sub in self.d.state.subscriptions():
            item = _subscription(sub)
            acc = self.d.state.accepted_head(sub.did)
            item["accepted_head"] = acc.head if acc else None
            item["sequence"] = acc.sequence if acc else None
            ver = self.d.state.verification(sub.did, acc.head) if acc else None
            item["verification"] = ver.outcome if ver else None
            out.append(item)
        return out

    # ---- datasets

    async def dataset_list(self) -> list[dict[str, Any]]:
        """Datasets stored on this node."""
        out = []
        for h in self.d.repo.list():
            ds = self.d.repo.open(h.id.as_did_str())
            state = await asyncio.to_thread(ds.state)
            acc = self.d.state.accepted_head(h.id.as_did_str())
            ver = (
                self.d.state.verification(h.id.as_did_str(), str(state.head))
                if state.head
                else None
            )
            out.append(
                {
                    "alias": h.alias,
                    "id": h.id.as_did_str(),
                    "kind": state.dataset_kind.name.lower() if state.dataset_kind else None,
                    "head": str(state.head) if state.head else None,
                    "blocks": state.sequence_number + 1,
                    "owned": self.d.owns(h.id),
                    "accepted_head": acc.head if acc else None,
                    "verification": ver.outcome if ver else None,
                }
            )
        return out

    async def dataset_create(self, snapshot_yaml: str) -> list[dict[str, Any]]:
        """Create datasets from DatasetSnapshot YAML (kamu's format); this node owns them."""
        from coordinator.metadata.snapshot import snapshots_from_yaml

        snapshots = snapshots_from_yaml(snapshot_yaml)
        created = []
        for s in snapshots:
            h = await asyncio.to_thread(self.d.repo.create_from_snapshot, s)
            self.d.state.log_event("dataset.create", h.id.as_did_str(), {"alias": h.alias})
            created.append({"alias": h.alias, "id": h.id.as_did_str()})
        return created

    async def dataset_ingest(
        self, ref: str, files: list[str], source: str | None = None, publish: bool = True
    ) -> dict[str, Any]:
        """Push local files into a root dataset; then publish and announce it (owned datasets)."""
        from coordinator.ingest.push import ingest

        paths = [Path(f) for f in files]
        for p in paths:
            if not p.is_file():
                raise InvalidArgument(f"input file not found: {p}")
        handle = self.d.repo.resolve(ref)
        did = handle.id.as_did_str()
        async with self.d._commit_lock(did):
            result = await asyncio.to_thread(
                ingest, self.d.repo.open(did), paths, source_name=source
            )
        out = {
            "id": did,
            "new_head": str(result.new_head) if result.new_head else None,
            "blocks": len(result.new_blocks),
            "records": result.num_records,
        }
        self.d.state.log_event("dataset.ingest", did, out)
        if publish and result.new_head is not None and self.d.owns(handle.id):
            out["publish_work_id"] = self.d.queue_publish(handle.id).id
        return out

    async def dataset_transform(self, ref: str, publish: bool = True) -> dict[str, Any]:
        """Run the next transform step of a derivative on the engine; then publish it."""
        from coordinator.transform.plan import resolve_inputs
        from coordinator.transform.run import run_transform
        from node.home import system_clock

        handle = self.d.repo.resolve(ref)
        did = handle.id.as_did_str()
        async with self.d._commit_lock(did):
            ds = self.d.repo.open(did)
            inputs = await asyncio.to_thread(resolve_inputs, ds, self.d.repo.open)
            result = await asyncio.to_thread(
                run_transform, ds, inputs, self.d.engine, clock=system_clock, alias=handle.alias
            )
        if result is None or result.new_head is None:
            return {"id": did, "up_to_date": True}
        out: dict[str, Any] = {
            "id": did,
            "up_to_date": False,
            "new_head": str(result.new_head),
            "blocks": len(result.new_blocks),
        }
        self.d.state.log_event("dataset.transform", did, out)
        if publish and self.d.owns(handle.id):
            out["publish_work_id"] = self.d.queue_publish(handle.id).id
        return out

    async def dataset_verify(self, ref: str, integrity: bool = False) -> dict[str, Any]:
        """Verify a stored dataset now (integrity; replay for derivatives unless ``integrity``)."""
        from coordinator.transform.plan import resolve_inputs
        from coordinator.transform.verify import verify_dataset

        ds = self.d.repo.open(ref)
        state = await asyncio.to_thread(ds.state)
        inputs = {}
        if not integrity and state.set_transform is not None:
            inputs = await asyncio.to_thread(resolve_inputs, ds, self.d.repo.open)
        t0 = time.monotonic()
        report = await asyncio.to_thread(
            verify_dataset, ds, inputs, self.d.engine, integrity_only=integrity
        )
        value = report.integrity.to_dict()
        value["ok"] = report.ok
        value["seconds"] = round(time.monotonic() - t0, 3)
        value["replay"] = report.replay.to_dict() if report.replay is not None else None
        value["problems"] = [*value["problems"], *report.problems]
        return value

    async def dataset_publish(self, ref: str) -> dict[str, Any]:
        """Queue publication to IPFS and a signed head announcement of an owned dataset."""
        handle = self.d.repo.resolve(ref)
        item = self.d.queue_publish(handle.id)
        return {"id": handle.id.as_did_str(), "work_id": item.id, "head": item.head}

    async def dataset_pull(
        self, url: str, alias: str | None = None, force: bool = False
    ) -> dict[str, Any]:
        """Pull a dataset from ``ipfs://``, ``ipns://``, ``http(s)://`` or a local path."""
        from node.transfer.pull import pull_url

        result = await pull_url(
            self.d.repo, url, alias=alias, force=force, ipfs_api=self.d.ipfs_api
        )
        return result.to_dict()

    async def dataset_log(self, ref: str, limit: int = 50) -> list[dict[str, Any]]:
        """The newest ``limit`` metadata blocks of a dataset (kamu's YAML form as JSON)."""
        ds = self.d.repo.open(ref)

        def read() -> list[dict[str, Any]]:
            out = []
            for h, block in ds.iter_blocks():
                out.append({"hash": str(h), "block": block_to_dict(block)})
                if len(out) >= limit:
                    break
            return out

        return await asyncio.to_thread(read)

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
            for w in self.d.state.work(state=state, did=did)
        ]

    # ---- trust

    async def attestations(
        self, did: str | None = None, head: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """Attestations received or made (newest first)."""
        if did is not None:
            did = _did(did).as_did_str()
        return [
            {
                "did": a.did,
                "head": a.head,
                "verdict": a.verdict,
                "signer": a.signer,
                "own": a.own,
                "at_ns": a.received_ns,
            }
            for a in self.d.state.attestations(did=did, head=head, limit=limit)
        ]

    async def disputes(self, did: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """Disputes received or made (newest first)."""
        if did is not None:
            did = _did(did).as_did_str()
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
            for x in self.d.state.disputes(did=did, limit=limit)
        ]

    async def equivocations(self, did: str | None = None) -> list[dict[str, Any]]:
        """Equivocation proofs known to this node."""
        if did is not None:
            did = _did(did).as_did_str()
        return [
            {"did": p.did, "content_id": p.content_id, "at_ns": p.received_ns}
            for p in self.d.state.equivocation_proofs(did)
        ]


def _subscription(sub: Any) -> dict[str, Any]:
    return {"did": sub.did, "alias": sub.alias, "since_ns": sub.created_ns}


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
    _m(
        "equivocations.list",
        "equivocations",
        "Equivocation proofs.",
        Param("did", _STR, False),
        result=_ARR,
    ),
)

__all__ = ["METHODS", "InvalidArgument", "MethodSpec", "NodeApi", "Param"]
