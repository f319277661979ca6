"""Where the protocol's excess and the choice's misses come from on one uneven-cluster run.

    python benchmarks/uneven_excess.py                       # 1:50, 1 %, k = 5, d = 5, seed 4
    python benchmarks/uneven_excess.py --cell 50,0.01,5,5,1 --epsilon 0.5 --refits 3

For one federation of ``benchmarks/uneven_clusters.py`` (its generator) and one data-point
epsilon, in-process :class:`fedkmeans.FedDPKMeans` fits (secret noise):

* **the clip**: for every true cluster, its size, its server points, the share of its
  points beyond the run's data radius Delta (``tuning.chosen.data_radius``, in the run's
  public transform: the shift in ``preprocessing.shift``) and how far the clip moves its
  mean (the clients sum clipped points);
* **T**: the protocol's own answer (``check_share = 0``) with ``tuning=auto`` and with
  ``lloyds_steps`` forced to 0..3, cost / optimal;
* **the check's power**: in ``--refits`` fits of the final answer, the true cost
  difference of the A and B the check compared (captured by wrapping
  :func:`~fedkmeans.stages.check.check_clip`: a diagnostic, never published by a run),
  each release's clipped difference and its noise sigma (``release_["check"]``): the
  clipped difference over sigma is the margin the release has on average.

Writes ``docs/results/uneven-excess-<ratio>-<sample>-<k>-<d>-<seed>-eps<eps>.md``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import uneven_clusters as family  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "docs" / "results"


def _fit(x, ids, q, k, eps, seed, **kwargs):
    from fedkmeans import FedDPKMeans

    return FedDPKMeans(n_clusters=k, epsilon=eps, level="datapoint", random_state=seed,
                       **kwargs).fit(x, groups=ids, X_server=q)


def clip_lines(x, labels, q_labels, k, model) -> list[str]:
    """One row per true cluster: size, server points, share beyond Delta, mean's shift."""
    radius = float(model.release_["tuning"]["chosen"]["data_radius"])
    shift = np.asarray(model.release_["preprocessing"]["shift"], dtype=float)
    z = x - shift
    norms = np.linalg.norm(z, axis=1)
    clipped = z * np.minimum(1.0, radius / norms)[:, None]
    lines = [f"Data radius Delta = {radius:.2f} (the run's estimate round).", "",
             "| cluster | points | server points | beyond Delta | clip's shift of its mean |",
             "|---|---|---|---|---|"]
    for j in range(k):
        own = labels == j
        moved = np.linalg.norm(z[own].mean(axis=0) - clipped[own].mean(axis=0))
        lines.append(f"| {j} | {own.sum()} | {int((q_labels == j).sum())} | "
                     f"{(norms[own] > radius).mean():.1%} | {moved:.3f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cell", default="50,0.01,5,5,4", help="ratio,sample,k,d,seed")
    parser.add_argument("--epsilon", type=float, default=0.5)
    parser.add_argument("--refits", type=int, default=3)
    args = parser.parse_args(argv)
    from fedkmeans.clustering import kmeans
    from fedkmeans.clustering.distances import nearest_squared_distances
    from fedkmeans.clustering.repair import swap_repair
    from fedkmeans.stages import check

    ratio, sample, k, d, seed = args.cell.split(",")
    ratio, sample, k, d, seed = int(ratio), float(sample), int(k), int(d), int(seed)
    eps = args.epsilon
    x, labels, ids, q, q_labels = family.generate(ratio, sample, k, d, seed)
    optimal = family._cost(x, swap_repair(x, kmeans(x, k, seed=seed)))
    lines = []
    own = {}
    for steps in ("auto", 0, 1, 2, 3):
        extra = {} if steps == "auto" else {"lloyds_steps": steps}
        model = _fit(x, ids, q, k, eps, seed, settings={"check_share": 0}, **extra)
        chosen = model.release_["tuning"]["chosen"].get("lloyds_steps")
        own[f"T = {steps}" + (f" (chose {chosen})" if steps == "auto" else "")] = (
            family._cost(x, model.cluster_centers_) / optimal)
        if steps == "auto":
            lines += clip_lines(x, labels, q_labels, k, model)
    lines += ["", "The protocol's own answer (check_share = 0), cost / optimal:", "",
              "| T | cost / optimal |", "|---|---|"]
    lines += [f"| {name} | {value:.4f} |" for name, value in own.items()]
    lines += ["", "The final answer's check (A and B in the run's transform; differences "
              "on all the clients' points):", "",
              "| refit | release | clip | true A - B | clipped A - B | sigma | "
              "clipped / sigma | released margin | chosen |", "|" + "---|" * 9]
    seen: dict = {}
    original = check.check_clip

    def spy(server_x, centers, alternative):
        seen.update(server_x=server_x, a=centers, b=alternative)
        return original(server_x, centers, alternative)

    check.check_clip = spy
    try:
        for refit in range(args.refits):
            info = _fit(x, ids, q, k, eps, seed).release_["check"]
            # the run's transform is a shift (data.scale is off by default)
            z = x - (q.mean(axis=0) - seen["server_x"].mean(axis=0))
            diff = (nearest_squared_distances(z, seen["a"])
                    - nearest_squared_distances(z, seen["b"]))
            for i, (name, clip, sigma) in enumerate((
                    ("wide", info["clip"], info["noise_std"]),
                    ("narrow", info["narrow_clip"], info["narrow_noise_std"]))):
                clipped = float(np.clip(diff, -clip, clip).sum())
                lines.append(f"| {refit} | {name} | {clip:.2f} | {diff.sum():.0f} | "
                             f"{clipped:.0f} | {sigma:.0f} | {clipped / sigma:.2f} | "
                             f"{info['margins_sigmas'][i]:.2f} | {info['chosen']} |")
    finally:
        check.check_clip = original
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=Path(__file__).parent).stdout.strip()
    command = "python benchmarks/uneven_excess.py " + " ".join(
        argv if argv is not None else sys.argv[1:])
    header = [f"# Uneven clusters, one run: 1:{ratio}, {sample:.0%} sample, k = {k}, "
              f"d = {d}, seed {seed}, data-point eps = {eps:g}", "",
              f"Measured by `{command.strip()}` on commit {commit} (in-process, secret "
              f"noise; optimal cost {optimal:.1f}).", ""]
    path = OUT / f"uneven-excess-{ratio}-{sample:g}-{k}-{d}-{seed}-eps{eps:g}.md"
    path.write_text("\n".join(header + lines) + "\n")
    print(path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
