"""Distributed Gaussian noise for secure aggregation: noise shares, dropouts, encoding.

With ``privacy.aggregation = secagg`` no single party adds the noise. Every sampled
client clips its own statistic and adds a *share* of the calibrated Gaussian noise;
the node sums its clients' noisy statistics and the nodes' sums are added up by
Flower's SecAgg+, so the server only ever holds the noisy total (docs/facts.md,
"Threat model 2: curious server").

Noise shares and dropouts
-------------------------
Let ``sigma`` be the noise standard deviation the accountant calibrated for a
release, ``n`` the number of clients asked in the round and
``n_min = ceil(federation.min-replies * n)``. Each asked client adds
``N(0, sigma^2 / n_min)`` per entry. If ``n_surv`` clients' contributions reach the
sum, the total noise is ``N(0, (n_surv / n_min) sigma^2)``. The server unmasks the
sum only if ``n_surv >= n_min`` (it halts the round before unmasking otherwise), so
every release carries at least the calibrated variance, and the accountant records
the calibrated ``sigma`` (the effective ``sigma_eff = sigma sqrt(n_surv / n_min) >=
sigma`` of the survivors is a diagnostic): the spent epsilon is the calibrated one.
Clients colluding with the server know their own shares: the guarantee survives up
to ``n_surv - n_min`` such clients.

Neighbouring relation. Data-point level: add or remove one point. When the point is its
client's only one, the client (and, one node per client, its node) takes part in one
world only, so ``n`` itself is private: with ``min-replies < 1`` the summed variance
``sigma^2 n / ceil(min-replies n)`` would depend on it, and two Gaussians of different
variances have unbounded privacy loss, so :class:`fedkmeans.config.MessagingLimits`
refuses ``min-replies < 1`` under SecAgg at data-point level (with ``min-replies = 1``,
``n_min = n`` and the shares sum to exactly ``sigma^2``); the grid step also depends on
``n``, which :func:`smooth_lattice` hides. Client level: *zero-out* — the client's
statistic is replaced by zero while it still takes part (SecAgg reveals which nodes
took part, so participation itself is never hidden from the server); the sensitivity
is the same clipping bound as add/remove.

Encoding for SecAgg+
--------------------
SecAgg+ sums integers modulo ``2^32``. A node's value ``v`` (clipped statistics plus
noise shares, summed over its clients) is mapped to ``k = rint(v / h)`` on a grid of
step ``h`` and sent as the float ``2 k / Q``, which lies in ``[-1, 1]``
(``clipping_range = 1``) and which Flower quantizes to the integer ``k + Q / 2``
*exactly* (``Q`` a power of two), so Flower's own stochastic rounding (global RNG)
never fires and a run is reproducible. The step is public and data-independent:
``h = R / (Q/2 - 2)`` with ``R = m_max B + 12 s sqrt(m_max)`` per entry, where
``m_max`` is the largest number of asked clients on one node, ``B`` the per-client
clipping bound (it bounds every entry) and ``s`` the share's standard deviation.
``Q`` is the largest power of two with ``N Q < 2^32`` (no modular overflow for ``N``
nodes) and ``Q <= 2^30`` (Flower casts to int32). The server recovers the exact
integer sum, hence ``sum_i rint(v_i / h) h``: the error is at most ``N h / 2`` per
entry (each node rounds once), measured in ``docs/secagg.md``.

No client count in the published value
--------------------------------------
The decoded sum is an integer times ``h``, and ``h`` depends on the round's layout and
on ``n`` (through ``s`` and ``Q``). Published as it is, ``value / h(n)`` would be an
integer for the true ``n`` and not for ``n - 1``: a reader of ``release.json`` who can
compute ``h`` from public settings would learn the exact number of clients, which at
data-point level is private (removing a client's only point removes the client). The
server therefore publishes ``Y = X + N(0, g^2)`` (:func:`smooth_lattice`), where ``X`` is
the decoded sum and ``g = sigma / 64`` (:data:`LATTICE_SMOOTHING`) depends only on the
release's ``sigma``, which the ledger publishes and which does not depend on ``n``. For
any step ``h' <= g / 2`` (``h(n)``, ``h(n - 1)`` or another) the residue of ``Y`` modulo
``h'`` is uniform up to a relative density error ``2 sum_{j >= 1} exp(-2 pi^2 j^2 g^2 /
h'^2) < 2.4e-34`` (Poisson summation: a lattice of step ``h`` smoothed by a Gaussian of
standard deviation ``g`` has density ``(1/h)(1 + 2 sum_j exp(-2 pi^2 j^2 g^2 / h^2)
cos(2 pi j y / h))``; ``X mod h'`` adds an independent shift to a near-uniform
residue). The server refuses a round whose step exceeds ``g / 2``
(:func:`check_lattice`) before any node is asked. The draw is data-independent
post-processing of the accounted release: it costs no privacy, and adds
``(1/64)^2 = 2.4e-4`` of the calibrated variance.

What the accountant covers: the continuous distributed Gaussian mechanism above. The
rounding to the grid (at most ``N h / 2`` per entry, many orders of magnitude below
``sigma``) and the entrywise clip of a node's value to ``R`` (it needs a noise draw
beyond 12 standard deviations: probability ``<= N L 2 Phi(-12) ~ 3.6e-33 N L``, which
adds at most ``(1 + e^epsilon)`` times that to delta) are not part of the accounted
mechanism; a formal treatment of discretised distributed noise is the distributed
discrete Gaussian (Kairouz, Liu, Steinke, ICML 2021).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray
from scipy.special import log_ndtr

from fedkmeans.privacy.clipping import clip_stacked
from fedkmeans.privacy.mechanisms import GaussianMechanism

__all__ = [
    "LATTICE_SMOOTHING",
    "MODULUS_RANGE",
    "TAIL_SIGMAS",
    "check_lattice",
    "lattice_residue_error",
    "decode_sum",
    "effective_sigma",
    "encode",
    "grid_step",
    "min_survivors",
    "node_contribution",
    "quantization_range",
    "share_std",
    "smooth_lattice",
    "tail_probability",
]

#: SecAgg+ modulus (Flower's default and maximum, 2^32).
MODULUS_RANGE = 2**32
#: Largest quantization range: Flower casts quantized values (0..Q) to int32.
MAX_QUANTIZATION_RANGE = 2**30
#: Noise draws beyond this many standard deviations are clipped to the encoding range.
TAIL_SIGMAS = 12.0
#: Standard deviation of the server's smoothing draw, in units of the release's sigma
#: (module docstring, "No client count in the published value").
LATTICE_SMOOTHING = 2.0**-6


def min_survivors(num_asked: int, min_replies: float) -> int:
    """Clients whose noise shares must reach the sum: ``ceil(min_replies * num_asked)``.

    Parameters
    ----------
    num_asked : int
        Clients asked in the round, >= 1.
    min_replies : float
        ``federation.min-replies``, in (0, 1].

    Returns
    -------
    int
        ``n_min`` in ``[1, num_asked]``.
    """
    if num_asked < 1:
        raise ValueError(f"num_asked must be >= 1, got {num_asked!r}")
    if not 0.0 < min_replies <= 1.0:
        raise ValueError(f"federation.min-replies must be in (0, 1], got {min_replies!r}")
    # The small tolerance keeps e.g. 0.7 * 10 from rounding up to 8.
    return max(1, math.ceil(min_replies * num_asked - 1e-9))


def share_std(sigma: float, n_min: int) -> float:
    """Standard deviation of one client's noise share: ``sigma / sqrt(n_min)``."""
    if not (math.isfinite(sigma) and sigma >= 0.0):
        raise ValueError(f"sigma must be finite and >= 0, got {sigma!r}")
    if n_min < 1:
        raise ValueError(f"n_min must be >= 1, got {n_min!r}")
    return sigma / math.sqrt(n_min)


def effective_sigma(sigma: float, n_min: int, n_survivors: int) -> float:
    """Standard deviation of the summed shares: ``sigma * sqrt(n_survivors / n_min)``.

    Raises
    ------
    ValueError
        ``n_survivors < n_min``: the sum would carry less than the calibrated noise
        and must not be unmasked.
    """
    if n_survivors < n_min:
        raise ValueError(
            f"only {n_survivors} clients' noise shares reached the sum, at least "
            f"n_min={n_min} are needed for the calibrated noise"
        )
    return sigma * math.sqrt(n_survivors / n_min)


def quantization_range(num_nodes: int, modulus_range: int = MODULUS_RANGE) -> int:
    """Largest power of two ``Q <= 2^30`` with ``num_nodes * Q < modulus_range``.

    Every node sends integers in ``[0, Q]`` and SecAgg+ also sums one weight factor
    ``Q`` per node, so ``num_nodes * Q < modulus_range`` rules out modular overflow.
    """
    if num_nodes < 1:
        raise ValueError(f"num_nodes must be >= 1, got {num_nodes!r}")
    q = MAX_QUANTIZATION_RANGE
    while q > 4 and num_nodes * q >= modulus_range:
        q //= 2
    if num_nodes * q >= modulus_range:
        raise ValueError(f"{num_nodes} nodes do not fit the SecAgg+ modulus {modulus_range}")
    return q


def grid_step(bound: float, noise_std: float, max_clients: int, q_range: int) -> float:
    """Public grid step ``h`` of one statistic: a node's value fits ``|k| <= Q/2 - 1``.

    Parameters
    ----------
    bound : float
        Per-client clipping bound ``B`` (bounds every entry of a clipped statistic).
    noise_std : float
        Standard deviation ``s`` of one client's noise share.
    max_clients : int
        Largest number of asked clients hosted by one node, ``m_max``.
    q_range : int
        Quantization range ``Q`` (:func:`quantization_range`).

    Returns
    -------
    float
        ``h = R / (Q/2 - 2)`` with ``R = m_max B + 12 s sqrt(m_max)``.
    """
    reach = max_clients * bound + TAIL_SIGMAS * noise_std * math.sqrt(max_clients)
    if not (math.isfinite(reach) and reach > 0.0):
        raise ValueError(f"the encoding range must be finite and > 0, got {reach!r}")
    return reach / (q_range / 2 - 2)


def tail_probability(num_nodes: int, entries: int) -> float:
    """Union bound on the chance that any node's noise leaves the encoding range.

    ``num_nodes * entries * 2 Phi(-12)``; the released value then differs from the
    accounted mechanism, which adds at most ``(1 + e^epsilon)`` times this to delta.
    """
    return float(num_nodes * entries * 2.0 * math.exp(float(log_ndtr(-TAIL_SIGMAS))))


def node_contribution(
    stats: NDArray[np.floating],
    bound: float,
    norm: str,
    noise_std: float,
    rngs: Sequence[np.random.Generator],
    *,
    symmetric: bool = False,
    already_clipped: bool = False,
) -> NDArray[np.float64]:
    """Sum over a node's clients of (clipped statistic + the client's noise share).

    Parameters
    ----------
    stats : ndarray of shape (m, ...)
        One statistic per asked client of the node, in increasing client id.
    bound : float
        Per-client clipping bound (the server's bound in central mode), or the largest
        norm a statistic has after the server's clip (``already_clipped``).
    norm : {"l2", "l1_nonnegative"}
        Norm of the per-client clip.
    noise_std : float
        Standard deviation of each client's share (:func:`share_std`).
    rngs : sequence of numpy.random.Generator
        One generator per client (its own seed path), same order as ``stats``.
    symmetric : bool
        Draw symmetric noise for (d, d) matrices (FedDP-Init step 1).
    already_clipped : bool
        ``stats`` were clipped as the server clips them
        (:func:`fedkmeans.privacy.server_clip.server_clip`, what a node does): no second
        clip, which could move a joint group's pair further than its bound.

    Returns
    -------
    ndarray
        The node's value, shape of one client's statistic. ``stats`` is not modified.
    """
    stats = np.asarray(stats, dtype=np.float64)
    if len(rngs) != stats.shape[0]:
        raise ValueError(f"need one generator per client: {len(rngs)} for {stats.shape[0]}")
    clipped = stats if already_clipped else clip_stacked(stats, bound, norm)
    mechanism = GaussianMechanism(sensitivity=bound, noise_scale=noise_std)
    total = np.zeros(stats.shape[1:], dtype=np.float64)
    for row, rng in zip(clipped, rngs, strict=True):
        total += mechanism.add_symmetric_noise(row, rng) if symmetric else mechanism.add_noise(
            row, rng
        )
    return total


def encode(value: NDArray[np.floating], step: float, q_range: int) -> NDArray[np.float64]:
    """Map a node's value to the float SecAgg+ quantizes exactly (``clipping_range = 1``).

    ``k = rint(value / step)``, clipped to ``|k| <= Q/2 - 1``; returns ``2 k / Q``.
    """
    half = q_range // 2
    k = np.clip(np.rint(np.asarray(value, dtype=np.float64) / step), -(half - 1), half - 1)
    return k * (2.0 / q_range)


def decode_sum(
    mean: NDArray[np.floating], num_nodes: int, step: float, q_range: int
) -> NDArray[np.float64]:
    """Turn SecAgg+'s de-quantized mean over ``num_nodes`` back into the sum of values.

    SecAgg+ returns ``(2 / Q) sum_i k_i / N``; ``rint`` recovers the exact integer
    ``sum_i k_i`` (float error ~1e-7 grid units), times ``step`` gives the sum.
    """
    total_k = np.rint(np.asarray(mean, dtype=np.float64) * num_nodes * (q_range / 2.0))
    return total_k * step


def lattice_residue_error(step: float, smoothing: float) -> float:
    """Relative density error of a residue modulo ``step`` after the smoothing draw.

    ``2 sum_{j >= 1} exp(-2 pi^2 j^2 (smoothing / step)^2)`` (module docstring): how far
    from uniform the residue of the published value modulo ``step`` can be.
    """
    ratio = smoothing / step
    return float(2.0 * sum(math.exp(-2.0 * math.pi**2 * j * j * ratio * ratio)
                           for j in range(1, 50)))


def check_lattice(step: float, sigma: float) -> float:
    """The smoothing standard deviation ``g = sigma / 64``, once ``step <= g / 2`` holds.

    Raises
    ------
    ValueError
        The grid step of a release exceeds half its smoothing draw: the published value
        could still show the lattice.
    """
    smoothing = sigma * LATTICE_SMOOTHING
    if not step <= smoothing / 2.0:
        raise ValueError(
            f"the SecAgg+ grid step {step:.3g} exceeds half the smoothing draw "
            f"{smoothing:.3g} (sigma / 64) of its release: the decoded value would show "
            "the lattice; use fewer nodes (federation.num-nodes) or a smaller "
            "privacy.max-points-per-client")
    return smoothing


def smooth_lattice(
    decoded: NDArray[np.floating], sigma: float, step: float, rng: np.random.Generator,
    *, symmetric: bool = False, guard: bool = True,
) -> NDArray[np.float64]:
    """What the server publishes of a decoded SecAgg sum: ``decoded + N(0, g^2)``.

    ``g = sigma * LATTICE_SMOOTHING`` depends on the release's ``sigma`` only (module
    docstring); symmetric noise for a (d, d) matrix keeps it symmetric.

    Parameters
    ----------
    decoded : ndarray
        :func:`decode_sum`'s value: an integer times ``step`` per entry.
    sigma : float
        The release's calibrated noise standard deviation (the ledger's).
    step : float
        The round's grid step, at most ``g / 2`` (:func:`check_lattice`).
    rng : numpy.random.Generator
        The server's private randomness.
    symmetric : bool
        Draw symmetric noise for a (d, d) matrix.
    guard : bool
        Refuse a step above ``g / 2`` (:func:`check_lattice`). Only the deterministic
        sensitivity audit turns it off: it turns the noise down to measure changes, not
        to publish anything.

    Returns
    -------
    ndarray
        A new array.
    """
    smoothing = check_lattice(step, sigma) if guard else sigma * LATTICE_SMOOTHING
    # the sensitivity only sizes the draw's lattice inflation (negligible): sigma's
    mechanism = GaussianMechanism(sensitivity=sigma, noise_scale=smoothing)
    value = np.asarray(decoded, dtype=np.float64)
    return mechanism.add_symmetric_noise(value, rng) if symmetric else mechanism.add_noise(
        value, rng)
