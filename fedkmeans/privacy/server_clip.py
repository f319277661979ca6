"""The server's clip of one round's statistics, the same on every aggregation path.

:func:`server_clip` is what a SecAgg node applies to its clients before they add their
noise shares; the central server's fold (:mod:`fedkmeans.server.aggregation`) applies the
same maps chunk by chunk. Both call :func:`fedkmeans.privacy.clipping.joint_clip_factors`
through the module, so there is one joint clip in the package (the release audit plants
its bugs there and sees them on both paths).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedkmeans.privacy import clipping
from fedkmeans.privacy.budget import joint_groups, joint_radii

__all__ = ["server_clip"]


def server_clip(
    stats: Mapping[str, NDArray[np.floating]], bounds: Mapping[str, Any],
    stds: Mapping[str, float],
) -> dict[str, NDArray[np.floating]]:
    """Every client's statistics of one round, clipped as the server's fold clips them.

    The one clip of both aggregations: the central server folds each reply with it
    (:class:`fedkmeans.server.aggregation.RunningSums` calls
    :func:`~fedkmeans.privacy.clipping.joint_clip_factors` and
    :func:`~fedkmeans.privacy.clipping.clip_stacked` per chunk of rows, the same maps), and under
    ``privacy.aggregation = secagg`` each node applies it to its clients before they add
    their noise shares (:meth:`fedkmeans.node.NodeData.secagg_contribution`); nothing
    clips after it on either path.

    * A joint group (data-point level: a stage's cluster sums ``S`` and counts ``c``):
      one factor per client, :func:`~fedkmeans.privacy.clipping.joint_clip_factors`
      with the group's radius :func:`fedkmeans.privacy.budget.joint_radius` in the
      metric of ``stds``: the
      projection of the whitened pair ``(S / sigma_s, max(c, 0) / sigma_c)`` onto the
      non-negative cone intersected with the ball of that radius, 1-Lipschitz in the
      whitened l2 norm, so one point moves the clipped pair by at most
      ``L = sqrt((l2_s / sigma_s)^2 + (l2_c / sigma_c)^2)`` noise standard deviations,
      what the ledger's two Gaussian releases compose to (derivation:
      :mod:`fedkmeans.privacy.budget`, "Joint statistics"). A second clip of one member
      (say the counts in l1 to the radius) would break this bound: there is none.
    * Any other statistic: its own radial clip to its server bound in its norm
      (:func:`~fedkmeans.privacy.clipping.clip_stacked`), whose sensitivity
      :mod:`fedkmeans.privacy.budget` derives.

    Parameters
    ----------
    stats : mapping of str to ndarray of shape (m, ...)
        One row per client (only read).
    bounds : mapping of str to StatisticBound
        The run's bounds (:func:`fedkmeans.stages.statistic_bounds`).
    stds : mapping of str to float
        Per statistic, its release's noise standard deviation or any common multiple of
        them (a SecAgg share's: ``sigma / sqrt(n_min)``); only the joint groups read it.

    Returns
    -------
    dict of str to ndarray of shape (m, ...)
        New float arrays, in ``stats``' order.
    """
    radii = joint_radii(bounds, {n: stds[n] for n in stats if bounds[n].joint})
    out: dict[str, NDArray[np.floating]] = {}
    for group in joint_groups(bounds, list(stats)):
        factors, clamped = clipping.joint_clip_factors(  # looked up here: one function
            [stats[n] for n in group], [stds[n] for n in group], radii[group[0]],
            [bounds[n].norm == "l1_nonnegative" for n in group])
        out.update({n: c * factors.reshape(-1, *([1] * (c.ndim - 1)))
                    for n, c in zip(group, clamped, strict=True)})
    return {n: out[n] if n in out else clipping.clip_stacked(
        stats[n], bounds[n].server_bound, bounds[n].norm) for n in stats}
