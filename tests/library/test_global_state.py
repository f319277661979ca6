"""The package reaches into no global state and no private internals (issue #51).

Read from the source (``ast``): no ``sys.modules[...]`` assignment or deletion; no
private name of scikit-learn (an import of ``_name`` or of a ``_module``, an override
of a private method) but those :data:`PINNED` (``pyproject.toml`` pins scikit-learn,
``tests/test_node_spill.py`` checks the pinned behaviour); no module-level mutable
cell (an empty or one-element list assigned at module level and changed later). Each
check is also run on a snippet that breaks it, so it can fail.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "fedkmeans"
#: (module, private scikit-learn name) used on purpose, with the version pinned.
PINNED = {("fedkmeans/clustering/optimal.py", "_check_params_vs_input")}


def _modules() -> dict[str, ast.Module]:
    return {str(path.relative_to(ROOT)): ast.parse(path.read_text(), str(path))
            for path in sorted(PACKAGE.rglob("*.py"))}


def _is_sys_modules(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "modules"
            and isinstance(node.value, ast.Name) and node.value.id == "sys")


def sys_modules_writes(tree: ast.Module) -> list[int]:
    """Lines that assign or delete an item of ``sys.modules`` (or call a mutator)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_sys_modules(node.value) and isinstance(
                node.ctx, (ast.Store, ast.Del)):
            lines.append(node.lineno)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and _is_sys_modules(node.func.value)
                and node.func.attr in {"__setitem__", "__delitem__", "pop", "update",
                                       "setdefault", "clear", "popitem"}):
            lines.append(node.lineno)
    return lines


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def sklearn_private_names(tree: ast.Module) -> set[str]:
    """scikit-learn's private names the module imports or whose methods it overrides."""
    from sklearn.base import BaseEstimator, ClusterMixin, TransformerMixin
    from sklearn.cluster import KMeans

    names: set[str] = set()
    imports_sklearn = False
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sklearn":
            imports_sklearn = True
            names |= {part for part in node.module.split(".") if _private(part)}
            names |= {alias.name for alias in node.names if _private(alias.name)}
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "sklearn":
                    imports_sklearn = True
                    names |= {part for part in alias.name.split(".") if _private(part)}
    if imports_sklearn:
        theirs = (KMeans, BaseEstimator, ClusterMixin, TransformerMixin)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                names |= {item.name for item in node.body
                          if isinstance(item, ast.FunctionDef) and _private(item.name)
                          and any(hasattr(cls, item.name) for cls in theirs)}
    return names


def module_cells(tree: ast.Module) -> list[str]:
    """Module-level names bound to an empty list or a one-constant list (``[None]``)."""
    cells = []
    for node in tree.body:
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) else [])
        value = getattr(node, "value", None)
        if not isinstance(value, ast.List) or len(value.elts) > 1 or (
                value.elts and not isinstance(value.elts[0], ast.Constant)):
            continue
        cells += [t.id for t in targets if isinstance(t, ast.Name) and t.id != "__all__"]
    return cells


def test_no_module_assigns_or_deletes_an_entry_of_sys_modules():
    found = {name: lines for name, tree in _modules().items()
             if (lines := sys_modules_writes(tree))}
    assert found == {}


def test_scikit_learn_s_private_names_only_where_the_version_is_pinned():
    found = {(name, private) for name, tree in _modules().items()
             for private in sklearn_private_names(tree)}
    assert found == PINNED


def test_no_module_keeps_a_list_as_a_mutable_cell():
    found = {name: cells for name, tree in _modules().items()
             if (cells := module_cells(tree))}
    assert found == {}


@pytest.mark.parametrize(("check", "source", "expected"), [
    (sys_modules_writes, "import sys\nsys.modules['pandas'] = None\n", [2]),
    (sys_modules_writes, "import sys\ndel sys.modules['pandas']\n", [2]),
    (sys_modules_writes, "import sys\nx = sys.modules.get('pandas')\n", []),
    (sklearn_private_names,
     "from sklearn.utils.validation import _get_feature_names\n", {"_get_feature_names"}),
    (sklearn_private_names,
     "from sklearn.cluster._kmeans import KMeans\n", {"_kmeans"}),
    (sklearn_private_names, "from sklearn.cluster import KMeans\nclass K(KMeans):\n"
     "    def _init_centroids(self): ...\n    def _own(self): ...\n", {"_init_centroids"}),
    (sklearn_private_names, "from sklearn.cluster import KMeans\n", set()),
    (module_cells, "_CELL: list = []\n_X = [None]\nNAMES = ['a', 'b']\n", ["_CELL", "_X"]),
])
def test_the_checks_find_what_they_look_for(check, source, expected):
    assert check(ast.parse(source)) == expected
