"""The files of remote acp profiles, read once at start: a config that cannot work is refused.

A remote profile (``url``, PROTOCOL §21) reads its ``token_file`` and
``ca_file`` at every connection (``backends/acp/credentials.py``: a rotated
Secret is picked up).  Read here too, at start and at each reload, so that a
token file others can read, an empty one or a CA file that holds no
certificate is one :class:`~oma_bridge.server.config.ConfigError` line
naming the profile's key, before any run, rather than a failed first run.
The token becomes one of the secrets redaction blanks.
"""

from __future__ import annotations

from oma_bridge.backends.acp.credentials import (
    CredentialError,
    read_token_file,
    remote_ssl_context,
)
from oma_bridge.redaction import add_secrets
from oma_bridge.server.config import AcpProfile, ServerConfig

__all__ = ["check_remote_profiles"]


def check_remote_profiles(config: ServerConfig) -> None:
    """Raise a ``ConfigError`` about the first remote profile's file that cannot be used."""
    for name, profile in config.agents.items():
        if not isinstance(profile, AcpProfile) or profile.url is None:
            continue
        key = f"agents.{name}"
        if profile.token_file is not None:
            try:
                add_secrets(values=[read_token_file(profile.token_file)])
            except CredentialError as exc:
                raise config.error(f"{key}.token_file", str(exc)) from None
        if profile.ca_file is not None:
            try:
                remote_ssl_context(profile.ca_file)
            except CredentialError as exc:
                raise config.error(f"{key}.ca_file", str(exc)) from None
