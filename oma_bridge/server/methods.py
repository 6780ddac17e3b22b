"""The seam where wire methods plug into the daemon: :class:`MethodRegistry`.

A method handler is ``async def handler(session, params) -> result``: it gets
the calling connection's :class:`~oma_bridge.server.session.Session` and the
raw ``params`` (a dict, a list or ``None``), validates them with
:func:`parse_params`, and returns a JSON-ready result.  To answer with a
JSON-RPC error it raises :class:`~oma_bridge.errors.WireError` (the helpers
below build the codes of PROTOCOL §7).  Any other exception is a bug: it is
logged with its trace and answered -32603 without details.

The connection runs ``initialize`` itself (it is the gate, not a method) and
looks everything else up here, only after a successful ``initialize``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeAlias, TypeVar

from pydantic import BaseModel, ValidationError

from oma_bridge.errors import WireError
from oma_bridge.rpc import INVALID_PARAMS
from oma_bridge.server.session import Session

__all__ = [
    "MethodHandler",
    "MethodRegistry",
    "forbidden",
    "invalid_params",
    "not_found",
    "parse_params",
]

MethodHandler: TypeAlias = Callable[[Session, Any], Awaitable[Any]]
ModelT = TypeVar("ModelT", bound=BaseModel)

NOT_INITIALIZED = -32002
UNSUPPORTED_VERSION = -32003
OVERLOADED = -32001
INVALID_MESSAGE = -32010
NOT_FOUND = -32011
FORBIDDEN = -32012


class MethodRegistry:
    """Method name → handler.  One registry per daemon; register before ``serve``."""

    def __init__(self) -> None:
        self._handlers: dict[str, MethodHandler] = {}
        #: Methods served by the connection's reader itself, without a task of
        #: their own: quick handlers that never wait on anyone (see ``add``).
        self.inline: set[str] = set()

    def add(self, name: str, handler: MethodHandler, *, inline: bool = False) -> None:
        """Register ``handler`` for ``name``; a name is registered once.

        ``inline`` spares the task (and cancel scope) a request normally gets.
        Only for handlers that return promptly and never wait on the client:
        while one runs, the connection reads nothing else.
        """
        if name == "initialize":
            raise ValueError("initialize is the connection's gate, not a method")
        if name in self._handlers:
            raise ValueError(f"method {name!r} is already registered")
        self._handlers[name] = handler
        if inline:
            self.inline.add(name)

    def method(self, name: str) -> Callable[[MethodHandler], MethodHandler]:
        """Decorator form of :meth:`add`."""

        def register(handler: MethodHandler) -> MethodHandler:
            self.add(name, handler)
            return handler

        return register

    def include(self, other: MethodRegistry) -> None:
        """Register every method of ``other`` here (a name clash is an error)."""
        for name, handler in other._handlers.items():
            self.add(name, handler, inline=name in other.inline)

    def get(self, name: str) -> MethodHandler | None:
        return self._handlers.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._handlers

    def __iter__(self) -> Iterator[str]:
        return iter(self._handlers)


def invalid_params(errors: list[dict[str, Any]]) -> WireError:
    """-32602 with ``data = {"errors": [...]}``."""
    return WireError(INVALID_PARAMS, "Invalid params", {"errors": errors})


def not_found(what: str) -> WireError:
    """-32011: an unknown agentId, runId or profile."""
    return WireError(NOT_FOUND, f"Not found: {what}", {"name": "NotFound"})


def forbidden(why: str) -> WireError:
    """-32012: refused by the daemon's policy."""
    return WireError(FORBIDDEN, f"Forbidden: {why}", {"name": "Forbidden"})


def parse_params(model: type[ModelT], params: Any) -> ModelT:
    """Validate ``params`` (absent means ``{}``) into ``model``, or raise -32602.

    The errors list carries locations and messages, never the input values.
    """
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise invalid_params([{"loc": [], "msg": "params must be an object", "type": "type"}])
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        errors = [
            {"loc": list(error["loc"]), "msg": error["msg"], "type": error["type"]}
            for error in exc.errors(include_url=False, include_input=False, include_context=False)
        ]
        raise invalid_params(errors) from None
