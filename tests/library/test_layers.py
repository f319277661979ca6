"""Imports flow one way: the contracts of pyproject.toml's [tool.importlinter] hold.

docs/architecture.md reads the contracts ("Layers"); the contracts are the reference, and
a back-arrow fails here, so in CI (python -m pytest).
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_every_import_contract_is_kept():
    lint = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    if not Path(lint).exists():
        pytest.fail("lint-imports not found: pip install -e '.[test]' (import-linter)")
    proc = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def _sides() -> dict[str, list[str]]:
    """The library/harness contract: side -> its modules (optional ones unwrapped)."""
    import tomllib

    contract = next(c for c in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"][
        "importlinter"]["contracts"] if c["id"] == "library-harness")
    harness, library = ([m.strip().strip("()") for m in side.split(":")]
                        for side in contract["layers"])
    return {"harness": harness, "library": library}


def test_the_library_loads_nothing_of_the_harness_to_check_its_config():
    """No import reaches the harness (the contract), and at run time parsing the
    protocol's config loads none of it; a harness key (``attack``) is refused, naming
    the protocol's keys, and still loads nothing of the harness."""
    harness = set(_sides()["harness"])
    code = ("import sys, fedkmeans.session, fedkmeans.config as c; "
            "before = {m.split('.')[1] for m in sys.modules if m.startswith('fedkmeans.')}; "
            "c.parse_protocol({}); "
            "after = {m.split('.')[1] for m in sys.modules if m.startswith('fedkmeans.')}; "
            "print(repr((sorted(before), sorted(after))))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    before, after = map(set, ast.literal_eval(done.stdout.strip().splitlines()[-1]))
    assert before & harness == set()
    assert after & harness == set()
    refuse = (
        "import sys, fedkmeans.config as c\n"
        "try:\n"
        "    c.parse_protocol({'attack': 'curious'})\n"
        "except c.ConfigError as e:\n"
        "    assert \"unknown config key(s) ['attack']\" in str(e), e\n"
        "else:\n"
        "    raise SystemExit('attack accepted')\n"
        "after = {m.split('.')[1] for m in sys.modules if m.startswith('fedkmeans.')}\n"
        "print(repr(sorted(after)))\n")
    done = subprocess.run([sys.executable, "-c", refuse], env=env, cwd=ROOT,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    after = set(ast.literal_eval(done.stdout.strip().splitlines()[-1]))
    assert after & harness == set()


def test_the_architecture_page_is_an_overview():
    """At most 200 lines, none over 200 characters: the detail is in the docstrings."""
    lines = (ROOT / "docs" / "architecture.md").read_text().splitlines()
    assert len(lines) <= 200
    assert max(map(len, lines)) <= 200


def test_the_library_tests_import_nothing_of_the_harness():
    """tests/library changes with the library alone: no file there imports a harness module."""
    harness = set(_sides()["harness"])
    found = {}
    for path in sorted((ROOT / "tests" / "library").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else
                     [f"{node.module}.{alias.name}" for alias in node.names]
                     if isinstance(node, ast.ImportFrom) and node.module else [])
            for name in names:
                parts = name.split(".")
                if parts[0] == "fedkmeans" and len(parts) > 1 and parts[1] in harness:
                    found.setdefault(path.name, []).append(name)
    assert found == {}
