"""The most any clipped-sum check could do on the runs the choice still misses (issue 48).

    python benchmarks/check_limit.py                  # every case the acceptance misses
    python benchmarks/check_limit.py --cases uneven-1:50-k5 --seeds 0-3
    python benchmarks/check_limit.py --from-csv       # redraw the md from the csv

The final choice returns the protocol's centers A only if its noisy wide sum is below
``-z`` noise standard deviations (:mod:`fedkmeans.stages.check`). Its misses on the
acceptance benchmarks are runs where A was cheaper and the check kept B. This benchmark
asks whether another check of the same kind, at the same share, could have found them.

For every run (the acceptance benchmark's data and settings: only the data and k, secret
noise) it captures the clients' points, A and B in the check round (the node's
``cost_differences``, in-process) and the release's unit noise standard deviation
(``on_release``), and computes, without noise:

* ``run margin``: the run's wide sum over its noise standard deviation, and
  ``P(A) run``, the probability the run's rule
  (:func:`~fedkmeans.stages.check.returns_protocol`) returns A at that noise
  (``--draws`` fresh draws, the narrow sum and the reach included);
* ``oracle margin``: the most negative margin of a single clipped sum
  ``sum_p clip(d(p, A)^2 - d(p, B)^2, -tau, tau)`` over a grid of clips tau from the
  smallest to the largest difference, among the clips that move the terms by at most
  ``TOLERANCE`` (1 %) of B's cost in all, ``sum_p max(|diff_p| - tau, 0)``, so that the
  clipped sum is the true difference to that much whatever the signs (a smaller clip
  makes a sign test, which decides on a clipped cost: the failure this issue began
  with), released alone (sensitivity 1, not the pair's
  sqrt 2) with, at client level, the per-client bound set to the largest client's
  actual sum (at least what an unbiased bound must be) in place of
  ``max-points-per-client``. The clip and the bound are chosen by an oracle that sees
  the clients' data, so no public rule reaches this margin; the sum is Gaussian, so by
  the Neyman-Pearson lemma no test of it that returns A with probability at most 5 %
  where A and B cost the same has more power than the threshold at ``-z``:
  ``P(A) oracle = Phi(-z - oracle margin)`` bounds every rule of this kind at this
  share;
* ``B-only margin``: the wide sum at the smallest clip that keeps the bound, the
  largest difference a point within r of a center of B can have,
  ``max_{c in B} (t_c + 2 r sqrt(t_c))`` (only A's gains are clipped beyond it:
  :func:`~fedkmeans.stages.check.check_clip`'s derivation), at the run's noise;
* ``P(A) bound``: ``Phi(-z - run margin)``, the most any test of the run's release can
  return A with while it returns A with probability at most 5 % where A and B cost the
  same in the wide clipped cost (Neyman-Pearson, the release being Gaussian);
* ``share for 90 %``: the smallest check share at which the run's wide margin, scaled
  by the calibrated noise of that share (:func:`fedkmeans.privacy.calibration.calibrate`
  on :func:`check_power.paper_plan`, the paper's split), reaches ``z + 1.2816``
  (``P(A) bound`` 0.9), with the clips unchanged; the rest of the budget is what the
  protocol's own rounds keep, so a share near 1 leaves A nothing to be good with; and
  the same for the B-only margin.

The true costs ``A / B`` are on the clients' points in the space of A and B (a
diagnostic of this benchmark, never published by a run). Writes
``docs/results/<name>.{csv,md}``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy.special import ndtr

OUT = Path(__file__).resolve().parents[1] / "docs" / "results"
#: ``z + z_0.9``: a margin that clears the bar with probability 0.9.
POWERED = 1.6448536269514722 + 1.2815515655446004
#: The oracle's clip may move the terms by at most this fraction of B's cost in all: a
#: test of its sum decides on the true cost to within this much.
TOLERANCE = 0.01
SHARES = (0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)

#: case -> (family, what makes it, level, epsilons): the cells the acceptance misses.
CASES = {
    "small-server": ("federations", "small-server", "client", (0.5,)),
    "missing-0": ("federations", "missing-0", "client", (0.5, 1.0)),
    "mixture-client": ("harness", "dataset=mixture-client", "client", (1.0,)),
    "diamonds": ("harness", "dataset=diamonds", "client", (3.0, 4.0)),
    "uneven-1:50-k5": ("uneven", (50, 0.01, 5, 5), "datapoint", (0.5,)),
    "uneven-1:50-k10": ("uneven", (50, 0.01, 10, 20), "datapoint", (0.5, 1.0)),
}


def noise_ratio(epsilon: float, level: str) -> dict[float, float]:
    """Share -> the check release's noise at share 0.1 over its noise at that share."""
    from check_power import paper_plan

    from fedkmeans.privacy.calibration import calibrate

    scales = {}
    for share in SHARES:
        released = calibrate(paper_plan(epsilon, level, share), epsilon=epsilon, delta=1e-6)
        scales[share] = next(r.noise_scale for r in released
                             if r.stage == "check/cost_difference")
    return {share: scales[SHARES[0]] / scale for share, scale in scales.items()}


def oracle_margin(diff: np.ndarray, owner: np.ndarray, clients: int, unit: float,
                  bound: float | None, tolerance: float) -> tuple[float, float]:
    """The most negative margin of one clipped sum that measures the true difference.

    Over a grid of clips tau, those that move the terms by at most ``tolerance`` in all,
    ``sum_p max(|diff_p| - tau, 0)`` (module docstring). ``unit``: the run's
    noise standard deviation per coordinate in units of the clip, for the pair's
    sensitivity ``sqrt 2`` (data point) or ``sqrt 2 bound`` (client).
    """
    scale = np.abs(diff[diff != 0])
    if scale.size == 0:
        return 0.0, math.nan
    best, clip, magnitude = 0.0, math.nan, np.abs(diff)
    for tau in np.geomspace(scale.min(), scale.max(), 200):
        if float(np.sum(np.maximum(magnitude - tau, 0.0))) > tolerance:
            continue  # the clip moves more than the tolerance, whatever the signs
        terms = np.clip(diff / tau, -1.0, 1.0)
        total = float(terms.sum())
        if bound is None:  # one point moves the sum by at most 1: noise unit / sqrt 2
            margin = total * math.sqrt(2.0) / unit
        else:  # the largest client's |sum| as the per-client bound
            largest = float(np.max(np.abs(np.bincount(owner, terms, minlength=clients))))
            margin = total * math.sqrt(2.0) * bound / (unit * largest)
        if margin < best:
            best, clip = margin, float(tau)
    return best, clip


def capture(run_fit) -> dict:
    """One run: the check round's points, A, B, release noise and the run's exact sums."""
    from check_power import check_round

    with check_round({}) as seen:
        info = run_fit()
    if "sums" not in seen:
        return {}
    seen["diff"] = np.concatenate(seen["diff"])
    seen["owner"] = np.concatenate(seen["owner"])
    return {**seen, "reach_sigmas": info.get("reach_sigmas"),
            "chosen": info.get("chosen", "")}


def fits(case: str, seed: int, eps: float, tmp: str):
    """``(level, fit)``: a callable that runs case's acceptance run and returns its check info."""
    family, what, level, _ = CASES[case]
    if family == "harness":
        def fit():
            from fedkmeans.experiment import run
            result = run([what, f"privacy.level={level}", f"privacy.epsilon={eps}",
                          f"seed={seed}", f"output-dir={tmp}/{case}-{seed}-{eps}"])
            return result.get("check") or {}
        return level, fit
    if family == "uneven":
        from uneven_clusters import generate
        x, _, ids, q, _ = generate(*what, seed)
        k = what[2]
    else:
        from check_power import federation
        from federation_data import FEDERATIONS
        x, _, ids, q, _ = federation(what, seed)
        k = FEDERATIONS[what].k

    def fit():
        from fedkmeans import FedDPKMeans
        model = FedDPKMeans(n_clusters=k, epsilon=eps, level=level, random_state=seed)
        return model.fit(x, groups=ids, X_server=q).release_.get("check") or {}
    return level, fit


def share_for(margin: float, ratios: dict[float, float]) -> float:
    """The smallest share at which ``margin`` (at share 0.1) reaches :data:`POWERED`."""
    return next((s for s, r in ratios.items() if -margin * r >= POWERED), math.inf)


def row_of(case, seed, level, eps, seen, ratios, draws, rng) -> dict:
    """One csv row from a captured run (the module docstring's columns)."""
    from fedkmeans.stages.check import CHOICE_STDS, returns_protocol

    unit = seen["unit"]
    bound = None if level == "datapoint" else seen["sensitivity"] / math.sqrt(2.0)
    wide, narrow = seen["sums"]
    noise = unit * rng.standard_normal((draws, 2))
    p_run = float(np.mean([returns_protocol((wide + w) / unit, (narrow + n) / unit,
                                            seen["reach_sigmas"]) for w, n in noise]))
    oracle, clip = oracle_margin(seen["diff"], seen["owner"], seen["clients"], unit, bound,
                                 TOLERANCE * seen["b"])
    b_margin = float(np.clip(seen["diff"] / seen["b_clip"], -1.0, 1.0).sum()) / unit
    return {"case": case, "seed": seed, "level": level, "epsilon": eps,
            "a_over_b": seen["a"] / seen["b"], "chosen": seen["chosen"],
            "run_margin": wide / unit, "narrow_margin": narrow / unit,
            "p_run": p_run, "p_run_bound": float(ndtr(-CHOICE_STDS - wide / unit)),
            "oracle_margin": oracle,
            "oracle_clip_over_wide": clip / seen["clips"][0],
            "b_clip_over_wide": seen["b_clip"] / seen["clips"][0],
            "b_clip_margin": b_margin, "b_clip_share_for_90": share_for(b_margin, ratios),
            "oracle_clip_over_narrow": clip / seen["clips"][-1],
            "p_oracle": float(ndtr(-CHOICE_STDS - oracle)),
            "share_for_90": share_for(wide / unit, ratios)}


def summary(rows: list[dict], header: str, gain: float) -> list[str]:
    def share(values) -> str:
        value = statistics.median(values)
        return "> 0.9" if math.isinf(value) else f"{value:g}"

    out = [header, "", f"Runs where A is at least {100 * (1 - gain):g} % cheaper than B in "
           "true cost (the runs a miss is made of); means over them, shares their median.",
           "", "| case | level | eps | runs | A <= B x " f"{gain:g} | A kept | P(A) run | "
           "run margin | P(A) bound | share for 90 % | B-only margin | its share for 90 % | "
           "oracle margin | oracle clip / wide |", "|" + "---|" * 14]
    for case in dict.fromkeys(r["case"] for r in rows):
        for eps in sorted({r["epsilon"] for r in rows if r["case"] == case}):
            cell = [r for r in rows if r["case"] == case and r["epsilon"] == eps]
            gains = [r for r in cell if r["a_over_b"] <= gain]
            head = f"| {case} | {cell[0]['level']} | {eps:g} | {len(cell)} | {len(gains)} |"
            if not gains:
                out.append(head + " |" * 9)
                continue
            mean = {key: statistics.mean(r[key] for r in gains) for key in (
                "p_run", "run_margin", "p_run_bound", "b_clip_margin", "oracle_margin")}
            out.append(
                f"{head} {sum(r['chosen'] == 'protocol' for r in gains)} | "
                f"{mean['p_run']:.3f} | {mean['run_margin']:.2f} | {mean['p_run_bound']:.3f} | "
                f"{share(r['share_for_90'] for r in gains)} | {mean['b_clip_margin']:.2f} | "
                f"{share(r['b_clip_share_for_90'] for r in gains)} | "
                f"{mean['oracle_margin']:.2f} | "
                f"{statistics.median(r['oracle_clip_over_wide'] for r in gains):.2f} |")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--seeds", default="0-5", help="first-last+1, the reports' seeds")
    p.add_argument("--draws", type=int, default=4000)
    p.add_argument("--gain", type=float, default=0.98,
                   help="A counts as a gain at or below this fraction of B's true cost")
    p.add_argument("--name", default="check-limit")
    p.add_argument("--from-csv", action="store_true")
    args = p.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from check_power import read_rows, write_rows

    path = OUT / f"{args.name}.csv"
    start = time.perf_counter()
    if args.from_csv:
        rows = read_rows(path, ("case", "level", "chosen"))
    else:
        first, _, last = args.seeds.partition("-")
        seeds = range(int(first), int(last)) if last else range(int(first))
        rng = np.random.default_rng(0)
        rows, ratios = [], {}
        with tempfile.TemporaryDirectory() as tmp:
            for case in args.cases.split(","):
                for eps in CASES[case][3]:
                    for seed in seeds:
                        level, fit = fits(case, seed, eps, tmp)
                        if (eps, level) not in ratios:
                            ratios[(eps, level)] = noise_ratio(eps, level)
                        seen = capture(fit)
                        if not seen:
                            continue
                        rows.append(row_of(case, seed, level, eps, seen,
                                           ratios[(eps, level)], args.draws, rng))
                        print(rows[-1], flush=True)
        write_rows(path, rows)
    command = "python benchmarks/check_limit.py " + " ".join(argv or sys.argv[1:])
    header = (f"# The final choice's limit on the runs it misses\n\nMeasured by "
              f"`{command.strip()}` ({time.perf_counter() - start:.0f} s; {len(rows)} runs "
              f"with a check round; {args.draws} noise draws per run). Method and columns: "
              "the module docstring. Margins in noise standard deviations, negative where "
              "A is cheaper; the bar is -1.645.")
    (OUT / f"{args.name}.md").write_text("\n".join(summary(rows, header, args.gain)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
