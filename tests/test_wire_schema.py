"""The checked-in JSON Schema is current, and real daemon frames validate against it.

``jsonschema`` is not a dependency of the project, so the frames are checked
by the small validator below: it implements exactly the JSON Schema 2020-12
keywords the generated document uses and refuses any other keyword, so a new
kind of constraint cannot be skipped silently.  The validator is itself
tested on values it must refuse.
"""

from __future__ import annotations

import importlib.util
import math
import shutil
import sys
import tempfile
import typing
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from websockets.asyncio.client import ClientConnection, unix_connect

from oma_bridge import messages
from oma_bridge.server.app import RunningServer
from oma_bridge.server.config import parse_config
from oma_bridge.server.daemon import run_daemon
from oma_bridge.wire import schema as wire_schema
from oma_bridge.wire.schema import protocol_schema

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_FILE = ROOT / "docs" / "schema" / "protocol.schema.json"
SCENARIO_AGENT = ROOT / "tests" / "agents" / "acp_scenario_agent.py"

# ---------------------------------------------------------------------------
# A validator of the JSON Schema subset the document uses


class SchemaViolation(AssertionError):
    pass


_ANNOTATIONS = frozenset({"title", "description", "default", "$schema", "examples", "$comment"})
_KEYWORDS = frozenset(
    {
        "$ref",
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "anyOf",
        "oneOf",
        "not",
        "enum",
        "const",
        "minLength",
        "minItems",
        "minimum",
        "exclusiveMinimum",
        "if",
        "then",
        "else",
        "$defs",
    }
)


def _json_equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _is_type(value: Any, name: str) -> bool:
    if name == "null":
        return value is None
    if name == "boolean":
        return isinstance(value, bool)
    if name == "string":
        return isinstance(value, str)
    if name == "array":
        return isinstance(value, list)
    if name == "object":
        return isinstance(value, dict)
    if isinstance(value, bool):
        return False
    if name == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if name == "number":
        return isinstance(value, int | float) and math.isfinite(value)
    raise ValueError(f"unknown JSON type {name!r}")


class Validator:
    """Validates JSON values against schemas of one document (``$ref`` into it)."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document

    def resolve(self, ref: str) -> Any:
        if not ref.startswith("#/"):
            raise ValueError(f"only local references are supported: {ref}")
        node: Any = self.document
        for part in ref[2:].split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def validate(self, value: Any, schema: Any, path: str = "$") -> None:
        if schema is True or schema == {}:
            return
        if schema is False:
            raise SchemaViolation(f"{path}: nothing is allowed here")
        for key in schema:
            if key not in _KEYWORDS and key not in _ANNOTATIONS and not key.startswith("x-"):
                raise ValueError(f"the test validator does not implement {key!r}")
        if "$ref" in schema:
            self.validate(value, self.resolve(schema["$ref"]), path)
        if "type" in schema:
            names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            if not any(_is_type(value, name) for name in names):
                raise SchemaViolation(f"{path}: {value!r:.60} is not of type {schema['type']}")
        if "const" in schema and not _json_equal(value, schema["const"]):
            raise SchemaViolation(f"{path}: {value!r:.60} is not {schema['const']!r}")
        if "enum" in schema and not any(_json_equal(value, c) for c in schema["enum"]):
            raise SchemaViolation(f"{path}: {value!r:.60} is not one of {schema['enum']}")
        if isinstance(value, str) and len(value) < schema.get("minLength", 0):
            raise SchemaViolation(f"{path}: shorter than {schema['minLength']}")
        if isinstance(value, list) and len(value) < schema.get("minItems", 0):
            raise SchemaViolation(f"{path}: fewer than {schema['minItems']} items")
        if _is_type(value, "number"):
            if "minimum" in schema and value < schema["minimum"]:
                raise SchemaViolation(f"{path}: {value} < {schema['minimum']}")
            if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
                raise SchemaViolation(f"{path}: {value} <= {schema['exclusiveMinimum']}")
        if isinstance(value, dict):
            self._object(value, schema, path)
        if isinstance(value, list) and "items" in schema:
            for index, item in enumerate(value):
                self.validate(item, schema["items"], f"{path}[{index}]")
        if "anyOf" in schema and not self._matches(value, schema["anyOf"], path):
            raise SchemaViolation(f"{path}: matches none of anyOf: {self._why(value, schema)}")
        if "oneOf" in schema:
            count = self._matches(value, schema["oneOf"], path)
            if count != 1:
                raise SchemaViolation(f"{path}: matches {count} of oneOf (needs exactly 1)")
        if "not" in schema and self._matches(value, [schema["not"]], path):
            raise SchemaViolation(f"{path}: matches a schema it must not")
        if "if" in schema:
            branch = "then" if self._matches(value, [schema["if"]], path) else "else"
            if branch in schema:
                self.validate(value, schema[branch], f"{path}({branch})")

    def _object(self, value: dict[str, Any], schema: dict[str, Any], path: str) -> None:
        for key in schema.get("required", ()):
            if key not in value:
                raise SchemaViolation(f"{path}: missing required key {key!r}")
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in properties:
                self.validate(item, properties[key], f"{path}.{key}")
            elif extra is False:
                raise SchemaViolation(f"{path}: unexpected key {key!r}")
            elif extra is not True:
                self.validate(item, extra, f"{path}.{key}")

    def _matches(self, value: Any, schemas: list[Any], path: str) -> int:
        count = 0
        for schema in schemas:
            try:
                self.validate(value, schema, path)
            except SchemaViolation:
                continue
            count += 1
        return count

    def _why(self, value: Any, schema: dict[str, Any]) -> str:
        reasons = []
        for option in schema["anyOf"]:
            try:
                self.validate(value, option)
            except SchemaViolation as error:
                reasons.append(str(error))
        return "; ".join(reasons)[:600]


def _schema_keywords(schema: Any, found: set[str]) -> None:
    """Every keyword used anywhere in ``schema`` (values of const/enum/default skipped)."""
    if not isinstance(schema, dict):
        return
    for key, value in schema.items():
        found.add(key)
        if key in ("properties", "$defs"):
            for nested in value.values():
                _schema_keywords(nested, found)
        elif key in ("items", "not", "if", "then", "else", "additionalProperties"):
            _schema_keywords(value, found)
        elif key in ("anyOf", "oneOf"):
            for nested in value:
                _schema_keywords(nested, found)


# ---------------------------------------------------------------------------
# The document


def _gen_script() -> Any:
    spec = importlib.util.spec_from_file_location("gen_schema", ROOT / "scripts" / "gen_schema.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_checked_in_schema_is_current() -> None:
    fresh = _gen_script().render()
    checked_in = SCHEMA_FILE.read_text(encoding="utf-8") if SCHEMA_FILE.exists() else ""
    assert checked_in == fresh, (
        "docs/schema/protocol.schema.json differs from the wire models: "
        "run `.venv/bin/python scripts/gen_schema.py` and commit the file"
    )


def test_generation_is_stable() -> None:
    assert _gen_script().render() == _gen_script().render()


def test_document_uses_only_keywords_the_validator_implements() -> None:
    document = protocol_schema()
    found: set[str] = set()
    for schema in document["$defs"].values():
        _schema_keywords(schema, found)
    assert found <= _KEYWORDS | _ANNOTATIONS


def test_every_method_and_error_points_at_a_definition() -> None:
    document = protocol_schema()
    validator = Validator(document)
    for method, entry in document["x-methods"].items():
        for part in ("params", "result"):
            if part in entry:
                assert isinstance(validator.resolve(entry[part]["$ref"]), dict), (method, part)
        for code in entry.get("errors", ()):
            assert str(code) in document["x-errors"], (method, code)
    for code, error in document["x-errors"].items():
        if "data" in error:
            assert isinstance(validator.resolve(error["data"]["$ref"]), dict), code


def test_the_schema_uses_the_message_types_of_oma_bridge_messages() -> None:
    ours = typing.get_args(wire_schema.ContentBlock)
    theirs = typing.get_args(messages.ContentBlock)
    # Every known block is the class of oma_bridge.messages itself; the wire adds one
    # shape only, a block of a type the daemon does not know (passed through as sent).
    assert ours[: len(theirs)] == theirs
    assert ours[len(theirs) :] == (wire_schema.OtherBlock,)
    assert wire_schema.LLMMessage.__required_keys__ == messages.LLMMessage.__required_keys__
    assert wire_schema.LLMMessage.__optional_keys__ == messages.LLMMessage.__optional_keys__


def _result(**changes: Any) -> dict[str, Any]:
    result: dict[str, Any] = {
        "runId": "r",
        "success": True,
        "output": "hi",
        "messages": [{"role": "assistant", "content": [{"type": "text", "text": "hi"}]}],
        "tokenUsage": {"input_tokens": 1, "output_tokens": 1},
        "toolCalls": [],
        "status": {"code": "ok"},
    }
    result.update(changes)
    return result


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (_result(extra=1), "unexpected key 'extra'"),
        ({k: v for k, v in _result().items() if k != "runId"}, "missing required key 'runId'"),
        (_result(success=False), "matches a schema it must not"),
        (_result(status={"code": "error"}), "is not 'ok'"),
        (_result(budgetExceeded=False), "is not True"),
        (_result(tokenUsage={"input_tokens": True, "output_tokens": 1}), "not of type integer"),
        (_result(messages=[{"role": "system", "content": []}]), "is not one of"),
        (_result(messages=[{"role": "user", "content": [{"type": "text"}]}]), "anyOf"),
        (_result(messages=[{"role": "user", "content": [{"type": "image"}]}]), "anyOf"),
        (_result(errorInfo={"kind": "weird"}), "is not one of"),
    ],
)
def test_the_validator_refuses_what_the_schema_forbids(value: Any, problem: str) -> None:
    validator = Validator(protocol_schema())
    with pytest.raises(SchemaViolation, match=problem.replace("(", r"\(").replace("'", "'")):
        validator.validate(value, {"$ref": "#/$defs/AgentRunResult"})


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        ({"team": {"agents": [], "coordinator": "c"}, "goal": "g"}, "fewer than 1 items"),
        ({"team": {"agents": ["a"], "coordinator": "c"}, "goal": []}, "not of type"),
        ({"team": {"agents": ["a"], "coordinator": "c"}}, "missing required key 'goal'"),
    ],
)
def test_the_validator_refuses_bad_team_params(params: Any, problem: str) -> None:
    validator = Validator(protocol_schema())
    with pytest.raises(SchemaViolation, match=problem):
        validator.validate(params, {"$ref": "#/$defs/RunTeamParams"})


def test_unknown_block_types_and_extra_keys_pass_as_the_daemon_echoes_them() -> None:
    validator = Validator(protocol_schema())
    content = [{"type": "custom", "x": 1}, {"type": "text", "text": "a", "cache_control": {}}]
    validator.validate(
        _result(messages=[{"role": "user", "content": content}]),
        {"$ref": "#/$defs/AgentRunResult"},
    )


# ---------------------------------------------------------------------------
# Real frames of a daemon session

AGENTS = f"""
[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"
description = "offline echo"

[agents.wordcount]
kind = "process"
command = "wc"
args = ["-w"]

[agents.sleeper]
kind = "process"
command = "{sys.executable}"
args = ["-c", "import time; print('started', flush=True); time.sleep(60)"]

[agents.scenario]
kind = "acp"
command = "{sys.executable}"
args = ["{SCENARIO_AGENT}"]
fs = "none"

[agents.failing]
kind = "process"
command = "sh"
args = ["-c", "exit 1"]
"""

SERVER = """
max_queued_runs = 1
permission_timeout_s = 0.5
"""


@asynccontextmanager
async def _daemon() -> AsyncIterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="omab-schema-", dir="/tmp"))
    text = f'[server]\nsocket = "{folder}/bridge.sock"\n{SERVER}\n{AGENTS}'
    config = parse_config(text, source="test.toml", base_dir=folder)
    try:
        async with anyio.create_task_group() as tg:
            running: RunningServer = await tg.start(
                lambda task_status: run_daemon(
                    config, state_dir=folder / "state", task_status=task_status
                )
            )
            try:
                yield folder / "bridge.sock"
            finally:
                running.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class Recorder:
    """A raw client: sends frames, records every frame both ways, answers the daemon."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.sent: list[dict[str, Any]] = []
        self.received: list[dict[str, Any]] = []
        self.methods: dict[Any, str] = {}  # our request id -> method
        self.answers: dict[Any, dict[str, Any]] = {}
        self.handlers: dict[str, Callable[[dict[str, Any]], Any]] = {}
        self.ignore: set[str] = set()  # daemon requests left unanswered on purpose
        self._next = 0

    async def send_raw(self, text: str) -> None:
        await self.ws.send(text)

    async def send(self, method: str, params: Any = None) -> int:
        self._next += 1
        frame: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next, "method": method}
        if params is not None:
            frame["params"] = params
        self.methods[self._next] = method
        await self._write(frame)
        return self._next

    async def notify(self, method: str, params: Any) -> None:
        await self._write({"jsonrpc": "2.0", "method": method, "params": params})

    async def _write(self, frame: dict[str, Any]) -> None:
        self.sent.append(frame)
        await self.ws.send(orjson.dumps(frame).decode())

    async def wait(self, request_id: Any) -> dict[str, Any]:
        with anyio.fail_after(30):
            while request_id not in self.answers:
                frame = orjson.loads(await self.ws.recv())
                self.received.append(frame)
                if "method" in frame and "id" in frame:
                    await self._answer(frame)
                elif "method" not in frame:
                    self.answers[frame.get("id")] = frame
        return self.answers.pop(request_id)

    async def call(self, method: str, params: Any = None) -> dict[str, Any]:
        return await self.wait(await self.send(method, params))

    async def _answer(self, frame: dict[str, Any]) -> None:
        method = frame["method"]
        if method in self.ignore:
            return
        result = self.handlers[method](frame["params"])
        await self._write({"jsonrpc": "2.0", "id": frame["id"], "result": result})


STRUCTURED = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is shown here?"},
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": "AA=="},
            },
        ],
    }
]


async def _session(rec: Recorder) -> None:
    # Lifecycle errors first.
    assert (await rec.call("agents/list"))["error"]["code"] == -32002
    bad_version = {"protocolVersion": 2, "clientInfo": {"name": "t", "version": "0"}}
    assert (await rec.call("initialize", bad_version))["error"]["code"] == -32003
    init = {
        "protocolVersion": 1,
        "clientInfo": {"name": "schema-test", "version": "0"},
        "capabilities": {
            "hooks": ["beforeRun", "afterRun"],
            "permissions": True,
            "elicitation": True,
        },
    }
    assert "result" in await rec.call("initialize", init)
    assert (await rec.call("initialize", init))["error"]["code"] == -32600
    await rec.send_raw("{not json")
    assert (await rec.wait(None))["error"]["code"] == -32700
    await rec.send_raw('{"jsonrpc": "2.0", "id": "x", "method": 5}')
    assert (await rec.wait("x"))["error"]["code"] == -32600
    assert (await rec.call("no/such"))["error"]["code"] == -32601
    await rec.call("agents/list")

    # An echo agent with both hooks: agent/run with structured input.
    rec.handlers["hook/beforeRun"] = lambda p: {"prompt": p["context"]["prompt"]}
    rec.handlers["hook/afterRun"] = lambda p: {"result": p["result"]}
    hooked = {"profile": "echo", "config": {"hooks": {"beforeRun": True, "afterRun": True}}}
    agent = (await rec.call("agent/open", hooked))["result"]["agentId"]
    run = await rec.call("agent/run", {"agentId": agent, "input": STRUCTURED, "runId": "r1"})
    assert run["result"]["output"] == "What is shown here? [image:image/png]"
    prompt = await rec.call("agent/prompt", {"agentId": agent, "input": "remember me"})
    assert prompt["result"]["success"] is True
    history = await rec.call("agent/history", {"agentId": agent})
    assert len(history["result"]["messages"]) == 2
    fork = (await rec.call("agent/fork", {"agentId": agent}))["result"]["agentId"]
    assert (await rec.call("agent/history", {"agentId": fork}))["result"] == history["result"]
    assert (await rec.call("agent/fork", {"agentId": "agt_missing"}))["error"]["code"] == -32011
    assert (await rec.call("agent/attach", {"agentId": agent}))["result"] == {}
    assert (await rec.call("agent/reset", {"agentId": agent}))["result"] == {}

    # A stream, and a stream past its token budget.
    plain = (await rec.call("agent/open", {"profile": "echo"}))["result"]["agentId"]
    streamed = await rec.call("agent/stream", {"agentId": plain, "input": "one two"})
    assert streamed["result"]["output"] == "one two"
    # The journal: watch from the start (a replay), run/result, CursorExpired-free unwatch.
    watched = await rec.call("agent/watch", {"agentId": plain, "afterSeq": 0})
    assert watched["result"]["seq"] >= 3
    beyond = await rec.call("agent/watch", {"agentId": plain, "afterSeq": 10_000})
    assert beyond["error"]["code"] == -32602
    finished = await rec.call("run/result", {"runId": streamed["result"]["runId"]})
    assert finished["result"]["output"] == "one two"
    assert (await rec.call("run/result", {"runId": "never"}))["error"]["code"] == -32011
    assert (await rec.call("agent/unwatch", {"agentId": plain}))["result"] == {}
    budget = {"profile": "echo", "config": {"maxTokenBudget": 1, "name": "tight"}}
    tight = (await rec.call("agent/open", budget))["result"]["agentId"]
    over = await rec.call("agent/stream", {"agentId": tight, "input": "a b c"})
    assert over["result"]["status"]["code"] == "budget_exhausted"

    # oma/runAgent with progress: string input, then structured input.
    one_off = {"config": {"profile": "echo"}, "input": "once", "runId": "oa1"}
    ran = await rec.call("oma/runAgent", one_off)
    assert "identity" in ran["result"]
    await rec.call("oma/runAgent", {"config": {"profile": "echo"}, "input": STRUCTURED})

    # Request errors of the contract.
    errors = [
        ("agent/open", {"profile": "nope"}, -32011),
        ("agent/open", {"profile": "echo", "config": {"command": "sh"}}, -32012),
        ("agent/open", {"profile": "echo", "surprise": 1}, -32602),
        ("agent/run", {"agentId": plain, "input": 5}, -32602),
        ("agent/run", {"agentId": plain, "input": [1]}, -32010),
        ("agent/open", {"profile": "echo", "config": {"history": [{"role": "x"}]}}, -32010),
        ("agent/history", {"agentId": "agt_missing"}, -32011),
        ("oma/runAgent", {"config": {"profile": "wordcount"}, "input": STRUCTURED}, -32010),
    ]
    for method, params, code in errors:
        assert (await rec.call(method, params))["error"]["code"] == code, (method, params)
    assert (await rec.call("run/cancel", {"runId": "never"}))["result"] == {"cancelled": False}

    # A process agent.
    counter = (await rec.call("agent/open", {"profile": "wordcount"}))["result"]["agentId"]
    counted = await rec.call("agent/run", {"agentId": counter, "input": "three little words"})
    assert counted["result"]["output"].strip() == "3"

    # Runs in flight: status with a process, overload, $/cancel_request, run/cancel.
    sleeper = (await rec.call("agent/open", {"profile": "sleeper"}))["result"]["agentId"]
    first = await rec.send("agent/run", {"agentId": sleeper, "input": "z", "runId": "s1"})
    with anyio.fail_after(10):
        while not (await rec.call("daemon/status"))["result"]["processes"]:  # noqa: ASYNC110
            await anyio.sleep(0.05)
    second = await rec.send("agent/run", {"agentId": sleeper, "input": "z", "runId": "s2"})
    with anyio.fail_after(10):
        while not (await rec.call("daemon/status"))["result"]["agents"][-1]["queuedRuns"]:  # noqa: ASYNC110
            await anyio.sleep(0.05)
    live = await rec.call("agent/run", {"agentId": sleeper, "input": "z", "runId": "s1"})
    assert live["error"]["code"] == -32602
    assert (await rec.call("run/result", {"runId": "s1"}))["error"]["code"] == -32014
    overloaded = await rec.call("agent/run", {"agentId": sleeper, "input": "z"})
    assert overloaded["error"]["code"] == -32001
    await rec.notify("$/cancel_request", {"id": second})
    assert (await rec.wait(second))["error"]["code"] == -32800
    assert (await rec.call("run/cancel", {"runId": "s1"}))["result"] == {"cancelled": True}
    assert (await rec.wait(first))["result"]["status"]["code"] == "cancelled"
    assert (await rec.call("agent/close", {"agentId": sleeper}))["result"] == {}

    # An ACP agent: permission prompt and raw updates, reasoning, an unanswered
    # prompt withdrawn with $/cancel_request, a crash (error event, then done).
    rec.handlers["permission/request"] = lambda p: {
        "outcome": {"outcome": "selected", "optionId": p["options"][1]["optionId"]}
    }
    acp = (await rec.call("agent/open", {"profile": "scenario"}))["result"]["agentId"]
    tools = await rec.call("agent/stream", {"agentId": acp, "input": "tools"})
    assert tools["result"]["output"] == "permission:ao"
    thought = await rec.call("agent/stream", {"agentId": acp, "input": "thought"})
    assert thought["result"]["output"] == "answer"
    rec.handlers["elicitation/request"] = lambda p: {"action": "accept", "content": {"name": "A"}}
    elicited = await rec.call("agent/stream", {"agentId": acp, "input": "elicit"})
    assert elicited["result"]["output"] == 'elicitation:accept:{"name": "A"}'
    rec.ignore.add("permission/request")
    await rec.call("agent/stream", {"agentId": acp, "input": "hang"})
    rec.ignore.discard("permission/request")
    status = (await rec.call("daemon/status"))["result"]
    assert any(p["agentId"] == acp for p in status["processes"])
    crashed = await rec.call("agent/stream", {"agentId": acp, "input": "crash"})
    assert crashed["result"]["success"] is False
    assert (await rec.call("agent/close", {"agentId": acp}))["result"] == {}
    # What the acp profile's agent can do (§22.2): in agents/list, daemon/status, a probe's.
    listed = (await rec.call("agents/list"))["result"]["agents"]
    assert "capabilities" in next(a for a in listed if a["name"] == "scenario")
    assert "scenario" in (await rec.call("daemon/status"))["result"]["capabilities"]
    probed = (await rec.call("agents/probe", {"profiles": ["scenario"]}))["result"]["agents"]
    assert next(a for a in probed if a["name"] == "scenario")["capabilities"]["loadSession"]
    assert (await rec.call("agents/probe", {"profiles": ["nope"]}))["error"]["code"] == -32011

    # The audit log's tail (extension), oldest first: the permission decisions
    # above are its last two permission records (spawns and exits come between).
    audit = (await rec.call("daemon/audit", {"limit": 50}))["result"]["records"]
    decisions = [record for record in audit if record["event"] == "permission"][-2:]
    assert decisions[0]["decidedBy"]["client"]["name"] == "schema-test"
    assert decisions[1]["decidedBy"] == "timeout"
    assert (await rec.call("daemon/audit", {"limit": 0}))["error"]["code"] == -32602
    # Team runs: a chain, an ACP member that asks a permission, a failing
    # task retried once, its skipped dependent; a team whose echo coordinator
    # cannot plan; the refusals of §15.
    tasks = [
        {"title": "Count", "description": "one two three", "assignee": "wordcount"},
        {"title": "Say", "description": "say", "assignee": "echo", "dependsOn": ["Count"]},
        {"title": "Tool", "description": "tools", "assignee": "scenario"},
        {"title": "Fail", "description": "x", "assignee": "failing", "maxRetries": 1},
        {"title": "After", "description": "x", "assignee": "echo", "dependsOn": ["Fail"]},
    ]
    team_run = await rec.call("oma/runTasks", {"tasks": tasks, "retries": 1})
    assert team_run["error"]["code"] == -32602  # an unknown key
    tasks[3]["retryDelayMs"] = 0
    team_run = await rec.call("oma/runTasks", {"tasks": tasks, "maxConcurrency": 2})
    statuses = [task["status"] for task in team_run["result"]["tasks"]]
    assert statuses == ["completed", "completed", "completed", "failed", "skipped"]
    assert team_run["result"]["tasks"][2]["result"]["output"] == "permission:ao"
    goal = {"team": {"agents": ["wordcount"], "coordinator": "echo"}, "goal": "plan"}
    planned = await rec.call("oma/runTeam", goal)
    assert planned["result"]["success"] is False and planned["result"]["tasks"] == []
    structured = [{**tasks[0], "description": STRUCTURED}]
    assert (await rec.call("oma/runTasks", {"tasks": structured}))["error"]["code"] == -32010
    unknown = {**goal, "team": {"agents": ["nope"], "coordinator": "echo"}}
    assert (await rec.call("oma/runTeam", unknown))["error"]["code"] == -32011
    cycle = [{**tasks[0], "dependsOn": ["Count"]}]
    assert (await rec.call("oma/runTasks", {"tasks": cycle}))["error"]["code"] == -32602


def _check_frames(rec: Recorder, document: dict[str, Any]) -> set[str]:
    """Validate every frame the daemon sent (and our answers); return what was seen."""
    validator = Validator(document)
    methods, errors = document["x-methods"], document["x-errors"]
    generic = {-32700, -32600, -32601, -32603, -32800, -32002}
    pending = dict(rec.methods)
    seen: set[str] = set()
    for frame in rec.received:
        validator.validate(frame, document, "frame")
        if "method" in frame:
            entry = methods[frame["method"]]
            assert entry["direction"] in ("daemon→client", "both"), frame["method"]
            assert ("id" in frame) == (entry["kind"] == "request"), frame["method"]
            validator.validate(frame.get("params"), entry["params"], frame["method"])
            seen.add(frame["method"])
            if frame["method"] == "run/event":
                seen.add("event:" + frame["params"]["event"]["type"])
            if frame["method"] == "oma/progress":
                seen.add("progress:" + frame["params"]["event"]["type"])
            continue
        method = pending.get(frame["id"])
        if "result" in frame:
            assert method is not None, frame
            validator.validate(frame["result"], methods[method]["result"], f"{method} result")
            seen.add(method)
            continue
        code = frame["error"]["code"]
        seen.add(f"error:{code}")
        spec = errors[str(code)]
        if method is not None:
            assert code in generic or code in methods[method].get("errors", ()), (method, code)
        if "data" in frame["error"]:
            assert "data" in spec, (code, frame["error"])
            validator.validate(frame["error"]["data"], spec["data"], f"error {code} data")
    answered = {frame["id"]: frame for frame in rec.received if "method" in frame and "id" in frame}
    for frame in rec.sent:
        if "result" in frame:
            method = answered[frame["id"]]["method"]
            validator.validate(frame["result"], methods[method]["result"], f"our {method} answer")
    return seen


@pytest.mark.anyio
async def test_frames_of_a_real_session_validate() -> None:
    document = orjson.loads(SCHEMA_FILE.read_bytes())
    async with _daemon() as socket:
        ws = await unix_connect(str(socket), "ws://localhost/", compression=None, max_size=None)
        async with ws:
            rec = Recorder(ws)
            await _session(rec)
    seen = _check_frames(rec, document)
    unseen_methods = set(document["x-methods"]) - seen
    assert unseen_methods == set(), unseen_methods
    events = {"text", "reasoning", "update", "plan", "budget_exceeded", "done", "error"}
    assert {f"event:{kind}" for kind in events} <= seen
    progress = {"agent_start", "agent_complete", "task_start", "task_complete", "task_failed"}
    progress |= {"task_skipped", "task_retry"}
    assert {f"progress:{kind}" for kind in progress} <= seen
    error_codes = {
        -32700,
        -32600,
        -32601,
        -32602,
        -32800,
        -32001,
        -32002,
        -32003,
        -32010,
        -32011,
        -32012,
        -32014,
    }
    assert {f"error:{code}" for code in error_codes} <= seen
