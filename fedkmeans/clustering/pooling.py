"""Pooling a noisy center with the server's mean of the same cell (post-processing).

A released center ``nu_r = m_r / n_r`` (FedDP-Init step 3, a FedDP-Lloyds step) is the
mean of the clients' points in cell r of the partition the round sent, plus noise of a
known variance. The server's points in the same cell give a second, independent
estimate of that mean, ``s_r``, noise-free but possibly biased (the server's data need
not be drawn like the clients'). Coordinate by coordinate j, the pooled center is the
combination of the two that minimises the expected squared error given the estimated
variances and bias,

    c_rj = nu_rj + lambda_rj (s_rj - nu_rj),   lambda_rj = V_rj / ((V_rj + W_rj) kappa_r),

with

* ``V_rj = (sigma_s^2 + nu_rj^2 sigma_c^2) / n_r^2``: the noisy center's variance to
  first order (``nu = (S + e) / (N + f)``, ``e ~ N(0, sigma_s^2 I_d)``, ``f ~ N(0,
  sigma_c^2)``: ``nu - S / N ~ e / N - (S / N) f / N``), from the release's public
  noise standard deviations and the released ``n_r``, ``nu_r``;
* ``W_rj = sum_q (q_j - s_rj)^2 / (m_r (m_r - 1))``: the sampling variance of the
  server's mean of its ``m_r`` points of cell r, as if they were a random sample of the
  cell (public: the server's data); a cell with one server point takes the pooled
  within-cell variance of the cells with two or more, ``sum_r sum_q (q_j - s_rj)^2 /
  sum_r (m_r - 1)`` (a small cluster the server sampled once is where pooling helps
  most);
* ``kappa_r = max(1, (1/d) sum_j (s_rj - nu_rj)^2 / (V_rj + W_rj))``: how much more the
  two disagree than their variances explain (``E (s - nu)^2 = V + W + bias^2`` for
  independent errors: each term is about 1 without bias). A server whose points are
  drawn unlike the clients' shows it here, and its weight goes to 0 as its disagreement
  grows beyond the noise. Taking the bias as kappa_r - 1 times the variances in every
  coordinate keeps the per-coordinate weights (features on scales 1e-2 .. 1e2: the
  server's mean is exact on the small ones and worthless on the large ones, while the
  noise is the same in every coordinate: one weight for the whole center would take
  the server's mean where it is worst); on equal coordinates it is the
  method-of-moments weight ``V / (V + W + B)`` with ``B = max(0, |s - nu|^2 - V - W)``
  summed over coordinates.

The clients clip each point to the data radius Delta before they sum it, so ``nu_r``
estimates the mean of the cell's *clipped* points; a small cluster far from the data's
center can lie wholly beyond Delta (the radius is a 99 % quantile of the norms: a
cluster of 1 % of the points, uneven-cluster family, 1:50), and its mean is then
pulled towards the origin by the clip, not by noise. The server therefore compares
like with like: ``s_r``, ``W_r`` and ``kappa_r`` are of its points clipped to Delta, and
the pooled center adds back the server's estimate of the clip's shift of the cell's
mean, ``delta_r = median(q - clip(q))`` (coordinate-wise) over its points of the cell:
the median, because a few far server points in a cell whose clients lie within Delta
(a server drawn unlike the clients: the federations' ``missing-*`` sets, whose server
data holds uniform points over the clients' bounding box) would move a mean of the
shifts (with the mean, the protocol's own answer at data-point eps = 1 on ``missing-0``
went from 1.001 to 1.016 x optimal: ``federations.md`` of commit 7bd8072), while a
cluster wholly beyond Delta moves the median with it; in proportion
to how well the cell agrees with the clients' (``1 / kappa_r``: 1 when the disagreement
is within the noise, towards 0 for a server drawn unlike the clients):

    c_r = nu_r + lambda_r (s_r - nu_r) + delta_r / kappa_r.

``delta_r`` is 0 for a cell with at most half its server points beyond Delta.

A cell without server points, or with one when no cell has two, keeps ``nu_r``. Without
noise (``sigma_s = sigma_c = 0``) every ``lambda_rj`` is 0 and the released center is
returned unchanged: epsilon = inf is the non-private algorithm. Everything here is a
function of released values and the server's data, so it costs no privacy budget (post-
processing).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["pool_with_server"]


def pool_with_server(
    centers: np.ndarray, counts: np.ndarray, server_x: np.ndarray,
    server_cells: np.ndarray, sum_std: float, count_std: float, released: np.ndarray,
    radius: float = math.inf,
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
    radius : float, default=inf
        The data radius Delta the clients clipped their points to.

    Returns
    -------
    ndarray of shape (k, d)
    """
    out = np.array(centers, dtype=np.float64, copy=True)
    if not (sum_std > 0 or count_std > 0):
        return out
    k, d = centers.shape
    sizes = np.bincount(server_cells, minlength=k)[:k]
    norms = np.sqrt(np.einsum("ij,ij->i", server_x, server_x))
    beyond = norms > radius
    clipped = server_x
    if beyond.any():
        factor = np.minimum(1.0, radius / np.maximum(norms, np.finfo(float).tiny))
        clipped = server_x * factor[:, None]
    # the median shift of a cell is 0 unless at least half its points are beyond Delta
    far = 2 * np.bincount(server_cells[beyond], minlength=k)[:k] >= np.maximum(sizes, 1)
    # per-cell sums as one (k, m) x (m, d) product (np.add.at is ~50 x slower on a
    # large Q, and this runs in every round of every simulated run of the tuning)
    member = np.zeros((k, server_x.shape[0]))
    member[server_cells, np.arange(server_x.shape[0])] = 1.0
    means = member @ clipped / np.maximum(sizes, 1)[:, None]
    within = member @ (clipped - means[server_cells]) ** 2
    freedom = float(np.maximum(sizes - 1, 0).sum())
    pooled = within.sum(axis=0) / freedom if freedom > 0 else np.full(d, math.nan)
    for r in np.flatnonzero(released):
        m = int(sizes[r])
        spread = within[r] / (m - 1) if m >= 2 else pooled
        if m == 0 or not counts[r] > 0 or not np.all(np.isfinite(spread)):
            continue
        noise = (sum_std**2 + centers[r] ** 2 * count_std**2) / counts[r] ** 2
        both = noise + spread / m
        gap = (means[r] - centers[r]) ** 2
        known = both > 0
        if not known.any():
            continue
        inflation = max(1.0, float(np.sum(gap[known] / both[known])) / int(known.sum()))
        if not math.isfinite(inflation):
            continue
        weight = np.divide(noise, both * inflation, out=np.zeros(d), where=known)
        out[r] = centers[r] + weight * (means[r] - centers[r])
        if far[r]:
            own = server_cells == r
            out[r] += np.median(server_x[own] - clipped[own], axis=0) / inflation
    return out
