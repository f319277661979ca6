"""Differential privacy building blocks.

Clipping, noise mechanisms, accounting, and calibration of noise scales to an
(epsilon, delta) budget.
"""

from fedkmeans.privacy.accountant import PrivacyLedger, Release, gaussian_epsilon
from fedkmeans.privacy.calibration import PlannedRelease, analytic_gaussian_sigma, calibrate
from fedkmeans.privacy.clipping import (
    clip_l1,
    clip_l1_nonnegative,
    clip_l2,
    clip_rows_l2,
    clip_stacked,
)
from fedkmeans.privacy.mechanisms import GaussianMechanism, LaplaceMechanism

__all__ = [
    "GaussianMechanism",
    "LaplaceMechanism",
    "PlannedRelease",
    "PrivacyLedger",
    "Release",
    "analytic_gaussian_sigma",
    "calibrate",
    "clip_l1",
    "clip_l1_nonnegative",
    "clip_l2",
    "clip_rows_l2",
    "clip_stacked",
    "gaussian_epsilon",
]
