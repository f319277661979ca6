"""Profile one in-process FedDP-KMeans run of the scale benchmark (where the time goes).

    python benchmarks/profile_scale.py --clients 100000

Same configuration as ``benchmarks/scale.py`` (mixture, 50 points per client, d = 100,
client level, eps = 3, T = 0, 100 nodes); prints the round timings and the functions
with the most own time (cProfile adds roughly 10-30% to the wall time).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import tempfile

from fedkmeans.experiment import run

BASE = [
    "optimal-cost=skip",  # evaluation, not the algorithm
    "privacy.level=client", "data.points-per-client=50", "data.dim=100",
    "privacy.split='0.35,0.1,0.45,0.1'", "privacy.clip-covariance=1500",
    "privacy.clip-sums=110", "privacy.min-server-weight=200", "privacy.epsilon=3",
    "federation.num-nodes=100",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=10_000)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        profile = cProfile.Profile()
        result = profile.runcall(
            run, BASE + [f"data.num-clients={args.clients}", f"output-dir={tmp}/run"]
        )
    print({k: round(v, 2) for k, v in result["timings"].items()})
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(args.top)
    print(out.getvalue())


if __name__ == "__main__":
    main()
