"""The swap repair of k-means answers: a hand-computed merge undone, never a higher cost."""

import numpy as np
import pytest

from fedkmeans.clustering.repair import lloyd, swap_repair, weighted_cost
from fedkmeans.stages.check import server_only_centers

# two points at x = -100, two at x = 10, one alone at x = 20
POINTS = np.array([[-100.0, 0.0], [-100.0, 2.0], [10.0, 0.0], [10.0, 2.0], [20.0, 1.0]])
# a Lloyd fixed point: the pair at -100 split, the pair at 10 merged with the lone point
MERGED = np.array([[-100.0, 0.0], [-100.0, 2.0], [40.0 / 3.0, 1.0]])


def test_lloyd_keeps_the_merged_fixed_point():
    np.testing.assert_allclose(lloyd(POINTS, np.ones(5), MERGED), MERGED)
    # (10 - 40/3)^2 * 2 + 1 + 1 + (20 - 40/3)^2 = 200/9 + 2 + 400/9
    assert weighted_cost(POINTS, np.ones(5), MERGED) == pytest.approx(200 / 9 + 2 + 400 / 9)


def test_the_swap_moves_the_idle_center_to_the_costliest_point():
    # the costliest point is (20, 1) (400/9); the centers at -100 each cost 4 to remove
    # (their point's second nearest center), the merged one far more: (-100, 0) moves to
    # (20, 1), and Lloyd ends at the pair -100, the pair 10 and the lone point, cost 4.
    # A second swap (the lone point's center, removal 100, to (-100, 0)) costs more.
    repaired = swap_repair(POINTS, MERGED)
    expected = np.array([[20.0, 1.0], [-100.0, 1.0], [10.0, 1.0]])
    np.testing.assert_allclose(repaired, expected)
    assert weighted_cost(POINTS, np.ones(5), repaired) == pytest.approx(4.0)


def test_a_weight_counts_as_that_many_copies():
    weights = np.array([1.0, 1.0, 2.0, 2.0, 1.0])
    copies = POINTS[[0, 1, 2, 2, 3, 3, 4]]
    np.testing.assert_allclose(swap_repair(POINTS, MERGED, weights),
                               swap_repair(copies, MERGED))


@pytest.mark.parametrize("seed", range(5))
def test_the_repair_never_raises_the_cost(seed):
    rng = np.random.default_rng(seed)
    x = np.vstack([rng.normal(size=(n, 4)) + rng.uniform(-10, 10, 4)
                   for n in (2, 50, 200, 30, 5)])
    w = rng.uniform(0.0, 3.0, x.shape[0])
    start = x[rng.choice(x.shape[0], 5, replace=False)]
    assert weighted_cost(x, w, swap_repair(x, start, w)) <= weighted_cost(x, w, start)
    # k = 1 and as many points as centers: nothing to swap
    np.testing.assert_array_equal(swap_repair(x, x[:1]), x[:1])
    np.testing.assert_array_equal(swap_repair(x[:3], x[:3]), x[:3])


def test_the_server_only_answer_finds_the_lone_far_point():
    # k-means++ restarts may or may not isolate the lone point; the answer does
    centers = server_only_centers(POINTS, 3, seed=0)
    assert weighted_cost(POINTS, np.ones(5), centers) == pytest.approx(4.0)
