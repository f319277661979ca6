"""Every module of the package imports (the fast tier reaches each one at least so far)."""

import importlib
import pkgutil

import pytest

import fedkmeans

MODULES = sorted(m.name for m in pkgutil.walk_packages(fedkmeans.__path__, "fedkmeans.")
                 if not m.name.endswith("__main__"))


def test_the_package_has_its_layers():
    assert {"fedkmeans.stages.estimate", "fedkmeans.tuning.estimates",
            "fedkmeans.experiment.runner", "fedkmeans.experiment.engines.flower",
            "fedkmeans.experiment.engines.watchdog"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_module_imports(name):
    assert importlib.import_module(name).__name__ == name
