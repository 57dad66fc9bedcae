"""``ftp://`` and ``ftps://`` polling sources against a real FTP server (pyftpdlib on loopback; the
test runs in a loopback-only network namespace, ``unshare -rn``): ``odf-node dataset pull`` and
a daemon's schedule ingest the file, an unchanged file (its ``MDTM``) is up to date, a changed
one brings its new rows; reply 550, a refused login, an unreachable port, a file over
``[ingest] max_fetch_bytes``, a private address (source policy) and a certificate the node
does not trust each commit nothing and say why (node/transfer/ftp_fetch.py,
docs/ingest-polling.md)."""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from daemon_harness import NodeProcess
from netns import require_loopback_only
from polling_cli import head_of, new_home, pull, run

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

CSV1 = b"event_time,city,population\n2020-01-01,A,1000\n2020-01-01,B,2000\n"
CSV2 = CSV1 + b"2021-01-01,A,1100\n"


@dataclass
class Ftp:
    """A running FTP server: its port, the directory it serves, its TLS certificate."""

    port: int
    tls_port: int
    root: Path
    cert: Path


def _self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for ``localhost`` (and its key), as PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.fixture(scope="module")
def ftp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ftp]:
    require_loopback_only()
    from pyftpdlib.authorizers import DummyAuthorizer
    from pyftpdlib.handlers import FTPHandler, TLS_FTPHandler
    from pyftpdlib.ioloop import IOLoop
    from pyftpdlib.servers import FTPServer

    folder = tmp_path_factory.mktemp("ftp")
    root = folder / "served"
    root.mkdir()
    cert, key = _self_signed(folder)
    auth = DummyAuthorizer()
    auth.add_user("odf", "secret", str(root), perm="elr")
    auth.add_anonymous(str(root), perm="elr")

    class Plain(FTPHandler):  # type: ignore[misc]
        authorizer = auth
        passive_ports = None

    class Tls(TLS_FTPHandler):  # type: ignore[misc]
        authorizer = auth
        certfile = str(cert)
        keyfile = str(key)
        tls_control_required = True
        tls_data_required = True

    # One asynchronous server (its own I/O loop) per thread: pyftpdlib's threaded server is
    # not safe under concurrent control connections.
    servers = [FTPServer(("127.0.0.1", 0), h, ioloop=IOLoop()) for h in (Plain, Tls)]
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for t in threads:
        t.start()
    try:
        yield Ftp(servers[0].address[1], servers[1].address[1], root, cert)
    finally:
        for s in servers:
            s.close_all()


def create(home: Path, tmp: Path, name: str, url: str) -> None:
    snap = tmp / f"{name}.yaml"
    snap.write_text(
        f"""\
kind: DatasetSnapshot
version: 1
content:
  name: {name}
  kind: Root
  metadata:
    - kind: SetPollingSource
      fetch:
        kind: Url
        url: {url}
      read:
        kind: Csv
        header: true
        schema: ["event_time TIMESTAMP", "city STRING", "population BIGINT"]
      merge:
        kind: Ledger
        primaryKey: [event_time, city]
"""
    )
    code, text = run(home, "dataset", "create", str(snap))
    assert code == 0, text


def serve(ftp: Ftp, name: str, body: bytes, mtime: float) -> None:
    path = ftp.root / name
    path.write_bytes(body)
    os.utime(path, (mtime, mtime))


def test_ftp_source_is_fetched_cached_by_its_modification_time_and_refetched_when_changed(
    tmp_path: Path, ftp: Ftp
) -> None:
    home = new_home(tmp_path / "home")
    t1 = dt.datetime(2026, 11, 1, 12, 0, tzinfo=dt.UTC).timestamp()
    serve(ftp, "cities.csv", CSV1, t1)
    create(home, tmp_path, "cities", f"ftp://127.0.0.1:{ftp.port}/cities.csv")

    code, out = pull(home, "cities")
    assert code == 0 and isinstance(out, dict), out
    assert out["source"] == "polling" and out["records"] == 2 and out["new_blocks"] == 2
    assert out["source_state"] == {"kind": "odf/last-modified", "value": "2026-11-01T12:00:00Z"}

    # Unchanged (the same MDTM): up to date, nothing downloaded or committed.
    head = head_of(home, "cities")
    code, out = pull(home, "cities")
    assert code == 0 and isinstance(out, dict)
    assert out["comparison"] == "equal" and out["new_blocks"] == 0 and out["records"] == 0
    assert head_of(home, "cities") == head

    # Changed: the new row only (Ledger), the new modification time recorded.
    serve(ftp, "cities.csv", CSV2, t1 + 3600)
    code, out = pull(home, "cities")
    assert code == 0 and isinstance(out, dict)
    assert out["records"] == 1 and out["new_blocks"] == 1
    assert out["source_state"] == {"kind": "odf/last-modified", "value": "2026-11-01T13:00:00Z"}

    # A user and password from the URL.
    create(home, tmp_path, "private", f"ftp://odf:secret@127.0.0.1:{ftp.port}/cities.csv")
    code, out = pull(home, "private")
    assert code == 0 and isinstance(out, dict) and out["records"] == 3

    code, text = run(home, "dataset", "verify", "cities", "--json")
    assert code == 0 and json.loads(text)["ok"], text


def test_bad_ftp_sources_commit_nothing_and_say_why(
    tmp_path: Path, ftp: Ftp, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = new_home(tmp_path / "home")
    serve(ftp, "big.csv", CSV2 * 50, time.time())

    def refused(name: str, url: str, *words: str) -> None:
        create(home, tmp_path, name, url)
        head = head_of(home, name)
        code, text = pull(home, name)
        assert code == 1, text
        for w in words:
            assert w in str(text), (w, text)
        assert head_of(home, name) == head

    refused("missing", f"ftp://127.0.0.1:{ftp.port}/nope.csv", "550")
    refused("badlogin", f"ftp://odf:wrong@127.0.0.1:{ftp.port}/big.csv", "refused the login")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    refused("down", f"ftp://127.0.0.1:{port}/a.csv", "unreachable")

    # A private address is refused by the source policy before any connection, as for http.
    refused("lan", "ftp://10.1.2.3/a.csv", "loopback-only")

    # Over [ingest] max_fetch_bytes: the setting is named, nothing kept.
    monkeypatch.setenv("ODF_NODE_INGEST_MAX_FETCH_BYTES", "1000")
    refused("big", f"ftp://127.0.0.1:{ftp.port}/big.csv", "max_fetch_bytes")


def test_ftps_verifies_the_server_certificate(
    tmp_path: Path, ftp: Ftp, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = new_home(tmp_path / "home")
    serve(ftp, "tls.csv", CSV1, time.time())
    create(home, tmp_path, "tls", f"ftps://localhost:{ftp.tls_port}/tls.csv")

    # A self-signed certificate the node does not trust: refused, nothing committed.
    head = head_of(home, "tls")
    code, text = pull(home, "tls")
    assert code == 1 and "TLS failed" in str(text) and "SSL_CERT_FILE" in str(text), text
    assert head_of(home, "tls") == head

    # Trusted through OpenSSL's SSL_CERT_FILE: fetched over TLS (control and data).
    monkeypatch.setenv("SSL_CERT_FILE", str(ftp.cert))
    code, out = pull(home, "tls")
    assert code == 0 and isinstance(out, dict) and out["records"] == 2, out


def test_a_daemon_schedule_polls_an_ftp_source(tmp_path: Path, ftp: Ftp) -> None:
    serve(ftp, "tides.csv", CSV1, dt.datetime(2026, 11, 2, tzinfo=dt.UTC).timestamp())
    node = NodeProcess(
        tmp_path / "node", "ftp", config={"ipfs": {"mode": "none"}, "flows": {"tick_s": 0.2}}
    )
    node.init()
    node.launch()
    try:
        node.wait_ready()
        create_yaml = f"""\
kind: DatasetSnapshot
version: 1
content:
  name: tides
  kind: Root
  metadata:
    - kind: SetPollingSource
      fetch:
        kind: Url
        url: ftp://127.0.0.1:{ftp.port}/tides.csv
      read:
        kind: Csv
        header: true
        schema: ["event_time TIMESTAMP", "city STRING", "population BIGINT"]
      merge:
        kind: Ledger
        primaryKey: [event_time, city]
"""
        node.call("dataset.create", snapshot_yaml=create_yaml)
        node.call("dataset.schedule", ref="tides", every="1s")

        def records() -> int | None:
            (row,) = [r for r in node.call("dataset.list") if r["alias"] == "tides"]
            return int(row["records"]) or None

        assert node.wait_for("the first scheduled poll", lambda: records() == 2 or None)
        serve(ftp, "tides.csv", CSV2, dt.datetime(2026, 11, 3, tzinfo=dt.UTC).timestamp())
        assert node.wait_for("the change to be polled", lambda: records() == 3 or None)
    finally:
        node.stop()
