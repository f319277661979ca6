"""FedDP-KMeans and its baselines as Flower strategies (the design card's ``strategies``).

Each is a :class:`~fedkmeans.strategies.base.KMeansStrategy` (on Flower 1.42's
Message-API base, ``flwr.serverapp.strategy.Strategy``) for one registered algorithm::

    result = FedDPKMeansStrategy(n_clusters=3, epsilon=1.0, server_data=Q).start(grid=grid)
    centers = result.arrays["centers"].numpy()

The nodes' ClientApp mounts the client side (:func:`fedkmeans.client.mount`). The
curious server wraps any of them (:class:`fedkmeans.attacks.strategy.CuriousServer`).
docs/library.md shows a whole user app.
"""

from __future__ import annotations

from fedkmeans.strategies.base import KMeansResult, KMeansStrategy

__all__ = ["FedDPKMeansStrategy", "KFed", "KMeansResult", "KMeansStrategy",
           "LloydsNonPrivate", "STRATEGIES", "ServerKMeansPP", "ServerLloyds", "SpherePacking"]


class FedDPKMeansStrategy(KMeansStrategy):
    """FedDP-KMeans: FedDP-Init's three private rounds, FedDP-Lloyds, the final choice."""

    algorithm = "feddp-kmeans"


class ServerLloyds(KMeansStrategy):
    """Baseline: k-means (10 restarts) on the server's data, then FedDP-Lloyds."""

    algorithm = "server-lloyds"


class ServerKMeansPP(KMeansStrategy):
    """Baseline: k-means++ seeding on the server's data, then FedDP-Lloyds."""

    algorithm = "server-kmeans++"


class SpherePacking(KMeansStrategy):
    """Baseline: data-independent centers in the public bounding box, then FedDP-Lloyds."""

    algorithm = "sphere-packing"


class LloydsNonPrivate(KMeansStrategy):
    """Reference, NOT private: k-means++ on Q, then exact Lloyd steps."""

    algorithm = "lloyds-nonprivate"


class KFed(KMeansStrategy):
    """k-FED (NOT private): cluster the union of the clients' local k-means centers."""

    algorithm = "kfed"


#: Algorithm name (:data:`fedkmeans.plugins.ALGORITHMS`) -> its strategy class.
STRATEGIES: dict[str, type[KMeansStrategy]] = {
    cls.algorithm: cls for cls in (FedDPKMeansStrategy, ServerLloyds, ServerKMeansPP,
                                   SpherePacking, LloydsNonPrivate, KFed)}
