"""The protocol as a Flower Message-API strategy (``flwr.serverapp.strategy.Strategy``).

:class:`KMeansStrategy` runs one registered algorithm (:data:`fedkmeans.plugins.
ALGORITHMS`) through :func:`fedkmeans.session.run_protocol`. How the protocol's rounds
map onto Flower's hooks:

* ``start(grid=...)`` is the whole run, overridden as Flower allows for a multi-stage
  protocol: registration, the estimate round, FedDP-Init's three rounds, the Lloyds
  steps and the final private choice, each a ``query.<stage>`` exchange in bounded
  messages (:class:`fedkmeans.server.pool.ClientPool`), validated, clipped, folded and
  released with calibrated noise (:class:`fedkmeans.server.context.ServerContext`), and
  recorded in the ledger.
* ``configure_train`` / ``aggregate_train`` raise :class:`NotImplementedError`: a
  protocol round is not one Flower training round. Each asks a different statistic of
  a different set of clients (batched per node within ``federation.message-mb``), and
  its aggregate is private only after the server's clip and the mechanism's noise, which
  Flower's generic loop would skip.
* ``configure_evaluate`` / ``aggregate_evaluate`` are the NON-PRIVATE evaluation round
  (``query.evaluate``: each node's summed squared distance to the centers and its point
  count), after :meth:`KMeansStrategy.start`; what they return is computed on the
  clients' raw data and is not covered by the guarantee.
* ``summary`` logs the algorithm and the declared settings (public).
* ``privacy_spent()`` is :class:`flwr.serverapp.PrivacySpent` from the run's ledger, as
  Flower's DP strategies report theirs; ``flower_accountant()`` is the ledger as a
  :class:`flwr.serverapp.PrivacyAccountant` where that protocol fits (client level,
  a declared number of clients: :mod:`fedkmeans.strategies.accounting`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid, PrivacySpent
from flwr.serverapp.strategy import Result, Strategy

from fedkmeans.artefacts import release_view
from fedkmeans.checkpoint import Checkpoint
from fedkmeans.console import log_through_flower
from fedkmeans.server.observer import RunObserver
from fedkmeans.session import RunOutcome, run_protocol
from fedkmeans.statements import clipping_summary, summary_line
from fedkmeans.strategies.accounting import METHOD as ACCOUNTING_METHOD
from fedkmeans.strategies.accounting import FlowerLedger, flower_ledger
from fedkmeans.strategies.settings import build_config, server_points
from fedkmeans.wire import pack, unpack

LOG = logging.getLogger(__name__)

__all__ = ["ACCOUNTING_METHOD", "KMeansResult", "KMeansStrategy"]


@dataclass
class KMeansResult(Result):
    """Flower's :class:`~flwr.serverapp.strategy.Result` of one protocol run.

    Attributes
    ----------
    arrays : ArrayRecord
        ``"centers"``: the released centers, shape (k, d), in the data's own space.
    evaluate_metrics_serverapp : dict of int to MetricRecord
        At the run's last round (the number of protocol rounds): ``epsilon`` (the
        accountant's, at ``delta``), ``delta``, ``target-epsilon``, ``num-releases`` and
        the ledger's per-release ``noise-scale``, ``sensitivity``, ``sampling-rate``
        (in ledger order); and ``evaluate_fn``'s metrics if one was given.
    evaluate_metrics_clientapp : dict of int to MetricRecord
        ``start(evaluate_clients=True)`` only: the NON-PRIVATE evaluation round's
        ``cost`` (mean squared distance on the clients' raw points) and ``num-points``.
    privacy : dict
        ``release["privacy"]``: the ledger (mechanism, stage, sensitivity, noise scale,
        sampling rate of every release), epsilon spent, the guarantee in words.
    release : dict
        What may be published, exactly as an experiment's ``release.json`` is built
        (:func:`fedkmeans.artefacts.release_view`, the allow-list): centers, privacy,
        the declared config and the protocol's publishable sections
        (:meth:`~fedkmeans.session.RunOutcome.release_sections`).
    outcome : RunOutcome or None
        The run itself (context, pool, timings): diagnostics, not for publication.
    """

    privacy: dict = field(default_factory=dict)
    release: dict = field(default_factory=dict)
    outcome: RunOutcome | None = field(default=None, repr=False)


class KMeansStrategy(Strategy):
    """One registered algorithm of this project as a Flower strategy.

    Parameters
    ----------
    n_clusters : int or "auto", default=8
        k (scikit-learn's ``KMeans`` default, and the estimator's; ``auto``:
        FedDP-KMeans chooses it by the elbow, up to ``k_max``).
    epsilon, delta : float
        The target privacy budget of the whole run (``epsilon = inf``: not private).
    level : {"datapoint", "client"}
        The privacy unit.
    server_data : array-like of shape (m, d)
        The server's own data Q (public).
    **settings
        Any other config attribute by name (``lloyds_steps=5``, ``data_radius=11.0``,
        ``aggregation="secagg"``, ``num_nodes=2``, ``reproducible_noise=True``, ...),
        :data:`fedkmeans.strategies.settings.SETTING_KEYS`, and ``preprocessing``
        (``"center"``, ``"standardize"`` or ``"none"``: the public transform from
        ``server_data``). The harness's engine keys
        (:data:`~fedkmeans.strategies.settings.HARNESS_KEYS`) are refused: here they
        would do nothing.

    Raises
    ------
    fedkmeans.config.ConfigError
        An unknown or harness setting, or a value out of range (one line naming the
        keyword).
    ValueError
        ``server_data`` is not a finite 2-D array.
    """

    #: The registered algorithm name (:data:`fedkmeans.plugins.ALGORITHMS`).
    algorithm: str = ""
    #: Keywords a front end on top says otherwise in errors (the estimator's
    #: ``X_server`` for ``server_data``): :func:`~fedkmeans.strategies.settings.
    #: in_caller_words`.
    caller_words: dict[str, str] = {}
    #: Stream the run's ``[progress]`` lines and its ``[summary]`` through Flower's
    #: logger, as the experiment's ServerApp does (False: the estimator, which is quiet
    #: as scikit-learn's estimators are).
    console: bool = True

    def __init__(self, n_clusters: int | str = 8, epsilon: float = 1.0,
                 delta: float = 1e-6, level: str = "datapoint", *,
                 server_data: Any, **settings: Any) -> None:
        if not self.algorithm:
            raise TypeError("KMeansStrategy is abstract: use FedDPKMeansStrategy or a baseline")
        self.server_x = server_points(server_data)
        self.config = build_config(self.algorithm, n_clusters, epsilon, delta, level,
                                   settings, self.server_x, self.caller_words)
        self.outcome: RunOutcome | None = None

    # ---- the run -----------------------------------------------------------------
    def start(  # noqa: PLR0913 - Flower's signature, then ours
        self, grid: Grid, initial_arrays: ArrayRecord | None = None,
        num_rounds: int | None = None, timeout: float | None = None,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
        *, evaluate_clients: bool = False, checkpoint: Checkpoint | None = None,
        observers: Sequence[RunObserver] = (),
    ) -> KMeansResult:
        """Run the protocol against the nodes behind ``grid``; return the released centers.

        Parameters
        ----------
        grid : flwr.serverapp.Grid
        initial_arrays, num_rounds, train_config, evaluate_config
            Flower's; must be left unset: the initial centers are FedDP-Init's (or the
            baseline's), the number of Lloyds steps is the ``lloyds_steps`` setting, and
            what each round sends is the stage's.
        timeout : float, optional
            Seconds the server waits for the replies of each round of this run, as in
            Flower's strategies (None: the ``round_timeout`` setting, 600 s by default).
        evaluate_fn : callable, optional
            ``evaluate_fn(round, arrays) -> MetricRecord``: the caller's own evaluation
            of the final centers (e.g. on the server's data), stored at the last round.
        evaluate_clients : bool
            Also run the NON-PRIVATE evaluation round (cost on the clients' raw data).
        checkpoint : Checkpoint, optional
            Rounds, plan and ledger are kept there; a resumed run never spends twice.
        observers : sequence of RunObserver
            Given every hook of the run (:class:`fedkmeans.attacks.strategy.
            CuriousServer` attaches the curious server this way).

        Returns
        -------
        KMeansResult
        """
        for name, value in (("initial_arrays", initial_arrays), ("num_rounds", num_rounds),
                            ("train_config", train_config),
                            ("evaluate_config", evaluate_config)):
            if value is not None:
                raise ValueError(f"{type(self).__name__}.start: {name} must be left unset "
                                 f"(the protocol's rounds decide it), got {value!r}")
        config = self.config if timeout is None else _with_timeout(self.config, timeout)
        if self.console:
            log_through_flower()  # flwr run --stream shows Flower's logger, not ours
        LOG.info("Starting %s strategy", type(self).__name__)
        self.summary()
        outcome = run_protocol(grid, config, self.server_x, checkpoint=checkpoint,
                               observers=observers)
        self.outcome = outcome
        result = self._result(outcome, evaluate_fn, evaluate_clients)
        if self.console:  # the release's words only, as the experiment's summary line
            LOG.info("%s", summary_line(result.release, clipping_summary(
                self.config, outcome.config, outcome.context.estimates), None))
        return result

    def _result(self, outcome: RunOutcome, evaluate_fn, evaluate_clients: bool) -> KMeansResult:
        arrays = ArrayRecord({"centers": Array(np.ascontiguousarray(outcome.centers))})
        last = max(1, len(outcome.context.round_outputs))
        releases = outcome.context.accountant.releases
        metrics = MetricRecord({
            "epsilon": float(outcome.spent_epsilon),
            "delta": float(self.config.privacy.delta),
            "target-epsilon": float(self.config.privacy.epsilon),
            "num-releases": len(releases),
            "noise-scale": [float(r.noise_scale) for r in releases],
            "sensitivity": [float(r.sensitivity) for r in releases],
            "sampling-rate": [float(r.sampling_rate) for r in releases],
        })
        # the allow-list of release.json: the seed when it keys the noise, and the
        # privacy record's diagnostics (SecAgg participation) are left out
        release = release_view(outcome.release_fields(),
                               seed_is_secret=not outcome.context.private_randomness.is_secure)
        result = KMeansResult(arrays=arrays, privacy=release["privacy"], outcome=outcome,
                              release=release)
        if evaluate_fn is not None:
            extra = evaluate_fn(last, arrays)
            if extra is not None:
                metrics = MetricRecord({**extra, **metrics})
        result.evaluate_metrics_serverapp[last] = metrics
        if evaluate_clients:
            messages = self.configure_evaluate(last, arrays, ConfigRecord(), outcome.pool.grid)
            replies = outcome.pool.grid.send_and_receive(
                list(messages), timeout=outcome.config.federation.round_timeout)
            evaluation = self.aggregate_evaluate(last, replies)
            if evaluation is not None:
                result.evaluate_metrics_clientapp[last] = evaluation
        return result

    # ---- Flower's hooks ------------------------------------------------------------
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """Not a hook of this protocol: its rounds run inside :meth:`start`."""
        raise NotImplementedError(_NOT_TRAIN)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Not a hook of this protocol: its rounds run inside :meth:`start`."""
        raise NotImplementedError(_NOT_TRAIN)

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord,
                           config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        """The NON-PRIVATE evaluation round of ``arrays["centers"]`` on every registered node.

        Needs a finished :meth:`start` (the registered nodes and the settings they map
        and clip with).
        """
        pool = self._pool()
        content = pack({"centers": arrays["centers"].numpy()}, pool.settings)
        return [Message(content, dst_node_id=nid, message_type="query.evaluate",
                        group_id="evaluate") for nid in sorted(pool.node_clients)]

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]
                           ) -> MetricRecord | None:
        """NON-PRIVATE: mean squared distance (``cost``) and ``num-points`` over the replies.

        Computed on the clients' raw points: not covered by the privacy guarantee.
        """
        cost = points = 0.0
        for reply in replies:
            if reply.has_error():
                continue
            out = unpack(reply.content)[0]
            cost += float(out["cost_sum"][0])
            points += float(out["num_points"][0])
        if not points:
            return None
        return MetricRecord({"cost": cost / points, "num-points": int(points)})

    def summary(self) -> None:
        """Log the algorithm and its declared settings (public)."""
        privacy = self.config.privacy
        LOG.info("\t%s: k=%s, epsilon=%s, delta=%g, level=%s, aggregation=%s",
                 self.config.algorithm, self.config.k, privacy.epsilon, privacy.delta,
                 privacy.level, privacy.aggregation)

    def privacy_spent(self) -> PrivacySpent:
        """The ledger's epsilon at the run's delta (``inf``: a run that is not private).

        Before :meth:`start` of a private run, nothing is spent (``epsilon = 0``, no
        release). A run at ``epsilon = inf`` or of a non-private algorithm (``KFed``,
        ``LloydsNonPrivate``) reports ``epsilon = inf``, as the estimator's
        ``privacy_spent_`` does.
        """
        if not self.config.is_private:
            return PrivacySpent(epsilon=math.inf, delta=float(self.config.privacy.delta),
                                num_releases=0, accounting_method=ACCOUNTING_METHOD)
        outcome = self.outcome
        releases = outcome.context.accountant.releases if outcome is not None else ()
        epsilon = outcome.spent_epsilon if outcome is not None else 0.0
        return PrivacySpent(epsilon=epsilon, delta=float(self.config.privacy.delta),
                            num_releases=len(releases), accounting_method=ACCOUNTING_METHOD)

    def flower_accountant(self, **kwargs: Any) -> FlowerLedger:
        """After :meth:`start`: the run's ledger as Flower's ``PrivacyAccountant``.

        Client level without SecAgg, with ``public_num_clients`` declared
        (:func:`fedkmeans.strategies.accounting.flower_ledger`, whose keyword arguments
        ``sampling_method`` and ``max_epsilon`` it takes); a Flower DP strategy given it
        composes its events with this run's releases.

        Raises
        ------
        ValueError
            The run's neighbours or unknown population do not fit Flower's protocol.
        """
        if self.outcome is None:
            raise RuntimeError(f"{type(self).__name__}: the ledger exists after start()")
        return flower_ledger(self.outcome.config, self.outcome.context.accountant, **kwargs)

    def _pool(self):
        if self.outcome is None:
            raise RuntimeError(f"{type(self).__name__}: evaluate after start() (the "
                               "registered nodes and their settings come from the run)")
        return self.outcome.pool


def _with_timeout(config, timeout: float):
    """``config`` with ``timeout`` as its round timeout; ValueError naming ``timeout``."""
    try:
        seconds = float(timeout)
    except (TypeError, ValueError):
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"start: timeout must be a finite number of seconds > 0, "
                         f"got {timeout!r}")
    return dataclasses.replace(config, federation=dataclasses.replace(
        config.federation, round_timeout=seconds))


_NOT_TRAIN = (
    "the protocol's rounds are not Flower training rounds: each asks one stage's "
    "statistic of a batch of clients (query.<stage>), and its aggregate is private only "
    "after the server's clip and calibrated noise; call start(grid=...)")
