"""Flower ClientApp of the vertical protocol: one party, one feature slice.

The node config names the party: ``partition-id`` (party index, in [0, parties))
and, in a deployment, optionally ``data-path`` (an ``.npz`` with the party's own
slice ``x`` (n x d_h) and, for the label holder, ``y``). The party's randomized
response draws from the operating system's CSPRNG
(:mod:`fedkmeans.privacy.randomness`), fresh per report, unless the run opts in to
``reproducible-noise`` (tests and research: the server then knows the noise). A
party keeps no
state between messages: the server sends the label history and the party replays
its centers.

Nothing but the defended ``(n, k)`` report (and, when discretised, its scale) leaves
a party during the protocol. ``evaluate`` and ``attack_eval`` are non-private
evaluation rounds used to score a run.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from fedkmeans.privacy.randomness import PrivateRandomness
from fedkmeans.vertical.attack import procrustes_align, reconstruction_error
from fedkmeans.vertical.config import VerticalConfig, parse_vertical_config
from fedkmeans.vertical.data import party_data, scale_columns
from fedkmeans.vertical.defence import defend
from fedkmeans.vertical.metrics import contingency
from fedkmeans.vertical.protocol import (
    exact_squared_distances,
    party_initial_centers,
    replay_centers,
)
from fedkmeans.wire import pack, unpack

app = ClientApp()

#: The reply's ``scale`` when the report is not discretised.
NO_SCALE = -1.0


@lru_cache(maxsize=2)
def _load(dataset: str, scale: str, party: int, parties: int, data_path: str):
    if data_path:
        with np.load(data_path) as archive:
            x = scale_columns(archive["x"], scale)
            y = archive["y"].astype(np.int64) if "y" in archive.files else None
        return x, y
    return party_data(dataset, party, parties, scale)


def _party(context: Context) -> tuple[VerticalConfig, int, np.ndarray, np.ndarray | None]:
    """This node's config, party index, slice (n, d_h) and labels (label holder only)."""
    config = parse_vertical_config(context.run_config)
    party = int(context.node_config.get("partition-id", 0))
    if not 0 <= party < config.parties:
        return config, party, np.zeros((0, 0)), None
    data_path = str(context.node_config.get("data-path", ""))
    x, y = _load(config.dataset, config.scale, party, config.parties, data_path)
    return config, party, x, y


def _noise(config: VerticalConfig, party: int, iteration: int) -> np.random.Generator:
    """The generator of one report's randomized response: secret unless opted out."""
    seed = config.seed if config.reproducible_noise else None
    return PrivateRandomness(seed).generator("vertical", "party-noise", party, iteration)


@app.query("register")
def register(msg: Message, context: Context) -> Message:
    """Announce the party index, n and d_h (no data values)."""
    _, party, x, y = _party(context)
    info = {"party": party, "n": int(x.shape[0]), "dim": int(x.shape[1]),
            "labels": y is not None}
    return Message(pack({}, info), reply_to=msg)


@app.query("distances")
def distances(msg: Message, context: Context) -> Message:
    """One iteration: replay the centers, compute and defend the (n, k) report."""
    config, party, x, _ = _party(context)
    arrays, settings = unpack(msg.content)
    centers = party_initial_centers(
        x, config.init, config.seed, party, config.k, arrays.get("center_ids")
    )
    centers = replay_centers(x, centers, arrays["history"])
    upper = config.bound * x.shape[1] if config.bound > 0 else None
    report, scale = defend(
        exact_squared_distances(x, centers), defence=config.defence,
        rng=_noise(config, party, int(settings["iteration"])), levels=config.levels,
        epsilon=config.epsilon, l_ratio=config.l_ratio, mechanism=config.mechanism,
        upper=upper,
    )
    scale = NO_SCALE if np.isnan(scale) else float(scale)
    return Message(pack({"report": report}, {"scale": scale}), reply_to=msg)


@app.query("evaluate")
def evaluate(msg: Message, context: Context) -> Message:
    """Non-private: the label holder's contingency table of the final labels."""
    config, _, _, y = _party(context)
    if y is None:
        return Message(pack({}), reply_to=msg)
    arrays, _ = unpack(msg.content)
    _, table = contingency(y, arrays["labels"].astype(np.int64), config.k)
    return Message(pack({"table": table}), reply_to=msg)


@app.query("attack_eval")
def attack_eval(msg: Message, context: Context) -> Message:
    """Non-private: score the server's reconstructions of this party's slice."""
    _, _, x, _ = _party(context)
    arrays, _ = unpack(msg.content)
    scores = {name: [] for name in ("rmse", "within", "rmse_aligned", "within_aligned")}
    for estimate in arrays["estimates"]:
        raw = reconstruction_error(estimate, x)
        aligned = reconstruction_error(procrustes_align(estimate, x), x)
        scores["rmse"].append(raw["rmse"])
        scores["within"].append(raw["within"])
        scores["rmse_aligned"].append(aligned["rmse"])
        scores["within_aligned"].append(aligned["within"])
    return Message(pack({k: np.asarray(v) for k, v in scores.items()}), reply_to=msg)
