"""Start-up: a module imports only what its process uses (issue #37).

Each import runs in a fresh interpreter, with this checkout first on the path, and
prints which of the heavy packages it loaded. The table readers and partitioners
(pandas, pyarrow, Flower Datasets) load when a file is read, Ray with the flower
engine, dp_accounting (scipy.signal, scipy.stats) when a ledger is accounted, and
scikit-learn (with the pandas it loads) only when a k-means that uses it runs
(``fedkmeans.clustering.scikit``). ``benchmarks/startup.py``
measures what this saves (docs/results/startup.md).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
TABLES = ("pandas", "pyarrow", "ray", "flwr_datasets")
ACCOUNTING = ("dp_accounting", "scipy.signal", "scipy.stats", "sklearn")


def loaded_after(statement: str, watched: tuple[str, ...]) -> list[str]:
    """The ``watched`` modules present in ``sys.modules`` after ``statement``, in a new process."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    code = (f"{statement}; import sys; "
            f"print(sorted(m for m in {watched!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return ast.literal_eval(done.stdout.strip().splitlines()[-1])


def test_the_checkout_is_what_the_subprocess_imports():
    assert loaded_after("import fedkmeans; assert fedkmeans.__file__.startswith("
                        f"{str(ROOT)!r}), fedkmeans.__file__", ()) == []


def test_import_fedkmeans_loads_no_table_reader_nor_ray():
    assert loaded_after("import fedkmeans", TABLES) == []


def test_import_experiment_loads_no_table_reader_ray_accountant_nor_sklearn():
    assert loaded_after("import fedkmeans.experiment.cli", TABLES + ACCOUNTING) == []


def test_a_node_process_loads_no_table_reader_ray_accountant_nor_sklearn():
    # A Flower actor or SuperNode imports the ClientApp; a generated data set's node
    # computes its statistics with NumPy alone.
    assert loaded_after("import fedkmeans.client_app", TABLES + ACCOUNTING) == []


def test_the_control_loads_what_it_imports():
    # The probe can fail: a module that is imported is reported.
    assert loaded_after("import fedkmeans, csv", ("csv", "pandas")) == ["csv"]


def test_the_thresholds_keep_the_bits_of_scipy_stats_norm():
    from scipy.stats import norm

    from fedkmeans.stages.check import CHOICE_ERROR, CHOICE_STDS
    from fedkmeans.tuning.estimates import FLOOR_TAIL, noise_floor

    assert CHOICE_STDS == float(norm.isf(CHOICE_ERROR))
    for sigma in (0.37, 1.0, 12.5):
        for bins in (1, 7, 40, 1000):
            assert noise_floor(sigma, bins) == sigma * float(norm.isf(FLOOR_TAIL / bins))


@pytest.mark.parametrize("name", ["gaussian", "laplace"])
def test_the_deferred_accounting_builds_the_same_events_and_plds(name):
    import dp_accounting
    from dp_accounting.pld import privacy_loss_distribution as pld

    from fedkmeans.privacy.registry import mechanism

    spec = mechanism(name)
    event_class, constructor = {
        "gaussian": (dp_accounting.GaussianDpEvent, pld.from_gaussian_mechanism),
        "laplace": (dp_accounting.LaplaceDpEvent, pld.from_laplace_mechanism),
    }[name]
    assert spec.event(1.7) == event_class(1.7)
    built = spec.pld(1.7, 0.3, 1e-3)
    direct = constructor(1.7, sensitivity=1.0, sampling_prob=0.3,
                         value_discretization_interval=1e-3)
    assert built.get_epsilon_for_delta(1e-6) == direct.get_epsilon_for_delta(1e-6)
    assert np.isfinite(built.get_epsilon_for_delta(1e-6))


def test_a_run_that_reads_no_table_loads_neither_pandas_nor_scikit_learn(tmp_path):
    # scikit-learn imports pandas when it is installed, so a run whose k-means, isotonic
    # fit and mutual information need no scikit-learn (the default run's) loads neither
    # (fedkmeans.clustering.scikit); the control: its optimal cost is scikit-learn's.
    run = ("from fedkmeans.experiment import run; run([{skip}"
           "'data.num-clients=6', 'data.points-per-client=30', 'privacy.epsilon=3', "
           f"'output-dir={tmp_path / 'run'}{{name}}'])")
    assert loaded_after(run.format(skip="'optimal-cost=skip', ", name=1),
                        TABLES + ("sklearn",)) == []
    assert loaded_after(run.format(skip="", name=2), ("sklearn",)) == ["sklearn"]


def test_import_experiment_loads_neither_the_server_nor_flower():
    # The preflight's radius check reads the algorithm registry when it runs: at import
    # the server's context, its pool and flwr.app (0.44 s) stay unloaded.
    watched = ("flwr.app", "fedkmeans.server.context", "fedkmeans.algorithms")
    assert loaded_after("import fedkmeans.experiment.cli", watched) == []


#: The honest default run, small: what the command line and ``experiment.run`` are given.
HONEST = ["optimal-cost=skip", "data.num-clients=6", "data.points-per-client=30",
          "privacy.epsilon=3"]


def test_the_honest_run_imports_nothing_of_the_attack_suite(tmp_path):
    """``server_app``'s promise, from the command line (``-X importtime`` lists every
    module the process imported) and through the Python API; the control: composing
    ``attack=curious`` loads it."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "fedkmeans.experiment", *HONEST,
         f"output-dir={tmp_path / 'cli'}"],
        env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
                if line.startswith("import time:")}
    assert "fedkmeans.experiment.runner" in imported  # the probe sees the run's modules
    assert not {m for m in imported if m.startswith("fedkmeans.attacks")}
    # any module of the suite imports the package first
    overrides = [*HONEST, "output-dir=" + str(tmp_path / "api")]
    run = f"from fedkmeans.experiment import run; run({overrides!r})"
    assert loaded_after(run, ("fedkmeans.attacks",)) == []
    compose = "from fedkmeans.experiment.cli import compose_flat; compose_flat(['attack=curious'])"
    assert loaded_after(compose, ("fedkmeans.attacks",)) == ["fedkmeans.attacks"]
