"""What a run's console may say: public settings and ledgered releases only.

The server's log reaches whoever ran the experiment, and under ``flwr run --stream``
whoever ran ``flwr run`` (the flower engine forwards it too). It therefore follows the
rule of ``release.json``: a line carries only declared settings, values of the
privacy ledger and post-processings of its noisy releases (the check's margin in noise
standard deviations, the estimate round's share of clipped points), and facts about
the infrastructure (nodes connected, round names, paths). Everything computed from the
clients' raw data -- exact client and point counts, SecAgg participation, costs on the
raw data, timings, a node's count of clipped points, the curious server's scores, why
a client's rows were dropped -- goes to ``diagnostics.json`` and, only when the
operator opts in, to the console as well.

The opt-in is the environment variable ``FEDKMEANS_DIAGNOSTICS_ON_CONSOLE=1`` of the
process that runs the ServerApp (or the node): an operator's choice, not a run config
key, so neither a remote ``flwr run --run-config`` nor a config in ``release.json``
can turn it on, and switching it does not change the run's configuration (a resume
stays a resume). Every such line then starts with :data:`NOT_PRIVATE`, and the run
says once, at its start, that those lines are not private (:func:`announce`).

Flower's own SecAgg+ code logs counts too: "configure_fit: strategy sampled N clients",
"aggregate_fit: received N results" at INFO, and one DEBUG line per stage and node (a
thousand lines and more for a default run with one node per client). With one node per
client N is the exact client count. :func:`quiet_flower_secagg` installs a filter on the
``flwr`` logger that drops every such record below WARNING (the counts are in
``diagnostics.json``, ``privacy.secagg.rounds``); with the opt-in they are printed,
marked :data:`NOT_PRIVATE`.
"""

from __future__ import annotations

import logging
import os

__all__ = ["DIAGNOSTICS_ENV", "NOT_PRIVATE", "FlowerSecAggLines", "announce",
           "diagnostics_on_console", "log_through_flower", "quiet_flower_secagg", "say"]

#: ``FEDKMEANS_DIAGNOSTICS_ON_CONSOLE=1``: the diagnostic lines replace the public ones.
DIAGNOSTICS_ENV = "FEDKMEANS_DIAGNOSTICS_ON_CONSOLE"
#: The first word of a line computed from the clients' raw data.
NOT_PRIVATE = "[not private]"


def diagnostics_on_console() -> bool:
    """Whether the operator opted in to diagnostic lines (``DIAGNOSTICS_ENV`` is ``1``)."""
    return os.environ.get(DIAGNOSTICS_ENV, "") == "1"


def say(logger: logging.Logger, public: str | None, diagnostic: str | None = None, *,
        level: int = logging.INFO) -> None:
    """Log ``public``, or with the opt-in ``diagnostic`` instead, marked :data:`NOT_PRIVATE`.

    Parameters
    ----------
    logger : logging.Logger
    public : str or None
        The line without client data (None: nothing without the opt-in).
    diagnostic : str or None
        The same line with values computed from the clients' raw data (None: the
        public line is all there is).
    level : int
        Logging level of either line.
    """
    if diagnostic is not None and diagnostics_on_console():
        logger.log(level, "%s %s", NOT_PRIVATE, diagnostic)
    elif public is not None:
        logger.log(level, "%s", public)


def announce(logger: logging.Logger) -> None:
    """With the opt-in, one warning that the :data:`NOT_PRIVATE` lines are not private."""
    if diagnostics_on_console():
        logger.warning(
            "%s=1: lines starting with %s carry exact counts, costs on the clients' raw "
            "data, timings and clip counts; they are NOT covered by the privacy guarantee "
            "(do not share this log)", DIAGNOSTICS_ENV, NOT_PRIVATE)


class FlowerSecAggLines(logging.Filter):
    """Flower's SecAgg+ records below WARNING: dropped, or marked with the opt-in.

    A record is Flower's SecAgg+ when the file that logged it lies in a
    ``secure_aggregation`` package (``flwr/server/workflow/secure_aggregation``, the
    server's workflow; ``flwr/client/mod/secure_aggregation``, the nodes' mod). Warnings
    and errors pass unchanged (they carry no count).
    """

    def filter(self, record: logging.LogRecord) -> bool:  # noqa: D102
        if record.levelno >= logging.WARNING or _SECAGG_DIR not in record.pathname:
            return True
        if not diagnostics_on_console():
            return False
        if not getattr(record, "fedkmeans_marked", False):
            record.msg = f"{NOT_PRIVATE} {record.msg}"
            record.fedkmeans_marked = True
        return True


_SECAGG_DIR = f"{os.sep}secure_aggregation{os.sep}"


def quiet_flower_secagg() -> None:
    """Install :class:`FlowerSecAggLines` on the ``flwr`` logger (once per process)."""
    flower = logging.getLogger("flwr")
    if not any(isinstance(f, FlowerSecAggLines) for f in flower.filters):
        flower.addFilter(FlowerSecAggLines())


def log_through_flower() -> None:
    """Send ``fedkmeans`` log records to the ``flwr`` logger's handlers.

    A ServerApp's own logger is not streamed by ``flwr run --stream``; Flower's is.
    The level is set to INFO unless the caller chose one (sweeps use WARNING). Used by
    the experiment's ServerApps and by the library's strategies in a user's app.
    """
    ours, flower = logging.getLogger("fedkmeans"), logging.getLogger("flwr")
    if ours.level == logging.NOTSET:
        ours.setLevel(logging.INFO)
    # colour codes only on a terminal: never in a redirected log or a captured stream
    for handler in flower.handlers:
        stream = getattr(handler, "stream", None)
        if hasattr(handler, "colored") and not (stream is not None and stream.isatty()):
            handler.colored = False
    for handler in flower.handlers:
        if handler not in ours.handlers:
            ours.addHandler(handler)
    ours.propagate = not flower.handlers
