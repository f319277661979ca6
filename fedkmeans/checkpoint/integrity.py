"""Reading a checkpoint back: what is refused, and the words that say so.

A checkpoint is resumed only if its ``state.json`` parses with every field it needs
and each round's ``.npz`` file is the one that was written (present, complete, the
recorded keys and sha256). Everything else is refused with a
:class:`CheckpointMismatchError` (or a subclass) whose message names the file, the
problem, what the checkpoint's ledger already spent (:func:`spent_clause`) and the
next step (:func:`next_step`: move it aside, which keeps the ledger; never delete it).
:class:`fedkmeans.checkpoint.Checkpoint` writes the files and uses these checks when
it opens one.
"""

from __future__ import annotations

import json
import math
import shlex
import time
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from fedkmeans.fingerprint import file_sha256
from fedkmeans.privacy.accountant import PrivacyLedger

__all__ = ["STATE_FILE", "UNKNOWN_SPENT", "CheckpointCorruptError",
           "CheckpointDataMismatchError", "CheckpointMismatchError", "aside_path", "corrupt",
           "load_round", "next_step", "read_state", "round_file_name", "round_files_on_disk",
           "spent_clause", "validate_format"]

STATE_FILE = "state.json"
#: What an unreadable ledger spent, as a clause of an error message.
UNKNOWN_SPENT = "its ledger cannot be read, so the budget it already spent is unknown"


class CheckpointMismatchError(ValueError):
    """The checkpoint in the output directory cannot be resumed by this run.

    Raised as such for a checkpoint of a different configuration; the subclasses
    name the other reasons. Every message names the checkpoint, the epsilon its
    ledger already records when that can be read, and the next step (move the
    checkpoint aside, which keeps its ledger, or use a new output-dir).
    """


class CheckpointDataMismatchError(CheckpointMismatchError):
    """The checkpoint was written for other data, or before checkpoints named their data."""


class CheckpointCorruptError(CheckpointMismatchError):
    """A checkpoint file is unreadable, missing, truncated or not what was written.

    A subclass of :class:`CheckpointMismatchError` rather than a sibling: both mean
    "this run cannot resume that checkpoint" and call for the same next step (move it
    aside, keeping its ledger), so one ``except CheckpointMismatchError`` handles every
    refusal, and it stays a ``ValueError`` like every other bad-input error.
    """


def round_file_name(round_name: str) -> str:
    """The stem of round ``round_name``'s ``.npz`` file (``/`` is not a file name's)."""
    return round_name.replace("/", "_")


def round_files_on_disk(directory: Path) -> list[str]:
    """Names of round ``.npz`` files in ``directory`` (not half-written temporaries)."""
    if not directory.is_dir():
        return []
    return sorted(
        p.name for p in directory.glob("*.npz") if not p.name.endswith(".tmp.npz")
    )


def aside_path(directory: Path) -> Path:
    """A free ``<directory>.<timestamp>[-N]`` next to ``directory``."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = directory.with_name(f"{directory.name}.{stamp}")
    n = 1
    while target.exists():
        target = directory.with_name(f"{directory.name}.{stamp}-{n}")
        n += 1
    return target


def next_step(directory: Path, *, keeps_ledger: bool = True, data: bool = False) -> str:
    """What to do with a checkpoint this run cannot resume (never: delete it)."""
    move = f"mv {shlex.quote(str(directory))} {shlex.quote(str(aside_path(directory)))}"
    kept = " (its ledger stays there as the record of what was released)" if keeps_ledger else ""
    step = (
        f"to start fresh, move the checkpoint aside{kept} and rerun: {move} "
        "(or fedkmeans.checkpoint.Checkpoint.move_aside), or use a new output-dir"
    )
    if data:
        step += "; to resume instead, put the original data back"
    return step


def spent_clause(state: dict[str, Any], delta: float) -> str:
    """The budget the checkpoint's ledger records, as a clause of an error message."""
    non_private = state.get("non_private") or []
    if non_private:
        return (
            f"its ledger records non-private releases ({', '.join(map(str, non_private))}), "
            "so no finite epsilon covers what it already released"
        )
    ledger = state.get("ledger")
    if ledger is None:
        return "its ledger records no release yet"
    try:
        accountant = PrivacyLedger.from_state_dict(ledger)
    except (ValueError, KeyError, TypeError):
        return UNKNOWN_SPENT
    count = len(accountant.releases)
    if not count:
        return "its ledger records no release yet"
    recorded = state.get("delta")
    at = recorded if isinstance(recorded, float) and 0.0 < recorded < 1.0 else delta
    try:
        epsilon = accountant.get_epsilon(at)
    except ValueError:
        return f"its ledger records {count} releases already made"
    eps = "inf" if math.isinf(epsilon) else f"{epsilon:.4g}"
    return f"its ledger records {count} releases already made, epsilon={eps} at delta={at:g}"


def corrupt(
    path: Path, directory: Path, problem: str, spent: str, *, keeps_ledger: bool | None = None
) -> CheckpointCorruptError:
    """The error for a damaged checkpoint file: the file, the problem, the next step."""
    keeps = spent != UNKNOWN_SPENT if keeps_ledger is None else keeps_ledger
    return CheckpointCorruptError(
        f"checkpoint file {path} {problem}, so the checkpoint {directory} cannot be resumed; "
        f"{spent}; {next_step(directory, keeps_ledger=keeps)}"
    )


def read_state(state_path: Path, directory: Path, delta: float) -> dict[str, Any]:
    """The parsed ``state.json`` with its basic fields checked."""
    unknown = UNKNOWN_SPENT
    try:
        state = json.loads(state_path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise corrupt(
            state_path, directory, f"cannot be read ({type(exc).__name__})", unknown
        ) from exc
    except json.JSONDecodeError as exc:
        raise corrupt(
            state_path, directory, "is not valid JSON (truncated or overwritten: "
            f"{exc.msg} at line {exc.lineno})", unknown,
        ) from exc
    if not isinstance(state, dict):
        raise corrupt(state_path, directory, "does not hold a JSON object", unknown)
    problems = []
    if not isinstance(state.get("digest"), str):
        problems.append("'digest'")
    rounds = state.get("rounds")
    if not isinstance(rounds, list) or not all(isinstance(r, str) for r in rounds):
        problems.append("'rounds'")
    non_private = state.get("non_private")
    if not isinstance(non_private, list) or not all(isinstance(s, str) for s in non_private):
        problems.append("'non_private'")
    ledger = state.get("ledger", "missing")
    if ledger is not None:
        try:
            PrivacyLedger.from_state_dict(ledger)
        except (ValueError, KeyError, TypeError):
            problems.append("'ledger'")
    if problems:
        spent = unknown if "'ledger'" in problems else spent_clause(state, delta)
        raise corrupt(
            state_path, directory, f"has a missing or invalid {', '.join(problems)}", spent
        )
    return state


def validate_format(state: dict[str, Any], state_path: Path, directory: Path, spent: str) -> None:
    """The fields of a data-bound (format 2) ``state.json``."""
    problems = []
    if not isinstance(state.get("data_digest"), str):
        problems.append("'data_digest'")
    files = state.get("data_files")
    if not isinstance(files, list) or not all(
        isinstance(f, dict) and isinstance(f.get("path"), str) for f in files
    ):
        problems.append("'data_files'")
    round_files = state.get("round_files")
    if not isinstance(round_files, dict) or not all(
        isinstance(round_files.get(name), dict)
        and isinstance(round_files[name].get("sha256"), str)
        and isinstance(round_files[name].get("bytes"), int)
        and isinstance(round_files[name].get("keys"), list)
        for name in state["rounds"]
    ):
        problems.append("'round_files'")
    if problems:
        raise corrupt(
            state_path, directory, f"has a missing or invalid {', '.join(problems)}", spent
        )


def load_round(
    directory: Path, name: str, record: dict[str, Any], spent: str
) -> dict[str, np.ndarray]:
    """The arrays of round ``name``, checked against what was written."""
    path = directory / f"{round_file_name(name)}.npz"
    if not path.is_file():
        raise corrupt(path, directory, f"(round {name}, listed in {STATE_FILE}) is missing",
                       spent)
    size = path.stat().st_size
    try:
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise ValueError("a single .npy array, not an .npz archive")
        with loaded as npz:
            arrays = {key: npz[key] for key in npz.files}
    except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile, zlib.error) as exc:
        what = (
            f"is truncated ({size} of {record['bytes']} bytes, {type(exc).__name__})"
            if size < record["bytes"]
            else f"is not the .npz archive that was written ({type(exc).__name__})"
        )
        raise corrupt(path, directory, f"(round {name}) {what}", spent) from exc
    missing = sorted(set(record["keys"]) - set(arrays))
    if missing:
        raise corrupt(path, directory, f"(round {name}) lacks key(s) {missing}", spent)
    if file_sha256(path) != record["sha256"]:
        raise corrupt(
            path, directory,
            f"(round {name}) differs from what was written (sha256 {record['sha256'][:12]} "
            "recorded)", spent,
        )
    return arrays
