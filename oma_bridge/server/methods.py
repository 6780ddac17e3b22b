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

__all__ = ["MethodHandler", "MethodRegistry", "QuickHandler"]

MethodHandler: TypeAlias = Callable[[Session, Any], Awaitable[Any]]
#: A read-only method's answer without waiting, or ``NOT_NOW`` (see ``MethodRegistry.add``).
QuickHandler: TypeAlias = Callable[[Session, Any], Any]


class MethodRegistry:
    """Method name → handler.  One registry per daemon; register before ``serve``."""

    def __init__(self) -> None:
        self._handlers: dict[str, MethodHandler] = {}
        #: Methods served by the connection's reader itself, without a task of
        #: their own: quick handlers that never wait on anyone (see ``add``).
        self.inline: set[str] = set()
        self._now: dict[str, QuickHandler] = {}

    def add(
        self,
        name: str,
        handler: MethodHandler,
        *,
        inline: bool = False,
        now: QuickHandler | None = None,
    ) -> None:
        """Register ``handler`` for ``name``; a name is registered once.

        ``inline`` spares the task (and cancel scope) a request normally gets.
        Only for handlers that return promptly and never wait on the client:
        while one runs, the connection reads nothing else.

        ``now`` (a read-only method): the same answer made without waiting,
        for the connection to send from the callback that received the frame,
        one loop iteration before its reader would (D25).  It returns the
        result, or :data:`~oma_bridge.rpc.peer.NOT_NOW` when part of it has
        to wait; whatever it raises, ``handler`` serves the request instead.
        """
        if name == "initialize":
            raise ValueError("initialize is the connection's gate, not a method")
        if name in self._handlers:
            raise ValueError(f"method {name!r} is already registered")
        self._handlers[name] = handler
        if inline:
            self.inline.add(name)
        if now is not None:
            self._now[name] = now

    def include(self, other: MethodRegistry) -> None:
        """Register every method of ``other`` here (a name clash is an error)."""
        for name, handler in other._handlers.items():
            self.add(name, handler, inline=name in other.inline, now=other._now.get(name))

    def get(self, name: str) -> MethodHandler | None:
        return self._handlers.get(name)

    def get_now(self, name: str) -> QuickHandler | None:
        """``name``'s answer without waiting, if it registered one (see :meth:`add`)."""
        return self._now.get(name)

    @property
    def quick(self) -> frozenset[str]:
        """The methods registered with an answer without waiting."""
        return frozenset(self._now)

    def __contains__(self, name: object) -> bool:
        return name in self._handlers

    def __iter__(self) -> Iterator[str]:
        return iter(self._handlers)
