"""A node's SecAgg+ input: its clients' clipped statistics plus their noise shares, encoded.

Under ``privacy.aggregation = secagg`` every client also applies the server's bound
(the server sees only the node's masked sum, so it cannot clip one client) and adds
its own noise share, and the node sends only the sum over its clients, encoded on the
SecAgg+ integer grid (:mod:`fedkmeans.privacy.distributed`). Every statistic is clipped
by :func:`fedkmeans.privacy.server_clip.server_clip`, the function the central server's
fold uses too: the statistics of a joint group (a stage's cluster sums and counts at
data-point level) by one factor per client, the projection in the noise's metric, and
nothing after it; every other statistic by its own server bound. Every bound and share
comes from the round's plan. A part of the node
(:attr:`fedkmeans.node.NodeData.secagg`) that reads only the run's privacy settings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from fedkmeans.config import PrivacySettings
from fedkmeans.privacy.budget import reachable_bounds
from fedkmeans.privacy.distributed import encode, node_contribution
from fedkmeans.privacy.randomness import secure_generator
from fedkmeans.privacy.server_clip import server_clip
from fedkmeans.stages import statistic_bounds


class SecAggEncoding:
    """The SecAgg+ encoding of a node's statistics under the run's privacy settings.

    Parameters
    ----------
    privacy : PrivacySettings
        The run's ``privacy.*`` settings (the statistics' bounds).
    """

    def __init__(self, privacy: PrivacySettings) -> None:
        self.privacy = privacy

    def contribution(
        self,
        clients: Sequence[int],
        stats: dict[str, np.ndarray],
        round_name: str,
        share_stds: dict[str, float],
        steps: dict[str, float],
        q_range: int,
        share_rng: Callable[[str, int], np.random.Generator] | None = None,
    ) -> list[np.ndarray]:
        """This node's encoded SecAgg+ input: clipped statistics plus noise shares.

        Parameters
        ----------
        clients : sequence of int
            The asked clients, in increasing id (rows of ``stats``).
        stats : dict of str to ndarray of shape (m, ...)
            Per-client statistics of the round (from the methods above).
        round_name : str
            Round label; client ``c``'s share of release ``<round_name>/<s>`` is drawn
            from ``share_rng("<round_name>/<s>", c)``.
        share_stds, steps : dict of str to float
            Per statistic: standard deviation of one client's share and the public
            grid step (:mod:`fedkmeans.privacy.distributed`).
        q_range : int
            SecAgg+ quantization range Q.
        share_rng : callable (stage, client id) -> numpy.random.Generator, optional
            Source of each client's noise share. ``None`` (what the ClientApp always
            uses): a fresh :func:`~fedkmeans.privacy.randomness.secure_generator` per
            client and release, so no configuration, seed or earlier run lets the
            server know a share. Unit tests pass a seeded factory to check the
            arithmetic.

        Returns
        -------
        list of ndarray
            One array per statistic (in ``stats`` order), values ``2 k / Q``.
        """
        bounds = statistic_bounds(self.privacy)
        stds = {name: share_stds[name] for name in stats}
        reach = reachable_bounds(bounds, stds)  # sizes the shares' lattice, as before
        stats = self.clipped(stats, stds)
        out = []
        for name, values in stats.items():
            stage = f"{round_name}/{name}"
            rngs = [
                secure_generator() if share_rng is None else share_rng(stage, int(c))
                for c in clients
            ]
            total = node_contribution(  # clipped as the server would: no second clip
                values, reach[name], bounds[name].norm, share_stds[name], rngs,
                symmetric=name == "covariance", already_clipped=True,
            )
            out.append(encode(total, steps[name], q_range))
        return out

    def clipped(
        self, stats: dict[str, np.ndarray], stds: dict[str, float]
    ) -> dict[str, np.ndarray]:
        """Each client's statistics clipped exactly as the central server clips them.

        :func:`fedkmeans.privacy.server_clip.server_clip` with the run's bounds; the joint
        groups' metric is given by the share scales ``stds``, a common multiple of the
        releases' noise standard deviations (every share is ``sigma / sqrt(n_min)``), so
        the clip is the central one.

        Parameters
        ----------
        stats : dict of str to ndarray of shape (m, ...)
            One row per asked client (only read).
        stds : dict of str to float
            Per statistic, its share's standard deviation.

        Returns
        -------
        dict of str to ndarray of shape (m, ...)
        """
        bounds = statistic_bounds(self.privacy)
        return server_clip(stats, bounds, stds)
