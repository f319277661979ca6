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

It is not publishable: its directory is owner-only (0700) and every file in it 0600
(the rounds' outputs, the ledger, the resolved plan, and the sha256 of the data files,
which identifies the private data).
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedkmeans.checkpoint.integrity import (
    STATE_FILE,
    CheckpointCorruptError,
    CheckpointDataMismatchError,
    CheckpointMismatchError,
    aside_path,
    corrupt,
    load_round,
    next_step,
    read_state,
    round_file_name,
    round_files_on_disk,
    spent_clause,
    validate_format,
)
from fedkmeans.data.catalog import RunConfig
from fedkmeans.fingerprint import (
    config_digest,
    data_changes,
    data_digest,
    data_fingerprint,
    describe_data,
    file_sha256,
)
from fedkmeans.privacy.accountant import PrivacyLedger
from fedkmeans.spill_files import owner_only, private_dir, write_owner_only

__all__ = ["PLAN_FREE_ROUNDS", "STATE_FILE", "STATE_FORMAT", "Checkpoint",
           "CheckpointCorruptError", "CheckpointDataMismatchError", "CheckpointMismatchError"]

LOG = logging.getLogger(__name__)

#: Version of ``state.json``; 2 = bound to the data, with a record of every round file.
STATE_FORMAT = 2
#: Rounds that run before the plan exists (their outputs feed it): a checkpoint holding
#: only these and no plan is resumed by resolving the plan again from them.
PLAN_FREE_ROUNDS = ("estimate",)


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
        ``PrivacyLedger.state_dict()`` after the last finished round.
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
    def open(cls, directory: Path, config: RunConfig) -> Checkpoint:
        """Load the checkpoint in ``directory`` or start an empty one.

        Parameters
        ----------
        directory : Path
            ``<output-dir>/checkpoint``.
        config : RunConfig
            The run about to start: its whole config (the harness's experiment config),
            whose flat keys, data settings and ``privacy.delta`` bind the checkpoint.

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
            orphans = round_files_on_disk(directory)
            if orphans:
                raise corrupt(
                    state_path, directory,
                    f"is missing but the folder holds round files ({', '.join(orphans)})",
                    "its ledger (the record of what was already released) is lost",
                    keeps_ledger=False,
                )
            return cls(directory, digest, data=fingerprint, delta=delta)
        state = read_state(state_path, directory, delta)
        spent = spent_clause(state, delta)
        if state["digest"] != digest:
            raise CheckpointMismatchError(
                f"output-dir {directory.parent} holds a checkpoint of a different "
                f"configuration ({directory}); {spent}; {next_step(directory)}"
            )
        if "data_digest" not in state:
            raise CheckpointDataMismatchError(
                f"checkpoint {directory} predates data binding: its {STATE_FILE} records "
                "no digest of the data, so this run cannot check that "
                f"{describe_data(fingerprint)} is the data its rounds were computed on; "
                f"{spent}; {next_step(directory)}"
            )
        validate_format(state, state_path, directory, spent)
        if state["data_digest"] != data_digest(fingerprint):
            raise CheckpointDataMismatchError(
                f"checkpoint {directory} was written for other data: "
                f"{data_changes(state, fingerprint)}; resuming would mix releases about two "
                f"data sets; {spent} on the old data; {next_step(directory, data=True)}"
            )
        plan = state.get("plan")
        unplanned = [name for name in state["rounds"] if name not in PLAN_FREE_ROUNDS]
        if plan is None and unplanned:
            raise CheckpointMismatchError(
                f"checkpoint {directory} holds rounds {', '.join(unplanned)} but not the plan "
                "they were calibrated for (written before plans were stored), so this run "
                f"cannot resume them without risking the target epsilon; {spent}; "
                f"{next_step(directory)}"
            )
        rounds = {
            name: load_round(directory, name, state["round_files"][name], spent)
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
        target = aside_path(directory)
        directory.rename(target)
        LOG.info("moved checkpoint %s aside to %s (its ledger is kept there)", directory, target)
        return target

    def restore(self, accountant: PrivacyLedger) -> None:
        """Put the checkpointed ledger into ``accountant`` (which must be empty)."""
        if self.ledger is not None:
            for release in PrivacyLedger.from_state_dict(self.ledger).releases:
                accountant.record(release)

    def save(
        self,
        name: str,
        outputs: dict[str, np.ndarray],
        accountant: PrivacyLedger,
        non_private: list[str],
    ) -> None:
        """Record round ``name`` and the ledger; files are replaced atomically."""
        private_dir(self.directory, exist_ok=True)
        self.rounds[name] = outputs
        self.ledger = accountant.state_dict()
        self.non_private = list(non_private)
        array_path = self.directory / f"{round_file_name(name)}.npz"
        tmp = array_path.with_suffix(".tmp.npz")
        np.savez(tmp, **outputs)
        owner_only(tmp)  # a round's outputs and the ledger: for this run only
        self.round_files[name] = {
            "sha256": file_sha256(tmp),
            "bytes": tmp.stat().st_size,
            "keys": sorted(outputs),
        }
        os.replace(tmp, array_path)
        self._write_state()

    def save_plan(self, plan: dict[str, Any]) -> None:
        """Record the run's resolved plan (JSON-serialisable) before its protocol rounds."""
        private_dir(self.directory, exist_ok=True)
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
        # the state holds the data files' sha256 and the plan: owner-only (0600)
        write_owner_only(self.directory / STATE_FILE, json.dumps(state))
