"""Permission options: the least-privilege choice and the answers built from a choice.

Every policy picks least privilege (``docs/protocol.md``, rule 11.12):
``allow_once`` before ``allow_always``, ``reject_once`` before
``reject_always``; a side not offered answers ``cancelled``.  The backends,
the daemon's remote prompts and the ACP facade all choose here.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal

from oma_bridge.backends import PermissionOption

__all__ = [
    "CANCELLED_OUTCOME",
    "choose_option",
    "option_from_answer",
    "parse_options",
    "selected",
]

logger = logging.getLogger("oma_bridge.permissions")

CANCELLED_OUTCOME: dict[str, Any] = {"outcome": {"outcome": "cancelled"}}

_PREFERENCE = {
    "allow": ("allow_once", "allow_always"),
    "reject": ("reject_once", "reject_always"),
}


def parse_options(raw: object) -> tuple[PermissionOption, ...]:
    """The well-formed options of a request; malformed items are skipped (schema leniency)."""
    options: list[PermissionOption] = []
    if isinstance(raw, list):
        for item in raw:
            if isinstance(item, dict) and isinstance(item.get("optionId"), str):
                name = item.get("name")
                kind = item.get("kind")
                options.append(
                    PermissionOption(
                        option_id=item["optionId"],
                        name=name if isinstance(name, str) else item["optionId"],
                        kind=kind if isinstance(kind, str) else "other",
                    )
                )
    return tuple(options)


def choose_option(
    options: Sequence[PermissionOption], side: Literal["allow", "reject"]
) -> str | None:
    """The ``_once`` option of the wanted side, else its ``_always`` one, else ``None``."""
    for kind in _PREFERENCE[side]:
        for option in options:
            if option.kind == kind:
                return option.option_id
    return None


def selected(option_id: str | None) -> dict[str, Any]:
    """The answer to ``session/request_permission`` for a choice (``None``: cancelled)."""
    if option_id is None:
        return CANCELLED_OUTCOME
    return {"outcome": {"outcome": "selected", "optionId": option_id}}


def option_from_answer(answer: object, options: Sequence[PermissionOption]) -> str | None:
    """The option a client chose in ``{"outcome": {...}}``; ``None`` for ``cancelled``.

    An answer naming no offered option, or of the wrong shape, is taken as
    the least-privilege reject (raises nothing: a client's mistake must not
    grant anything).
    """
    outcome = answer.get("outcome") if isinstance(answer, dict) else None
    if isinstance(outcome, dict):
        if outcome.get("outcome") == "cancelled":
            return None
        chosen = outcome.get("optionId")
        if outcome.get("outcome") == "selected" and any(
            option.option_id == chosen for option in options
        ):
            return str(chosen)
    logger.warning("a malformed permission answer was taken as a reject")
    return choose_option(options, "reject")
