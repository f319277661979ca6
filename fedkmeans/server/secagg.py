"""Secure aggregation of noisy statistics with Flower's SecAgg+ (``privacy.aggregation = secagg``).

Flower 1.41 and 1.42 have SecAgg+ only on its legacy path: :class:`SecAggPlusWorkflow` driven by
a :class:`LegacyContext` whose ``strategy`` configures and aggregates one "fit" round,
and ``secaggplus_mod`` on the ClientApp, which intercepts ``train`` messages. This
module bridges it into our own ``@app.main()`` protocol
(docs/facts.md, "SecAgg+ inside a custom protocol"):

* :class:`SecAggAggregator` runs one SecAgg+ round per protocol round, over the nodes
  hosting the asked clients (a node is one SecAgg+ participant, whatever number of
  virtual clients it hosts). Each node gets a ``FitIns`` with the asked client ids,
  the broadcast arrays and, per statistic, the noise-share scale and the public grid
  step; its ``train`` handler (registered by :func:`fedkmeans.client.mount_source`)
  replies with its encoded value (clipped statistics + noise shares, summed over its
  clients) and weight ``num_examples = 1``; ``max_weight = 1`` and
  ``clipping_range = 1`` make SecAgg+ return the mean of the encoded values, which
  :func:`fedkmeans.privacy.distributed.decode_sum` turns back into the sum.
* The server halts the round *before unmasking* when the nodes whose masked vectors
  arrived host fewer than ``n_min`` asked clients (their noise shares would not add
  up to the calibrated variance), and the run stops with :class:`FederationError`.

The server never holds a client's or a node's statistic: the returned
:class:`~fedkmeans.server.replies.Replies` carries only the noisy sums (one row,
``aggregated = True``) and the noise scale each release is accounted with: the
calibrated sigma, which the shares guarantee whenever at least ``n_min`` clients
survive (more survivors add more noise; their number is a diagnostic, never in the
ledger). The neighbouring relation is zero-out one client at client level (the
client's participation is visible to the server, its statistics are not) and
add/remove one data point at data-point level.

Security notes (docs/secagg.md): honest-but-curious server (Flower's SecAgg+ has no
consistency checks against a server that lies about dropouts or the noise scale),
and flwr 1.41 and 1.42 fold every mask seed into 32 bits before its PRG (``pseudo_rand_gen``).
Key generation, masks and neighbour shuffling use Flower's OS/global randomness; they
are cryptographic and cancel exactly in the sum, so results stay reproducible.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, RecordDict
from flwr.common import FitIns, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server.compat.legacy_context import LegacyContext
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
from flwr.server.workflow.constant import Key as WorkflowKey

from fedkmeans import wire
from fedkmeans.config import ProtocolConfig
from fedkmeans.console import diagnostics_on_console, quiet_flower_secagg, say
from fedkmeans.privacy.accountant import Release
from fedkmeans.privacy.budget import reachable_bounds
from fedkmeans.privacy.distributed import (
    LATTICE_SMOOTHING,
    MODULUS_RANGE,
    check_lattice,
    decode_sum,
    effective_sigma,
    grid_step,
    lattice_residue_error,
    min_survivors,
    quantization_range,
    share_std,
    smooth_lattice,
    tail_probability,
)
from fedkmeans.privacy.randomness import PrivateRandomness
from fedkmeans.privacy.registry import mechanism
from fedkmeans.server.pool import ClientPool, FederationError
from fedkmeans.server.replies import Replies
from fedkmeans.stages import stages, statistic_bounds

LOG = logging.getLogger(__name__)

#: Full SecAgg (every node shares keys with every node) up to this many nodes; above,
#: SecAgg+ with ``2 ceil(log2 N) + 1`` neighbours (Flower's Shamir sharing costs
#: ~O(neighbours^2) per node: 100 nodes took 432 s with 100 neighbours, 3.9 s with 11).
FULL_GRAPH_NODES = 15
#: Fraction of a node's neighbours needed to unmask (Shamir threshold).
THRESHOLD_FRACTION = 2.0 / 3.0



def summable_statistics() -> tuple[str, ...]:
    """Statistics a SecAgg round may carry: every registered stage's noisy releases."""
    return tuple(sorted({rule.statistic.name for known in stages() for rule in known.releases}))


def num_shares(num_nodes: int) -> int | float:
    """SecAgg+ ``num_shares``: all nodes (1.0) up to 15 nodes, else an odd ~2 log2 N + 1."""
    if num_nodes <= FULL_GRAPH_NODES:
        return 1.0
    return min(num_nodes, 2 * math.ceil(math.log2(num_nodes)) + 1)


@dataclass
class _NodeProxy:
    """What the legacy workflow needs of a ``ClientProxy``: the node id."""

    node_id: int


class _Bridge:
    """Legacy ``Strategy`` stand-in: hands out our FitIns, keeps the unmasked mean."""

    def __init__(self, fitins: dict[int, FitIns]) -> None:
        self.fitins = fitins
        self.mean: list[np.ndarray] | None = None
        self.contributors: list[int] = []

    def configure_fit(self, server_round, parameters, client_manager):  # noqa: D102
        return [(_NodeProxy(nid), ins) for nid, ins in self.fitins.items()]

    def aggregate_fit(self, server_round, results, failures):  # noqa: D102
        if results:
            self.mean = parameters_to_ndarrays(results[0][1].parameters)
            self.contributors = sorted(int(proxy.node_id) for proxy, _ in results)
        return None, {}


class _Workflow(SecAggPlusWorkflow):
    """SecAgg+ that refuses to unmask a sum carrying too few noise shares."""

    def __init__(self, *args, clients_of: Mapping[int, int], n_min: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.clients_of = dict(clients_of)
        self.n_min = n_min
        self.halt_reason = ""
        self.protocol: dict[str, int] = {}

    def setup_stage(self, grid, context, state) -> bool:  # noqa: D102
        ok = super().setup_stage(grid, context, state)
        self.protocol = {"num_shares": int(state.num_shares), "threshold": int(state.threshold)}
        if not ok:
            self.halt_reason = "too few nodes answered the SecAgg+ setup"
        return ok

    def share_keys_stage(self, grid, context, state) -> bool:  # noqa: D102
        ok = super().share_keys_stage(grid, context, state)
        if not ok:
            self.halt_reason = "too few nodes answered the SecAgg+ key sharing"
        return ok

    def collect_masked_vectors_stage(self, grid, context, state) -> bool:  # noqa: D102
        ok = super().collect_masked_vectors_stage(grid, context, state)
        survivors = sum(self.clients_of.get(nid, 0) for nid in state.active_node_ids)
        if survivors < self.n_min:
            counts = (f" ({survivors} of n_min={self.n_min})" if diagnostics_on_console()
                      else "")  # client counts: only with the opt-in
            self.halt_reason = (
                f"the nodes whose masked vectors arrived host too few asked clients{counts}"
                ": their noise shares do not reach the calibrated variance, so the sum is "
                "not unmasked"
            )
            return False
        if not ok:
            self.halt_reason = "too few nodes sent masked vectors (SecAgg+ threshold)"
        return ok

    def unmask_stage(self, grid, context, state) -> bool:  # noqa: D102
        ok = super().unmask_stage(grid, context, state)
        if not ok:
            self.halt_reason = "too few key shares to unmask (SecAgg+ threshold)"
        return ok


@dataclass
class SecAggAggregator:
    """Sums the noisy statistics of one protocol round with SecAgg+.

    Attributes
    ----------
    config : ProtocolConfig
        A private run with ``privacy.aggregation = secagg`` (validated).
    releases : dict of str to Release
        Calibrated releases by stage (``"init-3/sums"``...): the noise ``sigma`` the
        clients' shares must add up to.
    rounds : list of dict
        Per round: nodes and clients asked and aggregated, ``n_min``, the SecAgg+
        parameters, and per statistic ``sigma``, the share scale, the effective
        ``sigma``, the grid step and the worst-case quantization error. Written to
        ``result.json`` under ``privacy.secagg``.
    randomness : PrivateRandomness
        The server's private randomness (the run's): the smoothing draw added to every
        decoded sum (:func:`~fedkmeans.privacy.distributed.smooth_lattice`), so that no
        published value sits on the n-dependent grid.
    """

    config: ProtocolConfig
    releases: dict[str, Release]
    randomness: PrivateRandomness = field(default_factory=PrivateRandomness)
    rounds: list[dict] = field(default_factory=list)
    #: Refuse a round whose grid step exceeds half its smoothing draw
    #: (:func:`~fedkmeans.privacy.distributed.check_lattice`). Only the deterministic
    #: sensitivity audit, which turns the noise down to 1e-5 of the sensitivity, sets it
    #: False.
    lattice_guard: bool = True

    def aggregate(
        self,
        pool: ClientPool,
        stage: str,
        requested: dict[int, np.ndarray],
        arrays: Mapping[str, np.ndarray],
        expected: Mapping[str, tuple[int, ...]],
        round_name: str,
    ) -> Replies:
        """Run one SecAgg+ round; return the noisy sums as aggregated ``Replies``.

        Parameters
        ----------
        pool : ClientPool
            Gives the Grid, the federation settings and the rejection log.
        stage : str
            ClientApp stage computing the statistics (``covariance``, ``centers``...).
        requested : dict of int to ndarray
            Asked client ids per node (only nodes hosting asked clients).
        arrays : mapping of str to ndarray
            Broadcast content.
        expected : mapping of str to tuple
            Statistic names and per-client shapes.
        round_name : str
            Round label; the release of statistic ``s`` is ``"<round_name>/<s>"``.

        Returns
        -------
        Replies
            ``aggregated = True``, no per-client rows: ``stats[s]`` has shape
            ``(1, ...)`` (the noisy sum), ``noise_scales[s]`` the calibrated sigma
            (what the shares of ``n_min`` survivors add up to; the survivors' effective
            sigma is a diagnostic of :attr:`rounds`), ``contributors`` the clients
            whose contributions (and noise shares) are in the sum.

        Raises
        ------
        FederationError
            Fewer than two nodes, or the round halted (dropouts below the SecAgg+
            threshold or below ``n_min`` surviving clients).
        """
        start = time.perf_counter()
        quiet_flower_secagg()  # Flower's lines count the nodes (fedkmeans.console)
        summable = summable_statistics()
        unknown = sorted(set(expected) - set(summable))
        if unknown:
            raise FederationError(
                f"round '{round_name}': statistics {unknown} cannot be securely aggregated "
                f"(privacy.aggregation='secagg' sums only {summable})"
            )
        nodes = sorted(requested)
        if len(nodes) < 2:
            raise FederationError(
                f"round '{round_name}': secure aggregation needs at least 2 nodes hosting "
                f"asked clients, got {len(nodes)} (federation.num-nodes; or use "
                "privacy.aggregation='central')"
            )
        clients_of = {nid: int(requested[nid].size) for nid in nodes}
        n_asked = sum(clients_of.values())
        n_min = min_survivors(n_asked, self.config.federation.min_replies)
        m_max = max(clients_of.values())
        q_range = quantization_range(len(nodes))
        bounds = statistic_bounds(self.config.privacy)
        stats = list(expected)
        per_stat: dict[str, dict] = {}
        shares = {name: share_std(self.releases[f"{round_name}/{name}"].noise_scale, n_min)
                  for name in stats}
        reach = reachable_bounds(bounds, shares)  # the joint clip's reach (budget.py)
        for name in stats:
            release = self.releases[f"{round_name}/{name}"]
            if not mechanism(release.mechanism).additive_shares:
                raise FederationError(
                    f"release '{release.stage}' has {release.mechanism} noise; distributed "
                    "noise needs Gaussian shares (privacy.count-noise='gaussian' or 'auto')"
                )
            s = shares[name]
            step = grid_step(reach[name], s, m_max, q_range)
            try:  # before any node is asked: the published value must hide the grid
                smoothing = check_lattice(step, release.noise_scale) if self.lattice_guard \
                    else release.noise_scale * LATTICE_SMOOTHING
            except ValueError as exc:
                raise FederationError(f"round '{round_name}', '{name}': {exc}") from None
            per_stat[name] = {
                "sigma": release.noise_scale,
                "share_std": s,
                "grid_step": step,
                "smoothing_std": smoothing,
                "residue_density_error": lattice_residue_error(step, smoothing),
            }
        names = sorted(arrays)
        fitins = {}
        for nid in nodes:
            settings = {
                **pool.settings,
                wire.SECAGG_STAGE: stage,
                wire.SECAGG_ROUND: round_name,
                wire.SECAGG_ARRAYS: ",".join(names),
                wire.SECAGG_STATS: ",".join(stats),
                wire.SECAGG_Q: int(q_range),
            }
            for name, info in per_stat.items():
                settings[wire.SECAGG_SHARE + name] = float(info["share_std"])
                settings[wire.SECAGG_STEP + name] = float(info["grid_step"])
            payload = [requested[nid].astype(np.int64)] + [np.asarray(arrays[n]) for n in names]
            fitins[nid] = FitIns(ndarrays_to_parameters(payload), settings)

        bridge = _Bridge(fitins)
        workflow = _Workflow(
            num_shares(len(nodes)),
            THRESHOLD_FRACTION,
            max_weight=1.0,
            clipping_range=1.0,
            quantization_range=q_range,
            modulus_range=MODULUS_RANGE,
            timeout=self.config.federation.round_timeout,
            clients_of=clients_of,
            n_min=n_min,
        )
        workflow(pool.grid, _legacy_context(bridge))
        for nid in nodes:
            if nid not in bridge.contributors:
                pool._reject(nid, round_name, "no masked vector in secure aggregation")
        if bridge.mean is None:
            raise FederationError(
                f"round '{round_name}': secure aggregation halted: "
                f"{workflow.halt_reason or 'no result'}"
            )
        n_nodes = len(bridge.contributors)
        n_surv = sum(clients_of[nid] for nid in bridge.contributors)
        totals, noise_scales = {}, {}
        entries = 0
        for name, mean in zip(stats, bridge.mean, strict=True):
            info = per_stat[name]
            total = decode_sum(mean, n_nodes, info["grid_step"], q_range)
            # the decoded sum lies on the grid h, which depends on the client count: the
            # published value carries a smoothing draw of sigma / 64 (distributed.py)
            total = smooth_lattice(
                total.reshape(expected[name]), info["sigma"], info["grid_step"],
                self.randomness.generator("secagg-smoothing", f"{round_name}/{name}"),
                symmetric=name == "covariance", guard=self.lattice_guard)
            totals[name] = total.reshape((1, *expected[name]))
            info["sigma_effective"] = effective_sigma(info["sigma"], n_min, n_surv)
            info["max_quantization_error"] = n_nodes * info["grid_step"] / 2.0
            info["max_quantization_error_over_sigma"] = (
                info["max_quantization_error"] / info["sigma_effective"]
            )
            # the ledger records the noise the shares guarantee (sigma at n_min
            # survivors), never how many survived: that is a diagnostic
            noise_scales[name] = info["sigma"]
            entries += int(np.prod(expected[name]))
        contributors = np.sort(np.concatenate([requested[nid] for nid in bridge.contributors]))
        seconds = time.perf_counter() - start
        self.rounds.append({
            "round": round_name,
            "nodes": len(nodes),
            "nodes_aggregated": n_nodes,
            "clients": n_asked,
            "clients_aggregated": n_surv,
            "min_clients": n_min,
            "quantization_range": q_range,
            **workflow.protocol,
            "masked_bytes_per_node": 8 * (entries + 1),
            "tail_probability": tail_probability(n_nodes, entries),
            "seconds": seconds,
            "statistics": per_stat,
        })
        # participation and n_min (from the number of asked clients) are diagnostics;
        # the public console says once that the rounds are summed with SecAgg+
        say(LOG, None if len(self.rounds) > 1 else (
            "secure aggregation: every protocol round is summed with SecAgg+ "
            "(participation: diagnostics.json, privacy.secagg.rounds)"),
            f"round '{round_name}': SecAgg+ over {n_nodes}/{len(nodes)} nodes, "
            f"{n_surv}/{n_asked} clients (n_min {n_min}), {seconds:.2f} s")
        return Replies(
            client_ids=np.zeros(0, np.int64),
            stats=totals,
            aggregated=True,
            contributors=contributors.astype(np.int64),
            noise_scales=noise_scales,
        )


def _legacy_context(bridge: _Bridge) -> LegacyContext:
    """A LegacyContext holding what SecAggPlusWorkflow reads (round, parameters)."""
    base = Context(run_id=0, node_id=0, node_config={}, state=RecordDict(), run_config={})
    context = LegacyContext(base, strategy=bridge)
    context.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord(
        {WorkflowKey.CURRENT_ROUND: 1}
    )
    context.state.array_records[MAIN_PARAMS_RECORD] = ArrayRecord()
    return context
