"""Argument validation shared by the pure layers: one test and one message per kind.

"Validate" here means: return the value in its canonical type, or raise
:class:`ValueError` naming the argument, what is allowed and the value. (A config
key's rule is :mod:`fedkmeans.schema`'s; in this project "check" names only the final
private choice, :mod:`fedkmeans.stages.check`.)
"""

from __future__ import annotations

import numpy as np

__all__ = ["validate_delta", "validate_int"]


def validate_int(name: str, value: int, minimum: int) -> int:
    """``value`` as ``int`` if it is an integer ``>= minimum`` (not a bool)."""
    is_int = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    if not is_int or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def validate_delta(delta: float) -> float:
    """``delta`` as ``float`` if it is a number in (0, 1) (not a bool)."""
    is_number = isinstance(delta, (int, float, np.floating)) and not isinstance(delta, bool)
    if not (is_number and 0.0 < delta < 1.0):
        raise ValueError(f"delta must be a float in (0, 1), got {delta!r}")
    return float(delta)
