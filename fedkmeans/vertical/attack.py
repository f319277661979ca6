"""A curious server reconstructs a party's feature slice from its distance reports.

The server sees, for party h and iteration t, the (decoded) report
``Y^t[i, r] ~ ||x_i - c_r^t||^2 + o_i^t`` where ``o_i^t`` is an unknown per-sample
offset (``0`` without defence, ``-min_r`` after fusion). Expanding the square,

``Y^t[i, r] = (||x_i||^2 + o_i^t) - 2 x_i . c_r^t + ||c_r^t||^2``,

so after centering each row over the k centers of one iteration the per-sample term
disappears and what is left is **linear in x_i**:

``Y~^t[i, r] = -2 x_i . (c_r^t - cbar^t) + (||c_r^t||^2 - mean_r ||c^t||^2)``.

:func:`trilaterate` solves this by least squares for all samples at once. It needs
the centers and ``k - 1 >= d_h`` affinely independent ones; it never uses the
offsets, so **fusion does not slow it down**. With the centers of iteration 0 known
(shared-seed random initialisation), :func:`known_centers_attack` recovers every
sample exactly from one exact report, and then, knowing the labels the server itself
sent, replays the later centers from its own estimate and re-solves with all
iterations (which averages randomized-response noise).

Unknown centers (:func:`unknown_centers_attack`): stack all iterations' reports
(n x kT, ``kT - 1 >= d_h`` distinct centers needed) and double-center them:
``-1/2 J Y J = Xbar Cbarᵀ`` has rank d_h, so an SVD gives X up to an invertible
d_h x d_h map M. Without fusion the per-sample term ``||x_i||^2`` is known to be a
quadratic form of the SVD coordinates, which pins ``M Mᵀ`` by linear least squares:
X is recovered up to an isometry (rotation/reflection + translation), scored after
:func:`procrustes_align`. After fusion that term is gone and X is only recovered up
to an affine map.
"""

from __future__ import annotations

import numpy as np

from fedkmeans.vertical.protocol import exact_squared_distances, update_centers

__all__ = [
    "known_centers_attack",
    "procrustes_align",
    "reconstruction_error",
    "trilaterate",
    "unknown_centers_attack",
]


def _as_stack(observed: np.ndarray) -> np.ndarray:
    y = np.asarray(observed, dtype=np.float64)
    if y.ndim == 2:
        y = y[None]
    if y.ndim != 3:
        raise ValueError(f"observed must have shape (T, n, k) or (n, k), got {y.shape}")
    return y


def trilaterate(
    observed: np.ndarray,
    centers: np.ndarray,
    noise_var: float | np.ndarray = 0.0,
    prior: tuple[float, float] | None = None,
) -> np.ndarray:
    """Least-squares positions from distances to known centers, offsets eliminated.

    Exact reports: ordinary (minimum-norm) least squares. Noisy reports with a
    prior: the MAP estimate under Gaussian noise and an isotropic Gaussian prior,
    ``min sum_t ||G_t x - b_t||^2 / s_t + ||x - mu||^2 / tau2``, which never strays
    far from the prior mean when the data say little.

    Parameters
    ----------
    observed : array_like, shape (T, n, k) or (n, k)
        Squared distances (plus any per-sample, per-iteration offset).
    centers : array_like, shape (T, k, d) or (k, d)
        The centers of each iteration.
    noise_var : float or array_like of shape (T,)
        Variance of one report value in each iteration
        (:func:`fedkmeans.vertical.defence.report_noise_variance`).
    prior : (float, float), optional
        Mean and variance of every feature (public: e.g. (0, 1) for standardised
        features). Used only when every ``noise_var`` is > 0.

    Returns
    -------
    numpy.ndarray of float64, shape (n, d)
        Minimum-norm least-squares solution (under-determined directions -- when the
        centers span fewer than d dimensions -- come out as 0), or the MAP estimate.
    """
    y = _as_stack(observed)
    c = np.asarray(centers, dtype=np.float64)
    if c.ndim == 2:
        c = c[None]
    if c.ndim != 3 or c.shape[:2] != (y.shape[0], y.shape[2]):
        raise ValueError(f"centers must have shape (T, k, d) = ({y.shape[0]}, {y.shape[2]}, d), "
                         f"got {c.shape}")
    norms = (c ** 2).sum(axis=2)                                    # (T, k)
    design = -2.0 * (c - c.mean(axis=1, keepdims=True))             # (T, k, d)
    rhs = (y - y.mean(axis=2, keepdims=True)) \
        - (norms - norms.mean(axis=1, keepdims=True))[:, None, :]  # (T, n, k)
    variances = np.broadcast_to(np.asarray(noise_var, dtype=np.float64), (y.shape[0],))
    if prior is not None and np.all(variances > 0):
        mean, tau2 = prior
        weights = 1.0 / np.sqrt(variances)
        design = design * weights[:, None, None]
        rhs = rhs * weights[:, None, None]
    design = design.reshape(-1, c.shape[2])
    rhs = rhs.transpose(0, 2, 1).reshape(-1, y.shape[1])            # (T k, n)
    if prior is not None and np.all(variances > 0):
        normal = design.T @ design + np.eye(design.shape[1]) / tau2
        solution = np.linalg.solve(normal, design.T @ rhs + mean / tau2)
        return solution.T
    solution, *_ = np.linalg.lstsq(design, rhs, rcond=None)
    return solution.T


def known_centers_attack(
    observed: np.ndarray,
    labels: np.ndarray,
    initial_centers: np.ndarray,
    refine_rounds: int = 5,
    noise_var: float | np.ndarray = 0.0,
    prior: tuple[float, float] | None = None,
) -> np.ndarray:
    """Reconstruct a slice knowing the initial centers and the server's own labels.

    Step 1 trilaterates iteration 0 (:func:`trilaterate`). Then, ``refine_rounds``
    times: replay the centers of iterations 1..T-1 from the current estimate and the
    labels (exactly as the party does), and trilaterate with every iteration.

    Parameters
    ----------
    observed : array_like, shape (T, n, k)
        Decoded reports of the party, iteration by iteration.
    labels : array_like of int, shape (T, n)
        ``labels[t]`` = the labels sent after iteration t (only ``labels[:T-1]`` used).
    initial_centers : array_like, shape (k, d)
    refine_rounds : int
        >= 0; 0 uses iteration 0 only.
    noise_var : float or array_like of shape (T,)
        Variance of a report value per iteration (0 = exact reports).
    prior : (float, float), optional
        Public per-feature mean and variance (see :func:`trilaterate`).

    Returns
    -------
    numpy.ndarray of float64, shape (n, d)
    """
    y = _as_stack(observed)
    c0 = np.asarray(initial_centers, dtype=np.float64)
    labels = np.asarray(labels)
    if refine_rounds < 0:
        raise ValueError(f"refine_rounds must be >= 0, got {refine_rounds}")
    variances = np.broadcast_to(np.asarray(noise_var, dtype=np.float64), (y.shape[0],))
    estimate = trilaterate(y[0], c0, variances[:1], prior)
    if y.shape[0] == 1 or refine_rounds == 0:
        return estimate

    def replay(x: np.ndarray) -> np.ndarray:
        centers = [c0]
        for t in range(1, y.shape[0]):
            centers.append(update_centers(x, labels[t - 1], centers[-1]))
        return np.stack(centers)

    # Keep the candidate that explains all iterations best (the server can compute
    # this misfit; a bad estimate replays bad centers and the refinement can drift).
    best, best_misfit = estimate, _misfit(y, replay(estimate), estimate, variances)
    for _ in range(refine_rounds):
        estimate = trilaterate(y, replay(estimate), variances, prior)
        misfit = _misfit(y, replay(estimate), estimate, variances)
        if misfit < best_misfit:
            best, best_misfit = estimate, misfit
    return best


def _misfit(y: np.ndarray, centers: np.ndarray, x: np.ndarray, variances: np.ndarray) -> float:
    """Weighted squared misfit of row-centered reports predicted from ``x``."""
    predicted = squared_distances_stack(x, centers)
    residual = (y - y.mean(axis=2, keepdims=True)) \
        - (predicted - predicted.mean(axis=2, keepdims=True))
    weights = 1.0 / np.where(variances > 0, variances, 1.0)
    return float(((residual ** 2).sum(axis=(1, 2)) * weights).sum())


def squared_distances_stack(x: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """Squared distances of x (n, d) to every iteration's centers (T, k, d): (T, n, k)."""
    return np.stack([exact_squared_distances(x, c) for c in centers])


def unknown_centers_attack(observed: np.ndarray, dim: int, fused: bool) -> np.ndarray:
    """Reconstruct a slice from its reports alone, up to an isometry (or affine map).

    Parameters
    ----------
    observed : array_like, shape (T, n, k)
    dim : int
        The party's number of features d_h (it announces it at registration).
    fused : bool
        True if the reports are fused (per-sample, per-iteration offsets unknown):
        only an affine reconstruction is possible; the returned frame is the SVD one.

    Returns
    -------
    numpy.ndarray of float64, shape (n, dim)
        Centered reconstruction; compare after :func:`procrustes_align`.
    """
    y = _as_stack(observed)
    t, n, k = y.shape
    if not 1 <= dim < n:
        raise ValueError(f"dim must be in [1, {n}), got {dim}")
    if fused:  # remove per-(sample, iteration) offsets: center every row of every block
        blocks = y - y.mean(axis=2, keepdims=True)
    else:
        blocks = y
    wide = blocks.transpose(1, 0, 2).reshape(n, t * k)
    centred = wide - wide.mean(axis=0, keepdims=True)
    if not fused:
        centred = centred - centred.mean(axis=1, keepdims=True)
    u, s, vt = np.linalg.svd(-0.5 * centred, full_matrices=False)
    p = u[:, :dim] * np.sqrt(s[:dim])
    if fused:
        return p
    q = vt[:dim].T * np.sqrt(s[:dim])
    # Y[i, r] + 2 p_i.q_r = p_i A p_iᵀ - 2 p_i.s + gamma_r: average over r -> f_i,
    # then f_i = p_i A p_iᵀ - 2 p_i.s + const is linear in (A, s, const).
    f = (wide + 2.0 * p @ q.T).mean(axis=1)
    iu = np.triu_indices(dim)
    quad = p[:, iu[0]] * p[:, iu[1]] * np.where(iu[0] == iu[1], 1.0, 2.0)
    design = np.hstack([quad, -2.0 * p, np.ones((n, 1))])
    coef, *_ = np.linalg.lstsq(design, f, rcond=None)
    a = np.zeros((dim, dim))
    a[iu] = coef[: iu[0].size]
    a = a + np.triu(a, 1).T
    w, v = np.linalg.eigh(a)
    w = np.clip(w, 1e-12 * max(float(w.max()), 1e-12), None)  # nearest PSD (noise)
    return p @ (v * np.sqrt(w))


def procrustes_align(estimate: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Best rotation/reflection + translation of ``estimate`` onto ``truth``.

    Parameters
    ----------
    estimate, truth : array_like, shape (n, d)

    Returns
    -------
    numpy.ndarray of float64, shape (n, d)
        The aligned estimate (orthogonal Procrustes, no scaling).
    """
    a = np.asarray(estimate, dtype=np.float64)
    b = np.asarray(truth, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"estimate and truth must have the same (n, d) shape, "
                         f"got {a.shape} and {b.shape}")
    a0, b0 = a - a.mean(axis=0), b - b.mean(axis=0)
    u, _, vt = np.linalg.svd(a0.T @ b0)
    return a0 @ (u @ vt) + b.mean(axis=0)


def reconstruction_error(estimate: np.ndarray, truth: np.ndarray, tolerance: float = 0.1) -> dict:
    """Reconstruction error relative to the spread of the slice.

    The scale is the RMS distance of the true points to their mean,
    ``s = sqrt(mean_i ||x_i - xbar||^2)``.

    Parameters
    ----------
    estimate, truth : array_like, shape (n, d)
    tolerance : float
        A sample is recovered if ``||xhat_i - x_i|| <= tolerance * s``.

    Returns
    -------
    dict
        ``rmse`` (relative: RMS of ``||xhat_i - x_i||`` over s), ``within``
        (fraction of samples recovered), ``scale`` (s).
    """
    a = np.asarray(estimate, dtype=np.float64)
    b = np.asarray(truth, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"estimate and truth must have the same (n, d) shape, "
                         f"got {a.shape} and {b.shape}")
    scale = float(np.sqrt(((b - b.mean(axis=0)) ** 2).sum(axis=1).mean()))
    errors = np.sqrt(((a - b) ** 2).sum(axis=1))
    scale_or_one = scale if scale > 0 else 1.0
    return {
        "rmse": float(np.sqrt((errors ** 2).mean()) / scale_or_one),
        "within": float(np.mean(errors <= tolerance * scale_or_one)),
        "scale": scale,
    }
