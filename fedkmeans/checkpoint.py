"""Server checkpoints: the outputs of every finished round and the privacy ledger.

After each round the server writes what that round produced (the noisy releases and
the values derived from them, e.g. the basis V or the centers) together with the
accountant's ledger. A run restarted with the same configuration, the same data and
the same output directory skips the finished rounds — it neither queries the clients
again nor records their releases twice — so the spent epsilon is that of one run. A
finished round is restored exactly as it was released; the rounds still to come draw
fresh secret noise (with ``privacy.reproducible-noise`` each round's noise comes from
its own seed path, so the result is identical to an uninterrupted run).

A checkpoint is bound to

* the configuration (:func:`fedkmeans.fingerprint.config_digest`), and
* the data (:func:`fedkmeans.fingerprint.data_fingerprint`): the sha256 of every
  data file the server can read (``data.path``), the parameters of generated data
  (the ``data.*`` keys and the seed) and the name and version of the package a real
  data set comes from. The data files of deployment nodes (their own ``data-path``)
  are not visible to the server and are not part of it.

A checkpoint that cannot be resumed — another configuration, other data, written
before data binding, or a damaged file — is refused with a
:class:`CheckpointMismatchError` (or a subclass) that names the checkpoint, what its
ledger already spent, and the next step: move it aside (``mv`` or
:meth:`Checkpoint.move_aside`), which keeps the record of the budget already spent.
Never delete a checkpoint: its ledger is the only record of what was released.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shlex
import time
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedkmeans.config import ExperimentConfig
from fedkmeans.fingerprint import (
    config_digest,
    data_changes,
    data_digest,
    data_fingerprint,
    describe_data,
    file_sha256,
)
from fedkmeans.privacy.accountant import PrivacyAccountant

LOG = logging.getLogger(__name__)

STATE_FILE = "state.json"
#: Version of ``state.json``; 2 = bound to the data, with a record of every round file.
STATE_FORMAT = 2
#: Rounds that run before the plan exists (their outputs feed it): a checkpoint holding
#: only these and no plan is resumed by resolving the plan again from them.
PLAN_FREE_ROUNDS = ("estimate",)
_UNKNOWN = "its ledger cannot be read, so the budget it already spent is unknown"


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


@dataclass
class Checkpoint:
    """Finished rounds of one run, stored under ``directory``.

    Attributes
    ----------
    directory : Path
    digest : str
        :func:`config_digest` of the run's configuration.
    rounds : dict of str to dict of str to ndarray
        Outputs of every finished round, in order.
    ledger : dict
        ``PrivacyAccountant.state_dict()`` after the last finished round.
    non_private : list of str
        Non-private releases made so far.
    data : dict
        :func:`data_fingerprint` of the run's data.
    delta : float or None
        The run's delta (to state the spent epsilon when the checkpoint is refused).
    round_files : dict of str to dict
        Per round: ``sha256``, ``bytes`` and ``keys`` of its ``.npz`` file as written.
    plan : dict or None
        The plan the run resolved before its protocol rounds (:meth:`save_plan`): the
        resolved flat configuration, the tuning record and the calibrated releases. A
        resume reuses it, so every round is calibrated for the same plan.
    """

    directory: Path
    digest: str
    rounds: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    ledger: dict | None = None
    non_private: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    delta: float | None = None
    round_files: dict[str, dict[str, Any]] = field(default_factory=dict)
    plan: dict[str, Any] | None = None

    @classmethod
    def open(cls, directory: Path, config: ExperimentConfig) -> Checkpoint:
        """Load the checkpoint in ``directory`` or start an empty one.

        Parameters
        ----------
        directory : Path
            ``<output-dir>/checkpoint``.
        config : ExperimentConfig
            The run about to start.

        Returns
        -------
        Checkpoint

        Raises
        ------
        CheckpointMismatchError
            A checkpoint of a different configuration is there.
        CheckpointDataMismatchError
            It was written for other data (a data file changed, a package version
            changed) or before checkpoints recorded their data.
        CheckpointCorruptError
            ``state.json`` or a round's ``.npz`` file is unreadable, missing,
            truncated or not what was written.
        """
        directory = Path(directory)
        digest = config_digest(config)
        fingerprint = data_fingerprint(config)
        delta = config.privacy.delta
        state_path = directory / STATE_FILE
        if not state_path.exists():
            orphans = _round_files_on_disk(directory)
            if orphans:
                raise _corrupt(
                    state_path, directory,
                    f"is missing but the folder holds round files ({', '.join(orphans)})",
                    "its ledger (the record of what was already released) is lost",
                    keeps_ledger=False,
                )
            return cls(directory, digest, data=fingerprint, delta=delta)
        state = _read_state(state_path, directory, delta)
        spent = _spent(state, delta)
        if state["digest"] != digest:
            raise CheckpointMismatchError(
                f"output-dir {directory.parent} holds a checkpoint of a different "
                f"configuration ({directory}); {spent}; {_next_step(directory)}"
            )
        if "data_digest" not in state:
            raise CheckpointDataMismatchError(
                f"checkpoint {directory} predates data binding: its {STATE_FILE} records "
                "no digest of the data, so this run cannot check that "
                f"{describe_data(fingerprint)} is the data its rounds were computed on; "
                f"{spent}; {_next_step(directory)}"
            )
        _validate_format(state, state_path, directory, spent)
        if state["data_digest"] != data_digest(fingerprint):
            raise CheckpointDataMismatchError(
                f"checkpoint {directory} was written for other data: "
                f"{data_changes(state, fingerprint)}; resuming would mix releases about two "
                f"data sets; {spent} on the old data; {_next_step(directory, data=True)}"
            )
        plan = state.get("plan")
        unplanned = [name for name in state["rounds"] if name not in PLAN_FREE_ROUNDS]
        if plan is None and unplanned:
            raise CheckpointMismatchError(
                f"checkpoint {directory} holds rounds {', '.join(unplanned)} but not the plan "
                "they were calibrated for (written before plans were stored), so this run "
                f"cannot resume them without risking the target epsilon; {spent}; "
                f"{_next_step(directory)}"
            )
        rounds = {
            name: _load_round(directory, name, state["round_files"][name], spent)
            for name in state["rounds"]
        }
        if rounds:
            LOG.info("resuming from checkpoint: rounds %s already done", ", ".join(rounds))
        return cls(
            directory, digest, rounds, state["ledger"], state["non_private"],
            data=fingerprint, delta=delta, round_files=dict(state["round_files"]), plan=plan,
        )

    @staticmethod
    def move_aside(directory: Path) -> Path:
        """Rename the checkpoint ``directory`` to ``<directory>.<timestamp>``.

        The moved folder keeps its ledger (the record of the budget already spent);
        the next run in the same output-dir starts a fresh checkpoint.

        Parameters
        ----------
        directory : Path
            ``<output-dir>/checkpoint``.

        Returns
        -------
        Path
            Where it is now (``checkpoint.YYYYmmdd-HHMMSS``, with ``-N`` appended if
            that name is taken).
        """
        directory = Path(directory)
        target = _aside_path(directory)
        directory.rename(target)
        LOG.info("moved checkpoint %s aside to %s (its ledger is kept there)", directory, target)
        return target

    def restore(self, accountant: PrivacyAccountant) -> None:
        """Put the checkpointed ledger into ``accountant`` (which must be empty)."""
        if self.ledger is not None:
            for release in PrivacyAccountant.from_state_dict(self.ledger).releases:
                accountant.record(release)

    def save(
        self,
        name: str,
        outputs: dict[str, np.ndarray],
        accountant: PrivacyAccountant,
        non_private: list[str],
    ) -> None:
        """Record round ``name`` and the ledger; files are replaced atomically."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.rounds[name] = outputs
        self.ledger = accountant.state_dict()
        self.non_private = list(non_private)
        array_path = self.directory / f"{_file_name(name)}.npz"
        tmp = array_path.with_suffix(".tmp.npz")
        np.savez(tmp, **outputs)
        self.round_files[name] = {
            "sha256": file_sha256(tmp),
            "bytes": tmp.stat().st_size,
            "keys": sorted(outputs),
        }
        os.replace(tmp, array_path)
        self._write_state()

    def save_plan(self, plan: dict[str, Any]) -> None:
        """Record the run's resolved plan (JSON-serialisable) before its protocol rounds."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.plan = plan
        self._write_state()

    def _write_state(self) -> None:
        state = {
            "format": STATE_FORMAT,
            "digest": self.digest,
            "data_digest": data_digest(self.data),
            "data_files": self.data.get("files", []),
            "data_packages": self.data.get("packages", []),
            "delta": self.delta,
            "rounds": list(self.rounds),
            "round_files": self.round_files,
            "ledger": self.ledger,
            "non_private": self.non_private,
            "plan": self.plan,
        }
        tmp_state = self.directory / (STATE_FILE + ".tmp")
        tmp_state.write_text(json.dumps(state))
        os.replace(tmp_state, self.directory / STATE_FILE)


def _file_name(round_name: str) -> str:
    return round_name.replace("/", "_")


def _round_files_on_disk(directory: Path) -> list[str]:
    """Names of round ``.npz`` files in ``directory`` (not half-written temporaries)."""
    if not directory.is_dir():
        return []
    return sorted(
        p.name for p in directory.glob("*.npz") if not p.name.endswith(".tmp.npz")
    )


def _aside_path(directory: Path) -> Path:
    """A free ``<directory>.<timestamp>[-N]`` next to ``directory``."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = directory.with_name(f"{directory.name}.{stamp}")
    n = 1
    while target.exists():
        target = directory.with_name(f"{directory.name}.{stamp}-{n}")
        n += 1
    return target


def _next_step(directory: Path, *, keeps_ledger: bool = True, data: bool = False) -> str:
    """What to do with a checkpoint this run cannot resume (never: delete it)."""
    move = f"mv {shlex.quote(str(directory))} {shlex.quote(str(_aside_path(directory)))}"
    kept = " (its ledger stays there as the record of what was released)" if keeps_ledger else ""
    step = (
        f"to start fresh, move the checkpoint aside{kept} and rerun: {move} "
        "(or fedkmeans.checkpoint.Checkpoint.move_aside), or use a new output-dir"
    )
    if data:
        step += "; to resume instead, put the original data back"
    return step


def _spent(state: dict[str, Any], delta: float) -> str:
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
        accountant = PrivacyAccountant.from_state_dict(ledger)
    except (ValueError, KeyError, TypeError):
        return _UNKNOWN
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


def _corrupt(
    path: Path, directory: Path, problem: str, spent: str, *, keeps_ledger: bool | None = None
) -> CheckpointCorruptError:
    """The error for a damaged checkpoint file: the file, the problem, the next step."""
    keeps = spent != _UNKNOWN if keeps_ledger is None else keeps_ledger
    return CheckpointCorruptError(
        f"checkpoint file {path} {problem}, so the checkpoint {directory} cannot be resumed; "
        f"{spent}; {_next_step(directory, keeps_ledger=keeps)}"
    )


def _read_state(state_path: Path, directory: Path, delta: float) -> dict[str, Any]:
    """The parsed ``state.json`` with its basic fields checked."""
    unknown = _UNKNOWN
    try:
        state = json.loads(state_path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise _corrupt(
            state_path, directory, f"cannot be read ({type(exc).__name__})", unknown
        ) from exc
    except json.JSONDecodeError as exc:
        raise _corrupt(
            state_path, directory, "is not valid JSON (truncated or overwritten: "
            f"{exc.msg} at line {exc.lineno})", unknown,
        ) from exc
    if not isinstance(state, dict):
        raise _corrupt(state_path, directory, "does not hold a JSON object", unknown)
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
            PrivacyAccountant.from_state_dict(ledger)
        except (ValueError, KeyError, TypeError):
            problems.append("'ledger'")
    if problems:
        spent = unknown if "'ledger'" in problems else _spent(state, delta)
        raise _corrupt(
            state_path, directory, f"has a missing or invalid {', '.join(problems)}", spent
        )
    return state


def _validate_format(state: dict[str, Any], state_path: Path, directory: Path, spent: str) -> None:
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
        raise _corrupt(
            state_path, directory, f"has a missing or invalid {', '.join(problems)}", spent
        )


def _load_round(
    directory: Path, name: str, record: dict[str, Any], spent: str
) -> dict[str, np.ndarray]:
    """The arrays of round ``name``, checked against what was written."""
    path = directory / f"{_file_name(name)}.npz"
    if not path.is_file():
        raise _corrupt(path, directory, f"(round {name}, listed in {STATE_FILE}) is missing",
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
        raise _corrupt(path, directory, f"(round {name}) {what}", spent) from exc
    missing = sorted(set(record["keys"]) - set(arrays))
    if missing:
        raise _corrupt(path, directory, f"(round {name}) lacks key(s) {missing}", spent)
    if file_sha256(path) != record["sha256"]:
        raise _corrupt(
            path, directory,
            f"(round {name}) differs from what was written (sha256 {record['sha256'][:12]} "
            "recorded)", spent,
        )
    return arrays
