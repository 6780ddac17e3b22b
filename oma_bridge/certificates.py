"""A local certificate authority and the server certificates it signs, made with ``openssl``.

``oma-bridge tls init`` (docs/deploy.md, "TLS in five minutes") and the test
suite's TLS pair (``tests/conftest.py``) both come from here.  The ``openssl``
command does the cryptography: the standard library's :mod:`ssl` loads
certificates but cannot make one, and ``cryptography`` is not a dependency
of the package (it would be the largest by far, for one command run once).

What is made, in one folder (0700):

* ``ca.key``, ``ca.pem``: the CA, EC P-256, ``CA:TRUE``, ``keyCertSign``.
  Made once; :func:`init_tls` keeps an existing one, so that clients that
  trust it go on trusting the certificates it signs later.
* ``server.key``, ``server.pem``: EC P-256, signed by the CA, with a
  ``subjectAltName`` of every host asked for (a name is ``DNS:``, an
  address ``IP:``), ``serverAuth``, and the key identifiers that Python's
  strict verification (``VERIFY_X509_STRICT``, the default from 3.13)
  requires.  Made anew at each call.

Every key is private from its first byte: ``openssl`` prints it on its
stdout and it is written through :func:`~oma_bridge.private_files.open_private`
(0600), never by ``openssl`` under the umask's mode.  Each file is written
beside its final name and renamed over it, so a reader sees the old file or
the new one.
"""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from oma_bridge.private_files import make_private_folder, open_private

__all__ = [
    "LOCAL_HOSTS",
    "CertificateError",
    "HostError",
    "TlsFiles",
    "init_tls",
    "issue_server_certificate",
    "make_ca",
    "make_key",
    "subject_alt_names",
]

#: Always in a server certificate: local tools reach the daemon by these
#: (the discovery file's ``url`` is ``wss://127.0.0.1:PORT/``).
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
#: A DNS name (a ``*.`` wildcard allowed): nothing that could end the SAN list early.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_DNS_NAME = re.compile(rf"(?:\*\.)?{_LABEL}(?:\.{_LABEL})*\.?")
_OPENSSL_TIMEOUT_S = 30


class CertificateError(Exception):
    """A certificate that cannot be made; the message says what and why, in one line."""


class HostError(CertificateError, ValueError):
    """A host that is neither a DNS name nor an IP address: bad input, not a failure."""


@dataclass(frozen=True)
class TlsFiles:
    """The CA and the server pair that :func:`init_tls` made or kept."""

    ca: Path
    ca_key: Path
    cert: Path
    key: Path
    hosts: tuple[str, ...]
    #: The CA existed already and was kept.
    ca_kept: bool = False


def subject_alt_names(hosts: Sequence[str]) -> str:
    """``DNS:a,IP:1.2.3.4``: each host as OpenSSL's ``subjectAltName`` wants it."""
    names: list[str] = []
    for host in hosts:
        bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        try:
            names.append(f"IP:{ipaddress.ip_address(bare)}")
        except ValueError:
            if len(bare) > 253 or not _DNS_NAME.fullmatch(bare):
                raise HostError(f"--host {host!r}: not a DNS name or an IP address") from None
            names.append(f"DNS:{bare.rstrip('.').lower()}")
    return ",".join(dict.fromkeys(names))


def _openssl(*args: str, stdin: bytes | None = None) -> bytes:
    """``openssl args``; its stdout.  A missing command or a failure: :class:`CertificateError`."""
    command = shutil.which("openssl")
    if command is None:
        raise CertificateError(
            "the openssl command is needed to make certificates and is not on PATH "
            "(Debian and Ubuntu: apt install openssl; Fedora: dnf install openssl)"
        )
    try:
        done = subprocess.run(
            [command, *args],
            input=stdin,
            capture_output=True,
            timeout=_OPENSSL_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CertificateError(f"openssl {args[0]}: {exc}") from None
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        raise CertificateError(f"openssl {args[0]} failed: {said[-1] if said else done.returncode}")
    return done.stdout


def _write_private(path: Path, data: bytes) -> None:
    """``path`` = ``data``, 0600 from its creation, replacing what was there in one rename."""
    staging = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = open_private(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        staging.replace(path)
    except BaseException:
        staging.unlink(missing_ok=True)
        raise


def make_key(path: Path) -> Path:
    """A new EC P-256 private key (PEM, unencrypted) at ``path``, mode 0600."""
    pem = _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256")
    _write_private(path, pem)
    return path


def make_ca(cert: Path, key: Path, *, name: str, days: int) -> None:
    """A self-signed CA: its key at ``key`` (new), its certificate at ``cert``."""
    make_key(key)
    pem = _openssl(
        "req",
        "-x509",
        "-new",
        *("-key", str(key)),
        *("-days", str(days)),
        *("-subj", f"/CN={name[:64]}"),
        *("-addext", "basicConstraints=critical,CA:TRUE"),
        *("-addext", "keyUsage=critical,keyCertSign,cRLSign"),
        *("-addext", "subjectKeyIdentifier=hash"),
    )
    _write_private(cert, pem)


_SERVER_EXTENSIONS = """\
subjectAltName = {names}
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
"""


def issue_server_certificate(
    ca: Path, ca_key: Path, cert: Path, key: Path, *, hosts: Sequence[str], days: int
) -> None:
    """A new server key at ``key`` and its certificate for ``hosts``, signed by the CA."""
    if not hosts:
        raise CertificateError("a server certificate needs at least one host")
    names = subject_alt_names(hosts)
    make_key(key)
    request = _openssl("req", "-new", "-key", str(key), "-subj", f"/CN={hosts[0][:64]}")
    with tempfile.TemporaryDirectory(prefix="oma-bridge-tls-") as scratch:  # 0700
        extensions = Path(scratch) / "server.ext"
        extensions.write_text(_SERVER_EXTENSIONS.format(names=names))
        pem = _openssl(
            "x509",
            "-req",
            *("-CA", str(ca)),
            *("-CAkey", str(ca_key)),
            # A random serial: no .srl file beside the CA, and no two alike.
            *("-set_serial", f"0x{secrets.token_hex(16)}"),
            *("-days", str(days)),
            *("-extfile", str(extensions)),
            stdin=request,
        )
    _write_private(cert, pem)


def init_tls(
    folder: Path,
    hosts: Sequence[str] = (),
    *,
    ca_name: str = "oma-bridge local CA",
    ca_days: int = 3650,
    server_days: int = 825,
) -> TlsFiles:
    """The CA in ``folder`` (kept when there, else made) and a new server pair for ``hosts``.

    ``hosts`` come after :data:`LOCAL_HOSTS`.  ``folder`` is made 0700; one
    that exists must be the user's and private.
    """
    all_hosts = tuple(dict.fromkeys([*LOCAL_HOSTS, *hosts]))
    subject_alt_names(all_hosts)  # a bad --host fails before anything is written
    make_private_folder(folder)
    ca, ca_key = folder / "ca.pem", folder / "ca.key"
    kept = ca.is_file() and ca_key.is_file()
    if not kept:
        make_ca(ca, ca_key, name=ca_name, days=ca_days)
    cert, key = folder / "server.pem", folder / "server.key"
    issue_server_certificate(ca, ca_key, cert, key, hosts=all_hosts, days=server_days)
    return TlsFiles(ca=ca, ca_key=ca_key, cert=cert, key=key, hosts=all_hosts, ca_kept=kept)
