"""The real protocol on a federation resampled from the server's data.

A simulated run uses the project's own algorithm, :class:`~fedkmeans.server.context.
ServerContext` (clipping, mechanisms, thresholds), the calibrated releases and the
node arithmetic (each stage's ``client``, :mod:`fedkmeans.stages`); only the clients are
replaced by a :class:`SimulatedPool` whose clients hold points drawn from the server's
data Q (:mod:`fedkmeans.tuning.federation`: the federation, its clients and how they are
drawn). Nothing of the real clients is read.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from fedkmeans.algorithms import algorithm
from fedkmeans.clustering.client_stats import symmetric_from_upper
from fedkmeans.config import ProtocolConfig
from fedkmeans.node import NodeData
from fedkmeans.privacy.accountant import Release
from fedkmeans.seeding import integer_seed
from fedkmeans.server.aggregation import RunningSums
from fedkmeans.server.replies import Replies
from fedkmeans.server.wiring import wire_context
from fedkmeans.stages import stage as stage_named
from fedkmeans.tuning.federation import SimulatedFederation

__all__ = ["SimulatedPool", "simulate_cost"]

#: Points per simulated message (:meth:`SimulatedPool.query`).
CHUNK_POINTS = 4096


@dataclass
class SimulatedPool:
    """The :class:`~fedkmeans.server.pool.ClientPool` interface over simulated clients.

    Every statistic is computed by the stage's ``client`` (:mod:`fedkmeans.stages`) on a
    :class:`~fedkmeans.node.NodeData` of the simulated clients, then clipped and
    summed by the server's own fold, as in a real round.
    """

    node: NodeData
    federation: SimulatedFederation
    #: What a real pool sends the nodes with every request (unused: the simulated node
    #: is built with the candidate's settings).
    settings: dict = field(default_factory=dict)
    #: Never SecAgg: the simulation adds the ledger's central noise.
    secagg: None = None

    @property
    def dim(self) -> int:
        """Feature dimension d."""
        return self.node.dim

    @property
    def client_ids(self) -> np.ndarray:
        """Simulated client ids."""
        return self.node.client_ids

    def query(self, stage, clients, arrays, expected, config=None, round_name=None,
              fold=None) -> Replies:
        """The clients' rows for ``stage``: folded as the real pool folds them.

        With ``fold`` (the algorithm's streaming rounds) the rows are clipped and added
        by the same :class:`~fedkmeans.server.aggregation.RunningSums` as a real
        round's replies, step 1's as upper triangles (no (m, d, d) stack); without it
        they are returned stacked.
        """
        del config, round_name
        ids = np.asarray(clients, dtype=np.int64)
        if stage == "covariance":
            # step 1: every client's X^T X once per federation; each candidate clips a
            # copy, and candidates with the same clips share the folded sum
            cache = self.federation.covariances
            key = ids.tobytes()
            arithmetic = self.node.arithmetic
            if key not in cache:
                cache[key] = arithmetic.raw_covariance_triangles(ids.tolist())
            if fold is not None:
                folded = (key, arithmetic.covariance_client_bound(), tuple(sorted(fold.items())))
                if folded not in cache:
                    sums = RunningSums(expected, fold)
                    sums.add({"covariance": arithmetic.clip_covariance_triangles(
                        cache[key].copy())}, frozenset({"covariance"}))
                    cache[folded] = sums.as_rows()
                return Replies(ids, {name: v.copy() for name, v in cache[folded].items()},
                               folded=True)
            rows = {"covariance": arithmetic.clip_covariance_triangles(cache[key].copy())}
            triangles = frozenset(rows)
        else:
            # in messages of about CHUNK_POINTS points, as a real node answers: the
            # (points, centers) distance blocks stay in the cache (the step-2 histogram's
            # 20,000 x 300 block took twice as long as ten 2,000-point ones)
            parts = [stage_named(stage).client(self.node, part.tolist(), dict(arrays))
                     for part in self._messages(ids)]
            triangles = frozenset()
            if fold is not None:
                sums = RunningSums(expected, fold)
                for part in parts:
                    sums.add(part, triangles)
                return Replies(ids, sums.as_rows(), folded=True)
            rows = {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}
        if fold is None:
            return Replies(ids, {name: symmetric_from_upper(v, self.dim) if name in triangles
                                 else v for name, v in rows.items()})
        sums = RunningSums(expected, fold)
        sums.add(rows, triangles)
        return Replies(ids, sums.as_rows(), folded=True)

    def _messages(self, ids: np.ndarray) -> list[np.ndarray]:
        """``ids`` in consecutive groups of about :data:`CHUNK_POINTS` points.

        A client whose points take the running count (over ``ids`` in order) past a
        multiple of ``CHUNK_POINTS`` starts a new group, so a group holds at most
        ``CHUNK_POINTS`` points plus one client's; one (empty) group if there are no ids.
        """
        sizes = self.federation.sizes(ids)
        cuts = np.flatnonzero(np.diff(np.cumsum(sizes) // CHUNK_POINTS)) + 1
        return [part for part in np.split(ids, cuts) if part.size] or [ids]


def simulate_cost(
    config: ProtocolConfig,
    federation: SimulatedFederation,
    releases: list[Release],
    rep: int,
) -> float:
    """k-means cost (mean squared distance) of one simulated run of ``config``.

    Parameters
    ----------
    config : ProtocolConfig
        A resolved candidate configuration (no ``auto`` left but the thresholds).
    federation : SimulatedFederation
    releases : list of Release
        The candidate's calibrated releases; their noise is scaled by
        ``federation.scale`` here.
    rep : int
        Selects the simulation's (public, seeded) noise.

    Returns
    -------
    float
        Mean over the simulated points of the squared distance to the nearest center.
    """
    seed = integer_seed(config.seed, "tuning", "noise", rep)
    sim_config = replace(config, seed=seed, privacy=replace(
        config.privacy, reproducible_noise=True))
    node = NodeData.of_block(sim_config, *federation.block())
    scaled = {r.stage: replace(r, noise_scale=r.noise_scale * federation.scale)
              for r in releases}
    # central noise of the ledger's scale: what SecAgg's shares add up to
    ctx = wire_context(sim_config, SimulatedPool(node, federation), federation.server_x,
                       scaled, settings={}, progress=False, warnings=False, secagg=False)
    centers = algorithm(config.algorithm).run(ctx)
    return federation.cost(centers)
