"""The public pre-processing of a run's points: a shift and a per-feature scale from Q.

Every point is clipped to the data radius Delta around the origin, and every noise
scale is proportional to Delta (sums) or Delta^2 (step 1). With uncentred features (all
points near ``100 * ones`` with a spread of 1) Delta is about the offset, so the noise
swamps the spread. The server's data Q is public, so its mean ``mu`` (and, opt-in, its
per-feature standard deviation ``s``) is a post-processing of public data at no
privacy cost: the server computes them before the protocol and sends them to the
nodes with the run's settings; each node maps its points to ``(x - mu) / s`` *before*
the clip to Delta and before every statistic (the estimate round's norms included);
the server runs its own steps on the transformed Q and maps the centers back,
``c * s + mu``.

At ``epsilon = inf`` nothing is clipped and no noise is added: the run then uses no
shift and is the published non-private algorithm exactly. (Lloyd's steps and k-means
on Q are translation-equivariant, but FedDP-Init's step 1, the top eigenvectors of the
uncentred ``sum p p^T``, is not: on uncentred data a shift changes its subspace, which
is one more reason to centre a private run and one not to alter the non-private
reference.) A scale changes the metric of the clustering, so it applies whenever the
user asks for it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["IDENTITY", "SETTING_KEYS", "PublicTransform"]

#: Keys of the request settings that carry the transform (float64 little-endian bytes).
SHIFT_KEY, SCALE_KEY = "transform.shift", "transform.scale"
SETTING_KEYS = (SHIFT_KEY, SCALE_KEY)
#: A feature whose standard deviation in Q is at most this fraction of the largest
#: one (or exactly 0) keeps scale 1: dividing by a zero spread would blow it up.
MIN_RELATIVE_STD = 1e-12


@dataclass(frozen=True, eq=False)
class PublicTransform:
    """``x -> (x - shift) / scale`` (None: no shift, no scale).

    Attributes
    ----------
    shift : ndarray of shape (d,) or None
    scale : ndarray of shape (d,) or None
        Every entry > 0.
    """

    shift: np.ndarray | None = None
    scale: np.ndarray | None = None

    @classmethod
    def fit(cls, server_x: np.ndarray, *, center: bool, scale: bool) -> PublicTransform:
        """The transform from the server's data Q (public), shape (m, d).

        ``center``: shift by Q's mean. ``scale``: divide by Q's per-feature standard
        deviation (a feature with no spread in Q, :data:`MIN_RELATIVE_STD`, keeps 1).
        """
        q = np.asarray(server_x, dtype=np.float64)
        if q.ndim != 2 or q.shape[0] == 0:
            raise ValueError(f"the server's data must be a non-empty (m, d) array, got "
                             f"shape {q.shape}")
        shift = q.mean(axis=0) if center else None
        factors = None
        if scale:
            std = q.std(axis=0)
            floor = MIN_RELATIVE_STD * float(std.max(initial=0.0))
            factors = np.where((std > floor) & (std > 0), std, 1.0)
        return cls(shift, factors)

    @property
    def is_identity(self) -> bool:
        """True when the transform changes nothing."""
        return self.shift is None and self.scale is None

    @property
    def digest(self) -> str:
        """A short name of the transform ('' for the identity), for caches and files."""
        if self.is_identity:
            return ""
        return hashlib.sha256(b"".join(sorted(
            k.encode() + v for k, v in self.to_settings().items()))).hexdigest()[:16]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PublicTransform) and self.digest == other.digest

    def __hash__(self) -> int:
        return hash(self.digest)

    def apply(self, x: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
        """``(x - shift) / scale``, shape as ``x`` (n, d); ``out=x`` works in place.

        The identity returns ``x`` itself (no copy).
        """
        if self.is_identity:
            return x
        if out is None:
            out = np.array(x, dtype=np.float64)
        elif out is not x:
            out[...] = x
        if self.shift is not None:
            out -= self.shift
        if self.scale is not None:
            out /= self.scale
        return out

    def invert(self, x: np.ndarray) -> np.ndarray:
        """``x * scale + shift`` (a copy), e.g. the centers back in the data's space."""
        if self.is_identity:
            return x
        out = np.array(x, dtype=np.float64)
        if self.scale is not None:
            out *= self.scale
        if self.shift is not None:
            out += self.shift
        return out

    def to_settings(self) -> dict[str, bytes]:
        """The transform as request settings (exact float64 bytes); {} for the identity."""
        out = {}
        if self.shift is not None:
            out[SHIFT_KEY] = np.asarray(self.shift, dtype="<f8").tobytes()
        if self.scale is not None:
            out[SCALE_KEY] = np.asarray(self.scale, dtype="<f8").tobytes()
        return out

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any] | None) -> PublicTransform:
        """The transform a request carries (the identity when it carries none)."""
        settings = settings or {}

        def read(key: str) -> np.ndarray | None:
            raw = settings.get(key)
            return None if raw is None else np.frombuffer(bytes(raw), dtype="<f8").copy()

        return cls(read(SHIFT_KEY), read(SCALE_KEY))

    def to_record(self) -> dict[str, list[float] | None]:
        """JSON form (exact: Python floats round-trip), for the checkpoint's plan."""
        return {"shift": None if self.shift is None else self.shift.tolist(),
                "scale": None if self.scale is None else self.scale.tolist()}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> PublicTransform:
        """Inverse of :meth:`to_record`."""
        def read(key: str) -> np.ndarray | None:
            value = record.get(key)
            return None if value is None else np.asarray(value, dtype=np.float64)

        return cls(read("shift"), read("scale"))

    def check_dim(self, dim: int) -> None:
        """Raise ValueError unless the transform fits points of dimension ``dim``."""
        for name, value in (("shift", self.shift), ("scale", self.scale)):
            if value is not None and value.shape != (dim,):
                raise ValueError(f"the server's {name} has shape {value.shape}, but the "
                                 f"node's points have d={dim}")


#: No shift, no scale.
IDENTITY = PublicTransform()
