"""The neighbouring-worlds game behind the differencing and membership attacks.

A *target* is one privacy unit (a data point, or a whole client at client level).
For every release of a run, a :class:`StageTrace` holds the exact aggregate (before
noise) **with** the target and **without** it, the target client's own reply in both
worlds, and the ledger's mechanism and noise scale. The game then draws releases in
either world with the real mechanism code (:mod:`fedkmeans.privacy.mechanisms`), with
fresh noise from an explicit generator, and runs the attacks:

* :func:`lr_membership`: likelihood-ratio membership test summed over every release
  (analyst) and on the target client's replies (curious server);
* :func:`differencing`: two releases with and without the target, cluster with the
  largest count difference (analyst: noisy aggregates; curious server: replies);
* :func:`cost_membership`: is the target closer to the centers of the observed release
  than to a shadow release without it?

The traces of a real run are built by :mod:`fedkmeans.attacks.curious` from what the
curious server recorded (replies and broadcasts). Releases are simulated around the
recorded broadcasts: the target's contribution to a release has the same norm
whatever the broadcast (``x x^T``, one histogram bin, ``x`` in one cluster, one count),
so the distribution of the likelihood ratio is that of the real transcript.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import gammaln

from fedkmeans.attacks.differencing import difference_attack
from fedkmeans.attacks.membership import cost_scores, lira_scores, release_llr
from fedkmeans.attacks.scoring import cosine_similarity, membership_summary
from fedkmeans.clustering.server_steps import centers_from_sums
from fedkmeans.privacy import registry

__all__ = [
    "StageTrace",
    "TargetTrace",
    "chance_abs_cosine",
    "cost_membership",
    "differencing",
    "lira_membership",
    "lr_membership",
    "noisy_releases",
]


def noisy_releases(
    mechanism: str, sensitivity: float, noise_scale: float, value: np.ndarray,
    rng: np.random.Generator, trials: int, *, symmetric: bool = False,
) -> np.ndarray:
    """``trials`` independent releases of ``value`` by the real mechanism code.

    Parameters
    ----------
    mechanism : str
        A name of :data:`fedkmeans.privacy.registry.MECHANISMS`.
    sensitivity, noise_scale : float
        As recorded in the ledger.
    value : ndarray
        The exact aggregate.
    rng : numpy.random.Generator
    trials : int, >= 1
    symmetric : bool
        Symmetric matrix noise (FedDP-Init step 1).

    Returns
    -------
    ndarray of shape (trials, *value.shape)
    """
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials!r}")
    mech = registry.mechanism(mechanism).build(sensitivity, noise_scale)
    if symmetric:
        return np.stack([mech.add_symmetric_noise(value, rng) for _ in range(trials)])
    return mech.add_noise(np.broadcast_to(value, (trials, *value.shape)), rng)


@dataclass(frozen=True)
class StageTrace:
    """One release of the run, seen from one target's two worlds.

    Attributes
    ----------
    stage : str
        Release name, e.g. ``"lloyds-1/sums"``.
    mechanism : str
        A name of :data:`fedkmeans.privacy.registry.MECHANISMS`.
    sensitivity : float
        From the ledger (1.0 for a release without noise).
    noise_scale : float
        Gaussian sigma or Laplace b from the ledger; 0 = released without noise.
    symmetric : bool
        Symmetric matrix noise (FedDP-Init step 1).
    aggregate_in, aggregate_out : ndarray
        Server-clipped sum of the replies with / without the target, before noise.
    reply_in, reply_out : ndarray
        The target client's reply with / without the target (zeros when the target is
        the whole client: then it sends nothing).
    """

    stage: str
    mechanism: str
    sensitivity: float
    noise_scale: float
    symmetric: bool
    aggregate_in: np.ndarray
    aggregate_out: np.ndarray
    reply_in: np.ndarray
    reply_out: np.ndarray

    def released(self, world_in: bool, rng: np.random.Generator, trials: int) -> np.ndarray:
        """``trials`` independent noisy releases in one world, shape (trials, ...)."""
        return noisy_releases(
            self.mechanism, self.sensitivity, self.noise_scale,
            self.aggregate_in if world_in else self.aggregate_out, rng, trials,
            symmetric=self.symmetric,
        )

    def llr(self, releases: np.ndarray) -> np.ndarray:
        """Log-likelihood ratio of noisy releases (analyst's test), shape (trials,)."""
        return release_llr(
            self.mechanism, self.noise_scale, releases, self.aggregate_in, self.aggregate_out,
            symmetric=self.symmetric,
        )

    def reply_llr(self, reply: np.ndarray) -> np.ndarray:
        """Score of a noise-free reply of the target's client (curious server's test)."""
        return release_llr(self.mechanism, 0.0, reply, self.reply_in, self.reply_out)


@dataclass(frozen=True)
class TargetTrace:
    """Every release of a run for one target.

    Attributes
    ----------
    unit : {"datapoint", "client"}
    point : ndarray of shape (d,) or None
        The target data point as the protocol used it (data-point level).
    stages : tuple of StageTrace
    final_round : str or None
        The last round that released sums and counts (differencing, cost test).
    fallback : ndarray of shape (k, d) or None
        Centers the final round keeps where a noisy count is too small.
    replies_observed : bool
        Whether the curious server received the target client's own replies. False
        under secure aggregation: its view is then the noisy sums, the analyst's.
    """

    unit: str
    point: np.ndarray | None
    stages: tuple[StageTrace, ...]
    final_round: str | None = None
    fallback: np.ndarray | None = None
    replies_observed: bool = True

    def stage(self, name: str) -> StageTrace:
        """The trace of release ``name``."""
        for s in self.stages:
            if s.stage == name:
                return s
        raise KeyError(name)


def _validate_trials(trials: int) -> int:
    if isinstance(trials, bool) or not isinstance(trials, (int, np.integer)) or trials < 1:
        raise ValueError(f"trials must be an integer >= 1, got {trials!r}")
    return int(trials)


def lr_membership(
    targets: Sequence[TargetTrace], rng: np.random.Generator, trials: int
) -> dict[str, dict]:
    """Likelihood-ratio membership test for every target, ``trials`` per world.

    Returns
    -------
    dict
        ``analyst``: summary over the noisy releases (log-likelihood ratio summed over
        every release); ``curious_server``: over the target client's own replies (the
        noisy releases when ``replies_observed`` is False).
    """
    trials = _validate_trials(trials)
    if not targets:
        raise ValueError("targets must be non-empty")
    analyst_in, analyst_out, server_in, server_out = [], [], [], []
    for target in targets:
        for world_in, sink in ((True, analyst_in), (False, analyst_out)):
            score = np.zeros(trials)
            for s in target.stages:
                score += s.llr(s.released(world_in, rng, trials))
            sink.append(score)
        if target.replies_observed:
            server_in.append(sum(s.reply_llr(s.reply_in) for s in target.stages))
            server_out.append(sum(s.reply_llr(s.reply_out) for s in target.stages))
        else:  # secure aggregation: the server's view is the noisy releases
            server_in.append(analyst_in[-1])
            server_out.append(analyst_out[-1])
    return {
        "analyst": membership_summary(np.concatenate(analyst_in), np.concatenate(analyst_out)),
        "curious_server": membership_summary(
            np.concatenate(server_in), np.concatenate(server_out)
        ),
    }


def _truth(target: TargetTrace, sums_in: np.ndarray, counts_in: np.ndarray, r: int):
    if target.unit == "datapoint":
        return target.point
    return sums_in[r] / max(float(counts_in[r]), 1e-12)


def chance_abs_cosine(dim: int) -> float:
    """Mean ``|cos|`` between a fixed vector and a uniformly random direction in ``dim`` dims.

    ``Gamma(d/2) / (sqrt(pi) Gamma((d+1)/2))``: about ``sqrt(2 / (pi d))``, e.g. 0.28 for
    d = 8 and 0.080 for d = 100. A guess that knows nothing scores this on average.
    """
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
        raise ValueError(f"dim must be an integer >= 1, got {dim!r}")
    return float(np.exp(gammaln(dim / 2) - gammaln((dim + 1) / 2)) / np.sqrt(np.pi))


def _cosine_summary(values: list[float], dim: int) -> dict:
    v = np.asarray(values, dtype=np.float64)
    return {
        "cosine_mean": float(v.mean()),
        "cosine_min": float(v.min()),
        "cosine_max": float(v.max()),
        "abs_cosine_mean": float(np.abs(v).mean()),
        "abs_cosine_chance": chance_abs_cosine(dim),
        "n": int(v.size),
    }


def differencing(
    targets: Sequence[TargetTrace], rng: np.random.Generator, trials: int
) -> dict[str, dict]:
    """Differencing attack on the final sums/counts release of every target.

    The analyst gets one release with and one without the target (independent fresh
    noise) per trial; the curious server gets the target client's two replies (the
    same releases as the analyst when ``replies_observed`` is False).

    Returns
    -------
    dict
        ``analyst`` and ``curious_server`` cosine summaries.
    """
    trials = _validate_trials(trials)
    usable = [t for t in targets if t.final_round is not None]
    if not usable:
        raise ValueError("targets must include a round that released sums and counts")
    analyst, server = [], []
    for target in usable:
        sums = target.stage(f"{target.final_round}/sums")
        counts = target.stage(f"{target.final_round}/counts")
        est, clusters = difference_attack(
            sums.released(True, rng, trials), counts.released(True, rng, trials),
            sums.released(False, rng, trials), counts.released(False, rng, trials),
        )
        released = [
            cosine_similarity(row, _truth(target, sums.aggregate_in - sums.aggregate_out,
                                          counts.aggregate_in - counts.aggregate_out, r))
            for row, r in zip(est, clusters.tolist(), strict=True)
        ]
        analyst += released
        if not target.replies_observed:  # secure aggregation: only the noisy sums
            server += released
            continue
        est, r = difference_attack(sums.reply_in, counts.reply_in, sums.reply_out,
                                   counts.reply_out)
        truth = _truth(target, sums.reply_in - sums.reply_out,
                       counts.reply_in - counts.reply_out, r)
        server.append(cosine_similarity(est, truth))
    dim = int(usable[0].stage(f"{usable[0].final_round}/sums").aggregate_in.shape[-1])
    return {
        "analyst": _cosine_summary(analyst, dim),
        "curious_server": _cosine_summary(server, dim),
    }


def _noisy_centers(
    sums: StageTrace, counts: StageTrace, world_in: bool, fallback: np.ndarray,
    rng: np.random.Generator, trials: int, min_count: float,
) -> np.ndarray:
    """Centers ``m_r / n_r`` of ``trials`` noisy releases in one world, (trials, k, d)."""
    s, c = sums.released(world_in, rng, trials), counts.released(world_in, rng, trials)
    return np.stack([centers_from_sums(s[i], c[i], fallback, min_count)[0] for i in range(trials)])


def _final_point_releases(
    targets: Sequence[TargetTrace],
) -> list[tuple[TargetTrace, StageTrace, StageTrace]]:
    """(target, final sums, final counts) of every data-point target with such a round."""
    usable = [t for t in targets if t.final_round is not None and t.point is not None]
    if not usable:
        raise ValueError("targets must be data points with a sums/counts round")
    return [(t, t.stage(f"{t.final_round}/sums"), t.stage(f"{t.final_round}/counts"))
            for t in usable]


def cost_membership(
    targets: Sequence[TargetTrace], rng: np.random.Generator, trials: int, min_count: float
) -> dict:
    """Cost-based test with a shadow reference, on the final round's centers.

    Per trial the analyst sees centers from a release in one world and trains a
    reference without the target (an independent release of the OUT world); the score
    is ``d(x, reference) - d(x, observed)``. Data-point level only.
    """
    trials = _validate_trials(trials)
    scores: dict[bool, list[np.ndarray]] = {True: [], False: []}
    for target, sums, counts in _final_point_releases(targets):
        points = np.broadcast_to(target.point, (trials, target.point.size))
        for world_in in (True, False):
            observed = _noisy_centers(sums, counts, world_in, target.fallback, rng, trials,
                                      min_count)
            reference = _noisy_centers(sums, counts, False, target.fallback, rng, trials,
                                       min_count)
            scores[world_in].append(cost_scores(points, observed, reference))
    return membership_summary(np.concatenate(scores[True]), np.concatenate(scores[False]))


def lira_membership(
    targets: Sequence[TargetTrace], rng: np.random.Generator, trials: int, shadows: int,
    min_count: float,
) -> dict:
    """LiRA on the final centers with shadow models, per target (data-point level).

    For each target, ``shadows`` shadow models per world are the final round's centers
    from independent noisy releases with and without the target (the real mechanism
    code around the recorded aggregates: the rest of the data is known to this strong
    attacker). The score of a model is ``-d(x, centers)``; :func:`lira_scores` turns an
    observed model's score into a likelihood ratio; ``trials`` observed models per
    world are scored.
    """
    trials = _validate_trials(trials)
    shadows = _validate_trials(shadows)
    scores: dict[bool, list[np.ndarray]] = {True: [], False: []}
    for target, sums, counts in _final_point_releases(targets):

        def model_scores(world_in: bool, n: int, t=target, s=sums, c=counts) -> np.ndarray:
            centers = _noisy_centers(s, c, world_in, t.fallback, rng, n, min_count)
            return cost_scores(np.broadcast_to(t.point, (n, t.point.size)), centers)

        shadow_in, shadow_out = model_scores(True, shadows), model_scores(False, shadows)
        for world_in in (True, False):
            scores[world_in].append(
                lira_scores(model_scores(world_in, trials), shadow_in, shadow_out)
            )
    return membership_summary(np.concatenate(scores[True]), np.concatenate(scores[False]))
