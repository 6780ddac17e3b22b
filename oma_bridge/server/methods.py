"""The seam where wire methods plug into the daemon: :class:`MethodRegistry`.

A method handler is ``async def handler(session, params) -> result``: it gets
the calling connection's :class:`~oma_bridge.server.session.Session` and the
raw ``params`` (a dict, a list or ``None``), validates them with
:func:`oma_bridge.wire.params.parse_params`, and returns a JSON-ready result.  To answer with a
JSON-RPC error it raises :class:`~oma_bridge.errors.WireError` (:mod:`oma_bridge.wire.codes`
builds the daemon's codes).  Any other exception is a bug: it is
logged with its trace and answered -32603 without details.

The connection runs ``initialize`` itself (it is the gate, not a method) and
looks everything else up here, only after a successful ``initialize``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeAlias

from oma_bridge.server.session import Session

__all__ = ["MethodHandler", "MethodRegistry"]

MethodHandler: TypeAlias = Callable[[Session, Any], Awaitable[Any]]


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
