"""The algorithms: FedDP-KMeans, k-FED and the server-data baselines, by name."""

from fedkmeans.algorithms.feddp_kmeans import FedDPKMeans
from fedkmeans.algorithms.kfed import KFed
from fedkmeans.algorithms.server_baselines import (
    NonPrivateLloyds,
    ServerKMeansPlusPlus,
    ServerLloyds,
    SpherePacking,
)
from fedkmeans.server.context import ServerContext, Strategy

STRATEGIES: dict[str, type[Strategy]] = {
    cls.name: cls
    for cls in (FedDPKMeans, KFed, ServerKMeansPlusPlus, ServerLloyds, SpherePacking,
                NonPrivateLloyds)
}


def build_strategy(algorithm: str) -> Strategy:
    """Return the strategy for an ``algorithm`` name (validated by the config)."""
    return STRATEGIES[algorithm]()


__all__ = ["STRATEGIES", "ServerContext", "Strategy", "build_strategy"]
