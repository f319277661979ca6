"""Two SecAgg runs on the same node data: can the server cancel the noise? (issue 10)

    python benchmarks/secagg_differencing.py             # 3 run pairs x 20 targets
    python benchmarks/secagg_differencing.py --pairs 1

The curious server runs FedDP-KMeans twice under SecAgg+ (``privacy.aggregation =
secagg``) on the same nodes, at epsilon = 1 and epsilon = 2, and keeps the noisy
step-1 sums ``Y_1, Y_2`` of ``sum p p^T``. If the clients' noise shares were the same
draw in both runs (earlier versions: a fixed ``noise-seed`` or the run seed),
``(sigma_2 Y_1 - sigma_1 Y_2) / (sigma_2 - sigma_1)`` is the exact sum. Knowing every
other point (or client), the server subtracts them and reads the target's ``p p^T``;
its leading eigenvector estimates ``p`` (client level: the leading direction of the
client's clipped matrix). Metric: ``|cos|`` with the truth; chance for d = 100 is
0.080. Modes: ``secret`` (the ClientApp as shipped) and ``fixed shares`` (the control:
the shares seeded as a fixed ``noise-seed`` did).

Paper mixture, d = 100, K = 10, 8 clients x 50 points on 4 nodes, delta = 1e-6.
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
from pathlib import Path

import numpy as np
from results_table import write_tables
from scipy.special import gammaln

from fedkmeans import client_app
from fedkmeans.attacks.differencing import combine_runs, leading_direction
from fedkmeans.experiment.config import parse_config
from fedkmeans.experiment.runner import run_server
from fedkmeans.local_grid import partitioned_grid
from fedkmeans.node import NodeData
from fedkmeans.privacy.clipping import clip_l2
from fedkmeans.seeding import generator
from fedkmeans.server.observer import RunObserver

OUT = Path(__file__).resolve().parents[1] / "docs" / "results"
FLAT = {
    "data.dim": 100, "data.components": 10, "k": 10, "data.num-clients": 8,
    "data.points-per-client": 50, "data.server-points-per-component": 10,
    "data.server-uniform-points": 20, "privacy.max-points-per-client": 50,
    "privacy.aggregation": "secagg", "privacy.count-noise": "gaussian",
    "privacy.clip-covariance": 2500.0, "federation.num-nodes": 4,
}
NODES = 4
STAGE = "init-1/covariance"


class _Observer(RunObserver):
    """Keeps the noisy step-1 release (all a curious server sees under SecAgg)."""

    def __init__(self) -> None:
        self.noisy = None

    def on_broadcast(self, round_name, arrays, clients):  # noqa: D102
        pass

    def on_replies(self, round_name, replies):  # noqa: D102
        pass

    def on_release(self, stage, before, after):  # noqa: D102
        if stage == STAGE:
            self.noisy = after


def _release(flat: dict) -> tuple[np.ndarray, float]:
    """One in-process run (real ClientApp, real SecAgg+): the noisy sum and its sigma."""
    grid = partitioned_grid(client_app.app, flat, NODES)
    observer = _Observer()
    result = run_server(grid, parse_config(flat), observers=[observer])
    sigma = next(r["noise_scale"] for r in result["privacy"]["releases"] if r["stage"] == STAGE)
    return observer.noisy, sigma


def _targets(config, count: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(the target's contribution to the sum, the direction to recover) per target."""
    node = NodeData.load(config, 0, 1)
    out = []
    if config.privacy.level == "datapoint":
        for cid, j in itertools.islice(
            ((c, j) for j in range(count) for c in node.client_ids.tolist()), count
        ):
            p = node.points[cid][j]
            out.append((np.outer(p, p), p))
    else:
        for cid in node.client_ids.tolist()[:count]:
            matrix = clip_l2(node.arithmetic.covariance([cid])["covariance"][0],
                             config.privacy.clip_covariance)
            out.append((matrix, leading_direction(matrix)))
    return out


def chance_abs_cosine(dim: int) -> float:
    """E|cos| between a fixed vector and a uniformly random direction in ``dim``."""
    return float(np.exp(gammaln(dim / 2) - gammaln((dim + 1) / 2)) / np.sqrt(np.pi))


def play(level: str, mode: str, pairs: int, targets: int, workdir: Path) -> dict:
    flat = {**FLAT, "privacy.level": level}
    config = parse_config(flat)
    total = NodeData.load(config, 0, 1)
    exact = sum(
        clip_l2(m, config.privacy.clip_covariance) if level == "client" else m
        for m in total.arithmetic.covariance(total.client_ids.tolist())["covariance"]
    )
    truth = _targets(config, targets)
    original = NodeData.secagg_contribution
    if mode == "fixed shares":  # the control: shares as a fixed noise-seed drew them
        def fixed(self, *args, **kwargs):
            rng = lambda stage, c: generator(12345, "noise-share", stage, c)  # noqa: E731
            return original(self, *args, share_rng=rng, **kwargs)
        NodeData.secagg_contribution = fixed
    cosines = []
    try:
        for pair in range(pairs):
            releases = [
                _release({**flat, "privacy.epsilon": eps,
                          "output-dir": str(workdir / f"{level}-{mode}-{pair}-{eps}")})
                for eps in (1.0, 2.0)
            ]
            estimate = combine_runs(releases[0][0], releases[0][1],
                                    releases[1][0], releases[1][1])
            for contribution, direction in truth:
                guess = leading_direction(estimate - (exact - contribution))
                cosines.append(abs(float(guess @ direction / np.linalg.norm(direction))))
    finally:
        NodeData.secagg_contribution = original
    return {
        "level": level, "shares": mode, "run pairs": pairs, "targets": len(cosines),
        "mean abs cos": f"{np.mean(cosines):.3f}", "max abs cos": f"{np.max(cosines):.3f}",
        "chance": f"{chance_abs_cosine(100):.3f}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--targets", type=int, default=20)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for level in ("datapoint", "client"):
            for mode in ("secret", "fixed shares"):
                rows.append(play(level, mode, args.pairs, args.targets, Path(tmp)))
                print(rows[-1], flush=True)
    write_tables(OUT, "secagg_differencing", (
        "Measured by `python benchmarks/secagg_differencing.py` (two SecAgg+ runs at "
        "epsilon 1 and 2 on the same node data, in-process engine with the real "
        "ClientApp; the server cancels the noise if it can and reads a target it does "
        "not know from the step-1 sums)."
    ), rows)


if __name__ == "__main__":
    main()
