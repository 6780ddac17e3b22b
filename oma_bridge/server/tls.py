"""TLS for the TCP listener, and the rule that keeps the token off the network in clear.

docs/contract.md §17: with ``tls_cert`` and ``tls_key`` the TCP listener speaks
``wss://`` (TLS 1.2 or later, stdlib :mod:`ssl`); the unix socket never
does (its permissions guard it).  A listener beyond this machine without
TLS would hand the token to anyone on the path, so it refuses to start
unless ``allow_insecure_remote = true`` says the operator knows (then a
warning at every start).

Both checks run at start, before anything is bound, and fail with one
:class:`~oma_bridge.server.config.ConfigError` line naming the file, the key
and the problem.
"""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

from oma_bridge.server.config import ServerConfig
from oma_bridge.server.private_file import open_private_file

__all__ = ["MINIMUM_TLS_VERSION", "check_remote_listener", "server_ssl_context"]

logger = logging.getLogger("oma_bridge.server")

MINIMUM_TLS_VERSION = ssl.TLSVersion.TLSv1_2


class _EncryptedKeyError(Exception):
    """Raised from the password callback: the daemon has no one to ask for a passphrase."""


def server_ssl_context(config: ServerConfig) -> ssl.SSLContext | None:
    """The TLS context of the TCP listener, or ``None`` without ``tls_cert``/``tls_key``."""
    settings = config.server
    cert, key = settings.tls_cert, settings.tls_key
    if cert is None or key is None:
        return None  # the config model allows both or neither
    _check_certificate(config, cert)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = MINIMUM_TLS_VERSION
    with open_private_file(key, config, "server.tls_key") as fd:
        # The key is loaded through the descriptor that passed the checks, so
        # the file checked is the file read.
        _load_pair(context, config, cert, key, f"/dev/fd/{fd}")
    return context


def _check_certificate(config: ServerConfig, cert: Path) -> None:
    # Parsed alone first: load_cert_chain's errors do not say which file is wrong.
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        probe.load_verify_locations(cafile=cert)
    except ssl.SSLError:
        raise config.error("server.tls_cert", f"{cert} holds no PEM certificate") from None
    except OSError as exc:
        raise config.error("server.tls_cert", f"cannot read {cert}: {exc.strerror}") from None


def _load_pair(
    context: ssl.SSLContext, config: ServerConfig, cert: Path, key: Path, key_file: str
) -> None:
    def no_passphrase() -> bytes:
        raise _EncryptedKeyError

    try:
        context.load_cert_chain(cert, keyfile=key_file, password=no_passphrase)
    except _EncryptedKeyError:
        problem = f"{key} is encrypted; the daemon needs an unencrypted PEM key (mode 0600)"
        raise config.error("server.tls_key", problem) from None
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            problem = f"{key} is not the private key of the certificate in {cert}"
        else:
            problem = f"{key} holds no PEM private key"
        raise config.error("server.tls_key", problem) from None
    except OSError as exc:
        raise config.error("server.tls_key", f"cannot read {key}: {exc.strerror}") from None


def check_remote_listener(config: ServerConfig, *, tls: bool) -> None:
    """Refuse a TCP listener beyond this machine without TLS, unless the config accepts it.

    Accepted (``allow_insecure_remote = true``), it is a warning at every
    start: the token and every message then cross the network in clear.
    """
    endpoint = config.server.tcp
    if endpoint is None or endpoint.is_loopback or tls:
        return
    if not config.server.allow_insecure_remote:
        raise config.error(
            "server.tcp",
            "a listener beyond this machine needs TLS: configure tls_cert and tls_key "
            "(or set allow_insecure_remote = true to send the token in clear)",
        )
    logger.warning(
        "the tcp listener %s:%d is reachable beyond this machine without TLS "
        "(allow_insecure_remote = true): the token and every message cross the network in clear",
        endpoint.host,
        endpoint.port,
    )
