"""The node's one validated configuration.

Sources, lowest precedence first: the documented defaults in ``config/default.toml``, the home's
``config.toml``, environment variables ``ODF_NODE_<SECTION>_<KEY>`` and explicit overrides (CLI
flags). Every value is type-checked against the default's type; unknown sections and keys are
errors (a typo must not silently fall back to a default), and so are out-of-range values.
"""

from __future__ import annotations

import ipaddress
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any, Final

from coordinator.errors import INVALID_INPUT, OdfNodeError
from node.app.ports import QueryLimits
from node.app.rows import EvidenceCaps
from p2p.trust import TrustConfig, TrustConfigError


class ConfigError(OdfNodeError):
    """The configuration is invalid (names the file or variable and the key)."""

    rpc_code = INVALID_INPUT


def default_config_text() -> str:
    """The documented default config shipped in ``config/default.toml``."""
    return resources.files("config").joinpath("default.toml").read_text(encoding="utf-8")


@dataclass(frozen=True, slots=True)
class NodeSection:
    """``[node]``."""

    log_level: str
    log_format: str


@dataclass(frozen=True, slots=True)
class NetworkSection:
    """``[network]``."""

    isolation: str
    advertise_host: str

    @property
    def loopback_only(self) -> bool:
        """Whether every address must be loopback and the namespace loopback-only."""
        return self.isolation == "loopback-only"


@dataclass(frozen=True, slots=True)
class RpcSection:
    """``[rpc]``."""

    host: str
    port: int
    max_body_bytes: int
    max_batch: int
    allowed_origins: tuple[str, ...]
    idle_timeout_s: float


@dataclass(frozen=True, slots=True)
class HttpSection:
    """``[http]``."""

    enabled: bool
    host: str
    port: int
    public_url: str
    idle_timeout_s: float


@dataclass(frozen=True, slots=True)
class P2pSection:
    """``[p2p]``."""

    enabled: bool
    listen_host: str
    port: int
    bootstrap: tuple[str, ...]
    fetch_timeout_s: float
    anti_entropy_interval_s: float
    discovery: bool
    discovery_interval_s: float
    relay_service: bool
    use_relays: bool
    serve_streams: bool
    relay_max_reservations: int
    relay_max_reservations_per_ip: int
    relay_max_circuits: int
    relay_circuit_duration_s: int
    relay_circuit_bytes: int
    relay_max_circuits_per_peer: int
    relay_peer_bytes: int
    relay_total_bytes: int
    relay_bytes_window_s: int
    reachability_interval_s: float
    hole_punching: bool
    peers_high_water: int
    peers_low_water: int
    max_peers_per_ip: int
    conn_grace_s: float
    dial_backoff_base_s: float
    dial_backoff_max_s: float
    signer_rate_burst: float
    signer_rate_per_s: float

    def peers_per_ip_cap(self, loopback_only: bool) -> int:
        """The per-IP cap in force: ``max_peers_per_ip``, where -1 means 8 on an open network
        and none in loopback-only isolation (every peer there shares 127.0.0.1)."""
        if self.max_peers_per_ip >= 0:
            return self.max_peers_per_ip
        return 0 if loopback_only else 8


@dataclass(frozen=True, slots=True)
class DhtSection:
    """``[dht]``: the odf DHT of provider records (``p2p/dht_service.py``, docs/libp2p.md)."""

    enabled: bool
    serve: bool
    interval_s: float
    query_timeout_s: float
    lookup_timeout_s: float
    ask_after_s: float
    rate_per_s: float
    rate_burst: float
    records_per_dataset: int
    datasets_per_provider: int
    max_records: int
    record_ttl_s: float
    republish_s: float


@dataclass(frozen=True, slots=True)
class IpfsSection:
    """``[ipfs]``."""

    mode: str
    api_url: str
    swarm_peers: tuple[str, ...]
    swarm_host: str
    swarm_port: int
    #: The embedded node's start: "lazy" on its first use, "eager" with the daemon.
    start: str


@dataclass(frozen=True, slots=True)
class EngineSection:
    """``[engine]``."""

    spark_master: str
    idle_timeout_s: int
    isolate_network: bool
    memory_limit_mib: int
    cpu_limit_s: float
    driver_host: str
    datafusion_workers: int


@dataclass(frozen=True, slots=True)
class PipelineSection:
    """``[pipeline]``."""

    concurrency: int
    max_attempts: int
    retry_base_s: float
    retry_cap_s: float
    replay: bool
    republish: bool
    keep_finished_work_days: float


@dataclass(frozen=True, slots=True)
class TransferSection:
    """``[transfer]``: the pace every object read of a pull must keep, and which HTTP sources
    the node will contact (``node.transfer.policy``)."""

    deadline_base_s: float
    min_rate_bytes_per_s: int
    first_contact_s: float
    direct_io: bool
    allow_private_sources: bool
    allowed_source_networks: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class IngestSection:
    """``[ingest]``: bounds of polling sources (``coordinator.ingest.polling``)."""

    max_fetch_bytes: int
    max_decompressed_bytes: int
    allow_pipe: bool
    mqtt_max_records: int
    mqtt_idle_timeout_s: float
    mqtt_max_message_bytes: int
    mqtt_max_poll_s: float
    files_root: str
    container_runtime: str
    container_network: bool
    container_timeout_s: float
    container_memory_bytes: int
    container_storage: str
    eth_node_urls: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class FlowsSection:
    """``[flows]``: the flow scheduler (``docs/flows.md``)."""

    tick_s: float


@dataclass(frozen=True, slots=True)
class FollowSection:
    """``[follow]``: polling of datasets followed by URL (``docs/follow.md``)."""

    poll_interval_s: float
    jitter: float
    backoff_max_s: float
    min_gap_s: float
    max_connections: int


@dataclass(frozen=True, slots=True)
class TrustSection:
    """``[trust]``: the node's default trust policy (``docs/trust.md``); read through
    :meth:`NodeConfig.trust_config`, which validates it with ``[pipeline] replay``."""

    policy: str
    k: int
    trusted_attesters: tuple[str, ...]
    p: float
    fallback_verify_s: float
    min_score: float
    base_weight: float
    threshold: float
    reward: float
    penalty: float

    def table(self) -> dict[str, object]:
        """The section as a ``[trust]`` table (lists as lists), for ``TrustConfig``."""
        return {
            f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v
            for f in fields(self)
        }


@dataclass(frozen=True, slots=True)
class HealthSection:
    """``[health]``: the bounds ``GET /readyz`` checks (``node/daemon/health.py``)."""

    max_verify_backlog: int
    max_write_delay_s: float
    engine_crash_window_s: float
    engine_crash_failures: int


@dataclass(frozen=True, slots=True)
class StorageSection:
    """``[storage]``: the disk budget of datasets this node stores but does not own."""

    max_bytes: int
    min_free_bytes: int
    evidence_per_signer: int
    evidence_per_dataset: int
    evidence_total: int
    key_records_max: int

    def evidence_caps(self) -> EvidenceCaps:
        """The caps on strangers' attestations, disputes and key records in ``state.db``."""
        return EvidenceCaps(
            self.evidence_per_signer,
            self.evidence_per_dataset,
            self.evidence_total,
            self.key_records_max,
        )


@dataclass(frozen=True, slots=True)
class MetadataSection:
    """``[metadata]``."""

    block_version: int
    write_version: str

    @property
    def effective_block_version(self) -> int:
        """The manifest version of new blocks: ``current`` always writes 3 (kamu-cli HEAD)."""
        return 3 if self.write_version == "current" else self.block_version

    def apply(self) -> int:
        """Make this the process's form of new blocks (``coordinator.metadata`` write form);
        returns the effective block version."""
        from coordinator.metadata.flatbuffers_serde import set_write_form

        return set_write_form(self.write_version, self.block_version).block_version


@dataclass(frozen=True, slots=True)
class QuerySection:
    """``[query]``: reading verified data (SQL, tail, export, the HTTP data API, Flight SQL).

    Every query runs in the transform sandbox, in a worker process the node kills at
    ``deadline_s``; the caps bound what one answer may hold and what one client may run at once.
    """

    public: bool
    deadline_s: float
    memory_bytes: int
    max_rows: int
    max_bytes: int
    max_sql_bytes: int
    concurrency_per_client: int
    concurrency_total: int
    warm_workers: int
    flight_sql_enabled: bool
    flight_sql_host: str
    flight_sql_port: int

    def limits(self) -> QueryLimits:
        """What one query may use."""
        return QueryLimits(self.deadline_s, self.memory_bytes, self.max_rows, self.max_bytes)


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """The whole validated configuration."""

    node: NodeSection
    network: NetworkSection
    rpc: RpcSection
    http: HttpSection
    p2p: P2pSection
    dht: DhtSection
    ipfs: IpfsSection
    engine: EngineSection
    pipeline: PipelineSection
    transfer: TransferSection
    ingest: IngestSection
    flows: FlowsSection
    follow: FollowSection
    metadata: MetadataSection
    trust: TrustSection
    health: HealthSection
    storage: StorageSection
    query: QuerySection

    def trust_config(self) -> TrustConfig:
        """The validated default trust policy; ``can_replay`` is ``[pipeline] replay``.

        Raises:
            ConfigError: a ``[trust]`` setting is invalid (the message names it).
        """
        try:
            return TrustConfig.from_settings(self.trust.table(), can_replay=self.pipeline.replay)
        except TrustConfigError as e:
            raise ConfigError(str(e)) from e

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """JSON-friendly form (tuples as lists)."""
        result: dict[str, dict[str, Any]] = {}
        for f in fields(self):
            section = getattr(self, f.name)
            result[f.name] = {
                k.name: list(v) if isinstance(v := getattr(section, k.name), tuple) else v
                for k in fields(section)
            }
        return result


_SECTION_TYPES = {
    "node": NodeSection,
    "network": NetworkSection,
    "rpc": RpcSection,
    "http": HttpSection,
    "p2p": P2pSection,
    "dht": DhtSection,
    "ipfs": IpfsSection,
    "engine": EngineSection,
    "pipeline": PipelineSection,
    "transfer": TransferSection,
    "ingest": IngestSection,
    "flows": FlowsSection,
    "follow": FollowSection,
    "metadata": MetadataSection,
    "trust": TrustSection,
    "health": HealthSection,
    "storage": StorageSection,
    "query": QuerySection,
}

_CHOICES: dict[tuple[str, str], frozenset[str]] = {
    ("node", "log_level"): frozenset({"debug", "info", "warning", "error"}),
    ("node", "log_format"): frozenset({"text", "json"}),
    ("network", "isolation"): frozenset({"loopback-only", "open"}),
    ("ipfs", "mode"): frozenset({"embedded", "external", "none"}),
    ("ipfs", "start"): frozenset({"lazy", "eager"}),
}


def _coerce_env(raw: str, default: Any, where: str) -> Any:
    if isinstance(default, bool):
        if raw.lower() in {"1", "true", "yes", "on"}:
            return True
        if raw.lower() in {"0", "false", "no", "off"}:
            return False
        raise ConfigError(f"{where}: expected a boolean, got {raw!r}")
    if isinstance(default, int):
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"{where}: expected an integer, got {raw!r}") from None
    if isinstance(default, float):
        try:
            return float(raw)
        except ValueError:
            raise ConfigError(f"{where}: expected a number, got {raw!r}") from None
    if isinstance(default, list):
        return [s.strip() for s in raw.split(",") if s.strip()]
    return raw


def _check_type(value: Any, default: Any, where: str) -> Any:
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected a boolean, got {value!r}")
    elif isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
    elif isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        value = float(value)
    elif isinstance(default, list):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where}: expected a list of strings, got {value!r}")
        value = tuple(value)
    elif isinstance(default, str) and not isinstance(value, str):
        raise ConfigError(f"{where}: expected a string, got {value!r}")
    return value


def _check_ports(cfg: NodeConfig) -> None:
    """The listening ports of RPC, HTTP, P2P and the IPFS swarm are TCP ports."""
    for port, what in ((cfg.rpc.port, "rpc.port"), (cfg.http.port, "http.port")):
        if not 0 <= port <= 65535:
            raise ConfigError(f"{what}: {port} is not a TCP port")
    if not 0 <= cfg.p2p.port <= 65535:
        raise ConfigError(f"p2p.port: {cfg.p2p.port} is not a TCP port")
    if not 0 <= cfg.ipfs.swarm_port <= 65535:
        raise ConfigError(f"ipfs.swarm_port: {cfg.ipfs.swarm_port} is not a TCP port")


def _check_p2p(cfg: NodeConfig) -> None:
    """[p2p]: intervals, relay limits, peer counts, dial backoff and the signer rate limit."""
    if (
        cfg.p2p.fetch_timeout_s <= 0
        or cfg.p2p.anti_entropy_interval_s <= 0
        or cfg.p2p.discovery_interval_s <= 0
    ):
        raise ConfigError(
            "p2p.fetch_timeout_s, p2p.anti_entropy_interval_s and p2p.discovery_interval_s "
            "must be > 0"
        )
    p = cfg.p2p
    relay_limits = (
        p.relay_max_reservations,
        p.relay_max_reservations_per_ip,
        p.relay_max_circuits,
        p.relay_circuit_bytes,
        p.relay_circuit_duration_s,
        p.relay_max_circuits_per_peer,
        p.relay_peer_bytes,
        p.relay_total_bytes,
        p.relay_bytes_window_s,
    )
    if min(relay_limits) < 1 or p.reachability_interval_s <= 0:
        raise ConfigError(
            "p2p.relay_max_reservations, relay_max_reservations_per_ip, relay_max_circuits, "
            "relay_circuit_duration_s, "
            "relay_circuit_bytes, relay_max_circuits_per_peer, relay_peer_bytes, "
            "relay_total_bytes, relay_bytes_window_s and reachability_interval_s must be > 0"
        )
    if p.relay_service and cfg.network.loopback_only:
        raise ConfigError(
            "p2p.relay_service needs network.isolation = 'open' (a relay serves other hosts)"
        )
    if not 0 < p.peers_low_water <= p.peers_high_water:
        raise ConfigError("p2p: need 0 < peers_low_water <= peers_high_water")
    if p.max_peers_per_ip < -1 or p.conn_grace_s < 0:
        raise ConfigError("p2p.max_peers_per_ip must be >= -1 and p2p.conn_grace_s >= 0")
    if not 0 < p.dial_backoff_base_s <= p.dial_backoff_max_s:
        raise ConfigError("p2p: need 0 < dial_backoff_base_s <= dial_backoff_max_s")
    if p.signer_rate_burst < 1 or p.signer_rate_per_s <= 0:
        raise ConfigError("p2p: need signer_rate_burst >= 1 and signer_rate_per_s > 0")


def _check_dht(cfg: NodeConfig) -> None:
    """[dht]: positive intervals, limits and bounds; republishing well inside the TTL."""
    d = cfg.dht
    times = (d.interval_s, d.query_timeout_s, d.lookup_timeout_s, d.ask_after_s, d.rate_per_s)
    bounds = (d.records_per_dataset, d.datasets_per_provider, d.max_records)
    if min(times) <= 0 or min(bounds) < 1 or d.rate_burst < 1:
        raise ConfigError(
            "dht: intervals, timeouts and rate_per_s must be > 0, rate_burst and the record "
            "bounds >= 1"
        )
    if not 0 < d.republish_s < d.record_ttl_s:
        raise ConfigError("dht: need 0 < republish_s < record_ttl_s")


def _check_storage(cfg: NodeConfig) -> None:
    """[storage]: disk budgets and evidence / key-record caps."""
    if cfg.storage.max_bytes < 0 or cfg.storage.min_free_bytes < 0:
        raise ConfigError("storage.max_bytes and storage.min_free_bytes must be >= 0")
    s = cfg.storage
    if min(s.evidence_per_signer, s.evidence_per_dataset, s.evidence_total, s.key_records_max) < 1:
        raise ConfigError(
            "storage.evidence_per_signer, evidence_per_dataset, evidence_total and "
            "key_records_max must be >= 1"
        )


def _check_follow(cfg: NodeConfig) -> None:
    """[follow]: polling interval, backoff, jitter and connections."""
    f = cfg.follow
    if f.poll_interval_s <= 0 or f.min_gap_s < 0 or f.backoff_max_s < f.poll_interval_s:
        raise ConfigError(
            "follow: need poll_interval_s > 0, min_gap_s >= 0, backoff_max_s >= poll_interval_s"
        )
    if not 0 <= f.jitter < 1 or f.max_connections < 1:
        raise ConfigError("follow: need 0 <= jitter < 1 and max_connections >= 1")


def _check_rpc_http(cfg: NodeConfig) -> None:
    """[rpc] and [http]: idle timeouts, body size and batch size."""
    if cfg.rpc.idle_timeout_s <= 0 or cfg.http.idle_timeout_s <= 0:
        raise ConfigError("rpc.idle_timeout_s and http.idle_timeout_s must be > 0")
    if cfg.rpc.max_body_bytes < 1024 or cfg.rpc.max_batch < 1:
        raise ConfigError("rpc.max_body_bytes must be >= 1024 and rpc.max_batch >= 1")


def _check_pipeline(cfg: NodeConfig) -> None:
    """[pipeline]: concurrency, attempts, retry backoff and retention."""
    if cfg.pipeline.concurrency < 1 or cfg.pipeline.max_attempts < 1:
        raise ConfigError("pipeline.concurrency and pipeline.max_attempts must be >= 1")
    if cfg.pipeline.retry_base_s <= 0 or cfg.pipeline.retry_cap_s < cfg.pipeline.retry_base_s:
        raise ConfigError("pipeline: need 0 < retry_base_s <= retry_cap_s")
    if cfg.pipeline.keep_finished_work_days < 0:
        raise ConfigError("pipeline.keep_finished_work_days must be >= 0 (0 keeps them forever)")


def _check_engine(cfg: NodeConfig) -> None:
    """[engine]: the driver host against network isolation, and resource limits."""
    if cfg.engine.driver_host and cfg.engine.isolate_network:
        raise ConfigError(
            "engine.driver_host is set (a cluster's executors connect to the driver) but "
            "engine.isolate_network = true takes the driver's network away"
        )
    if cfg.engine.idle_timeout_s < 0 or cfg.engine.memory_limit_mib < 0:
        raise ConfigError("engine.idle_timeout_s and engine.memory_limit_mib must be >= 0")
    if cfg.engine.cpu_limit_s < 0:
        raise ConfigError("engine.cpu_limit_s must be >= 0 (0: no CPU-time budget)")
    if cfg.engine.datafusion_workers < 0:
        raise ConfigError("engine.datafusion_workers must be >= 0 (0: automatic)")


def _check_query(cfg: NodeConfig) -> None:
    """[query]: the Flight SQL port, deadline, resource caps and concurrency."""
    q = cfg.query
    if not 0 <= q.flight_sql_port <= 65535:
        raise ConfigError(f"query.flight_sql_port: {q.flight_sql_port} is not a TCP port")
    if q.deadline_s <= 0 or min(q.memory_bytes, q.max_rows, q.max_bytes, q.max_sql_bytes) < 1:
        raise ConfigError(
            "query: need deadline_s > 0 and memory_bytes, max_rows, max_bytes, max_sql_bytes >= 1"
        )
    if min(q.concurrency_per_client, q.concurrency_total) < 1 or q.warm_workers < 0:
        raise ConfigError(
            "query: need concurrency_per_client >= 1, concurrency_total >= 1, warm_workers >= 0"
        )


def _check_metadata(cfg: NodeConfig) -> None:
    """[metadata]: the block and write versions."""
    if cfg.metadata.block_version not in (2, 3):
        raise ConfigError(f"metadata.block_version: {cfg.metadata.block_version} is not 2 or 3")
    if cfg.metadata.write_version not in ("v0.34", "current"):
        raise ConfigError(
            f"metadata.write_version: {cfg.metadata.write_version!r} is not 'v0.34' or 'current'"
        )


def _check_flows(cfg: NodeConfig) -> None:
    """[flows]: the scheduler tick."""
    if not 0.05 <= cfg.flows.tick_s <= 60:
        raise ConfigError("flows.tick_s must be in [0.05, 60]")


def _check_ingest(cfg: NodeConfig) -> None:
    """[ingest]: fetch, MQTT and container limits, paths and Ethereum node URLs."""
    if cfg.ingest.max_fetch_bytes < 1 or cfg.ingest.max_decompressed_bytes < 1:
        raise ConfigError("ingest.max_fetch_bytes and ingest.max_decompressed_bytes must be >= 1")
    if cfg.ingest.mqtt_max_records < 1 or not 0 < cfg.ingest.mqtt_idle_timeout_s <= 3600:
        raise ConfigError(
            "ingest.mqtt_max_records must be >= 1 and ingest.mqtt_idle_timeout_s in (0, 3600]"
        )
    if cfg.ingest.mqtt_max_message_bytes < 1 or not 0 < cfg.ingest.mqtt_max_poll_s <= 86400:
        raise ConfigError(
            "ingest.mqtt_max_message_bytes must be >= 1 and ingest.mqtt_max_poll_s in (0, 86400]"
        )
    if cfg.ingest.files_root and not os.path.isabs(cfg.ingest.files_root):
        raise ConfigError(
            f"ingest.files_root = {cfg.ingest.files_root!r}: expected an absolute path"
        )
    if not 0 < cfg.ingest.container_timeout_s <= 86400 or cfg.ingest.container_memory_bytes < (
        16 << 20
    ):
        raise ConfigError(
            "ingest.container_timeout_s must be in (0, 86400] and ingest.container_memory_bytes "
            ">= 16777216"
        )
    if cfg.ingest.container_storage and not os.path.isabs(cfg.ingest.container_storage):
        raise ConfigError(
            f"ingest.container_storage = {cfg.ingest.container_storage!r}: expected an absolute "
            "path"
        )
    for entry in cfg.ingest.eth_node_urls:
        chain, sep, url = entry.partition("=")
        if not sep or not chain.strip().isdigit() or not url.strip():
            raise ConfigError(
                f"ingest.eth_node_urls entry {entry[:100]!r}: expected 'CHAIN_ID=NODE_URL'"
            )


def _check_health(cfg: NodeConfig) -> None:
    """[health]: verify backlog, write delay and engine crash thresholds."""
    h = cfg.health
    if h.max_verify_backlog < 1 or h.engine_crash_failures < 1:
        raise ConfigError("health.max_verify_backlog and health.engine_crash_failures must be >= 1")
    if h.max_write_delay_s <= 0 or h.engine_crash_window_s <= 0:
        raise ConfigError("health.max_write_delay_s and health.engine_crash_window_s must be > 0")


def _check_transfer(cfg: NodeConfig) -> None:
    """[transfer]: deadlines, first contact and the allowed source networks."""
    if cfg.transfer.deadline_base_s <= 0 or cfg.transfer.min_rate_bytes_per_s <= 0:
        raise ConfigError("transfer.deadline_base_s and transfer.min_rate_bytes_per_s must be > 0")
    if cfg.transfer.first_contact_s <= 0:
        raise ConfigError("transfer.first_contact_s must be > 0")
    for cidr in cfg.transfer.allowed_source_networks:
        try:
            ipaddress.ip_network(cidr.strip(), strict=False)
        except ValueError as e:
            raise ConfigError(
                f"transfer.allowed_source_networks: {cidr!r} is not an IP network in CIDR form "
                f"({e})"
            ) from None


def _check_loopback_only(cfg: NodeConfig) -> None:
    """With network.isolation = 'loopback-only', every address bound or dialled is loopback."""
    if not cfg.network.loopback_only:
        return
    # Parsed (and checked) by _check_transfer, which runs first.
    networks = [
        ipaddress.ip_network(cidr.strip(), strict=False)
        for cidr in cfg.transfer.allowed_source_networks
    ]
    for net in networks:
        if not net.is_loopback:
            raise ConfigError(
                f"transfer.allowed_source_networks entry {str(net)!r} is not loopback but "
                "network.isolation is 'loopback-only' (only loopback sources are contacted)"
            )
    for host, what in (
        (cfg.rpc.host, "rpc.host"),
        (cfg.http.host, "http.host"),
        (cfg.p2p.listen_host, "p2p.listen_host"),
        (cfg.ipfs.swarm_host, "ipfs.swarm_host"),
        (cfg.network.advertise_host or "127.0.0.1", "network.advertise_host"),
        (cfg.engine.driver_host or "127.0.0.1", "engine.driver_host"),
    ):
        if not host.startswith("127."):
            raise ConfigError(
                f"{what} = {host!r} but network.isolation is 'loopback-only'; "
                "bind to 127.0.0.1 or set network.isolation = 'open'"
            )
    for addr in (*cfg.p2p.bootstrap, *cfg.ipfs.swarm_peers):
        if not addr.startswith("/ip4/127."):
            raise ConfigError(
                f"peer {addr!r} is not a loopback address but network.isolation is 'loopback-only'"
            )


_WILDCARDS = frozenset({"0.0.0.0", "::", ""})


def _validate_hosts(cfg: NodeConfig) -> None:
    """An advertised host, when given, must be something peers can dial (checked at every load)."""
    adv = cfg.network.advertise_host
    if adv in _WILDCARDS - {""} or any(c in adv for c in "/ "):
        raise ConfigError(
            f"network.advertise_host = {adv!r}: expected a host name or an address peers can reach"
        )


_CHECKS: Final = (
    _check_ports,
    _check_p2p,
    _check_dht,
    _check_storage,
    _validate_hosts,
    _check_follow,
    _check_rpc_http,
    _check_pipeline,
    _check_engine,
    _check_query,
    _check_metadata,
    _check_ingest,
    _check_flows,
    _check_health,
    _check_transfer,
    _check_loopback_only,
)
"""The checks of a loaded configuration, one per section, in the order they run."""


def _validate(cfg: NodeConfig) -> None:
    """Refuse a configuration that breaks any check of :data:`_CHECKS` (the first one found)."""
    for check in _CHECKS:
        check(cfg)


def check_listeners(cfg: NodeConfig) -> None:
    """What only a starting daemon needs: a wildcard listener needs an address to advertise.

    Checked when the daemon starts (``odf-node run``, ``python -m node.daemon``), not at every
    load: a CLI command run beside the daemon (``docker exec … odf-node status``) binds
    nothing, and must work in the same environment as the daemon whatever it advertises.

    Raises:
        ConfigError: naming the setting and its environment variable.
    """
    if cfg.network.advertise_host:
        return
    wild = [
        what
        for host, what, used in (
            (cfg.p2p.listen_host, "p2p.listen_host", cfg.p2p.enabled),
            (cfg.ipfs.swarm_host, "ipfs.swarm_host", cfg.ipfs.mode == "embedded"),
            (cfg.http.host, "http.host", cfg.http.enabled and not cfg.http.public_url),
        )
        if used and host in _WILDCARDS
    ]
    if wild:
        raise ConfigError(
            f"{', '.join(wild)} listen on every interface: set network.advertise_host (environment "
            "variable ODF_NODE_NETWORK_ADVERTISE_HOST) to the address or name peers reach this "
            "node at"
        )


def load_config(
    path: Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> NodeConfig:
    """Load, merge and validate the configuration (see the module docstring).

    Raises:
        ConfigError: a syntax error, unknown key, wrong type or out-of-range value.
    """
    env = os.environ if environ is None else environ
    defaults: dict[str, dict[str, Any]] = tomllib.loads(default_config_text())
    merged = {s: dict(v) for s, v in defaults.items()}
    if path is not None and path.is_file():
        try:
            user = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{path}: {e}") from e
        for section, values in user.items():
            if section not in defaults or not isinstance(values, dict):
                raise ConfigError(f"{path}: unknown section [{section}]")
            for key, value in values.items():
                if key not in defaults[section]:
                    raise ConfigError(f"{path}: unknown key {section}.{key}")
                merged[section][key] = value
    for section, values in defaults.items():
        for key, default in values.items():
            var = f"ODF_NODE_{section.upper()}_{key.upper()}"
            if (raw := env.get(var)) is not None:
                merged[section][key] = _coerce_env(raw, default, var)
    for section, values in (overrides or {}).items():
        for key, value in values.items():
            if section not in defaults or key not in defaults[section]:
                raise ConfigError(f"unknown setting {section}.{key}")
            merged[section][key] = value
    built: dict[str, Any] = {}
    for section, cls in _SECTION_TYPES.items():
        kwargs = {}
        for key, default in defaults[section].items():
            where = f"{section}.{key}"
            value = _check_type(merged[section][key], default, where)
            choices = _CHOICES.get((section, key))
            if choices is not None and value not in choices:
                raise ConfigError(f"{where}: {value!r} is not one of {sorted(choices)}")
            kwargs[key] = value
        built[section] = cls(**kwargs)
    cfg = NodeConfig(**built)
    _validate(cfg)
    cfg.trust_config()  # refused at load, naming the setting, not when a head arrives
    return cfg


__all__ = [
    "ConfigError",
    "DhtSection",
    "EngineSection",
    "FlowsSection",
    "HealthSection",
    "HttpSection",
    "IngestSection",
    "IpfsSection",
    "MetadataSection",
    "NetworkSection",
    "NodeConfig",
    "NodeSection",
    "P2pSection",
    "PipelineSection",
    "RpcSection",
    "TransferSection",
    "TrustSection",
    "check_listeners",
    "default_config_text",
    "load_config",
]
