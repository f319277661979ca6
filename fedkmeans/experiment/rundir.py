"""One run, one output directory: a lock while a run writes, and no overwriting.

Two runs must never share an output directory by accident: the second would
overwrite the first's ``result.json`` (both reporting success) or resume from a
checkpoint the first is still writing. So:

* default directories are unique (a timestamp plus a short random id), chosen in one
  place, :func:`default_output_dir` (Hydra's ``hydra.run.dir`` is its
  ``${fedkmeans_run_dir:}`` resolver, registered by :mod:`fedkmeans.experiment`);
* a run holds ``<output-dir>/run.lock`` (its PID, created with ``O_EXCL``) while it
  runs; another run finding a live lock stops with :class:`OutputDirError` before it
  touches anything (a lock left by a dead process is taken over);
* a directory that holds another configuration's ``result.json`` is refused; the same
  configuration may come back to it (that is a resume from its checkpoint);
* a run that fails leaves no directory it made and wrote nothing to
  (:func:`claim_output_dir`; the command line also removes Hydra's run directory when
  it holds only Hydra's own files, :func:`remove_unused_run_dir`): a bad key, a bad
  file or a NaN in the data leaves nothing half-made behind. A directory with a
  checkpoint or a log in it is kept (a resume, or the evidence).
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from fedkmeans.experiment.config import ConfigError, ExperimentConfig, parse_config
from fedkmeans.fingerprint import config_digest

__all__ = ["LOCK_FILE", "OutputDirError", "check_output_dir", "claim_output_dir",
           "default_output_dir", "remove_unused_run_dir"]

LOCK_FILE = "run.lock"


def default_output_dir(run_id: int | str | None = None, *, uid: str | None = None) -> Path:
    """Where a run writes when ``output-dir`` is not set: the one rule, for every entry.

    Parameters
    ----------
    run_id : int or str, optional
        Given by a ServerApp that Flower started without ``output-dir`` (``flwr run``):
        ``~/.fedkmeans/runs/<run id>`` (the SuperLink's working directory means
        nothing to the user).
    uid : str, optional
        Without ``run_id`` (the command line, through Hydra's ``hydra.run.dir``, and
        the Python API): ``outputs/<YYYY-MM-DD>/<HH-MM-SS>-<uid>`` under the current
        directory; ``uid`` defaults to 6 fresh random hex digits, so two runs started
        in the same second never share a directory.

    Returns
    -------
    Path
        Absolute.
    """
    if run_id is not None:
        return Path.home() / ".fedkmeans" / "runs" / str(run_id)
    return (Path.cwd().resolve() / "outputs" / time.strftime("%Y-%m-%d")
            / f"{time.strftime('%H-%M-%S')}-{uid or uuid.uuid4().hex[:6]}")


class OutputDirError(ConfigError):
    """The output directory belongs to another run."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _holder(lock: Path) -> int | None:
    """PID of the live process holding ``lock``, or None (no lock, or a stale one)."""
    try:
        pid = int(lock.read_text().strip() or "0")
    except (FileNotFoundError, ValueError):
        return None
    return pid if pid > 0 and pid != os.getpid() and _pid_alive(pid) else None


def check_output_dir(output_dir: Path, config: ExperimentConfig) -> None:
    """Raise :class:`OutputDirError` if another run uses or used ``output_dir``.

    Parameters
    ----------
    output_dir : Path
    config : ExperimentConfig
        The run about to start (its digest is compared with an existing result's).
    """
    pid = _holder(output_dir / LOCK_FILE)
    if pid is not None:
        raise OutputDirError(
            f"config key 'output-dir' names {output_dir}, which run PID {pid} is writing "
            "right now; choose another output-dir (or leave it empty for a unique one)")
    result = output_dir / "result.json"
    if not result.exists():
        return
    try:
        theirs = config_digest(parse_config(json.loads(result.read_text())["config"]))
    except (ValueError, KeyError, TypeError):
        theirs = None
    if theirs != config_digest(config):
        raise OutputDirError(
            f"config key 'output-dir' names {output_dir}, which holds the result of "
            "another configuration; choose another output-dir (only the same "
            "configuration may resume there)")


@contextmanager
def claim_output_dir(output_dir: Path, config: ExperimentConfig) -> Iterator[None]:
    """Hold ``output_dir`` for this process while the block runs.

    Raises
    ------
    OutputDirError
        Another live process holds it, or it holds another configuration's result.
    """
    made = [d for d in (output_dir, *output_dir.parents) if not d.exists()]
    output_dir.mkdir(parents=True, exist_ok=True)
    try:
        check_output_dir(output_dir, config)
        with _locked(output_dir):
            yield
    except BaseException:
        _remove_empty(made)  # nothing was written: leave no directory behind
        raise


@contextmanager
def _locked(output_dir: Path) -> Iterator[None]:
    """Hold ``output_dir/run.lock`` (this PID) while the block runs."""
    lock = output_dir / LOCK_FILE
    mine = output_dir / f"{LOCK_FILE}.{os.getpid()}"
    mine.write_text(str(os.getpid()))
    try:
        try:
            os.link(mine, lock)  # atomic, with the PID already in it
        except FileExistsError:
            pid = _holder(lock)
            if pid is not None:
                raise OutputDirError(
                    f"config key 'output-dir' names {output_dir}, which run PID {pid} is "
                    "writing right now; choose another output-dir") from None
            os.replace(mine, lock)  # a dead run's lock: take it over
    finally:
        mine.unlink(missing_ok=True)
    try:
        yield
    finally:
        if lock.exists() and lock.read_text().strip() == str(os.getpid()):
            lock.unlink()


def _remove_empty(directories: list[Path]) -> None:
    """Remove each of ``directories`` (innermost first) that is empty; stop at one that is not."""
    for directory in directories:
        try:
            directory.rmdir()
        except OSError:  # not empty (or gone): it and its parents stay
            return


def remove_unused_run_dir(run_dir: Path, own_files: Sequence[str], top: Path) -> bool:
    """Remove a failed run's ``run_dir`` if it holds only ``own_files``, and empty parents.

    Hydra makes its run directory (``outputs/<date>/<time>-<id>``) and writes its config
    copy (``.hydra``) and the job log there before the run starts; a run that fails
    before writing anything of its own leaves only those.

    Parameters
    ----------
    run_dir : Path
        The run's directory.
    own_files : sequence of str
        Names in ``run_dir`` that do not count as the run's output (Hydra's).
    top : Path
        Parents of ``run_dir`` that become empty are removed up to, not including,
        ``top`` (none if ``run_dir`` is not below ``top``).

    Returns
    -------
    bool
        True if ``run_dir`` was removed.
    """
    try:
        if any(p.name not in own_files for p in run_dir.iterdir()):
            return False
    except FileNotFoundError:
        return False
    for name in own_files:
        path = run_dir / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    run_dir.rmdir()
    top = top.resolve()
    parents = [p for p in run_dir.resolve().parents if top in p.parents]
    _remove_empty(parents)
    return True
