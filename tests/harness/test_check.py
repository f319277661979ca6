"""The final private check: hand-computed statistic, sensitivities, guard, end to end."""

import math

import numpy as np
import pytest
from conftest import PAPER

from fedkmeans.algorithms import release_plan
from fedkmeans.config import ConfigError
from fedkmeans.experiment.cli import run_flat
from fedkmeans.experiment.config import parse_config
from fedkmeans.stages import check_runs, feddp_init, statistic_bounds
from fedkmeans.stages.check import (
    CHOICE_ERROR,
    CHOICE_STDS,
    POWER_STDS,
    STRONG_STDS,
    check_clip,
    cost_differences,
    largest_unit_sum,
    returns_protocol,
    typical_clip,
)


def test_cost_differences_by_hand():
    points = np.array([[0.0, 0.0], [3.0, 0.0], [10.0, 0.0], [1.0, 0.0]])
    owner = np.array([0, 0, 1, 2])
    a, b = np.array([[0.0, 0.0]]), np.array([[3.0, 0.0]])
    # d(p, A)^2 - d(p, B)^2 = 0 - 9, 9 - 0, 100 - 49, 1 - 4; clipped to [-10, 10], over 10
    out = cost_differences(points, owner, 3, a, b, tau=10.0)
    np.testing.assert_array_equal(out, [[0.0], [1.0], [-0.3]])
    # two clips at once, one column each: at 5, -9 and 9 clip to -1 and 1, -3 is -0.6
    np.testing.assert_array_equal(cost_differences(points, owner, 3, a, b, [10.0, 5.0]),
                                  [[0.0, 0.0], [1.0, 1.0], [-0.3, -0.6]])
    # a clip that is not a positive finite number (a server's bad value) counts nothing
    for bad in (math.inf, 0.0, -1.0, math.nan):
        np.testing.assert_array_equal(cost_differences(points, owner, 3, a, b, bad),
                                      np.zeros((3, 1)))
    # a point whose squared distances overflow (as loaded, before the radius clip) counts 0
    far = np.vstack([points, [[1e200, 0.0]]])
    np.testing.assert_array_equal(
        cost_differences(far, np.append(owner, 2), 3, a, b, tau=10.0), [[0.0], [1.0], [-0.3]])


def test_the_typical_clip_is_the_median_squared_distance_to_the_server_only_centers():
    centers = np.array([[1.0, 0.0], [10.0, 0.0]])
    # squared distances to the nearest center: 1, 4, 4, 36, 0 -> median 4 (the mean, 9,
    # is pulled up by the one far point)
    server = np.array([[0.0, 0.0], [3.0, 0.0], [10.0, 2.0], [10.0, 6.0], [1.0, 0.0]])
    assert typical_clip(server, centers) == 4.0
    # an even count: the middle two of 0, 1, 4, 36 -> 2.5
    assert typical_clip(server[[0, 1, 3, 4]], centers) == 2.5
    # exact k-means (every distance 0): the smallest positive float, never 0
    assert typical_clip(centers, centers) == np.finfo(float).tiny


def test_the_wide_clip_by_hand():
    a = np.array([[0.0, 0.0], [10.0, 0.0]])
    b = np.array([[0.0, 0.0], [3.0, 0.0]])
    # gaps t_c: (0, 0) 0 and 0; (10, 0) to B 49; (3, 0) to A 9. Every server point is at
    # 1 from its nearest center of A and B: r = 1, tau = max(t + 2 r sqrt(t)) = 49 + 14
    server = np.array([[0.0, 1.0], [3.0, 1.0], [10.0, 1.0]])
    assert check_clip(server, a, b) == 63.0
    # A = B: every difference is 0, the clip the smallest positive float
    assert check_clip(server, b, b) == np.finfo(float).tiny


@pytest.mark.parametrize("seed", range(5))
def test_the_wide_clip_bites_on_no_point_within_r_of_its_nearest_center(seed):
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=(4, 3)) * 5, rng.normal(size=(4, 3)) * 5
    server = rng.normal(size=(200, 3)) * 5
    tau = check_clip(server, a, b)
    both = np.vstack([a, b])
    r2 = np.median(((server[:, None] - both[None]) ** 2).sum(-1).min(1))
    points = rng.normal(size=(20_000, 3)) * 5
    near = ((points[:, None] - both[None]) ** 2).sum(-1).min(1) <= r2
    diff = (((points[:, None] - a[None]) ** 2).sum(-1).min(1)
            - ((points[:, None] - b[None]) ** 2).sum(-1).min(1))
    assert near.sum() > 100
    assert np.abs(diff[near]).max() <= tau * (1 + 1e-12)  # the triangle inequality
    assert np.abs(diff[~near]).max() > 0.5 * tau  # and the bound is not loose by far


@pytest.mark.parametrize("level,sensitivity,server_bound", [
    # one point: one term in [-1, 1] in each coordinate (units of its clip): |.|_2 <= sqrt 2;
    # the server clips a client's (wide, narrow) to n_max sqrt 2
    ("datapoint", math.sqrt(2.0), 40.0 * math.sqrt(2.0)),
    # one client: |D_j|, |N_j| <= max-points-per-client each, so |(D_j, N_j)|_2 <= 40 sqrt 2
    ("client", 40.0 * math.sqrt(2.0), 40.0 * math.sqrt(2.0)),
])
def test_the_check_sensitivity(level, sensitivity, server_bound):
    name = "cost_difference"
    privacy = parse_config({**PAPER, "privacy.level": level, "privacy.check-clip": 0.5,
                            "privacy.clip-counts": 30.0, "privacy.check-share": 0.1,
                            "privacy.max-points-per-client": 40}).privacy
    bound = statistic_bounds(privacy)[name]
    assert bound.l2_sensitivity == sensitivity and bound.server_bound == server_bound
    plan = {r.stage: r for r in release_plan("feddp-kmeans", privacy)}
    assert plan[f"check/{name}"].mechanism == "gaussian"
    assert plan[f"check/{name}"].sensitivity == sensitivity
    assert plan[f"check/{name}"].weight == 0.1  # one release: the whole share
    assert not any(stage.startswith("check/") and stage != "check/cost_difference"
                   for stage in plan)


def test_no_check_without_noise_or_without_a_share():
    assert not check_runs(parse_config({**PAPER, "privacy.check-share": 0.1,
                                        "privacy.epsilon": "inf"}).privacy)
    assert not check_runs(parse_config(PAPER).privacy)
    assert not check_runs(parse_config({}).privacy)  # auto: resolved before any plan
    names = [r.stage for r in release_plan("feddp-kmeans", parse_config(PAPER).privacy)]
    assert not any(name.startswith("check") for name in names)


@pytest.mark.parametrize("overrides", [{"algorithm": "server-lloyds"}, {"k": "auto"}])
def test_the_check_needs_feddp_kmeans_with_a_fixed_k(overrides):
    with pytest.raises(ConfigError, match="'privacy.check-share' must be 0 or 'auto'"):
        parse_config({"privacy.check-share": 0.1, **overrides})
    parse_config({"privacy.check-share": "auto", **overrides})  # auto means 0 there


def test_the_choice_needs_a_margin_of_z_noise_deviations():
    # Phi(-1.6448536) = 0.05: a worse protocol is returned with probability <= 5 %
    assert CHOICE_ERROR == 0.05 and CHOICE_STDS == pytest.approx(1.6448536269514722)


def test_auto_gives_the_check_its_fraction_of_the_budget(small_config, noiseless_estimates):
    from fedkmeans.tuning import resolve

    config = parse_config({**small_config, "privacy.split": "auto",
                           "privacy.check-share": "auto", "privacy.epsilon": 1.0})
    server_x = np.random.default_rng(0).normal(size=(50, 8))
    chosen, record = resolve.resolve_auto(config.protocol, server_x,
                                          noiseless_estimates("datapoint"))
    plan = release_plan("feddp-kmeans", chosen.privacy)
    checks = [r for r in plan if r.group == "check"]
    share = sum(r.weight for r in checks) / sum(r.weight for r in plan)
    assert [r.stage for r in checks] == ["check/cost_difference"]
    assert share == pytest.approx(resolve.CHECK_FRACTION)
    # the clip is set in the check round, from A, B and Q
    assert chosen.privacy.check_clip == record["chosen"]["check_clip"] == "auto"
    assert "check_share" in record["why"]


def _checked(small_config, **extra):
    return {**small_config, "privacy.check-share": 0.1, "privacy.check-clip": 2.0,
            "privacy.reproducible-noise": True, **extra}


def test_the_check_replaces_bad_centers_by_the_server_only_answer(small_config, monkeypatch):
    far = lambda ctx: np.full((ctx.k, ctx.pool.dim), 50.0)  # noqa: E731
    monkeypatch.setattr(feddp_init, "initial_centers", far)
    result = run_flat(_checked(small_config, **{"privacy.epsilon": 1.0}))
    server = run_flat({**small_config, "algorithm": "server-lloyds",
                       "output-dir": small_config["output-dir"] + "-server"})
    assert result["check"]["chosen"] == "server-only"
    # every one of the 480 points is at the clip: the sum is 480 * 2 = 960 plus noise
    assert result["check"]["noisy_difference"] > 0
    np.testing.assert_array_equal(result["centers"], server["centers"])
    released = {r["stage"]: r for r in result["privacy"]["releases"]}
    # (wide, narrow) in units of (tau, tau_n): sqrt 2 per point
    assert released["check/cost_difference"]["sensitivity"] == math.sqrt(2.0)
    assert "check/cost_sign" not in released
    assert result["privacy"]["epsilon"] <= result["privacy"]["target_epsilon"]
    # each margin in its noise standard deviations (tau times the unit release's); the
    # decision's is the larger one, and centers_from says it
    check = result["check"]
    assert check["clip"] == 2.0 and check["narrow_clip"] <= 2.0
    sigma = released["check/cost_difference"]["noise_scale"] * check["clip"]
    # one release: both coordinates have the same noise in units of their clips
    narrow = released["check/cost_difference"]["noise_scale"] * check["narrow_clip"]
    assert check["noise_std"] == pytest.approx(sigma)
    margins = [check["noisy_difference"] / sigma, check["narrow_difference"] / narrow]
    assert check["margins_sigmas"] == pytest.approx(margins)
    margin = margins[0]  # the wide one decides; the narrow one can only veto
    assert check["margin_sigmas"] == pytest.approx(margin)
    # no estimate round (hand settings): nothing gates the release's reach
    assert check["reach_sigmas"] in (None, math.inf) and check["powered"]  # inf: JSON null
    assert check["within_noise"] == (abs(margin) < CHOICE_STDS)
    assert result["check"]["threshold_sigmas"] == pytest.approx(-1.6448536)
    assert result["centers_from"] == (
        "server-lloyds (k-means on the server's data: the final private choice's noisy "
        f"cost difference was {margin:+.2f} noise standard deviations, not below -1.645"
        + ("; within the noise: the choice could not tell the two answers apart, the "
           "server's is the default, not a finding" if abs(margin) < CHOICE_STDS else "")
        + ")")
    # weight 0.1 next to the paper's split (weights summing to 1): 0.1 / 1.1 of the plan
    assert result["check"]["budget_fraction"] == pytest.approx(0.1 / 1.1)


@pytest.mark.slow
def test_the_check_keeps_good_centers(small_config):
    result = run_flat(_checked(small_config, **{"privacy.epsilon": 50.0}))
    assert result["check"]["chosen"] == "protocol"
    assert result["check"]["noisy_difference"] < 0
    assert result["centers_from"].startswith("feddp-kmeans (the protocol's centers: ")
    assert result["centers_from"].endswith("noise standard deviations, below -1.645)")


def test_auto_check_share_is_a_tenth_of_the_plan_and_release_json_says_so(small_config):
    result = run_flat({**small_config, "privacy.check-share": "auto",
                       "privacy.check-clip": "auto", "privacy.lloyds-steps": 2})
    chosen = result["tuning"]["chosen"]["check_share"]
    assert result["check"]["budget_fraction"] == pytest.approx(0.1)
    # the weight on the scale of split: 0.1 / 0.9 of the other releases' total weight
    others = sum(r.weight for r in release_plan(
        "feddp-kmeans", parse_config({**small_config, "privacy.lloyds-steps": 2}).privacy))
    assert chosen == pytest.approx(others / 9) and others > 1
    assert f"weight {chosen:.4g} on the scale of split" in result["tuning"]["why"]["check_share"]
    assert result["privacy"]["epsilon"] <= 50.0


def test_without_noise_the_check_does_not_run(small_config):
    plain = run_flat({**small_config, "privacy.epsilon": "inf"})
    checked = run_flat({**_checked(small_config), "privacy.epsilon": "inf",
                        "output-dir": small_config["output-dir"] + "-checked"})
    assert "check" not in checked
    np.testing.assert_array_equal(plain["centers"], checked["centers"])


def test_the_clients_compare_on_their_points_before_the_radius_clip(tmp_path):
    from fedkmeans.node import NodeData

    path = tmp_path / "two.npz"
    np.savez(path, x=np.array([[3.0, 0.0], [0.0, 0.5], [-4.0, 0.0]]),
             client=np.array([0, 0, 1]), server_x=np.array([[0.0, 0.0], [1.0, 1.0]]))
    config = parse_config({"data.name": "npz", "data.path": str(path), "k": 1,
                           "privacy.data-radius": 2.0, "privacy.check-share": 0.1,
                           "privacy.check-clip": 20.0})
    node = NodeData.load(config, 0, 1)
    assert node.clipped_clients == {0, 1}  # (3, 0) -> (2, 0) and (-4, 0) -> (-2, 0)
    a, b = np.array([[0.0, 0.0]]), np.array([[3.0, 0.0]])
    # as loaded: 9 - 0, 0.25 - 9.25, 16 - 49 -> clipped to [-20, 20], over 20: 0 and -1
    # (on the radius-clipped points client 0 would send ((4 - 1) + (0.25 - 9.25)) / 20)
    out = node.arithmetic.cost_differences([0, 1], a, b)
    np.testing.assert_array_equal(out["cost_difference"], [[0.0, 0.0], [-1.0, -1.0]])
    np.testing.assert_array_equal(node.arithmetic.cost_differences([1], a, b)["cost_difference"],
                                  [[-1.0, -1.0]])
    # the clips the server sent: wide 40 (-33 / 40), narrow 5 (9 and -9 at +-1)
    sent = node.arithmetic.cost_differences([0, 1], a, b, np.array([40.0, 5.0]))
    np.testing.assert_array_equal(sent["cost_difference"], [[0.0, 0.0], [-0.825, -1.0]])


def test_a_client_s_wide_and_narrow_sums_are_clipped_together_to_c_sqrt_2(tmp_path):
    """Client level: the row (D_j, N_j) is clipped in l2 to sqrt 2 max-points-per-client."""
    from fedkmeans.node import NodeData

    path = tmp_path / "three.npz"
    # client 0: three points at 0 (d(p, A)^2 - d(p, B)^2 = 0 - 9 = -9 each); client 1: one
    np.savez(path, x=np.array([[0.0, 0.0]] * 3 + [[0.0, 0.0]]), client=np.array([0, 0, 0, 1]),
             server_x=np.array([[0.0, 0.0], [1.0, 1.0]]))
    config = parse_config({"data.name": "npz", "data.path": str(path), "k": 1,
                           "privacy.level": "client", "privacy.data-radius": 2.0,
                           "privacy.check-share": 0.1, "privacy.check-clip": 20.0,
                           "privacy.max-points-per-client": 1})
    node = NodeData.load(config, 0, 1)
    a, b = np.array([[0.0, 0.0]]), np.array([[3.0, 0.0]])
    sent = node.arithmetic.cost_differences([0, 1], a, b, np.array([18.0, 6.0]))
    # client 0: (3 * -9 / 18, 3 * -1) = (-1.5, -3), norm 3.354 > sqrt 2: scaled by
    # sqrt 2 / sqrt(1.5^2 + 3^2) = 0.4216; client 1: (-0.5, -1), norm 1.118, kept
    scale = math.sqrt(2.0) / math.sqrt(1.5 ** 2 + 3.0 ** 2)
    np.testing.assert_allclose(sent["cost_difference"],
                               [[-1.5 * scale, -3.0 * scale], [-0.5, -1.0]], rtol=1e-12)


def test_the_summary_says_when_the_margin_was_within_noise():
    from fedkmeans.statements import centers_from

    config = parse_config(PAPER)
    check = {"chosen": "server-only", "margin_sigmas": 0.8, "threshold_sigmas": -1.645,
             "within_noise": True}
    assert centers_from(config, config, check).endswith(
        "+0.80 noise standard deviations, not below -1.645; within the noise: the choice "
        "could not tell the two answers apart, the server's is the default, not a finding)")
    clear = {**check, "margin_sigmas": 4.0, "within_noise": False}
    assert centers_from(config, config, clear).endswith("not below -1.645)")


def test_the_summary_names_the_condition_that_kept_the_server_s_answer():
    """A wide margin below the bar is never called "not below" it (issue 48's rule)."""
    from fedkmeans.stages.check import returns_protocol
    from fedkmeans.statements import centers_from

    config = parse_config(PAPER)
    # wide -2.85: below -1.645 but not below -3.29; narrow +0.4: not below -1.645
    disagree = {"chosen": "server-only", "margin_sigmas": -2.85, "threshold_sigmas": -1.645,
                "margins_sigmas": [-2.85, 0.4], "powered": True, "reach_sigmas": 50.0,
                "within_noise": False}
    assert not returns_protocol(-2.85, 0.4, 50.0)
    assert centers_from(config, config, disagree).endswith(
        "-2.85 noise standard deviations, below -1.645, but the difference clipped at a "
        "typical point's cost was +0.40, not below -1.645 (the first would have had to be "
        "below -3.290 and the second below 1.645))")
    weak = {**disagree, "margins_sigmas": [-2.85, -2.0], "powered": False, "reach_sigmas": 2.5,
            "within_noise": True}
    assert not returns_protocol(-2.85, -2.0, 2.5)
    assert "but the release could reach only 2.50 of them, too few to be told from noise; " \
        "within the noise" in centers_from(config, config, weak)


class _Estimates:
    def __init__(self, points, clients):
        self.total_points, self.num_clients = points, clients


def test_the_reach_of_the_check_by_hand():
    datapoint = parse_config({**PAPER, "privacy.max-points-per-client": 40}).privacy
    client = parse_config({**PAPER, "privacy.level": "client",
                           "privacy.max-points-per-client": 40}).privacy
    # every point adds at most 1 in units of the clip: at most the (noisy) number of
    # points, or clients x max-points-per-client at client level
    assert largest_unit_sum(_Estimates(1234.5, 7.5), datapoint) == 1234.5
    assert largest_unit_sum(_Estimates(math.nan, 7.5), client) == 300.0
    assert largest_unit_sum(_Estimates(-3.0, -1.0), client) == 0.0  # noisy, below 0
    assert largest_unit_sum(None, client) == math.inf  # no estimate round: no gate
    assert POWER_STDS == pytest.approx(2 * 1.6448536269514722)


@pytest.mark.parametrize("wide,narrow,reach,expected", [
    (-1.7, -1.7, 10.0, True),    # both below -z
    (-1.6, -9.0, 10.0, False),   # the wide sum (the bound's) not below -z
    (-3.0, -1.0, 10.0, False),   # the narrow sum does not confirm, the wide not below -2z
    (-3.3, -1.0, 10.0, True),    # the wide below -2z = -3.29, the narrow not against
    (-9.0, 1.7, 10.0, False),    # the narrow shows B cheaper: veto
    (-9.0, -9.0, 3.2, False),    # the release cannot reach 2z: noise whatever the data
    (-9.0, -9.0, 3.3, True),
])
def test_the_decision_by_hand(wide, narrow, reach, expected):
    assert returns_protocol(wide, narrow, reach) is expected
    assert STRONG_STDS == POWER_STDS == pytest.approx(3.2897072539029444)
