"""The curious server's one-run attacks on what it recorded (its ``report``).

Each function takes the :class:`~fedkmeans.attacks.curious.CuriousObserver` that
observed the run (``view``: its broadcasts, per-client replies and releases) and the
:class:`GroundTruth` of the simulation (evaluation only): client reconstruction from
one reply (:func:`client_reconstruction`), the neighbouring-worlds game on a run's
releases and replies (:func:`game`), the population membership test
(:func:`population`) and label inference (:func:`label_inference`). A target's reply
in each round is recomputed by that round's stage ``client`` (:mod:`fedkmeans.stages`).
"""

from __future__ import annotations

import logging

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
from fedkmeans.data.catalog import dataset
from fedkmeans.experiment.config import ExperimentConfig
from fedkmeans.node import NodeData
from fedkmeans.privacy.clipping import clip_rows_l2, clip_stacked
from fedkmeans.seeding import generator, integer_seed
from fedkmeans.stages import stage_of_round, statistic_bounds

LOG = logging.getLogger(__name__)

#: Statistics released through the server's noisy path (one release per statistic).
RELEASED = ("covariance", "histogram", "sums", "counts")


class GroundTruth:
    """The simulation's client data, as the protocol used it (evaluation only)."""

    def __init__(self, config: ExperimentConfig) -> None:
        self.config = config
        self.clipped = 0
        self._cache: dict[int, np.ndarray] = {}
        self._transform = None
        try:
            data_access.load_client(config, self.all_client_ids()[0])
            self.available = True
        except Exception:  # noqa: BLE001 - deployment: no access to the clients' files
            self.available = False

    def all_client_ids(self) -> list[int]:
        """Every client id of the simulated federation."""
        return data_access.node_client_ids(self.config, 0, 1).astype(int).tolist()

    def points(self, cid: int) -> np.ndarray:
        """Client ``cid``'s points as its node holds them (public transform, Delta clip)."""
        if cid not in self._cache:
            x, _ = data_access.load_client(self.config, cid)
            if self._transform is None:  # the run's public transform, from Q
                self._transform = self.config.public_transform(
                    data_access.load_server(self.config)[0])
            x = self._transform.apply(x)
            radius = self.config.privacy.data_radius
            if self.config.is_private and np.max(np.linalg.norm(x, axis=1)) > radius:
                self.clipped += int((np.linalg.norm(x, axis=1) > radius).sum())
                x = clip_rows_l2(x, radius)
            self._cache[cid] = x
        return self._cache[cid]

    def fresh_points(self, n: int) -> np.ndarray | None:
        """``n`` points of the training distribution that no client holds (mixture only)."""
        return dataset(self.config.data.name).fresh_points(self.config, n)


def _round_clients(replies) -> np.ndarray:
    """Clients whose statistics the round's replies contain (SecAgg: in the sums)."""
    if replies.aggregated:
        return np.asarray(replies.contributors, dtype=np.int64)
    return replies.client_ids


def _label_secagg_view(results: dict) -> None:
    """Say, in place, what the curious server's entries were scored on under SecAgg.

    The game scores the server's view of a target that it never received a reply
    from on the noisy releases (``TargetTrace.replies_observed``), whose noise scale
    is the ledger's calibrated sigma (what the summed shares guarantee).
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


def _sums_rounds(view) -> list[str]:
    return [
        r for r, rep in view.replies.items()
        if {"sums", "counts"} <= set(rep.stats) and not rep.aggregated
    ]

def client_reconstruction(view, truth: GroundTruth) -> dict | None:
    """Threat model 2: each client's cluster means from its own reply (or why not)."""
    if view.secure_aggregation:
        return {
            "threat_model": "2: curious server, secure aggregation",
            "view": "curious_server",
            "individual_replies_observed": 0,
            "note": "SecAgg+: the server received only the noisy sums of all asked "
            "clients, so there is no client reply to read means from; its best "
            "reconstruction is differencing on those sums (differencing.curious_server)",
        }
    rounds = _sums_rounds(view)
    if not rounds:
        return None
    per_round: dict[str, dict] = {}
    cos_all, err_all = [], []
    for round_name in rounds:
        replies, sent = view.replies[round_name], view.broadcasts[round_name]
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
def _ledger(view, result: dict) -> dict[str, dict]:
    return {r["stage"]: r for r in result.get("privacy", {}).get("releases", [])}

def _game_rounds(view) -> list[str]:
    rounds = []
    for name, rep in view.replies.items():
        stats = set(rep.stats) & set(RELEASED)
        if stats and all(f"{name}/{s}" in view.releases for s in stats):
            rounds.append(name)
    return rounds

def _targets(view, truth: GroundTruth, rounds: list[str]) -> list[tuple[int, int | None]]:
    common = None
    for name in rounds:
        ids = set(_round_clients(view.replies[name]).tolist())
        common = ids if common is None else common & ids
    clients = np.array(sorted(common or ()), dtype=np.int64)
    if clients.size == 0:
        return []
    rng = generator(view.config.seed, "attack", "targets")
    n = view.settings.targets
    if view.config.privacy.level == "client":
        chosen = rng.choice(clients, size=min(n, clients.size), replace=False)
        return [(int(c), None) for c in np.sort(chosen)]
    picks = rng.choice(clients, size=n, replace=True)
    return [(int(c), int(rng.integers(truth.points(int(c)).shape[0]))) for c in picks]

def _trace(
    view, truth: GroundTruth, rounds: list[str], ledger: dict, cid: int, index: int | None
) -> TargetTrace:
    config = view.config.protocol  # the ground truth's: an experiment's
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
        replies, sent = view.replies[name], view.broadcasts[name]
        reply_in = _client_reply(node_in, cid, replies.stats, sent, name)
        reply_out = (
            _client_reply(node_out, cid, replies.stats, sent, name) if node_out is not None
            else {s: np.zeros_like(v) for s, v in reply_in.items()}
        )
        for stat, value in reply_in.items():
            stage = f"{name}/{stat}"
            before, after = view.releases[stage]
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
        replies_observed=not any(view.replies[name].aggregated for name in rounds),
    )

def game(view, truth: GroundTruth, result: dict) -> dict:
    """Threat models 1 and 2: the neighbouring-worlds game on the run's releases."""
    rounds = _game_rounds(view)
    if not rounds:
        return dict.fromkeys(
            ("differencing", "membership_lr", "membership_cost", "membership_lira")
        )
    targets = _targets(view, truth, rounds)
    if not targets:
        return dict.fromkeys(
            ("differencing", "membership_lr", "membership_cost", "membership_lira")
        )
    ledger = _ledger(view, result)
    traces = [_trace(view, truth, rounds, ledger, cid, idx) for cid, idx in targets]
    seed, trials = view.config.seed, view.settings.trials
    common = {
        "unit": traces[0].unit,
        "targets": len(traces),
        "trials_per_world": trials,
        "releases": [s.stage for s in traces[0].stages],
    }
    if view.config.is_private and view.config.privacy.sampling_rate < 1:
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
        if view.secure_aggregation:
            _label_secagg_view(out)
        return out
    out["differencing"] = {
        **common,
        "releases": [f"{traces[0].final_round}/sums", f"{traces[0].final_round}/counts"],
        "threat_models": "analyst = 1 (two noisy releases, fresh noise each); "
        "curious_server = 2 (the target client's two replies)",
        **differencing(traces, generator(seed, "attack", "differencing"), trials),
    }
    if view.secure_aggregation:
        _label_secagg_view(out)
    if traces[0].unit == "datapoint":
        out["membership_cost"] = {
            **common,
            "releases": [f"{traces[0].final_round}/sums", f"{traces[0].final_round}/counts"],
            "threat_model": "1: analyst sees centers from the final round and a shadow "
            "reference trained without the target",
            **cost_membership(
                traces, generator(seed, "attack", "cost"), trials, view._min_count,
            ),
        }
        out["membership_lira"] = {
            **common,
            "releases": [f"{traces[0].final_round}/sums", f"{traces[0].final_round}/counts"],
            "shadow_models_per_world": view.settings.shadows,
            "threat_model": "1: analyst sees the final centers; LiRA with per-target "
            "shadow models in and out (shadow releases of the final round)",
            **lira_membership(
                traces, generator(seed, "attack", "lira"), trials, view.settings.shadows,
                view._min_count,
            ),
        }
    else:
        out["membership_cost"] = out["membership_lira"] = None
    return out

# -- threat model 1: population cost test, label inference ------------------------
def population(view, truth: GroundTruth, centers: np.ndarray) -> dict | None:
    """Threat model 1: members against fresh points of the population, by cost."""
    fresh = truth.fresh_points(view.settings.population)
    if fresh is None:
        return None
    rng = generator(view.config.seed, "attack", "population")
    ids = np.array(sorted(truth.all_client_ids()), dtype=np.int64)
    picks = rng.choice(ids, size=view.settings.population, replace=True)
    members = []
    for cid in np.unique(picks).tolist():  # raw points, like the fresh ones
        pts, _ = data_access.load_client(view.config, int(cid))
        members.append(pts[rng.integers(pts.shape[0], size=int((picks == cid).sum()))])
    members = np.concatenate(members)
    return {
        "threat_model": "1: analyst sees the final centers; members vs fresh points of "
        "the same distribution, score = -squared distance to the nearest center",
        **membership_summary(cost_scores(members, centers), cost_scores(fresh, centers)),
    }

def label_inference(view, centers: np.ndarray) -> dict:
    """Threat model 1: an outsider recovering the partition from the centers."""
    server_x, _ = data_access.load_server(view.config)
    lower, upper = server_x.min(axis=0), server_x.max(axis=0)
    upper = np.where(upper > lower, upper, lower + 1.0)
    truth = GroundTruth(view.config)
    test = truth.fresh_points(2000)
    test_name = "fresh points of the training distribution"
    if test is None:
        test, test_name = server_x, "the server's public data"
    curves = {}
    for strategy in STRATEGIES:
        curves[strategy] = label_inference_curve(
            centers, test, lower, upper, strategy, view.settings.label_queries,
            generator(view.config.seed, "attack", "label-inference", strategy),
            seed=integer_seed(view.config.seed, "attack", "label-inference"),
        )
    return {
        "threat_model": "1 (outsider): submits points, reads nearest-center labels",
        "query_box": "coordinate bounds of the server's public data",
        "test_points": test_name,
        "accuracy": curves,
    }


