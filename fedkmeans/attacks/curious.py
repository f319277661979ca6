"""An honest-but-curious server: runs the protocol unchanged, keeps what it sees, attacks.

It is an observer attached to the honest server's :class:`ClientPool` and
:class:`ServerContext` (wrap, don't fork): the protocol, noise and accounting are
exactly those of the honest server; it only records

* ``on_broadcast(round, arrays, clients)``: everything the server sends,
* ``on_replies(round, replies)``: every client's individual reply (stacked rows),
* ``on_release(stage, before, after)``: each aggregate before and after noise,

and, at the end of the run, :meth:`CuriousObserver.report` runs the attacks that make
sense on one run (:mod:`fedkmeans.attacks.curious_attacks`) and returns their success
metrics for ``result.json`` under
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
import time
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np

from fedkmeans.attacks.curious_attacks import (
    GroundTruth,
    client_reconstruction,
    game,
    label_inference,
    population,
)
from fedkmeans.config import AUTO, ProtocolConfig
from fedkmeans.experiment.config import ExperimentConfig
from fedkmeans.server.observer import RunObserver
from fedkmeans.server.replies import Replies

LOG = logging.getLogger(__name__)

NOTE = (
    "Attack success is measured against the simulation's ground truth (evaluation only; "
    "no data value is written). 'analyst' = threat model 1: what the server releases, "
    "re-drawn with fresh noise at the ledger's scale in a world with and one without "
    "the target; 'curious_server' = threat model 2: the individual replies, which "
    "central DP does not protect."
)


@dataclass(frozen=True)
class AttackSettings:
    """Sizes of the attacks run by :meth:`CuriousObserver.report`.

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
class CuriousObserver(RunObserver):
    """Records the server's view of a run (observer hooks of the pool and context)."""

    config: ExperimentConfig | ProtocolConfig
    settings: AttackSettings = field(default_factory=AttackSettings)
    broadcasts: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    replies: dict[str, object] = field(default_factory=dict)
    releases: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    _pending: dict[str, list] = field(default_factory=dict, repr=False)

    #: Key of :meth:`report`'s section in ``result.json``.
    result_key: ClassVar[str] = "attack"
    #: Keep every message's rows (the honest server folds and drops them).
    wants_client_rows: ClassVar[bool] = True

    def on_start(self, config: ProtocolConfig) -> None:
        """Take the run's resolved protocol settings (``auto`` replaced), before any round.

        Embedded in the experiment config the attack was built with (its data settings
        are the ground truth's); a strategy's observer (:class:`CuriousServer`) has the
        protocol's config alone, and no ground truth.
        """
        self.config = (replace(self.config, protocol=config)
                       if isinstance(self.config, ExperimentConfig) else config)

    def on_broadcast(self, round_name: str, arrays: dict, clients: np.ndarray) -> None:
        """Keep what the server sent in ``round_name`` and to which clients."""
        self.broadcasts[round_name] = {**arrays, "client_ids": clients}

    def on_client_rows(self, round_name: str, client_ids: np.ndarray, rows: dict) -> None:
        """Keep one message's accepted rows before the honest path folds and drops them.

        This copy is the attack's memory, paid by the curious server: the honest
        server keeps only running sums (:mod:`fedkmeans.server.aggregation`).
        """
        kept = {name: np.array(value, copy=True) for name, value in rows.items()}
        self._pending.setdefault(round_name, []).append((np.asarray(client_ids), kept))

    def on_replies(self, round_name: str, replies: Replies) -> None:
        """Keep every client's individual reply of ``round_name``.

        With streaming aggregation the pool hands over running sums (``folded``); the
        individual rows are those :meth:`on_client_rows` kept, stacked in client-id
        order here, exactly as the stacked path would have given them.
        """
        batches = self._pending.pop(round_name, [])
        if replies.folded:
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

    def summary_lines(self, report: dict) -> list[str]:
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
        truth = GroundTruth(self.config)
        if not truth.available:
            out["ground_truth"] = "unavailable: the server cannot load the clients' data"
            return out
        attacks = {
            "client_reconstruction": lambda t: client_reconstruction(self, t),
            "neighbouring_worlds": lambda t: game(self, t, result),
            "membership_population": lambda t: population(self, t, centers),
            "label_inference": lambda t: label_inference(self, centers),
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


def build_curious_server(config: ExperimentConfig) -> CuriousObserver:
    """The observer selected by ``attack`` (validated by the config)."""
    return CuriousObserver(config)


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
