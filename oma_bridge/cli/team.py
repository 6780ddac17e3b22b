"""``oma-bridge team FILE``: a team file read, checked and run."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from oma_bridge.cli.common import first_line
from oma_bridge.cli_exits import EXIT_FAILED, EXIT_INVALID


class TeamFileError(ValueError):
    """A team file that cannot be run; the message is ``file: key: problem``."""

    def __init__(self, path: Path, key: str, problem: str) -> None:
        super().__init__(f"{path}: {key}: {problem}" if key else f"{path}: {problem}")


#: TOML key of a task -> its wire key (docs/contract.md §15) and the type it must have.
_TASK_KEYS: dict[str, tuple[str, str]] = {
    "title": ("title", "string"),
    "description": ("description", "string"),
    "assignee": ("assignee", "string"),
    "depends_on": ("dependsOn", "strings"),
    "id": ("id", "string"),
    "max_retries": ("maxRetries", "count"),
    "retry_delay_ms": ("retryDelayMs", "number"),
    "retry_backoff": ("retryBackoff", "number"),
}


_REQUIRED_TASK_KEYS = ("title", "description", "assignee")


_TEAM_KEYS = ("coordinator", "agents", "goal")


def read_team_file(path: Path) -> tuple[str, dict[str, Any]]:
    """The wire method and params the file asks for; :class:`TeamFileError` otherwise.

    Either ``[[tasks]]`` tables (and ``max_concurrency``) for ``oma/runTasks``,
    or ``coordinator``, ``agents`` and ``goal`` for ``oma/runTeam``.
    """
    import tomllib

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise TeamFileError(path, "", error.strerror or str(error)) from None
    except UnicodeDecodeError:
        raise TeamFileError(path, "", "not UTF-8 text") from None
    except tomllib.TOMLDecodeError as error:
        raise TeamFileError(path, "", f"not valid TOML: {error}") from None
    for key in data:
        if key not in ("tasks", "max_concurrency", *_TEAM_KEYS):
            raise TeamFileError(path, key, "unknown key")
    team = [key for key in _TEAM_KEYS if key in data]
    if "tasks" in data and team:
        raise TeamFileError(path, team[0], "a file has [[tasks]] or a team, not both")
    if "tasks" in data:
        return "oma/runTasks", tasks_params(path, data)
    if not team:
        raise TeamFileError(path, "", "needs [[tasks]] tables, or coordinator, agents and goal")
    if "max_concurrency" in data:
        raise TeamFileError(path, "max_concurrency", "only a [[tasks]] file takes it")
    for key in _TEAM_KEYS:
        if key not in data:
            raise TeamFileError(path, key, "required key is missing")
    for key in ("coordinator", "goal"):
        checked(path, key, data[key], "string")
    agents = data["agents"]
    checked(path, "agents", agents, "strings")
    if not agents:
        raise TeamFileError(path, "agents", "must name at least one profile")
    return "oma/runTeam", {
        "team": {"agents": agents, "coordinator": data["coordinator"]},
        "goal": data["goal"],
    }


def tasks_params(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    tasks = data["tasks"]
    if not isinstance(tasks, list) or not all(isinstance(task, dict) for task in tasks):
        raise TeamFileError(path, "tasks", "must be tables ([[tasks]])")
    wire_tasks = []
    for index, task in enumerate(tasks):
        where = f"tasks[{index}]"
        wire: dict[str, Any] = {}
        for key, value in task.items():
            if key not in _TASK_KEYS:
                raise TeamFileError(path, f"{where}.{key}", "unknown key")
            wire_key, kind = _TASK_KEYS[key]
            wire[wire_key] = checked(path, f"{where}.{key}", value, kind)
        for key in _REQUIRED_TASK_KEYS:
            if key not in task:
                raise TeamFileError(path, f"{where}.{key}", "required key is missing")
        wire_tasks.append(wire)
    params: dict[str, Any] = {"tasks": wire_tasks}
    if "max_concurrency" in data:
        params["maxConcurrency"] = checked(path, "max_concurrency", data["max_concurrency"], "size")
    return params


def checked(path: Path, key: str, value: Any, kind: str) -> Any:
    """``value`` if it is of ``kind``, else :class:`TeamFileError` naming ``key``."""
    ok = {
        "string": isinstance(value, str),
        "strings": isinstance(value, list) and all(isinstance(item, str) for item in value),
        "count": isinstance(value, int) and not isinstance(value, bool) and value >= 0,
        "size": isinstance(value, int) and not isinstance(value, bool) and value >= 1,
        "number": isinstance(value, int | float) and not isinstance(value, bool) and value >= 0,
    }[kind]
    if not ok:
        wanted = {
            "string": "a string",
            "strings": "a list of strings",
            "count": "an integer >= 0",
            "size": "an integer >= 1",
            "number": "a number >= 0",
        }[kind]
        raise TeamFileError(path, key, f"must be {wanted}")
    return value


async def team_command(args: argparse.Namespace) -> int:
    from oma_bridge.client import DaemonError, connect
    from oma_bridge.errors import InvalidMessageError
    from oma_bridge.wire.codes import INVALID_PARAMS

    try:
        method, params = read_team_file(args.file)
    except TeamFileError as error:
        print(f"oma-bridge: {error}", file=sys.stderr)
        return EXIT_INVALID
    titles: dict[str, str] = {}
    try:
        async with connect(client_name="oma-bridge-cli") as client:
            if method == "oma/runTasks":
                concurrency = params.get("maxConcurrency")
                run = client.tasks_run(params["tasks"], max_concurrency=concurrency)
            else:
                team = params["team"]
                run = client.team_run(team["agents"], team["coordinator"], params["goal"])
            async with run as started:
                async for event in started.progress():
                    print(progress_line(event, titles), file=sys.stderr, flush=True)
                result = await started.result()
    except InvalidMessageError as error:
        print(f"oma-bridge: {args.file}: InvalidMessageError: {error}", file=sys.stderr)
        return EXIT_INVALID
    except DaemonError as error:
        if error.rpc_code != INVALID_PARAMS or not isinstance(error.data, dict):
            raise
        for item in error.data.get("errors", []):
            # Graph issues (loc ["tasks"]) name their task already.
            loc = item.get("loc") or []
            where = "" if loc == ["tasks"] else dotted_location(loc) + ": "
            print(f"oma-bridge: {args.file}: {where}{item.get('msg')}", file=sys.stderr)
        return EXIT_INVALID
    sys.stdout.write(result.output)
    if result.output and not result.output.endswith("\n"):
        sys.stdout.write("\n")
    if result.success:
        return 0
    counts = [
        f"{sum(task.status == status for task in result.tasks)} {status}"
        for status in ("failed", "cancelled", "skipped")
        if any(task.status == status for task in result.tasks)
    ]
    why = ", ".join(counts) if counts else result.output.partition("\n")[0]
    print(f"oma-bridge: team run failed: {why}", file=sys.stderr)
    return EXIT_FAILED


def progress_line(event: Any, titles: dict[str, str]) -> str:
    """One line for one ``oma/progress`` event; ``titles`` learns the task titles by id."""
    kind = str(event.get("type"))
    agent = str(event.get("agent"))
    data = event.get("data")
    if not isinstance(data, dict):
        data = {}
    if "title" in data:  # every task event but task_retry names its task
        titles[str(event.get("task"))] = str(data["title"])
    title = titles.get(str(event.get("task")), str(event.get("task")))
    if kind == "task_start":
        text = f"{title} -> {data.get('assignee')}"
    elif kind == "task_complete":
        text = title
    elif kind == "task_failed":
        text = f"{title}: {data.get('status')}: {first_line(data.get('error'))}"
    elif kind == "task_skipped":
        text = f"{title}: {first_line(data.get('reason'))}"
    elif kind == "task_retry":
        text = (
            f"{title}: attempt {data.get('attempt')}/{data.get('maxAttempts')} failed, "
            f"next in {data.get('nextDelayMs')} ms: {first_line(data.get('error'))}"
        )
    elif kind in ("agent_start", "agent_complete"):
        if "task" not in event and kind == "agent_start":  # the coordinator: one run at a time
            titles[f"phase of {agent}"] = str(data.get("phase"))
        where = f"[{title}]" if "task" in event else f"({titles.get(f'phase of {agent}')})"
        if kind == "agent_complete":
            status = data.get("status")
            where = f"{where} {status.get('code') if isinstance(status, dict) else status}"
        text = f"{agent} {where}"
    else:
        text = f"{agent}: {first_line(data.get('message'))}"
    return f"{kind:<14} {text}"


def dotted_location(loc: Sequence[Any]) -> str:
    """A params location as the file's key: ``["tasks", 0, "dependsOn"]`` is
    ``tasks[0].depends_on``, ``["team", "coordinator"]`` is ``coordinator``."""
    toml_keys = {wire: key for key, (wire, _kind) in _TASK_KEYS.items()}
    text = ""
    for part in loc[1:] if loc[:1] == ["team"] else loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            key = toml_keys.get(str(part), str(part))
            text += f".{key}" if text else key
    return text
