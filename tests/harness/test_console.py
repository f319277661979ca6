"""The server's console says the same for neighbouring federations (as release.json does).

A console line may carry only public settings, values of the ledger and
post-processings of the noisy releases (:mod:`fedkmeans.console`). So two federations
that differ by one client (client level) or by one data point that is its client's only
point (data-point level) print the same lines once the values the noisy releases decide
are replaced by placeholders: the returned centers and why (``centers_from``, the
check's noisy margin), the epsilon the calibrated plan spends, the estimated share of
clipped points. With the operator's opt-in (``FEDKMEANS_DIAGNOSTICS_ON_CONSOLE=1``) the
lines do differ: the comparison is not vacuous.

The in-process engine runs the same server code as ``flwr run`` (:mod:`fedkmeans.experiment.runner`
through the ServerApp; :func:`fedkmeans.console.log_through_flower` hands these
records to Flower's handlers, which ``flwr run --stream`` prints), so capturing the
``fedkmeans`` and ``flwr`` loggers here captures every line of either.
"""

import json
import logging
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import run_server_inprocess

from fedkmeans import console
from fedkmeans.client_app import app as client_app
from fedkmeans.data import _npz_version
from fedkmeans.data.npz import save_npz
from fedkmeans.experiment import run

CLIENTS = 60


def _write(path: Path, *, clients: int, single: bool = False) -> None:
    """``clients`` clients of 30 points in 6-d around 3 means (the same first clients).

    ``single``: one more client with a single point far out (clipped by a declared
    radius), so removing that point removes its client.
    """
    rng = np.random.default_rng(0)
    means = rng.normal(scale=4.0, size=(3, 6))
    labels = rng.integers(3, size=(CLIENTS + 1, 30))[:clients]
    x = means[labels.ravel()] + rng.normal(size=((CLIENTS + 1) * 30, 6))[:clients * 30]
    owner = np.repeat(np.arange(clients), 30)
    if single:
        x = np.vstack([x, np.full((1, 6), 40.0)])
        owner = np.append(owner, clients)
    server_x = means[np.repeat(np.arange(3), 20)] + np.random.default_rng(1).normal(size=(60, 6))
    save_npz(path, x=x, client=owner, server_x=server_x)
    _npz_version.cache_clear()


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(f"{record.levelname} {record.getMessage()}")


def _captured(go) -> list[str]:
    """The lines ``go()`` logs through the ``fedkmeans`` and ``flwr`` loggers."""
    handler, loggers = _Lines(), [logging.getLogger("fedkmeans"), logging.getLogger("flwr")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.INFO)
    try:
        go()
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.removeHandler(handler)
            lg.setLevel(level)
    return handler.lines


def _masked(lines: list[str], out: Path) -> list[str]:
    """``lines`` with the values the noisy releases decide replaced by placeholders.

    A line that a noisy release decides whether to print (step 2's fallback to uniform
    weights) is left out.
    """
    release = json.loads((out / "release.json").read_text())
    masked = []
    for line in lines:
        if "positive noisy weight" in line:  # step 2's fallback, read off its noisy release
            continue
        # the number of FedDP-Lloyds rounds is the tuning's T, chosen from the estimate
        # round's noisy release: its rounds, the rounds' count and the Lloyds rounds a
        # resumed run names are left out
        if re.search(r"\[progress\] round lloyds-\d+ ", line):
            continue
        line = re.sub(r" \(\d+(/\d+)?\)$", "", line)
        line = re.sub(r", lloyds-\d+", "", line)  # a resumed run's list of rounds done
        line = line.replace(str(out), "<out>").replace(release["centers_from"], "<centers>")
        line = re.sub(r"epsilon \S+ of", "epsilon <spent> of", line)
        # the estimate round's noisy share beyond the radius (or that it cannot be bounded)
        line = re.sub(r"; (at most \S+% of the points \(95% private upper bound\) lie "
                      r"outside|the share of points outside) privacy.data-radius = [^;\s]+"
                      r"( cannot be bounded usefully at this epsilon \(the estimate "
                      r"round's noise\))?",
                      "; <clipping>", line)
        masked.append(re.sub(r"node \d+", "node <id>", line))  # ids of the infrastructure
    return masked


def _console(tmp_path, name, clients, extra, single=False):
    data, out = tmp_path / f"{name}.npz", tmp_path / name
    _write(data, clients=clients, single=single)
    lines = _captured(lambda: run([
        "dataset=npz", f"data.path={data}", "k=3", "federation.num-nodes=3",
        "privacy.epsilon=4", f"output-dir={out}", *extra]))
    return lines, _masked(lines, out)


def test_say_prints_the_public_line_unless_the_operator_opts_in(monkeypatch):
    logger = logging.getLogger("fedkmeans.test_console")
    monkeypatch.delenv(console.DIAGNOSTICS_ENV, raising=False)

    def lines():
        return _captured(lambda: (
            console.say(logger, "registered 3 nodes", "registered 3 nodes hosting 60 clients"),
            console.say(logger, None, "node 0: 4 points clipped"),
            console.announce(logger)))

    assert lines() == ["INFO registered 3 nodes"]
    monkeypatch.setenv(console.DIAGNOSTICS_ENV, "1")
    opted = lines()
    assert opted[:2] == ["INFO [not private] registered 3 nodes hosting 60 clients",
                         "INFO [not private] node 0: 4 points clipped"]
    assert opted[2].startswith("WARNING FEDKMEANS_DIAGNOSTICS_ON_CONSOLE=1: lines starting "
                               "with [not private]") and "NOT covered" in opted[2]


def test_the_guarantee_names_the_neighbouring_relation_and_the_split():
    from fedkmeans.experiment.config import parse_config
    from fedkmeans.statements import guarantee

    def sentence(**flat):
        config = parse_config(flat)
        return guarantee(config.protocol, 0.9, secret_noise=True,
                         server_rows_drawn=config.data.server_fraction > 0)

    assert sentence(**{"privacy.level": "datapoint"}) == (
        "(0.9, 1e-06)-DP for everything in release.json, for neighbouring federations that "
        "differ by the addition or removal of one data point (one row of one client's "
        "data), in the clients' data as the nodes hold it")
    assert "the addition or removal of one client with all its data" in sentence(
        **{"privacy.level": "client"})
    split = sentence(**{"data.name": "file", "data.path": "x.csv",
                        "data.server-fraction": 0.1})
    assert "after data.server-fraction's seeded split of the file" in split
    assert "removing a row of the input file can change which rows the server draws" in split


def test_sweep_rows_say_whose_centers_the_run_returned():
    from fedkmeans.experiment.sweep import result_row
    from fedkmeans.statements import centers_returned

    checked = {"algorithm": "feddp-kmeans", "check": {"chosen": "server-only",
                                                      "margin_sigmas": 0.5}}
    row = result_row(0, [], checked, 1.0)
    assert (row["centers_returned"], row["check_margin_sigmas"]) == ("server-only (check)", 0.5)
    assert centers_returned({**checked, "check": {"chosen": "protocol"}}) == "protocol"
    assert centers_returned({"algorithm": "feddp-kmeans", "tuning": {
        "chosen": {"algorithm": "server-lloyds"}}}) == "server-only (too few clients)"
    assert centers_returned({"algorithm": "kfed"}) == "kfed"


#: The number of Lloyd steps is declared: the tuning's choice of T is a post-processing
#: of the estimate round's noisy release, so with secret noise two runs, neighbours or
#: not, may choose differently and print a round more or less (on the secagg case, T = 1
#: in 3 of 24 runs). What the test checks is that no count of the clients reaches the
#: console; the other settings stay at their defaults.
STEPS = "privacy.lloyds-steps=0"
CASES = {
    # defaults at client level: one client removed
    "client": dict(extra=["privacy=client", STEPS], clients=(CLIENTS, CLIENTS - 1)),
    # data-point level, a declared radius that clips: the only point of a client removed
    "datapoint": dict(extra=["privacy=datapoint", "privacy.data-radius=8", STEPS],
                      clients=(CLIENTS, CLIENTS), single=(True, False)),
    "secagg": dict(extra=["privacy=client", "privacy.aggregation=secagg",
                          "privacy.count-noise=gaussian", "federation.min-replies=0.8", STEPS],
                   clients=(CLIENTS, CLIENTS - 1)),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_neighbouring_federations_print_the_same_console(tmp_path, monkeypatch, case):
    spec = CASES[case]
    single = spec.get("single", (False, False))
    monkeypatch.delenv(console.DIAGNOSTICS_ENV, raising=False)
    raw, first = _console(tmp_path, "a", spec["clients"][0], spec["extra"], single[0])
    _, second = _console(tmp_path, "b", spec["clients"][1], spec["extra"], single[1])
    assert first == second
    assert any("[summary]" in line for line in first) and any(
        "[progress]" in line for line in first)
    assert not any(console.NOT_PRIVATE in line or " s," in line for line in raw)
    # the operator's opt-in prints the counts: then the neighbours' consoles differ
    monkeypatch.setenv(console.DIAGNOSTICS_ENV, "1")
    raw, first = _console(tmp_path, "c", spec["clients"][0], spec["extra"], single[0])
    _, second = _console(tmp_path, "d", spec["clients"][1], spec["extra"], single[1])
    assert first != second
    assert f"WARNING {console.DIAGNOSTICS_ENV}=1: lines starting with" in raw[0]
    assert any(re.match(rf"INFO {re.escape(console.NOT_PRIVATE)} registered \d+ nodes hosting",
                        line) for line in raw)


def _fails_the_check(msg, context):
    if msg.metadata.message_type == "query.check":
        raise RuntimeError("node lost")
    return client_app(msg, context)


@pytest.mark.slow
def test_a_resumed_run_prints_the_same_console_for_neighbours(tmp_path, monkeypatch):
    monkeypatch.delenv(console.DIAGNOSTICS_ENV, raising=False)
    consoles = []
    for name, clients in (("a", CLIENTS), ("b", CLIENTS - 1)):
        data, out = tmp_path / f"{name}.npz", tmp_path / name
        _write(data, clients=clients)
        flat = {"data.name": "npz", "data.path": str(data), "k": 3, "privacy.level": "client",
                "privacy.epsilon": 4.0, "privacy.lloyds-steps": 0,  # as in CASES (STEPS)
                "federation.num-nodes": 3, "output-dir": str(out)}

        def interrupted(flat=flat):
            # the error names no count of clients either
            with pytest.raises(Exception, match=r"round 'check': too few requested clients "
                               r"gave a valid reply for federation.min-replies=1 \(the counts"):
                run_server_inprocess(flat, app=_fails_the_check)

        lines = _captured(interrupted)
        lines += _captured(lambda flat=flat: run_server_inprocess(flat))
        consoles.append(_masked(lines, out))
    assert consoles[0] == consoles[1]
    assert any("resuming from checkpoint" in line for line in consoles[0])
    assert any("restored from the checkpoint" in line for line in consoles[0])
    assert any("rejected the reply of node" in line for line in consoles[0])


@pytest.mark.flower
def test_plain_flwr_run_streams_the_same_lines_and_no_diagnostics(tmp_path, monkeypatch):
    """``flwr run --stream`` prints the in-process engine's console lines, nothing more of ours.

    The data-point case with a radius that clips a node's point: the nodes' count of
    clipped points, the clients' count and the timings stay off the stream.
    """
    from fedkmeans.experiment.engines.flower import (
        PROJECT_DIR,
        flower_env,
        processes_with_env,
        stop_all,
    )

    monkeypatch.delenv(console.DIAGNOSTICS_ENV, raising=False)
    spec = CASES["datapoint"]
    _, inprocess = _console(tmp_path, "inprocess", CLIENTS, spec["extra"], single=True)
    data, out, home = tmp_path / "flower.npz", tmp_path / "flower", tmp_path / "flwr-home"
    _write(data, clients=CLIENTS, single=True)
    home.mkdir()
    env = flower_env(home)
    try:
        proc = subprocess.run(
            ["flwr", "run", ".", "--stream", "--run-config",
             f"data.name='npz' data.path='{data}' k=3 federation.num-nodes=3 "
             f"privacy.level='datapoint' privacy.data-radius=8.0 privacy.epsilon=4.0 "
             f"output-dir='{out}'",
             "--federation-config", "num-supernodes=3 init-args-num-cpus=2"],
            cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=900)
    finally:
        left = stop_all(lambda: processes_with_env("FLWR_HOME", str(home)))
    assert left == []
    assert (out / "release.json").exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    stream = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in
              (proc.stdout + proc.stderr).splitlines()]
    # "INFO :      registered the nodes (d=6; ...)" -> "INFO registered the nodes (d=6; ...)"
    streamed = _masked([re.sub(r"^(\w+)\s*:\s+", r"\1 ", line) for line in stream], out)
    ours = [line for line in inprocess if not line.startswith("INFO [summary]")]
    assert [line for line in streamed if line in ours] == ours
    summary = [line for line in streamed if "[summary]" in line]
    assert summary == [line for line in inprocess if "[summary]" in line]
    joined = "\n".join(stream)
    for diagnostic in ("hosting", "were clipped onto it", " s,", "cost",
                       console.NOT_PRIVATE):
        assert diagnostic not in joined.replace("noisy cost difference", "")


@pytest.mark.slow
def test_secagg_at_data_point_level_one_node_per_client_prints_no_count(tmp_path, monkeypatch):
    """Issue 49: SecAgg+ at data-point level with one node per client (a file's default
    layout), the only point of a client removed: 31 nodes against 30. Flower's SecAgg+
    lines ("configure_fit: strategy sampled 31 clients", "aggregate_fit: received 31
    results") and the registration's node count would tell them apart."""
    clients = 30

    def printed(name, single):
        data, out = tmp_path / f"{name}.npz", tmp_path / name
        _write(data, clients=clients, single=single)
        flat = {"data.name": "npz", "data.path": str(data), "k": 3,
                "privacy.level": "datapoint", "privacy.data-radius": 8.0,
                "privacy.epsilon": 4.0, "privacy.aggregation": "secagg",
                "privacy.lloyds-steps": 0, "output-dir": str(out)}
        lines = _captured(lambda: run_server_inprocess(
            flat, num_nodes=clients + int(single)))
        return lines, _masked(lines, out)

    monkeypatch.delenv(console.DIAGNOSTICS_ENV, raising=False)
    raw, first = printed("a", True)
    _, second = printed("b", False)
    assert first == second
    assert not any("clients" in line or "results" in line or "Stage" in line
                   or console.NOT_PRIVATE in line for line in raw), raw
    assert sum("SecAgg+" in line for line in raw) == 1  # one public line says so
    monkeypatch.setenv(console.DIAGNOSTICS_ENV, "1")
    raw, first = printed("c", True)
    _, second = printed("d", False)
    assert first != second
    marked = f"INFO {console.NOT_PRIVATE} configure_fit: strategy sampled 31 clients"
    assert any(line.startswith(marked) for line in raw)
