"""Pooling a noisy center with the server's mean of the same cell (post-processing).

A released center ``nu_r = m_r / n_r`` (FedDP-Init step 3, a FedDP-Lloyds step) is the
mean of the clients' points in cell r of the partition the round sent, plus noise of a
known variance. The server's points in the same cell give a second, independent
estimate of that mean, ``s_r``, noise-free but possibly biased (the server's data need
not be drawn like the clients'). The pooled center is the combination of the two that
minimises the expected squared error given the estimated variances and bias,

    c_r = nu_r + lambda_r (s_r - nu_r),   lambda_r = V_r / (V_r + W_r + B_r),

with, summed over the d coordinates,

* ``V_r = (d sigma_s^2 + |nu_r|^2 sigma_c^2) / n_r^2``: the noisy center's variance to
  first order (``nu = (S + e) / (N + f)``, ``e ~ N(0, sigma_s^2 I_d)``, ``f ~ N(0,
  sigma_c^2)``: ``nu - S / N ~ e / N - (S / N) f / N``), from the release's public
  noise standard deviations and the released ``n_r``, ``nu_r``;
* ``W_r = sum_q |q - s_r|^2 / (m_r (m_r - 1))``: the sampling variance of the server's
  mean of its ``m_r`` points of cell r, as if they were a random sample of the cell
  (public: the server's data);
* ``B_r = max(0, |s_r - nu_r|^2 - V_r - W_r)``: the squared bias of the server's mean,
  the method-of-moments estimate (``E |s - nu|^2 = V + W + bias^2`` for independent
  errors); a server whose points are drawn unlike the clients' shows it here, and its
  weight goes to 0 as its disagreement grows beyond the noise.

A cell with fewer than two server points keeps ``nu_r`` (no sampling variance to
weigh). Without noise (``sigma_s = sigma_c = 0``) every ``lambda_r`` is 0 and the
released center is returned unchanged: epsilon = inf is the non-private algorithm.
Everything here is a function of released values and the server's data, so it costs
no privacy budget (post-processing).
"""

from __future__ import annotations

import numpy as np

__all__ = ["pool_with_server"]


def pool_with_server(
    centers: np.ndarray, counts: np.ndarray, server_x: np.ndarray,
    server_cells: np.ndarray, sum_std: float, count_std: float, released: np.ndarray,
) -> np.ndarray:
    """Each released center pooled with the server's mean of its cell (module docstring).

    Parameters
    ----------
    centers : ndarray of shape (k, d)
        The round's centers ``nu_r = m_r / n_r`` (or a fallback where ``released`` is
        False).
    counts : ndarray of shape (k,)
        The released noisy counts ``n_r``.
    server_x : ndarray of shape (m, d)
        The server's data Q in the space of ``centers``.
    server_cells : ndarray of shape (m,)
        The cell of each server point in the partition the round sent (``0..k-1``).
    sum_std, count_std : float
        Standard deviation of one coordinate of the sums' and of the counts' noise.
    released : ndarray of shape (k,), bool
        Which centers are ``m_r / n_r`` (the others are fallbacks, kept as they are).

    Returns
    -------
    ndarray of shape (k, d)
    """
    out = np.array(centers, dtype=np.float64, copy=True)
    if not (sum_std > 0 or count_std > 0):
        return out
    d = centers.shape[1]
    for r in np.flatnonzero(released):
        members = server_x[server_cells == r]
        m = members.shape[0]
        if m < 2 or not counts[r] > 0:
            continue
        mean = members.mean(axis=0)
        noise = (d * sum_std**2 + float(centers[r] @ centers[r]) * count_std**2) / counts[r]**2
        sampling = float(((members - mean) ** 2).sum()) / (m * (m - 1))
        gap = float(((mean - centers[r]) ** 2).sum())
        bias = max(0.0, gap - noise - sampling)
        total = noise + sampling + bias
        if total > 0 and np.isfinite(total):
            out[r] = centers[r] + noise / total * (mean - centers[r])
    return out
