"""The server side of a run's rounds, built in one place around a pool.

:func:`wire_context` sets what the nodes are sent with every request, wires SecAgg+
when the config asks for it, and builds the :class:`~fedkmeans.server.context.
ServerContext`: for a real run (:func:`fedkmeans.session.run_protocol`), the sensitivity
audit's worlds and the tuning's simulated federations alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from fedkmeans.checkpoint import Checkpoint
from fedkmeans.config import ProtocolConfig
from fedkmeans.privacy.accountant import Release
from fedkmeans.server.context import ServerContext
from fedkmeans.server.observer import RunObserver

__all__ = ["wire_context"]


def wire_context(
    config: ProtocolConfig, pool, server_x: np.ndarray, releases: Mapping[str, Release], *,
    checkpoint: Checkpoint | None = None, observers: Sequence[RunObserver] = (),
    settings: Mapping, progress: bool = True, warnings: bool = True,
    secagg: bool | None = None, streaming: bool = True,
) -> ServerContext:
    """The server side of a run's rounds around ``pool``: settings, SecAgg, context.

    Parameters
    ----------
    config : ProtocolConfig
    pool : ClientPool or a pool with its interface (the tuning's simulated one)
    server_x : ndarray of shape (m, d)
        Q after the public transform.
    releases : mapping of str to Release
        The calibrated releases known so far, by stage.
    checkpoint, observers, progress, warnings, streaming
        Passed to :meth:`ServerContext.of <fedkmeans.server.context.ServerContext.of>`.
    settings : mapping
        What the nodes clip and map with, sent with every request (the resolved clip
        settings, :func:`fedkmeans.tuning.resolve.client_settings`, and the public
        transform).
    secagg : bool, optional
        Sum the protocol rounds with SecAgg+ (:class:`~fedkmeans.server.secagg.
        SecAggAggregator`, reading the same releases). Default: ``privacy.aggregation
        == "secagg"``. The tuning's simulation passes False: it adds the ledger's central
        noise, which is what SecAgg's shares add up to.
    """
    pool.settings = dict(settings)
    ctx = ServerContext.of(config, pool, server_x, releases, checkpoint=checkpoint,
                           observers=observers, progress=progress, warnings=warnings,
                           streaming=streaming)
    if secagg is None:
        secagg = config.privacy.aggregation == "secagg"
    if secagg:  # clients add noise shares, SecAgg+ sums
        from fedkmeans.server.secagg import SecAggAggregator

        pool.secagg = SecAggAggregator(config, ctx.releases, ctx.private_randomness)
    return ctx
