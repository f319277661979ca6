"""The estimate round: bins by hand, sensitivities, the read-off, and a run that uses it."""

import math

import numpy as np
import pytest
from scipy.stats import norm

from fedkmeans.config import parse_config
from fedkmeans.experiment import run_flat
from fedkmeans.privacy.budget import UNDECLARED_MAX_POINTS
from fedkmeans.privacy.registry import GAUSSIAN
from fedkmeans.stages import statistic_bounds
from fedkmeans.stages.estimate import (
    COUNT_SLOT,
    MOMENT_SLICE,
    NORM_SLICE,
    SIZE_SLICE,
    WIDTH,
    bin_edges,
    client_rows,
    estimate_noise_multiplier,
)
from fedkmeans.tuning.estimates import FLOOR_TAIL, PrivateEstimates, cleaned, read_quantile

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
    # data-point level: counts, no moments
    rows = client_rows(sizes, None, np.array([1.0, 2.0, 2.0]), np.array([0, 0, 0]),
                       level="datapoint")
    assert rows[0, NORM_SLICE][[80, 84]].tolist() == [1.0, 2.0]
    assert rows[:, MOMENT_SLICE].sum() == 0
    assert bin_edges("sizes")[3] == pytest.approx(2**1.5)


@pytest.mark.parametrize("level,expected", [("datapoint", math.sqrt(3)), ("client", 2.0)])
def test_the_sensitivity_is_the_derived_one(level, expected):
    privacy = parse_config({"privacy.level": level, **AUTO}).privacy
    bound = statistic_bounds(privacy)["estimates"]
    assert bound.l2_sensitivity == pytest.approx(expected)
    if level == "datapoint":  # max-points-per-client auto: the public re-clip
        assert bound.server_bound == pytest.approx(UNDECLARED_MAX_POINTS * math.sqrt(3))


def test_one_point_moves_a_data_point_row_by_at_most_sqrt3():
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(300):
        n = int(rng.integers(0, 70))
        norms = np.exp(rng.normal(size=n + 1) * 3)
        before = client_rows(np.array([n]), None, norms[:n], np.zeros(n, np.int64),
                             level="datapoint")
        after = client_rows(np.array([n + 1]), None, norms, np.zeros(n + 1, np.int64),
                            level="datapoint")
        worst = max(worst, float(np.linalg.norm(after - before)))
    assert worst <= math.sqrt(3) + 1e-12 and worst > 1.7  # the bound is reached


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


def test_the_count_is_the_release_at_client_level_and_public_at_data_point_level():
    noisy = np.zeros(WIDTH)
    noisy[COUNT_SLOT] = 57.3
    client = PrivateEstimates.read(noisy, 3.0, "client", declared=0, registered=60)
    assert client.num_clients == 57.3 and "noisy count" in client.num_clients_from
    point = PrivateEstimates.read(noisy, 3.0, "datapoint", declared=0, registered=60)
    assert point.num_clients == 60.0
    declared = PrivateEstimates.read(noisy, 3.0, "client", declared=100, registered=60)
    assert declared.num_clients == 100.0


def test_the_estimate_round_decides_too_few_clients_relative_to_its_noise():
    # the count slot's floor is sigma * z_1 (z_1 = the 0.99 normal quantile): 23.26 at
    # sigma = 10; the rule reads the noisy count at client level only
    noisy = np.zeros(WIDTH)
    for count, few in ((23.0, True), (23.5, False)):
        noisy[COUNT_SLOT] = count
        client = PrivateEstimates.read(noisy, 10.0, "client", declared=0, registered=500)
        assert client.too_few_clients is few
    point = PrivateEstimates.read(noisy, 10.0, "datapoint", declared=0, registered=5)
    assert not point.too_few_clients  # the unit is a point there
    declared = PrivateEstimates.read(noisy, 10.0, "client", declared=5, registered=500)
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


def test_a_noise_bin_alone_never_sets_the_largest_size():
    # 100 clients of 1,000 points: their size bin hidden below the floor, one noise bin
    # at 2 points above it (the failure this rule guards against)
    noisy = np.zeros(WIDTH)
    sigma = 32.7
    noisy[SIZE_SLICE.start + 1] = 120.0   # a noise bin at sizes [1.41, 2), above the floor
    noisy[SIZE_SLICE.start + 19] = 90.0   # the real bin [724, 1024): below the floor
    noisy[NORM_SLICE.start + 80] = 100_000.0  # the points' total
    read = PrivateEstimates.read(noisy, sigma, "datapoint", declared=0, registered=100)
    assert read.largest_size() == 1000  # the mean size, not 2
    edges, pmf = read.size_distribution()
    assert pmf[19] == 1.0 and edges[19] <= 1000 < edges[20]
    # when the bins hold the clients, the top occupied bin's upper edge
    noisy[SIZE_SLICE.start + 19] = 205.0
    noisy[SIZE_SLICE.start + 1] = 0.0
    noisy[NORM_SLICE.start + 80] = 200_000.0
    read = PrivateEstimates.read(noisy, sigma, "datapoint", declared=0, registered=200)
    assert read.largest_size() == 1024
    # fewer clients than the noise floor (3.53 sigma = 115.6): the bins are not used
    read = PrivateEstimates.read(noisy, sigma, "datapoint", declared=0, registered=100)
    assert not read.usable("sizes") and read.largest_size() == 2000


def test_a_noise_bin_alone_never_sets_the_radius():
    # client level, 60 clients (below the floor of 2 x 18.9 x 3.4): one noise bin at
    # norm 0.044 above the floor must not become the data radius
    noisy = np.zeros(WIDTH)
    noisy[COUNT_SLOT] = 60.0
    noisy[NORM_SLICE.start + 62] = 140.0
    read = PrivateEstimates.read(noisy, 37.8, "client", declared=0, registered=60)
    assert read.quantile("norms", 0.99) is None and read.outside_fraction(1.0) is None


def test_the_share_beyond_a_radius_is_read_like_the_quantiles():
    # 1,000 points in the norm bin [1, 2^0.25): half of it (log-linearly) beyond 2^0.125
    noisy = np.zeros(WIDTH)
    noisy[NORM_SLICE.start + 80] = 1000.0
    read = PrivateEstimates.read(noisy, 1.0, "datapoint", declared=0, registered=10)
    assert read.outside_fraction(2**0.125) == pytest.approx(0.5)
    assert read.outside_fraction(2.0) == 0.0 and read.outside_fraction(0.5) == 1.0
    assert read.quantile("norms", 0.5) == pytest.approx(2**0.125)
