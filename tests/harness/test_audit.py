"""The privacy audit: Clopper-Pearson, the epsilon lower bound, the canary game."""

import math

import numpy as np
import pytest

from fedkmeans.experiment import audit as audit_module
from fedkmeans.experiment.audit import (
    audit,
    canary_game,
    clopper_pearson,
    epsilon_lower_bound,
    main,
)
from fedkmeans.privacy.mechanisms import GaussianMechanism


# -- Clopper-Pearson and the bound: hand-computed values ----------------------------------
def test_clopper_pearson_known_interval():
    # Exact 95% interval for 3 successes in 100 trials (standard table value).
    lo, hi = clopper_pearson(3, 100)
    assert lo == pytest.approx(0.00623, abs=1e-5)
    assert hi == pytest.approx(0.08518, abs=1e-5)


@pytest.mark.parametrize("n", [1, 10, 500, 10_000])
def test_clopper_pearson_closed_forms_at_the_ends(n):
    # 0 successes: upper = 1 - (alpha/2)^(1/n); n successes: lower = (alpha/2)^(1/n).
    assert clopper_pearson(0, n) == (0.0, pytest.approx(1 - 0.025 ** (1 / n), rel=1e-9))
    assert clopper_pearson(n, n) == (pytest.approx(0.025 ** (1 / n), rel=1e-9), 1.0)


def test_epsilon_lower_bound_formula_by_hand():
    # FPR+ and FNR+ are CP upper bounds: plug them into the formula by hand.
    fpr_hi = clopper_pearson(5, 1000)[1]
    fnr_hi = clopper_pearson(400, 1000)[1]
    delta = 1e-6
    expected = max(0.0, math.log((1 - delta - fpr_hi) / fnr_hi),
                   math.log((1 - delta - fnr_hi) / fpr_hi))
    assert epsilon_lower_bound(5, 1000, 400, 1000, delta) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(math.log((1 - delta - fnr_hi) / fpr_hi))


def test_zero_errors_in_1000_trials_cap_the_bound_near_4_9():
    # zero errors in N = 1000 trials (500 per world) cap eps_LB at about 4.9
    # (docs/facts.md, "Auditing with Clopper-Pearson").
    assert epsilon_lower_bound(0, 500, 0, 500, 1e-6) == pytest.approx(4.90, abs=0.01)


def test_chance_level_gives_zero():
    assert epsilon_lower_bound(250, 500, 250, 500, 1e-6) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"successes": 3, "n": 0}, "n"),
        ({"successes": 5, "n": 4}, "successes"),
        ({"successes": 1, "n": 4, "confidence": 1.5}, "confidence"),
    ],
)
def test_clopper_pearson_validates(kwargs, name):
    with pytest.raises(ValueError, match=name):
        clopper_pearson(**kwargs)


# -- the canary game on the real mechanisms -------------------------------------------------
@pytest.mark.parametrize(
    ("mechanism", "kwargs"),
    [
        ("covariance", {}),
        ("histogram", {}),
        ("sums", {}),
        ("counts", {}),
        ("lloyds", {}),
        ("lloyds", {"count_noise": "gaussian"}),
        ("lloyds", {"budget": "run"}),
        ("covariance", {"budget": "run"}),
    ],
)
def test_bound_never_exceeds_the_accountant(mechanism, kwargs):
    result = audit(mechanism, epsilon=1.0, trials=2000, seed=0, **kwargs)
    assert 0.0 <= result.epsilon_lb <= result.accountant_epsilon
    assert result.trials_selection == result.trials_evaluation == 1000


def test_canary_sits_at_the_clipping_bound():
    radius = 11.0
    game = canary_game("lloyds", epsilon=1.0, data_radius=radius, dim=6, k=3)
    change = game.canary_norms()
    assert change["lloyds-1/sums"] == pytest.approx(radius)
    assert change["lloyds-1/counts"] == pytest.approx(1.0)
    game = canary_game("covariance", epsilon=1.0, data_radius=radius, dim=6, k=3)
    assert game.canary_norms()["init-1/covariance"] == pytest.approx(radius**2)
    assert game.releases[0].sensitivity == pytest.approx(radius**2)


def test_one_lloyd_step_at_epsilon_4_reaches_a_bound_of_1():
    result = audit("lloyds", epsilon=4.0, trials=20_000, seed=0)
    assert 1.0 <= result.epsilon_lb <= result.accountant_epsilon <= 4.0


def test_under_noised_step_1_is_caught():
    # noise calibrated to Delta instead of Delta^2 for sum p p^T
    # (docs/facts.md, "Reference bug 1").
    honest = audit("covariance", epsilon=1.0, trials=1000, seed=1)
    buggy = audit("covariance", epsilon=1.0, trials=1000, seed=1, under_noise=True)
    assert buggy.stages["init-1/covariance"]["claimed_sensitivity"] == pytest.approx(11.0)
    assert buggy.stages["init-1/covariance"]["canary_change"] == pytest.approx(121.0)
    assert honest.epsilon_lb <= honest.accountant_epsilon
    assert buggy.epsilon_lb > buggy.accountant_epsilon + 1.0


def test_laplace_releases_do_not_leak_through_floating_point():
    # Textbook value + numpy Laplace reached eps_LB 3.63 here (Mironov 2012); the
    # granular discrete Laplace releases points of a data-independent lattice only.
    result = audit("counts", epsilon=1.0, trials=20_000, seed=0, test="float")
    assert result.epsilon_lb <= result.accountant_epsilon


def test_the_ideal_test_is_immune_to_rounding():
    # Same releases, the ratio computed without floating-point atoms: within the claim.
    result = audit("counts", epsilon=1.0, trials=20_000, seed=0, test="lr")
    assert result.epsilon_lb <= result.accountant_epsilon


def test_audit_runs_the_real_mechanism_code(monkeypatch):
    # A quarter of the noise inside GaussianMechanism (not in the audit) must be caught.
    real = GaussianMechanism.add_noise

    def quarter_noise(self, value, rng):
        exact = np.array(value, dtype=np.float64)
        return exact + 0.25 * (real(self, value, rng) - exact)

    before = audit("sums", epsilon=1.0, trials=2000, seed=2)
    monkeypatch.setattr(GaussianMechanism, "add_noise", quarter_noise)
    after = audit("sums", epsilon=1.0, trials=2000, seed=2)
    assert before.epsilon_lb <= before.accountant_epsilon < after.epsilon_lb


def test_audit_is_deterministic_per_seed():
    a = audit("lloyds", epsilon=2.0, trials=1000, seed=3)
    b = audit("lloyds", epsilon=2.0, trials=1000, seed=3)
    c = audit("lloyds", epsilon=2.0, trials=1000, seed=4)
    assert (a.epsilon_lb, a.threshold, a.false_positives) == (
        b.epsilon_lb, b.threshold, b.false_positives)
    assert (a.threshold, a.false_positives) != (c.threshold, c.false_positives)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"mechanism": "bogus"}, "mechanism"),
        ({"trials": 3}, "trials"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": math.inf}, "epsilon"),
        ({"delta": 1.0}, "delta"),
        ({"mechanism": "sums", "under_noise": True}, "under_noise"),
        ({"select_fraction": 1.0}, "select_fraction"),
        ({"dim": 0}, "dim"),
        ({"test": "exact"}, "test"),
    ],
)
def test_audit_validates_arguments(kwargs, name):
    args = {"mechanism": "lloyds", "epsilon": 1.0, "trials": 100, **kwargs}
    with pytest.raises(ValueError, match=name):
        audit(args.pop("mechanism"), **args)


def test_command_line_prints_bound_next_to_accountant(capsys):
    results = main(["--mechanism", "counts", "--epsilon", "1", "--trials", "400",
                    "--seed", "0"])
    out = capsys.readouterr().out
    assert "accountant eps" in out and "eps_LB" in out
    line = [row for row in out.splitlines() if row.startswith("counts")][0]
    assert f"{results[0].accountant_epsilon:.4f}" in line
    assert f"{results[0].epsilon_lb:.3f}" in line
    main(["--mechanism", "covariance", "--under-noise", "--trials", "400", "--json"])
    assert '"under_noise": true' in capsys.readouterr().out


def test_module_docstring_names_the_formula():
    assert "ln((1 - delta - FPR+) / FNR+)" in audit_module.__doc__
