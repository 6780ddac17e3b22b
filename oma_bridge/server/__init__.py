"""The daemon: WebSocket listeners, request checks, the ``initialize`` gate, config.

The daemon's entry point is :func:`oma_bridge.server.daemon.run_daemon`
(what ``oma-bridge serve`` runs): the agent service on the listeners of
:func:`serve` (:mod:`oma_bridge.server.app`), which takes wire methods
through a :class:`MethodRegistry`.
"""

from oma_bridge.server.app import RunningServer, serve
from oma_bridge.server.config import ConfigError, ServerConfig, load_config, parse_config
from oma_bridge.server.listeners import StartupError
from oma_bridge.server.methods import MethodRegistry
from oma_bridge.server.session import Session
from oma_bridge.wire.params import parse_params

__all__ = [
    "ConfigError",
    "MethodRegistry",
    "RunningServer",
    "ServerConfig",
    "Session",
    "StartupError",
    "load_config",
    "parse_config",
    "parse_params",
    "serve",
]
