"""What a run writes: a publishable release, non-private diagnostics, and both together.

A run's output holds two kinds of information that must not be confused:

* ``release.json`` -- **covered by the privacy guarantee**: the centers, k, the
  privacy ledger (every release with its mechanism, sensitivity, noise scale and
  sampling rate), the accountant's epsilon, and the settings that shaped this run
  without secrets (without ``seed`` when the noise was derived from it, without the
  local ``output-dir``, only the ``data.*`` keys its data set reads, and a data file by
  its name: :func:`published_config`). Everything in it is a post-processing of the
  noisy releases, of the server's own data, and of settings the user chose. This is
  the file to publish.
* ``diagnostics.json`` -- **not private**: exact point and client counts, per-round
  timings, rejected replies (node ids, reasons), SecAgg participation, evaluation
  metrics computed on the clients' raw data, and the curious-server report. These
  change between neighbouring datasets (at client level ``num_clients`` differs by
  exactly one), so they are for the operator only: written owner-only (0600).
* ``result.json`` -- both merged, as earlier versions wrote it, with
  ``"publishable": false`` and pointers to the two files above (kept so existing
  scripts, sweeps and reports keep working); owner-only (0600) too.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from fedkmeans.spill_files import write_owner_only

RESULT_FILE = "result.json"
RELEASE_FILE = "release.json"
DIAGNOSTICS_FILE = "diagnostics.json"

#: The only keys of ``result.json`` that ``release.json`` may carry (an allow-list: a
#: key an observer or a plug-in adds is never published), each a public setting, the
#: server's own data, a ledgered release or a post-processing of those.
PUBLISHABLE_KEYS = (
    "algorithm", "seed", "k", "config",   # settings the user chose
    "centers",          # the post-processed noisy releases
    "centers_from",     # which centers came back: the final check's noisy release
    "privacy",          # the ledger and the accountant's epsilon (less its diagnostics)
    "preprocessing",    # the public transform, from the server's data
    "tuning",           # estimates from the noisy estimate round; choices on the server's data
    "check",            # the final private choice's noisy release and its threshold
    "spare_centers",    # FedDP-Init's spare centers, from released eigen-gaps and counts
    "k_selection",      # the elbow on the noisy-weighted server data
)
#: Keys under ``privacy`` that are diagnostics (participation under SecAgg).
DIAGNOSTIC_PRIVACY_KEYS = ("secagg",)
#: Configuration keys never published: a local path, and the seed when it is a secret.
PRIVATE_CONFIG_KEYS = ("output-dir",)

#: Keys each artefact sets for itself.
_OWN_KEYS = ("artefact", "publishable", "notice", "artefacts", "result_path")

RELEASE_NOTICE = (
    "Covered by the privacy guarantee stated in privacy.guarantee: publish this file, "
    "not result.json or diagnostics.json."
)
DIAGNOSTICS_NOTICE = (
    "NOT PRIVATE: exact counts, timings, rejected replies and metrics on the clients' "
    "raw data change between neighbouring datasets. For the operator only; do not "
    "publish."
)


def release_view(result: dict[str, Any], *, seed_is_secret: bool) -> dict[str, Any]:
    """The publishable part of a result: only :data:`PUBLISHABLE_KEYS` (module docstring).

    Parameters
    ----------
    result : dict
        The full result as :func:`fedkmeans.experiment.runner.run_server` builds it.
    seed_is_secret : bool
        True when the noise was derived from ``seed`` (reproducible noise): the seed
        is then left out of the release, since it would give away the noise.

    Returns
    -------
    dict
    """
    private_config = PRIVATE_CONFIG_KEYS + (("seed",) if seed_is_secret else ())
    out: dict[str, Any] = {"artefact": "release", "publishable": True, "notice": RELEASE_NOTICE}
    for key, value in result.items():
        if key not in PUBLISHABLE_KEYS or (key == "seed" and seed_is_secret):
            continue
        if key == "privacy":
            value = {k: v for k, v in value.items() if k not in DIAGNOSTIC_PRIVACY_KEYS}
        if key == "config":
            value = published_config({k: v for k, v in value.items()
                                      if k not in private_config})
        out[key] = value
    return out


#: Configuration keys that name a file: published as the file's name only (an absolute
#: path says where the user keeps it, and nothing about the run).
FILE_CONFIG_KEYS = ("data.path", "data.server-path")


def release_leaves(value: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf of a release (or any JSON value) by its dotted path.

    ``{"check": {"clip": 2.0}, "centers": [[1.0]]}`` gives ``{"check.clip": 2.0,
    "centers#len": 1, "centers[0]#len": 1, "centers[0][0]": 1.0}``: two releases are
    compared field by field (the neighbouring-federation tests and benchmarks).
    """
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(release_leaves(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(value, list):
        out = {f"{prefix}#len": len(value)}
        for i, item in enumerate(value):
            out.update(release_leaves(item, f"{prefix}[{i}]"))
        return out
    return {prefix: value}


def published_config(flat: dict[str, Any]) -> dict[str, Any]:
    """The settings that shaped this run: only the ``data.*`` keys its data set reads.

    Keys of another data set (the mixture's ``data.dim`` in a file run) are left out,
    and a file path is published as the file's name (:data:`FILE_CONFIG_KEYS`).
    """
    from fedkmeans.data.catalog import EVERY_RUN_DATA_KEYS, dataset

    try:
        read = dataset(str(flat.get("data.name", ""))).reads(flat)
    except KeyError:
        read = None
    out = {}
    for key, value in flat.items():
        if key.startswith("data.") and read is not None and key not in read \
                and key not in EVERY_RUN_DATA_KEYS:
            continue
        if key in FILE_CONFIG_KEYS and value:
            value = Path(str(value)).name
        out[key] = value
    return out


def diagnostics_view(result: dict[str, Any]) -> dict[str, Any]:
    """The non-private part of a result: every section not declared publishable.

    Counts, timings, metrics, rejected replies, the attack report, and any section an
    observer or plug-in adds under its own key.
    """
    out: dict[str, Any] = {
        "artefact": "diagnostics", "publishable": False, "notice": DIAGNOSTICS_NOTICE,
        "algorithm": result["algorithm"], "seed": result["seed"],
    }
    out.update({key: value for key, value in result.items()
                if key not in PUBLISHABLE_KEYS and key not in _OWN_KEYS})
    secagg = result.get("privacy", {}).get("secagg")
    if secagg is not None:
        out["secagg"] = secagg
    return out


def json_number(value: float) -> float | str:
    """A number for a result file: ``inf`` (a non-private epsilon) as the string 'inf'."""
    return "inf" if math.isinf(value) else float(value)


def strict_json(value: Any, path: str = "", nulls: dict[str, str] | None = None) -> Any:
    """``value`` with every NaN or infinite float replaced by ``None``.

    JSON has no NaN or Infinity (strict parsers reject Python's extension). Each
    replaced value's dotted path goes to ``nulls`` with the reason.
    """
    if isinstance(value, float) and not math.isfinite(value):
        if nulls is not None:
            nulls[path or "."] = f"not a finite number ({value}): could not be computed"
        return None
    if isinstance(value, dict):
        return {k: strict_json(v, f"{path}.{k}" if path else str(k), nulls)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v, f"{path}[{i}]", nulls) for i, v in enumerate(value)]
    return value


def _dump(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, allow_nan=False)


def write_artefacts(output_dir: Path, result: dict[str, Any], *, seed_is_secret: bool) -> Path:
    """Write ``release.json``, ``diagnostics.json`` and ``result.json``; return the last.

    ``result`` gains ``publishable: false`` and an ``artefacts`` map of the paths.
    Values that could not be computed (NaN, infinite) are written as ``null``, and
    ``null_reasons`` maps each one's dotted path to why: every file is strict JSON.
    ``release.json`` is written with the process's usual mode (it is the file to
    publish); ``diagnostics.json`` and ``result.json`` owner-only (0600).
    """
    nulls: dict[str, str] = {}
    clean = strict_json(result, "", nulls)
    result.clear()
    result.update(clean)
    if nulls:
        result["null_reasons"] = nulls
    output_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "release": output_dir / RELEASE_FILE,
        "diagnostics": output_dir / DIAGNOSTICS_FILE,
        "result": output_dir / RESULT_FILE,
    }
    result["publishable"] = False
    result["artefacts"] = {name: str(path) for name, path in paths.items()}
    paths["release"].write_text(_dump(release_view(result, seed_is_secret=seed_is_secret)))
    # not publishable (exact counts, raw-data metrics, the curious report): owner-only
    write_owner_only(paths["diagnostics"], _dump(diagnostics_view(result)))
    write_owner_only(paths["result"], _dump(result))
    return paths["result"]
