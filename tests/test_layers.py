"""Imports flow one way: the contracts of pyproject.toml's [tool.importlinter] hold.

The layer order is documented in docs/architecture.md ("Layers"); a back-arrow fails
here, so in CI (python -m pytest).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_import_contract_is_kept():
    lint = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    if not Path(lint).exists():
        pytest.fail("lint-imports not found: pip install -e '.[test]' (import-linter)")
    proc = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_the_architecture_page_lists_the_layers_of_the_contract():
    import tomllib

    layers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
        "contracts"][0]["layers"]
    page = (ROOT / "docs" / "architecture.md").read_text()
    for layer in layers:
        for module in layer.replace(":", "|").split("|"):
            name = module.strip().removeprefix("fedkmeans.")
            assert f"`{name}" in page, f"docs/architecture.md does not name {name}"
