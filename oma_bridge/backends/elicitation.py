"""Elicitation answers: which ones are valid, and the least-privilege one.

An ACP agent's ``elicitation/create`` is answered ``{"action": "accept",
"content"?: object}``, ``{"action": "decline"}`` or ``{"action":
"cancel"}``.  Whoever answers (a handler of the library, a client of the
daemon), an answer of another shape counts as no answer, and with nobody to
ask the answer is ``cancel``: nothing the user did not give leaves the daemon
(docs/acp.md, "Elicitations").  The backend, the daemon's remote prompts and
the ACP facade all check here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["ACTIONS", "CANCEL", "valid_answer"]

CANCEL: dict[str, Any] = {"action": "cancel"}
ACTIONS = ("accept", "decline", "cancel")
_KEYS = frozenset({"action", "content", "_meta"})


def valid_answer(answer: object) -> dict[str, Any] | None:
    """``answer`` as the agent will get it, or ``None`` when it is not a valid answer.

    Valid: an object whose ``action`` is one of :data:`ACTIONS`, with a
    ``content`` object only when it accepts, and nothing else but ``_meta``.
    """
    if not isinstance(answer, Mapping) or answer.get("action") not in ACTIONS:
        return None
    if not _KEYS.issuperset(answer):
        return None
    content = answer.get("content")
    if content is not None and (answer["action"] != "accept" or not isinstance(content, Mapping)):
        return None
    meta = answer.get("_meta")
    if meta is not None and not isinstance(meta, Mapping):
        return None
    return {
        key: answer[key] for key in ("action", "content", "_meta") if answer.get(key) is not None
    }
