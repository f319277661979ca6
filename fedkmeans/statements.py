"""The sentences a run states: where its centers came from, its guarantee, its summary.

Each is written into ``release.json`` or onto the console, so each is built only from
declared settings, the ledger and post-processings of the noisy releases (the check's
noisy difference in noise standard deviations, the estimate round's share of points
beyond the radius); never from an exact count, a cost on the raw data or a timing
(:mod:`fedkmeans.console`). ``centers_from`` and the summary line are one sentence,
so ``release.json`` and the console say the same.
"""

from __future__ import annotations

import math
from typing import Any

from fedkmeans.config import ProtocolConfig
from fedkmeans.stages.check import STRONG_STDS
from fedkmeans.tuning.estimates import PrivateEstimates

__all__ = ["centers_from", "centers_returned", "clipping_summary", "guarantee", "neighbouring",
           "summary_line"]


def neighbouring(config: ProtocolConfig) -> str:
    """The neighbouring relation the accounting holds for (docs/secagg.md), in short."""
    if config.privacy.level == "datapoint":
        return "add/remove one data point"
    if config.privacy.aggregation == "secagg":
        return "zero-out one client (its participation is visible to the server)"
    return "add/remove one client"


def _relation(config: ProtocolConfig, server_rows_drawn: bool) -> str:
    """The neighbouring relation in full: what differs, and in which data."""
    if config.privacy.level == "datapoint":
        what = "the addition or removal of one data point (one row of one client's data)"
    elif config.privacy.aggregation == "secagg":
        what = ("one client's data replaced by none (zero-out: the client is still asked "
                "and its participation is visible to the server)")
    else:
        what = "the addition or removal of one client with all its data"
    where = "the clients' data as the nodes hold it"
    if server_rows_drawn:
        where += (" after data.server-fraction's seeded split of the file (the rows drawn "
                  "for the server are public and not protected, and removing a row of "
                  "the input file can change which rows the server draws)")
    return f"{what}, in {where}"


def guarantee(config: ProtocolConfig, spent: float, *, secret_noise: bool,
              server_rows_drawn: bool = False) -> str:
    """One sentence: what release.json is protected by, for which neighbours, against whom.

    Parameters
    ----------
    config : ProtocolConfig
        The resolved config.
    spent : float
        The accountant's epsilon (inf: no noise).
    secret_noise : bool
        False when the noise was derived from the seed (``privacy.reproducible-noise``).
    server_rows_drawn : bool
        The server's data are rows drawn from the clients' data with the run's seed
        (the harness's ``data.server-fraction > 0``).
    """
    if math.isinf(spent):
        return "none: the run released client statistics without noise"
    sentence = (
        f"({spent:.4g}, {config.privacy.delta:g})-DP for everything in release.json, "
        f"for neighbouring federations that differ by {_relation(config, server_rows_drawn)}"
    )
    if not secret_noise:
        sentence += ", only against someone who does not know the seed"
    return sentence


def centers_from(declared: ProtocolConfig, config: ProtocolConfig,
                 check: dict | None) -> str:
    """Whose centers the run returns, and why (``release.json["centers_from"]``).

    The final private choice (:mod:`fedkmeans.stages.check`) picks the protocol's or
    k-means on the server's data after the protocol, by its noisy cost difference in
    noise standard deviations (``check["margin_sigmas"]``, post-processing of its
    release; "within the noise" when its size is below the bar, ``check["within_noise"]``:
    then neither answer was shown better); the estimate round picks the server's
    before it, when it shows too few clients (the resolved algorithm then differs from
    the declared one).

    Parameters
    ----------
    declared, config : ProtocolConfig
        The config as given and as resolved.
    check : dict or None
        ``result["check"]``: None when no check ran.
    """
    if check is not None:
        margin, bar = check["margin_sigmas"], check["threshold_sigmas"]
        if check["chosen"] == "server-only":
            return f"server-lloyds (k-means on the server's data: {_why_server(check)})"
        return (f"{config.algorithm} (the protocol's centers: the final private choice's "
                f"noisy cost difference was {margin:+.2f} noise standard deviations, below "
                f"{bar:.3f})")
    if config.algorithm != declared.algorithm:
        return (f"{config.algorithm} (k-means on the server's data: the estimate round "
                "shows too few clients for the protocol at this epsilon)")
    return config.algorithm


def _why_server(check: dict) -> str:
    """Why the final choice kept the server's answer, from the margins it decided on.

    The choice (:func:`fedkmeans.stages.check.returns_protocol`) reads the two
    coordinates of one release: the widely clipped difference (``margin_sigmas``) and
    the typically clipped one (``margins_sigmas[1]``), and needs the first to be able to reach
    ``POWER_STDS`` noise standard deviations; the sentence names the condition that
    failed, so it never says "not below" of a margin that was below.
    """
    margin, bar = check["margin_sigmas"], check["threshold_sigmas"]
    noise = ("; within the noise: the choice could not tell the two answers apart, the "
             "server's is the default, not a finding" if check.get("within_noise") else "")
    said = (f"the final private choice's noisy cost difference was {margin:+.2f} noise "
            f"standard deviations")
    if margin >= bar or "margins_sigmas" not in check:
        return f"{said}, not below {bar:.3f}{noise}"
    if not check.get("powered", True):
        return (f"{said}, but the release could reach only {check['reach_sigmas']:.2f} of "
                f"them, too few to be told from noise{noise}")
    narrow = check["margins_sigmas"][1]
    return (f"{said}, below {bar:.3f}, but the difference clipped at a typical point's "
            f"cost was {narrow:+.2f}, not below {bar:.3f} (the first would have had to be "
            f"below {-STRONG_STDS:.3f} and the second below {-bar:.3f}){noise}")


def centers_returned(result: dict[str, Any]) -> str:
    """A short label of :func:`centers_from` for tables (sweep rows, the report).

    ``protocol`` or ``server-only (check)`` when the final private choice ran;
    ``server-only (too few clients)`` when the estimate round resolved the run to
    k-means on the server's data (``tuning.chosen.algorithm`` differs from the declared
    one); otherwise the algorithm's name.
    """
    check = result.get("check")
    if check is not None:
        return "protocol" if check["chosen"] == "protocol" else "server-only (check)"
    resolved = result.get("tuning", {}).get("chosen", {}).get("algorithm")
    if resolved is not None and resolved != result.get("algorithm"):
        return "server-only (too few clients)"
    return str(result.get("algorithm", ""))


#: The largest 95 % upper bound on the clipped share the summary states; above it the
#: bound is noise, and the line says the share cannot be bounded usefully.
INFORMATIVE_BOUND = 0.5


def clipping_summary(declared: ProtocolConfig, config: ProtocolConfig,
                     estimates: PrivateEstimates | None) -> str:
    """The run's clipping, for its summary line: at most what share of points is beyond Δ.

    From the estimate round's release (post-processing): an upper bound that holds
    with probability at least 95 % (:meth:`~fedkmeans.tuning.estimates.PrivateEstimates.
    outside_upper_bound`), so the line never under-states the clipping but with that
    probability; '' without a release, and "cannot be bounded usefully" when the
    release's noise hides the total or the bound exceeds :data:`INFORMATIVE_BOUND` (a
    bound of 100 % says nothing and alarms). Says what to set when a declared radius
    may clip more than 5 % of the points.
    """
    if estimates is None:
        return ""
    radius = float(config.privacy.data_radius)
    bound = estimates.outside_upper_bound(radius)
    if bound is None or bound > INFORMATIVE_BOUND:
        return (f"; the share of points outside privacy.data-radius = {radius:.4g} cannot "
                f"be bounded usefully at this epsilon (the estimate round's noise)")
    hint = ("; set privacy.data-radius=auto to estimate it"
            if "data_radius" not in declared.auto_keys and bound > 0.05 else "")
    return (f"; at most {100 * bound:.1f}% of the points (95% private upper bound) lie "
            f"outside privacy.data-radius = {radius:.4g}{hint}")


def summary_line(result: dict[str, Any], clipping: str, path: object) -> str:
    """The run's last console line: its centers and why, epsilon, clipping, the file.

    Only ``release.json``'s fields (``centers_from``, the ledger's epsilon, the target)
    and ``clipping`` (:func:`clipping_summary`); the costs on the raw data are in
    ``diagnostics.json``. ``path`` None: a strategy's run, which writes no file.
    """
    privacy = result["privacy"]
    wrote = "" if path is None else f"; wrote {path}"
    return (f"[summary] {result['algorithm']}: returned {result['centers_from']}; "
            f"epsilon {_number(privacy['epsilon'])} of {_number(privacy['target_epsilon'])} "
            f"(delta {privacy['delta']:g}){clipping}{wrote}")


def _number(value: float | str) -> str:
    return value if isinstance(value, str) else f"{value:.4g}"
