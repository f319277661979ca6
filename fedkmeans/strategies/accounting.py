"""A run's ledger as Flower's ``PrivacyAccountant``, where that protocol fits.

Flower 1.42's :class:`flwr.serverapp.PrivacyAccountant` composes
:class:`flwr.serverapp.GaussianPrivacyEvent` s (noise multiplier ``z``, sample size,
population size) for client-level neighbours. :class:`FlowerLedger` is that protocol
over this project's ledger (:class:`fedkmeans.privacy.accountant.PrivacyLedger`),
so a Flower DP strategy that trains on the same clients after a FedDP-KMeans run
(``DifferentialPrivacyServerSideFixedClipping(..., accountant=ledger)``) composes its
events with the run's releases and reports one epsilon for both.

Where it fits (:func:`flower_ledger` refuses the rest, naming why):

* client level without SecAgg (Flower's relations are one client added or removed, or
  replaced; at data-point level the units differ, and SecAgg's zero-out relation is
  not Flower's);
* a declared number of clients (``privacy.public-num-clients``): Flower's
  ``PrivacyConfig`` needs the population size, which is otherwise private here.

A Flower event is one Gaussian release of sensitivity 1 and noise ``z``; under
``SamplingMethod.POISSON`` it is sampled at rate ``sample_size / population_size``,
under ``NO_AMPLIFICATION`` not at all (as Flower's RDP accountant reads them):
:meth:`FlowerLedger.compose` records it as such a :class:`Release` and the whole
ledger keeps its PLD accounting (tighter than RDP; there is no RDP order to report).
"""

from __future__ import annotations

import copy
import math

from flwr.serverapp import (
    GaussianPrivacyEvent,
    NeighboringRelation,
    PrivacyConfig,
    PrivacySpent,
    SamplingMethod,
)

from fedkmeans.config import ProtocolConfig
from fedkmeans.privacy.accountant import PrivacyLedger, Release

__all__ = ["FlowerLedger", "flower_ledger"]

#: ``PrivacySpent.accounting_method`` of the ledger.
METHOD = "fedkmeans ledger: dp-accounting PLD over every release"


class FlowerLedger:
    """Flower's ``PrivacyAccountant`` protocol over a run's ledger (see the module).

    Parameters
    ----------
    ledger : fedkmeans.privacy.accountant.PrivacyLedger
        The run's ledger; events composed here are appended to it.
    config : flwr.serverapp.PrivacyConfig
    """

    def __init__(self, ledger: PrivacyLedger, config: PrivacyConfig) -> None:
        self._ledger = ledger
        self._config = config

    @property
    def config(self) -> PrivacyConfig:
        """The Flower privacy config (target delta, population, relation, sampling)."""
        return self._config

    @property
    def num_releases(self) -> int:
        """Releases in the ledger: the run's and the composed events'."""
        return len(self._ledger.releases)

    @property
    def ledger(self) -> PrivacyLedger:
        """The underlying ledger."""
        return self._ledger

    def compose(self, event: GaussianPrivacyEvent, count: int = 1) -> None:
        """Record ``count`` Gaussian releases of sensitivity 1, noise ``z``, rate ``s / N``."""
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count!r}")
        if event.population_size != self._config.population_size:
            raise ValueError(f"the event's population_size {event.population_size} is not "
                             f"the config's {self._config.population_size}")
        poisson = self._config.sampling_method is SamplingMethod.POISSON
        for _ in range(count):
            self._ledger.record(_release(event, self.num_releases, poisson=poisson))

    def get_epsilon(self, delta: float) -> float:
        """Epsilon of the whole ledger at ``delta`` (PLD)."""
        return self._ledger.get_epsilon(delta)

    def get_delta(self, epsilon: float) -> float:
        """Delta of the whole ledger at ``epsilon`` (PLD; 1.0 with a noiseless release)."""
        return self._ledger.get_delta(epsilon)

    def get_privacy_spent(self, delta: float | None = None) -> PrivacySpent:
        """Epsilon at ``delta`` (default: the config's target delta)."""
        delta = self._config.target_delta if delta is None else delta
        return PrivacySpent(epsilon=self.get_epsilon(delta), delta=delta,
                            num_releases=self.num_releases, accounting_method=METHOD)

    def would_exceed(self, event: GaussianPrivacyEvent, max_epsilon: float | None = None,
                     count: int = 1) -> bool:
        """Whether composing ``event`` ``count`` times would pass ``max_epsilon``."""
        limit = self._config.max_epsilon if max_epsilon is None else max_epsilon
        if limit is None:
            return False
        trial = FlowerLedger(copy.deepcopy(self._ledger), self._config)
        trial.compose(event, count)
        return trial.get_epsilon(self._config.target_delta) > limit

    def state_dict(self) -> dict[str, object]:
        """The ledger's state (its releases)."""
        return {"ledger": self._ledger.state_dict()}

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Replace the ledger by one from :meth:`state_dict`."""
        self._ledger = PrivacyLedger.from_state_dict(state["ledger"])  # type: ignore[arg-type]


def flower_ledger(config: ProtocolConfig, ledger: PrivacyLedger,
                  sampling_method: SamplingMethod = SamplingMethod.NO_AMPLIFICATION,
                  max_epsilon: float | None = None) -> FlowerLedger:
    """The run's ledger as Flower's accountant, or ValueError saying why it cannot be.

    Parameters
    ----------
    config : ProtocolConfig
        The run's (resolved) config.
    ledger : PrivacyLedger
        The run's ledger (its releases keep their own sampling rates).
    sampling_method : SamplingMethod
        How the events composed later are sampled: ``NO_AMPLIFICATION`` (the default;
        what Flower's fixed-clipping strategies require) or ``POISSON`` (rate
        ``sample_size / population_size``). Sampling without replacement goes with
        replace-one neighbours, not this protocol's.
    max_epsilon : float, optional
        Flower's budget limit for ``would_exceed``.
    """
    privacy = config.privacy
    if not config.is_private:
        raise ValueError("a non-private run has no ledger to compose with")
    if privacy.level != "client" or privacy.aggregation == "secagg":
        raise ValueError(
            "Flower's PrivacyAccountant accounts client-level neighbours (one client added "
            "or removed): this run's are "
            + ("one data point's" if privacy.level != "client" else "SecAgg's zero-out"))
    if not privacy.public_num_clients:
        raise ValueError("Flower's PrivacyConfig needs the population size: declare it "
                         "(privacy.public-num-clients, public_num_clients=...)")
    return FlowerLedger(ledger, PrivacyConfig(
        target_delta=float(privacy.delta), population_size=int(privacy.public_num_clients),
        neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
        sampling_method=sampling_method, max_epsilon=max_epsilon))


def _release(event: GaussianPrivacyEvent, index: int, *, poisson: bool) -> Release:
    rate = event.sample_size / event.population_size if poisson else 1.0
    if not (0.0 < rate <= 1.0) or not math.isfinite(event.noise_multiplier):
        raise ValueError(f"a Gaussian event needs 0 < sample_size / population_size <= 1 and "
                         f"a finite noise multiplier, got {event!r}")
    return Release(stage=f"flower-event-{index}", mechanism="gaussian", sensitivity=1.0,
                   noise_scale=float(event.noise_multiplier), sampling_rate=rate)
