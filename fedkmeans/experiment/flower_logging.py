"""Logging under Flower: this package's records in ``flwr run --stream``, failures in one line.

``flwr run --stream`` exits 0 whether or not the run succeeded, and Flower logs a
failed ServerApp with its whole traceback (65 lines for a NaN in a data file). A
ServerApp that fails raises :class:`RunFailed` instead (:func:`one_line_failure`): one
ERROR line says what went wrong, where the log is and how to see the run's status;
Flower still marks the run failed (``flwr ls --format json``: ``finished:failed``), but
logs it without the traceback. ``FEDKMEANS_TRACEBACK=1`` in the environment of the
process that runs the ServerApp (under ``flwr run``: the shell that started the
SuperLink) keeps the original exception and its traceback.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

LOG = logging.getLogger(__name__)
#: Set to 1 to see the full traceback of a failed run (command line and ServerApp).
TRACEBACK_ENV = "FEDKMEANS_TRACEBACK"


class RunFailed(RuntimeError):
    """A ServerApp run failed; its one-line report is logged already."""


class _NoTracebackForRunFailed(logging.Filter):
    """Drop the traceback from Flower's record of a :class:`RunFailed` (logged once)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, RunFailed):
            record.exc_info = record.exc_text = None
        return True


def error_line(exc: BaseException) -> str:
    """``Kind: first line of the message`` (what the one-line reports say)."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0].strip()}" if lines else type(exc).__name__


@contextmanager
def one_line_failure(run_id: int | str) -> Iterator[None]:
    """Turn an exception of the block into one ERROR line and :class:`RunFailed`.

    Parameters
    ----------
    run_id : int or str
        Flower's run id, named in the line (``flwr log`` and ``flwr ls`` take it).
    """
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - the ServerApp's boundary
        if os.environ.get(TRACEBACK_ENV) == "1":
            raise
        flower = logging.getLogger("flwr")
        if not any(isinstance(f, _NoTracebackForRunFailed) for f in flower.filters):
            flower.addFilter(_NoTracebackForRunFailed())
        LOG.error("fedkmeans: run %s failed, no result written: %s (log: flwr log %s "
                  "--show; status: flwr ls --run-id %s --format json; traceback: %s=1 "
                  "where the SuperLink starts)", run_id, error_line(exc), run_id, run_id,
                  TRACEBACK_ENV)
        raise RunFailed(error_line(exc)) from None
