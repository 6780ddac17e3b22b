"""What the library reports about its side effects, for whoever records them (the audit log).

The layers that spawn processes, write files and run terminals know nothing
of the daemon, so they report here, and the daemon subscribes its audit log
(``docs/sessions.md``, "The audit log").  An observer must be quick and must
not raise; one that does is logged and ignored, never the caller's problem.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

__all__ = ["Observer", "report", "subscribe"]

logger = logging.getLogger(__name__)

#: ``observer(event, fields)``: ``event`` is ``spawn``, ``exit``, ``fs_write``,
#: ``fs_denied``, ``terminal`` or ``note`` (``text``: an ACP agent's earlier
#: session could not be continued); ``fields`` carry ``agentId`` when known.
Observer = Callable[[str, dict[str, Any]], None]

_observers: list[Observer] = []


def subscribe(observer: Observer) -> Callable[[], None]:
    """Start reporting to ``observer``; call the returned function to stop."""
    _observers.append(observer)

    def unsubscribe() -> None:
        if observer in _observers:
            _observers.remove(observer)

    return unsubscribe


def report(event: str, **fields: Any) -> None:
    """Tell every observer that ``event`` happened (``None`` fields are left out).

    Each observer gets its own dict: what one takes out or adds is not seen by the next.
    """
    if not _observers:
        return
    data = {key: value for key, value in fields.items() if value is not None}
    for observer in list(_observers):
        try:
            observer(event, dict(data))
        except Exception:
            logger.exception("an observer of %s raised; ignored", event)
