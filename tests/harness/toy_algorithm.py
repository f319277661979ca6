"""A toy baseline in one file: the worked example of docs/extending.md.

``algorithm=farthest-first`` starts from k server points chosen farthest-first (public
data only, no budget), then runs the FedDP-Lloyds steps like every baseline. Importing
this file registers it; nothing else in the project changes.
"""

import numpy as np

from fedkmeans.algorithms import Algorithm, register_algorithm


def farthest_first(ctx) -> np.ndarray:
    """k server points, each the farthest from those already chosen (the first: Q's first)."""
    q = ctx.server_x
    chosen = [0]
    gaps = np.sum((q - q[0]) ** 2, axis=1)
    while len(chosen) < ctx.k:
        chosen.append(int(np.argmax(gaps)))
        gaps = np.minimum(gaps, np.sum((q - q[chosen[-1]]) ** 2, axis=1))
    return q[chosen].copy()


FARTHEST_FIRST = register_algorithm(Algorithm(
    "farthest-first", initialise=farthest_first,
    summary="k farthest-first server points, then FedDP-Lloyds",
))
