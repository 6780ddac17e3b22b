"""What the docs tell a user to type: install lines that work where the package is on no
index (PROTOCOL §18.1), one npm name per ACP adapter (the one the suite installs), and the
README's way to the examples."""

from __future__ import annotations

import re

from support.npm_peers import CLAUDE_AGENT_ACP, CODEX_ACP

from .conftest import ROOT


def _pages() -> dict[str, str]:
    paths = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    paths += sorted((ROOT / "deploy").rglob("*.md")) + sorted((ROOT / "deploy").rglob("*.yaml"))
    paths += [ROOT / "Containerfile", *sorted((ROOT / "systemd").iterdir())]
    return {str(path.relative_to(ROOT)): path.read_text() for path in paths}


#: ``pip install``, ``pipx install`` (options, then what is installed).
_INSTALL = re.compile(r"\b(?:pipx|pip3?)\s+install\s+((?:--?[\w-]+(?:=\S+)?\s+)*)(\S+)")


def test_every_install_line_names_a_path_a_wheel_or_a_git_url() -> None:
    found = []
    for page, text in _pages().items():
        for match in _INSTALL.finditer(text):
            target = match[2].strip("'\"`")
            found.append((page, target))
            # A bare name (oma-bridge, oma-bridge[otel]) needs an index that has it.
            assert not re.fullmatch(r"oma[-_]bridge(\[[\w,]+\])?", target), (page, match[0])
    targets = {target for _page, target in found}
    assert "." in targets and any(t.endswith(".whl") for t in targets)
    assert any(t.startswith("git+") for t in targets)


def test_one_npm_name_per_acp_adapter_the_one_the_suite_installs() -> None:
    for package in (CLAUDE_AGENT_ACP, CODEX_ACP):
        short = package.name.rsplit("/", 1)[1]
        named = {
            (page, match)
            for page, text in _pages().items()
            for match in re.findall(rf"@[\w.-]+/{re.escape(short)}\b", text)
        }
        assert named, short
        assert {match for _page, match in named} == {package.name}, sorted(named)


def test_the_readme_points_at_the_examples() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "[docs/examples/](docs/examples/)" in readme
    for example in sorted((ROOT / "docs" / "examples").iterdir()):
        assert example.name in readme, example.name
