"""The child's environment is built once and reused while ``os.environ`` and the hidden
set stay as they were; every change shows in the next spawn."""

from __future__ import annotations

import os
import sys

import orjson
import pytest

from oma_bridge.supervision.supervisor import TAG_VARIABLE, Supervisor

pytestmark = pytest.mark.anyio


def test_every_change_of_os_environ_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    supervisor = Supervisor(hidden_variables={"SECRET_KEY"})
    monkeypatch.setenv("CHANGING", "one")
    monkeypatch.setenv("SECRET_KEY", "sk-1")
    first = supervisor.child_environment()
    assert first["CHANGING"] == "one" and "SECRET_KEY" not in first
    first["SCRIBBLED"] = "by the caller"  # a fresh dict each time: the cache is not touched
    assert "SCRIBBLED" not in supervisor.child_environment()
    monkeypatch.setenv("CHANGING", "two")
    assert supervisor.child_environment()["CHANGING"] == "two"
    monkeypatch.delenv("CHANGING")
    assert "CHANGING" not in supervisor.child_environment()
    monkeypatch.setenv("ADDED_LATER", "x")
    assert supervisor.child_environment()["ADDED_LATER"] == "x"
    supervisor.hidden_variables = supervisor.hidden_variables | {"ADDED_LATER"}
    assert "ADDED_LATER" not in supervisor.child_environment()
    assert supervisor.child_environment({"ADDED_LATER": "overlay"})["ADDED_LATER"] == "overlay"
    assert supervisor.child_environment() == {
        k: v for k, v in os.environ.items() if k not in supervisor.hidden_variables
    }


async def test_a_spawn_sees_the_environment_of_its_time(monkeypatch: pytest.MonkeyPatch) -> None:
    supervisor = Supervisor()
    code = "import os, json; print(json.dumps(dict(os.environ)))"

    async def child_env(overlay: dict[str, str] | None = None) -> dict[str, str]:
        process = await supervisor.spawn([sys.executable, "-c", code], env=overlay, stdin=False)
        try:
            out = b"".join([chunk async for chunk in process.stdout])
            await process.wait()
        finally:
            await process.stop(1)
        return dict(orjson.loads(out))

    try:
        monkeypatch.setenv("RUN_VALUE", "first")
        first = await child_env()
        monkeypatch.setenv("RUN_VALUE", "second")
        second = await child_env({"PROFILE_ONLY": "1"})
        third = await child_env()
    finally:
        supervisor.close()
    assert (first["RUN_VALUE"], second["RUN_VALUE"]) == ("first", "second")
    assert second["PROFILE_ONLY"] == "1" and "PROFILE_ONLY" not in third
    assert len({first[TAG_VARIABLE], second[TAG_VARIABLE], third[TAG_VARIABLE]}) == 3
