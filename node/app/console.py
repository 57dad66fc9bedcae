"""What the node console shows that no other command returns in one piece.

Read-only use cases over the same ports as the rest of the application; the console's actions
(subscribe, unsubscribe, verify, publish) are the ordinary RPC methods and their use cases. Each
method answers one page in as few reads as possible: the datasets page of a node following
1,000 datasets is one listing of the datasets and of the keys, two small files per dataset
(alias, head ref), the process's cached chain states, and three state reads.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from coordinator.chain.validation import ChainState
from coordinator.errors import InvalidMultihash, OdfNodeError
from coordinator.identity import DatasetId
from coordinator.metadata import model as m
from coordinator.multiformats import Multihash
from coordinator.storage.dataset import Dataset, known_chain_state
from coordinator.storage.repository import DatasetRepository
from node.app.errors import InvalidArgument
from node.app.metrics import NodeMetrics
from node.app.ports import GossipPort, StatePort
from node.app.rows import Subscription
from node.app.subscriptions import parse_did, trust_json
from p2p.core import CoreConfig
from p2p.wire import Dispute as WireDispute
from p2p.wire import Evidence, decode_unverified

CONSOLE_PATH = "/ui"
"""Where the console's pages are served, beside the RPC endpoint (``http://host:port/ui``)."""
PREVIEW_MAX_ROWS = 100
LINEAGE_MAX_NODES = 200
VERIFY_EVENT_PREFIX = "verify."
_VERIFY_DONE = frozenset({"verified", "failed", "nondeterministic", "unverifiable"})


@dataclass(frozen=True)
class _Local:
    """One stored dataset as the catalog reads it (off the event loop)."""

    did: str
    alias: str
    kind: str | None
    head: str | None
    blocks: int | None
    records: int | None
    changed_ns: int | None
    owned: bool
    error: str | None


def _kind(st: Any) -> str | None:
    return st.dataset_kind.name.lower() if st.dataset_kind is not None else None


def _latest(*stamps: int | None) -> int | None:
    known = [s for s in stamps if s]
    return max(known) if known else None


def _evidence(e: Evidence) -> dict[str, Any]:
    return {
        "logical_hash": e.logical_hash.to_multibase() if e.logical_hash else None,
        "physical_hash": e.physical_hash.to_multibase() if e.physical_hash else None,
        "offsets": list(e.offsets) if e.offsets else None,
        "watermark_ns": e.watermark_ns,
    }


def _cell(v: Any) -> Any:
    """A parquet value as JSON: numbers and strings as they are, the rest as text."""
    if v is None or isinstance(v, bool | int | str):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else str(v)
    if isinstance(v, dt.datetime):
        return v.isoformat()
    if isinstance(v, bytes):
        return v.hex()
    return str(v)


@dataclass(eq=False)
class ConsoleQueries:
    """The console's read models; see the module docstring."""

    repo: DatasetRepository
    state: StatePort
    gossip: GossipPort
    metrics: NodeMetrics
    _: KW_ONLY
    graylist_threshold: float = CoreConfig().graylist_threshold
    _states: dict[str, ChainState] = field(init=False, default_factory=dict)

    # ---- datasets

    def _read_local(self) -> list[_Local]:
        out = []
        # Head ref text -> state, kept from the previous read (only the heads seen in it): the
        # page reloads with mostly unchanged heads, which then cost no parsing at all.
        states: dict[str, ChainState] = {}
        for c in self.repo.catalog():
            h = c.handle
            did = h.id.as_did_str()
            ref = c.head_ref
            try:
                st = (self._states.get(ref) or self._known_state(ref)) if ref else None
                if st is None:
                    st = Dataset(h.root, durable=False).state()
            except OdfNodeError as e:
                out.append(_Local(did, h.alias, None, None, None, None, None, c.owned, str(e)))
                continue
            # Remembered only under its own head (the ref may have moved since it was read).
            if (
                ref is not None
                and st.head is not None
                and (ref in self._states or str(st.head) == ref)
            ):
                states[ref] = st
            out.append(
                _Local(
                    did,
                    h.alias,
                    _kind(st),
                    str(st.head) if st.head else None,
                    st.sequence_number + 1,
                    st.next_offset,
                    st.system_time.epoch_ns if st.system_time else None,
                    c.owned,
                    None,
                )
            )
        self._states = states
        return out

    @staticmethod
    def _known_state(head_ref: str | None) -> ChainState | None:
        """The chain state of a head the process validated before (no file read), else None.

        The daemon validated every head it stores when it pulled or opened it, so for a page
        listing 1,000 datasets this is the common case; a miss (or a malformed ref, which
        :meth:`Dataset.state` then reports) opens the dataset.
        """
        if head_ref is None:
            return None
        try:
            return known_chain_state(Multihash.from_multibase(head_ref))
        except InvalidMultihash:  # Dataset.state() reports it as the row's error
            return None

    async def datasets(self) -> list[dict[str, Any]]:
        """Stored and followed datasets, one row each, sorted by alias.

        A followed dataset not pulled yet has no head; ``verification`` is the outcome recorded
        for the accepted head (followed) or for the local head (owned, verified by hand);
        ``trusted_head`` and ``trust`` are as ``subscriptions --json`` has them (followed only).
        """
        # The files are read in a worker thread while the state's reader thread answers.
        local, sub_list, acc_list, ver_list = await asyncio.gather(
            asyncio.to_thread(self._read_local),
            self.state.subscriptions(),
            self.state.accepted_heads(),
            self.state.verifications_of_heads(),
        )
        subs = {s.did: s for s in sub_list}
        accepted = {a.did: a for a in acc_list}
        verified = {v.did: v for v in ver_list}
        rows: list[dict[str, Any]] = []
        seen: set[str] = set()
        for d in local:
            seen.add(d.did)
            acc = accepted.get(d.did)
            ver = verified.get(d.did)
            rows.append(
                {
                    "id": d.did,
                    "alias": d.alias,
                    "kind": d.kind,
                    "head": d.head,
                    "blocks": d.blocks,
                    "records": d.records,
                    "owned": d.owned,
                    "followed": d.did in subs,
                    "accepted_head": acc.head if acc else None,
                    **_trust_fields(subs.get(d.did), acc.head if acc else None),
                    "verification": ver.outcome if ver else None,
                    "verification_detail": (ver.detail or None) if ver else None,
                    "changed_ns": _latest(
                        d.changed_ns,
                        acc.accepted_ns if acc else None,
                        ver.recorded_ns if ver else None,
                    ),
                    "error": d.error,
                }
            )
        for did, sub in subs.items():
            if did in seen:
                continue
            acc = accepted.get(did)
            ver = verified.get(did)
            rows.append(
                {
                    "id": did,
                    "alias": sub.alias or did,
                    "kind": None,
                    "head": None,
                    "blocks": None,
                    "records": None,
                    "owned": False,
                    "followed": True,
                    "accepted_head": acc.head if acc else None,
                    **_trust_fields(sub, acc.head if acc else None),
                    "verification": ver.outcome if ver else None,
                    "verification_detail": (ver.detail or None) if ver else None,
                    "changed_ns": sub.updated_ns,
                    "error": None,
                }
            )
        rows.sort(key=lambda r: (str(r["alias"]), str(r["id"])))
        return rows

    async def dataset(self, ref: str) -> dict[str, Any]:
        """One dataset: summary, its data slices (newest first) and its lineage graph."""
        handle = self.repo.resolve(ref)
        did = handle.id.as_did_str()

        def read() -> dict[str, Any]:
            ds = Dataset(handle.root, durable=False)
            st = ds.state()
            slices = []
            for h, block in ds.iter_blocks():
                ev = block.event
                if isinstance(ev, m.AddData | m.ExecuteTransform) and ev.new_data is not None:
                    nd = ev.new_data
                    slices.append(
                        {
                            "block": str(h),
                            "sequence": block.sequence_number,
                            "event": type(ev).__name__,
                            "offsets": [nd.offset_interval.start, nd.offset_interval.end],
                            "logical_hash": nd.logical_hash.to_multibase(),
                            "physical_hash": nd.physical_hash.to_multibase(),
                            "size": nd.size,
                            "system_time_ns": block.system_time.epoch_ns,
                        }
                    )
            return {
                "id": did,
                "alias": handle.alias,
                "kind": _kind(st),
                "head": str(st.head) if st.head else None,
                "blocks": st.sequence_number + 1,
                "records": st.next_offset,
                "owned": self.repo.key_path(handle.id).is_file(),
                "watermark_ns": st.watermark.epoch_ns if st.watermark else None,
                "slices": slices,
                "lineage": self._lineage(handle.id),
            }

        out = await asyncio.to_thread(read)
        sub = await self.state.subscription(did)
        acc = await self.state.accepted_head(did)
        out["followed"] = sub is not None
        out["accepted_head"] = acc.head if acc else None
        ver = await self.state.verification(did, out["head"]) if out["head"] else None
        out["verification"] = ver.outcome if ver else None
        out["verification_detail"] = (ver.detail or None) if ver else None
        return out

    def _lineage(self, root: DatasetId) -> dict[str, Any]:
        """The dataset and its inputs, recursively, as nodes and edges (input -> output)."""
        nodes: dict[str, dict[str, Any]] = {}
        edges: list[list[str]] = []
        todo = [root]
        while todo and len(nodes) < LINEAGE_MAX_NODES:
            did = todo.pop()
            key = did.as_did_str()
            if key in nodes:
                continue
            node: dict[str, Any] = {"id": key, "alias": None, "kind": None, "stored": False}
            nodes[key] = node
            try:
                handle = self.repo.resolve(key)
                st = Dataset(handle.root, durable=False).state()
            except OdfNodeError:
                continue
            node.update(alias=handle.alias, kind=_kind(st), stored=True)
            if st.set_transform is None:
                continue
            for i in st.set_transform.inputs:
                try:
                    idid = DatasetId.parse(i.dataset_ref)
                except OdfNodeError:
                    continue
                edges.append([idid.as_did_str(), key])
                todo.append(idid)
        return {"nodes": list(nodes.values()), "edges": edges}

    async def preview(self, ref: str, limit: int = 20) -> dict[str, Any]:
        """The last ``limit`` rows of the newest data slice (column names and rows)."""
        if not 1 <= limit <= PREVIEW_MAX_ROWS:
            raise InvalidArgument(f"limit must be 1..{PREVIEW_MAX_ROWS}")
        handle = self.repo.resolve(ref)

        def read() -> dict[str, Any]:
            import pyarrow.parquet as pq

            ds = Dataset(handle.root, durable=False)
            ev = ds.state().last_data_event
            nd = ev.new_data if ev is not None else None
            if nd is None:
                return {"columns": [], "rows": [], "offsets": None}
            path = ds.data.path_of(nd.physical_hash)
            if not path.is_file():
                return {"columns": [], "rows": [], "offsets": None, "missing": True}
            pf = pq.ParquetFile(path)
            n = pf.metadata.num_rows
            # Only the row groups holding the last rows are read.
            groups: list[int] = []
            rows_in, g = 0, pf.num_row_groups - 1
            while g >= 0 and rows_in < limit:
                groups.insert(0, g)
                rows_in += pf.metadata.row_group(g).num_rows
                g -= 1
            table = pf.read_row_groups(groups) if groups else pf.read()
            table = table.slice(max(0, table.num_rows - limit))
            cols = table.column_names
            data = [[_cell(v) for v in col.to_pylist()] for col in table.columns]
            rows = [list(r) for r in zip(*data, strict=True)] if data else []
            return {
                "columns": cols,
                "rows": rows,
                "offsets": [nd.offset_interval.start, nd.offset_interval.end],
                "total_rows": n,
            }

        return await asyncio.to_thread(read)

    # ---- trust

    async def disputes(self, did: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """Disputes with their signed evidence: expected vs computed hashes, who, when; and
        split views of sources followed by URL (``kind`` ``split-view``, ``docs/follow.md``)
        with both signed observations. Newest first, at most ``limit``."""
        if did is not None:
            did = parse_did(did).as_did_str()
        out: list[dict[str, Any]] = []
        for x in await self.state.disputes(did=did, limit=limit):
            row: dict[str, Any] = {
                "did": x.did,
                "block": x.head,
                "kind": x.kind,
                "signer": x.signer,
                "own": x.own,
                "detail": x.detail,
                "at_ns": x.received_ns,
                "expected": None,
                "computed": None,
                "issued_at_ns": None,
            }
            try:
                msg = decode_unverified(x.envelope).message  # type: ignore[union-attr]
            except (OdfNodeError, AttributeError):
                msg = None
            if isinstance(msg, WireDispute):
                row.update(
                    expected=_evidence(msg.expected),
                    computed=_evidence(msg.computed),
                    issued_at_ns=msg.issued_at_ns,
                )
            out.append(row)
        for sv in await self.state.split_views(did, limit):
            first, second = sv.first, sv.second
            out.append(
                {
                    "did": sv.did,
                    "block": second.head,
                    "kind": "split-view",
                    "signer": first.signer if first.own else second.signer,
                    "own": True,
                    "detail": sv.detail,
                    "at_ns": sv.detected_ns,
                    "expected": None,
                    "computed": None,
                    "issued_at_ns": None,
                    "source": sv.source,
                    "seen": sv.seen,
                    "last_seen_ns": sv.last_seen_ns,
                    "observations": sv.observations(),
                }
            )
        out.sort(key=lambda r: int(r["at_ns"]), reverse=True)
        return out[:limit]

    # ---- peers, events, charts

    async def peers(self) -> dict[str, Any]:
        """Known peers with the core's live score and graylist state; penalties by reason."""
        peers = []
        for p in await self.state.peers():
            score = self.gossip.peer_score(p.peer_id) if p.connected else p.score
            peers.append(
                {
                    "peer_id": p.peer_id,
                    "connected": p.connected,
                    "score": score,
                    "graylisted": score < self.graylist_threshold,
                    "addrs": list(p.addrs),
                    "first_seen_ns": p.first_seen_ns,
                    "last_seen_ns": p.last_seen_ns,
                }
            )
        penalties: dict[str, float] = {}
        for metric in self.metrics.announcements.collect():
            for sample in metric.samples:
                if sample.name.endswith("_total") and sample.labels.get("outcome") == "penalised":
                    reason = sample.labels.get("reason", "")
                    penalties[reason] = penalties.get(reason, 0.0) + sample.value
        return {
            "peers": peers,
            "penalties": penalties,
            "graylist_threshold": self.graylist_threshold,
        }

    async def recent_events(self, limit: int = 50) -> list[dict[str, Any]]:
        """The newest events, newest first."""
        return [
            {"id": e.id, "at_ns": e.ts_ns, "kind": e.kind, "did": e.did, "data": e.data}
            for e in await self.state.recent_events(limit)
        ]

    async def charts(self, limit: int = 500) -> dict[str, Any]:
        """Chart data: finished verifications (when, how long, outcome) and counter samples."""
        verifications = []
        for e in await self.state.recent_events(limit * 3, VERIFY_EVENT_PREFIX):
            outcome = e.kind[len(VERIFY_EVENT_PREFIX) :]
            seconds = e.data.get("seconds")
            if outcome in _VERIFY_DONE and isinstance(seconds, int | float):
                verifications.append(
                    {"at_ns": e.ts_ns, "did": e.did, "outcome": outcome, "seconds": seconds}
                )
                if len(verifications) >= limit:
                    break
        verifications.reverse()
        return {
            "verifications": verifications,
            "samples": self.metrics.history_json(),
            "totals": self.metrics.totals(),
        }


def _trust_fields(sub: Subscription | None, accepted: str | None) -> dict[str, Any]:
    """``trusted_head`` and ``trust`` of a followed dataset (both None otherwise)."""
    if sub is None:
        return {"trusted_head": None, "trust": None}
    return {"trusted_head": sub.trusted_head, "trust": trust_json(sub, accepted)}


__all__ = ["ConsoleQueries"]
