"""What an algorithm is: its stages, its initialisation, its capabilities. One object.

An :class:`Algorithm` is everything the rest of the code needs to know about one
federated k-means protocol: the client rounds of its initialisation, the function
that computes its initial centers, whether FedDP-Lloyds steps follow, and what it can
do (private or not, choose k, end with the final private choice, a tunable budget
split, spare centers). The config's allowed values, its rules, the tuning and the
report read these capabilities from the registry (:data:`fedkmeans.plugins.
ALGORITHMS`); nothing compares an algorithm's name with a string.

Adding a baseline is one file::

    TOY = register_algorithm(Algorithm(
        "toy", initialise=lambda ctx: ctx.server_x[: ctx.k].copy()))

and ``algorithm=toy`` in the config (the Hydra option is derived from the registry).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fedkmeans.config import PrivacySettings
from fedkmeans.plugins import ALGORITHMS
from fedkmeans.privacy.calibration import PlannedRelease
from fedkmeans.server.context import ServerContext
from fedkmeans.stages import Stage, stage
from fedkmeans.stages.check import final_check
from fedkmeans.stages.lloyds import lloyds_step
from fedkmeans.stages.spec import check_runs

__all__ = ["Algorithm", "algorithm", "register_algorithm", "release_plan"]


@dataclass(frozen=True)
class Algorithm:
    """One federated k-means algorithm: initialisation, T FedDP-Lloyds steps, the choice.

    Attributes
    ----------
    name : str
        The config value (``algorithm = <name>``).
    initialise : callable
        ``initialise(ctx) -> ndarray of shape (k, d)``: the initial centers, running
        the :attr:`init` stages (:class:`~fedkmeans.server.context.ServerContext`).
    init : tuple of Stage
        The initialisation's client rounds, in order (empty: server data only).
    lloyds : bool
        ``privacy.lloyds-steps`` FedDP-Lloyds rounds follow the initialisation.
    private : bool
        Its releases are noisy (False: the run's epsilon is infinite, nothing is
        planned, and secure aggregation is refused).
    chooses_k : bool
        May run with ``k = auto`` (it picks k itself, :meth:`ServerContext.choose_k`).
    final_choice : bool
        May end with the final private choice between its centers and k-means on the
        server's data (:mod:`fedkmeans.stages.check`; ``privacy.check-share``).
    tunable_split : bool
        ``privacy.split`` weights its initialisation's releases (``auto``: searched
        by :mod:`fedkmeans.tuning`).
    spare_centers : bool
        Takes ``privacy.extra-centers`` (FedDP-Init's spare centers).
    local_k : bool
        Its clients run a local k-means of ``kfed-local-k`` clusters (k-FED).
    summary : str
        One line for listings (the report, the docs).
    """

    name: str
    initialise: Callable[[ServerContext], np.ndarray]
    init: tuple[Stage, ...] = ()
    lloyds: bool = True
    private: bool = True
    chooses_k: bool = False
    final_choice: bool = False
    tunable_split: bool = False
    spare_centers: bool = False
    local_k: bool = False
    summary: str = ""

    def ends_with_final_choice(self, privacy: PrivacySettings) -> bool:
        """Whether a run with ``privacy`` ends with the final private choice."""
        return self.final_choice and check_runs(privacy)

    def rounds(
        self, privacy: PrivacySettings, *, full_rank: bool = False
    ) -> list[tuple[Stage, str]]:
        """``(stage, round name)`` of every client round of a run with ``privacy``, in order.

        The initialisation (without the stages skipped when k >= d, ``full_rank``),
        ``privacy.lloyds_steps`` Lloyds steps, and the final private choice when the
        run has one (:meth:`ends_with_final_choice`).
        """
        out = [(s, s.group) for s in self.init if not (full_rank and s.skipped_when_full_rank)]
        if self.lloyds:
            step = stage("lloyds")
            out += [(step, f"{step.group}-{t}") for t in range(1, privacy.lloyds_steps + 1)]
        if self.ends_with_final_choice(privacy):
            final = stage("check")
            out.append((final, final.group))
        return out

    def release_plan(
        self, privacy: PrivacySettings, *, subspace: bool = True
    ) -> list[PlannedRelease]:
        """Every noisy release a run makes, with its share of the budget.

        The releases of :meth:`rounds`, in order. Weights are normalised by the
        calibration over the releases that happen, so a stage skipped because k >= d
        (``subspace = False``) leaves its share to the others.

        Returns
        -------
        list of PlannedRelease
            Empty for a non-private algorithm or run (``privacy.epsilon = inf``: nothing
            is noisy, so no release has a share of a budget, and ``privacy.split`` is not
            read), and for a baseline with T = 0.
        """
        if not self.private or not privacy.is_private:
            return []
        return [release for step, group in self.rounds(privacy, full_rank=not subspace)
                for release in step.plan(privacy, group)]

    def run(self, ctx: ServerContext) -> np.ndarray:
        """Initialise, refine with ``privacy.lloyds-steps`` FedDP-Lloyds steps, choose.

        Returns
        -------
        ndarray of shape (k, d)
            The centers the run returns.
        """
        centers = self.initialise(ctx)
        if self.lloyds:
            for step in range(1, ctx.config.privacy.lloyds_steps + 1):
                centers = lloyds_step(ctx, centers, step)
        if self.ends_with_final_choice(ctx.config.privacy):
            centers = final_check(ctx, centers)
        return centers


def register_algorithm(new: Algorithm) -> Algorithm:
    """Add ``new`` to the registry under its name (the config accepts it from now on)."""
    return ALGORITHMS.register(new.name, new)


def algorithm(name: str) -> Algorithm:
    """The registered algorithm ``name``."""
    return ALGORITHMS[name]


def release_plan(
    name: str, privacy: PrivacySettings, *, subspace: bool = True
) -> list[PlannedRelease]:
    """:meth:`Algorithm.release_plan` of the registered algorithm ``name``."""
    return algorithm(name).release_plan(privacy, subspace=subspace)
