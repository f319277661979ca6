"""The server's small k-means: every restart at once in NumPy against scikit-learn's KMeans.

    python benchmarks/server_kmeans.py [--problems 20] [--repeats 5]

The server runs weighted k-means with 10 restarts on small point sets: the projected
server data in FedDP-Init step 2 (a few hundred points in k dimensions, noisy weights
of which some are 0), the check's k-means on Q (d dimensions), the spare centers'
merge (k + e points) and the clusters of the public simulation. For each shape below,
``--problems`` random mixtures (k components, unit noise, exponential weights with 30 %
set to 0) are clustered by :func:`fedkmeans.clustering.restarts.kmeans_restarts` and
by scikit-learn's ``KMeans(n_clusters=k, n_init=10)`` with the same integer seed, both
on one BLAS/OpenMP thread (the tuning's setting). Reported per shape: the median time
of a call (the fastest of ``--repeats`` per problem), and the weighted cost of each
answer over scikit-learn's (median, smallest and largest over the problems).

Writes docs/results/server-kmeans.{csv,md}.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
from results_table import write_tables
from threadpoolctl import threadpool_limits

from fedkmeans.clustering.restarts import kmeans_restarts

OUT = Path(__file__).resolve().parents[1] / "docs" / "results"
#: (what it stands for, points, dimensions, k)
SHAPES = (
    ("step 2: projected Q, k = 10", 300, 10, 10),
    ("step 2 with spare centers, k = 12", 300, 10, 12),
    ("the check: k-means on Q, d = 100", 300, 100, 10),
    ("step 2: projected Q, k = 20", 150, 20, 20),
    ("merge: 12 centers into 10", 12, 20, 10),
    ("a larger Q: 2,000 points, d = 20", 2000, 20, 10),
    ("5,000 points, d = 50 (about the batched limit)", 5000, 50, 10),
    ("20,000 points, d = 100 (beyond it: scikit-learn)", 20000, 100, 10),
)


def problem(points: int, dim: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A weighted mixture: k Gaussian components, exponential weights, 30 % of them 0."""
    rng = np.random.default_rng(seed)
    means = rng.normal(size=(k, dim)) * rng.uniform(1.0, 4.0)
    x = means[rng.integers(k, size=points)] + rng.normal(size=(points, dim))
    w = rng.exponential(size=points) * (rng.random(points) > 0.3)
    if np.count_nonzero(w) < k:
        w[:k] = 1.0
    return x, w


def cost(x: np.ndarray, centers: np.ndarray, w: np.ndarray) -> float:
    """Weighted k-means cost: sum_i w_i min_c ||x_i - c||^2."""
    return float((((x[:, None, :] - centers[None]) ** 2).sum(axis=2).min(axis=1)) @ w)


def fastest(call, repeats: int) -> tuple[float, np.ndarray]:
    """The fastest of ``repeats`` calls, and the answer."""
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = call()
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--problems", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from sklearn.cluster import KMeans

    rows = []
    with threadpool_limits(limits=1):
        for name, points, dim, k in SHAPES:
            ours_s, theirs_s, ratios = [], [], []
            for seed in range(args.problems):
                x, w = problem(points, dim, k, seed)
                t_ours, c_ours = fastest(lambda x=x, w=w, k=k, seed=seed: kmeans_restarts(
                    x, k, np.random.default_rng(seed), sample_weight=w), args.repeats)
                t_theirs, c_theirs = fastest(lambda x=x, w=w, k=k, seed=seed: KMeans(
                    n_clusters=k, n_init=10, random_state=seed).fit(
                    x, sample_weight=w).cluster_centers_, args.repeats)
                ours_s.append(t_ours)
                theirs_s.append(t_theirs)
                ratios.append(cost(x, c_ours, w) / cost(x, c_theirs, w))
            rows.append({
                "problem": name, "points": points, "dim": dim, "k": k,
                "problems": args.problems,
                "restarts_ms": round(1e3 * statistics.median(ours_s), 2),
                "scikit_learn_ms": round(1e3 * statistics.median(theirs_s), 2),
                "speed_up": round(statistics.median(theirs_s) / statistics.median(ours_s), 2),
                "cost_ratio_median": round(statistics.median(ratios), 4),
                "cost_ratio_min": round(min(ratios), 4),
                "cost_ratio_max": round(max(ratios), 4),
            })
            print(rows[-1], flush=True)
    write_tables(OUT, "server-kmeans", (
        f"Measured by `python benchmarks/server_kmeans.py --problems {args.problems} "
        f"--repeats {args.repeats}` on 2 cores, one BLAS/OpenMP thread: weighted k-means "
        "with 10 restarts on random weighted mixtures (30 % of the weights 0), "
        "`clustering.restarts.kmeans_restarts` (every restart at once in NumPy) against "
        "scikit-learn's `KMeans(n_init=10)` with the same integer seed. Times: the "
        "median over the problems of the fastest call of each; *cost_ratio*: the "
        "weighted cost of the restarts' answer over scikit-learn's (below 1: better)."),
        rows)


if __name__ == "__main__":
    main()
