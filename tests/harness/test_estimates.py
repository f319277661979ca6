"""The estimate round: bins by hand, sensitivities, the read-off, and a run that uses it."""

import math
from dataclasses import replace

import numpy as np
import pytest
from scipy.stats import norm

from fedkmeans.experiment.cli import run_flat
from fedkmeans.experiment.config import parse_config
from fedkmeans.node import NodeData
from fedkmeans.privacy.budget import UNDECLARED_MAX_POINTS
from fedkmeans.privacy.registry import GAUSSIAN
from fedkmeans.server.context import ServerContext
from fedkmeans.server.thresholds import noise_std
from fedkmeans.stages import statistic_bounds
from fedkmeans.stages.estimate import (
    COUNT_SLOT,
    ESTIMATE,
    MOMENT_SLICE,
    NORM_SLICE,
    SIZE_SLICE,
    WIDTH,
    bin_edges,
    client_rows,
    estimate_noise_multiplier,
    rank_counts,
    rank_widths,
)
from fedkmeans.tuning.estimates import (
    FLOOR_TAIL,
    MISS_PROBABILITY,
    PrivateEstimates,
    cleaned,
    noise_floor,
    read_quantile,
)
from fedkmeans.tuning.federation import SimulatedFederation
from fedkmeans.tuning.plan import estimate_release
from fedkmeans.tuning.simulation import SimulatedPool

AUTO = {"privacy.data-radius": "auto", "privacy.max-points-per-client": "auto",
        "privacy.split": "auto", "privacy.lloyds-steps": "auto"}


def test_rows_by_hand():
    # client 0: 3 points of norms 1, 2, 2 (||X^T X||_F = 8); client 1: no point
    sizes = np.array([3, 0])
    rows = client_rows(sizes, np.array([8.0, 0.0]), np.array([1.0, 2.0, 2.0]),
                       np.array([0, 0, 0]), level="client")
    assert rows.shape == (2, WIDTH)
    # sizes: two bins per octave from 1, so 3 is in bin floor(2 log2 3) = 3: [2^1.5, 2^2)
    assert np.flatnonzero(rows[0, SIZE_SLICE]).tolist() == [3] and rows[1, SIZE_SLICE].sum() == 0
    assert rows[:, COUNT_SLOT].tolist() == [1.0, 1.0]
    # moments: two per octave from 2^-40, 8 = 2^3 -> bin 2 * 43 = 86
    assert np.flatnonzero(rows[0, MOMENT_SLICE]).tolist() == [86]
    # norms: four per octave from 2^-20: 1 -> bin 80, 2 -> bin 84; client level: fractions
    norms = rows[0, NORM_SLICE]
    assert norms[80] == pytest.approx(1 / 3) and norms[84] == pytest.approx(2 / 3)
    assert np.linalg.norm(rows[0]) <= 2.0  # the client-level bound
    # data-point level: counts, no moments, no count entry, the ranks 1, 2, 3 in the
    # bins [1, 2^0.5), [2, 2^1.5) and [2^1.5, 4) (bin 1, [2^0.5, 2), holds no integer)
    rows = client_rows(sizes, None, np.array([1.0, 2.0, 2.0]), np.array([0, 0, 0]),
                       level="datapoint")
    assert rows[0, NORM_SLICE][[80, 84]].tolist() == [1.0, 2.0]
    assert rows[:, MOMENT_SLICE].sum() == 0 and rows[:, COUNT_SLOT].sum() == 0
    assert rows[0, SIZE_SLICE][:5].tolist() == [1, 0, 1, 1, 0] and rows[1].sum() == 0
    assert bin_edges("sizes")[3] == pytest.approx(2**1.5)


def test_rank_histograms_by_hand():
    # integers per bin: [1,1.41) {1}, [1.41,2) {}, [2,2.83) {2}, [2.83,4) {3}, [4,5.66)
    # {4,5}, [5.66,8) {6,7}, [8,11.3) {8..11}, [11.3,16) {12..15}
    assert rank_widths()[:8].tolist() == [1, 0, 1, 1, 2, 2, 4, 4]
    counts = rank_counts(np.array([0, 5, 10, 2**25]))
    assert counts[1, :6].tolist() == [1, 0, 1, 1, 2, 0]
    assert counts[2, :8].tolist() == [1, 0, 1, 1, 2, 2, 3, 0]  # 8, 9, 10 of 8..11
    assert counts.sum(axis=1).tolist() == [0, 5, 10, 2**25]  # past 2^24: the last bin


@pytest.mark.parametrize("level,expected", [("datapoint", math.sqrt(2)), ("client", 2.0)])
def test_the_sensitivity_is_the_derived_one(level, expected):
    privacy = parse_config({"privacy.level": level, **AUTO}).privacy
    bound = statistic_bounds(privacy)["estimates"]
    assert bound.l2_sensitivity == pytest.approx(expected)
    if level == "datapoint":  # max-points-per-client auto: the public re-clip
        assert bound.server_bound == pytest.approx(UNDECLARED_MAX_POINTS * math.sqrt(2))


def test_one_point_moves_a_data_point_row_by_at_most_sqrt2():
    # also from an empty client (n = 0): a point that is its client's only one
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(300):
        n = int(rng.integers(0, 70)) if _ else 0
        norms = np.exp(rng.normal(size=n + 1) * 3)
        before = client_rows(np.array([n]), None, norms[:n], np.zeros(n, np.int64),
                             level="datapoint")
        after = client_rows(np.array([n + 1]), None, norms, np.zeros(n + 1, np.int64),
                            level="datapoint")
        worst = max(worst, float(np.linalg.norm(after - before)))
    assert worst == pytest.approx(math.sqrt(2))  # every added point moves it by sqrt(2)


def test_the_noise_floor_and_the_quantile_by_hand():
    sigma = 2.0
    noisy = np.array([0.0, 10.0, -3.0, 4.0, 30.0])
    floor = sigma * norm.isf(FLOOR_TAIL / 5)  # 2 * 2.878 = 5.76
    assert floor == pytest.approx(5.7563, abs=1e-4)
    np.testing.assert_array_equal(cleaned(noisy, sigma), [0, 10, 0, 0, 30])
    edges = np.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    hist = cleaned(noisy, sigma)
    assert read_quantile(hist, edges, 0.25) == 2.0  # 10 of 40 in [1, 2)
    # log-linear within the bin: 4 * (5 / 4) ** ((0.26 - 0.25) / 0.75)
    assert read_quantile(hist, edges, 0.26) == pytest.approx(4 * 1.25 ** (0.01 / 0.75))
    assert read_quantile(hist, edges, 0.625) == pytest.approx(4 * 1.25**0.5)
    assert read_quantile(hist, edges, 1.0) == 5.0
    assert read_quantile(np.zeros(5), edges, 0.5) is None


def test_the_noise_multiplier_takes_its_share_of_rho():
    # the analytic Gaussian at (1, 1e-6) has sigma 4.225 per unit sensitivity
    z_all = GAUSSIAN.standalone_scale(1.0, 1e-6, 1.0)
    assert z_all == pytest.approx(4.225, abs=1e-3)
    assert estimate_noise_multiplier(1.0, 1e-6, 0.05) == pytest.approx(z_all / math.sqrt(0.05))


def test_the_count_is_the_release_at_either_level():
    noisy = np.zeros(WIDTH)
    noisy[COUNT_SLOT] = 57.3
    noisy[SIZE_SLICE.start] = 61.2  # data-point level: rank 1, one per non-empty client
    client = PrivateEstimates.read(noisy, 3.0, "client", declared=0)
    assert client.num_clients == 57.3 and "noisy count" in client.num_clients_from
    # data-point level: max_b (R_b - t) / w_b, t = 3 z(1 - 0.01/48) = 10.59
    t = 3.0 * norm.isf(FLOOR_TAIL / 48)
    point = PrivateEstimates.read(noisy, 3.0, "datapoint", declared=0)
    assert point.num_clients == pytest.approx(61.2 - t) and "noisy count" in \
        point.num_clients_from
    noisy[SIZE_SLICE.start + 20] = 60 * 425.0  # 60 clients fill [1024, 1448): 425 ranks
    point = PrivateEstimates.read(noisy, 3.0, "datapoint", declared=0)
    assert point.num_clients == pytest.approx(60 - t / 425)
    declared = PrivateEstimates.read(noisy, 3.0, "client", declared=100)
    assert declared.num_clients == 100.0
    noisy[SIZE_SLICE] = 0.0  # nothing above the floor: the first bin, at least 1
    noisy[SIZE_SLICE.start] = -4.0
    assert PrivateEstimates.read(noisy, 3.0, "datapoint", declared=0).num_clients == 1.0


def test_the_estimate_round_decides_too_few_clients_relative_to_its_noise():
    # the count slot's floor is sigma * z_1 (z_1 = the 0.99 normal quantile): 23.26 at
    # sigma = 10; the rule reads the noisy count at client level only
    noisy = np.zeros(WIDTH)
    for count, few in ((23.0, True), (23.5, False)):
        noisy[COUNT_SLOT] = count
        client = PrivateEstimates.read(noisy, 10.0, "client", declared=0)
        assert client.too_few_clients is few
    point = PrivateEstimates.read(noisy, 10.0, "datapoint", declared=0)
    assert not point.too_few_clients  # the unit is a point there
    declared = PrivateEstimates.read(noisy, 10.0, "client", declared=5)
    assert declared.too_few_clients  # a declared count is read against the same floor


def test_a_run_spends_its_share_on_the_estimate_round_first(small_config):
    result = run_flat({**small_config, **AUTO, "privacy.level": "client",
                       "privacy.epsilon": 3.0, "privacy.reproducible-noise": True})
    releases = result["privacy"]["releases"]
    first = releases[0]
    assert first["stage"] == "estimate/estimates" and first["sampling_rate"] == 1.0
    assert first["sensitivity"] == 2.0
    z = estimate_noise_multiplier(3.0, 1e-6, 0.05)
    assert first["noise_scale"] == pytest.approx(2.0 * z)
    assert [r["stage"] for r in releases].count("estimate/estimates") == 1
    assert 0.99 * 3.0 <= result["privacy"]["epsilon"] <= 3.0
    estimates = result["tuning"]["estimates"]
    assert "noisy count" in estimates["num_clients_from"]
    assert abs(estimates["num_clients"] - 12) < 6 * first["noise_scale"]


def test_declared_settings_cost_nothing(small_config):
    result = run_flat({**small_config, "privacy.epsilon": 1.0})  # the paper's hand settings
    assert all(not r["stage"].startswith("estimate") for r in result["privacy"]["releases"])
    assert "tuning" not in result


def test_the_largest_size_bound_by_hand():
    # sigma 10: the floor t = 10 z(1 - 0.01/48) = 35.29, t + 1.645 sigma = 51.74; the
    # widths from bin 14 on are 54, 74, ... >= 51.74 (bin 13's is 37), so f = 15 and
    # n_floor = ceil(2^7.5) - 1 = 181
    sigma = 10.0
    assert norm.isf(FLOOR_TAIL / 48) * sigma == pytest.approx(35.293, abs=1e-3)
    noisy = np.zeros(WIDTH)
    read = PrivateEstimates.read(noisy, sigma, "datapoint", declared=0)
    assert read.largest_size() == 181  # nothing seen: n_floor
    # a bin above the floor at [1024, 1448) (bin 20): the top of bin 21, ceil(2^11) - 1
    noisy[SIZE_SLICE.start + 20] = 36.0
    assert read.__class__.read(noisy, sigma, "datapoint", declared=0).largest_size() == 2047
    noisy[SIZE_SLICE.start + 20] = 35.0  # at the floor: not seen
    assert PrivateEstimates.read(noisy, sigma, "datapoint", declared=0).largest_size() == 181


def test_clients_below_the_floor_are_covered_by_the_bins_they_fill():
    # 100 clients of 40 points and 3 of 3,000: the 3 sit alone in the one-hot bin
    # [2896, 4096), far below any floor, but fill the rank bins below it
    sizes = np.array([40] * 100 + [3000] * 3)
    rows = client_rows(sizes, None, np.ones(sizes.sum()), np.repeat(np.arange(103), sizes),
                       level="datapoint")
    sums = rows.sum(axis=0)
    assert sums[SIZE_SLICE.start + 22] == 3 * 849  # [2048, 2896): 3 clients x 849 ranks
    read = PrivateEstimates.read(sums, 26.7, "datapoint", declared=0)
    # the top bin seen is [2896, 4096) itself (3 x 104 ranks of 2897..3000 = 312, above
    # the floor 26.7 x 3.53 = 94.3): the answer is the top of the bin above it,
    # [4096, 2^12.5 = 5792.6)
    assert read.largest_size() == 5792
    # the count: max_b (R_b - t) / w_b, at bin 9 ([22.6, 32), ranks 23..31 of all 103)
    t = 26.7 * norm.isf(FLOOR_TAIL / 48)
    count = (9 * 103 - t) / 9
    assert read.num_clients == pytest.approx(count)  # 92.5: a lower bound
    # clients at least as large: 103 (capped at the count) up to bin 9; bin 10 ([32,
    # 45.3), 14 ranks): 100 x 9 + 3 x 14 over 14; 3 up to bin 22; 3 x 104 / 1199 in 23
    edges, pmf = read.size_distribution()
    in_10 = (100 * 9 + 3 * 14) / 14
    assert pmf[9] == pytest.approx((count - in_10) / count)
    # bins 11 and 12 (3 x 18 and 3 x 27 ranks) are under the floor, read 0 and pool
    # with the bins above them at weights w_b^2: the 3 there read 0.01 % lower
    assert pmf[10] == pytest.approx((in_10 - 3) / count, rel=1e-4)
    assert pmf[22] == pytest.approx(3 * (1 - 104 / 1199) / count, rel=1e-3)
    assert pmf[23] == pytest.approx(3 * 104 / 1199 / count)
    assert pmf.sum() == pytest.approx(1.0)


def test_a_noise_bin_alone_never_sets_the_radius():
    # client level, 60 clients (below the floor of 2 x 18.9 x 3.4): one noise bin at
    # norm 0.044 above the floor must not become the data radius
    noisy = np.zeros(WIDTH)
    noisy[COUNT_SLOT] = 60.0
    noisy[NORM_SLICE.start + 62] = 140.0
    read = PrivateEstimates.read(noisy, 37.8, "client", declared=0)
    assert read.quantile("norms", 0.99) is None and read.outside_fraction(1.0) is None


def test_the_share_beyond_a_radius_is_read_like_the_quantiles():
    # 1,000 points in the norm bin [1, 2^0.25): half of it (log-linearly) beyond 2^0.125
    noisy = np.zeros(WIDTH)
    noisy[NORM_SLICE.start + 80] = 1000.0
    read = PrivateEstimates.read(noisy, 1.0, "datapoint", declared=0)
    assert read.outside_fraction(2**0.125) == pytest.approx(0.5)
    assert read.outside_fraction(2.0) == 0.0 and read.outside_fraction(0.5) == 1.0
    assert read.quantile("norms", 0.5) == pytest.approx(2**0.125)


def _estimate_rounds(sizes: np.ndarray, epsilon: float, rounds: int) -> list[PrivateEstimates]:
    """``rounds`` estimate rounds on clients of ``sizes`` through the real path.

    The stage's client rows (``NodeData.arithmetic.estimates``), the server's query, clip, fold and
    Gaussian release (``ESTIMATE.server`` on a ``ServerContext``, reproducible noise
    from seeds 0..rounds-1), the runner's calibrated release and ``PrivateEstimates``.
    """
    rng = np.random.default_rng(1)
    points = {j: rng.normal(size=(int(n), 2)) for j, n in enumerate(sizes)}
    config = parse_config({**AUTO, "privacy.level": "datapoint", "privacy.epsilon": epsilon,
                           "privacy.reproducible-noise": True}).protocol
    node = NodeData(config, np.arange(sizes.size), points, dict.fromkeys(points))
    federation = SimulatedFederation(points, 1.0, rng.normal(size=(20, 2)))
    release = estimate_release(config.privacy)
    out = []
    for seed in range(rounds):
        ctx = ServerContext.of(replace(config, seed=seed), SimulatedPool(node, federation),
                               federation.server_x, {release.stage: release}, progress=False)
        out.append(PrivateEstimates.read(ESTIMATE.server(ctx), noise_std(release),
                                         "datapoint", declared=0))
    return out


def test_heavy_tailed_sizes_are_not_under_estimated():
    # 400 Pareto(1.2) clients from 10 points: median 17, largest 2,286 (134 x the
    # median), the five largest 485 .. 2,286, each alone in its one-hot size bin, far
    # below the noise floor (94 at epsilon 1)
    sizes = np.floor(10 * (1 + np.random.default_rng(4).pareto(1.2, size=400))).astype(int)
    assert np.median(sizes) == 17 and sizes.max() == 2286
    rounds = _estimate_rounds(sizes, 1.0, 100)
    floor = noise_floor(rounds[0].sigma, 48)
    one_hot = np.bincount(np.floor(2 * np.log2(sizes)).astype(int), minlength=48)
    assert one_hot[np.floor(2 * np.log2(sizes.max())).astype(int)] == 1 < floor
    assert (one_hot[16:] < floor).all()  # every client of 256 points or more is hidden
    largest = np.array([r.largest_size() for r in rounds])
    assert (largest < sizes.max()).mean() <= MISS_PROBABILITY
    # the rank bins see it: the answer is the top of the bin above 2,286's,
    # [2896, 4096), in the rounds where no noise bin above the data is read
    assert np.median(largest) == 4095
    counts = np.array([r.num_clients for r in rounds])  # a lower bound w.p. >= 0.99
    assert (counts <= 400).mean() >= 0.99 and counts.min() > 0.8 * 400


def test_the_stated_share_beyond_the_radius_bounds_a_tail_the_floor_cleans_away():
    # 1,000 points in [1, 2^0.25) and 120 in a thin tail: 3 in each of the 40 bins from
    # norm 32 up, every one below the noise floor (sigma = 1), so the cleaned histogram
    # reads 0 % beyond 2.0 while 120 / 1,120 = 10.7 % of the points are there
    noisy = np.zeros(WIDTH)
    noisy[NORM_SLICE.start + 80] = 1000.0
    noisy[NORM_SLICE.start + 100:NORM_SLICE.start + 140] = 3.0
    read = PrivateEstimates.read(noisy, 1.0, "datapoint", declared=0)
    assert read.outside_fraction(2.0) == 0.0
    # 76 bins reach beyond 2.0 (upper edges above it), 160 in all; z = 1.96 (2.5 % each)
    z = 1.959963984540054
    hand = (120.0 + z * math.sqrt(76)) / (1120.0 - z * math.sqrt(160))
    assert read.outside_upper_bound(2.0) == pytest.approx(hand, rel=1e-12)
    assert read.outside_upper_bound(2.0) == pytest.approx(0.12517, abs=5e-5)
    assert read.outside_upper_bound(2.0) >= 120 / 1120
    # beyond every bin: only the noise allowance of no bin; below every bin: all of them
    assert read.outside_upper_bound(1e9) == 0.0
    assert read.outside_upper_bound(1e-9) == 1.0


def test_the_stated_share_is_not_below_the_truth_over_noise_draws():
    # the same histogram with the noise drawn 400 times: the bound may be below the
    # true share in at most 5 % of draws (here: in none, the union bound is loose)
    truth = np.zeros(WIDTH)
    truth[NORM_SLICE.start + 80] = 1000.0
    truth[NORM_SLICE.start + 100:NORM_SLICE.start + 140] = 3.0
    rng = np.random.default_rng(0)
    sigma = 5.0
    below = 0
    for _ in range(400):
        noisy = truth.copy()
        noisy[NORM_SLICE] += rng.normal(0.0, sigma, NORM_SLICE.stop - NORM_SLICE.start)
        bound = PrivateEstimates.read(noisy, sigma, "datapoint", declared=0)\
            .outside_upper_bound(2.0)
        below += bound is not None and bound < 120 / 1120
    assert below <= 0.05 * 400


def test_a_total_the_noise_hides_cannot_be_bounded():
    noisy = np.zeros(WIDTH)
    noisy[NORM_SLICE.start + 80] = 10.0
    read = PrivateEstimates.read(noisy, 5.0, "datapoint", declared=0)
    assert read.outside_upper_bound(2.0) is None  # 10 - 1.96 x 5 x sqrt(160) < 0
