"""Hydra multirun sweeps: one tidy row per job, failures recorded, progress and ETA.

``python -m fedkmeans.experiment -m privacy.epsilon=0.1,0.4 algorithm=feddp-kmeans,server-lloyds
seed=0,1`` runs every combination (the Hydra ``BasicSweeper``, one job after the other,
on the engine of the config: the in-process engine by default). Each job appends one
row to ``<sweep dir>/results.csv``:

* ``job``, ``status`` (``ok`` or ``failed``), ``error`` (the exception's type and
  message; empty when ok), ``overrides`` (the job's Hydra overrides), ``unread_keys``
  (keys the command line typed that this job never reads, run at their defaults:
  :func:`fedkmeans.experiment.run_sweep_job`; space-separated, empty when none);
* every flat config key (``algorithm``, ``privacy.epsilon``, ...) as the job ran it;
  ``output-dir`` is ``<sweep dir>/runs/<hash of the config>``, so a sweep extended
  later into the same directory (``privacy.epsilon=1.2`` added) never reuses another
  configuration's directory, and re-running a configuration resumes its checkpoint;
* the result: ``k_chosen``, ``epsilon_spent``, ``centers_returned`` (``protocol``,
  ``server-only (check)``, ``server-only (too few clients)`` or the algorithm: whose
  centers the run returned, :func:`fedkmeans.statements.centers_returned`),
  ``check_margin_sigmas`` (the final private choice's noisy cost difference in noise
  standard deviations; empty without a check), ``cost``, ``optimal_cost``,
  ``cost_ratio``, ``accuracy``, ``ari``, ``nmi``, ``num_points``, ``num_clients``,
  ``num_nodes``, ``rejected_replies``;
* timings in seconds: ``time_total`` (server), ``time_calibration``,
  ``time_register``, ``time_init`` (FedDP-Init rounds or the server-side
  initialisation), ``time_lloyds`` (all Lloyds rounds), ``time_evaluate``,
  ``time_optimal_cost`` and ``wall_s`` (the whole job), and ``result_path``.

A job that raises (a bad value, a missing file, a run error) is recorded as
``failed`` and the sweep goes on. Appends hold an exclusive lock on
``results.csv.lock``, so jobs of a parallel launcher, or two sweeps sharing a
directory, never interleave rows. After each job a line shows jobs done / total,
failures, elapsed time and the ETA (:func:`eta_seconds`); :class:`SweepCallback`
counts the jobs when the multirun starts, and exits with status 1 at the end if a job
failed or a typed key was read by none of its jobs (:func:`unread_by_every_job`;
``FEDKMEANS_SWEEP_ALLOW_FAILURES=1`` keeps status 0). ``python -m
fedkmeans.experiment.report SWEEP_DIR`` turns the table into plots and a Markdown summary.
"""

from __future__ import annotations

import contextlib
import csv
import json
import logging
import math
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from fedkmeans.experiment.config import config_keys
from fedkmeans.statements import centers_returned

try:  # POSIX advisory locks; elsewhere appends are not guarded
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

LOG = logging.getLogger(__name__)

RESULTS_FILE = "results.csv"
#: ``FEDKMEANS_SWEEP_ALLOW_FAILURES=1``: a multirun with failed jobs still exits 0.
ALLOW_FAILURES_ENV = "FEDKMEANS_SWEEP_ALLOW_FAILURES"
META_FILE = "sweep.json"
ERROR_FILE = "error.txt"

#: Columns after the config keys.
RESULT_COLUMNS = (
    "k_chosen", "epsilon_spent", "centers_returned", "check_margin_sigmas", "cost",
    "optimal_cost", "cost_ratio", "accuracy", "ari",
    "nmi", "fmi", "num_points", "num_clients", "num_nodes", "rejected_replies",
    "time_total", "time_calibration", "time_register", "time_init", "time_lloyds",
    "time_evaluate", "time_optimal_cost", "wall_s", "result_path",
)
HEAD_COLUMNS = ("job", "status", "error", "overrides", "unread_keys")


def columns() -> list[str]:
    """The header of ``results.csv``: job columns, every config key, result columns."""
    return [*HEAD_COLUMNS, *config_keys(), *RESULT_COLUMNS]


def job_output_dir(sweep_dir: Path, flat: Mapping[str, Any]) -> Path:
    """``<sweep dir>/runs/<hash>``: one directory per distinct configuration.

    The hash is that of the validated configuration without ``output-dir`` (the raw
    values if the configuration does not validate), so equal configurations share a
    directory (a re-run resumes from its checkpoint) and different ones never do,
    whichever Hydra job number they get.
    """
    import hashlib

    from fedkmeans.experiment.config import ConfigError, parse_config

    values = {k: v for k, v in flat.items() if k != "output-dir"}
    try:
        values = parse_config(values).to_flat()
        values.pop("output-dir", None)
    except ConfigError:
        pass
    digest = hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode())
    return Path(sweep_dir) / "runs" / digest.hexdigest()[:16]


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def _timings(timings: Mapping[str, float]) -> dict[str, float]:
    init = sum(v for k, v in timings.items() if k.startswith("init"))
    lloyds = sum(v for k, v in timings.items() if k.startswith("lloyds"))
    return {
        "time_total": timings.get("total"),
        "time_calibration": timings.get("calibration"),
        "time_register": timings.get("register"),
        "time_init": init,
        "time_lloyds": lloyds,
        "time_evaluate": timings.get("evaluate"),
        "time_optimal_cost": timings.get("optimal_cost"),
    }


def result_row(
    job: int, overrides: Sequence[str], result: Mapping[str, Any], wall_s: float
) -> dict[str, Any]:
    """The row of a finished job.

    Parameters
    ----------
    job : int
        Hydra job number.
    overrides : sequence of str
        The job's overrides (``privacy.epsilon=0.4``...).
    result : mapping
        The content of ``result.json`` (plus ``result_path``).
    wall_s : float
        Seconds the job took end to end.

    Returns
    -------
    dict
    """
    metrics = result.get("metrics", {})
    federation = result.get("federation", {})
    row: dict[str, Any] = {
        "job": job, "status": "ok", "error": "", "overrides": " ".join(overrides),
        "unread_keys": " ".join(result.get("unread_keys", ())),
        **result.get("config", {}),
        "k_chosen": result.get("k"),
        "epsilon_spent": result.get("privacy", {}).get("epsilon"),
        "centers_returned": centers_returned(result),
        "check_margin_sigmas": (result.get("check") or {}).get("margin_sigmas"),
        **{key: metrics.get(key) for key in (
            "cost", "optimal_cost", "cost_ratio", "accuracy", "ari", "nmi", "fmi",
            "num_points")},
        "num_clients": federation.get("num_clients"),
        "num_nodes": federation.get("num_nodes"),
        "rejected_replies": len(federation.get("rejected_replies", []) or []),
        **_timings(result.get("timings", {})),
        "wall_s": wall_s,
        "result_path": result.get("result_path", ""),
    }
    return {key: _cell(value) for key, value in row.items()}


def failure_row(
    job: int, overrides: Sequence[str], flat: Mapping[str, Any], error: BaseException,
    wall_s: float,
) -> dict[str, Any]:
    """The row of a failed job: its config as given, the error, no metrics."""
    message = " ".join(f"{type(error).__name__}: {error}".split())
    row = {
        "job": job, "status": "failed", "error": message, "overrides": " ".join(overrides),
        **{key: value for key, value in flat.items() if key in set(config_keys())},
        "wall_s": wall_s,
    }
    return {key: _cell(value) for key, value in row.items()}


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``<path>.lock`` (POSIX) for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(lock, fcntl.LOCK_UN)


def append_row(path: Path, row: Mapping[str, Any]) -> list[dict[str, str]]:
    """Append ``row`` to the CSV table at ``path`` under a lock; return all rows.

    The header is written with the first row; later rows follow the file's header
    (unknown fields dropped, missing ones empty), so the file stays rectangular.
    """
    with _locked(path):
        header = None
        if path.exists() and path.stat().st_size > 0:
            with path.open(newline="") as f:
                header = next(csv.reader(f), None)
        with path.open("a", newline="") as f:
            writer = csv.DictWriter(
                f, fieldnames=header or columns(), extrasaction="ignore", restval=""
            )
            if header is None:
                writer.writeheader()
            writer.writerow(row)
        return read_rows(path)


def read_rows(path: Path) -> list[dict[str, str]]:
    """Every row of a results table (strings)."""
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _clock(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def progress_line(sweep_dir: Path, rows: list[dict[str, str]], row: Mapping[str, Any]) -> str:
    """``[sweep] done/total (failed) | this job | elapsed | ETA`` after one job."""
    meta_path = sweep_dir / META_FILE
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    mine = rows[int(meta.get("rows_before", 0)):]
    done, failed = len(mine), sum(r["status"] == "failed" for r in mine)
    total = meta.get("total")
    elapsed = time.time() - float(meta.get("started", time.time()))
    status = row["status"] + (f" ({row['error']})" if row["status"] == "failed" else "")
    parts = [
        f"[sweep] {done}/{total if total else '?'} jobs done ({failed} failed)",
        f"job {row['job']} {status} in {float(row['wall_s']):.1f} s",
        f"elapsed {_clock(elapsed)}",
    ]
    if total and done:
        parts.append(f"ETA {_clock(eta_seconds(mine, elapsed, int(total)))}")
    return " | ".join(parts)


def eta_seconds(rows: Sequence[Mapping[str, Any]], elapsed: float, total: int) -> float:
    """Seconds left: the median of the jobs since the first, times the jobs left.

    The first job pays one-off costs (imports, the cached optimal cost, Ray start-up),
    so it is left out as soon as another job has finished; the median ignores an
    odd slow job; the ratio of elapsed time to the jobs' own time adds the sweep's
    overhead between jobs. Converges after a few jobs.
    """
    walls = [float(r.get("wall_s") or 0.0) for r in rows]
    done = len(walls)
    if not done or done >= total:
        return 0.0
    recent = sorted(walls[1:] if done > 1 else walls)
    median = recent[len(recent) // 2]
    overhead = elapsed / sum(walls) if sum(walls) > 0 else 1.0
    return median * max(overhead, 1.0) * (total - done)


def run_job(
    flat: Mapping[str, Any],
    *,
    sweep_dir: Path,
    job: int,
    overrides: Sequence[str],
    runner: Callable[[Mapping[str, Any]], dict],
) -> dict | None:
    """Run one sweep job, append its row (ok or failed), print the progress.

    Parameters
    ----------
    flat : mapping
        The job's flat config (``output-dir`` set to the job's directory).
    sweep_dir : Path
        Where ``results.csv`` lives.
    job : int
        Hydra job number.
    overrides : sequence of str
        The job's overrides, recorded in the row.
    runner : callable
        Runs a flat config and returns the result dict
        (:func:`fedkmeans.experiment.cli.run_flat`).

    Returns
    -------
    dict or None
        The result, or None when the job failed (the sweep goes on).
    """
    start = time.perf_counter()
    result = None
    try:
        result = runner(flat)
        row = result_row(job, overrides, result, time.perf_counter() - start)
    except Exception as exc:  # noqa: BLE001 - every failure is recorded, the sweep goes on
        row = failure_row(job, overrides, flat, exc, time.perf_counter() - start)
        LOG.error("sweep job %d failed: %s", job, row["error"])
        out = flat.get("output-dir")
        if out:
            with contextlib.suppress(OSError):
                Path(out).mkdir(parents=True, exist_ok=True)
                (Path(out) / ERROR_FILE).write_text(traceback.format_exc())
    rows = append_row(sweep_dir / RESULTS_FILE, row)
    print(progress_line(sweep_dir, rows, row), flush=True)
    return result


def count_jobs(params: Mapping[str, Any], task_overrides: Sequence[str]) -> int | None:
    """Number of jobs the BasicSweeper will launch (None if it cannot be parsed)."""
    try:
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
        from hydra.core.override_parser.overrides_parser import OverridesParser

        merged = [f"{key}={value}" for key, value in params.items()] + list(task_overrides)
        overrides = OverridesParser.create().parse_overrides(merged)
        return len(BasicSweeper.split_arguments(overrides, None)[0])
    except Exception:  # noqa: BLE001 - the count is only for the progress line
        return None


def unread_by_every_job(rows: Sequence[Mapping[str, str]]) -> list[str]:
    """Typed keys that no job of ``rows`` read (every job's ``unread_keys`` lists them).

    A key that counts in some jobs of a sweep is reset in the others; one that counts
    in none is a sweep that does not vary what its command line says (``-m
    privacy.clip-sums=100,200`` at data-point level). Failed jobs read nothing and are
    left out; empty when no job succeeded.
    """
    done = [set((row.get("unread_keys") or "").split()) for row in rows
            if row.get("status") == "ok"]
    return sorted(set.intersection(*done)) if done else []


try:
    from hydra.experimental.callback import Callback as _Callback
except ImportError:  # pragma: no cover
    _Callback = object  # type: ignore[assignment,misc]


class SweepCallback(_Callback):
    """Hydra callback: count the jobs at the start, summarise at the end (multirun only)."""

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        """Write ``sweep.json`` (total jobs, start time, rows already in the table)."""
        sweep_dir = Path(str(config.hydra.sweep.dir)).resolve()
        params = dict(config.hydra.sweeper.get("params") or {})
        total = count_jobs(params, list(config.hydra.overrides.task))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        rows_before = len(read_rows(sweep_dir / RESULTS_FILE))
        (sweep_dir / META_FILE).write_text(json.dumps(
            {"total": total, "started": time.time(), "rows_before": rows_before}
        ))
        print(f"[sweep] {total if total else '?'} jobs -> {sweep_dir / RESULTS_FILE}", flush=True)

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        """Print how many jobs succeeded or failed and the report command."""
        sweep_dir = Path(str(config.hydra.sweep.dir)).resolve()
        meta_path = sweep_dir / META_FILE
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
        rows = read_rows(sweep_dir / RESULTS_FILE)[int(meta.get("rows_before", 0)):]
        failed = [r for r in rows if r["status"] == "failed"]
        unread = unread_by_every_job(rows)
        print(
            f"[sweep] finished: {len(rows) - len(failed)} ok, {len(failed)} failed -> "
            f"{sweep_dir / RESULTS_FILE}\n[sweep] report: "
            f"python -m fedkmeans.experiment.report {sweep_dir}",
            flush=True,
        )
        if unread:
            print(f"[sweep] {', '.join(unread)}: typed, but no job read it (each ran with "
                  "its default; column unread_keys)", file=sys.stderr, flush=True)
        if (failed or unread) and os.environ.get(ALLOW_FAILURES_ENV) != "1":
            why = f"{len(failed)} job(s) failed" if failed else "a typed key did nothing"
            print(f"[sweep] exiting with status 1: {why} (set {ALLOW_FAILURES_ENV}=1 to "
                  "exit 0 anyway)", file=sys.stderr, flush=True)
            sys.exit(1)
