"""Protocol stages: the registry, and a new stage added by defining it in one place.

The toy stage below is the worked example of docs/extending.md: each client sends
its points' total squared norm; nothing else in the code base is touched. The real
ClientApp serves it (it subscribes to the registry), the real pool folds it with the
server clip, the planned release gets its sensitivity from the generic bounds and its
noise from the calibration.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import SMALL

from fedkmeans import client_app
from fedkmeans.algorithms import algorithm, release_plan
from fedkmeans.experiment.config import parse_config
from fedkmeans.experiment.engines.inprocess import InProcessGrid
from fedkmeans.local_grid import new_run_id
from fedkmeans.node import NodeData
from fedkmeans.privacy.calibration import calibrate
from fedkmeans.server.context import ServerContext
from fedkmeans.server.pool import ClientPool
from fedkmeans.stages import (
    ReleaseRule,
    Stage,
    Statistic,
    register,
    stage,
    stage_of_round,
    statistic_bounds,
)

# -- the toy stage: one statistic, one release, one server step ------------------------
#: One point of norm <= Delta adds ||p||^2 <= Delta^2 to its client's energy (l1 = l2).
ENERGY = Statistic(
    "energy", "l1_nonnegative", per_point=lambda privacy: (privacy.data_radius**2,) * 2,
    client_bound=lambda privacy: privacy.clip_sums, shape=lambda k, d, m: (1,),
)


def total_energy(ctx) -> float:
    """Server step: the noisy total squared norm of every client's points."""
    replies = ctx.query(TOY.name, TOY.group, {}, expected=TOY.expected(ctx.k, ctx.pool.dim))
    return float(TOY.release(ctx, replies, TOY.group)["energy"][0])


TOY = register(Stage(
    "energy", "toy", (ENERGY,),
    client=lambda node, clients, a: {"energy": np.array(
        [[float(np.sum(node.points[c] ** 2))] for c in clients])},
    server=total_energy,
    releases=(ReleaseRule(ENERGY, lambda p: "laplace", lambda p: 1.0),),
))


def _context(flat: dict, epsilon: float) -> ServerContext:
    """A real pool over the in-process grid and the real ClientApp, calibrated for TOY."""
    config = parse_config(flat)
    nodes = [{"partition-id": i, "num-partitions": 3} for i in range(3)]
    run_id = new_run_id()
    grid = InProcessGrid(client_app.app, flat, nodes, run_id)
    pool = ClientPool(grid, config.protocol.federation)
    pool.register(wait_seconds=1)
    plan = TOY.plan(config.privacy, TOY.group)
    releases = calibrate(plan, epsilon=epsilon, delta=1e-6) if config.is_private else []
    return ServerContext.of(config, pool, np.zeros((1, 8)), {r.stage: r for r in releases},
                            progress=False)


def _true_energy(flat: dict) -> float:
    node = NodeData.load(parse_config(flat), 0, 1)  # every client, clipped to Delta
    return float(sum(np.sum(x**2) for x in node.points.values()))


def test_a_new_stage_runs_end_to_end_without_noise_when_epsilon_is_inf():
    flat = {**SMALL, "privacy.epsilon": math.inf}
    ctx = _context(flat, math.inf)
    assert total_energy(ctx) == pytest.approx(_true_energy(flat), rel=1e-12)
    assert ctx.non_private == ["toy/energy"]


def test_a_new_stage_gets_its_sensitivity_noise_and_ledger_entry():
    flat = {**SMALL, "privacy.epsilon": 1.0, "privacy.reproducible-noise": True}
    ctx = _context(flat, 1.0)
    (release,) = ctx.releases.values()
    # data-point level: l1 per point Delta^2 = 16, times 2 for the server's l1 clip
    assert release.stage == "toy/energy" and release.mechanism == "laplace"
    assert release.sensitivity == 2 * 4.0**2
    # one Laplace release at epsilon = 1: scale = sensitivity / epsilon (within the
    # calibration's [0.99, 1] band of the target)
    assert 32.0 <= release.noise_scale <= 32.0 / 0.99
    noisy = total_energy(ctx)
    assert noisy != _true_energy(flat)
    assert abs(noisy - _true_energy(flat)) < 20 * release.noise_scale
    assert ctx.accountant.releases == (release,)


def test_the_new_stage_is_served_and_found_by_name_and_round():
    assert stage("energy") is TOY and stage_of_round("toy") is TOY
    assert "query.energy" in client_app.app._registered_funcs
    assert statistic_bounds(parse_config(SMALL).privacy)["energy"].l1_sensitivity == 32.0


def test_the_feddp_kmeans_plan_is_its_stages_releases_in_order():
    privacy = parse_config({**SMALL, "privacy.lloyds-steps": 2}).privacy
    names = [r.stage for r in release_plan("feddp-kmeans", privacy)]
    assert names == ["init-1/covariance", "init-2/histogram", "init-3/sums",
                     "init-3/counts", "lloyds-1/sums", "lloyds-1/counts",
                     "lloyds-2/sums", "lloyds-2/counts"]
    assert [r.stage for r in release_plan("feddp-kmeans", privacy, subspace=False)] == \
        names[1:]
    assert [r.stage for r in release_plan("server-lloyds", privacy)] == names[4:]
    assert release_plan("kfed", privacy) == []
    rounds = [g for _, g in algorithm("feddp-kmeans").rounds(privacy, full_rank=True)]
    assert rounds == ["init-2", "init-3", "lloyds-1", "lloyds-2"]


def test_a_second_stage_under_a_taken_name_is_refused():
    with pytest.raises(ValueError, match="already registered as 'energy'"):
        register(Stage("energy", "other", (ENERGY,), client=TOY.client, server=total_energy))


def test_the_worked_example_of_the_extending_page_is_this_file():
    """docs/extending.md quotes the toy stage above verbatim (its worked example)."""
    from pathlib import Path

    page = (Path(__file__).parents[2] / "docs" / "extending.md").read_text()
    block = page.split("<!-- tested-by: tests/harness/test_stages.py -->\n```python\n", 1)[1]
    block = block.split("```", 1)[0]
    assert "TOY = register(Stage(" in block
    assert block in Path(__file__).read_text()
