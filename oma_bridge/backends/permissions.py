"""Choosing a permission option: least privilege, OMA's rule (PROTOCOL.md §11.12)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from oma_bridge.backends import PermissionOption

__all__ = ["CANCELLED_OUTCOME", "choose_option", "parse_options", "selected"]

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
