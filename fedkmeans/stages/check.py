"""The final private check: the protocol's centers, or k-means on the server's data alone.

One optional round after FedDP-Lloyds (``privacy.check-share`` > 0, FedDP-KMeans with
a fixed k, private runs only). The server sends two center sets, A, the protocol's
final centers, and B, k-means on its own data Q (:func:`server_only_centers`, the
``server-lloyds`` answer, public), and two clips, a wide one tau and a narrow one
tau_n <= tau. Every client answers with two numbers, each in units of its clip,

    D_j = sum_{p in client j} clip(d(p, A)^2 - d(p, B)^2, -tau, tau) / tau
    N_j = sum_{p in client j} clip(d(p, A)^2 - d(p, B)^2, -tau_n, tau_n) / tau_n,

over the client's points before the clip to the data radius (mapped by the public
transform, the space of A and B; ``NodeData.arithmetic.cost_differences``). The server
releases the vector ``(sum_j D_j, sum_j N_j)`` once, with Gaussian noise on the whole
check share (one release, so each coordinate has the noise one release of the share
has, not that of half a share: the calibration splits epsilon linearly in the weights,
and two releases of half the weight each had 1.34 x this noise per coordinate, at half
the zCDP cost; below), multiplies each coordinate by its clip (post-processing) and answers
with A only if
the wide sum is below ``-z sigma`` (``z = CHOICE_STDS``, the standard normal
``1 - CHOICE_ERROR`` quantile), the wide release can reach ``POWER_STDS`` of its sigmas
at all (:func:`largest_unit_sum`), and either the narrow sum confirms (below ``-z
sigma_n``) or the wide sum is below ``-STRONG_STDS sigma`` and the narrow one does not
show B cheaper (not above ``+z sigma_n``); with B otherwise. At epsilon = inf the
round does not run (the non-private algorithm has no check).

The two clips (both public: A is post-processing of the earlier releases, B and Q are
the server's):

* wide, tau (``privacy.check-clip``; ``auto``: :func:`check_clip`): the largest cost
  difference a point can have within r of its nearest center of A and B, with r^2 the
  median squared distance of Q to A and B. For a center c of A or B let ``t_c`` be its
  squared distance to the other set. A point p whose nearest center of A and B is c, at
  distance e from it, has ``d(p, own set of c) <= e`` and ``d(p, other set) >= e``, and
  ``d(p, other set) <= e + sqrt(t_c)``; so its difference lies between
  ``-(t_c + 2 e sqrt(t_c))`` and 0 when c is in A, between 0 and that bound when c is
  in B. ``tau = max_c (t_c + 2 r sqrt(t_c))`` clips no term of a point within r of its
  nearest center: the wide sum is the true cost difference up to the far tail. It
  grows with how far A and B are apart: a cluster one set has and the other misses or
  merges makes it large (and its noise with it), two nearly equal sets make it small.
* narrow, tau_n (:func:`typical_clip`): the median squared distance of Q to B, the
  typical cost of one point. Clipped there, most terms of a set that is worse almost
  everywhere count +-tau_n: nearly a sign test, powerful exactly where the wide test has
  little power (A's centers far off everywhere make tau large). It confirms A where the
  wide sum shows A better by less than ``2 z`` of its sigmas, and vetoes A where it
  shows B better.

The reach: each point adds at most 1 to a sum in units of its clip, so the sum is at
most the number of points (:func:`largest_unit_sum`, from the estimate round's noisy
counts). A release that cannot reach ``POWER_STDS = 2 z`` of its noise standard
deviations is noise whatever the data; then A is never returned (at client level with
100 clients and eps = 0.5 the reach was 0.17 sigma).

The error bound: whenever B is at least as cheap as A on the clients' data in the wide
clipped cost, the run answers with A with probability at most ``Phi(-z) =
CHOICE_ERROR``: every branch that returns A needs the wide sum below ``-z sigma`` (the
narrow sum and the reach only ever turn A into B). The wide clipped cost
is the cost the user gets up to the points beyond r of every center, so the returned
centers are worse than the server-only answer in true cost, up to those points, with
probability at most 5 %, at every epsilon and delta; the price is that A must win by
``z sigma``, and sigma grows with how far A and B are apart. An earlier version released
only the narrow sum (tau = the median): on uneven clusters (make_blobs, sizes 1:50) the
points of a cluster one answer missed or merged counted at most tau_n each, and the
choice kept protocol centers 10 % worse than the server's or threw away an 18 % gain.
The wide sum alone returned protocol centers at 3.8 x optimal in one of two runs where
its release could not reach its bar (client level, eps = 0.5): hence the reach. Requiring
both sums below ``-z`` threw away a 1.42 x gain that only the wide sum saw (-5.3 sigma;
a cluster the server's data lacks, found by the protocol); letting the narrow sum only
veto returned protocol centers at 2.78 x optimal on a wide sum of -1.88 sigma (client
level, eps = 3; 1 of 360 runs): hence the strong branch at ``2 z``, chosen by replaying
the released margins of those 420 runs (``docs/tuning.md``, step 3).

Sensitivity of ``cost_difference``, the vector ``(D_j, N_j)`` (shape (2,), norm l2;
one release):

* data-point level: one point of a client adds or removes one term in each coordinate,
  which the clips keep in ``[-1, 1]`` in units of each clip, whatever clips the server
  sent: ``(l1, l2) = (2, sqrt 2)`` per point. The server's l2 clip of a client's vector
  to ``n_max sqrt 2`` is a projection onto a convex set (1-Lipschitz), so the clipped
  sum moves by at most **sqrt 2** in l2 (:mod:`fedkmeans.privacy.budget`); the noise
  standard deviation of each coordinate in cost units is its clip times the unit
  release's.
* client level: each client clips its vector in l2 to ``sqrt 2 C``, ``C =
  max-points-per-client`` (the largest client, each point at both clips: ``|D_j|,
  |N_j| <= C``, so an honest client of at most C points is never clipped), and the
  server re-clips; adding or removing a client moves the sum by at most **sqrt 2 C**.

Against the two releases of half the share each before (sensitivity 1, resp. C, each):
the same zCDP per unit of noise (``rho = Delta^2 / (2 sigma^2)``: ``2 / (2 sigma^2)``
for the pair, ``(sqrt 2)^2 / (2 sigma^2)`` for the vector), but the calibration splits
epsilon linearly in the weights, which gave each half-share release more noise than
one release of the whole share has per coordinate. With the paper's split, share 0.1, T = 1 and
epsilon 0.5 to 3 at both levels (:func:`fedkmeans.privacy.calibration.calibrate`),
each coordinate's noise is 0.746 x the pair's, the check's part of the composed zCDP
goes from 0.3-0.6 % to 0.6-1.1 %, and every other release's noise grows by 0.3-0.4 %.

A clip that depends on A does not change these: the sensitivity is that of the unit
statistic, fixed before the round; the clip only sets the unit (an adaptive choice of
a post-processing of earlier releases, composed by the accountant as usual).

Why a private choice and not a public guard: a simulation resamples clients from Q
and cannot see how the clients' data differs from Q, so a few percent of the budget
decide on the real data.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtri

from fedkmeans.clustering import kmeans
from fedkmeans.clustering.distances import BLOCK, nearest_squared_distances
from fedkmeans.clustering.repair import swap_repair
from fedkmeans.config import AUTO, PrivacySettings
from fedkmeans.privacy.registry import GAUSSIAN
from fedkmeans.stages.context import StageContext
from fedkmeans.stages.spec import ReleaseRule, Stage, Statistic, check_runs, register

__all__ = ["CHECK", "CHOICE_ERROR", "CHOICE_STDS", "COST_DIFFERENCE", "POWER_STDS",
           "STRONG_STDS", "check_clip",
           "check_clip_of", "check_runs", "cost_differences", "final_check",
           "largest_unit_sum", "returns_protocol", "server_only_centers",
           "typical_clip"]


#: Largest probability that the choice returns the protocol's centers when k-means on the
#: server's data is at least as cheap on the clients' clipped cost.
CHOICE_ERROR = 0.05
#: The protocol's centers are returned only if the noisy cost difference is below minus
#: this many noise standard deviations (``scipy.stats.norm.isf(CHOICE_ERROR)``, which SciPy
#: computes as ``-ndtri``: the same bits without importing scipy.stats, ~1 s).
CHOICE_STDS = float(-ndtri(CHOICE_ERROR))
#: The protocol's centers are returned only if the largest value the wide release could
#: take (every point at its clip in A's favour) is this many of its noise standard
#: deviations: a release that can reach less is noise whatever the data, and at that
#: reach a full-strength difference clears the bar with probability 95 %.
POWER_STDS = 2.0 * CHOICE_STDS


#: Where the narrow sum does not confirm the protocol's centers (it is above ``-z``), the
#: wide sum must show them better by this many of its standard deviations, and the narrow
#: one must not show B better by ``z`` (module docstring).
STRONG_STDS = 2.0 * CHOICE_STDS


def returns_protocol(wide: float, narrow: float, reach: float) -> bool:
    """The decision, from the two margins and the reach, each in its noise standard deviations.

    A (True) only if ``reach >= POWER_STDS`` and ``wide < -z``, and ``narrow < -z`` or
    (``wide < -STRONG_STDS`` and ``narrow < z``); ``z = CHOICE_STDS``.
    """
    return bool(reach >= POWER_STDS and wide < -CHOICE_STDS and (
        narrow < -CHOICE_STDS or (wide < -STRONG_STDS and narrow < CHOICE_STDS)))


def largest_unit_sum(estimates, privacy: PrivacySettings) -> float:
    """The largest absolute value of a check sum in units of its clip, from released counts.

    Each point adds at most 1 and each client at most ``max-points-per-client``, so the
    sum is at most the number of points: at data-point level the estimate round's noisy
    number of points, at client level its noisy number of clients times
    ``max-points-per-client`` (post-processing of that release). ``inf`` without an
    estimate round (no gate: the run declared its settings).
    """
    if estimates is None:
        return math.inf
    if privacy.level == "datapoint":
        total = float(estimates.total_points)
    else:
        total = float(estimates.num_clients) * float(privacy.max_points_per_client)
    return max(total, 0.0) if math.isfinite(total) else math.inf


def check_clip_of(privacy: PrivacySettings) -> float:
    """The per-point clip tau, ``inf`` while unresolved (the check then does not run)."""
    return math.inf if privacy.check_clip == AUTO else float(privacy.check_clip)


COST_DIFFERENCE = Statistic(
    "cost_difference", "l2",
    # (wide, narrow), each in units of its clip: one point moves each by at most 1
    per_point=lambda privacy: (2.0, math.sqrt(2.0)),
    # the largest client, not the count bound: a choice biased by clipping the large
    # clients is not protected by the noise margin (diamonds, client eps = 1: with
    # tau * clip-counts the protocol's centers were returned in 3 of 5 seeds, each worse
    # than the server's, by up to 16 %); sqrt(2): both coordinates at C
    client_bound=lambda privacy: math.sqrt(2.0) * float(privacy.max_points_per_client),
    shape=lambda k, d, m: (2,),
)


def server_only_centers(server_x: np.ndarray, k: int, seed: int) -> np.ndarray:
    """k-means on the server's data, checked against it: the ``server-lloyds`` answer, (k, d).

    10 k-means++ restarts, then :func:`~fedkmeans.clustering.repair.swap_repair`: the
    center that earns least moves to the server point that costs most while that lowers
    the cost on Q. On uneven clusters the restarts alone leave two clusters under one
    center in a few seeds of a hundred (the small, far cluster merged); the repair is
    public computation on public data, so it costs no budget.
    """
    return swap_repair(server_x, kmeans(server_x, k, seed=seed))


def typical_clip(server_x: np.ndarray, alternative: np.ndarray) -> float:
    """The typical cost of one point: median squared distance of Q to ``alternative`` (B).

    Public (Q and B only); never 0 (the smallest positive float when B is exact on Q).
    """
    nearest = nearest_squared_distances(server_x, alternative)
    return max(float(np.median(nearest)), np.finfo(float).tiny)


def check_clip(server_x: np.ndarray, centers: np.ndarray, alternative: np.ndarray) -> float:
    """``auto`` tau: the largest cost difference of a typical point, from A, B and Q.

    For every center c of A and B, ``t_c`` is its squared distance to the other set.
    A point p whose nearest center of A and B is c, at ``e = |p - c|``, has a cost
    difference between ``-(t_c + 2 e sqrt(t_c))`` and 0 if c is in A, between 0 and
    ``t_c + 2 e sqrt(t_c)`` if c is in B (triangle inequality; module docstring). So

        tau = max_c (t_c + 2 r sqrt(t_c)),

    with ``r^2`` the median squared distance of the server's points to their nearest
    center of A and B, clips no term of a point within r of its nearest center. Public:
    A is post-processing of the earlier releases, B and Q are the server's. Never 0 (A =
    B gets the smallest positive float: every difference is then 0).
    """
    both = np.concatenate([centers, alternative])
    gaps = np.concatenate([nearest_squared_distances(centers, alternative),
                           nearest_squared_distances(alternative, centers)])
    r = math.sqrt(float(np.median(nearest_squared_distances(server_x, both))))
    tau = float(np.max(gaps + 2.0 * r * np.sqrt(gaps)))
    return max(tau, np.finfo(float).tiny) if math.isfinite(tau) else np.finfo(float).max


def cost_differences(
    points: np.ndarray, owner: np.ndarray, clients: int, centers: np.ndarray,
    alternative: np.ndarray, tau,
) -> np.ndarray:
    """Per-client ``sum clip(d(p, A)^2 - d(p, B)^2, -tau, tau) / tau`` for every tau.

    The node sends the (wide, narrow) columns as one row, ``(D_j, N_j)``.

    In units of tau, so that one point moves a client's value by at most 1 whatever
    tau the server sent.

    Parameters
    ----------
    points : ndarray of shape (n, d)
    owner : ndarray of shape (n,)
        Each point's client position in ``0..clients-1``.
    clients : int
    centers, alternative : ndarray of shape (k, d)
        A and B.
    tau : float or sequence of float
        Per-point clips, one column each. One that is not a positive finite number (a
        server's bad value): its every term counts 0. A point whose squared distances to
        both sets overflow (the difference ``inf - inf``) counts 0.

    Returns
    -------
    ndarray of shape (clients, len(tau))
    """
    taus = np.atleast_1d(np.asarray(tau, dtype=np.float64))
    valid = np.isfinite(taus) & (taus > 0)
    out = np.zeros((clients, taus.size))
    for start in range(0, points.shape[0], BLOCK):
        x = points[start:start + BLOCK]
        norms = np.einsum("ij,ij->i", x, x)  # |p|^2 once for both center sets
        diff = (nearest_squared_distances(x, centers, norms)
                - nearest_squared_distances(x, alternative, norms))
        for j in np.flatnonzero(valid):
            # a point so far out that both squared distances overflow (inf - inf)
            # counts 0; every term stays in [-1, 1]
            unit = np.nan_to_num(diff / taus[j], nan=0.0, posinf=1.0, neginf=-1.0)
            out[:, j] += np.bincount(owner[start:start + BLOCK],
                                     weights=np.clip(unit, -1.0, 1.0), minlength=clients)
    return out


def final_check(ctx: StageContext, centers: np.ndarray) -> np.ndarray:
    """The check round: ``centers`` (A) if the wide difference is below ``-z sigma``, else B.

    ``z = CHOICE_STDS``. The wide clip tau is ``privacy.check-clip`` or, ``auto``,
    :func:`check_clip` of Q, A and B; the narrow one is :func:`typical_clip` of Q and B
    (never above tau). Each sigma is its clip times its unit release's noise standard
    deviation. A is returned only if the wide difference is below ``-z sigma``, the wide
    release can reach :data:`POWER_STDS` of its sigmas (:func:`largest_unit_sum`), and
    the narrow difference is below ``-z sigma_n``, or the wide one below
    ``-STRONG_STDS sigma`` with the narrow one below ``+z sigma_n``.

    Both differences come from one release of ``(sum_j D_j, sum_j N_j)`` in units of
    ``(tau, tau_n)``, so each coordinate's unit noise standard deviation is the
    release's.

    Records in ``ctx.record.check``: ``chosen``; ``noisy_difference`` (the wide one, in cost
    units), ``noise_std`` (its sigma), ``clip`` (tau); ``narrow_difference``,
    ``narrow_noise_std``, ``narrow_clip``; ``margins_sigmas`` (both, over their sigma:
    post-processing of the releases, fine to print); ``margin_sigmas``, the wide one
    (the one the bound is about); ``reach_sigmas`` and ``powered``; ``within_noise``
    (not powered, or the wide margin within ``z`` of 0: the release could not tell the
    two answers apart); ``threshold_sigmas`` (``-z``).
    """
    unit = ctx.releases[f"{CHECK.group}/{COST_DIFFERENCE.name}"].noise_scale
    reach = largest_unit_sum(ctx.estimates, ctx.config.privacy)

    def compute() -> dict[str, np.ndarray]:
        alternative = server_only_centers(ctx.server_x, ctx.k,
                                          ctx.int_seed("init", "server-lloyds"))
        fixed = check_clip_of(ctx.config.privacy)
        wide = fixed if math.isfinite(fixed) else check_clip(ctx.server_x, centers,
                                                             alternative)
        clips = np.array([wide, min(wide, typical_clip(ctx.server_x, alternative))])
        replies = ctx.query(CHECK.name, CHECK.group,
                            {"centers": centers, "alternative": alternative, "clip": clips},
                            expected=CHECK.expected(ctx.k, ctx.pool.dim))
        released = CHECK.release(ctx, replies, CHECK.group)
        noisy = clips * np.asarray(released[COST_DIFFERENCE.name], dtype=np.float64)
        wide, narrow = noisy / (unit * clips)
        kept = returns_protocol(float(wide), float(narrow), reach / unit)
        return {"centers": centers if kept else alternative, "clip": clips,
                "noisy_difference": noisy, "kept": np.array([kept])}

    out = ctx.round(CHECK.group, compute)
    noisy, clips = out["noisy_difference"], out["clip"]
    sigmas = unit * clips
    margins = noisy / sigmas
    margin = float(margins[0])
    powered = reach >= POWER_STDS * unit
    ctx.record.check = {
        "chosen": "protocol" if bool(out["kept"][0]) else "server-only",
        "reach_sigmas": reach / unit,
        "powered": bool(powered),
        "noisy_difference": float(noisy[0]),
        "noise_std": float(sigmas[0]),
        "clip": float(clips[0]),
        "narrow_difference": float(noisy[1]),
        "narrow_noise_std": float(sigmas[1]),
        "narrow_clip": float(clips[1]),
        "margins_sigmas": [float(m) for m in margins],
        "margin_sigmas": margin,
        "within_noise": bool(not powered or abs(margin) < CHOICE_STDS),
        "threshold": -CHOICE_STDS * float(sigmas[0]),
        "threshold_sigmas": -CHOICE_STDS,
        "rule": "the protocol's centers if the noisy sum of the clients' d(p, A)^2 - "
                "d(p, B)^2, clipped at the largest difference of a typical point, is below "
                f"-{CHOICE_STDS:.4g} noise standard deviations, the release could reach "
                f"{POWER_STDS:.4g} of them, and the sum clipped at the typical cost is "
                f"below -{CHOICE_STDS:.4g} of its own (or the first below "
                f"-{STRONG_STDS:.4g} and the second below +{CHOICE_STDS:.4g}); else "
                "k-means on the server's data",
        "error_bound": f"returns the protocol's centers with probability at most "
                       f"{CHOICE_ERROR:g} when k-means on the server's data is at least as "
                       "cheap on the clients' data in the widely clipped cost (the clip "
                       "bites only on points farther than the server's median distance "
                       "from their nearest center)",
    }
    return out["centers"]


CHECK = register(Stage(
    "check", "check", (COST_DIFFERENCE,),
    client=lambda node, clients, a: node.arithmetic.cost_differences(
        clients, a["centers"], a["alternative"], a["clip"] if "clip" in a else None),
    server=final_check,
    releases=(ReleaseRule(COST_DIFFERENCE, lambda p: GAUSSIAN.name,
                          lambda p: p.check_share),),
))
