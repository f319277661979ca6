"""Where the randomness that a privacy guarantee rests on comes from.

Two kinds of randomness run through an experiment:

* **public randomness** (data generation, partitions, k-means restarts, evaluation):
  derived from the run's ``seed`` with :mod:`fedkmeans.seeding`, so that a run can be
  repeated;
* **private randomness** (the noise of every release, Poisson client sampling, the
  noise shares of secure aggregation): the guarantee assumes the analyst does not know
  it. It must not be a function of anything the run publishes. ``result.json``
  publishes ``seed`` and the whole configuration, so an analyst who knows the other
  clients (the DP adversary does) could re-run a neighbouring world with the same seed
  and compare the output bit for bit.

By default every private draw comes from :func:`secure_generator`: a ChaCha20 stream
cipher (20 rounds, ``randomgen.ChaCha``) keyed with 256 bits from the operating
system's CSPRNG (:mod:`secrets`), fresh for every draw, never written down and never
derived from the configuration, the seed or the run id. ChaCha20 keyed this way is a
cryptographically secure generator (it is the generator behind Linux's
``/dev/urandom``); NumPy's samplers (``normal``, ``geometric``, ``random``) turn its
bits into the noise distributions.

Reproducible noise (``privacy.reproducible-noise = true``) derives the private draws
from the seed instead. It is for tests and research only, and a run that uses it says
so: its guarantee holds only against someone who does not know the seed.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import numpy as np
from randomgen import ChaCha

from fedkmeans.seeding import generator

__all__ = ["PrivateRandomness", "secure_generator", "REPRODUCIBLE_NOTICE", "SECURE_NOTICE"]

#: What a run with reproducible noise says about its guarantee.
REPRODUCIBLE_NOTICE = (
    "reproducible noise (privacy.reproducible-noise = true): the noise and the client "
    "sampling are functions of the seed; the guarantee holds only against someone who "
    "does not know the seed"
)
#: What a run with the default, secret noise says.
SECURE_NOTICE = (
    "secret noise: every noise draw and the client sampling come from the operating "
    "system's CSPRNG (ChaCha20 keyed with 256 fresh bits), never written down"
)


def secure_generator() -> np.random.Generator:
    """A fresh generator keyed with 256 bits from the operating system's CSPRNG.

    Returns
    -------
    numpy.random.Generator
        Backed by ChaCha20 (20 rounds) with a key from :func:`secrets.randbits`; two
        calls never share a stream (except with probability ``2^-256``).
    """
    return np.random.Generator(ChaCha(key=secrets.randbits(256), counter=0, rounds=20))


@dataclass(frozen=True)
class PrivateRandomness:
    """The source of every draw a privacy guarantee depends on.

    Parameters
    ----------
    reproducible_seed : int or None
        ``None`` (default): every call to :meth:`generator` returns a fresh
        :func:`secure_generator`. An integer: the draws are derived from it and from
        the path, exactly as :func:`fedkmeans.seeding.generator` (tests, research;
        the streams are those of earlier versions, which always did this).
    """

    reproducible_seed: int | None = None

    @property
    def is_secure(self) -> bool:
        """True when the draws come from the CSPRNG (the default)."""
        return self.reproducible_seed is None

    @property
    def notice(self) -> str:
        """The sentence a run's output carries about its noise."""
        return SECURE_NOTICE if self.is_secure else REPRODUCIBLE_NOTICE

    def generator(self, *path: int | str) -> np.random.Generator:
        """A generator for the private draw named ``path`` (e.g. ``"noise", stage``).

        With the secure source the path only documents the draw: every call is a new,
        independent secret stream.
        """
        if self.reproducible_seed is None:
            return secure_generator()
        return generator(self.reproducible_seed, *path)
