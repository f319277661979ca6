"""Data-point (or client) reconstruction by differencing two releases.

Two releases of per-cluster sums and counts that differ only by one target unit
(a data point at data-point level, a client at client level): the published
evaluation of FedDP-KMeans takes the cluster whose count grew most and reads the
difference of that cluster's sums as the target (divided by the count difference
when the unit is a whole client, which gives the client's mean of that cluster).

It applies to both views (docs/facts.md, "Threat models"):

* threat model 2, *curious server*: the two releases are the target client's own
  replies (no noise under central DP), so the difference is the point exactly;
* threat model 1, *analyst*: the two releases are the noisy aggregates the server
  publishes; with fresh noise in each, the difference is the target plus the
  difference of two noise draws.

Success metric: cosine similarity of the estimate with the true target (the point as
the protocol used it; at client level the client's true mean of the chosen cluster),
reported with its absolute value (chance is ``|cos| ~ 0``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["combine_runs", "difference_attack", "leading_direction"]


def difference_attack(
    sums_with: np.ndarray,
    counts_with: np.ndarray,
    sums_without: np.ndarray,
    counts_without: np.ndarray,
) -> tuple[np.ndarray, int]:
    """Estimate the target from releases with and without it.

    Parameters
    ----------
    sums_with, sums_without : ndarray of shape (k, d) or (trials, k, d)
        Released per-cluster sums with and without the target.
    counts_with, counts_without : ndarray of shape (k,) or (trials, k)
        Released counts.

    Returns
    -------
    estimate : ndarray of shape (d,) or (trials, d)
        ``(sums_with[r] - sums_without[r]) / max(counts_with[r] - counts_without[r], 1)``
        for the cluster ``r`` with the largest count difference (ties: lowest index).
    cluster : int or ndarray of shape (trials,)
        That cluster.
    """
    sw, sn = np.asarray(sums_with, np.float64), np.asarray(sums_without, np.float64)
    cw, cn = np.asarray(counts_with, np.float64), np.asarray(counts_without, np.float64)
    if sw.shape != sn.shape or sw.ndim not in (2, 3):
        raise ValueError(
            "sums_with and sums_without must have the same shape (k, d) or (trials, k, d), "
            f"got {sw.shape} and {sn.shape}"
        )
    if cw.shape != cn.shape or cw.shape != sw.shape[:-1]:
        raise ValueError(
            f"counts_with and counts_without must have shape {sw.shape[:-1]}, got "
            f"{cw.shape} and {cn.shape}"
        )
    single = sw.ndim == 2
    if single:
        sw, sn, cw, cn = sw[None], sn[None], cw[None], cn[None]
    count_diff = cw - cn
    cluster = np.argmax(count_diff, axis=1)
    rows = np.arange(sw.shape[0])
    scale = np.maximum(count_diff[rows, cluster], 1.0)
    estimate = (sw[rows, cluster] - sn[rows, cluster]) / scale[:, None]
    if single:
        return estimate[0], int(cluster[0])
    return estimate, cluster


def combine_runs(
    noisy_1: np.ndarray, sigma_1: float, noisy_2: np.ndarray, sigma_2: float
) -> np.ndarray:
    """Cancel the noise of two releases of the same sum, if it is the same draw scaled.

    Two runs on the same data whose noise came from the same stream (a fixed noise
    seed) release ``S + sigma_1 g`` and ``S + sigma_2 g``; then
    ``(sigma_2 y_1 - sigma_1 y_2) / (sigma_2 - sigma_1) = S`` exactly. With fresh noise
    in each run the result is ``S`` plus noise of standard deviation
    ``sqrt(sigma_1^2 sigma_2^2 * 2) / |sigma_2 - sigma_1|`` per entry.

    Parameters
    ----------
    noisy_1, noisy_2 : ndarray, same shape
        The two releases.
    sigma_1, sigma_2 : float
        Their noise scales (from the ledger), ``sigma_1 != sigma_2``.

    Returns
    -------
    ndarray
        The estimate of ``S``.
    """
    if sigma_1 == sigma_2:
        raise ValueError("the two releases need different noise scales")
    return (sigma_2 * np.asarray(noisy_1) - sigma_1 * np.asarray(noisy_2)) / (sigma_2 - sigma_1)


def leading_direction(matrix: np.ndarray) -> np.ndarray:
    """Unit eigenvector of the largest eigenvalue of a symmetric (d, d) matrix.

    The estimate of a target ``p`` from an estimate of ``p p^T`` (sign arbitrary:
    score it with ``|cos|``).
    """
    sym = (np.asarray(matrix, np.float64) + np.asarray(matrix, np.float64).T) / 2.0
    _, vectors = np.linalg.eigh(sym)
    return vectors[:, -1]
