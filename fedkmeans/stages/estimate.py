"""The estimate round: private histograms of what the server's data cannot tell.

Before any setting is chosen, FedDP-KMeans (and every private protocol whose settings
are ``auto``) spends a small share of the budget (``privacy.estimate-share``) on one
Gaussian release of per-client histograms on fixed, public, logarithmic bins. Every
client sends one row of :data:`WIDTH` numbers, in four parts:

* ``sizes`` (:data:`SIZE_BINS` bins, two per octave of a client size): at client level
  a one-hot row of the client's number of points ``n_j`` (zero for an empty client); at
  data-point level the client's **rank histogram**: number its points ``1..n_j`` and
  count the ranks in each bin (:func:`rank_widths` integers fit in bin ``b``, so a
  client fills every bin below its size's bin and part of that one). The released sum
  of bin ``b`` is then ``sum over ranks i in b of #{j : n_j >= i}``: the clients at
  least as large as the bin, times its width, so a single client of 1,000 points adds
  a few hundred to the bins below its size, far above the noise;
* ``count``: at client level the number 1, so the released sum of this entry is a
  noisy number of clients (the registered count is private); 0 at data-point level,
  where the first size bin (rank 1) already counts the non-empty clients;
* ``moments`` (:data:`MOMENT_BINS` bins, two per octave of ``||X_j^T X_j||_F``):
  client level only, a one-hot row (zeros at data-point level);
* ``norms`` (:data:`NORM_BINS` bins, four per octave of ``||p||``): at data-point level
  the number of the client's points in each bin; at client level the fraction of them
  (the row sums to 1).

The server reads quantiles off the released sums (:mod:`fedkmeans.tuning.estimates`):
the clients' sizes (the count bound, ``max-points-per-client``), the data radius from
the points' norms, and step 1's client-level bound from the moments. These are
post-processing of one release. The points are the node's points as loaded: clipped
to a declared ``privacy.data-radius``, raw when it is ``auto`` (the radius is what the
norms estimate).

Sensitivity of ``estimates`` (l2; Gaussian noise):

* data-point level: adding a point to client ``j`` (``n_j -> n_j + 1``, or a new
  client with ``n_j = 1``) adds 1 to the one ``sizes`` bin that holds the rank
  ``n_j + 1`` and 1 to one ``norms`` bin; ``count`` and ``moments`` are 0 at this
  level. Per point ``(l1, l2) = (2, sqrt(2))``, whether or not the point is its
  client's only one. A client's row has l2 norm at most ``sqrt(2) n_j`` (each part has
  l1 norm ``n_j``), so the server's radial l2 clip of the estimate round (to
  :data:`~fedkmeans.privacy.budget.UNDECLARED_MAX_POINTS` points' worth,
  :mod:`fedkmeans.privacy.budget`) leaves every client of up to that many points
  whole, and is a projection: the clipped sum moves by at most **sqrt(2)**.
* client level: a client's row has l2 norm at most ``sqrt(1 + 1 + 1 + 1) = 2`` (three
  one-hot or unit entries and a fraction row of l1 norm 1, whose l2 norm is at most 1);
  the client clips to 2 and the server re-clips to 2, so adding or removing a client
  moves the sum by at most **2**.

The round asks every registered client (no sampling): its noise is calibrated on its
own, before the rest of the plan exists, at the Gaussian noise multiplier that spends
``estimate-share`` of the budget's zCDP (:func:`estimate_noise_multiplier`); the other
releases are then calibrated so that the composition with it meets the target
(:func:`fedkmeans.privacy.calibration.calibrate`, ``prior``).
"""

from __future__ import annotations

import math

import numpy as np

from fedkmeans.privacy.registry import GAUSSIAN
from fedkmeans.stages.context import StageContext
from fedkmeans.stages.spec import ReleaseRule, Stage, Statistic, register

__all__ = [
    "COUNT_SLOT", "ESTIMATE", "ESTIMATES", "MOMENT_BINS", "MOMENT_SLICE", "NORM_BINS",
    "NORM_SLICE", "SIZE_BINS", "SIZE_SLICE", "WIDTH", "bin_edges", "client_rows",
    "estimate_noise_multiplier", "rank_counts", "rank_widths",
]

#: Bins per octave and number of bins of each part; the first bin starts at 2**low.
SIZE_BINS, SIZE_PER_OCTAVE, SIZE_LOW = 48, 2, 0          # sizes 1 .. 2**24
MOMENT_BINS, MOMENT_PER_OCTAVE, MOMENT_LOW = 200, 2, -40  # ||X^T X||_F 2**-40 .. 2**60
NORM_BINS, NORM_PER_OCTAVE, NORM_LOW = 160, 4, -20        # ||p|| 2**-20 .. 2**20
SIZE_SLICE = slice(0, SIZE_BINS)
COUNT_SLOT = SIZE_BINS
MOMENT_SLICE = slice(SIZE_BINS + 1, SIZE_BINS + 1 + MOMENT_BINS)
NORM_SLICE = slice(MOMENT_SLICE.stop, MOMENT_SLICE.stop + NORM_BINS)
WIDTH = NORM_SLICE.stop

_PARTS = {"sizes": (SIZE_BINS, SIZE_PER_OCTAVE, SIZE_LOW),
          "moments": (MOMENT_BINS, MOMENT_PER_OCTAVE, MOMENT_LOW),
          "norms": (NORM_BINS, NORM_PER_OCTAVE, NORM_LOW)}


def bin_edges(part: str) -> np.ndarray:
    """Edges of the bins of ``part`` ("sizes", "moments" or "norms"), shape (bins + 1,).

    Bin ``b`` holds ``[edges[b], edges[b + 1])``; values below the first edge fall in
    bin 0 and values above the last in the last bin.
    """
    bins, per_octave, low = _PARTS[part]
    return 2.0 ** (low + np.arange(bins + 1) / per_octave)


def _bins(values: np.ndarray, part: str) -> np.ndarray:
    bins, per_octave, low = _PARTS[part]
    with np.errstate(divide="ignore"):
        index = np.floor(per_octave * (np.log2(values) - low))
    return np.clip(np.nan_to_num(index, neginf=0.0), 0, bins - 1).astype(np.int64)


def _first_ranks() -> np.ndarray:
    """The smallest integer in each size bin, shape (SIZE_BINS + 1,) (the last: past it)."""
    return np.ceil(bin_edges("sizes")).astype(np.int64)


def rank_widths() -> np.ndarray:
    """How many integers (ranks) each size bin holds, shape (SIZE_BINS,).

    ``ceil(e_{b+1}) - ceil(e_b)``: 1, 0, 1, 1, 2, 2, 4, 4, 7, 9, ... (bin 1,
    ``[2**0.5, 2)``, holds none); about ``0.41 e_b`` in bin ``[e_b, e_{b+1})``.
    """
    return np.diff(_first_ranks())


def rank_counts(sizes: np.ndarray) -> np.ndarray:
    """Each client's rank histogram, shape (m, SIZE_BINS) (module docstring).

    Entry ``(j, b)`` is the number of integers ``1..n_j`` in size bin ``b``; ranks past
    the last edge count in the last bin, so a row sums to ``n_j``.

    Parameters
    ----------
    sizes : ndarray of shape (m,)
        Each client's number of points.
    """
    first = _first_ranks()
    reached = np.asarray(sizes, dtype=np.int64)[:, None] - first[None, :-1] + 1
    counts = np.clip(reached, 0, rank_widths()[None, :])
    counts[:, -1] = np.maximum(reached[:, -1], 0)
    return counts.astype(np.float64)


def client_rows(
    sizes: np.ndarray, moments: np.ndarray | None, norms: np.ndarray, owner: np.ndarray,
    *, level: str,
) -> np.ndarray:
    """Every asked client's row of the estimate round, shape (m, :data:`WIDTH`).

    Parameters
    ----------
    sizes : ndarray of shape (m,)
        Each client's number of points.
    moments : ndarray of shape (m,) or None
        Each client's ``||X^T X||_F`` (client level; None at data-point level).
    norms : ndarray of shape (n,)
        The norms of all asked clients' points.
    owner : ndarray of shape (n,)
        Each point's client position in ``0..m-1``.
    level : {"datapoint", "client"}

    Returns
    -------
    ndarray of shape (m, WIDTH)
    """
    m = sizes.size
    rows = np.zeros((m, WIDTH))
    present = np.flatnonzero(sizes > 0)
    if level == "client":
        rows[present, SIZE_SLICE.start + _bins(sizes[present].astype(float), "sizes")] = 1.0
        rows[:, COUNT_SLOT] = 1.0
        if moments is not None:
            rows[present, MOMENT_SLICE.start + _bins(moments[present], "moments")] = 1.0
    else:
        rows[:, SIZE_SLICE] = rank_counts(sizes)
    counts = np.bincount(owner * NORM_BINS + _bins(norms, "norms"),
                         minlength=m * NORM_BINS).reshape(m, NORM_BINS).astype(np.float64)
    if level == "client":
        counts /= np.maximum(sizes, 1)[:, None]
    rows[:, NORM_SLICE] = counts
    return rows


def estimate_noise_multiplier(epsilon: float, delta: float, share: float) -> float:
    """Gaussian noise multiplier (sigma / sensitivity) of the estimate round.

    ``z / sqrt(share)``, where ``z`` is the analytic Gaussian multiplier that alone
    spends the whole ``(epsilon, delta)``: under zCDP a Gaussian release costs
    ``rho = 1 / (2 z^2)``, so this release takes ``share`` of the rho the whole budget
    allows. (The accountant composes it exactly with the PLD, like every release.)
    """
    return GAUSSIAN.standalone_scale(epsilon, delta, 1.0) / math.sqrt(share)


def _estimate_round(ctx: StageContext) -> np.ndarray:
    """The server step: ask every client, release the histograms; returns the noisy row."""
    def compute() -> dict[str, np.ndarray]:
        replies = ctx.query(ESTIMATE.name, ESTIMATE.group, {},
                            expected=ESTIMATE.expected(ctx.k, ctx.pool.dim))
        return {"estimates": ESTIMATE.release(ctx, replies, ESTIMATE.group)["estimates"]}

    return ctx.round(ESTIMATE.group, compute)["estimates"]


ESTIMATES = Statistic(
    "estimates", "l2", per_point=lambda privacy: (2.0, math.sqrt(2.0)),
    client_bound=lambda privacy: 2.0, shape=lambda k, d, m: (WIDTH,),
)

ESTIMATE = register(Stage(
    "estimate", "estimate", (ESTIMATES,),
    client=lambda node, clients, a: node.arithmetic.estimates(clients),
    server=_estimate_round,
    releases=(ReleaseRule(ESTIMATES, lambda p: GAUSSIAN.name,
                          lambda p: float(p.estimate_share)),),
    sampled=False,
))
