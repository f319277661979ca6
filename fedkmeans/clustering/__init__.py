"""Pure NumPy k-means maths: client statistics and server steps (no Flower, no noise)."""

from fedkmeans.clustering.client_stats import (
    cluster_sums_counts,
    local_kmeans_centers,
    outer_product_sum,
    projected_histogram,
)
from fedkmeans.clustering.server_steps import (
    centers_from_sums,
    eigen_gap,
    kmeans,
    kmeans_plus_plus,
    merge_centers,
    server_estimate,
    sphere_packing_centers,
    supported_eigenvectors,
    top_eigenvectors,
    usable_weights,
    weighted_kmeans,
)

__all__ = [
    "cluster_sums_counts",
    "local_kmeans_centers",
    "outer_product_sum",
    "projected_histogram",
    "centers_from_sums",
    "eigen_gap",
    "kmeans",
    "kmeans_plus_plus",
    "merge_centers",
    "server_estimate",
    "sphere_packing_centers",
    "supported_eigenvectors",
    "usable_weights",
    "top_eigenvectors",
    "weighted_kmeans",
]
