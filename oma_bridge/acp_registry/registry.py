"""The ACP agent registry as data: the snapshot the package ships, or another file.

A registry file is the registry's joined document (``registry.schema.json``:
``{"version", "agents": [entry...], "extensions"}``, each entry in the format
of ``agent.schema.json``).  :func:`load_registry` reads one and checks it:

* the document against ``registry.schema.json``: a file that fails it is no
  registry (:class:`RegistryError`);
* each entry against ``agent.schema.json`` (with the one key this package
  adds, below) and the stricter rules of :func:`entry_problems`: an entry
  that fails is refused, with the file and the JSON path of what is wrong,
  and the others stay usable.  The second entry with an id already seen is
  refused too.

The stricter rules exist because an entry is data that becomes a command
line: the schema's ``version`` pattern is open at its end (``1.0.0; rm -rf
~`` passes it), and a ``package`` may be any string (``--config=/etc/passwd``
would reach ``npx`` as an option).  So a version must be a whole semantic
version, a package a package name (with a pinned version at most), an
environment name a name, and no string may hold a NUL byte.

The key added: a ``binary`` target may give ``sha256``, the SHA-256 of the
agent's executable (64 hex digits); the daemon checks a ``binary_path``
against it before every spawn.  The registry's schema (2026-02) has no
such key and forbids unknown ones in a target, so it is added to the schema
that checks every file, the shipped one and a user's alike.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import orjson

from oma_bridge.acp_registry.schema_check import Problem, check, json_path

__all__ = [
    "DISTRIBUTIONS",
    "BinaryTarget",
    "DistributionKind",
    "Entry",
    "PackageDistribution",
    "Refused",
    "Registry",
    "RegistryError",
    "Snapshot",
    "entry_problems",
    "id_problem",
    "load_registry",
    "shipped_registry_path",
    "snapshot",
    "version_problem",
]

DistributionKind = Literal["npx", "uvx", "binary"]
#: The kinds in the order a profile without ``binary_path`` picks from.
DISTRIBUTIONS: tuple[DistributionKind, ...] = ("npx", "uvx", "binary")

_DATA = "data"
_SHA256_SCHEMA = {
    "type": "string",
    "pattern": "^[0-9a-fA-F]{64}$",
    "description": "SHA-256 of the executable (oma-bridge's addition)",
}
#: A whole semantic version (semver.org's grammar, loosely): the schema's
#: pattern, closed at the end.
_SEMVER = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?")
#: An npm package name (``@scope/name`` or ``name``, npm's own rules for new
#: names), optionally pinned: ``@VERSION``.
_NPM_NAME = r"(?:@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*"
_NPM_SPEC = re.compile(rf"(?P<name>{_NPM_NAME})(?:@(?P<version>{_SEMVER.pattern}))?")
#: A PyPI project name (PEP 508), optionally pinned: ``==VERSION`` or ``@VERSION``.
_PYPI_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_PYPI_SPEC = re.compile(
    rf"(?P<name>{_PYPI_NAME})(?:(?:==|@)(?P<version>[0-9]+(?:\.[0-9]+)*[0-9A-Za-z.+-]*))?"
)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class RegistryError(Exception):
    """A registry that cannot be used, or an entry that is not in it; the message says why."""


@dataclass(frozen=True)
class Snapshot:
    """Where the shipped registry data comes from: the repository, its commit and date."""

    repository: str
    commit: str
    date: str


@dataclass(frozen=True)
class PackageDistribution:
    """An ``npx`` or ``uvx`` distribution: a package name, pinned or not, and its arguments."""

    kind: Literal["npx", "uvx"]
    package: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The package's name without the version it pins."""
        match = (_NPM_SPEC if self.kind == "npx" else _PYPI_SPEC).fullmatch(self.package)
        assert match is not None  # checked when the entry was read
        return match["name"]


@dataclass(frozen=True)
class BinaryTarget:
    """A ``binary`` distribution's build for one platform (``linux-x86_64``, ...)."""

    platform: str
    archive: str
    cmd: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    sha256: str | None = None


@dataclass(frozen=True)
class Entry:
    """One agent of the registry, checked."""

    id: str
    name: str
    version: str
    description: str
    packages: Mapping[Literal["npx", "uvx"], PackageDistribution]
    binaries: Mapping[str, BinaryTarget]
    #: Where the entry is: ``FILE: $.agents[N]``.
    where: str

    @property
    def distributions(self) -> tuple[DistributionKind, ...]:
        present = {*self.packages, *(("binary",) if self.binaries else ())}
        return tuple(kind for kind in DISTRIBUTIONS if kind in present)


@dataclass(frozen=True)
class Refused:
    """An entry of the file that failed its checks: where, and the first problem."""

    id: str | None
    path: str
    problem: str

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}"


@dataclass(frozen=True)
class Registry:
    """The usable entries of one registry file, by id, and the refused ones."""

    source: Path
    entries: Mapping[str, Entry]
    refused: tuple[Refused, ...] = ()

    def entry(self, entry_id: str) -> Entry:
        """The entry ``entry_id``; a :class:`RegistryError` says why there is none."""
        found = self.entries.get(entry_id)
        if found is not None:
            return found
        refused = next((r for r in self.refused if r.id == entry_id), None)
        if refused is not None:
            raise RegistryError(f"the entry {entry_id!r} of {self.source} is refused: {refused}")
        message = f"no entry {entry_id!r} in the ACP registry {self.source}"
        near = difflib.get_close_matches(entry_id, list(self.entries), n=1)
        if near:
            message += f"; did you mean {near[0]!r}?"
        raise RegistryError(message + " (see `oma-bridge registry list`)")


def shipped_registry_path() -> Path:
    """The registry snapshot in the package."""
    return Path(str(resources.files(__package__).joinpath(_DATA, "registry.json")))


@cache
def snapshot() -> Snapshot:
    """The commit and date of the shipped snapshot (``oma-bridge registry --version``)."""
    raw = orjson.loads(_data_file("snapshot.json"))
    return Snapshot(str(raw["repository"]), str(raw["commit"]), str(raw["date"]))


def _data_file(name: str) -> bytes:
    return resources.files(__package__).joinpath(_DATA, name).read_bytes()


@cache
def _schemas() -> tuple[dict[str, Any], dict[str, Any]]:
    """``(agent schema with sha256 added, registry schema)``, as this package checks them."""
    agent: dict[str, Any] = orjson.loads(_data_file("agent.schema.json"))
    target = agent["definitions"]["binaryTarget"]
    target["properties"] = {**target["properties"], "sha256": _SHA256_SCHEMA}
    return agent, orjson.loads(_data_file("registry.schema.json"))


def _schema_pattern(name: str) -> str:
    pattern: str = _schemas()[0]["properties"][name]["pattern"]
    return pattern


def id_problem(value: str) -> str | None:
    """What is wrong with ``value`` as a registry id (the schema's pattern), or ``None``."""
    pattern = _schema_pattern("id")
    return None if re.search(pattern, value) else f"not a registry id (must match {pattern})"


def version_problem(value: str) -> str | None:
    """What is wrong with ``value`` as a version: the schema's pattern, the whole string."""
    pattern = _schema_pattern("version")
    if re.search(pattern, value) and _SEMVER.fullmatch(value):
        return None
    return f"not a version (must match {pattern}, and be nothing more than a semantic version)"


def entry_problems(entry: Any, path: str) -> list[Problem]:
    """Every problem of one entry: ``agent.schema.json``, then the rules of the module docstring."""
    agent, _ = _schemas()
    problems = check(entry, agent, path=path)
    if problems:
        return problems
    version_wrong = version_problem(entry["version"])
    if version_wrong is not None:
        problems.append((f"{path}.version", version_wrong))
    distribution = entry["distribution"]
    for kind, spec in (("npx", _NPM_SPEC), ("uvx", _PYPI_SPEC)):
        if kind in distribution and not spec.fullmatch(distribution[kind]["package"]):
            problems.append((f"{path}.distribution.{kind}.package", f"not a {kind} package name"))
    problems.extend(_strings_problems(entry, path))
    return problems


def _strings_problems(value: Any, path: str) -> list[Problem]:
    """NUL bytes anywhere; environment names that are no names."""
    problems: list[Problem] = []
    if isinstance(value, str):
        if "\x00" in value:
            problems.append((path, "holds a NUL byte"))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            problems.extend(_strings_problems(item, json_path(path, index)))
    elif isinstance(value, dict):
        for key, item in value.items():
            here = json_path(path, key)
            if path.endswith(".env") and not _ENV_NAME.fullmatch(key):
                problems.append((here, "not an environment variable name"))
            problems.extend(_strings_problems(key, here))
            problems.extend(_strings_problems(item, here))
    return problems


def load_registry(path: Path | None = None) -> Registry:
    """Read and check the registry file at ``path`` (``None``: the shipped snapshot)."""
    source = path if path is not None else shipped_registry_path()
    try:
        document = orjson.loads(source.read_bytes())
    except OSError as exc:
        raise RegistryError(f"cannot read the ACP registry {source}: {exc.strerror}") from None
    except orjson.JSONDecodeError as exc:
        raise RegistryError(f"{source}: not JSON: {exc}") from None
    return _checked(source, document)


def _checked(source: Path, document: Any) -> Registry:
    _, registry = _schemas()
    # The document's own shape first; the entries one by one after.
    arrays = {key: {"type": "array"} for key in ("agents", "extensions")}
    shape = {**registry, "properties": {**registry["properties"], **arrays}}
    problems = check(document, shape)
    if problems:
        where, problem = problems[0]
        raise RegistryError(f"{source}: {where}: {problem} (not an ACP registry document)")
    entries: dict[str, Entry] = {}
    refused: list[Refused] = []
    for index, raw in enumerate(document["agents"]):
        path = f"$.agents[{index}]"
        raw_id = raw.get("id") if isinstance(raw, dict) else None
        entry_id = raw_id if isinstance(raw_id, str) else None
        problems = entry_problems(raw, path)
        if not problems and entry_id in entries:
            problems = [(f"{path}.id", f"{entry_id!r} again (first at {entries[entry_id].where})")]
        if problems:
            where, problem = problems[0]
            refused.append(Refused(entry_id, f"{source}: {where}", problem))
            continue
        assert entry_id is not None
        entries[entry_id] = _entry(raw, f"{source}: {path}")
    return Registry(source, entries, tuple(refused))


def _entry(raw: dict[str, Any], where: str) -> Entry:
    distribution = raw["distribution"]
    packages: dict[Literal["npx", "uvx"], PackageDistribution] = {}
    for kind in ("npx", "uvx"):
        if kind in distribution:
            spec = distribution[kind]
            packages[kind] = PackageDistribution(
                kind, spec["package"], tuple(spec.get("args", ())), dict(spec.get("env", {}))
            )
    binaries = {
        platform: BinaryTarget(
            platform,
            target["archive"],
            target["cmd"],
            tuple(target.get("args", ())),
            dict(target.get("env", {})),
            target["sha256"].lower() if "sha256" in target else None,
        )
        for platform, target in distribution.get("binary", {}).items()
    }
    return Entry(
        raw["id"], raw["name"], raw["version"], raw["description"], packages, binaries, where
    )
