"""Centering from the server's data (``data.center``, issue 34): does it help, does it cost?

    python benchmarks/centering.py               # 3 seeds, both data sets
    python benchmarks/centering.py --seeds 1

Two data sets, each run with only the data and k (every other setting at its default,
``tuning=auto``) at data-point epsilon 1 with ``privacy.check-share=0`` (the protocol's
own answer, not the final choice's), with ``data.center=true`` (the default) and
``false``, seeds 0..S-1:

* ``mixture+100``: the paper's mixture (``python -m fedkmeans.experiment``'s data, drawn
  with the seed) with every coordinate of every client and server point moved by +100,
  given as a file (``dataset=file``, an ``.npz`` with ``server_x``): uncentred features.
* ``mixture``: the paper's mixture itself (``dataset=mixture``), nearly centred (its
  means lie in [0, 1]^d): centering should cost nothing.

Each row is one run: its cost ratio (cost / non-private k-means on the pooled client
data, the run's own ``metrics.cost_ratio``) and the data radius it resolved; per seed
also k-means on
the server's data alone (``server-lloyds``, no client round). The hand settings
(``tuning=none``) are tried on each data set without centering (the refusal line, or
none). Writes docs/results/centering.{csv,md}.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import numpy as np
from results_table import markdown_table, write_csv

OUT = Path(__file__).resolve().parents[1] / "docs" / "results"
OFFSET = 100.0
K = 10


def shifted_mixture(seed: int, directory: Path) -> Path:
    """The default mixture of ``seed``, every coordinate + :data:`OFFSET`, as an .npz."""
    from fedkmeans.data import load_pooled, load_server
    from fedkmeans.data.npz import save_npz
    from fedkmeans.experiment.config import parse_config

    config = parse_config({"seed": seed})
    pooled = load_pooled(config)
    x, y = pooled
    per_client = config.data.points_per_client
    client = np.repeat(np.arange(config.data.num_clients), per_client)
    if client.size != x.shape[0]:
        raise RuntimeError("the pooled mixture is not clients of equal size in order")
    server_x, server_y = load_server(config)
    return save_npz(directory / f"mixture-plus-{OFFSET:g}-seed{seed}.npz", x=x + OFFSET,
                    client=client, y=y, server_x=server_x + OFFSET, server_y=server_y)


def run_one(overrides: list[str], out: Path) -> dict:
    from fedkmeans.experiment import run

    result = run([*overrides, f"output-dir={out}"])
    chosen = (result.get("tuning") or {}).get("chosen", {})
    return {"cost_ratio": round(result["metrics"]["cost_ratio"], 4),
            "data_radius": round(float(chosen["data_radius"]), 3)
            if "data_radius" in chosen else ""}


def hand_refusal(data: list[str]) -> str:
    """The one line ``tuning=none`` without centering gets (or 'accepted')."""
    from fedkmeans.config import ConfigError
    from fedkmeans.experiment.cli import compose_flat, preflight

    try:
        preflight(compose_flat([*data, "tuning=none", "data.center=false"]))
    except ConfigError as error:
        return str(error)
    return "accepted"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    rows, refusals = [], {}
    with tempfile.TemporaryDirectory(prefix="centering-") as tmp:
        tmp = Path(tmp)
        for seed in range(args.seeds):
            path = shifted_mixture(seed, tmp)
            sets = {"mixture+100": ["dataset=file", f"data.path={path}", f"k={K}"],
                    "mixture": []}
            for name, data in sets.items():
                common = [*data, f"seed={seed}", "privacy.level=datapoint",
                          "privacy.epsilon=1"]
                refusals.setdefault(name, hand_refusal(data))
                for center in ("true", "false"):
                    runs = [*common, "privacy.check-share=0", f"data.center={center}"]
                    rows.append({"data": name, "run": f"feddp-kmeans, data.center={center}",
                                 "seed": seed, **run_one(runs, tmp / f"{name}-{center}-{seed}")})
                    print(rows[-1], flush=True)
                server = [*common, "algorithm=server-lloyds", "tuning=none",
                          "privacy.lloyds-steps=0"]
                rows.append({"data": name, "run": "server-lloyds (k-means on Q alone)",
                             "seed": seed, **run_one(server, tmp / f"{name}-server-{seed}")})
                print(rows[-1], flush=True)
    write_csv(OUT / "centering.csv", rows)
    summary = []
    for name in dict.fromkeys(r["data"] for r in rows):
        for run in dict.fromkeys(r["run"] for r in rows if r["data"] == name):
            mine = [r for r in rows if r["data"] == name and r["run"] == run]
            summary.append({
                "data": name, "run": run,
                "median cost ratio": f"{statistics.median(r['cost_ratio'] for r in mine):.4f}",
                "per seed": ", ".join(f"{r['cost_ratio']:.4f}" for r in mine),
                "data radius (per seed)": ", ".join(str(r["data_radius"]) for r in mine),
            })
    intro = [
        "# Centering from the server's data (`data.center`)",
        "",
        "Written by `python benchmarks/centering.py` (seeds 0.."
        f"{args.seeds - 1}). Data-point level, epsilon = 1, `tuning=auto` (every setting at "
        "its default) with `privacy.check-share=0`, so the protocol's own centers are "
        "scored; cost ratio = cost / non-private k-means on the pooled client data. "
        f"`mixture+100`: the paper's mixture of the seed with every coordinate + {OFFSET:g}, "
        "as a file (`dataset=file`, an `.npz` with the server's data); `mixture`: the "
        "paper's mixture itself. `data radius`: the Δ the run resolved (on the centred "
        "points with `data.center=true`).",
    ]
    lines = [*intro, "", *markdown_table(summary), "",
             "The hand settings (`tuning=none`) without centering, checked before any node "
             "starts:", ""]
    lines += [f"- `{name}`: {line}" for name, line in refusals.items()]
    (OUT / "centering.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
