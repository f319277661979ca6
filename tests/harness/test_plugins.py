"""Algorithms, attacks and engines are plug-ins: one file each, found by registration.

A toy baseline (``tests/harness/toy_algorithm.py``) and a toy attack
(``tests/harness/toy_attack.py``) register themselves when imported and then run end to
end on the in-process engine through the normal config, with no edit anywhere else.
Every list of names is the registry's, and no module outside the registries compares
such a name with a string.
The toy baseline is the worked example of docs/extending.md.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import toy_algorithm  # noqa: F401  (registers algorithm=farthest-first)
import toy_attack  # noqa: F401  (registers attack=round-counter)

from fedkmeans.algorithms import algorithm
from fedkmeans.config import ConfigError
from fedkmeans.experiment import run
from fedkmeans.experiment.config import parse_config
from fedkmeans.experiment.registries import ATTACKS, ENGINES, Attack, register_attack
from fedkmeans.plugins import ALGORITHMS

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["data.num-clients=8", "data.points-per-client=60", "data.dim=6",
         "data.components=3", "k=3", "data.server-points-per-component=10",
         "data.server-uniform-points=5", "privacy.reproducible-noise=true",
         "federation.engine=inprocess"]


def test_the_toy_baseline_runs_end_to_end_through_the_normal_config(tmp_path):
    result = run([*SMALL, "algorithm=farthest-first", "privacy.lloyds-steps=1",
                  f"output-dir={tmp_path}"])
    assert result["algorithm"] == "farthest-first" and len(result["centers"]) == 3
    assert [r["stage"] for r in result["privacy"]["releases"]][-2:] == \
        ["lloyds-1/sums", "lloyds-1/counts"]
    assert 0 < result["privacy"]["epsilon"] <= 1.0
    assert result["metrics"]["cost_ratio"] < 2


def test_the_toy_attack_sees_every_round_through_the_declared_hooks(tmp_path):
    result = run([*SMALL, "attack=round-counter", f"output-dir={tmp_path}"])
    seen = result["round_counter"]
    assert seen["started"] and seen["replies"] == seen["broadcasts"]
    assert seen["replies"][:3] == ["estimate", "init-1", "init-2"]
    assert "init-3/sums" in seen["releases"] and seen["rows"] > 0
    assert "attack" not in result  # the curious server was not built
    # the release is an allow-list: the toy attack's exact row count is a diagnostic
    release = json.loads((tmp_path / "release.json").read_text())
    diagnostics = json.loads((tmp_path / "diagnostics.json").read_text())
    assert "round_counter" not in release and diagnostics["round_counter"]["rows"] == seen["rows"]


def test_a_key_a_plugin_adds_cannot_reach_the_release():
    from fedkmeans.artefacts import PUBLISHABLE_KEYS, diagnostics_view, release_view

    result = {"algorithm": "feddp-kmeans", "seed": 0, "k": 2, "centers": [[0.0], [1.0]],
              "privacy": {"epsilon": 1.0}, "config": {}}
    with_plugin = {**result, "my_plugin": {"exact_rows": 401}}
    assert release_view(with_plugin, seed_is_secret=False) == \
        release_view(result, seed_is_secret=False)
    assert diagnostics_view(with_plugin)["my_plugin"] == {"exact_rows": 401}
    assert "my_plugin" not in PUBLISHABLE_KEYS


def test_the_registries_are_the_config_s_lists():
    assert {"feddp-kmeans", "kfed", "farthest-first"} <= set(ALGORITHMS.names())
    assert {"none", "curious", "round-counter"} <= set(ATTACKS.names())
    assert set(ENGINES.names()) == {"inprocess", "flower"}
    with pytest.raises(ConfigError, match="algorithm.*farthest-first"):
        parse_config({"algorithm": "nearest-last"})
    assert not parse_config({"algorithm": "kfed"}).is_private
    assert algorithm("farthest-first").private and not algorithm("kfed").private
    with pytest.raises(ConfigError, match="'k' must be an integer >= 1 unless"):
        parse_config({"algorithm": "farthest-first", "k": "auto"})


def test_the_extending_page_s_baseline_example_is_the_toy_file():
    """docs/extending.md quotes tests/harness/toy_algorithm.py verbatim (its worked example)."""
    page = (ROOT / "docs" / "extending.md").read_text()
    section = page.split("## A baseline", 1)[1]
    block = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert block.strip() and block in (ROOT / "tests" / "harness" / "toy_algorithm.py").read_text()


def test_the_docs_list_every_built_in_algorithm_and_attack():
    """The hand-written lists (README, docs/configuration.md, config.yaml) are the registry's."""
    built_in = [a.name for a in ALGORITHMS.values()
                if a.initialise.__module__.startswith("fedkmeans.")]
    assert len(built_in) == 6
    pages = {p: (ROOT / p).read_text() for p in
             ("README.md", "docs/configuration.md", "fedkmeans/conf/config.yaml")}
    for page, text in pages.items():
        for name in built_in:
            assert f"{name}`" in text or f" {name} " in text or f" {name}\n" in text, \
                f"{page} does not list algorithm {name}"
    assert "attack:     none | curious" in pages["fedkmeans/conf/config.yaml"]


def test_a_second_entry_under_a_taken_name_is_refused():
    with pytest.raises(ValueError, match="already registered as 'curious'"):
        register_attack(Attack("curious", lambda config: []))


#: A string compared with a registered name: ``== "kfed"``, ``"flower" !=``, ``in ("a", ..)``.
def _comparisons(names: set[str]) -> re.Pattern:
    quoted = "|".join(re.escape(f'"{n}"') + "|" + re.escape(f"'{n}'") for n in sorted(names))
    return re.compile(rf"(==|!=)\s*({quoted})|({quoted})\s*(==|!=)"
                      rf"|\bin\s*[(\[{{][^)\]}}]*({quoted})")


def test_no_module_compares_an_algorithm_or_engine_name_with_a_string():
    """The package and the benchmarks: names are compared only through the registries."""
    names = set(ALGORITHMS.names()) | set(ENGINES.names())
    pattern = _comparisons(names)
    hits = []
    for path in sorted([*(ROOT / "fedkmeans").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")]):
        if path.name == "plugins.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            found = pattern.search(line)
            iteration = found and found.group(5) and re.search(r"\bfor\b", line)
            if found and not iteration:  # `for x in ("a", ...)` loops, it does not compare
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert hits == []
    assert pattern.search('if config.federation.engine == "flower":')
    assert pattern.search("if r.get('algorithm') in ('kfed', 'lloyds-nonprivate'):")
    assert pattern.search('for name in ("kfed", "sphere-packing"):').group(5)  # a loop


def test_every_registry_of_the_project_is_the_one_implementation():
    from fedkmeans.data.catalog import DATASETS
    from fedkmeans.plugins import Registry
    from fedkmeans.privacy.registry import MECHANISMS
    from fedkmeans.stages.spec import STAGES

    for registry in (ALGORITHMS, ATTACKS, ENGINES, DATASETS, STAGES, MECHANISMS):
        assert type(registry) is Registry
    assert MECHANISMS.names() == ("gaussian", "laplace")
    assert {"covariance", "histogram", "centers", "lloyds", "estimate"} <= set(STAGES.names())
    assert DATASETS.canonical("npz") == "file" and DATASETS["npz"] is DATASETS["file"]


def test_a_registry_loads_its_built_ins_then_its_entry_points_once_on_first_read(monkeypatch):
    from importlib import metadata

    from fedkmeans.plugins import Registry

    loads = []

    class EntryPoint:
        def load(self):
            loads.append("plug-in")
            shapes.register("hexagon", 6)

    def entry_points(group):
        assert group == "toy.shapes"
        return [EntryPoint()]

    monkeypatch.setattr(metadata, "entry_points", entry_points)

    def builtins():
        loads.append("built-ins")
        shapes.register("triangle", 3, aliases=("trigon",))
        shapes.register("square", 4)

    shapes = Registry("shape", builtins, entry_points="toy.shapes")
    assert loads == []  # nothing is loaded before the first read
    assert shapes.names() == ("triangle", "square", "hexagon")
    assert shapes["trigon"] == 3 and "trigon" in shapes and len(shapes) == 3
    assert shapes.names() == ("triangle", "square", "hexagon") and loads == [
        "built-ins", "plug-in"]
    with pytest.raises(KeyError, match=r"no shape 'circle'; registered: \('triangle', "):
        shapes["circle"]


def test_a_registry_refuses_a_taken_name_or_alias_and_tells_each_subscriber_once():
    from fedkmeans.plugins import Registry

    shapes = Registry("shape")
    seen = []
    assert shapes.register("triangle", 3, aliases=("trigon",)) == 3
    shapes.subscribe(seen.append)
    shapes.register("square", 4)
    shapes.register("square", 4)  # the same object again: a no-op
    assert seen == [3, 4]
    with pytest.raises(ValueError, match="a different shape is already registered as 'square'"):
        shapes.register("square", 5)
    with pytest.raises(ValueError, match=r"already registered as \['trigon'\]"):
        shapes.register("trigon-2", 30, aliases=("trigon",))
    assert shapes.names() == ("triangle", "square") and shapes.aliases() == {
        "trigon": "triangle"}
