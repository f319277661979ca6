"""An honest-but-curious server: runs the protocol unchanged, keeps what it sees, attacks.

It is an observer attached to the honest server's :class:`ClientPool` and
:class:`ServerContext` (wrap, don't fork): the protocol, noise and accounting are
exactly those of the honest server; it only records

* ``on_broadcast(round, arrays, clients)``: everything the server sends,
* ``on_replies(round, replies)``: every client's individual reply (stacked rows),
* ``on_release(stage, before, after)``: each aggregate before and after noise,

and, at the end of the run, :meth:`CuriousServer.report` runs the attacks that make
sense on one run and returns their success metrics for ``result.json`` under
``attack`` (never a data value):

``client_reconstruction``
    Threat model 2 (curious server sees replies): every client's cluster means
    read off its reply, in every observed round that asked for sums and counts;
    cosine and relative error against the truth.
``differencing``, ``membership_lr``, ``membership_cost``
    The neighbouring-worlds game (:mod:`fedkmeans.attacks.game`) for sampled targets:
    on the *analyst's* view (threat model 1: the noisy releases, fresh noise at the
    ledger's scale) and on the *curious server's* view (the target client's replies).
``membership_lira``
    LiRA (Carlini et al. 2022) on the final centers, data-point level: per target,
    shadow models with and without it (independent noisy releases of the final round)
    calibrate a Gaussian likelihood ratio of the target's distance to the centers.
``membership_population``
    The cost test without a reference: training points against fresh points of the
    same distribution, scored on the final centers (mixture data only).
``label_inference``
    An outsider querying the released model's labels (uniform, distance-based,
    stable-label sampling).

Ground truth (the clients' points) is loaded from the simulation's data for
*evaluation* only; it is unavailable when the server cannot load the clients' data
(deployment with per-node data files), and then only the observations are reported.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from fedkmeans import data as data_access
from fedkmeans.attacks.game import (
    StageTrace,
    TargetTrace,
    cost_membership,
    differencing,
    lira_membership,
    lr_membership,
)
from fedkmeans.attacks.label_inference import STRATEGIES, label_inference_curve
from fedkmeans.attacks.membership import cost_scores
from fedkmeans.attacks.reconstruction import attack_client_reply
from fedkmeans.attacks.scoring import membership_summary
from fedkmeans.config import AUTO, ExperimentConfig
from fedkmeans.node import NodeData
from fedkmeans.privacy.clipping import clip_rows_l2, clip_stacked
from fedkmeans.seeding import generator, integer_seed
from fedkmeans.stages import stage_of_round, statistic_bounds
from fedkmeans.strategies.replies import Replies

LOG = logging.getLogger(__name__)

#: Statistics released through the server's noisy path (one release per statistic).
RELEASED = ("covariance", "histogram", "sums", "counts")

NOTE = (
    "Attack success is measured against the simulation's ground truth (evaluation only; "
    "no data value is written). 'analyst' = threat model 1: what the server releases, "
    "re-drawn with fresh noise at the ledger's scale in a world with and one without "
    "the target; 'curious_server' = threat model 2: the individual replies, which "
    "central DP does not protect."
)


@dataclass(frozen=True)
class AttackSettings:
    """Sizes of the attacks run by :meth:`CuriousServer.report`.

    Attributes
    ----------
    targets : int
        Target units (points or clients) of the neighbouring-worlds game.
    trials : int
        Noisy releases per world and target.
    population : int
        Members (and as many fresh non-members) of the population cost test.
    label_queries : tuple of int
        Query budgets of the label-inference attack.
    shadows : int
        Shadow models per world and target of the LiRA test.
    """

    targets: int = 100
    trials: int = 40
    shadows: int = 32
    population: int = 500
    label_queries: tuple[int, ...] = (100, 1000)

    def __post_init__(self) -> None:
        for name in ("targets", "trials", "population", "shadows"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if not self.label_queries or min(self.label_queries) < 1:
            raise ValueError(
                f"label_queries must be non-empty integers >= 1, got {self.label_queries!r}"
            )


@dataclass
class CuriousServer:
    """Records the server's view of a run (observer hooks of the pool and context)."""

    config: ExperimentConfig
    settings: AttackSettings = field(default_factory=AttackSettings)
    broadcasts: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    replies: dict[str, object] = field(default_factory=dict)
    releases: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    _pending: dict[str, list] = field(default_factory=dict, repr=False)

    #: Key of :meth:`report`'s section in ``result.json``.
    result_key: ClassVar[str] = "attack"

    def on_start(self, config: ExperimentConfig) -> None:
        """Take the run's resolved settings (``auto`` replaced), before any round."""
        self.config = config

    def on_broadcast(self, round_name: str, arrays: dict, clients: np.ndarray) -> None:
        """Keep what the server sent in ``round_name`` and to which clients."""
        self.broadcasts[round_name] = {**arrays, "client_ids": clients}

    def on_client_rows(self, round_name: str, client_ids: np.ndarray, rows: dict) -> None:
        """Keep one message's accepted rows before the honest path folds and drops them.

        This copy is the attack's memory, paid by the curious server: the honest
        server keeps only running sums (:mod:`fedkmeans.strategies.aggregation`).
        """
        kept = {name: np.array(value, copy=True) for name, value in rows.items()}
        self._pending.setdefault(round_name, []).append((np.asarray(client_ids), kept))

    def on_replies(self, round_name: str, replies) -> None:
        """Keep every client's individual reply of ``round_name``.

        With streaming aggregation the pool hands over running sums (``folded``); the
        individual rows are those :meth:`on_client_rows` kept, stacked in client-id
        order here, exactly as the stacked path would have given them.
        """
        batches = self._pending.pop(round_name, [])
        if getattr(replies, "folded", False):
            ids = np.concatenate([np.zeros(0, np.int64), *(b[0] for b in batches)])
            order = np.argsort(ids, kind="stable")
            names = list(batches[0][1]) if batches else list(replies.stats)
            stats = {
                name: (np.concatenate([b[1][name] for b in batches])[order] if batches
                       else np.zeros((0, *replies.stats[name].shape[1:])))
                for name in names
            }
            replies = Replies(ids[order], stats)
        self.replies[round_name] = replies

    def on_release(self, stage: str, before: np.ndarray, after: np.ndarray) -> None:
        """Keep the aggregate of ``stage`` before and after noise."""
        self.releases[stage] = (before, after)

    # -- the report ------------------------------------------------------------------
    @property
    def _min_count(self) -> float:
        """The count threshold the attacks' re-simulation uses (1 for ``auto``)."""
        value = self.config.privacy.min_cluster_count
        return 1.0 if value == AUTO else float(value)

    @staticmethod
    def summary_lines(report: dict) -> list[str]:
        """The console lines of :meth:`report`'s result (:func:`summary_table`)."""
        return summary_table(report)

    def report(self, *, centers: np.ndarray, result: dict) -> dict:
        """Run the one-run attacks; return their metrics (no data values).

        Parameters
        ----------
        centers : ndarray of shape (k, d)
            The released final centers.
        result : dict
            The run's result (``privacy.releases`` gives the ledger's noise scales).

        Returns
        -------
        dict
            Observations, then one entry per attack (``{"error": ...}`` if an attack
            could not run, ``None`` where it does not apply).
        """
        start = time.perf_counter()
        out: dict = {
            "observed_rounds": sorted(self.replies),
            "observed_releases": sorted(self.releases),
            "clients_observed": int(
                max((r.client_ids.size for r in self.replies.values()), default=0)
            ),
            "privacy_unit": self.config.privacy.level,
            "secure_aggregation": self.secure_aggregation,
            "note": NOTE,
        }
        truth = _GroundTruth(self.config)
        if not truth.available:
            out["ground_truth"] = "unavailable: the server cannot load the clients' data"
            return out
        attacks = {
            "client_reconstruction": self._client_reconstruction,
            "neighbouring_worlds": lambda t: self._game(t, result),
            "membership_population": lambda t: self._population(t, centers),
            "label_inference": lambda t: self._label_inference(centers),
        }
        for name, attack in attacks.items():
            try:
                value = attack(truth)
            except Exception as err:  # an attack must never cost the run its result
                LOG.warning("attack %s failed: %s", name, type(err).__name__)
                value = {"error": f"{type(err).__name__}: {err}"}
            if name == "neighbouring_worlds" and isinstance(value, dict) and "error" not in value:
                out.update(value)
            else:
                out[name] = value
        out["seconds"] = time.perf_counter() - start
        return out

    # -- threat model 2: reconstruction from replies --------------------------------
    @property
    def secure_aggregation(self) -> bool:
        """True when the server only ever received SecAgg+ noisy sums."""
        return any(rep.aggregated for rep in self.replies.values())

    def _sums_rounds(self) -> list[str]:
        return [
            r for r, rep in self.replies.items()
            if {"sums", "counts"} <= set(rep.stats) and not rep.aggregated
        ]

    def _client_reconstruction(self, truth: _GroundTruth) -> dict | None:
        if self.secure_aggregation:
            return {
                "threat_model": "2: curious server, secure aggregation",
                "view": "curious_server",
                "individual_replies_observed": 0,
                "note": "SecAgg+: the server received only the noisy sums of all asked "
                "clients, so there is no client reply to read means from; its best "
                "reconstruction is differencing on those sums (differencing.curious_server)",
            }
        rounds = self._sums_rounds()
        if not rounds:
            return None
        per_round: dict[str, dict] = {}
        cos_all, err_all = [], []
        for round_name in rounds:
            replies, sent = self.replies[round_name], self.broadcasts[round_name]
            centers, basis = _assignment(sent)
            cosines, errors, clusters, recovered = [], [], 0, 0
            for row, cid in enumerate(replies.client_ids.tolist()):
                rec = attack_client_reply(
                    replies.stats["sums"][row], replies.stats["counts"][row],
                    truth.points(cid), centers, basis,
                )
                cosines.append(rec.cosines)
                errors.append(rec.relative_errors)
                clusters += rec.clusters
                recovered += rec.points_recovered
            cos, err = np.concatenate(cosines), np.concatenate(errors)
            cos_all.append(cos)
            err_all.append(err)
            per_round[round_name] = {
                "clients": int(replies.client_ids.size),
                "clusters": clusters,
                "clusters_reconstructed": int(cos.size),
                "cosine_mean": float(cos.mean()) if cos.size else None,
                "cosine_min": float(cos.min()) if cos.size else None,
                "relative_error_mean": float(err.mean()) if err.size else None,
                "relative_error_max": float(err.max()) if err.size else None,
                "points_recovered_from_one_point_clusters": recovered,
            }
        cos, err = np.concatenate(cos_all), np.concatenate(err_all)
        return {
            "threat_model": "2: curious server sees each client's reply",
            "view": "curious_server",
            "truth": "each client's cluster means of its points as the protocol used them "
            "(after the client's own clipping to privacy.data-radius)",
            "points_clipped_by_clients": truth.clipped,
            "cosine_mean": float(cos.mean()) if cos.size else None,
            "cosine_min": float(cos.min()) if cos.size else None,
            "relative_error_max": float(err.max()) if err.size else None,
            "rounds": per_round,
        }

    # -- the neighbouring-worlds game (threat models 1 and 2) -------------------------
    def _ledger(self, result: dict) -> dict[str, dict]:
        return {r["stage"]: r for r in result.get("privacy", {}).get("releases", [])}

    def _game_rounds(self) -> list[str]:
        rounds = []
        for name, rep in self.replies.items():
            stats = set(rep.stats) & set(RELEASED)
            if stats and all(f"{name}/{s}" in self.releases for s in stats):
                rounds.append(name)
        return rounds

    def _targets(self, truth: _GroundTruth, rounds: list[str]) -> list[tuple[int, int | None]]:
        common = None
        for name in rounds:
            ids = set(_round_clients(self.replies[name]).tolist())
            common = ids if common is None else common & ids
        clients = np.array(sorted(common or ()), dtype=np.int64)
        if clients.size == 0:
            return []
        rng = generator(self.config.seed, "attack", "targets")
        n = self.settings.targets
        if self.config.privacy.level == "client":
            chosen = rng.choice(clients, size=min(n, clients.size), replace=False)
            return [(int(c), None) for c in np.sort(chosen)]
        picks = rng.choice(clients, size=n, replace=True)
        return [(int(c), int(rng.integers(truth.points(int(c)).shape[0]))) for c in picks]

    def _trace(
        self, truth: _GroundTruth, rounds: list[str], ledger: dict, cid: int, index: int | None
    ) -> TargetTrace:
        config = self.config
        points = truth.points(cid)
        unit = "client" if index is None else "datapoint"
        node_in = NodeData(config, np.array([cid]), {cid: points}, {cid: None})
        node_out = None
        if index is not None:
            rest = np.delete(points, index, axis=0)
            node_out = NodeData(config, np.array([cid]), {cid: rest}, {cid: None})
        bounds = statistic_bounds(config.privacy)
        stages, final_round, fallback = [], None, None
        for name in rounds:
            replies, sent = self.replies[name], self.broadcasts[name]
            reply_in = _client_reply(node_in, cid, replies.stats, sent, name)
            reply_out = (
                _client_reply(node_out, cid, replies.stats, sent, name) if node_out is not None
                else {s: np.zeros_like(v) for s, v in reply_in.items()}
            )
            for stat, value in reply_in.items():
                stage = f"{name}/{stat}"
                before, after = self.releases[stage]
                if replies.aggregated:
                    # The exact sum never reached the server. Centre the two worlds on
                    # the noisy sum it did see: only their difference (the target's
                    # clipped contribution) matters to the tests, never the centre.
                    observed, before = value, after
                else:
                    row = int(np.flatnonzero(replies.client_ids == cid)[0])
                    observed = replies.stats[stat][row]
                    if not np.allclose(observed, value, rtol=1e-9, atol=1e-9):
                        raise RuntimeError(
                            f"round {name!r}: recomputed reply of client {cid} differs "
                            "from the observed one"
                        )
                entry = ledger.get(stage)
                if config.is_private:
                    bound = bounds[stat]
                    clip = lambda v, b=bound: clip_stacked(v[None], b.server_bound, b.norm)[0]  # noqa: E731
                else:
                    clip = np.asarray  # noqa: E731
                aggregate_out = before - clip(observed) + clip(reply_out[stat])
                stages.append(StageTrace(
                    stage=stage,
                    mechanism=entry["mechanism"] if entry else _planned_mechanism(
                        config, name, stat),
                    sensitivity=entry["sensitivity"] if entry else 1.0,
                    noise_scale=entry["noise_scale"] if entry else 0.0,
                    symmetric=stat == "covariance",
                    aggregate_in=before,
                    aggregate_out=aggregate_out,
                    reply_in=observed,
                    reply_out=reply_out[stat],
                ))
            if "sums" in reply_in:
                final_round = name
                assign_centers, basis = _assignment(sent)
                fallback = assign_centers if basis is None else assign_centers @ basis
        return TargetTrace(
            unit=unit,
            point=None if index is None else points[index].copy(),
            stages=tuple(stages),
            final_round=final_round,
            fallback=fallback,
            replies_observed=not any(self.replies[name].aggregated for name in rounds),
        )

    def _game(self, truth: _GroundTruth, result: dict) -> dict:
        rounds = self._game_rounds()
        if not rounds:
            return dict.fromkeys(
                ("differencing", "membership_lr", "membership_cost", "membership_lira")
            )
        targets = self._targets(truth, rounds)
        if not targets:
            return dict.fromkeys(
                ("differencing", "membership_lr", "membership_cost", "membership_lira")
            )
        ledger = self._ledger(result)
        traces = [self._trace(truth, rounds, ledger, cid, idx) for cid, idx in targets]
        seed, trials = self.config.seed, self.settings.trials
        common = {
            "unit": traces[0].unit,
            "targets": len(traces),
            "trials_per_world": trials,
            "releases": [s.stage for s in traces[0].stages],
        }
        if self.config.is_private and self.config.privacy.sampling_rate < 1:
            common["caveat"] = (
                "targets are drawn from clients sampled in every observed round: the game "
                "conditions on the target's inclusion, so it leaves out the amplification by "
                "sampling that the accountant counts (analyst numbers overstate DP's bound)"
            )
        out: dict = {}
        out["membership_lr"] = {
            **common,
            "threat_models": "analyst = 1 (noisy releases, all of them); curious_server = 2 "
            "(the target client's replies)",
            **lr_membership(traces, generator(seed, "attack", "lr"), trials),
        }
        if traces[0].final_round is None:
            out["differencing"] = out["membership_cost"] = out["membership_lira"] = None
            if self.secure_aggregation:
                _label_secagg_view(out)
            return out
        out["differencing"] = {
            **common,
            "releases": [f"{traces[0].final_round}/sums", f"{traces[0].final_round}/counts"],
            "threat_models": "analyst = 1 (two noisy releases, fresh noise each); "
            "curious_server = 2 (the target client's two replies)",
            **differencing(traces, generator(seed, "attack", "differencing"), trials),
        }
        if self.secure_aggregation:
            _label_secagg_view(out)
        if traces[0].unit == "datapoint":
            out["membership_cost"] = {
                **common,
                "releases": [f"{traces[0].final_round}/sums", f"{traces[0].final_round}/counts"],
                "threat_model": "1: analyst sees centers from the final round and a shadow "
                "reference trained without the target",
                **cost_membership(
                    traces, generator(seed, "attack", "cost"), trials, self._min_count,
                ),
            }
            out["membership_lira"] = {
                **common,
                "releases": [f"{traces[0].final_round}/sums", f"{traces[0].final_round}/counts"],
                "shadow_models_per_world": self.settings.shadows,
                "threat_model": "1: analyst sees the final centers; LiRA with per-target "
                "shadow models in and out (shadow releases of the final round)",
                **lira_membership(
                    traces, generator(seed, "attack", "lira"), trials, self.settings.shadows,
                    self._min_count,
                ),
            }
        else:
            out["membership_cost"] = out["membership_lira"] = None
        return out

    # -- threat model 1: population cost test, label inference ------------------------
    def _population(self, truth: _GroundTruth, centers: np.ndarray) -> dict | None:
        fresh = truth.fresh_points(self.settings.population)
        if fresh is None:
            return None
        rng = generator(self.config.seed, "attack", "population")
        ids = np.array(sorted(truth.all_client_ids()), dtype=np.int64)
        picks = rng.choice(ids, size=self.settings.population, replace=True)
        members = []
        for cid in np.unique(picks).tolist():  # raw points, like the fresh ones
            pts, _ = data_access.load_client(self.config, int(cid))
            members.append(pts[rng.integers(pts.shape[0], size=int((picks == cid).sum()))])
        members = np.concatenate(members)
        return {
            "threat_model": "1: analyst sees the final centers; members vs fresh points of "
            "the same distribution, score = -squared distance to the nearest center",
            **membership_summary(cost_scores(members, centers), cost_scores(fresh, centers)),
        }

    def _label_inference(self, centers: np.ndarray) -> dict:
        server_x, _ = data_access.load_server(self.config)
        lower, upper = server_x.min(axis=0), server_x.max(axis=0)
        upper = np.where(upper > lower, upper, lower + 1.0)
        truth = _GroundTruth(self.config)
        test = truth.fresh_points(2000)
        test_name = "fresh points of the training distribution"
        if test is None:
            test, test_name = server_x, "the server's public data"
        curves = {}
        for strategy in STRATEGIES:
            curves[strategy] = label_inference_curve(
                centers, test, lower, upper, strategy, self.settings.label_queries,
                generator(self.config.seed, "attack", "label-inference", strategy),
                seed=integer_seed(self.config.seed, "attack", "label-inference"),
            )
        return {
            "threat_model": "1 (outsider): submits points, reads nearest-center labels",
            "query_box": "coordinate bounds of the server's public data",
            "test_points": test_name,
            "accuracy": curves,
        }


class _GroundTruth:
    """The simulation's client data, as the protocol used it (evaluation only)."""

    def __init__(self, config: ExperimentConfig) -> None:
        self.config = config
        self.clipped = 0
        self._cache: dict[int, np.ndarray] = {}
        try:
            data_access.load_client(config, self.all_client_ids()[0])
            self.available = True
        except Exception:  # noqa: BLE001 - deployment: no access to the clients' files
            self.available = False

    def all_client_ids(self) -> list[int]:
        if self.config.data.name == "mixture":
            return list(range(self.config.data.num_clients))
        return data_access._npz(self.config.data.path).client_ids().astype(int).tolist()

    def points(self, cid: int) -> np.ndarray:
        if cid not in self._cache:
            x, _ = data_access.load_client(self.config, cid)
            radius = self.config.privacy.data_radius
            if self.config.is_private and np.max(np.linalg.norm(x, axis=1)) > radius:
                self.clipped += int((np.linalg.norm(x, axis=1) > radius).sum())
                x = clip_rows_l2(x, radius)
            self._cache[cid] = x
        return self._cache[cid]

    def fresh_points(self, n: int) -> np.ndarray | None:
        """``n`` points of the training distribution that no client holds (mixture only)."""
        if self.config.data.name != "mixture":
            return None
        per = self.config.data.points_per_client
        first = self.config.data.num_clients
        parts = [
            data_access.load_client(self.config, first + i)[0]
            for i in range(math.ceil(n / per))
        ]
        return np.concatenate(parts)[:n]


def _round_clients(replies) -> np.ndarray:
    """Clients whose statistics the round's replies contain (SecAgg: in the sums)."""
    if replies.aggregated:
        return np.asarray(replies.contributors, dtype=np.int64)
    return replies.client_ids


def _label_secagg_view(results: dict) -> None:
    """Say, in place, what the curious server's entries were scored on under SecAgg.

    The game scores the server's view of a target that it never received a reply
    from on the noisy releases (``TargetTrace.replies_observed``), whose noise scale
    is the ledger's effective sigma of the summed shares.
    """
    for name in ("membership_lr", "differencing"):
        entry = results.get(name)
        if entry and "curious_server" in entry:
            entry["curious_server"]["view"] = (
                "SecAgg+: only the noisy sums of all asked clients (the analyst's view); "
                "noise shares secret (each client's CSPRNG)"
            )


def _assignment(sent: dict) -> tuple[np.ndarray, np.ndarray | None]:
    """Centers and projection the clients assigned their points with in a round."""
    if "projected_centers" in sent:
        return sent["projected_centers"], sent["basis"]
    return sent["centers"], None


def _client_reply(
    node: NodeData, cid: int, stats: dict, sent: dict, round_name: str
) -> dict[str, np.ndarray]:
    """The real client code's reply of ``cid`` in ``round_name`` (its stage's ``client``)."""
    reply = stage_of_round(round_name).client(node, [cid], sent)
    return {name: value[0] for name, value in reply.items() if name in stats}


def _planned_mechanism(config: ExperimentConfig, round_name: str, statistic: str) -> str:
    """The mechanism the round's stage plans for ``statistic`` (a run without noise)."""
    rules = stage_of_round(round_name).releases
    return next(r.mechanism(config.privacy) for r in rules if r.statistic.name == statistic)


def build_curious_server(config: ExperimentConfig) -> CuriousServer:
    """The observer selected by ``attack`` (validated by the config)."""
    return CuriousServer(config)


def summary_table(report: dict) -> list[str]:
    """A short table of the attack report's headline numbers (for the console).

    One line per attack and view: the success metric and what chance would be.
    """
    rows = [("attack", "view", "metric", "value", "chance")]

    def add(name, view, metric, value, chance):
        if value is not None:
            rows.append((name, view, metric, f"{float(value):.3f}", chance))

    rec = report.get("client_reconstruction") or {}
    add("reconstruction", "curious server", "min cosine", rec.get("cosine_min"), "-")
    for name in ("differencing", "membership_lr"):
        entry = report.get(name) or {}
        for view in ("analyst", "curious_server"):
            scores = entry.get(view) or {}
            if name == "differencing":
                add(name, view.replace("_", " "), "mean |cos|", scores.get("abs_cosine_mean"),
                    f"{scores.get('abs_cosine_chance', 0.0):.3f}")
            else:
                add(name, view.replace("_", " "), "AUC", scores.get("auc"), "0.500")
    for name in ("membership_cost", "membership_lira", "membership_population"):
        add(name, "analyst", "AUC", (report.get(name) or {}).get("auc"), "0.500")
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in rows]
