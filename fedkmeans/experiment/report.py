"""Privacy-utility report of a sweep: plots (PNG and SVG) and a Markdown summary.

    python -m fedkmeans.experiment.report SWEEP_DIR [--out DIR]

reads ``SWEEP_DIR/results.csv`` (:mod:`fedkmeans.experiment.sweep`) and writes to ``--out``
(default: ``SWEEP_DIR``):

* ``cost_ratio.png`` / ``.svg``: k-means cost / optimal cost against the target
  epsilon, one line per algorithm (median over seeds, min-max band), data-point and
  client level side by side; non-private runs (epsilon = inf, k-FED) as dashed lines;
* ``accuracy.png`` / ``.svg`` (when the data has labels): Hungarian-matched accuracy
  and ARI against epsilon, laid out the same way;
* ``report.md``: per (level, epsilon) a table of every algorithm's median cost ratio
  with its min-max, the smallest epsilon from which each algorithm stays within 1%
  and 5% of optimal, a long table with whose centers the runs returned, the check's
  median margin (noise std), accuracy, spent epsilon and timings, and the failed jobs.

With several data sets in one sweep, every file gets the data set's name as a
suffix (``cost_ratio-nycflights.png``). Needs matplotlib
(``pip install 'fedkmeans[report]'``).
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

from fedkmeans.experiment.sweep import RESULTS_FILE, read_rows
from fedkmeans.plugins import ALGORITHMS

LEVELS = ("datapoint", "client")
LEVEL_TITLES = {"datapoint": "data-point level", "client": "client level"}
THRESHOLDS = (1.01, 1.05)
OTHER_COLOUR = "0.5"


def algorithm_colours() -> dict[str, str]:
    """One colour per registered algorithm, the same in every plot of every report.

    In registration order (also the plot order; names not registered follow in name
    order and are grey), whichever subset a sweep holds.
    """
    return {name: f"C{i}" for i, name in enumerate(ALGORITHMS.names())}


#: Suffix of an algorithm's label in runs whose split and T were ``auto`` (``tuning=auto``),
#: so a sweep over ``tuning=none,auto`` draws and tabulates the two apart.
AUTO_SUFFIX = " (auto)"


def algorithm_colour(name: str) -> str:
    """The fixed colour of ``name`` (:func:`algorithm_colours`); ``(auto)`` runs shifted."""
    colours = algorithm_colours()
    if name.endswith(AUTO_SUFFIX):
        base = colours.get(name.removesuffix(AUTO_SUFFIX))
        return OTHER_COLOUR if base is None else f"C{(int(base[1:]) + 6) % 10}"
    return colours.get(name, OTHER_COLOUR)


def _float(value: str | None) -> float | None:
    if value in (None, ""):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def _fmt(value: float | None, digits: int = 4) -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return "inf"
    return f"{value:.{digits}f}"


def _eps_label(eps: float) -> str:
    return "inf" if math.isinf(eps) else f"{eps:g}"


def _algorithms(rows: Sequence[dict]) -> list[str]:
    names = {r["algorithm"] for r in rows}
    order = [n for a in ALGORITHMS.names() for n in (a, a + AUTO_SUFFIX)]
    return [a for a in order if a in names] + sorted(names - set(order))


class Group:
    """The runs of one (data set, level, algorithm, epsilon) cell."""

    def __init__(self, rows: list[dict]):
        self.rows = rows
        self.ok = [r for r in rows if r["status"] == "ok"]
        self.failed = [r for r in rows if r["status"] != "ok"]

    def values(self, column: str) -> list[float]:
        """Finite float values of ``column`` over the successful runs."""
        out = [_float(r.get(column)) for r in self.ok]
        return [v for v in out if v is not None and math.isfinite(v)]

    def summary(self, column: str) -> tuple[float, float, float] | None:
        """(median, min, max) of ``column``, or None without values."""
        vals = self.values(column)
        if not vals:
            return None
        return statistics.median(vals), min(vals), max(vals)


def load(sweep_dir: Path) -> list[dict]:
    """Rows of ``SWEEP_DIR/results.csv`` with ``_eps`` (target epsilon) added."""
    path = Path(sweep_dir) / RESULTS_FILE
    rows = read_rows(path)
    if not rows:
        raise SystemExit(
            f"no rows in {path}: run a sweep first (python -m fedkmeans.experiment -m ...)"
        )
    for r in rows:
        eps = _float(r.get("privacy.epsilon"))
        name = r.get("algorithm")
        if name in ALGORITHMS and not ALGORITHMS[name].private:
            eps = math.inf
        r["_eps"] = math.inf if eps is None else eps
        r.setdefault("data.name", "?")
        r.setdefault("privacy.level", "datapoint")
        if r.get("privacy.split") == "auto" and r.get("privacy.lloyds-steps") == "auto":
            r["algorithm"] = r.get("algorithm", "?") + AUTO_SUFFIX
    return rows


def _grouped(rows: list[dict]) -> dict[tuple, Group]:
    cells: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        cells[(r["privacy.level"], r["algorithm"], r["_eps"])].append(r)
    return {key: Group(value) for key, value in cells.items()}


def _title(rows: list[dict], dataset: str) -> str:
    clients = sorted({int(float(r["num_clients"])) for r in rows if r.get("num_clients")})
    points = sorted({int(float(r["num_points"])) for r in rows if r.get("num_points")})
    deltas = sorted({r.get("privacy.delta", "") for r in rows} - {""}, key=float)
    size = (f"{clients[0]:,} clients" if len(clients) == 1
            else f"{clients[0]:,}-{clients[-1]:,} clients" if clients else "? clients")
    k = sorted({r.get("k_chosen") or r.get("k", "") for r in rows if r["status"] == "ok"})
    k_text = f", k = {'/'.join(str(int(float(v))) for v in k if v)}" if k else ""
    delta = ", ".join(f"{float(d):g}" for d in deltas) or "?"
    pts = f" ({points[0]:,} points)" if len(points) == 1 else ""
    return f"{dataset}: {size}{pts}{k_text}, \u03b4 = {delta}"


def _plot(
    rows: list[dict], dataset: str, out: Path, stem: str, panels: Sequence[tuple[str, str]]
) -> list[Path]:
    """One figure: a row per (column, label) panel, a column per privacy level."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = _grouped(rows)
    levels = [lv for lv in LEVELS if any(r["privacy.level"] == lv for r in rows)]
    levels += sorted({r["privacy.level"] for r in rows} - set(levels))
    algorithms = _algorithms(rows)
    colours = {a: algorithm_colour(a) for a in algorithms}
    fig, axes = plt.subplots(
        len(panels), len(levels), figsize=(max(6.4, 5.2 * len(levels)), 3.8 * len(panels)),
        squeeze=False, sharex="col",
    )
    for col, level in enumerate(levels):
        for row_i, (column, ylabel) in enumerate(panels):
            ax = axes[row_i][col]
            for algorithm in algorithms:
                cells = sorted(
                    (eps, g) for (lv, a, eps), g in groups.items()
                    if lv == level and a == algorithm and g.summary(column)
                )
                finite = [(eps, g.summary(column)) for eps, g in cells if math.isfinite(eps)]
                if finite:
                    xs = [e for e, _ in finite]
                    med = [s[0] for _, s in finite]
                    ax.plot(xs, med, marker="o", color=colours[algorithm], label=algorithm)
                    ax.fill_between(xs, [s[1] for _, s in finite], [s[2] for _, s in finite],
                                    color=colours[algorithm], alpha=0.18, linewidth=0)
                for eps, g in cells:
                    if math.isinf(eps):
                        ax.axhline(g.summary(column)[0], color=colours[algorithm],
                                   linestyle="--", linewidth=1.2,
                                   label=f"{algorithm} (non-private)")
            if column == "cost_ratio":
                ax.axhline(1.0, color="black", linestyle=":", linewidth=1,
                           label="optimal (non-private k-means)")
            ax.set_xscale("log")
            ax.set_ylabel(ylabel)
            ax.grid(True, which="both", alpha=0.3)
            if row_i == 0:
                ax.set_title(LEVEL_TITLES.get(level, level))
            if row_i == len(panels) - 1:
                ax.set_xlabel("target \u03b5 (total over all releases, PLD accountant)")
            xs_all = sorted({e for (lv, _, e), g in groups.items()
                             if lv == level and g.ok and math.isfinite(e) and e > 0})
            if xs_all:
                ax.set_xticks(xs_all)
                ax.set_xticklabels([_eps_label(e) for e in xs_all])
                ax.minorticks_off()
    handles: dict[str, object] = {}
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    ncol = min(len(handles), 3 * len(levels))
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=ncol,
               fontsize=8, frameon=False)
    fig.suptitle(_title(rows, dataset) + "\nmedian over seeds, band = min-max")
    legend_rows = -(-len(handles) // max(ncol, 1))
    fig.tight_layout(rect=(0, 0.035 * legend_rows / len(panels) + 0.02, 1, 1))
    paths = []
    for ext in ("png", "svg"):
        path = out / f"{stem}.{ext}"
        fig.savefig(path, dpi=130 if ext == "png" else None)
        paths.append(path)
    plt.close(fig)
    return paths


def _returned(rows: Sequence[dict]) -> str:
    """Whose centers the runs returned: ``3 protocol, 2 server-only (check)``; '-' if unknown."""
    counts = Counter(r["centers_returned"] for r in rows if r.get("centers_returned"))
    return ", ".join(f"{n} {label}" for label, n in sorted(counts.items())) or "-"


def _within(groups: dict[tuple, Group], level: str, algorithm: str, bar: float) -> str:
    """Smallest epsilon from which every larger epsilon has median cost ratio <= bar."""
    cells = sorted(
        (eps, g.summary("cost_ratio")) for (lv, a, eps), g in groups.items()
        if lv == level and a == algorithm and math.isfinite(eps) and g.summary("cost_ratio")
    )
    if not cells:
        return "-"
    best = None
    for eps, summary in reversed(cells):
        if summary[0] <= bar:
            best = eps
        else:
            break
    if best is None:
        eps, summary = min(cells, key=lambda c: c[1][0])
        return f"not reached (best median {summary[0]:.4f} at \u03b5 = {eps:g})"
    return f"\u03b5 = {best:g}"


def _settings(rows: list[dict]) -> list[str]:
    """Markdown lines: the keys the sweep varied, and fixed values that differ from defaults."""
    from fedkmeans.experiment.config import ExperimentConfig

    defaults = ExperimentConfig().to_flat()
    ok = [r for r in rows if r["status"] == "ok"] or rows
    varied, fixed = [], []
    for key, default in defaults.items():
        if key == "output-dir":
            continue
        values = {r.get(key, "") for r in ok}
        if len(values) > 1:
            varied.append(f"`{key}`")
        elif values:
            value = values.pop()
            if value != "" and _same(value, default) is False:
                fixed.append(f"`{key}={value}`")
    out = ["", f"Varied: {', '.join(varied) or '-'}."]
    if fixed:
        out += ["", f"Fixed, differing from the defaults: {', '.join(fixed)}."]
    return out


def _same(value: str, default: object) -> bool:
    """Whether a CSV cell equals a default value (numbers compared as floats)."""
    try:
        return float(value) == float(default)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(value) == str(default)


def markdown(rows: list[dict], dataset: str) -> str:
    """The Markdown report of one data set's rows."""
    groups = _grouped(rows)
    algorithms = _algorithms(rows)
    levels = [lv for lv in LEVELS if any(r["privacy.level"] == lv for r in rows)]
    levels += sorted({r["privacy.level"] for r in rows} - set(levels))
    ok = sum(r["status"] == "ok" for r in rows)
    lines = [
        f"# {_title(rows, dataset)}",
        "",
        f"{len(rows)} jobs ({ok} ok, {len(rows) - ok} failed). Cost = mean squared "
        "distance of a client point to its nearest center; optimal = centralized "
        "non-private k-means (>= 10 restarts) on the pooled data with the same k. Metrics "
        "are non-private evaluation. Cells: median [min-max] over seeds.",
    ]
    lines += _settings(rows)
    for level in levels:
        algos = [a for a in algorithms if any(k[0] == level and k[1] == a for k in groups)]
        eps_values = sorted({e for (lv, _, e), g in groups.items() if lv == level and g.ok})
        lines += ["", f"## {LEVEL_TITLES.get(level, level)}: cost / optimal", "",
                  "| \u03b5 | " + " | ".join(algos) + " |",
                  "|---|" + "---|" * len(algos)]
        for eps in eps_values:
            cells = []
            for algorithm in algos:
                g = groups.get((level, algorithm, eps))
                s = g.summary("cost_ratio") if g else None
                cells.append("" if s is None else f"{s[0]:.4f} [{s[1]:.4f}-{s[2]:.4f}]")
            lines.append(f"| {_eps_label(eps)} | " + " | ".join(cells) + " |")
        lines += ["", "| algorithm | within 1% of optimal from | within 5% from |",
                  "|---|---|---|"]
        for algorithm in algos:
            lines.append(
                f"| {algorithm} | " + " | ".join(
                    _within(groups, level, algorithm, bar) for bar in THRESHOLDS) + " |"
            )
    lines += ["", "## All cells", "",
              "| level | algorithm | T | \u03b5 target | runs ok/failed | max \u03b5 spent "
              "| centers returned | check margin (\u03c3) median "
              "| cost/optimal median | min | max | accuracy median | ARI median | k "
              "| wall s median |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (level, algorithm, eps), g in sorted(
        groups.items(), key=lambda kv: (LEVELS.index(kv[0][0]) if kv[0][0] in LEVELS else 9,
                                        algorithms.index(kv[0][1]), kv[0][2])
    ):
        ratio = g.summary("cost_ratio")
        spent = [_float(r.get("epsilon_spent")) for r in g.ok]
        spent = [s for s in spent if s is not None]
        steps = sorted({r.get("privacy.lloyds-steps", "") for r in g.rows})
        ks = sorted({r.get("k_chosen", "") for r in g.ok} - {""}, key=float)
        acc, ari, wall = g.summary("accuracy"), g.summary("ari"), g.summary("wall_s")
        margin = g.summary("check_margin_sigmas")
        lines.append(
            f"| {level} | {algorithm} | {'/'.join(steps)} | {_eps_label(eps)} | "
            f"{len(g.ok)}/{len(g.failed)} | {_fmt(max(spent) if spent else None)} | "
            f"{_returned(g.ok)} | {_fmt(margin and margin[0], 2)} | "
            f"{_fmt(ratio and ratio[0])} | {_fmt(ratio and ratio[1])} | "
            f"{_fmt(ratio and ratio[2])} | {_fmt(acc and acc[0], 3)} | "
            f"{_fmt(ari and ari[0], 3)} | {'/'.join(str(int(float(k))) for k in ks) or '-'} | "
            f"{_fmt(wall and wall[0], 1)} |"
        )
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        lines += ["", "## Failed jobs", "", "| job | overrides | error |", "|---|---|---|"]
        for r in failed:
            error = r.get("error", "").replace("|", "\\|")
            lines.append(f"| {r['job']} | `{r.get('overrides', '')}` | {error} |")
    return "\n".join(lines) + "\n"


def report(sweep_dir: Path, out: Path | None = None) -> list[Path]:
    """Write the plots and ``report.md`` of a sweep; return the written paths.

    Parameters
    ----------
    sweep_dir : Path
        Directory holding ``results.csv``.
    out : Path, optional
        Output directory (default ``sweep_dir``).

    Returns
    -------
    list of Path
    """
    rows = load(Path(sweep_dir))
    out = Path(out or sweep_dir)
    out.mkdir(parents=True, exist_ok=True)
    datasets = sorted({r["data.name"] for r in rows})
    written: list[Path] = []
    texts = []
    for dataset in datasets:
        sub = [r for r in rows if r["data.name"] == dataset]
        suffix = "" if len(datasets) == 1 else f"-{dataset}"
        written += _plot(sub, dataset, out, f"cost_ratio{suffix}",
                         [("cost_ratio", "k-means cost / optimal cost")])
        if any(_float(r.get("accuracy")) is not None for r in sub):
            written += _plot(sub, dataset, out, f"accuracy{suffix}", [
                ("accuracy", "accuracy (Hungarian-matched labels)"),
                ("ari", "adjusted Rand index"),
            ])
        texts.append(markdown(sub, dataset))
    path = out / "report.md"
    path.write_text("\n".join(texts))
    written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> None:
    """Command line: ``python -m fedkmeans.experiment.report SWEEP_DIR [--out DIR]``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep_dir", type=Path, help="directory with results.csv")
    parser.add_argument("--out", type=Path, default=None, help="output directory")
    args = parser.parse_args(argv)
    for path in report(args.sweep_dir, args.out):
        print(path)


if __name__ == "__main__":
    main()
