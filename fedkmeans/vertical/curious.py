"""The vertical protocol's curious server: an observer handed to the ServerApp.

It keeps one party's decoded distance reports as the honest server receives them
(:meth:`CuriousVerticalServer.on_report`), then reconstructs that party's feature
slice (:mod:`fedkmeans.vertical.attack`) and has the party score the estimates on
its raw data (``attack_eval``: non-private evaluation, outside the protocol). The
honest path (:func:`fedkmeans.vertical.server_app.run_vertical`) never builds it:
the ServerApp's entry point does, when ``attack`` is not ``none``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from fedkmeans.vertical.attack import known_centers_attack, unknown_centers_attack
from fedkmeans.vertical.config import VerticalConfig
from fedkmeans.vertical.defence import report_noise_variance
from fedkmeans.vertical.protocol import random_initial_centers

__all__ = ["PRIORS", "CuriousVerticalServer"]

#: What the server knows of a feature after the parties' public scaling: (mean, variance).
PRIORS = {"standard": (0.0, 1.0), "minmax": (0.5, 1.0 / 12.0), "none": None}


@dataclass
class CuriousVerticalServer:
    """Keeps party ``config.attack_party``'s reports; attacks them at the end.

    Attributes
    ----------
    config : VerticalConfig
    observed : list of ndarray of shape (n, k)
        The party's decoded report of every iteration.
    scales : list of float
        The discretisation scale the party sent with each report (-1 if none).
    """

    config: VerticalConfig
    observed: list[np.ndarray] = field(default_factory=list)
    scales: list[float] = field(default_factory=list)
    #: Key of :meth:`report`'s section in ``result.json``.
    result_key: ClassVar[str] = "attack"

    def on_report(self, party: int, values: np.ndarray, settings: dict) -> None:
        """One party's decoded report of an iteration (kept for the attacked party)."""
        if party == self.config.attack_party:
            self.observed.append(values)
            self.scales.append(float(settings.get("scale", -1.0)))

    def report(
        self, *, history: list[np.ndarray], dims: dict[int, int],
        ask: Callable[[int, dict], dict],
    ) -> dict:
        """Reconstruct the party's slice; return the scores the party computed.

        Parameters
        ----------
        history : list of ndarray of shape (n,)
            The labels the server sent, one per iteration.
        dims : dict of int to int
            Each party's feature dimension.
        ask : callable
            ``ask(party, arrays)`` sends ``attack_eval`` to that party, returns its arrays.
        """
        config = self.config
        party, dim = config.attack_party, dims[config.attack_party]
        stack = np.stack(self.observed)
        labels = np.stack(history)
        noise = np.array([report_noise_variance(
            defence=config.defence, levels=config.levels, epsilon=config.epsilon,
            l_ratio=config.l_ratio, mechanism=config.mechanism, scale=s) for s in self.scales])
        if config.attack == "known":
            initial = random_initial_centers(config.seed, party, config.k, dim)
            prior = PRIORS[config.scale]
            estimates = {
                "iteration-0": known_centers_attack(stack, labels, initial, 0, noise, prior),
                "all-iterations": known_centers_attack(stack, labels, initial, 5, noise, prior),
            }
        else:
            fused = config.defence != "none"
            estimates = {"isometry": unknown_centers_attack(stack, dim, fused=fused)}
        arrays = ask(party, {"estimates": np.stack(list(estimates.values()))})
        scores = {}
        for j, name in enumerate(estimates):
            aligned = config.attack == "unknown"
            scores[name] = {
                "rmse": float(arrays["rmse_aligned" if aligned else "rmse"][j]),
                "within_10pct": float(arrays["within_aligned" if aligned else "within"][j]),
                "aligned": "procrustes" if aligned else "none",
            }
        return {"mode": config.attack, "party": party, "party_dim": dim, "k": config.k,
                "iterations_seen": len(self.observed), "estimates": scores}
