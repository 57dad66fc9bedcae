"""A polling source's ``ftp://`` or ``ftps://`` URL fetched into a file, under the node's source
policy (stdlib :mod:`ftplib`, run in a worker thread).

kamu-cli fetches these URLs with curl (kamu-cli,
``src/infra/core/src/services/ingest/fetch_service/ftp.rs``): the whole file every poll, the
system time as the event time, no source state ("some FTP servers throw errors at us when we
request filetime"), and a connection or name failure is "unreachable". This fetch keeps those
outcomes and adds what an HTTP source has (docs/ingest-polling.md, "ftp and ftps"):

* **caching**: the file's modification time (``MDTM``, RFC 3659) is recorded as the source
  state (``odf/last-modified``, as an HTTP source's ``Last-Modified``); a poll whose file has
  not changed since downloads nothing and is up to date. A server that does not answer
  ``MDTM`` gets kamu's behaviour: the file is downloaded every poll, no state;
* **limits**: the download stops past ``max_bytes`` (``[ingest] max_fetch_bytes``) and nothing
  is kept; every socket operation has a timeout;
* **source policy**: the host's addresses are checked like an HTTP source's (``[transfer]
  allow_private_sources``, ``allowed_source_networks``; :mod:`node.transfer.policy`), the
  control connection goes to the address that was checked, and passive data connections go to
  the same address whatever the server's ``PASV`` reply names (ftplib's default: a server
  cannot point the node at another host);
* ``ftps://`` is explicit FTPS (``AUTH TLS``, RFC 4217) with the data connections protected
  too (``PROT P``); the certificate is verified against the host name with the system's CAs
  (OpenSSL's ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` add others).

The user and password come from the URL (``ftp://user:password@host/path``), else anonymous.
Errors: reply ``550`` (no such file) is :class:`~coordinator.errors.SourceNotFound`; a refused
or timed-out connection, a name that does not resolve or a ``4xx`` reply is
:class:`~coordinator.errors.SourceUnreachable` (try again later); a refused login, a
certificate that does not verify or a file over the limit is a
:class:`~coordinator.errors.FetchError`. Nothing is left at ``target`` when a fetch fails.
"""

from __future__ import annotations

import datetime as dt
import ftplib
import os
import ssl
from email.utils import format_datetime, parsedate_to_datetime
from pathlib import Path
from urllib.parse import unquote, urlsplit

from coordinator.errors import FetchError, SourceNotFound, SourceUnreachable
from node.transfer.policy import SourcePolicy
from node.transfer.source_fetch import UrlFetch

__all__ = ["FTP_SCHEMES", "fetch_ftp_to_file"]

FTP_SCHEMES = ("ftp", "ftps")
_BLOCK = 1 << 16
SETTING_MAX = "[ingest] max_fetch_bytes"


class _TooLarge(Exception):
    pass


def fetch_ftp_to_file(
    url: str,
    headers: dict[str, str],
    target: Path,
    *,
    policy: SourcePolicy,
    max_bytes: int,
    timeout_s: float = 30.0,
) -> UrlFetch:
    """Download ``url`` to ``target`` unless it is unchanged since ``If-Modified-Since`` in
    ``headers`` (the previous poll's state, as for HTTP); ``modified`` False then.

    Raises:
        SourceNotFound: the server answered 550.
        SourceUnreachable: cannot resolve or connect, a timeout, a 4xx reply.
        FetchError: a malformed URL, a refused login, a TLS failure, over ``max_bytes``.
        SourceRefused: the policy refuses the host's address.
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    port_text = f":{parts.port}" if parts.port else ""
    # Without the user and password the URL may carry.
    shown = f"{scheme}://{parts.hostname or ''}{port_text}{parts.path}"[:200]
    if scheme not in FTP_SCHEMES or not parts.hostname:
        raise FetchError(f"{url[:200]!r} is not an ftp:// or ftps:// URL with a host")
    path = unquote(parts.path)
    if not path or path.endswith("/"):
        raise FetchError(f"{shown}: the URL names no file")
    port = parts.port or 21
    addresses = policy.checked_addresses(
        parts.hostname, port, f"FTP server {parts.hostname}:{port}"
    )
    ftp: ftplib.FTP = (
        ftplib.FTP_TLS(context=ssl.create_default_context(), timeout=timeout_s)
        if scheme == "ftps"
        else ftplib.FTP(timeout=timeout_s)
    )
    try:
        try:
            _open(ftp, addresses, port, parts.hostname, parts.username, parts.password)
            modified = _modification_time(ftp, path)
            since = _since(headers)
            if modified is not None and since is not None and modified <= since:
                return UrlFetch(False)
            size = _download(ftp, path, target, max_bytes, shown)
        finally:
            ftp.close()
    except ftplib.error_perm as e:
        _remove(target)
        code = str(e)[:3]
        if code == "550":
            raise SourceNotFound(f"{shown}: {e}") from None
        if code == "530":
            raise FetchError(f"{shown}: the server refused the login: {e}") from None
        raise FetchError(f"{shown}: {e}") from None
    except ftplib.error_temp as e:
        _remove(target)
        raise SourceUnreachable(f"{shown}: unreachable for now: {e} (try again later)") from None
    except ssl.SSLError as e:
        _remove(target)
        raise FetchError(
            f"{shown}: TLS failed: {e} (the certificate must verify against the host name with "
            "the system's CAs; SSL_CERT_FILE adds others)"
        ) from None
    except (OSError, EOFError, ftplib.Error) as e:
        _remove(target)
        raise SourceUnreachable(f"{shown}: unreachable: {type(e).__name__}: {e}") from None
    except _TooLarge:
        _remove(target)
        raise FetchError(
            f"{shown}: the file is larger than {max_bytes} bytes ({SETTING_MAX}); nothing kept"
        ) from None
    last_modified = format_datetime(modified, usegmt=True) if modified is not None else None
    return UrlFetch(True, None, last_modified, size)


def _open(
    ftp: ftplib.FTP,
    addresses: list[str],
    port: int,
    host: str,
    user: str | None,
    password: str | None,
) -> None:
    """Connect to the first checked address that answers, log in, binary mode, passive."""
    for k, address in enumerate(addresses):
        try:
            ftp.connect(address, port)
            break
        except OSError:
            if k == len(addresses) - 1:
                raise
    # TLS verifies the certificate against the host name, not the address connected to.
    ftp.host = host
    ftp.login(unquote(user) if user else "anonymous", unquote(password) if password else "")
    if isinstance(ftp, ftplib.FTP_TLS):
        ftp.prot_p()
    ftp.voidcmd("TYPE I")
    ftp.set_pasv(True)


def _modification_time(ftp: ftplib.FTP, path: str) -> dt.datetime | None:
    """``MDTM path`` as a UTC time (seconds), or None if the server does not say."""
    try:
        reply = ftp.sendcmd(f"MDTM {path}")
    except ftplib.error_perm as e:
        if str(e)[:3] == "550":
            raise  # no such file: the fetch's answer
        return None
    except ftplib.error_reply:
        return None
    stamp = reply[4:].strip().split(".")[0]
    try:
        return dt.datetime.strptime(stamp, "%Y%m%d%H%M%S").replace(tzinfo=dt.UTC)
    except ValueError:
        return None


def _since(headers: dict[str, str]) -> dt.datetime | None:
    value = next((v for k, v in headers.items() if k.lower() == "if-modified-since"), None)
    if value is None:
        return None
    try:
        return parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None


def _download(ftp: ftplib.FTP, path: str, target: Path, max_bytes: int, shown: str) -> int:
    """``RETR path`` into ``target`` (written whole or not at all); its size."""
    partial = target.with_name(target.name + ".part")
    size = 0
    with open(partial, "wb") as out:

        def write(block: bytes) -> None:
            nonlocal size
            size += len(block)
            if size > max_bytes:
                raise _TooLarge
            out.write(block)

        try:
            ftp.retrbinary(f"RETR {path}", write, blocksize=_BLOCK)
        except BaseException:
            out.close()
            partial.unlink(missing_ok=True)
            raise
    os.replace(partial, target)
    return size


def _remove(target: Path) -> None:
    target.unlink(missing_ok=True)
    target.with_name(target.name + ".part").unlink(missing_ok=True)
