"""The daemon: WebSocket listeners, request checks, the ``initialize`` gate, config.

Entry point: :func:`serve` (see :mod:`oma_bridge.server.app`).  Wire methods
plug in through a :class:`MethodRegistry` passed to it.
"""

from .app import RunningServer, serve
from .config import ConfigError, ServerConfig, load_config, parse_config
from .listeners import StartupError
from .methods import MethodRegistry, parse_params
from .session import Session

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
