"""The node's validated configuration: precedence, types, unknown keys, loopback rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from node.config import ConfigError, load_config


def test_defaults_are_loopback_and_documented() -> None:
    cfg = load_config(None, environ={})
    assert cfg.network.loopback_only
    assert cfg.rpc.host == "127.0.0.1" and cfg.rpc.port == 7373
    assert cfg.p2p.bootstrap == () and cfg.ipfs.mode == "embedded"
    assert cfg.to_dict()["p2p"]["bootstrap"] == []


def test_precedence_file_then_env_then_overrides(tmp_path: Path) -> None:
    f = tmp_path / "config.toml"
    f.write_text('[rpc]\nport = 9000\nmax_batch = 10\n[node]\nlog_level = "debug"\n')
    env = {"ODF_NODE_RPC_PORT": "9100", "ODF_NODE_P2P_BOOTSTRAP": "/ip4/127.0.0.1/tcp/1/p2p/Qm"}
    cfg = load_config(f, environ=env, overrides={"rpc": {"max_batch": 3}})
    assert cfg.rpc.port == 9100  # env beats file
    assert cfg.rpc.max_batch == 3  # flag beats file
    assert cfg.node.log_level == "debug"  # file beats default
    assert cfg.p2p.bootstrap == ("/ip4/127.0.0.1/tcp/1/p2p/Qm",)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[rpc]\nprot = 1\n", "unknown key rpc.prot"),
        ("[rcp]\nport = 1\n", "unknown section [rcp]"),
        ('[rpc]\nport = "x"\n', "rpc.port: expected an integer"),
        ("[rpc]\nport = 70000\n", "not a TCP port"),
        ('[ipfs]\nmode = "cloud"\n', "ipfs.mode"),
        ("[metadata]\nblock_version = 4\n", "block_version"),
        ('[metadata]\nwrite_version = "v0.39"\n', "metadata.write_version"),
        ('[rpc]\nhost = "0.0.0.0"\n', "loopback-only"),
        ('[p2p]\nbootstrap = ["/ip4/10.0.0.1/tcp/1/p2p/Qm"]\n', "not a loopback address"),
        ("[transfer]\nmin_rate_bytes_per_s = 0\n", "min_rate_bytes_per_s must be > 0"),
        ("[transfer]\ndeadline_base_s = -1\n", "deadline_base_s"),
        ('[transfer]\nmin_rate_bytes_per_s = "fast"\n', "expected an integer"),
        ('[transfer]\nallowed_source_networks = ["10.0.0.0/33"]\n', "not an IP network"),
        ('[transfer]\nallowed_source_networks = ["10.0.0.0/8"]\n', "loopback-only"),
        ("[transfer]\nallow_private_sources = 1\n", "expected a boolean"),
        ("[rpc\n", "config.toml"),
    ],
)
def test_invalid_settings_are_named(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "config.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        load_config(f, environ={})


def test_open_network_allows_public_binds(tmp_path: Path) -> None:
    f = tmp_path / "config.toml"
    f.write_text('[network]\nisolation = "open"\n[rpc]\nhost = "0.0.0.0"\n')
    assert load_config(f, environ={}).rpc.host == "0.0.0.0"


def test_bad_env_value_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="ODF_NODE_HTTP_ENABLED"):
        load_config(None, environ={"ODF_NODE_HTTP_ENABLED": "maybe"})


def test_finished_work_retention_is_validated() -> None:
    assert load_config(None, environ={}).pipeline.keep_finished_work_days == 7.0
    cfg = load_config(None, environ={"ODF_NODE_PIPELINE_KEEP_FINISHED_WORK_DAYS": "0"})
    assert cfg.pipeline.keep_finished_work_days == 0
    with pytest.raises(ConfigError, match="keep_finished_work_days"):
        load_config(None, environ={"ODF_NODE_PIPELINE_KEEP_FINISHED_WORK_DAYS": "-1"})


def test_transfer_settings() -> None:
    t = load_config(None, environ={}).transfer
    assert t.deadline_base_s > 0 and t.min_rate_bytes_per_s > 0
    assert not t.allow_private_sources and t.allowed_source_networks == ()
    cfg = load_config(
        None,
        environ={
            "ODF_NODE_NETWORK_ISOLATION": "open",
            "ODF_NODE_TRANSFER_ALLOWED_SOURCE_NETWORKS": "10.1.2.0/24, fd00:1::/64",
            "ODF_NODE_TRANSFER_MIN_RATE_BYTES_PER_S": "4096",
        },
    )
    assert cfg.transfer.allowed_source_networks == ("10.1.2.0/24", "fd00:1::/64")
    assert cfg.transfer.min_rate_bytes_per_s == 4096
    # loopback-only mode accepts loopback entries (they change nothing there)
    ok = load_config(None, environ={"ODF_NODE_TRANSFER_ALLOWED_SOURCE_NETWORKS": "127.0.0.0/8"})
    assert ok.transfer.allowed_source_networks == ("127.0.0.0/8",)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        # loopback-only: the IPFS swarm and the advertised host must be loopback too
        ({"ipfs": {"swarm_host": "10.0.0.1"}}, "ipfs.swarm_host"),
        ({"network": {"advertise_host": "node.example.org"}}, "network.advertise_host"),
        # open: a wildcard listener needs an address to advertise
        (
            {"network": {"isolation": "open", "advertise_host": "0.0.0.0"}},
            "network.advertise_host",
        ),
        ({"ipfs": {"swarm_port": 70000}}, "ipfs.swarm_port"),
        ({"p2p": {"discovery_interval_s": 0}}, "discovery_interval_s"),
    ],
)
def test_open_mode_addresses_are_validated(
    overrides: dict[str, dict[str, object]], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, environ={}, overrides=overrides)


def test_a_wildcard_listener_needs_an_advertised_host_only_to_start_a_daemon() -> None:
    """A CLI command beside the daemon (``docker exec … odf-node status``) binds nothing, so the
    listener check is the daemon's (``check_listeners``), and its error names the variable."""
    from node.config import check_listeners

    open_wild = {"network": {"isolation": "open"}, "p2p": {"listen_host": "0.0.0.0"}}
    cfg = load_config(None, environ={}, overrides=open_wild)
    with pytest.raises(ConfigError, match=r"p2p\.listen_host listen on every interface") as e:
        check_listeners(cfg)
    assert "ODF_NODE_NETWORK_ADVERTISE_HOST" in str(e.value)
    given = load_config(
        None, environ={"ODF_NODE_NETWORK_ADVERTISE_HOST": "10.77.0.2"}, overrides=open_wild
    )
    check_listeners(given)


def test_open_mode_with_wildcards_and_an_advertised_host() -> None:
    cfg = load_config(
        None,
        environ={},
        overrides={
            "network": {"isolation": "open", "advertise_host": "203.0.113.7"},
            "p2p": {"listen_host": "0.0.0.0", "port": 4001},
            "ipfs": {"swarm_host": "0.0.0.0", "swarm_port": 4002},
            "http": {"host": "0.0.0.0"},
        },
    )
    assert cfg.network.advertise_host == "203.0.113.7" and cfg.ipfs.swarm_port == 4002
    assert cfg.p2p.discovery


def test_write_version_current_writes_v3_and_odf_schema() -> None:
    from coordinator.metadata import set_write_form, write_form
    from node.config import MetadataSection

    try:
        assert MetadataSection(block_version=2, write_version="current").apply() == 3
        assert write_form().odf_schema and write_form().block_version == 3
        assert MetadataSection(block_version=3, write_version="v0.34").apply() == 3
        assert not write_form().odf_schema
        assert MetadataSection(block_version=2, write_version="v0.34").apply() == 2
    finally:
        set_write_form("v0.34")
