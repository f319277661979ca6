"""The canary audit: play :mod:`~fedkmeans.attacks.canary`'s game, bound epsilon from below.

:func:`audit` chooses the likelihood-ratio threshold on separate selection trials,
counts false positives and negatives on the evaluation trials and turns their 95%
Clopper-Pearson upper bounds into ``eps_LB`` (:mod:`fedkmeans.attacks.bounds`), next
to the accountant's epsilon for the same releases.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from fedkmeans.arguments import validate_int
from fedkmeans.attacks.bounds import (
    choose_threshold,
    clopper_pearson,
    epsilon_lower_bound,
)
from fedkmeans.attacks.canary import TESTS, canary_game
from fedkmeans.seeding import generator

__all__ = ["AuditResult", "audit"]


# -- the audit -------------------------------------------------------------------------
@dataclass(frozen=True)
class AuditResult:
    """Outcome of one audit (all rates on the evaluation trials).

    Attributes
    ----------
    mechanism, budget : str
    accountant_epsilon : float
        The PLD accountant's epsilon for the audited releases.
    epsilon_lb : float
        The 95% Clopper-Pearson lower bound on the true epsilon.
    delta : float
    trials_selection, trials_evaluation : int
        Trials used to choose the threshold, and to count errors (half IN, half OUT).
    threshold : float
        Log-likelihood ratio above which the test says IN.
    false_positives, false_negatives : int
    fpr_upper, fnr_upper : float
        Clopper-Pearson upper bounds.
    stages : dict
        Per release: claimed sensitivity, noise scale, and the canary's actual change.
    under_noise : bool
    test : str
        ``lr`` or ``float`` (see :func:`audit`).
    seconds : float
    """

    mechanism: str
    budget: str
    accountant_epsilon: float
    epsilon_lb: float
    delta: float
    trials_selection: int
    trials_evaluation: int
    threshold: float
    false_positives: int
    false_negatives: int
    fpr_upper: float
    fnr_upper: float
    stages: dict
    under_noise: bool
    test: str
    seconds: float


def audit(
    mechanism: str,
    *,
    epsilon: float,
    delta: float = 1e-6,
    trials: int = 2000,
    select_fraction: float = 0.5,
    seed: int = 0,
    confidence: float = 0.95,
    test: str = "lr",
    **game_kwargs,
) -> AuditResult:
    """Run the canary game ``trials`` times and bound epsilon from below.

    Parameters
    ----------
    mechanism : {"covariance", "histogram", "sums", "counts", "lloyds"}
    epsilon, delta : float
        Target of the calibration (see :func:`canary_game`).
    trials : int
        Total trials (>= 8), split into selection and evaluation sets, each half IN
        and half OUT.
    select_fraction : float
        Share of the trials used only to choose the threshold, in (0, 1).
    seed : int
        Root seed (>= 0): the data of the game and every noise draw.
    confidence : float
        Of the Clopper-Pearson intervals.
    test : {"lr", "float"}
        ``lr``: the optimal test of the ideal (real-valued) mechanism; ``float``: the
        same ratio computed naively in floating point, which also exploits the
        low-order bits of the released doubles.
    **game_kwargs
        ``data_radius``, ``dim``, ``k``, ``base_points``, ``count_noise``, ``budget``,
        ``under_noise`` of :func:`canary_game`.

    Returns
    -------
    AuditResult
    """
    start = time.perf_counter()
    trials = validate_int("trials", trials, 8)
    if not (isinstance(select_fraction, float) and 0 < select_fraction < 1):
        raise ValueError(f"select_fraction must be a float in (0, 1), got {select_fraction!r}")
    if test not in TESTS:
        raise ValueError(f"test must be one of {TESTS}, got {test!r}")
    game = canary_game(mechanism, epsilon=epsilon, delta=delta, seed=seed, **game_kwargs)
    n_select = max(2, int(round(trials * select_fraction)) // 2)
    n_eval = max(2, (trials - 2 * n_select) // 2)
    rng = generator(seed, "audit", "noise", mechanism)
    select_in = game.scores(True, n_select, rng, test)
    select_out = game.scores(False, n_select, rng, test)
    threshold = choose_threshold(select_in, select_out, delta, confidence)
    eval_in, eval_out = game.scores(True, n_eval, rng, test), game.scores(False, n_eval, rng, test)
    fp = int((eval_out > threshold).sum())
    fn = int((eval_in <= threshold).sum())
    norms = game.canary_norms()
    stages = {
        r.stage: {
            "mechanism": r.mechanism,
            "claimed_sensitivity": r.sensitivity,
            "canary_change": norms[r.stage],
            "noise_scale": r.noise_scale,
        }
        for r in game.releases
    }
    return AuditResult(
        mechanism=mechanism,
        budget=game_kwargs.get("budget", "standalone"),
        accountant_epsilon=game.accountant_epsilon_at(delta),
        epsilon_lb=epsilon_lower_bound(fp, n_eval, fn, n_eval, delta, confidence),
        delta=delta,
        trials_selection=2 * n_select,
        trials_evaluation=2 * n_eval,
        threshold=threshold,
        false_positives=fp,
        false_negatives=fn,
        fpr_upper=clopper_pearson(fp, n_eval, confidence)[1],
        fnr_upper=clopper_pearson(fn, n_eval, confidence)[1],
        stages=stages,
        under_noise=bool(game_kwargs.get("under_noise", False)),
        test=test,
        seconds=time.perf_counter() - start,
    )
