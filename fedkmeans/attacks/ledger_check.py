"""Recompute a published ledger's epsilon independently of the project's accountant.

An auditor holding only ``release.json`` can check the claimed epsilon: this module
rebuilds the privacy loss distribution of every recorded release directly with
``dp_accounting.pld.privacy_loss_distribution`` (each mechanism's ``pld`` in
:mod:`fedkmeans.privacy.registry`; not through
:class:`fedkmeans.privacy.accountant.PrivacyLedger`, its ``DpEvent`` tree or its
calibration) and composes them:

* a group of Gaussian releases from one cohort (same non-empty ``group``) is one
  Gaussian mechanism with ``z = (sum_i z_i^-2)^(-1/2)``, ``z_i = sigma_i / Delta_i``
  (the joint release of ``(f_1 + N_1, f_2 + N_2)`` rescaled to unit sensitivity);
* Laplace releases are ``Laplace(b / Delta)`` with sensitivity 1;
* Poisson sampling at rate ``q`` enters as ``sampling_prob`` of the group's PLD
  (all releases of a sampled group are Gaussian; the ledger enforces it).

    python -m fedkmeans.experiment.audit --ledger outputs/run/release.json
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from fedkmeans.privacy.registry import mechanism

__all__ = ["recompute_epsilon"]

#: Discretisation of the recomputed PLDs (finer than the accountant's default 1e-4).
_INTERVAL = 2e-5


def recompute_epsilon(releases: Sequence[Mapping], delta: float) -> float:
    """Epsilon at ``delta`` of the composed releases of a ledger.

    Parameters
    ----------
    releases : sequence of mapping
        Ledger entries with ``stage``, ``mechanism``, ``sensitivity``,
        ``noise_scale``, ``sampling_rate`` and ``group`` (as in ``release.json``).
    delta : float
        In (0, 1).

    Returns
    -------
    float
        ``inf`` if a release has no noise; 0 for an empty ledger.
    """
    groups: dict[str, list[Mapping]] = {}
    for i, r in enumerate(releases):
        groups.setdefault(r.get("group") or f"#{i}", []).append(r)
    composed = None
    for members in groups.values():
        if any(float(r["noise_scale"]) == 0.0 for r in members):
            return math.inf
        q = float(members[0].get("sampling_rate", 1.0))
        joint = [r for r in members if mechanism(r["mechanism"]).joint_in_cohort]
        parts = []
        if joint:  # one mechanism: blocks rescaled to unit noise (same kind)
            z = sum((float(r["sensitivity"]) / float(r["noise_scale"])) ** 2
                    for r in joint) ** -0.5
            parts.append(mechanism(joint[0]["mechanism"]).pld(z, q, _INTERVAL))
        for r in members:
            if not mechanism(r["mechanism"]).joint_in_cohort:
                parts.append(mechanism(r["mechanism"]).pld(
                    float(r["noise_scale"]) / float(r["sensitivity"]), q, _INTERVAL))
        for part in parts:
            composed = part if composed is None else composed.compose(part)
    if composed is None:
        return 0.0
    return float(composed.get_epsilon_for_delta(delta))
