"""The noise mechanisms a release can use, by name: the one place that knows them.

A :class:`MechanismSpec` holds everything the rest of the code needs of a mechanism:
the noise it adds (:attr:`~MechanismSpec.noise`, the lattice-safe classes of
:mod:`fedkmeans.privacy.mechanisms`), the norm its sensitivity is measured in, its
``dp_accounting`` event and PLD, its standalone calibration, the standard deviation of
its noise, and two structural facts: whether releases of one sampled cohort compose
into one mechanism, and whether its noise can be split into shares that add up (SecAgg).
Strategies, the accountant, the calibration, the attacks and the audit look a spec up
with :func:`mechanism` and use its fields; none of them compares mechanism names.
Adding a mechanism means adding one spec here (and its name to the config schema).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fedkmeans.plugins import Registry
from fedkmeans.privacy.analytic_gaussian import analytic_gaussian_sigma
from fedkmeans.privacy.mechanisms import GaussianMechanism, LaplaceMechanism

if TYPE_CHECKING:
    import dp_accounting

__all__ = ["GAUSSIAN", "LAPLACE", "MECHANISMS", "MechanismSpec", "mechanism"]


@dataclass(frozen=True)
class MechanismSpec:
    """One additive noise mechanism.

    Attributes
    ----------
    name : str
        As written in configs and ledgers.
    noise : type
        ``noise(sensitivity, noise_scale)`` builds the mechanism object
        (``add_noise``, ``add_symmetric_noise``).
    order : {1, 2}
        Exponent p of the noise's log-density ``-|x|^p / (p s^p)`` (Laplace 1,
        Gaussian 2): the sensitivity is measured in the l_p norm, an audit measures a
        neighbour's change in it, and the log-likelihood ratio of two means is a
        difference of l_p^p distances.
    std_per_scale : float
        Standard deviation of one coordinate of noise of scale 1.
    joint_in_cohort : bool
        Several releases of one Poisson-sampled cohort are accounted as ONE mechanism
        (Gaussian: blocks rescaled to unit noise give one Gaussian with the combined
        noise multiplier); otherwise a sampled group may hold only one of them.
    additive_shares : bool
        Its noise is a sum of independent shares of the same family (Gaussian), so
        clients can each add a share under secure aggregation.
    event : callable
        ``event(noise_multiplier) -> dp_accounting.DpEvent``.
    pld : callable
        ``pld(noise_multiplier, sampling_prob, discretization)``: the privacy loss
        distribution of one release at unit sensitivity.
    standalone_scale : callable
        ``standalone_scale(epsilon, delta, sensitivity)``: the noise scale that makes
        one release (epsilon, delta)-DP on its own.
    """

    name: str
    noise: type
    order: int
    std_per_scale: float
    joint_in_cohort: bool
    additive_shares: bool
    event: Callable[[float], dp_accounting.DpEvent]
    pld: Callable[[float, float, float], object]
    standalone_scale: Callable[[float, float, float], float]

    def std(self, noise_scale: float) -> float:
        """Standard deviation of one coordinate of noise of scale ``noise_scale``."""
        return self.std_per_scale * noise_scale

    def build(self, sensitivity: float, noise_scale: float):
        """The mechanism object that adds this noise (:attr:`noise`)."""
        return self.noise(sensitivity, noise_scale)


# dp_accounting is imported when an event or a PLD is built, not with this module: its
# package imports scipy.signal and scipy.stats (about 1 s of start-up on 2 cores).
def _gaussian_event(noise_multiplier: float) -> dp_accounting.DpEvent:
    from dp_accounting import GaussianDpEvent

    return GaussianDpEvent(noise_multiplier)


def _laplace_event(noise_multiplier: float) -> dp_accounting.DpEvent:
    from dp_accounting import LaplaceDpEvent

    return LaplaceDpEvent(noise_multiplier)


def _gaussian_pld(z: float, q: float, interval: float):
    from dp_accounting.pld import privacy_loss_distribution as pld

    return pld.from_gaussian_mechanism(
        z, sensitivity=1.0, sampling_prob=q, value_discretization_interval=interval)


def _laplace_pld(b: float, q: float, interval: float):
    from dp_accounting.pld import privacy_loss_distribution as pld

    return pld.from_laplace_mechanism(
        b, sensitivity=1.0, sampling_prob=q, value_discretization_interval=interval)


GAUSSIAN = MechanismSpec(
    "gaussian", GaussianMechanism, order=2, std_per_scale=1.0,
    joint_in_cohort=True, additive_shares=True,
    event=_gaussian_event,
    pld=_gaussian_pld,
    standalone_scale=lambda eps, delta, sensitivity: analytic_gaussian_sigma(
        eps, delta, sensitivity),
)
LAPLACE = MechanismSpec(
    "laplace", LaplaceMechanism, order=1, std_per_scale=math.sqrt(2.0),
    joint_in_cohort=False, additive_shares=False,
    event=_laplace_event,
    pld=_laplace_pld,
    standalone_scale=lambda eps, delta, sensitivity: sensitivity / eps,
)

#: Every mechanism, by name (both registered here, in this order).
MECHANISMS: Registry[MechanismSpec] = Registry("mechanism")
MECHANISMS.register(GAUSSIAN.name, GAUSSIAN)
MECHANISMS.register(LAPLACE.name, LAPLACE)


def mechanism(name: str) -> MechanismSpec:
    """The mechanism called ``name``.

    Raises
    ------
    ValueError
        No mechanism has that name (the message lists the known ones).
    """
    try:
        return MECHANISMS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"mechanism must be one of {tuple(MECHANISMS)}, got {name!r}") from None
