"""What the estimate round's release says: sizes, count, norms (post-processing only).

The estimate round (:mod:`fedkmeans.stages.estimate`) releases the sum of the clients'
histogram rows with Gaussian noise of standard deviation ``sigma`` per entry. Here the
server reads quantiles off that one noisy vector; nothing else of the clients is read.

Noise floor. A bin of a part with ``B`` bins counts only if its noisy value exceeds
``sigma * z_B``, with ``z_B`` the standard normal quantile ``1 - FLOOR_TAIL / B``: when
every bin is empty, the largest of the ``B`` noises stays below the floor with
probability ``1 - FLOOR_TAIL`` (a union bound), so an empty tail bin rarely reads as
mass. The threshold is relative to the noise scale; no constant is fitted to data.

Data-point level, sizes. The size bins hold the clients' rank histograms
(:mod:`fedkmeans.stages.estimate`): bin ``b`` is ``w_b`` (:func:`rank_widths`) times the
average, over its ranks, of the number of clients at least that large. Divided by
``w_b`` it is a survival function of the sizes whose noise ``sigma / w_b`` shrinks as
the sizes grow: one client of 1,000 points adds 300 to the bin below its own, against
a noise of ``sigma`` (27 at epsilon 1). The number of clients is read as a lower bound
from the widest bins (:func:`_count_bound`), their size distribution as a
non-increasing fit of the clients at least as large as each bin (:func:`_survival`).

The largest client size, read to err on the safe side (:meth:`largest_size`). Let
``n`` be the largest size and ``c`` its bin. The largest client fills every bin below
``c``: ``R_{c-1} >= w_{c-1}``. Read ``b^`` = the highest bin above the noise floor
``t`` and answer the largest integer of the bin above it, ``ceil(e_{b^+2}) - 1``, but
never less than ``n_floor = ceil(e_f) - 1``, where ``f`` is the lowest bin from which
on every width ``w_{b-1}`` (``b >= f``) is at least ``t + z sigma``, ``z`` the
``1 - MISS_PROBABILITY`` normal quantile. Then

* if ``c < f``: ``n < e_f``, so ``n <= n_floor``, never missed;
* if ``c >= f``: the answer is below ``n`` only when ``b^ < c - 1``, in particular when
  the noisy ``R_{c-1}`` is at or below ``t``; with ``R_{c-1} >= w_{c-1} >= t + z sigma``
  that has probability at most ``Phi(-z) = MISS_PROBABILITY`` (one Gaussian noise).

So the estimate is below the largest client size with probability at most
:data:`MISS_PROBABILITY` (5 %), whatever the sizes (up to the estimate round's re-clip,
:data:`~fedkmeans.privacy.budget.UNDECLARED_MAX_POINTS` points, beyond which a client's
row is scaled down). Clients in bins under the floor are covered because the bins they
fill lie below theirs, where their ranks add up. It errs above by up to two bins (a
factor 2) plus, with probability at most ``FLOOR_TAIL``, a noise bin above the data;
at data-point level an over-estimate only loosens the server's re-clip (the
sensitivities do not depend on it, :mod:`fedkmeans.privacy.budget`). ``n_floor`` is
18-23 ``sigma`` (511 points at epsilon 1 with the default share, sigma 26.7).

A quantile ``q`` of a part is read in the first bin where the cleaned cumulative mass
reaches ``q`` of its total, log-linearly between the bin's edges (its upper edge for
``q = 1``): exact up to the noise and the spread of the values within the bin (a
factor ``2**(1/2)`` for sizes and moments, ``2**(1/4)`` for norms). Reading the upper
edge instead put the client-level bounds of the paper mixture's 50-point clients at
64, 28 % looser than needed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri  # -ndtri(q) is scipy.stats.norm.isf(q), bit for bit

from fedkmeans.stages.estimate import (
    COUNT_SLOT,
    MOMENT_SLICE,
    NORM_SLICE,
    SIZE_SLICE,
    bin_edges,
    rank_widths,
)

__all__ = ["FLOOR_TAIL", "MISS_PROBABILITY", "RADIUS_QUANTILE", "PrivateEstimates", "cleaned",
           "read_quantile"]

#: Probability that the largest noise of a part's empty bins reads as mass. A noise bin
#: read as mass sets a bound far from the data (a largest client of 5.9 million points
#: in a federation of 50-point clients), so it is kept rare.
FLOOR_TAIL = 0.01
#: The data radius is this quantile of the points' norms: at most 1 % of the points are
#: clipped (by at most their excess norm), so the clipping bias on a center stays far
#: below the bias-free alternative's noise, which grows with the largest norm.
RADIUS_QUANTILE = 0.99
#: Data-point level: the largest-size estimate is below the largest client size with at
#: most this probability (module docstring, "The largest client size").
MISS_PROBABILITY = 0.05
#: The stated share of points beyond the data radius is above the true share except
#: with at most this probability (:meth:`PrivateEstimates.outside_upper_bound`).
OUTSIDE_ERROR = 0.05

_PARTS = {"sizes": SIZE_SLICE, "moments": MOMENT_SLICE, "norms": NORM_SLICE}


def noise_floor(sigma: float, bins: int) -> float:
    """``sigma * z_B``: a part of ``bins`` empty bins stays below it w.p. 1 - FLOOR_TAIL."""
    return sigma * float(-ndtri(FLOOR_TAIL / bins))


def cleaned(noisy: np.ndarray, sigma: float) -> np.ndarray:
    """``noisy`` with every bin at or below the noise floor set to 0 (module docstring)."""
    if sigma <= 0:
        return np.maximum(noisy, 0.0)
    return np.where(noisy > noise_floor(sigma, noisy.size), noisy, 0.0)


def read_quantile(hist: np.ndarray, edges: np.ndarray, q: float) -> float | None:
    """The ``q`` quantile of ``hist``: log-linear within the bin where it is reached.

    Parameters
    ----------
    hist : ndarray of shape (B,)
        Non-negative (cleaned) bin masses.
    edges : ndarray of shape (B + 1,)
    q : float
        In (0, 1].

    Returns
    -------
    float or None
        None when ``hist`` holds no mass.
    """
    total = float(hist.sum())
    if total <= 0:
        return None
    cumulative = np.cumsum(hist) / total
    index = min(int(np.searchsorted(cumulative, q * (1 - 1e-12))), hist.size - 1)
    before = cumulative[index - 1] if index else 0.0
    within = min(max((q - before) / (cumulative[index] - before), 0.0), 1.0)
    low, high = float(edges[index]), float(edges[index + 1])
    if low <= 0:
        return high
    return low * (high / low) ** within  # log-linear in the bin; its upper edge at q = 1


@dataclass(frozen=True)
class PrivateEstimates:
    """The estimate round's release, read.

    Attributes
    ----------
    noisy : ndarray of shape (width,)
        The released (noisy) sum of the clients' rows.
    sigma : float
        Its noise standard deviation per entry (0: no noise).
    level : {"datapoint", "client"}
    num_clients : float
        The number of clients the ``auto`` settings use: the declared
        ``privacy.public-num-clients``; else the estimate round's noisy count (at
        least 1): its count entry at client level; at data-point level
        :func:`_count_bound` of the size bins when it is at least 1 (the first bin
        alone has noise ``sigma``, 97 at epsilon 0.25; a bin of width ``w_b`` has
        ``sigma / w_b``), else the first size bin (every non-empty client's rank 1).
        Never the registered count.
    num_clients_from : str
        Where ``num_clients`` comes from.
    """

    noisy: np.ndarray
    sigma: float
    level: str
    num_clients: float
    num_clients_from: str

    @classmethod
    def read(cls, noisy: np.ndarray, sigma: float, level: str, *, declared: int
             ) -> PrivateEstimates:
        """Read the release; ``declared``: the public number of clients (0: none)."""
        noisy = np.asarray(noisy, dtype=float)
        if declared:
            count, source = float(declared), "privacy.public-num-clients (declared public)"
        elif level == "datapoint" and _count_bound(noisy[SIZE_SLICE], sigma) >= 1:
            count = _count_bound(noisy[SIZE_SLICE], sigma)
            source = ("the estimate round's noisy count (its size bins: a lower bound on "
                      "the number of clients, below it with probability at least "
                      f"{1 - FLOOR_TAIL:g})")
        elif level == "datapoint":
            count = max(1.0, float(noisy[SIZE_SLICE.start]))
            source = ("the estimate round's noisy count (its first size bin: every "
                      "client's point of rank 1)")
        else:
            count = max(1.0, float(noisy[COUNT_SLOT]))
            source = "the estimate round's noisy count (the exact count is private)"
        return cls(noisy, float(sigma), level, count, source)

    def part(self, name: str) -> np.ndarray:
        """The cleaned histogram of ``name`` ("sizes", "moments" or "norms")."""
        return cleaned(self.noisy[_PARTS[name]], self.sigma)

    def quantile(self, name: str, q: float) -> float | None:
        """:func:`read_quantile` of part ``name``; None where :meth:`usable` says no."""
        if not self.usable(name):
            return None
        return read_quantile(self.part(name), bin_edges(name), q)

    def usable(self, name: str) -> bool:
        """Whether part ``name``'s bins above the noise floor describe the clients.

        They must hold at least half of the part's mass: the number of clients (each
        client adds one unit to the sizes, the moments and, at client level, the
        norms), which must itself clear the noise floor, or at data-point level the
        norms' own noisy total (the number of points). Otherwise most of the mass sits
        in bins the noise hides, and what is left may be noise alone (a top size bin of
        2 points where every client holds 1,000, a radius of 0.04 where points have
        norm 10).
        """
        part = self.part(name)
        cleaned_mass = float(part.sum())
        if name == "norms" and self.level == "datapoint":
            return cleaned_mass >= 0.5 * self.total_points > 0
        if name == "sizes" and self.level == "datapoint":
            return float(self._survival()[0]) >= 0.5 * self.num_clients
        return (self.num_clients > noise_floor(self.sigma, part.size)
                and cleaned_mass >= 0.5 * self.num_clients)

    @property
    def count_floor(self) -> float:
        """The count slot's noise floor ``sigma * z_1`` (:func:`noise_floor`, one bin)."""
        return noise_floor(self.sigma, 1)

    @property
    def too_few_clients(self) -> bool:
        """Client level: whether the number of clients is within the count's noise.

        True when ``num_clients`` (the noisy count, or the declared one) is at or below
        the count slot's noise floor (:attr:`count_floor`): a release of
        a per-client statistic that takes a few percent of the budget cannot tell these
        clients from none. Every release of the protocol is such a statistic with a
        share of the same budget, its noise at most ``sqrt(share_estimate / share)``
        times smaller, so a federation this small leaves each of them dominated by
        noise. Always False at data-point level, where the unit is a point.
        """
        return (self.level == "client"
                and self.num_clients <= self.count_floor)

    @property
    def total_points(self) -> float:
        """Noisy number of points (data-point level: the norms' total), else NaN."""
        if self.level != "datapoint":
            return math.nan
        return max(float(self.noisy[NORM_SLICE].sum()), 0.0)

    def _sizes_usable(self) -> bool:
        """Sizes that are :meth:`usable` and, at data-point level, consistent.

        Consistent: their implied mean size is within a factor 2 of the points' total
        over the clients.
        """
        if not self.usable("sizes"):
            return False
        mean = self._mean_size()
        if mean is None:
            return True
        sizes, edges = self._clients_per_bin(), bin_edges("sizes")
        implied = float(sizes @ np.sqrt(edges[:-1] * edges[1:])) / float(sizes.sum())
        return 0.5 <= implied / mean <= 2.0

    def _mean_size(self) -> float | None:
        """Data-point level: the points' total over the public number of clients."""
        if self.level != "datapoint" or not self.total_points > 0:
            return None
        return self.total_points / max(self.num_clients, 1.0)

    def size_distribution(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(edges, pmf)`` of the clients' sizes, or None if the release cannot tell.

        The cleaned size histogram when it holds at least half the clients; else, at
        data-point level, every client at the mean size (the points' total, whose noise
        is small, over the public number of clients); else None.
        """
        edges = bin_edges("sizes")
        if self._sizes_usable():
            sizes = self._clients_per_bin()
            return edges, sizes / sizes.sum()
        mean = self._mean_size()
        if mean is None:
            return None
        pmf = np.zeros(edges.size - 1)
        pmf[min(int(np.searchsorted(edges, max(mean, 1.0), side="right")) - 1, pmf.size - 1)] = 1
        return edges, pmf

    def largest_size(self) -> int | None:
        """The largest client size the release shows.

        Data-point level: the upper bound of the module docstring ("The largest client
        size"), below the true largest size with probability at most
        :data:`MISS_PROBABILITY`. Client level: the top occupied bin's upper edge when
        the size bins are usable (they hold at least half the clients), else None.
        """
        if self.level == "datapoint":
            return self._largest_size_bound()
        if not self._sizes_usable():
            return None
        return max(1, math.floor(read_quantile(self.part("sizes"), bin_edges("sizes"), 1.0)))

    def _largest_size_bound(self) -> int:
        """Data-point level: ``max(ceil(e_{b^+2}) - 1, n_floor)`` (module docstring)."""
        first = np.ceil(bin_edges("sizes")).astype(np.int64)
        widths = rank_widths()
        ranks = self.noisy[SIZE_SLICE]
        floor = noise_floor(self.sigma, widths.size)
        seen = np.flatnonzero((ranks > floor) & (widths > 0))
        reach = 0 if seen.size == 0 else int(first[min(int(seen[-1]) + 2, widths.size)]) - 1
        # f: the lowest bin b >= 1 with min(w_{b-1}, w_b, ...) >= floor + z sigma (and >= 1)
        need = max(floor + float(-ndtri(MISS_PROBABILITY)) * self.sigma, 1.0)
        from_here = np.minimum.accumulate(widths[::-1])[::-1]  # min of w_b, w_{b+1}, ...
        enough = np.flatnonzero(from_here >= need)
        f = widths.size if enough.size == 0 else int(enough[0]) + 1
        return max(1, reach, int(first[min(f, widths.size)]) - 1)

    def _survival(self) -> np.ndarray:
        """Data-point level: :func:`_survival` of the size bins, at most ``num_clients``.

        The cap removes what noise adds to the narrowest bins (width 1, noise
        ``sigma``), which the non-increasing fit cannot pool away at the start.
        """
        return np.minimum(_survival(self.noisy[SIZE_SLICE], self.sigma), self.num_clients)

    def _clients_per_bin(self) -> np.ndarray:
        """The number of clients the release shows in each size bin, shape (B,).

        Client level: the cleaned one-hot sums. Data-point level: differences of
        :meth:`_survival`; a client whose size reaches a fraction ``a`` of its bin's
        ranks counts ``a`` there and ``1 - a`` in the bin below.
        """
        if self.level != "datapoint":
            return self.part("sizes")
        survival = self._survival()
        return survival - np.append(survival[1:], 0.0)

    def outside_fraction(self, radius: float) -> float | None:
        """Estimated fraction of the points beyond ``radius`` (client level: per client).

        The bin that holds ``radius`` is split log-linearly; None when the norms are
        not :meth:`usable`.
        """
        norms = self.part("norms")
        total = float(norms.sum())
        if total <= 0 or not self.usable("norms"):
            return None
        edges = bin_edges("norms")
        beyond = norms[edges[:-1] >= radius].sum()
        straddling = np.flatnonzero((edges[:-1] < radius) & (edges[1:] > radius))
        for b in straddling:  # log-linear within the bin, as the quantiles are read
            low, high = edges[b], edges[b + 1]
            beyond += norms[b] * np.log(high / radius) / np.log(high / low)
        return float(beyond / total)

    def outside_upper_bound(self, radius: float,
                            error: float = OUTSIDE_ERROR) -> float | None:
        """An upper bound on the share of points beyond ``radius``, w.p. >= 1 - error.

        Read from the *noisy* norm bins, not the cleaned ones: a tail spread thinly
        over many bins below the noise floor is cleaned away by :meth:`part` (so
        :meth:`outside_fraction` can state a share far below the one the radius clips)
        but its points are still beyond the radius. Each noisy bin is its count plus
        independent N(0, sigma^2) noise, so with ``z = Phi^-1(1 - error / 2)``:

        * the sum of the n bins that reach beyond ``radius`` (the bin that straddles
          it counted whole) plus ``z sigma sqrt(n)`` is at least their true mass, and
        * the sum of all B bins minus ``z sigma sqrt(B)`` is at most the true total,

        each except with probability ``error / 2``; their ratio, clipped to [0, 1], is
        at least the true share except with probability ``error`` (union bound).
        Post-processing of the estimate round's release. None when the lower bound on
        the total is not positive (the release cannot bound the share), or the round
        released no norms.

        Parameters
        ----------
        radius : float
        error : float
            In (0, 1).

        Returns
        -------
        float or None
            In [0, 1] (client level: the share per client, averaged over clients).
        """
        noisy = np.asarray(self.noisy[NORM_SLICE], dtype=np.float64)
        if noisy.size == 0 or not np.isfinite(radius):
            return None
        z = float(-ndtri(error / 2))
        edges = bin_edges("norms")
        reach = edges[1:] > radius  # bins holding points beyond radius (straddling whole)
        total_low = float(noisy.sum()) - z * self.sigma * np.sqrt(noisy.size)
        if total_low <= 0:
            return None
        beyond_high = float(noisy[reach].sum()) + z * self.sigma * np.sqrt(reach.sum())
        return float(min(1.0, max(0.0, beyond_high / total_low)))

    def to_dict(self) -> dict:
        """What ``release.json`` records of the read estimates (all post-processing)."""
        return {
            "num_clients": self.num_clients, "num_clients_from": self.num_clients_from,
            "noise_std": self.sigma, "largest_size": self.largest_size(),
            "radius_quantile": RADIUS_QUANTILE,
            "radius": self.quantile("norms", RADIUS_QUANTILE),
            "floor_tail": FLOOR_TAIL,
            "count_floor": self.count_floor,
        }


def _survival(ranks: np.ndarray, sigma: float) -> np.ndarray:
    """Data-point level: clients at least as large as each size bin, shape (B,).

    The cleaned rank histogram ``ranks`` over the bins' widths ``w_b`` (the average
    number of clients over a bin's ranks, noise ``sigma / w_b``), fitted by the
    weighted least-squares non-increasing sequence (isotonic regression, weights
    ``w_b**2``, the inverse noise variances): a bin cleaned to 0 below seen ones is
    pooled with them, and a flat run of bins reads at the precision of its widest.
    Bins holding no integer take the next bin's value. The fit is SciPy's
    ``scipy.optimize.isotonic_regression`` (what ``sklearn.isotonic.isotonic_regression``
    calls, without scikit-learn's import of pandas).
    """
    from scipy.optimize import isotonic_regression  # deferred: loaded with dp_accounting

    widths = rank_widths()
    holds = widths > 0
    average = cleaned(ranks, sigma)[holds] / widths[holds]
    fitted = isotonic_regression(average, weights=widths[holds].astype(float) ** 2,
                                 increasing=False).x
    out = np.zeros(widths.size)
    out[holds] = np.maximum(fitted, 0.0)
    return np.maximum.accumulate(out[::-1])[::-1]


def _count_bound(ranks: np.ndarray, sigma: float) -> float:
    """Data-point level: a lower bound on the number of non-empty clients.

    ``max_b (R_b - t) / w_b`` over the size bins that hold an integer, ``t`` the noise
    floor (:func:`noise_floor`): every client at least as large as bin ``b``'s ranks
    is a client, so ``R_b / w_b`` is at most their number, and each of the ``B``
    noises stays below ``t`` with joint probability at least ``1 - FLOOR_TAIL``. So
    the bound is below the true number with probability at least ``1 - FLOOR_TAIL``;
    it misses by about ``t / w_b`` (under 0.5 at 100 clients of 1,000 points and
    epsilon 1) plus the clients smaller than the widest bin it reads. Errs below.
    """
    widths = rank_widths()
    holds = widths > 0
    floor = noise_floor(sigma, widths.size)
    return max(float(np.max((ranks[holds] - floor) / widths[holds])), 0.0)
