"""One conversion per boundary: what one default in-process run parses, loads and writes.

The run is the Python API's default run (``fedkmeans.experiment.run``: ``tuning=auto``,
no ``output-dir``) on the small mixture. Each function below is wrapped with a counter
wherever the package holds it; the test fails when a count grows (issue #51).
"""

import json
import sys
from collections import Counter, OrderedDict
from pathlib import Path

from conftest import PAPER, SMALL

import fedkmeans.config
import fedkmeans.data
import fedkmeans.experiment.config
import fedkmeans.experiment.rundir
from fedkmeans.experiment import run

#: The small federation with every privacy setting at its default (``auto``).
OVERRIDES = [f"{key}={value}" for key, value in SMALL.items() if key not in PAPER]


def _count_calls(monkeypatch, counts: Counter, module, name: str, *, when=None) -> None:
    """Wrap ``module.name`` in every loaded ``fedkmeans`` module that holds it."""
    original = getattr(module, name)

    def counted(*args, **kwargs):
        if when is None or when(*args, **kwargs):
            counts[name] += 1
        return original(*args, **kwargs)

    for loaded in list(sys.modules.values()):
        if getattr(loaded, "__name__", "").startswith("fedkmeans") \
                and getattr(loaded, name, None) is original:
            monkeypatch.setattr(loaded, name, counted)


def test_a_default_run_parses_once_loads_the_server_data_once_and_reads_nothing_back(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(fedkmeans.experiment.config, "_RUN_CONFIGS",
                        OrderedDict())  # a fresh process's
    counts: Counter = Counter()
    _count_calls(monkeypatch, counts, fedkmeans.experiment.config, "parse_config")
    _count_calls(monkeypatch, counts, fedkmeans.config, "parse_protocol")
    _count_calls(monkeypatch, counts, fedkmeans.data, "load_server")
    _count_calls(monkeypatch, counts, fedkmeans.experiment.rundir, "default_output_dir")
    _count_calls(monkeypatch, counts, fedkmeans.config, "flatten",
                 when=lambda obj, prefix="", skip=(): prefix == "")  # configs, not sections
    read_text = Path.read_text

    def counted_read(path, *args, **kwargs):
        counts[f"read {path.name}"] += 1
        return read_text(path, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", counted_read)

    result = run(OVERRIDES)

    assert counts["parse_config"] == 1  # the ServerApp and the nodes take the parsed one
    assert counts["parse_protocol"] == 0  # the protocol config is the parsed one's part
    assert counts["load_server"] == 1  # the preflight's load is the run's
    assert counts["default_output_dir"] == 1
    # once each: the defaults and the declared config (each as its protocol config's keys
    # and the experiment's own) and the resolved protocol config
    assert counts["flatten"] <= 5
    assert counts["read result.json"] == 0
    path = Path(result["result_path"])
    assert path.parent.is_relative_to(tmp_path / "outputs")
    written = json.loads(read_text(path))
    assert {k: v for k, v in result.items() if k != "result_path"} == written
