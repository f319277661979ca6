"""Clip bounds and sensitivities: how far one privacy unit moves the server's clipped sum.

Neighbouring datasets differ by adding or removing one privacy unit: one data point
(``privacy.level = datapoint``) or one client with all its points (``client``). A
sensitivity here is a bound on how far the *server's* clipped sum moves between any
two neighbours, for every input: clients at or above ``max-points-per-client``,
clients that change size, and clients that skip their own clipping (the server
re-clips every reply; it never trusts a client's clipping of its statistic).

This module knows norms, not statistics: each statistic (its norm and how far one
point moves one client's value, with that derivation) is declared by the stage that
sends it (:mod:`fedkmeans.stages`), which calls :func:`bound_of`.

Data-point level (clients clip every point to ``||p|| <= Delta``; the server re-clips
each client's statistic to ``n_max`` points' worth, ``n_max = max-points-per-client``).
If one point moves one client's statistic by at most ``(l1, l2)``:

* **l2 statistics** (matrices in Frobenius norm, sums): the server's clip is the
  radial clip ``x -> x min(1, B / ||x||)`` with ``B = n_max l2``, the Euclidean
  projection onto a convex ball, hence 1-Lipschitz: the clipped sum moves by at most
  **l2** whatever the client's size (the reference implementation calibrates step 1
  to Delta instead of Delta^2, which under-noises).
* **l1 statistics** (non-negative histograms and counts, one point adds 1 to one
  bin): the server's clip is the radial l1 clip ``h -> h min(1, B / ||h||_1)``,
  ``B = n_max``, which is **not** 1-Lipschitz in l1. For ``h >= 0`` with
  ``s = ||h||_1 >= B`` and ``h' = h + e_j``::

      clip(h') - clip(h) = B (s e_j - h) / (s (s + 1)),
      ||s e_j - h||_1 = 2 (s - h_j) <= 2 s,
      ||s e_j - h||_2^2 = (s - h_j)^2 + sum_{i != j} h_i^2 <= 2 (s - h_j)^2 <= 2 s^2,

  so the change is at most ``2 B / (s + 1) < 2`` in l1 and ``sqrt(2) B / (s + 1) <
  sqrt(2)`` in l2 (a client at the cap of 1000 points: 1.998 and 1.413). When
  ``s < B <= s + 1`` the change is ``e_j - t (h + e_j)`` with ``0 < t (s + 1) < 1``:
  below 2 in l1 and ``sqrt(2)`` in l2; below the cap it is ``e_j``. Hence the l1
  sensitivity is **2** (Laplace releases) and the l2 sensitivity **sqrt(2)**
  (Gaussian counts, Gaussian histogram under SecAgg). No clip can do better: any map
  that is the identity inside the l1 ball and lands in it must send a histogram
  ``g`` with ``||g||_1 = B + 1`` to ``g - v`` with ``v >= 0``, ``||v||_1 >= 1``,
  and ``g``'s neighbours ``g - e_i`` (inside the ball) are then
  ``||e_i - v||_1 = 2 (1 - v_i)`` away, which approaches 2 when ``g`` has many bins.

* **Joint statistics** (a stage's cluster sums ``S`` and counts ``c``, declared
  ``joint``): clipped on their own, a client above the cap would get one factor on its
  sums and another on its counts, and its pull ``S_r / c_r`` on every center would
  move. No per-statistic clip can avoid this: any map ``x -> w(n) x / n`` that keeps a
  client's means and caps its weight ``w`` moves the sums by more than ``l2`` for some
  neighbour (a client of ``n`` points at ``-Delta u`` gaining one at ``+Delta u``:
  ``Delta (w(n) - w(n+1) + 2 w(n+1) / (n+1))``, which exceeds ``Delta`` as soon as
  ``w(n+1) < n + 1``). So the server scales the pair by **one** factor, the Euclidean
  projection in the noise's own metric: with ``sigma_s, sigma_c`` the two releases'
  noise standard deviations (both Gaussian), the client's whitened value
  ``z = (S / sigma_s, c_+ / sigma_c)`` (``c_+``: negative counts set to 0) is
  projected onto the ball of radius ``R = sqrt((n_max l2_s / sigma_s)^2 +
  (n_max l2_c / sigma_c)^2)`` (:func:`joint_radius`). The map "clamp to the cone
  ``c >= 0``, then scale radially" is the projection onto that cone intersected with
  the ball, hence 1-Lipschitz in the whitened l2 norm. One point moves ``z`` by at
  most ``L = sqrt((l2_s / sigma_s)^2 + (l2_c / sigma_c)^2)``, so the clipped
  whitened sum moves by at most ``L``, and the noisy pair, ``unwhiten(z + N(0, I))``,
  is one Gaussian mechanism with ``mu = L``: exactly the composition of the two
  releases the ledger records, Gaussian sums of sensitivity ``l2_s`` and Gaussian
  counts of sensitivity ``l2_c = 1`` (no ``sqrt(2)``: the l1 clip is gone). A client
  of ``n <= n_max`` points has ``||z|| <= n L <= R`` and is never scaled; a larger one
  is scaled as a whole, so the clip costs weight, never bias. Laplace counts cannot
  join (their metric is l1): at data-point level the counts are Gaussian
  (``privacy.count-noise``). Each statistic on its own may then move by slightly more
  than its ``l2`` (the two share the whitened bound ``L``), which is why
  :mod:`fedkmeans.attacks.sensitivity_audit` measures such a pair jointly.

Client level (each client clips its own statistic to ``C``; the server re-clips to the
same ``C``): adding or removing a client adds or removes one clipped statistic, whose
norm is at most ``C`` in the clip's norm, so the sensitivity is **C**. For counts and
histograms the clip is in l1, and ``||x||_2 <= ||x||_1`` makes ``C`` the l2
sensitivity too (Gaussian counts).

:func:`fedkmeans.attacks.release_audit` measures these through the server's real
clipping, summation, calibration and mechanism.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from fedkmeans.privacy import registry


@dataclass(frozen=True)
class StatisticBound:
    """How one statistic is clipped and how much one privacy unit can move its sum.

    Attributes
    ----------
    norm : {"l2", "l1_nonnegative"}
        Norm of the per-client clip (l2 = Frobenius for matrices).
    client_bound : float
        Bound each client applies to its own statistic (inf: none at data-point level).
    server_bound : float
        Bound the server re-applies to every client's reply.
    l1_sensitivity, l2_sensitivity : float
        How far one privacy unit moves the server's clipped sum, in l1 (Laplace
        releases) and in l2 (Gaussian releases); the derivations are in the module
        docstring. ``l1_sensitivity`` is ``inf`` for statistics never released with
        Laplace noise.
    joint : str
        Non-empty at data-point level for a statistic the server clips together with
        the others of the same name in its stage (cluster sums and counts), by one
        factor per client in the noise's metric (module docstring, :func:`joint_radius`).
    """

    norm: str
    client_bound: float
    server_bound: float
    l1_sensitivity: float
    l2_sensitivity: float
    joint: str = ""

    def sensitivity(self, mechanism: str) -> float:
        """The sensitivity a release with ``mechanism`` must use (in its norm)."""
        return self.l1_sensitivity if registry.mechanism(mechanism).order == 1 \
            else self.l2_sensitivity


#: The server's re-clip, in points, while ``max-points-per-client`` is ``auto`` (the
#: estimate round, which estimates it): public, and large enough that an honest client
#: is rarely re-clipped. The sensitivities do not depend on it (module docstring).
UNDECLARED_MAX_POINTS = 2**16

#: Lipschitz constant (l1, l2) of the server's clip in the norm of each release: the
#: radial l2 clip is a projection (1); the radial l1 clip is 2 in l1 and sqrt(2) in l2.
_CLIP_LIPSCHITZ = {"l2": (1.0, 1.0), "l1_nonnegative": (2.0, math.sqrt(2.0))}


class PrivacyUnit(Protocol):
    """What the bounds read of the privacy settings: the privacy unit and its size.

    :class:`fedkmeans.config.PrivacySettings` is one.
    """

    level: str
    max_points_per_client: int | str


def bound_of(
    privacy: PrivacyUnit,
    norm: str,
    per_point: Callable[[Any], tuple[float, float]],
    client_bound: Callable[[Any], float],
    joint: str = "",
) -> StatisticBound:
    """Clip bounds and sensitivities of one statistic (derivations: module docstring).

    Parameters
    ----------
    privacy : PrivacyUnit
        The run's privacy settings (the config's; this layer does not import it).
    norm : {"l2", "l1_nonnegative"}
        Norm of the statistic's clip.
    per_point : callable
        ``per_point(privacy) -> (l1, l2)``: how far one point moves one client's value
        (points of norm at most Delta = ``privacy.data_radius``).
    client_bound : callable
        ``client_bound(privacy) -> C``: the client-level bound.
    joint : str
        The statistic's joint group (``""``: clipped on its own). At data-point level
        a joint statistic is clipped with the others of its group (module docstring):
        its l2 sensitivity is one point's ``l2`` and it has no l1 sensitivity.
    """
    if privacy.level == "datapoint":
        l1, l2 = per_point(privacy)
        lip1, lip2 = (math.inf, 1.0) if joint else _CLIP_LIPSCHITZ[norm]
        per_client = l2 if norm == "l2" or joint else l1
        n_max = privacy.max_points_per_client
        return StatisticBound(
            norm=norm, client_bound=math.inf,
            server_bound=(UNDECLARED_MAX_POINTS if n_max == "auto" else n_max) * per_client,
            l1_sensitivity=lip1 * l1, l2_sensitivity=lip2 * l2, joint=joint,
        )
    bound = client_bound(privacy)
    return StatisticBound(
        norm, bound, bound,
        l1_sensitivity=bound if norm == "l1_nonnegative" else math.inf,
        l2_sensitivity=bound,
    )


def joint_radius(bounds: Sequence[StatisticBound], stds: Sequence[float]) -> float:
    """Radius ``R`` of the joint clip of a group of statistics, in whitened units.

    ``R = sqrt(sum_i (B_i / sigma_i)^2)`` with ``B_i`` each statistic's server bound
    (``n_max`` points' worth) and ``sigma_i`` its release's noise standard deviation:
    a client's whitened value ``(x_1 / sigma_1, x_2 / sigma_2, ...)`` is projected onto
    the ball of this radius (module docstring, "Joint statistics"), which holds every
    client of at most ``n_max`` points unscaled.

    Parameters
    ----------
    bounds : sequence of StatisticBound
        The group's statistics, in the order of ``stds``.
    stds : sequence of float
        Positive noise standard deviations (any common multiple gives the same clip:
        the SecAgg shares' standard deviations are one).
    """
    if len(bounds) != len(stds) or not all(s > 0 for s in stds):
        raise ValueError(f"need one positive std per statistic, got {list(stds)}")
    return math.sqrt(sum((b.server_bound / s) ** 2 for b, s in zip(bounds, stds, strict=True)))


def joint_groups(bounds: Mapping[str, StatisticBound], names: Sequence[str]) -> list[list[str]]:
    """The joint groups among ``names``, each in ``names``' order (module docstring)."""
    groups: dict[str, list[str]] = {}
    for name in names:
        if bounds[name].joint:
            groups.setdefault(bounds[name].joint, []).append(name)
    return list(groups.values())


def joint_radii(
    bounds: Mapping[str, StatisticBound], stds: Mapping[str, float]
) -> dict[str, float]:
    """Each joint statistic of ``stds`` -> its group's radius (:func:`joint_radius`).

    ``stds`` maps the statistics of one round to their noise standard deviations (or
    any common multiple of them); statistics clipped on their own are left out.
    """
    out: dict[str, float] = {}
    for group in joint_groups(bounds, list(stds)):
        radius = joint_radius([bounds[n] for n in group], [stds[n] for n in group])
        out.update(dict.fromkeys(group, radius))
    return out


def reachable_bounds(
    bounds: Mapping[str, StatisticBound], stds: Mapping[str, float]
) -> dict[str, float]:
    """The largest norm each statistic of ``stds`` has after the server's clip.

    A statistic clipped on its own reaches its ``server_bound``; a member of a joint
    group reaches ``R sigma_i`` (its whole whitened radius, :func:`joint_radius`). The
    SecAgg encoding sizes its range from these.
    """
    out = {name: bounds[name].server_bound for name in stds}
    out.update({n: radius * stds[n] for n, radius in joint_radii(bounds, stds).items()})
    return out
