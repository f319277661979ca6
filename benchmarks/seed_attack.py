"""The re-simulation attack on the published output (issue 10), written to docs/results/.

    python benchmarks/seed_attack.py              # 20 tries per level and mode
    python benchmarks/seed_attack.py --tries 5

Two neighbouring ``.npz`` worlds of a small federation (12 clients x 40 points,
d = 8, K = 4): at data-point level the target is one extra point of client 0, at
client level a whole extra client. Each try runs FedDP-KMeans (epsilon = 1, one
Lloyd step, client sampling 0.8 at client level) on a random world; the analyst
replays both worlds from ``release.json`` and counts bit-equal centers.

Modes: ``secret`` is the default noise; ``seeded`` is the explicit
``privacy.reproducible-noise`` opt-in with the analyst told the seed -- what every run
of earlier versions was, since they published the seed.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from results_table import write_tables

from fedkmeans.attacks.resimulation import attack_trials, neighbouring_worlds

OUT = Path(__file__).resolve().parents[1] / "docs" / "results"
FLAT = {
    "data.name": "npz", "k": 4, "privacy.epsilon": 1.0, "privacy.data-radius": 4.0,
    "privacy.max-points-per-client": 40, "privacy.lloyds-steps": 1,
    "federation.num-nodes": 3, "privacy.clip-covariance": 200.0,
    "privacy.clip-histogram": 40.0, "privacy.clip-sums": 80.0, "privacy.clip-counts": 40.0,
}


def play(level: str, mode: str, tries: int, workdir: Path, seed: int = 0) -> dict:
    """One (level, mode) cell of the table."""
    flat = {**FLAT, "privacy.level": level, "seed": seed}
    if level == "client":
        flat["privacy.sampling-rate"] = 0.8
        flat["privacy.count-noise"] = "gaussian"
    if mode == "seeded":
        flat["privacy.reproducible-noise"] = True
    worlds = neighbouring_worlds(workdir, level)
    out = attack_trials(flat, worlds, workdir / f"{level}-{mode}", tries,
                        np.random.default_rng(seed), analyst_knows_seed=mode == "seeded")
    return {"level": level, "noise": mode, **{k: v for k, v in out.items() if k != "noise"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tries", type=int, default=20)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for level in ("datapoint", "client"):
            for mode in ("secret", "seeded"):
                rows.append(play(level, mode, args.tries, Path(tmp)))
                print(rows[-1], flush=True)
    write_tables(OUT, "seed_attack", (
        "Measured by `python benchmarks/seed_attack.py` (the analyst replays both "
        "neighbouring worlds from `release.json` and compares centers bit for bit; "
        "`seeded` = the reproducible-noise opt-in with the seed known to the analyst, "
        "as in earlier versions, which published it)."
    ), rows)


if __name__ == "__main__":
    main()
