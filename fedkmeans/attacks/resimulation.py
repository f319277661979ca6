"""The re-simulation attack: an analyst replays the protocol from what a run published.

The DP adversary knows every client but the target. Given a run's ``release.json``
(centers, ledger, configuration and, unless it is secret, the seed), the analyst runs
the same code with the same configuration on each candidate world -- with and
without the target -- and looks for the candidate whose centers equal the published
ones **bit for bit**. If the noise and the client sampling were functions of the
published seed (earlier versions), the true world reproduces the output exactly and
the attack wins every time, whatever epsilon says. With secret noise
(:mod:`fedkmeans.privacy.randomness`) no candidate reproduces it.

:func:`resimulate` is the analyst's move; :func:`attack_trials` plays the whole game
on two ``.npz`` worlds (used by ``benchmarks/seed_attack.py`` and the tests).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from fedkmeans.data.npz import save_npz
from fedkmeans.experiment.cli import run_flat

__all__ = ["attack_trials", "neighbouring_worlds", "resimulate"]


def resimulate(
    release: Mapping, worlds: Mapping[str, Path], workdir: Path, *, assumed_seed: int | None = None
) -> dict[str, bool]:
    """Replay the published configuration on each candidate world.

    Parameters
    ----------
    release : mapping
        The content of a run's ``release.json``.
    worlds : mapping of str to Path
        Candidate data files (``.npz``), by name. Each replaces ``data.path``; the
        file is copied to the published path when that path is given, so a path in
        the configuration cannot tell the worlds apart.
    workdir : Path
        Fresh directory for the analyst's runs (never the victim's output directory:
        a checkpoint there would be resumed instead of recomputed).
    assumed_seed : int, optional
        The seed to use when ``release.json`` does not publish one.

    Returns
    -------
    dict of str to bool
        Per world: whether its replay gives the published centers bit for bit.
    """
    config = dict(release["config"])
    if "seed" in release.get("config", {}) or "seed" in release:
        config["seed"] = release.get("seed", config.get("seed"))
    elif assumed_seed is not None:
        config["seed"] = assumed_seed
    published = np.asarray(release["centers"], dtype=np.float64)
    out = {}
    for name, path in worlds.items():
        target = Path(workdir) / name
        target.mkdir(parents=True, exist_ok=True)
        data = target / Path(path).name
        shutil.copyfile(path, data)
        replay = run_flat({**config, "data.path": str(data),
                           "output-dir": str(target / "out")})
        out[name] = bool(np.array_equal(np.asarray(replay["centers"]), published))
    return out


def attack_trials(
    flat: Mapping, worlds: Mapping[str, Path], workdir: Path, tries: int,
    rng: np.random.Generator, *, analyst_knows_seed: bool = False,
) -> dict:
    """Play the re-simulation game ``tries`` times.

    Each try runs the experiment ``flat`` on a world drawn by ``rng``, then lets the
    analyst :func:`resimulate` both worlds from the run's ``release.json``.

    Parameters
    ----------
    flat : mapping
        The experiment's flat configuration (``data.name = npz``).
    worlds : mapping of str to Path
        Exactly two neighbouring data files.
    workdir : Path
    tries : int
    rng : numpy.random.Generator
        Picks the true world (the game's coin, not the run's noise).
    analyst_knows_seed : bool
        Give the analyst the run's seed even when ``release.json`` omits it (the
        control: the threat earlier versions had, where the seed was published).

    Returns
    -------
    dict
        ``tries``, ``bit_equal_matches`` (replays equal to the release),
        ``correct_guesses`` (tries where exactly the true world matched), and the
        noise notice of the runs.
    """
    names = list(worlds)
    if len(names) != 2:
        raise ValueError(f"worlds must name exactly two data files, got {names}")
    matches = correct = 0
    notice = ""
    for t in range(tries):
        truth = names[int(rng.integers(2))]
        run_dir = Path(workdir) / f"try-{t}"
        victim = run_dir / "victim"
        victim.mkdir(parents=True, exist_ok=True)
        data = victim / "data.npz"
        shutil.copyfile(worlds[truth], data)
        result = run_flat({**flat, "data.path": str(data), "output-dir": str(victim / "out")})
        release = json.loads(Path(result["artefacts"]["release"]).read_text())
        notice = release["privacy"]["noise"]["notice"]
        seed = int(flat.get("seed", 0)) if analyst_knows_seed else None
        hits = resimulate(release, worlds, run_dir / "analyst", assumed_seed=seed)
        matches += sum(hits.values())
        correct += int(hits[truth] and sum(hits.values()) == 1)
    return {"tries": tries, "bit_equal_matches": matches, "correct_guesses": correct,
            "noise": notice}


def neighbouring_worlds(directory: Path, level: str, seed: int = 0) -> dict[str, Path]:
    """Write two neighbouring ``.npz`` worlds of a small federation; return their paths.

    12 clients x 40 points around 4 centers in d = 8, 60 server points. Data-point
    level: ``in`` has one extra point of client 0. Client level: ``in`` has client 11,
    ``out`` does not.

    Returns
    -------
    dict of str to Path
        ``{"in": ..., "out": ...}``, written as ``<level>-<world>.npz`` in ``directory``.
    """
    rng = np.random.default_rng(seed)
    centers = rng.normal(0.0, 1.5, size=(4, 8))
    labels = rng.integers(4, size=12 * 40)
    x = centers[labels] + rng.normal(0.0, 0.5, size=(labels.size, 8))
    client = np.repeat(np.arange(12), 40)
    server_x = centers[rng.integers(4, size=60)] + rng.normal(0.0, 0.5, size=(60, 8))
    if level == "datapoint":  # the target: one extra point of client 0
        extra = centers[:1] + rng.normal(0.0, 0.5, size=(1, 8))
        worlds = {"in": (np.vstack([x, extra]), np.append(client, 0)), "out": (x, client)}
    else:  # the target: client 11 with all its points
        keep = client != 11
        worlds = {"in": (x, client), "out": (x[keep], client[keep])}
    paths = {}
    for name, (points, ids) in worlds.items():
        path = directory / f"{level}-{name}.npz"
        save_npz(path, x=points, client=ids, server_x=server_x)
        paths[name] = path
    return paths
