"""The registry snapshot and the checks of an entry (PROTOCOL §22.1): data, never a shell line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from oma_bridge.acp_registry import (
    LaunchError,
    RegistryError,
    launch,
    load_registry,
    shipped_registry_path,
    snapshot,
)
from oma_bridge.acp_registry.schema_check import SchemaError, check

from .snapshot import PLATFORM, binary_entry, entry, npx_entry, uvx_entry, write_registry

DATA = shipped_registry_path().parent


def test_the_shipped_snapshot_is_the_registry_at_one_commit_and_every_entry_passes() -> None:
    taken = snapshot()
    assert re.fullmatch(r"[0-9a-f]{40}", taken.commit)
    assert taken.date.startswith("2026-02-07")
    assert taken.repository == "https://github.com/agentclientprotocol/registry"
    registry = load_registry()
    assert registry.refused == ()
    assert {"gemini", "codex-acp", "claude-code-acp"} <= set(registry.entries)
    gemini = registry.entry("gemini")
    assert gemini.distributions == ("npx",)
    # The registry's data is Apache-2.0: its licence ships beside it.
    assert "Apache License" in (DATA / "LICENSE").read_text()
    assert "Version 2.0" in (DATA / "LICENSE").read_text()
    document = json.loads((DATA / "registry.json").read_text())
    schemas = {"agent.schema.json": json.loads((DATA / "agent.schema.json").read_text())}
    registry_schema = json.loads((DATA / "registry.schema.json").read_text())
    assert check(document, registry_schema, schemas=schemas) == []


def test_npx_uvx_and_binary_entries_become_argument_lists(tmp_path: Path) -> None:
    path = write_registry(
        tmp_path / "registry.json",
        npx_entry("npx-agent", "@scope/agent@1.2.3", "--acp", env={"NO_UPDATE": "1"}),
        uvx_entry("uvx-agent", "uvx-agent==1.2.3", "acp"),
        binary_entry("bin-agent", sha256="AB" * 32, env={"MODE": "acp"}),
    )
    registry = load_registry(path)
    assert registry.refused == ()
    npx = launch(registry.entry("npx-agent"), args=["--verbose"], env={"NO_UPDATE": "0"})
    assert (npx.command, npx.args) == ("npx", ("-y", "@scope/agent@1.2.3", "--acp", "--verbose"))
    assert npx.env == {"NO_UPDATE": "0"}  # the profile's env over the entry's
    pinned = launch(registry.entry("npx-agent"), version="2.0.0-rc.1")
    assert pinned.args[:2] == ("-y", "@scope/agent@2.0.0-rc.1")
    uvx = launch(registry.entry("uvx-agent"))
    assert (uvx.command, uvx.args) == ("uvx", ("uvx-agent==1.2.3", "acp"))
    assert launch(registry.entry("uvx-agent"), version="1.3.0").args == ("uvx-agent@1.3.0", "acp")
    binary = launch(registry.entry("bin-agent"), binary_path=tmp_path / "agent", args=["-v"])
    assert (binary.command, binary.args) == (str(tmp_path / "agent"), ("acp", "-v"))
    assert (binary.env, binary.sha256) == ({"MODE": "acp"}, "ab" * 32)
    with pytest.raises(LaunchError, match="set binary_path to its executable") as needs_path:
        launch(registry.entry("bin-agent"))
    assert needs_path.value.key == "binary_path"
    with pytest.raises(LaunchError, match=r"no binary for this platform \(windows-x86_64\)"):
        launch(registry.entry("bin-agent"), binary_path=tmp_path / "a", platform="windows-x86_64")
    with pytest.raises(LaunchError, match="version applies to npx and uvx"):
        launch(registry.entry("bin-agent"), binary_path=tmp_path / "a", version="9.9.9")
    with pytest.raises(LaunchError, match="no binary distribution"):
        launch(registry.entry("npx-agent"), binary_path=tmp_path / "a")


HOSTILE = [
    # (the entry, the JSON path refused, a word of the problem)
    (npx_entry("x; rm -rf ~", "pkg"), "$.agents[1].id", "does not match"),
    (npx_entry("ok-id", "pkg", version="--config=/etc/passwd"), "$.agents[1].version", "match"),
    # The schema's version pattern is open at its end: this one passes it, not us.
    (npx_entry("ok-id", "pkg", version="1.0.0; rm -rf ~"), "$.agents[1].version", "semantic"),
    (npx_entry("ok-id", "--config=/etc/passwd"), "$.agents[1].distribution.npx.package", "npx"),
    (uvx_entry("ok-id", "-x evil"), "$.agents[1].distribution.uvx.package", "uvx package"),
    (npx_entry("ok-id", "pkg@1.0.0 --x"), "$.agents[1].distribution.npx.package", "npx"),
    (npx_entry("ok-id", "pkg", "--a\x00b"), "$.agents[1].distribution.npx.args[0]", "NUL"),
    (
        npx_entry("ok-id", "pkg", env={"A=B": "1"}),
        '$.agents[1].distribution.npx.env["A=B"]',
        "name",
    ),
    (binary_entry("ok-id", sha256="not-hex"), f"$.agents[1].distribution.binary.{PLATFORM}", ""),
    (entry("ok-id", {"docker": {"image": "x"}}), "$.agents[1].distribution.docker", "not a key"),
    (entry("ok-id", {}), "$.agents[1].distribution", "at least 1 key"),
    ({"id": "ok-id"}, "$.agents[1].name", "is required"),
    ("just a string", "$.agents[1]", "must be an object"),
    (npx_entry("good", "other"), "$.agents[1].id", "'good' again"),
]


@pytest.mark.parametrize(("hostile", "where", "problem"), HOSTILE)
def test_a_hostile_or_malformed_entry_is_refused_with_its_file_and_json_path(
    tmp_path: Path, hostile: object, where: str, problem: str
) -> None:
    path = write_registry(tmp_path / "registry.json", npx_entry("good", "pkg"), hostile)
    registry = load_registry(path)
    assert list(registry.entries) == ["good"]  # the others stay usable
    (refused,) = registry.refused
    assert refused.path.startswith(f"{path}: {where}"), refused
    assert problem in refused.problem
    if isinstance(hostile, dict) and hostile.get("id") == "ok-id":
        with pytest.raises(RegistryError, match=re.escape(f"{path}: {where}")):
            registry.entry("ok-id")


def test_a_file_that_is_no_registry_is_refused_whole(tmp_path: Path) -> None:
    path = tmp_path / "registry.json"
    path.write_text(json.dumps({"agents": []}))
    with pytest.raises(RegistryError, match=r"\$\.version: is required"):
        load_registry(path)
    path.write_text("{not json")
    with pytest.raises(RegistryError, match="not JSON"):
        load_registry(path)
    with pytest.raises(RegistryError, match="cannot read the ACP registry"):
        load_registry(tmp_path / "missing.json")
    registry = load_registry(write_registry(path, npx_entry("gemini-like", "pkg")))
    with pytest.raises(RegistryError, match="did you mean 'gemini-like'"):
        registry.entry("gemini-lik")


def test_a_schema_keyword_this_check_does_not_know_is_refused_not_skipped() -> None:
    with pytest.raises(SchemaError, match="maxLength"):
        check("text", {"type": "string", "maxLength": 2})
