"""A real git repository in a test's folder: ``git init``, commits, no global config needed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

__all__ = ["GIT", "branches", "commit", "git", "make_repository"]

GIT = shutil.which("git")
#: Identity and settings on the command line, so neither ~/.gitconfig nor /etc/gitconfig matter.
_CONFIG = (
    "-c", "user.name=Test", "-c", "user.email=test@example.invalid",
    "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false",
)  # fmt: skip


def git(folder: Path, *args: str) -> str:
    """``git ARGS`` in ``folder``; its stdout, stripped (a failure raises, with git's words)."""
    if GIT is None:
        pytest.skip("git is not installed")
    done = subprocess.run(
        [GIT, *_CONFIG, *args], cwd=folder, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout.strip()


def commit(folder: Path, name: str, text: str, message: str) -> str:
    """Write ``name`` and commit it; the new HEAD."""
    (folder / name).write_text(text)
    git(folder, "add", name)
    git(folder, "commit", "-q", "-m", message)
    return git(folder, "rev-parse", "HEAD")


def make_repository(folder: Path) -> tuple[Path, str]:
    """A repository with one commit (``README``) on ``main``; its folder and HEAD."""
    folder.mkdir(parents=True, exist_ok=True)
    git(folder, "init", "-q")
    return folder, commit(folder, "README", "first\n", "first")


def branches(folder: Path) -> list[str]:
    """The repository's branches, sorted (no ``*``/``+`` marks of checked-out ones)."""
    return sorted(git(folder, "branch", "--format=%(refname:short)").split())
