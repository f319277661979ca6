"""Shared fixtures: a small mixture federation that runs in about a second in-process."""

import logging
import os
from contextlib import contextmanager

import numpy as np
import pytest

#: The paper's hand settings (tuning=none) as flat keys, for unit tests that build a
#: config and plan without resolving anything (the defaults are `auto`).
PAPER = {
    "privacy.split": "0.2,0.2,0.45,0.15",
    "privacy.lloyds-steps": 0,
    "privacy.data-radius": 11.0,
    "privacy.max-points-per-client": 1000,
    "privacy.clip-covariance": 6050.0,
    "privacy.clip-histogram": 50.0,
    "privacy.clip-sums": 550.0,
    "privacy.clip-counts": 50.0,
    "privacy.check-share": 0.0,
    "privacy.extra-centers": 0,
}

SMALL = {
    **PAPER,
    "data.dim": 8,
    "data.components": 4,
    "k": 4,
    "data.num-clients": 12,
    "data.points-per-client": 40,
    "data.server-points-per-component": 10,
    "data.server-uniform-points": 10,
    "privacy.max-points-per-client": 40,
    "privacy.data-radius": 4.0,
    "federation.engine": "inprocess",
    "federation.num-nodes": 3,
}


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Keep the optimal-cost cache of tests out of the user's home."""
    cache = tmp_path_factory.getbasetemp() / "fedkmeans-cache"
    monkeypatch.setenv("FEDKMEANS_CACHE_DIR", str(cache))
    yield


@pytest.fixture
def small_config(tmp_path):
    """Flat config of the small federation writing to a fresh tmp directory."""
    return {**SMALL, "output-dir": str(tmp_path / "out")}


def pytest_collection_modifyitems(config, items):
    """Every test that starts a Flower simulation is in the slow tier too."""
    for item in items:
        if item.get_closest_marker("flower") is not None:
            item.add_marker(pytest.mark.slow)


def pytest_configure(config):
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")


def run_server_inprocess(flat, observers=(), app=None, num_nodes=3):
    """run_server on an InProcessGrid (real ClientApp, or ``app``), with observers."""

    from fedkmeans import client_app
    from fedkmeans.experiment.config import parse_config
    from fedkmeans.experiment.runner import run_server
    from fedkmeans.local_grid import partitioned_grid
    from fedkmeans.server_app import observers_for

    grid = partitioned_grid(app or client_app.app, flat, num_nodes)
    config = parse_config(flat)
    # composed as the ServerApp composes a run: the curious server when `attack` asks
    observers = list(observers) + observers_for(config)
    return run_server(grid, config, observers=observers)


def counting_app(failing_stage=None):
    """A ClientApp stand-in that counts messages per stage and can fail one stage."""
    from fedkmeans.client_app import app as client_app

    calls: dict[str, int] = {}

    def app(msg, context):
        stage = msg.metadata.message_type.split(".")[1]
        calls[stage] = calls.get(stage, 0) + 1
        if stage == failing_stage:
            raise RuntimeError("node lost")
        return client_app(msg, context)

    return app, calls


@pytest.fixture
def noiseless_estimates():
    """``make(level)``: the estimate round's release without noise (12 clients of 40
    points in 8-d), read as :class:`~fedkmeans.tuning.estimates.PrivateEstimates`."""
    from fedkmeans.stages.estimate import client_rows
    from fedkmeans.tuning.estimates import PrivateEstimates

    def make(level: str, clients: int = 12, size: int = 40) -> PrivateEstimates:
        x = np.random.default_rng(3).normal(size=(clients * size, 8))
        owner = np.repeat(np.arange(clients), size)
        moments = np.array([np.linalg.norm(x[owner == j].T @ x[owner == j])
                            for j in range(clients)])
        rows = client_rows(np.full(clients, size), moments, np.linalg.norm(x, axis=1), owner,
                           level=level)
        return PrivateEstimates.read(rows.sum(axis=0), 0.0, level, declared=0)

    return make


def read_keys(flat):
    """``flat`` with the keys its run never reads reset (``SMALL`` has both levels' bounds).

    As ``python -m fedkmeans.experiment`` passes a config to the ServerApp, which refuses
    such a key set away from its default (``flwr run``: ``config.check_no_idle_keys``).
    """
    from fedkmeans.experiment.config import parse_config, settle_idle_keys

    return settle_idle_keys(parse_config(flat), typed=()).to_flat()


@contextmanager
def flower_log_lines():
    """The messages Flower's logger emits meanwhile (what ``flwr run --stream`` streams)."""
    lines: list[str] = []

    class Lines(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    flower, handler = logging.getLogger("flwr"), Lines()
    flower.addHandler(handler)
    try:
        yield lines
    finally:
        flower.removeHandler(handler)
