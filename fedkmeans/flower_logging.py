"""Route this package's log records through Flower's handlers (``flwr run --stream``)."""

from __future__ import annotations

import logging


def log_through_flower() -> None:
    """Send ``fedkmeans`` log records to the ``flwr`` logger's handlers.

    A ServerApp's own logger is not streamed by ``flwr run --stream``; Flower's is.
    The level is set to INFO unless the caller chose one (sweeps use WARNING).
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
