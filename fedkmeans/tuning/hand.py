"""A declared data radius the server's data shows cannot fit: refused before any release.

The paper's hand settings (``tuning=none``, the ``hand`` metadata of
:mod:`fedkmeans.config`) were chosen for its mixture: on other data they give 9-18 x
the optimal cost. Of them, only the data radius Delta can be judged from the server's
data Q, which is public: a radius below the median norm of Q (after the public
transform, :mod:`fedkmeans.data.transform`) clips more than half of the server's points
onto the sphere, and clients drawn like Q lose as much. Such a radius is refused with
one :class:`~fedkmeans.config.ConfigError` naming ``privacy.data-radius``, whether it
came from ``tuning=none`` or was typed. This reads Q only, so it costs no privacy.

The other hand settings (``max-points-per-client``, the client-level ``clip-*``
bounds) bound a client's size and statistics, which Q does not show; they are not
judged here (``tuning=auto`` estimates them from the estimate round).
"""

from __future__ import annotations

import numpy as np

from fedkmeans.config import AUTO, ConfigError, ProtocolConfig

__all__ = ["MEDIAN", "check_declared_radius"]

#: The quantile of Q's norms a declared radius must reach.
MEDIAN = 0.5


def check_declared_radius(config: ProtocolConfig, server_x: np.ndarray) -> None:
    """Raise ConfigError when a declared Delta is below the median norm of Q.

    Parameters
    ----------
    config : ProtocolConfig
    server_x : ndarray of shape (m, d)
        The server's data Q, already mapped by the run's public transform.

    Raises
    ------
    ConfigError
        Naming ``privacy.data-radius``, the median norm and the value, on a private
        run that asks its clients something (a run with no client round clips nothing).
    """
    # here, not at import: the algorithms load the server's context, its pool and Flower
    # (0.44 s of `import fedkmeans.experiment`, which calls this before any run)
    from fedkmeans.algorithms import algorithm

    radius = config.privacy.data_radius
    asks_clients = bool(algorithm(config.algorithm).init) or config.privacy.lloyds_steps != 0
    if radius == AUTO or not config.is_private or not asks_clients or server_x.shape[0] == 0:
        return
    median = float(np.quantile(np.linalg.norm(server_x, axis=1), MEDIAN))
    if float(radius) < median:
        shifted = " after the public centering (data.center)" if config.data.center else ""
        raise ConfigError(
            f"config key 'privacy.data-radius' must be at least the median norm of the "
            f"server's data{shifted} ({median:.4g}: a smaller radius clips most points; "
            f"the paper's hand setting fits only its mixture), got {radius!r}; set "
            f"privacy.data-radius=auto (tuning=auto estimates it) or a larger radius")
