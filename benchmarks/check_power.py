"""The final private choice's power, replayed from captured noise-free sums (issue 48).

    python benchmarks/check_power.py                       # federations, seeds 5-9, client
    python benchmarks/check_power.py --family uneven --seeds 0-5
    python benchmarks/check_power.py --from-csv            # redraw the md from the csv
    python benchmarks/check_power.py --wide-clip server --name check-power-server-clip

For every run (``FedDPKMeans``, only the data, ``X_server`` and k given, secret noise)
this records what the check round's release was computed from, not the release: the
exact clipped sums ``(sum_j D_j, sum_j N_j)`` in units of their clips (the server's
``on_release`` hook, before the noise), the release's unit noise standard deviation,
the reach, and the true costs of A and B on the clients' points (a diagnostic of this
benchmark, never published by a run). The decision
(:func:`fedkmeans.stages.check.returns_protocol`) is then replayed with
``--draws`` fresh Gaussian draws per run, at the run's own noise (``one release``) and
at the noise the two releases of half the share each had until issue 48's last step
(``two releases``: each coordinate's noise times the factor :func:`split_factor`
computes with the calibration on the paper's split). ``P(A)`` is the probability the
run returns the protocol's centers A.

``--wide-clip server`` measures a candidate, not the run's rule: the wide clip from B's
centers alone, ``max_{c in B} (t_c + 2 r sqrt(t_c))``. A point whose nearest center of
A and B is in B has a difference of at most that (``check_clip``'s derivation), so only
A's gains are clipped and the bound on the true cost stays; a cluster of A that B lacks
no longer widens the clip, and A's gain there is clipped.

The default data are the federation generator's seeds 5-9 (``federations.py`` reports on
seeds 0-4): a tuning set, so that the held-out benchmarks stay held out. Writes
``docs/results/<name>.{csv,md}``.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "docs" / "results"
#: The protocol's centers count as a gain at or below this fraction of B's true cost.
GAIN = 0.97


def paper_plan(epsilon: float, level: str, share: float = 0.1) -> list:
    """The release plan of the paper's split with check ``share``, T = 1, ``n_max`` 16."""
    from fedkmeans.algorithms import release_plan
    from fedkmeans.config import parse_protocol

    privacy = parse_protocol({
        "privacy.level": level, "privacy.epsilon": epsilon, "privacy.check-share": share,
        "privacy.check-clip": 1.0, "privacy.lloyds-steps": 1,
        "privacy.split": "0.2,0.2,0.45,0.15", "privacy.data-radius": 11.0,
        "privacy.max-points-per-client": 16, "privacy.clip-covariance": 6050.0,
        "privacy.clip-histogram": 50.0, "privacy.clip-sums": 550.0,
        "privacy.clip-counts": 50.0, "privacy.extra-centers": 0}).privacy
    return release_plan("feddp-kmeans", privacy)


def split_factor(epsilon: float, level: str) -> float:
    """Noise of one coordinate as two half-share releases over that of the one release.

    Both plans calibrated (:func:`fedkmeans.privacy.calibration.calibrate`) on
    :func:`paper_plan`.
    """
    from fedkmeans.privacy.calibration import calibrate

    one = paper_plan(epsilon, level)
    check = next(p for p in one if p.stage == "check/cost_difference")
    two = [p for p in one if p is not check] + [
        replace(check, stage=f"check/{name}", weight=check.weight / 2,
                sensitivity=check.sensitivity / 2 ** 0.5) for name in ("wide", "narrow")]
    # per coordinate in units of the clip: each release's noise scale (the pair's
    # sensitivity is C each, the vector's C sqrt 2)
    scale_one = {r.stage: r.noise_scale for r in calibrate(one, epsilon=epsilon, delta=1e-6)}
    scale_two = {r.stage: r.noise_scale for r in calibrate(two, epsilon=epsilon, delta=1e-6)}
    return scale_two["check/wide"] / scale_one["check/cost_difference"]


def server_side_clip(server_x, centers, alternative) -> float:
    """The candidate wide clip: :func:`~fedkmeans.stages.check.check_clip` over B's centers."""
    from fedkmeans.clustering.distances import nearest_squared_distances

    gaps = nearest_squared_distances(alternative, centers)
    both = np.concatenate([centers, alternative])
    r = float(np.sqrt(np.median(nearest_squared_distances(server_x, both))))
    return max(float(np.max(gaps + 2.0 * r * np.sqrt(gaps))), np.finfo(float).tiny)


@contextmanager
def check_round(seen: dict, wide_clip=None):
    """Record into ``seen`` what the check round's release is computed from.

    On release (the server's ``on_release`` hook, before the noise): ``sums``, the exact
    (wide, narrow) sums in units of their clips, ``unit`` and ``sensitivity``. From the
    node's ``cost_differences`` (in-process): ``a`` and ``b``, the true costs of A and B
    on the clients' points (a diagnostic, never published by a run), ``diff``, each
    point's ``d(p, A)^2 - d(p, B)^2``, and ``owner``, its client (lists of arrays, one per
    call, clients numbered across calls), ``clients`` and the ``clips`` sent. From the
    wide clip: ``b_clip``, :func:`server_side_clip`. ``wide_clip``, if given, replaces
    the run's wide clip rule.
    """
    from fedkmeans.clustering.distances import nearest_squared_distances
    from fedkmeans.server.releaser import Releaser
    from fedkmeans.stages import check

    seen.update(diff=[], owner=[], clients=0, a=0.0, b=0.0)
    notify, differences, clip = Releaser._notify, check.cost_differences, check.check_clip
    rule = wide_clip or clip

    def spy_clip(server_x, centers, alternative):
        seen["b_clip"] = server_side_clip(server_x, centers, alternative)
        return rule(server_x, centers, alternative)

    def spy_notify(self, stage, before, after):
        if stage == "check/cost_difference" and before is not None:
            seen["sums"] = [float(v) for v in np.ravel(before)]
            seen["unit"] = float(self.releases[stage].noise_scale)
            seen["sensitivity"] = float(self.releases[stage].sensitivity)
        return notify(self, stage, before, after)

    def spy_differences(points, owner, clients, centers, alternative, tau):
        to_a = nearest_squared_distances(points, centers)
        to_b = nearest_squared_distances(points, alternative)
        seen["a"] += float(to_a.sum())
        seen["b"] += float(to_b.sum())
        seen["diff"].append(to_a - to_b)
        seen["owner"].append(np.asarray(owner) + seen["clients"])
        seen["clients"] += clients
        seen["clips"] = [float(t) for t in np.atleast_1d(tau)]
        return differences(points, owner, clients, centers, alternative, tau)

    Releaser._notify, check.cost_differences, check.check_clip = (
        spy_notify, spy_differences, spy_clip)
    try:
        yield seen
    finally:
        Releaser._notify, check.cost_differences, check.check_clip = notify, differences, clip


def capture(x, ids, q, k, eps, seed, level, wide_clip: str = "run") -> dict:
    """One run: the check's exact unit sums, unit sigma, reach and the costs of A and B."""
    from fedkmeans import FedDPKMeans

    with check_round({}, server_side_clip if wide_clip == "server" else None) as seen:
        fit = FedDPKMeans(n_clusters=k, epsilon=eps, level=level,
                          random_state=seed).fit(x, groups=ids, X_server=q)
    info = fit.release_.get("check") or {}
    if "sums" not in seen:
        return {}
    return {"wide_sum": seen["sums"][0], "narrow_sum": seen["sums"][1], "unit": seen["unit"],
            "reach_sigmas": info.get("reach_sigmas"), "a_over_b": seen["a"] / seen["b"],
            "chosen": info.get("chosen", "")}


def federation(name: str, seed: int) -> tuple:
    """``(x, None, client_ids, server_x, None)`` of a federation, as ``generate`` returns."""
    from federations import default_data_dir, write_federation

    clients, server = write_federation(name, seed, default_data_dir())
    c, s = np.load(clients), np.load(server)
    return c["x"], None, c["client"], s["server_x"], None


def runs(args) -> list[dict]:
    """Every captured row of the asked family, seeds, levels and epsilons."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    first, _, last = args.seeds.partition("-")
    seeds = range(int(first), int(last)) if last else range(int(first))
    cases = []
    if args.family == "uneven":
        from uneven_clusters import RATIOS, SAMPLES, SHAPES, generate
        for ratio in RATIOS:
            for sample in SAMPLES:
                for k, d in SHAPES:
                    for seed in seeds:
                        cases.append((f"uneven 1:{ratio} {sample:g} k={k} d={d}", seed,
                                      lambda r=ratio, s=sample, k=k, d=d, seed=seed:
                                      generate(r, s, k, d, seed), k))
    else:
        from federation_data import FEDERATIONS
        for name in args.federations.split(","):
            for seed in seeds:
                cases.append((name, seed, lambda name=name, seed=seed: federation(name, seed),
                              FEDERATIONS[name].k))
    rows = []
    for name, seed, load, k in cases:
        x, _, ids, q, _ = load()
        for level in args.levels.split(","):
            for eps in (float(e) for e in args.epsilons.split(",")):
                row = capture(x, ids, q, k, eps, seed, level, args.wide_clip)
                if row:
                    rows.append({"set": name, "seed": seed, "level": level, "epsilon": eps, **row})
                    print(rows[-1], flush=True)
    return rows


def replay(rows: list[dict], draws: int, seed: int = 0) -> list[dict]:
    """Add ``p_one`` and ``p_two``: P(A) at the run's noise and at the two releases'."""
    from fedkmeans.stages.check import returns_protocol

    rng = np.random.default_rng(seed)
    factors: dict = {}
    for r in rows:
        key = (r["epsilon"], r["level"])
        if key not in factors:
            factors[key] = split_factor(*key)
        for name, factor in (("p_one", 1.0), ("p_two", factors[key])):
            sigma = r["unit"] * factor
            noise = sigma * rng.standard_normal((draws, 2))
            reach = r["reach_sigmas"] / factor
            r[name] = float(np.mean([
                returns_protocol((r["wide_sum"] + w) / sigma, (r["narrow_sum"] + n) / sigma,
                                 reach) for w, n in noise]))
        r["two_over_one_noise"] = factors[key]
    return rows


def summary(rows: list[dict], header: str) -> list[str]:
    """The md: P(A) by level and epsilon, where A is a gain and where it is dearer."""
    out = [header, "", "| level | eps | runs | A <= 0.97 B: runs, mean P(A) two releases / "
           "one | A > B: runs, max P(A) two / one | noise two / one |", "|---|---|---|---|---|---|"]
    for level in sorted({r["level"] for r in rows}):
        for eps in sorted({r["epsilon"] for r in rows}):
            cell = [r for r in rows if r["level"] == level and r["epsilon"] == eps]
            if not cell:
                continue
            gain = [r for r in cell if r["a_over_b"] <= GAIN]
            dear = [r for r in cell if r["a_over_b"] > 1.0]
            g = (f"{len(gain)}, {statistics.mean(r['p_two'] for r in gain):.3f} / "
                 f"{statistics.mean(r['p_one'] for r in gain):.3f}") if gain else "0"
            d = (f"{len(dear)}, {max(r['p_two'] for r in dear):.3f} / "
                 f"{max(r['p_one'] for r in dear):.3f}") if dear else "0"
            out.append(f"| {level} | {eps:g} | {len(cell)} | {g} | {d} | "
                       f"{cell[0]['two_over_one_noise']:.3f} |")
    return out


def read_rows(path: Path, text: tuple[str, ...]) -> list[dict]:
    """The csv's rows, every column but ``text`` as a float."""
    with path.open() as f:
        return [{k: (v if k in text else float(v)) for k, v in r.items()}
                for r in csv.DictReader(f)]


def write_rows(path: Path, rows: list[dict]) -> None:
    """``rows`` as a csv with the first row's keys as its header."""
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", choices=("federations", "uneven"), default="federations")
    p.add_argument("--federations", default="small-server,missing-0,missing-1,missing-2,"
                   "missing-4,heavy-tailed,uncentred,uneven,scales,large-server")
    p.add_argument("--seeds", default="5-10")
    p.add_argument("--levels", default="client")
    p.add_argument("--epsilons", default="0.5,1,3")
    p.add_argument("--draws", type=int, default=4000)
    p.add_argument("--name", default="check-power")
    p.add_argument("--wide-clip", choices=("run", "server"), default="run",
                   help="run: the run's own wide clip; server: the candidate from B's "
                        "centers alone (module docstring)")
    p.add_argument("--from-csv", action="store_true")
    args = p.parse_args(argv)
    path = OUT / f"{args.name}.csv"
    start = time.perf_counter()
    if args.from_csv:
        rows = read_rows(path, ("set", "level", "chosen"))
    else:
        rows = replay(runs(args), args.draws)
        write_rows(path, rows)
    command = "python benchmarks/check_power.py " + " ".join(argv or sys.argv[1:])
    header = (f"# The final choice's power, replayed\n\nMeasured by `{command.strip()}` "
              f"({time.perf_counter() - start:.0f} s; {len(rows)} runs with a check round; "
              f"{args.draws} noise draws per run). P(A): the probability of returning "
              "the protocol's centers A, at the noise of the one release of (wide, "
              "narrow) and at that of two releases of half the share each; A / B: true "
              "costs on the clients' points. Method: the module docstring."
              + (" Wide clip: the candidate from B's centers alone (`--wide-clip "
                 "server`), not the run's rule." if args.wide_clip == "server" else ""))
    (OUT / f"{args.name}.md").write_text("\n".join(summary(rows, header)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
