"""The ``Containerfile`` and its build context (``.dockerignore``), checked without a container
engine (this machine has none).

* **The context.** The ignore file's patterns, applied with the engines' rules
  (Go's ``filepath.Match`` plus ``**``, a pattern that matches a folder
  matches what is in it, the last match wins, ``!`` lets a path back in), to
  a listing of the checkout (its ``.venv`` and caches included) and of the
  folders a user may have beside the sources (a state folder, secrets).
* **The install steps.** The context is copied as the engine would send it,
  and the Containerfile's ``RUN`` lines run in order in a fresh venv, paths
  of the image mapped to folders of the test: ``pip wheel`` from the
  context, ``pip install`` of that wheel, ``rm``.  Offline, pip gets
  ``--no-index`` (and ``--no-build-isolation``/``--no-deps``: the test venv's
  hatchling and dependencies, conftest.py); ``useradd`` is not run here (it
  would change this machine) but its uid is checked against the Kubernetes
  recipe.
* **What the image runs.** Its ``ENTRYPOINT`` with the config mounted, and
  its ``HEALTHCHECK`` against it: healthy while it serves, not after.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from .conftest import ROOT, Venv, fresh_venv, run

CONTAINERFILE = ROOT / "Containerfile"
IGNORE_FILE = ROOT / ".dockerignore"
DEPLOYMENT = ROOT / "deploy" / "kubernetes" / "deployment.yaml"


def instructions() -> list[tuple[str, str]]:
    """The Containerfile's instructions, ``(KEYWORD, rest)``, continuation lines joined."""
    found: list[tuple[str, str]] = []
    pending = ""
    for line in CONTAINERFILE.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        keyword, _, rest = pending.strip().partition(" ")
        found.append((keyword.upper(), rest.strip()))
        pending = ""
    return found


def _pattern(text: str) -> re.Pattern[str]:
    """A ``.dockerignore`` pattern as a regex of a slash-separated relative path."""
    out, i = [], 0
    while i < len(text):
        char = text[i]
        if text.startswith("**", i):
            i += 2
            if text.startswith("/", i):
                out.append("(?:.*/)?")
                i += 1
            else:
                out.append(".*")
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = text.index("]", i + 1)
            body = text[i + 1 : end]
            out.append("[" + ("^" + body[1:] if body.startswith("^") else body) + "]")
            i = end
        elif char == "\\" and i + 1 < len(text):
            i += 1
            out.append(re.escape(text[i]))
        else:
            out.append(re.escape(char))
        i += 1
    return re.compile("".join(out))


def ignore_rules() -> list[tuple[re.Pattern[str], bool]]:
    """``(pattern, excludes)`` in file order (``excludes`` is false for a ``!`` line)."""
    rules = []
    for raw in IGNORE_FILE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        excludes = not line.startswith("!")
        path = os.path.normpath(line.removeprefix("!").strip()).lstrip("/")
        rules.append((_pattern(path), excludes))
    return rules


def is_excluded(path: str, rules: list[tuple[re.Pattern[str], bool]]) -> bool:
    """Whether the engine leaves ``path`` (relative, ``/``-separated) out of the context."""
    parts = path.split("/")
    parents = ["/".join(parts[: i + 1]) for i in range(len(parts) - 1)]
    excluded = False
    for pattern, excludes in rules:
        if pattern.fullmatch(path) or any(pattern.fullmatch(p) for p in parents):
            excluded = excludes
    return excluded


def listing() -> set[str]:
    """Every file of the checkout, as the engine would see it (``.git`` and ``.venv`` too)."""
    found = set()
    for folder, _dirs, files in os.walk(ROOT):
        for name in files:
            found.add(str((Path(folder) / name).relative_to(ROOT)))
    return found


#: What may lie beside the sources and must never reach a builder or an image.
BESIDE = {
    ".venv/bin/python",
    ".venv/lib/python3.12/site-packages/x.py",
    ".git/config",
    "oma_bridge/server/__pycache__/app.cpython-312.pyc",
    ".mypy_cache/3.11/x.json",
    ".ruff_cache/0.1/x",
    ".pytest_cache/v/cache/lastfailed",
    ".hypothesis/examples/x",
    ".cache/pip/x",
    "node_modules/x/index.js",
    "dist/oma_bridge-0.1.0-py3-none-any.whl",
    "build/lib/oma_bridge/x.py",
    "bench/out/soak/x.json",
    # A state folder (XDG_STATE_HOME pointed here, or a copy of one) and secrets.
    ".local/state/oma-bridge/sessions/a.json",
    "state/oma-bridge/processes.jsonl",
    "oma/secrets/token",
    "tls.key",
    "config.toml",
}


def test_the_build_context_leaves_out_the_venv_caches_state_and_secrets() -> None:
    rules = ignore_rules()
    files = listing() | BESIDE
    kept = {path for path in files if not is_excluded(path, rules)}
    left_in = sorted(kept & BESIDE)
    assert not left_in, left_in
    assert not [p for p in kept if p.startswith((".venv/", ".git/")) or "__pycache__" in p]
    # What builds the wheel is all in: every file of the package, and the rest it names.
    package = {p for p in listing() if p.startswith("oma_bridge/") and "__pycache__" not in p}
    needed = package | {"pyproject.toml", "README.md", "docs/schema/protocol.schema.json"}
    assert needed <= kept, sorted(needed - kept)[:10]
    assert kept == needed  # and nothing else: tests, docs, bench stay out of the image


def test_the_matcher_follows_the_engines_rules() -> None:
    rules = [(_pattern("*"), True), (_pattern("a"), False), (_pattern("**/*.pyc"), True)]
    assert is_excluded("b/c.py", rules)  # "*" matches the folder b, so all in it
    assert not is_excluded("a/x/c.py", rules)  # "!a" lets the folder back in
    assert is_excluded("a/x/c.pyc", rules)  # the last match wins
    assert _pattern("**/__pycache__").fullmatch("__pycache__")  # "**/" is zero folders too


def _stage_context(folder: Path) -> Path:
    """The files the engine sends (what :func:`is_excluded` keeps), copied to ``folder``."""
    rules = ignore_rules()
    for path in sorted(listing()):
        if not is_excluded(path, rules):
            target = folder / path
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / path, target)
    return folder


def _mapped(word: str, paths: dict[str, Path]) -> str:
    for image_path, here in paths.items():
        if word == image_path or word.startswith(image_path + "/"):
            return str(here) + word[len(image_path) :]
    return word


def _run_step(command: list[str], venv: Venv, paths: dict[str, Path]) -> None:
    """One command of a RUN line, with the image's paths mapped to the test's."""
    words = [_mapped(word, paths) for word in command]
    if words[0] == "useradd":
        return  # a change of this machine's users: its uid is checked on its own
    absolute = [w for w in words[1:] if w.startswith("/")]
    outside = [w for w in absolute if not any(w.startswith(str(p)) for p in paths.values())]
    assert not outside, f"{command}: a path of the image the test does not map: {outside}"
    if words[0] == "pip":
        args = [expanded for word in words[1:] for expanded in sorted_glob(word)]
        offline = ["--no-build-isolation"] if args[0] == "wheel" else ["--no-deps"]
        venv.pip(*args, *offline)
    elif words[0] == "rm":
        run(words)
    else:
        raise AssertionError(f"a RUN command this test does not know how to run: {command}")


def sorted_glob(word: str) -> list[str]:
    if "*" not in word:
        return [word]
    found = sorted(str(p) for p in Path(word).parent.glob(Path(word).name))
    assert found, f"{word} matches nothing"
    return found


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Venv, Path]]:
    """The Containerfile's RUN lines, in order, on the context; the venv they filled."""
    # Short, outside the checkout: the daemon's socket lives under it.
    root = Path(tempfile.mkdtemp(prefix="omct-", dir="/tmp"))
    try:
        paths = {"/src": _stage_context(root / "src"), "/wheels": root / "wheels"}
        venv = fresh_venv(root / "venv")
        for keyword, rest in instructions():
            if keyword == "RUN":
                for step in rest.split("&&"):
                    _run_step(shlex.split(step), venv, paths)
        assert not (root / "wheels").exists()  # the image keeps no wheel
        yield venv, root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_the_install_steps_give_a_working_command(image: tuple[Venv, Path]) -> None:
    venv, root = image
    where = run([str(venv.python), "-c", "import oma_bridge; print(oma_bridge.__file__)"], cwd=root)
    assert where.stdout.startswith(str(venv.site_packages()))
    assert run([str(venv.bin / "oma-bridge"), "--version"]).stdout.startswith("oma-bridge ")


def _exec_form(rest: str) -> list[str]:
    words = json.loads(rest)
    assert isinstance(words, list) and all(isinstance(w, str) for w in words)
    return words


def test_the_image_agrees_with_the_kubernetes_recipe() -> None:
    steps = dict(instructions())
    deployment = yaml.safe_load(DEPLOYMENT.read_text())
    pod = deployment["spec"]["template"]["spec"]
    [daemon] = [c for c in pod["containers"] if c["name"] == "oma-bridge"]
    # Not root, and the uid the pod runs as.
    user, _, group = steps["USER"].partition(":")
    assert user == str(pod["securityContext"]["runAsUser"]) != "0"
    assert group == str(pod["securityContext"]["runAsGroup"])
    useradd = [rest for keyword, rest in instructions() if "useradd" in rest]
    assert useradd and f"--uid {user}" in useradd[0]
    # The config where the ConfigMap is mounted; the port the pod exposes.
    entrypoint = _exec_form(steps["ENTRYPOINT"])
    assert entrypoint[:2] == ["oma-bridge", "serve"]
    config = entrypoint[entrypoint.index("--config") + 1]
    assert config in [m["mountPath"] for m in daemon["volumeMounts"]]
    assert "command" not in daemon and "args" not in daemon  # the pod runs the ENTRYPOINT
    assert steps["EXPOSE"] == str(daemon["ports"][0]["containerPort"])
    # The preStop hook and the init container run commands the image has.
    assert daemon["lifecycle"]["preStop"]["exec"]["command"][0] == "oma-bridge"


@contextlib.contextmanager
def _entrypoint(venv: Venv, root: Path, system: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The image's ENTRYPOINT, its config mounted (a folder of the test), no XDG_RUNTIME_DIR."""
    mounted = root / "etc"
    mounted.mkdir(exist_ok=True)
    (mounted / "config.toml").write_text(
        '[server]\nsocket = "auto"\n\n[agents.echo]\nkind = "llm"\nprovider = "echo"\n'
        'model = "echo-1"\n'
    )
    command = _exec_form(dict(instructions())["ENTRYPOINT"])
    argv = [_mapped(w, {"/etc/oma-bridge": mounted}) for w in command]
    argv[0] = str(venv.bin / argv[0])
    env = {
        "PATH": f"{venv.bin}:/usr/bin:/bin",
        "HOME": str(root / "home"),
        "PYTHONUNBUFFERED": "1",
        # /tmp/oma-bridge-$UID, taken under this folder (docs/client.md).
        "OMA_BRIDGE_SYSTEM_ROOT": str(system),
    }
    log = (root / "entrypoint.log").open("wb")
    process = subprocess.Popen(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        log.close()


def test_the_healthcheck_says_healthy_while_the_entrypoint_serves(
    image: tuple[Venv, Path],
) -> None:
    venv, root = image
    system = root / "system"
    system.mkdir(exist_ok=True)
    words = re.fullmatch(r"(--\S+\s+)*CMD\s+(\[.*\])", dict(instructions())["HEALTHCHECK"])
    assert words is not None
    check = _exec_form(words[2])
    image_socket = f"/tmp/oma-bridge-{dict(instructions())['USER'].partition(':')[0]}/"
    here_socket = f"{system}/tmp/oma-bridge-{os.getuid()}/"
    assert any(image_socket in word for word in check)
    check = [word.replace(image_socket, here_socket) for word in check]
    check[0] = str(venv.python)

    def healthy() -> bool:
        return subprocess.run(check, capture_output=True, timeout=10).returncode == 0

    assert not healthy()  # nothing serves yet
    with _entrypoint(venv, root, system) as daemon:
        deadline = time.monotonic() + 30
        while not healthy():
            assert daemon.poll() is None, (root / "entrypoint.log").read_text()
            assert time.monotonic() < deadline, "never healthy within 30 s"
            time.sleep(0.1)
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=20) == 0
    assert not healthy()
