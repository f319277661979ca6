"""Label inference on the released model: recover its Voronoi partition from queries.

Threat model 1, weakened (docs/facts.md, "Outsider: threat model 1, weakened"): an
*outsider* who cannot see the centers but may submit points to a deployed model and read
each point's cluster label (the index of its nearest center). It trains a classifier
(multinomial logistic regression: a Voronoi partition is a linear multiclass rule) on
its queries and their labels. Query sampling strategies:

* ``uniform``: i.i.d. uniform in a public box (e.g. the coordinate bounds of the
  server's public data);
* ``distance``: distance-based active sampling: after a uniform start, each batch is
  the candidates (drawn uniformly) with the smallest distance to the current
  classifier's decision boundary between its two most likely labels;
* ``stable``: stable-label sampling: each candidate is submitted with
  ``perturbations`` small Gaussian perturbations (std ``radius`` times the box side)
  and kept only if every copy gets the same label, so that the classifier trains on
  labels that do not flip under small changes (or, online, under retraining). Every
  submitted copy counts as a query.

Success metric: accuracy of the classifier against the model's true labels on test
points (agreement of the recovered partition with the real one) as a function of the
number of queries. The released model is post-processing of DP releases, so a
high accuracy here is expected with or without DP: it recovers the model, not
the training data.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

from fedkmeans.clustering.client_stats import nearest_center

__all__ = ["STRATEGIES", "LabelOracle", "label_inference_curve", "sample_queries"]

STRATEGIES = ("uniform", "distance", "stable")


class LabelOracle:
    """The deployed model: returns nearest-center labels and counts the queries."""

    def __init__(self, centers: np.ndarray) -> None:
        centers = np.asarray(centers, dtype=np.float64)
        if centers.ndim != 2 or centers.shape[0] < 1:
            raise ValueError(f"centers must have shape (k, d) with k >= 1, got {centers.shape}")
        self._centers = centers
        self.queries = 0

    @property
    def dim(self) -> int:
        """Dimension d of the queries."""
        return self._centers.shape[1]

    def __call__(self, points: np.ndarray) -> np.ndarray:
        """Labels of ``points`` (n, d); adds n to :attr:`queries`."""
        points = np.asarray(points, dtype=np.float64)
        if points.ndim != 2 or points.shape[1] != self.dim:
            raise ValueError(f"points must have shape (n, {self.dim}), got {points.shape}")
        self.queries += points.shape[0]
        return nearest_center(points, self._centers)

    def truth(self, points: np.ndarray) -> np.ndarray:
        """Labels for evaluation (not counted as queries)."""
        return nearest_center(np.asarray(points, dtype=np.float64), self._centers)


class _Classifier:
    """Multinomial logistic regression that also handles a single observed label."""

    def __init__(self, x: np.ndarray, y: np.ndarray, seed: int) -> None:
        self.labels = np.unique(y)
        self.model = None
        if self.labels.size > 1:
            self.model = LogisticRegression(C=100.0, max_iter=300, random_state=seed)
            # Small problems: one BLAS thread is faster, and much faster on a busy machine.
            # Separable labels never fully converge; max_iter bounds the cost.
            with threadpool_limits(limits=1), warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                self.model.fit(x, y)

    def predict(self, x: np.ndarray) -> np.ndarray:
        if self.model is None:
            return np.full(x.shape[0], self.labels[0] if self.labels.size else 0)
        return self.model.predict(x)

    def boundary_distance(self, x: np.ndarray) -> np.ndarray:
        """Distance of each point to the boundary between its two most likely labels."""
        if self.model is None or self.labels.size < 2:
            return np.zeros(x.shape[0])
        scores = self.model.decision_function(x)
        w = self.model.coef_
        if scores.ndim == 1:  # two labels: one hyperplane
            return np.abs(scores) / max(float(np.linalg.norm(w[0])), 1e-12)
        order = np.argsort(scores, axis=1)
        first, second = order[:, -1], order[:, -2]
        rows = np.arange(x.shape[0])
        gap = scores[rows, first] - scores[rows, second]
        norm = np.linalg.norm(w[first] - w[second], axis=1)
        return gap / np.maximum(norm, 1e-12)


def _validate_box(lower: np.ndarray, upper: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray]:
    lower = np.asarray(lower, dtype=np.float64)
    upper = np.asarray(upper, dtype=np.float64)
    if lower.shape != (dim,) or upper.shape != (dim,):
        raise ValueError(
            f"lower and upper must have shape ({dim},), got {lower.shape} and {upper.shape}"
        )
    if not np.all(upper > lower):
        raise ValueError("upper must be > lower in every coordinate")
    return lower, upper


def sample_queries(
    oracle: LabelOracle,
    strategy: str,
    budget: int,
    lower: np.ndarray,
    upper: np.ndarray,
    rng: np.random.Generator,
    *,
    perturbations: int = 2,
    radius: float = 0.02,
    checkpoints: Sequence[int] = (),
    on_checkpoint=None,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Spend ``budget`` queries with ``strategy``; return the training set it collected.

    Parameters
    ----------
    oracle : LabelOracle
    strategy : {"uniform", "distance", "stable"}
    budget : int
        Number of queries (>= 1); every submitted point counts.
    lower, upper : ndarray of shape (d,)
        The public box queries are drawn from.
    rng : numpy.random.Generator
    perturbations : int
        ``stable``: perturbed copies per candidate (>= 1).
    radius : float
        ``stable``: perturbation std as a fraction of the box side (> 0).
    checkpoints : sequence of int
        Query counts at which ``on_checkpoint(x, y)`` is called with the training set.
    on_checkpoint : callable, optional
    seed : int
        Integer seed of the classifier of the ``distance`` strategy.

    Returns
    -------
    x : ndarray of shape (n, d)
    y : ndarray of shape (n,)
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget < 1:
        raise ValueError(f"budget must be an integer >= 1, got {budget!r}")
    if isinstance(perturbations, bool) or perturbations < 1:
        raise ValueError(f"perturbations must be an integer >= 1, got {perturbations!r}")
    if not radius > 0:
        raise ValueError(f"radius must be > 0, got {radius!r}")
    lower, upper = _validate_box(lower, upper, oracle.dim)
    pending = sorted(c for c in set(checkpoints) if 0 < c <= budget)
    xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    spent = 0

    def uniform(n: int) -> np.ndarray:
        return rng.uniform(lower, upper, size=(n, oracle.dim))

    def add(x: np.ndarray, y: np.ndarray, cost: int) -> None:
        nonlocal spent
        xs.append(x)
        ys.append(y)
        spent += cost
        while pending and pending[0] <= spent:
            pending.pop(0)
            if on_checkpoint is not None:
                on_checkpoint(np.concatenate(xs), np.concatenate(ys))

    if strategy == "uniform":
        # One query at a time in effect; batched so that checkpoints land exactly.
        marks = [*pending, budget]
        for stop in marks:
            if stop > spent:
                x = uniform(stop - spent)
                add(x, oracle(x), x.shape[0])
    elif strategy == "distance":
        start = min(budget, 20, *(pending[:1]))
        x = uniform(start)
        add(x, oracle(x), start)
        while spent < budget:
            batch = min(budget - spent, max(start, spent // 2))
            if pending:
                batch = min(batch, max(pending[0] - spent, 1))
            model = _Classifier(np.concatenate(xs), np.concatenate(ys), seed)
            pool = uniform(10 * batch)
            chosen = pool[np.argsort(model.boundary_distance(pool), kind="stable")[:batch]]
            add(chosen, oracle(chosen), batch)
    else:
        side = (upper - lower) * radius
        per = perturbations + 1
        while spent + per <= budget:
            n = (budget - spent) // per
            if pending:
                n = min(n, max((pending[0] - spent) // per, 1))
            centers = uniform(n)
            copies = centers[:, None, :] + rng.normal(size=(n, perturbations, oracle.dim)) * side
            labels = oracle(np.concatenate([centers[:, None, :], copies], axis=1).reshape(
                n * per, oracle.dim)).reshape(n, per)
            stable = np.all(labels == labels[:, :1], axis=1)
            add(centers[stable], labels[stable, 0], n * per)
        if spent < budget:  # leftover queries cannot form a full candidate
            spent = budget
            while pending:
                pending.pop(0)
                if on_checkpoint is not None and xs:
                    on_checkpoint(np.concatenate(xs), np.concatenate(ys))
    if not xs:
        return np.zeros((0, oracle.dim)), np.zeros(0, dtype=np.int64)
    return np.concatenate(xs), np.concatenate(ys)


def label_inference_curve(
    centers: np.ndarray,
    test_points: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    strategy: str,
    budgets: Sequence[int],
    rng: np.random.Generator,
    *,
    seed: int = 0,
    **kwargs,
) -> list[dict]:
    """Accuracy of the recovered partition after each number of queries in ``budgets``.

    Parameters
    ----------
    centers : ndarray of shape (k, d)
        The released model (only used through the label oracle).
    test_points : ndarray of shape (n, d)
        Where the recovered partition is compared with the true one.
    lower, upper : ndarray of shape (d,)
        Public query box.
    strategy : {"uniform", "distance", "stable"}
    budgets : sequence of int
        Increasing query counts (>= 1).
    rng : numpy.random.Generator
    seed : int
        Integer seed of the classifiers.
    **kwargs
        ``perturbations`` and ``radius`` of :func:`sample_queries`.

    Returns
    -------
    list of dict
        ``{"queries": n, "accuracy": a, "training_points": m}`` per budget.
    """
    budgets = sorted({int(b) for b in budgets})
    if not budgets or budgets[0] < 1:
        raise ValueError(f"budgets must be non-empty integers >= 1, got {budgets!r}")
    oracle = LabelOracle(centers)
    test_points = np.asarray(test_points, dtype=np.float64)
    truth = oracle.truth(test_points)
    curve: list[dict] = []

    def evaluate(x: np.ndarray, y: np.ndarray) -> None:
        model = _Classifier(x, y, seed)
        accuracy = float(np.mean(model.predict(test_points) == truth)) if x.size else 0.0
        curve.append({
            "queries": budgets[len(curve)], "accuracy": accuracy, "training_points": len(y),
        })

    sample_queries(
        oracle, strategy, budgets[-1], lower, upper, rng,
        checkpoints=budgets, on_checkpoint=evaluate, seed=seed, **kwargs,
    )
    while len(curve) < len(budgets):  # nothing collected at some checkpoints
        curve.append({"queries": budgets[len(curve)], "accuracy": 0.0, "training_points": 0})
    return curve
