"""Every top-level module and subpackage of the package sits in a layer of the import contract.

import-linter checks only the modules its layers name: one left out could
import anything.  ``pyproject.toml``'s layers contract lists them all.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import oma_bridge

PACKAGE = Path(oma_bridge.__file__).resolve().parent
PYPROJECT = PACKAGE.parent / "pyproject.toml"


def test_every_module_is_in_a_layer() -> None:
    contracts = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in contracts["contracts"] if c["id"] == "layers"]
    placed = {name.strip() for layer in layers for name in layer.split("|")}
    children = {
        f"oma_bridge.{path.stem}"
        for path in PACKAGE.iterdir()
        if (path.suffix == ".py" and path.stem != "__init__")
        or (path.is_dir() and (path / "__init__.py").exists())
    }
    unplaced = sorted(children - placed)
    assert not unplaced, f"add {unplaced} to a layer of [tool.importlinter]'s layers contract"
    gone = sorted(placed - children)
    assert not gone, f"the layers contract names modules that are gone: {gone}"
