"""One root seed, one path per random draw.

Every public random choice of a run (data generation, partitions, the simulation on
the server's data, k-means restarts) takes a :class:`numpy.random.Generator` built here
from the root seed and a path of labels (run -> stage -> round -> ...). Two draws with
different paths are independent streams; the same path always gives the same stream,
whichever engine runs the experiment and in whichever process. The global RNG is never
used.

The draws the privacy guarantee rests on (the noise, client sampling, SecAgg noise
shares) do not come from here by default: they come from the operating system's secure
source, fresh per run (:mod:`fedkmeans.privacy.randomness`). Only with
``privacy.reproducible-noise = true``, an opt-in for tests and research that the run's
output states, are the server's noise and client sampling derived from the root seed
through this module; a node's SecAgg noise shares always come from the secure source.
"""

from __future__ import annotations

import zlib

import numpy as np


def _label_to_int(label: int | str) -> int:
    if isinstance(label, (int, np.integer)):
        if label < 0:
            raise ValueError(f"seed path labels must be >= 0, got {label}")
        return int(label)
    return zlib.crc32(label.encode("utf-8"))


def seed_sequence(seed: int, *path: int | str) -> np.random.SeedSequence:
    """Return the :class:`~numpy.random.SeedSequence` for ``path`` under ``seed``.

    Parameters
    ----------
    seed : int
        The root seed of the run.
    *path : int or str
        Labels naming the draw, e.g. ``("noise", "covariance", 0)``; strings are
        mapped to integers with CRC-32 so paths are stable across processes.
    """
    return np.random.SeedSequence(entropy=seed, spawn_key=tuple(_label_to_int(p) for p in path))


def generator(seed: int, *path: int | str) -> np.random.Generator:
    """Return a fresh :class:`numpy.random.Generator` for ``path`` under ``seed``."""
    return np.random.Generator(np.random.PCG64(seed_sequence(seed, *path)))


def integer_seed(seed: int, *path: int | str) -> int:
    """Return a 31-bit integer seed for libraries that want an int (scikit-learn)."""
    return int(seed_sequence(seed, *path).generate_state(1, dtype=np.uint32)[0] >> 1)
