"""Tests for the (non-private) evaluation metrics (fedkmeans.metrics)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import (
    adjusted_rand_score,
    fowlkes_mallows_score,
    normalized_mutual_info_score,
)

from fedkmeans.clustering.distances import squared_distances
from fedkmeans.clustering.optimal import optimal_cost
from fedkmeans.metrics import (
    adjusted_rand_index,
    assign,
    contingency,
    fowlkes_mallows_index,
    hungarian_accuracy,
    kmeans_cost,
    normalized_mutual_info,
)

# Four points, two centers, all by hand.
X4 = np.array([[0.0, 0.0], [1.0, 0.0], [4.0, 4.0], [5.0, 5.0]])
C2 = np.array([[0.0, 1.0], [4.0, 5.0]])


def test_squared_distances_by_hand() -> None:
    expected = np.array(
        [
            [1.0, 41.0],  # (0,0): to (0,1) -> 1; to (4,5) -> 16+25
            [2.0, 34.0],  # (1,0): 1+1; 9+25
            [25.0, 1.0],  # (4,4): 16+9; 0+1
            [41.0, 1.0],  # (5,5): 25+16; 1+0
        ]
    )
    assert np.allclose(squared_distances(X4, C2), expected, atol=1e-12)


def test_assign_and_cost_by_hand() -> None:
    assert np.array_equal(assign(X4, C2), [0, 0, 1, 1])
    assert assign(X4, C2).dtype == np.int64
    # (1 + 2 + 1 + 1) / 4
    assert kmeans_cost(X4, C2) == pytest.approx(1.25, abs=1e-12)
    # Single center at the origin: (0 + 1 + 32 + 50) / 4
    assert kmeans_cost(X4, np.zeros((1, 2))) == pytest.approx(20.75, abs=1e-12)


def test_squared_distances_non_negative_for_identical_points() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 30)) * 1e4 + 1e6
    d2 = squared_distances(x, x[:5])
    # |x|^2 ~ 3e13 here, so the expanded formula loses ~1e-2 absolute; it must not go < 0.
    assert d2.min() >= 0.0
    assert np.allclose(d2[np.arange(5), np.arange(5)], 0.0, atol=1.0)


def test_the_cost_in_row_chunks_matches_direct(monkeypatch: pytest.MonkeyPatch) -> None:
    from fedkmeans import metrics

    rng = np.random.default_rng(1)
    x, c = rng.normal(size=(103, 7)), rng.normal(size=(4, 7))
    direct = ((x[:, None, :] - c[None, :, :]) ** 2).sum(-1).min(axis=1).mean()
    assert kmeans_cost(x, c) == pytest.approx(direct, abs=1e-12)
    monkeypatch.setattr(metrics, "_CHUNK_ENTRIES", 20)  # 2-row chunks
    assert kmeans_cost(x, c) == pytest.approx(direct, abs=1e-12)


def test_assign_is_the_clients_nearest_center(monkeypatch: pytest.MonkeyPatch) -> None:
    from fedkmeans import metrics
    from fedkmeans.clustering.client_stats import nearest_center

    rng = np.random.default_rng(2)
    x = rng.normal(size=(257, 5)) * 100.0
    c = np.vstack([x[:6], x[:2]])  # points on centers, duplicate centers: ties
    monkeypatch.setattr(metrics, "_CHUNK_ENTRIES", 24)  # 3-row chunks
    np.testing.assert_array_equal(assign(x, c), nearest_center(x, c))
    assert assign(x, c)[:2].tolist() == [0, 1]  # ties go to the lowest index


def test_distance_validation() -> None:
    with pytest.raises(ValueError, match="x must be a 2-D"):
        kmeans_cost(np.zeros(3), C2)
    with pytest.raises(ValueError, match="centers"):
        kmeans_cost(X4, np.zeros((0, 2)))
    with pytest.raises(ValueError, match="same dimension"):
        assign(X4, np.zeros((2, 3)))


def test_contingency_table() -> None:
    labels = np.array([0, 0, 1, 1, 1, 2])
    clusters = np.array([1, 1, 0, 0, 1, 2])
    values, table = contingency(labels, clusters, 3)
    assert np.array_equal(values, [0, 1, 2])
    assert table.dtype == np.int64
    assert np.array_equal(table, [[0, 2, 0], [2, 1, 0], [0, 0, 1]])


def test_contingency_fixed_label_values_allow_summing() -> None:
    values = np.array([5, -1, 2])  # custom row order, includes a label absent on client a
    _, ta = contingency(np.array([5, 5, 2]), np.array([0, 1, 1]), 2, label_values=values)
    _, tb = contingency(np.array([-1, 2]), np.array([0, 0]), 2, label_values=values)
    assert np.array_equal(ta, [[1, 1], [0, 0], [0, 1]])
    assert np.array_equal(tb, [[0, 0], [1, 0], [1, 0]])
    total = ta + tb
    _, pooled = contingency(
        np.array([5, 5, 2, -1, 2]), np.array([0, 1, 1, 0, 0]), 2, label_values=values
    )
    assert np.array_equal(total, pooled)


def test_contingency_validation() -> None:
    with pytest.raises(ValueError, match="label_values"):
        contingency(np.array([0, 3]), np.array([0, 0]), 1, label_values=np.array([0, 1]))
    with pytest.raises(ValueError, match="n_clusters"):
        contingency(np.array([0, 1]), np.array([0, 2]), 2)
    with pytest.raises(ValueError, match="n_clusters"):
        contingency(np.array([0]), np.array([0]), 0)
    with pytest.raises(ValueError, match="labels and assignments"):
        contingency(np.array([0, 1]), np.array([0]), 2)
    with pytest.raises(ValueError, match="label_values"):
        contingency(np.array([0]), np.array([0]), 1, label_values=np.array([0, 0]))


def test_hungarian_accuracy_hand_table() -> None:
    # Best matching: label0->cluster0 (5), label1->cluster1 (4): 9 / 10.
    assert hungarian_accuracy(np.array([[5, 0], [1, 4]])) == pytest.approx(0.9)
    # Permuted clusters: best matching is the anti-diagonal: (6 + 3) / 12.
    assert hungarian_accuracy(np.array([[1, 6], [3, 2]])) == pytest.approx(0.75)


def test_hungarian_accuracy_non_square() -> None:
    # 2 labels, 3 clusters: label0->cluster2 (4), label1->cluster0 (3): 7 / 11.
    table = np.array([[1, 0, 4], [3, 2, 1]])
    assert hungarian_accuracy(table) == pytest.approx(7 / 11)
    # 3 labels, 1 cluster: only one label can be matched: 5 / 9.
    assert hungarian_accuracy(np.array([[2], [5], [2]])) == pytest.approx(5 / 9)


def test_hungarian_accuracy_validation() -> None:
    with pytest.raises(ValueError, match="table"):
        hungarian_accuracy(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="table"):
        hungarian_accuracy(np.array([1, 2]))


def _assert_matches_sklearn(table, labels, clusters) -> None:
    """ARI, NMI and FMI of a contingency table against scikit-learn's on the labels."""
    assert adjusted_rand_index(table) == pytest.approx(
        adjusted_rand_score(labels, clusters), abs=1e-10
    )
    assert normalized_mutual_info(table) == pytest.approx(
        normalized_mutual_info_score(labels, clusters), abs=1e-12
    )
    assert fowlkes_mallows_index(table) == pytest.approx(
        fowlkes_mallows_score(labels, clusters), abs=1e-12
    )


@pytest.mark.parametrize("trial", range(12))
def test_ari_nmi_match_sklearn(trial: int) -> None:
    rng = np.random.default_rng(trial)
    n = int(rng.integers(2, 400))
    n_labels, n_clusters = int(rng.integers(1, 8)), int(rng.integers(1, 8))
    labels = rng.integers(0, n_labels, size=n)
    clusters = rng.integers(0, n_clusters, size=n)
    if trial % 3 == 0:
        # Correlated labelings (mostly agree).
        clusters = np.where(rng.random(n) < 0.8, labels % n_clusters, clusters)
    _, table = contingency(labels, clusters, n_clusters)
    _assert_matches_sklearn(table, labels, clusters)


@pytest.mark.parametrize(
    ("labels", "clusters"),
    [
        ([0, 0, 1, 1], [1, 1, 0, 0]),  # identical up to permutation
        ([0, 0, 0, 0], [0, 0, 0, 0]),  # one class, one cluster
        ([0, 0, 0, 0], [0, 1, 2, 3]),  # one class split into singletons
        ([0, 1, 2, 3], [0, 1, 2, 3]),  # all singletons
        ([0, 0, 1, 1], [0, 1, 0, 1]),  # independent
        ([3], [0]),  # a single point
        ([0, 1, 2, 3], [0, 0, 0, 0]),  # one cluster, several labels
        ([0, 0, 1, 1, 2, 2], [0, 0, 0, 1, 1, 1]),  # ties in the margins
        ([], []),  # no point
    ],
)
def test_ari_nmi_degenerate_cases(labels: list[int], clusters: list[int]) -> None:
    lab, clu = np.array(labels), np.array(clusters)
    _, table = contingency(lab, clu, int(clu.max()) + 1 if clu.size else 1)
    assert adjusted_rand_index(table) == pytest.approx(adjusted_rand_score(lab, clu), abs=1e-10)
    assert normalized_mutual_info(table) == pytest.approx(
        normalized_mutual_info_score(lab, clu), abs=1e-12
    )
    assert fowlkes_mallows_index(table) == pytest.approx(
        fowlkes_mallows_score(lab, clu), abs=1e-12
    )


def test_fowlkes_mallows_hand_table() -> None:
    # labels (rows) a = (3, 3), clusters (columns) b = (2, 4); pairs together in both:
    # C(2,2) + C(1,2) + C(0,2) + C(3,2) = 1 + 0 + 0 + 3 = 4; sharing a label: 3 + 3 = 6;
    # sharing a cluster: C(2,2) + C(4,2) = 1 + 6 = 7; FMI = 4 / sqrt(6 * 7)
    table = np.array([[2, 1], [0, 3]])
    assert fowlkes_mallows_index(table) == pytest.approx(0.6172133998483676, abs=1e-15)
    # no pair together in both: 0, as scikit-learn
    assert fowlkes_mallows_index(np.array([[1, 1], [1, 1]])) == 0.0
    assert fowlkes_mallows_index(np.array([[1, 0], [0, 1]])) == 0.0


def test_scores_ignore_empty_rows_and_columns() -> None:
    labels = np.array([0, 0, 1, 1, 2, 2, 2])
    clusters = np.array([0, 0, 1, 1, 1, 3, 3])
    _, table = contingency(labels, clusters, 5, label_values=np.array([0, 1, 2, 9]))
    assert table.shape == (4, 5)
    assert adjusted_rand_index(table) == pytest.approx(
        adjusted_rand_score(labels, clusters), abs=1e-10
    )
    assert normalized_mutual_info(table) == pytest.approx(
        normalized_mutual_info_score(labels, clusters), abs=1e-12
    )


@pytest.mark.parametrize("trial", range(6))
def test_nmi_of_float_tables_from_nodes_equals_sklearn(trial: int) -> None:
    # The nodes send their tables as float64 counts (fedkmeans/node.py, evaluate).
    rng = np.random.default_rng(100 + trial)
    labels = rng.integers(0, 5, size=1000)
    clusters = np.where(rng.random(1000) < 0.6, labels, rng.integers(0, 6, size=1000))
    _, table = contingency(labels, clusters, 6, label_values=np.arange(7))
    assert normalized_mutual_info(table.astype(np.float64)) == pytest.approx(
        normalized_mutual_info_score(labels, clusters), abs=1e-12
    )


def test_nmi_refuses_what_sklearn_would_get_wrong() -> None:
    with pytest.raises(ValueError, match="integer counts"):
        normalized_mutual_info(np.array([[1.5, 0.0], [0.0, 2.0]]))
    # Row total x column total would overflow int64 in sklearn's mutual_info_score.
    with pytest.raises(ValueError, match="at most"):
        normalized_mutual_info(np.array([[2e9, 1e9], [1e9, 2e9]]))


def test_summed_client_tables_equal_pooled_scores() -> None:
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 4, size=300)
    clusters = np.where(rng.random(300) < 0.7, labels, rng.integers(0, 4, size=300))
    values = np.arange(4)
    parts = np.array_split(np.arange(300), 3)
    total = sum(contingency(labels[p], clusters[p], 4, label_values=values)[1] for p in parts)
    _assert_matches_sklearn(total, labels, clusters)
    assert hungarian_accuracy(total) == pytest.approx(np.mean(labels == clusters))


def test_optimal_cost_separated_blobs() -> None:
    # Two tight blobs, far apart: optimum is the two blob means.
    x = np.array([[0.0, 0.0], [0.0, 2.0], [100.0, 0.0], [100.0, 2.0]])
    cost, centers = optimal_cost(x, 2, seed=3)
    assert cost == pytest.approx(1.0)  # every point is 1 away from its blob mean
    assert np.allclose(np.sort(centers[:, 0]), [0.0, 100.0])
    assert np.allclose(centers[:, 1], 1.0)


def test_optimal_cost_deterministic_and_validated() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 3))
    a = optimal_cost(x, 4, seed=1, n_init=3)
    b = optimal_cost(x, 4, seed=1, n_init=3)
    assert a[0] == b[0] and np.array_equal(a[1], b[1])
    assert a[0] == pytest.approx(kmeans_cost(x, a[1]))
    with pytest.raises(ValueError, match="k"):
        optimal_cost(x, 0, seed=0)
    with pytest.raises(ValueError, match="n_init"):
        optimal_cost(x, 2, seed=0, n_init=0)
    with pytest.raises(ValueError, match="seed"):
        optimal_cost(x, 2, seed=-1)
    with pytest.raises(ValueError, match="at least k"):
        optimal_cost(x[:2], 3, seed=0)
