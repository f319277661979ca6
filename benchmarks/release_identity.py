"""Release identity: the same ``release.json``, byte for byte, on a base revision and here.

    python benchmarks/release_identity.py [--base 76cce30] [--only NAME ...]

A restructuring must not change what a run publishes. With
``privacy.reproducible-noise = true`` the noise and the client sampling are functions
of the seed, so a run's ``release.json`` is a deterministic function of its config and
its code. Every configuration of :data:`CONFIGS` (both privacy levels, SecAgg at both,
client sampling, the baselines, a run interrupted and resumed from its checkpoint,
the ``auto`` settings, both engines) is run once with the base revision's package
(checked out by ``git worktree add --detach`` into a temporary directory) and once with
this tree's, each in its own interpreter with ``PYTHONPATH`` pointing at that tree, and
the two ``release.json`` files are compared byte for byte (their SHA-256).

SecAgg+ noise shares are drawn by the ClientApp from the OS CSPRNG whatever the config
(docs/secagg.md), so the SecAgg+ configurations seed them in the benchmark's process
(:data:`SEEDED_SHARES`, as ``tests/harness/test_secagg.py`` does; the in-process engine runs
the nodes there), and one control keeps the CSPRNG shares: it must differ, which shows
the comparison can fail.

Nothing is stripped before the comparison (:data:`STRIPPED` is empty):
``release.json`` holds no output path, host, time or timing, so the raw bytes are
compared. The results go to ``docs/results/release-identity.{md,csv}``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "results"
DEFAULT_BASE = "76cce30"

#: Top-level keys of release.json removed before hashing because they are legitimately
#: run-specific; none is (no path, host or time is published).
STRIPPED: tuple[str, ...] = ()

#: The paper's hand settings (``tuning=none``) on a 12-client, 8-d mixture: about a
#: second per in-process run.
SMALL: dict[str, object] = {
    "privacy.split": "0.2,0.2,0.45,0.15", "privacy.lloyds-steps": 0,
    "privacy.max-points-per-client": 40, "privacy.data-radius": 4.0,
    "privacy.clip-covariance": 6050.0, "privacy.clip-histogram": 50.0,
    "privacy.clip-sums": 550.0, "privacy.clip-counts": 50.0,
    "privacy.check-share": 0.0, "privacy.extra-centers": 0,
    "data.dim": 8, "data.components": 4, "k": 4, "data.num-clients": 12,
    "data.points-per-client": 40, "data.server-points-per-component": 10,
    "data.server-uniform-points": 10, "federation.engine": "inprocess",
    "federation.num-nodes": 3, "optimal-cost": "skip", "privacy.reproducible-noise": True,
}
#: The hand settings that ``auto`` replaces (the defaults are ``auto``).
HAND_KEYS = ("privacy.split", "privacy.lloyds-steps", "privacy.max-points-per-client",
             "privacy.data-radius", "privacy.clip-covariance", "privacy.clip-histogram",
             "privacy.clip-sums", "privacy.clip-counts", "privacy.check-share",
             "privacy.extra-centers")
CLIENT = {"privacy.level": "client", "privacy.epsilon": 3.0}
SECAGG = {"privacy.aggregation": "secagg", "privacy.count-noise": "gaussian"}
LLOYDS = {"privacy.lloyds-steps": 2, "privacy.split": "0.2,0.2,0.3,0.3"}

#: name -> (what it exercises, flat overrides of SMALL). ``resume`` is interrupted;
#: the names in :data:`SEEDED_SHARES` run with seeded SecAgg noise shares.
CONFIGS: dict[str, tuple[str, dict[str, object]]] = {
    "datapoint": ("FedDP-KMeans, data-point level, eps 1, hand settings", {}),
    "datapoint-lloyds": ("two FedDP-Lloyds steps and the final private choice", {
        **LLOYDS, "privacy.check-share": 0.1}),
    "client": ("client level, eps 3", CLIENT),
    "client-sampled": ("client level, Poisson sampling 0.5, Gaussian counts", {
        **CLIENT, **LLOYDS, "privacy.sampling-rate": 0.5, "privacy.count-noise": "gaussian"}),
    "datapoint-auto": ("every setting auto (estimate round, tuning simulation)", {
        key: "auto" for key in HAND_KEYS}),
    "client-auto-small": ("client level, every setting auto, clients of fewer points than "
                          "dimensions (their X^T X norms from the n x n Gram matrix)", {
        **CLIENT, **{key: "auto" for key in HAND_KEYS}, "data.points-per-client": 5,
        "data.num-clients": 60}),
    "secagg-datapoint": ("SecAgg+, data-point level, seeded shares", SECAGG),
    "secagg-client": ("SecAgg+, client level, 2 Lloyds steps, seeded shares", {
        **SECAGG, **CLIENT, **LLOYDS}),
    "server-lloyds": ("baseline server-lloyds + 2 Lloyds steps", {
        "algorithm": "server-lloyds", **LLOYDS}),
    "server-kmeans++": ("baseline server-kmeans++ + 2 Lloyds steps", {
        "algorithm": "server-kmeans++", **LLOYDS}),
    "sphere-packing": ("baseline sphere-packing + 2 Lloyds steps", {
        "algorithm": "sphere-packing", **LLOYDS}),
    "kfed": ("baseline k-FED (non-private)", {"algorithm": "kfed"}),
    "resume": ("interrupted in the first Lloyds round, resumed from the checkpoint",
               LLOYDS),
    "flower-datapoint": ("flower engine (flwr run, Ray), data-point level", {
        "federation.engine": "flower"}),
    "flower-client": ("flower engine, client level, 2 Lloyds steps", {
        "federation.engine": "flower", **CLIENT, **LLOYDS}),
    "control-secagg-csprng": ("control: SecAgg+ with the ClientApp's own CSPRNG shares "
                              "(expected to differ)", SECAGG),
}
#: Configurations whose SecAgg+ noise shares the benchmark seeds, as
#: ``tests/harness/test_secagg.py`` does: the ClientApp draws them from the OS CSPRNG whatever
#: the config (docs/secagg.md), so no SecAgg run is reproducible without this. The
#: in-process engine runs the nodes in this process, where the patch applies.
SEEDED_SHARES = ("secagg-datapoint", "secagg-client")
#: Controls: configurations expected to differ, which show the comparison can fail.
CONTROLS = ("control-secagg-csprng",)


def seed_the_shares(seed: int) -> None:
    """Make every node's SecAgg+ noise shares ``generator(seed, "noise-share", stage, c)``."""
    from fedkmeans.node import NodeData
    from fedkmeans.seeding import generator

    contribution = NodeData.secagg_contribution

    def seeded(self, *args, **kwargs):
        def share_rng(stage, client):
            return generator(seed, "noise-share", stage, client)
        return contribution(self, *args, share_rng=share_rng, **kwargs)

    NodeData.secagg_contribution = seeded


def _harness_module(name: str, before_the_move: str):
    """``fedkmeans.experiment.<name>``, or ``fedkmeans.<before_the_move>`` before the move.

    The benchmark runs on a base revision too, which may predate the harness package.
    """
    import importlib

    try:
        return importlib.import_module(f"fedkmeans.experiment.{name}")
    except ModuleNotFoundError:
        return importlib.import_module(f"fedkmeans.{before_the_move}")


def flat_config(name: str, output_dir: Path) -> dict[str, object]:
    """The flat config of configuration ``name`` writing to ``output_dir``."""
    return {**SMALL, **CONFIGS[name][1], "output-dir": str(output_dir)}


def run_one(name: str, output_dir: Path) -> dict[str, object]:
    """Run configuration ``name`` with the ``fedkmeans`` on ``sys.path``; facts to report.

    ``resume`` first runs with a ClientApp that fails every ``query.lloyds`` message
    (the run stops after FedDP-Init, its checkpoint holding three rounds), then runs
    the same config again, which resumes from the checkpoint.
    """
    import fedkmeans

    cli = _harness_module("cli", "experiment")
    run_flat = cli.run_flat

    flat = flat_config(name, output_dir)
    facts: dict[str, object] = {"package": str(Path(fedkmeans.__file__).parent)}
    if name in SEEDED_SHARES:
        parse_config = _harness_module("config", "config").parse_config  # moved in #51
        seed_the_shares(parse_config(flat).seed)
    if name == "resume":
        from fedkmeans.client_app import app as client_app
        from fedkmeans.server_app import app as server_app

        run_inprocess = _harness_module("engines.inprocess", "engines.inprocess").run_inprocess
        # the ServerApp gets the config the experiment would hand it (a preset's unread
        # keys settled by the preflight, where the revision has that rule)
        checked = cli.preflight(flat)
        flat = (checked[0] if isinstance(checked, tuple) else checked).to_flat()

        def failing(msg, context):
            if msg.metadata.message_type == "query.lloyds":
                raise RuntimeError("node lost (release_identity's interruption)")
            return client_app(msg, context)

        try:
            run_inprocess(server_app, failing, flat, int(flat["federation.num-nodes"]))
        except Exception as error:  # noqa: BLE001 - the interruption itself
            facts["interrupted"] = type(error).__name__
        else:
            raise RuntimeError("the interrupted run finished")
        state = json.loads((output_dir / "checkpoint" / "state.json").read_text())
        facts["checkpoint rounds"] = state["rounds"]
    run_flat(flat)
    return facts


def sha256(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def comparable(release: bytes, stripped: tuple[str, ...] = STRIPPED) -> bytes:
    """The bytes compared: ``release`` itself, or re-serialised without ``stripped``.

    Each stripped entry is a key path, dotted for nested keys (``tuning.candidates``);
    a path the file does not have is ignored.
    """
    if not stripped:
        return release
    data = json.loads(release)
    for path in stripped:
        *parents, last = path.split(".")
        node = data
        for key in parents:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(last, None)
    return json.dumps(data, indent=1).encode()


def differing_keys(base: bytes, head: bytes) -> list[str]:
    """Top-level keys of two release.json files whose values differ (sorted)."""
    a, b = json.loads(base), json.loads(head)
    return sorted(k for k in set(a) | set(b) if a.get(k, None) != b.get(k, None))


def max_relative_difference(base: bytes, head: bytes) -> float | None:
    """Largest ``|a - b| / max(|a|, |b|)`` over the numbers of two release.json files.

    None when they differ in anything but the values of floats (a key, a string, an
    integer, a length): only rounding can then be the difference.
    """
    worst = 0.0

    def walk(a, b) -> bool:
        nonlocal worst
        if isinstance(a, float) or isinstance(b, float):
            if not isinstance(a, int | float) or not isinstance(b, int | float):
                return False
            if a != b:
                worst = max(worst, abs(a - b) / max(abs(a), abs(b)))
            return True
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(walk(a[k], b[k]) for k in a)
        if isinstance(a, list) and isinstance(b, list):
            return len(a) == len(b) and all(walk(x, y) for x, y in zip(a, b, strict=True))
        return a == b

    return worst if walk(json.loads(base), json.loads(head)) else None


def run_in_tree(tree: Path, name: str, output_dir: Path, cache: Path) -> dict[str, object]:
    """Run ``name`` in a fresh interpreter importing ``fedkmeans`` from ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree), "FEDKMEANS_CACHE_DIR": str(cache),
           "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1"}
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--one", name, "--out", str(output_dir)],
        env=env, cwd=output_dir.parent, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed in {tree}:\n{done.stderr[-3000:]}")
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    if Path(str(facts["package"])).resolve() != (tree / "fedkmeans").resolve():
        raise RuntimeError(f"{name} imported {facts['package']}, not {tree}'s fedkmeans")
    return facts


def revision(tree: Path) -> str:
    """Short commit of ``tree``, with ``+uncommitted`` when tracked files differ from it."""
    sha = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True, check=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain",
                            "--untracked-files=no"],
                           capture_output=True, text=True, check=True).stdout.strip()
    return sha + ("+uncommitted" if dirty else "")


def compare(name: str, trees: Mapping[str, Path], shas: Mapping[str, str],
            work: Path, strip: tuple[str, ...] = (), rtol: float | None = None,
            ) -> dict[str, object]:
    """Run ``name`` in the base and head trees and compare their release.json bytes."""
    released, notes = {}, []
    for side, tree in trees.items():
        out = work / side / name
        out.parent.mkdir(parents=True, exist_ok=True)
        facts = run_in_tree(tree, name, out, work / side / "cache")
        released[side] = comparable((out / "release.json").read_bytes(), STRIPPED + strip)
        if "checkpoint rounds" in facts:
            notes.append(f"{side}: interrupted ({facts['interrupted']}) with "
                         f"{'/'.join(facts['checkpoint rounds'])} checkpointed")
    identical = released["base"] == released["head"]
    if name in SEEDED_SHARES:
        notes.append("SecAgg+ shares seeded by the benchmark")
    if not identical:
        notes.append("differing keys: " + ", ".join(
            differing_keys(released["base"], released["head"])))
    row = {"config": name, "what": CONFIGS[name][0],
           "base sha": shas["base"], "head sha": shas["head"],
           "base sha256": sha256(released["base"]), "head sha256": sha256(released["head"]),
           "identical": "yes" if identical else "no",
           "expected": "no" if name in CONTROLS else "yes"}
    if rtol is not None:
        worst = max_relative_difference(released["base"], released["head"])
        row["max relative difference"] = "structure differs" if worst is None else f"{worst:.3g}"
        row["within rtol"] = "yes" if worst is not None and worst <= rtol else "no"
    row["notes"] = "; ".join(notes)
    print(json.dumps(row), flush=True)
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=DEFAULT_BASE, help="base revision (git rev)")
    parser.add_argument("--only", nargs="*", choices=sorted(CONFIGS), default=None)
    parser.add_argument("--strip", nargs="*", default=[], metavar="KEY.PATH",
                        help="keys to drop before comparing, dotted for nested ones: a "
                             "change that alters only a record (say so in the commit)")
    parser.add_argument("--rtol", type=float, default=None,
                        help="also compare the numbers: a configuration whose files differ "
                             "only in float values, each within this relative difference, "
                             "counts as the same release up to rounding")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # child: run one configuration
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(args.one, args.out)), flush=True)
        return
    from results_table import write_tables

    names = args.only or list(CONFIGS)
    with tempfile.TemporaryDirectory(prefix="release-identity-") as tmp:
        base_tree = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet",
                        str(base_tree), args.base], check=True)
        try:
            trees = {"base": base_tree, "head": ROOT}
            shas = {side: revision(tree) for side, tree in trees.items()}
            rows = [compare(name, trees, shas, Path(tmp) / "runs", tuple(args.strip),
                            args.rtol) for name in names]
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(base_tree)], check=False)
    checked = [row for row in rows if row["expected"] == "yes"]
    same = sum(row["identical"] == "yes" for row in checked)
    controls = [row for row in rows if row["expected"] == "no"]
    caught = sum(row["identical"] == "no" for row in controls)
    summary = (f"{same} of {len(checked)} configurations identical; "
               f"{caught} of {len(controls)} controls differ, as expected.")
    if args.rtol is not None:
        close = sum(row["within rtol"] == "yes" for row in checked)
        summary += (f" Up to rounding (every number within a relative {args.rtol:g}, "
                    f"nothing else different): {close} of {len(checked)}.")
    print(summary)
    if args.only:
        return  # a partial run does not replace the results file
    stripped = ", ".join((*STRIPPED, *args.strip)) or (
        "nothing (release.json holds no path, host or time)")
    write_tables(OUT, "release-identity", (
        "# Release identity\n\nMeasured by `python benchmarks/release_identity.py "
        f"--base {args.base}" + "".join(f" --strip {p}" for p in args.strip)
        + (f" --rtol {args.rtol:g}" if args.rtol is not None else "")
        + "`: each configuration run with "
        "`privacy.reproducible-noise = true` on the base revision's package and on this "
        "tree's (each in its own interpreter, `PYTHONPATH` at that tree), and the two "
        "`release.json` files compared byte for byte (SHA-256 of the file). Stripped "
        f"before comparing: {stripped}. The SecAgg+ rows seed the nodes' noise shares "
        "in the benchmark (as `tests/harness/test_secagg.py` does): the ClientApp draws them "
        "from the OS CSPRNG whatever the config (docs/secagg.md), so two runs of the "
        "same code differ, which the control row shows. " + summary
    ), rows)


if __name__ == "__main__":
    main()
