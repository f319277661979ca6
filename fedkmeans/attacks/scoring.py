"""Success metrics shared by the attacks: similarity of reconstructions, ROC of tests.

NumPy, and scikit-learn for the ROC and its area. Every function validates its inputs
and raises :class:`ValueError` naming the argument.
"""

from __future__ import annotations

import math

import numpy as np
from sklearn.metrics import roc_auc_score
from sklearn.metrics import roc_curve as sklearn_roc_curve

__all__ = [
    "cosine_similarity",
    "relative_error",
    "roc_auc",
    "roc_curve",
    "tpr_at_fpr",
    "membership_summary",
]


def _vector(name: str, value: np.ndarray) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64).ravel()
    if arr.size == 0:
        raise ValueError(f"{name} must be non-empty")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must contain only finite values")
    return arr


def cosine_similarity(estimate: np.ndarray, truth: np.ndarray) -> float:
    """Cosine of the angle between two arrays (flattened), in [-1, 1].

    Parameters
    ----------
    estimate, truth : array_like of the same size

    Returns
    -------
    float
        0.0 when either array is zero (no direction to compare).
    """
    a, b = _vector("estimate", estimate), _vector("truth", truth)
    if a.size != b.size:
        raise ValueError(f"estimate and truth must have the same size, got {a.size} and {b.size}")
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.clip(a @ b / (na * nb), -1.0, 1.0))


def relative_error(estimate: np.ndarray, truth: np.ndarray) -> float:
    """``||estimate - truth|| / ||truth||`` (flattened); inf if truth is zero and differs."""
    a, b = _vector("estimate", estimate), _vector("truth", truth)
    if a.size != b.size:
        raise ValueError(f"estimate and truth must have the same size, got {a.size} and {b.size}")
    nb = float(np.linalg.norm(b))
    diff = float(np.linalg.norm(a - b))
    if nb == 0.0:
        return 0.0 if diff == 0.0 else math.inf
    return diff / nb


def _scores(scores_in: np.ndarray, scores_out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s_in = np.asarray(scores_in, dtype=np.float64).ravel()
    s_out = np.asarray(scores_out, dtype=np.float64).ravel()
    if s_in.size == 0:
        raise ValueError("scores_in must be non-empty (scores of members / IN trials)")
    if s_out.size == 0:
        raise ValueError("scores_out must be non-empty (scores of non-members / OUT trials)")
    if np.isnan(s_in).any() or np.isnan(s_out).any():
        raise ValueError("scores_in and scores_out must not contain NaN")
    return s_in, s_out


def _labelled(scores_in: np.ndarray, scores_out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``y_true`` (1 = IN) and ``y_score`` for scikit-learn, after validation.

    The scores are replaced by their dense ranks: a ROC depends only on the order of
    the scores and their ties, and scikit-learn refuses infinite scores, which these
    functions accept (only NaN is refused).
    """
    s_in, s_out = _scores(scores_in, scores_out)
    y_true = np.concatenate([np.ones(s_in.size, np.int64), np.zeros(s_out.size, np.int64)])
    _, ranks = np.unique(np.concatenate([s_in, s_out]), return_inverse=True)
    return y_true, ranks


def roc_auc(scores_in: np.ndarray, scores_out: np.ndarray) -> float:
    """Area under the ROC curve of "score high = member": ``sklearn.metrics.roc_auc_score``.

    Equal to the Mann-Whitney U statistic over ``n_in * n_out``: ties count one half,
    so a test that cannot tell the worlds apart scores 0.5.

    Parameters
    ----------
    scores_in : array_like
        Scores of members (IN trials).
    scores_out : array_like
        Scores of non-members (OUT trials).

    Returns
    -------
    float
        In [0, 1]; 0.5 is chance.
    """
    return float(roc_auc_score(*_labelled(scores_in, scores_out)))


def roc_curve(scores_in: np.ndarray, scores_out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Empirical ROC of the tests "score > t" over every threshold t.

    ``sklearn.metrics.roc_curve`` with ``drop_intermediate=False``: the tests
    "score >= s" for every distinct score s, after (0, 0). Every operating point is
    kept, so that :func:`tpr_at_fpr` sees them all (scikit-learn's default drops the
    collinear ones, which can be the best below a target FPR).

    Returns
    -------
    fpr, tpr : ndarray
        Non-decreasing false and true positive rates, from (0, 0) to (1, 1).
    """
    fpr, tpr, _ = sklearn_roc_curve(*_labelled(scores_in, scores_out), drop_intermediate=False)
    return fpr, tpr


def tpr_at_fpr(scores_in: np.ndarray, scores_out: np.ndarray, fpr: float) -> float:
    """Largest TPR of a test "score > t" whose empirical FPR is at most ``fpr``.

    Read off :func:`roc_curve`: scikit-learn has no TPR at a fixed FPR. No
    interpolation between operating points: the value is achieved by one threshold.

    Parameters
    ----------
    scores_in, scores_out : array_like
    fpr : float
        In [0, 1]. With ``n`` OUT scores, rates below ``1 / n`` mean "no false
        positive at all".

    Returns
    -------
    float
    """
    if not (isinstance(fpr, (int, float)) and 0.0 <= fpr <= 1.0):
        raise ValueError(f"fpr must be in [0, 1], got {fpr!r}")
    f, t = roc_curve(scores_in, scores_out)
    return float(t[f <= fpr + 1e-15].max())


def membership_summary(scores_in: np.ndarray, scores_out: np.ndarray) -> dict:
    """AUC and TPR at 1% and 0.1% FPR of a membership test, with the sample sizes."""
    s_in, s_out = _scores(scores_in, scores_out)
    return {
        "auc": roc_auc(s_in, s_out),
        "tpr_at_1pct_fpr": tpr_at_fpr(s_in, s_out, 0.01),
        "tpr_at_0.1pct_fpr": tpr_at_fpr(s_in, s_out, 0.001),
        "n_in": int(s_in.size),
        "n_out": int(s_out.size),
    }
