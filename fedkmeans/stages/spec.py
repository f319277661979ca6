"""What a protocol stage is, and the registry every layer reads stages from.

A :class:`Stage` is one round of a protocol, all in one object: what the clients
compute (``client``; ``wire`` if it travels in another form), what they send
(:class:`Statistic`: norm, symmetry, shape; the data-point-level sensitivity with its
derivation in the defining module's docstring), how the server releases it
(:class:`ReleaseRule`: mechanism and budget share) and what the server does with the
release (``server``). The ClientApp, its SecAgg+ path, the server's folding, the
budget plan, the tuning's simulation and the curious server all look stages up here
(:func:`stage`), so adding a stage touches its own module and one :func:`register`
call.

An algorithm lists the stages it runs (:class:`fedkmeans.algorithms.Algorithm`) and
turns them into the planned releases the calibration splits the budget over
(:meth:`Stage.plan` per round).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from fedkmeans.config import AUTO, PrivacySettings
from fedkmeans.plugins import Registry
from fedkmeans.privacy.budget import StatisticBound, bound_of
from fedkmeans.privacy.calibration import PlannedRelease
from fedkmeans.stages.context import StageContext

__all__ = [
    "ReleaseRule", "Stage", "Statistic", "check_runs", "register", "stage", "stage_of_round",
    "stages", "statistic_bounds", "subscribe",
]


@dataclass(frozen=True)
class Statistic:
    """One per-client statistic a stage sends.

    Attributes
    ----------
    name : str
        Key of the statistic in replies and releases (``"sums"``).
    norm : {"l2", "l1_nonnegative"}
        Norm of a client's clip (l2 = Frobenius for matrices).
    per_point : callable
        ``per_point(privacy) -> (l1, l2)``: how far one data point moves one client's
        statistic (before the server's clip), for points of norm at most Delta
        (``privacy.data_radius``).
    client_bound : callable
        ``client_bound(privacy) -> float``: the client-level clip bound C.
    shape : callable
        ``shape(k, d, m) -> tuple``: one client's row for k centers, dimension d and
        m server points.
    symmetric : bool
        A symmetric (d, d) matrix: only upper triangles travel and the noise is
        symmetric.
    joint : str
        Statistics of one stage with the same non-empty ``joint`` name are clipped by
        the server at data-point level with one factor per client, so that a client
        above the cap keeps its ratios (cluster sums and counts: their means;
        :mod:`fedkmeans.privacy.budget`, "Joint statistics").
    """

    name: str
    norm: str
    per_point: Callable[[PrivacySettings], tuple[float, float]]
    client_bound: Callable[[PrivacySettings], float]
    shape: Callable[[int, int, int], tuple[int, ...]]
    symmetric: bool = False
    joint: str = ""


@dataclass(frozen=True)
class ReleaseRule:
    """How the server releases one statistic of a stage.

    Attributes
    ----------
    statistic : Statistic
    mechanism : callable
        ``mechanism(privacy) -> str``: the registered mechanism's name.
    weight : callable
        ``weight(privacy) -> float``: the release's share of the budget.
    """

    statistic: Statistic
    mechanism: Callable[[PrivacySettings], str]
    weight: Callable[[PrivacySettings], float]


@dataclass(frozen=True)
class Stage:
    """One protocol round: client computation, statistics, releases, server step.

    Attributes
    ----------
    name : str
        ClientApp action (``query.<name>``).
    group : str
        Round name (``"init-1"``), or its prefix for a repeated stage
        (``"lloyds"`` for ``lloyds-1``, ``lloyds-2``, ...).
    statistics : tuple of Statistic
        What each client sends, in reply order.
    client : callable
        ``client(node, clients, arrays) -> {statistic: (m, ...) rows}``: the node's
        arithmetic (:class:`fedkmeans.node.NodeData`) for the asked clients.
    server : callable
        The server step: queries the stage, releases it and post-processes
        (``server(ctx, ...)``; its arguments are the stage's own).
    releases : tuple of ReleaseRule
        Noisy releases (empty: released without noise, e.g. k-FED).
    wire : callable or None
        What travels instead of ``client``'s rows (upper triangles), same signature.
    skipped_when_full_rank : bool
        Not run (and planned no budget) when k >= d.
    sampled : bool
        Asks the round's Poisson cohort (``privacy.sampling-rate``); False: every
        registered client, planned with sampling rate 1 (the estimate round).
    """

    name: str
    group: str
    statistics: tuple[Statistic, ...]
    client: Callable[..., dict]
    server: Callable[..., object]
    releases: tuple[ReleaseRule, ...] = ()
    wire: Callable[..., dict] | None = None
    skipped_when_full_rank: bool = False
    sampled: bool = True

    def expected(self, k: int, d: int, m: int = 0) -> dict[str, tuple[int, ...]]:
        """Per-client shape of every statistic, as the server validates replies."""
        return {s.name: s.shape(k, d, m) for s in self.statistics}

    def release(self, ctx: StageContext, replies, group: str) -> dict:
        """Release every statistic of ``replies`` with the noise planned for ``group``.

        Returns ``{statistic: noisy sum}`` (:meth:`fedkmeans.server.context.
        ServerContext.release`: server clip, sum, calibrated noise, ledger).
        """
        return {rule.statistic.name: ctx.release(
            replies, rule.statistic.name, f"{group}/{rule.statistic.name}",
            symmetric=rule.statistic.symmetric) for rule in self.releases}

    def plan(self, privacy: PrivacySettings, group: str) -> list[PlannedRelease]:
        """This stage's planned releases in round ``group`` (sensitivity from the bounds)."""
        bounds = statistic_bounds(privacy)
        out = []
        for rule in self.releases:
            mechanism = rule.mechanism(privacy)
            out.append(PlannedRelease(
                f"{group}/{rule.statistic.name}", mechanism,
                bounds[rule.statistic.name].sensitivity(mechanism), rule.weight(privacy),
                privacy.sampling_rate if self.sampled else 1.0, group))
        return out


#: Stage name (a ClientApp action) -> :class:`Stage`; importing :mod:`fedkmeans.stages`
#: registers the built-in ones, and the ClientApp subscribes to serve every one.
STAGES: Registry[Stage] = Registry("stage", "fedkmeans.stages")


def register(new: Stage) -> Stage:
    """Add ``new`` to the table (and tell the listeners: the ClientApp serves it)."""
    return STAGES.register(new.name, new)


def subscribe(listener: Callable[[Stage], None]) -> None:
    """Call ``listener(stage)`` for every registered stage, now and when one is added."""
    STAGES.subscribe(listener)


def stage(name: str) -> Stage:
    """The registered stage ``name`` (a ClientApp action)."""
    return STAGES[name]


def stages() -> list[Stage]:
    """Every registered stage."""
    return STAGES.values()


def stage_of_round(round_name: str) -> Stage:
    """The stage a round runs (``"lloyds-2"`` -> the Lloyds stage)."""
    for known in STAGES.values():
        if round_name == known.group or round_name.startswith(known.group + "-"):
            return known
    raise KeyError(f"no stage runs round {round_name!r}")


def check_runs(privacy: PrivacySettings) -> bool:
    """Whether a run with ``privacy`` ends with the final check (private, share > 0).

    The check is :mod:`fedkmeans.stages.check`; ``check-share = auto`` is resolved
    before any plan is made (:mod:`fedkmeans.tuning.resolve`).
    """
    share = privacy.check_share
    return privacy.is_private and share != AUTO and share > 0


class _Bounds(Mapping):
    """Statistic name -> :class:`StatisticBound`, each computed when first asked for.

    Lazy, because before the ``auto`` settings are resolved only the estimate round's
    bound exists (the others read the data radius and the clip bounds).
    """

    def __init__(self, privacy: PrivacySettings) -> None:
        self._privacy = privacy
        self._statistics: dict[str, Statistic] = {}
        for known in STAGES.values():
            for s in known.statistics:
                self._statistics.setdefault(s.name, s)
        self._cache: dict[str, StatisticBound] = {}

    def __getitem__(self, name: str) -> StatisticBound:
        if name not in self._cache:
            s = self._statistics[name]
            self._cache[name] = bound_of(self._privacy, s.norm, s.per_point, s.client_bound,
                                         s.joint)
        return self._cache[name]

    def __iter__(self):
        return iter(self._statistics)

    def __len__(self) -> int:
        return len(self._statistics)


def statistic_bounds(privacy: PrivacySettings) -> Mapping[str, StatisticBound]:
    """Clip bounds and sensitivities of every registered stage's statistics, by name."""
    return _Bounds(privacy)
