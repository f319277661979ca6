"""The realistic federations of benchmarks/federations.py (issue 34): the generator's
stated properties, and the acceptance lines evaluated on hand-made rows."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import federation_data as fd  # noqa: E402
import federations  # noqa: E402

from fedkmeans.data.tables import TableSettings, load_file  # noqa: E402


@pytest.mark.parametrize("name", ["heavy-tailed", "missing-2"])
def test_a_seed_gives_the_same_federation_and_another_seed_another(name):
    one, again, other = fd.generate(name, 3), fd.generate(name, 3), fd.generate(name, 4)
    for key in ("x", "client", "y", "server_x", "server_y"):
        assert np.array_equal(getattr(one, key), getattr(again, key))
    assert one.absent == again.absent
    assert not np.array_equal(one.x[:100], other.x[:100])


@pytest.mark.parametrize("seed", range(3))
def test_every_federation_is_large_and_many_clients_hold_it(seed):
    for name, spec in fd.FEDERATIONS.items():
        fed = fd.generate(name, seed)
        assert fed.x.shape == (fed.y.size, spec.dim), name
        assert fed.x.shape[0] >= 10_000, name
        assert fed.client_sizes().min() >= 1 and spec.clients >= 1000, name
        assert set(np.unique(fed.y)) == set(range(spec.k)), name


@pytest.mark.parametrize("seed", range(5))
def test_heavy_tailed_sizes_reach_fifty_times_the_median(seed):
    sizes = fd.generate("heavy-tailed", seed).client_sizes()
    assert sizes.max() >= 50 * np.median(sizes)
    assert sizes.min() >= fd.PARETO_MIN and sizes.max() <= fd.PARETO_CAP


def test_uneven_weights_are_one_to_twenty():
    fed = fd.generate("uneven", 0)
    # geometric weights 20^(i/9), i = 0..9, normalised
    raw = 20.0 ** (np.arange(10) / 9)
    assert np.allclose(fed.weights, raw / raw.sum(), rtol=1e-12)
    assert fed.weights.max() / fed.weights.min() == pytest.approx(20.0, rel=1e-12)
    counts = np.bincount(fed.y)
    assert 15 <= counts.max() / counts.min() <= 27  # drawn around 1 : 20


def test_uncentred_points_sit_far_from_the_origin_with_unit_spread():
    fed = fd.generate("uncentred", 0)
    assert np.all(np.abs(fed.x.mean(axis=0) - 100.0) < 2.0)
    assert np.all(fed.x.std(axis=0) < 3.0)  # spread of the means (1) and the clusters (1)
    assert np.abs(fed.server_x.mean() - 100.0) < 2.0


def test_feature_scales_span_four_decades():
    spread = fd.generate("scales", 0).x.std(axis=0)
    assert 1e3 < spread[-1] / spread[0] < 1e5
    assert np.all(np.diff(np.log10(spread)) > 0)


def test_server_samples_are_half_a_percent_and_ten_percent():
    for name, share in (("small-server", 0.005), ("large-server", 0.1),
                        ("heavy-tailed", 0.03)):
        fed = fd.generate(name, 1)
        assert fed.server_x.shape[0] == round(share * fed.x.shape[0]), name
        assert fed.server_clusters() == fed.spec.k, name


@pytest.mark.parametrize(("name", "absent"), [("missing-0", 0), ("missing-1", 1),
                                              ("missing-2", 2), ("missing-4", 4)])
def test_missing_clusters_are_absent_from_the_server_file(name, absent, tmp_path):
    clients, server = fd.write_federation(name, 2, tmp_path)
    fed = fd.generate(name, 2)
    assert fed.spec.k == 8 and len(fed.absent) == absent
    with np.load(server) as arrays:
        server_y, server_x = arrays["server_y"], arrays["server_x"]
    assert not set(fed.absent) & set(server_y.tolist())
    present = sorted(set(range(8)) - set(fed.absent))
    assert np.array_equal(np.bincount(server_y[server_y >= 0], minlength=8)[present],
                          [20] * len(present))
    uniform = server_x[server_y == -1]
    assert uniform.shape[0] == 80  # 10 k
    assert np.all(uniform >= fed.x.min(axis=0)) and np.all(uniform <= fed.x.max(axis=0))
    # the project reads the pair as dataset=file data.server-path=server.npz
    data = load_file(clients, TableSettings(server_path=str(server)))
    assert data.x.shape == fed.x.shape and data.server_x.shape == server_x.shape


def test_a_written_federation_is_kept_not_redrawn(tmp_path):
    clients, server = fd.write_federation("uneven", 0, tmp_path)
    stamp = clients.stat().st_mtime_ns, server.stat().st_mtime_ns
    assert fd.write_federation("uneven", 0, tmp_path) == (clients, server)
    assert (clients.stat().st_mtime_ns, server.stat().st_mtime_ns) == stamp


def _row(name, level, eps, setting, seed, ratio, clusters=10):
    return {"federation": name, "level": level, "epsilon": eps, "setting": setting,
            "seed": seed, "cost_ratio": ratio, "ari": 0.5, "nmi": 0.5, "fmi": 0.5,
            "centers_from": "feddp-kmeans", "chosen_lloyds_steps": "0",
            "chosen_max_points": "16", "num_clients": 2000, "num_points": 20000,
            "k": fd.FEDERATIONS[name].k, "dim": 15, "max_over_median_size": 2.0,
            "server_points": 600, "server_clusters": clusters}


def test_acceptance_lines_are_computed_from_the_rows():
    rows = [_row("uneven", "datapoint", 1.0, "server", s, 1.10) for s in range(3)]
    # protocol 1.00 <= 0.97 x 1.10, so the final answer must be <= 0.99 x 1.10 = 1.089
    rows += [_row("uneven", "datapoint", 1.0, "protocol", s, r)
             for s, r in enumerate((1.00, 1.01, 1.06))]
    rows += [_row("uneven", "datapoint", 1.0, "defaults", s, r)
             for s, r in enumerate((1.05, 1.10, 1.12))]
    lines = federations.summarise(rows)
    met = {line.split(" | ")[0][2:]: line.split(" | ")[1] for line in lines
           if line.startswith("| uneven")}
    assert met == {
        "uneven datapoint eps=1: (a) protocol median <= 1.05 x optimal": "yes",
        "uneven datapoint eps=1: (b) final median <= 1.02 x server alone": "yes",
        "uneven datapoint eps=1: (b) protocol <= 0.97 x server (0.9182), "
        "so final <= 0.99 x it": "**no**",
    }
    assert lines[-1] == "Acceptance lines met: 2 of 3."


def test_missing_clusters_compare_every_seed_with_its_own_server_answer():
    rows = [_row("missing-1", "client", 3.0, "server", s, r, clusters=7)
            for s, r in enumerate((1.4, 1.0))]
    rows += [_row("missing-1", "client", 3.0, "defaults", s, r, clusters=7)
             for s, r in enumerate((1.3, 1.03))]  # seed 1: 1.03 > 1.02 x 1.0
    rows += [_row("missing-1", "client", 3.0, "protocol", s, 1.2, clusters=7)
             for s in range(2)]
    lines = federations.summarise(rows)
    assert ("| missing-1 client eps=3: final never > 1.02 x server alone (every seed, "
            "paired) | **no** | worst 1.0300 |") in lines
    assert "| client | 3 | 1.1650 (1.2000) [1.2000] |" in lines  # the missing table
    # (a) and (b) do not apply where the server's data lacks a cluster
    assert not [line for line in lines if ": (a)" in line or ": (b)" in line]
    assert "Acceptance lines (a), (b): n/a: the server's data has 7 of 8 clusters." in lines


def test_a_resumed_benchmark_skips_exactly_the_rows_it_has(tmp_path):
    from defaults import append_row

    jobs = [("uneven", [], level, eps, setting, seed, f"{tmp_path}/{i}")
            for i, (level, eps, setting, seed) in enumerate(
                [("datapoint", 1.0, "server", 0), ("client", 0.5, "protocol", 0),
                 ("client", 0.5, "defaults", 0), ("client", 0.5, "protocol", 1)])]
    partial = tmp_path / "partial.csv"
    for job in jobs[1:3]:  # two rows written, read back from text
        append_row(partial, {"set": job[0], "level": job[2], "epsilon": job[3],
                             "setting": job[4], "seed": job[5], "cost_ratio": 1.0})
    done = federations.read_rows(partial)
    assert federations.remaining(jobs, done) == [jobs[0], jobs[3]]
