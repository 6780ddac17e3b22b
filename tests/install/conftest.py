"""The package as a user installs it: an sdist and a wheel built once per session, offline.

``python -m build --no-isolation`` builds the sdist, then the wheel *from the
sdist* (what ``python -m build`` always does), so a file the sdist forgets is
missing from the wheel too.  ``--no-isolation`` uses the ``build`` and
``hatchling`` of the test venv (dev extras): no package index is needed.

A fresh venv (:func:`fresh_venv`) is made outside the checkout without pip
(``--without-pip``: a second of work instead of ensurepip's several) and the
wheel is installed into it by the test venv's pip (``pip --python``) with
``--no-index --no-deps``.  Its dependencies (pydantic, websockets, ...) come
from the test venv's site-packages through a ``.pth`` line: a plain path, so
the ``.pth`` files in it (the editable install of the checkout) are *not*
run, and ``oma_bridge`` is imported from the fresh venv alone (the tests
check ``oma_bridge.__file__``).  That is the one difference from a user's
``pip install WHEEL``, which fetches the same dependencies from PyPI.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Built:
    """The sdist and the wheel of the checkout, and their file lists."""

    sdist: Path
    wheel: Path

    def wheel_names(self) -> set[str]:
        with zipfile.ZipFile(self.wheel) as archive:
            return set(archive.namelist())

    def sdist_names(self) -> set[str]:
        """The sdist's paths without its top folder (``oma_bridge-0.1.0/``)."""
        with tarfile.open(self.sdist) as archive:
            return {name.partition("/")[2] for name in archive.getnames() if "/" in name}


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without ``PYTHONPATH``: a fresh venv imports its own."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | extra


def run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    """``argv``, its output captured; a failure shows both streams."""
    kwargs.setdefault("env", clean_env())
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, **kwargs)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    for module in ("build", "hatchling"):
        try:
            __import__(module)
        except ImportError:
            pytest.skip(f"the {module!r} package (dev extras) is needed to build offline")
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)])
    [sdist] = out.glob("oma_bridge-*.tar.gz")
    [wheel] = out.glob("oma_bridge-*.whl")
    return Built(sdist=sdist, wheel=wheel)


@dataclass(frozen=True)
class Venv:
    """A venv of its own, outside the checkout."""

    root: Path

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"

    def site_packages(self) -> Path:
        [found] = self.root.glob("lib/python*/site-packages")
        return found

    def pip(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The test venv's pip, acting on this venv, with no index."""
        argv = [sys.executable, "-m", "pip", "--python", str(self.python), *args]
        return run(argv, env=clean_env(PIP_NO_INDEX="1", PIP_NO_CACHE_DIR="1"))


def fresh_venv(folder: Path) -> Venv:
    """A new venv in ``folder``, without pip, that sees the test venv's dependencies."""
    run([sys.executable, "-m", "venv", "--without-pip", str(folder)])
    venv = Venv(folder)
    # A plain path: the test venv's site-packages is searched after the
    # fresh venv's own, and its .pth files (the checkout's editable
    # install) are not run.
    (venv.site_packages() / "test_venv_dependencies.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n"
    )
    return venv
