"""FedDP-KMeans: differentially private federated k-means with server-side data.

``fedkmeans.FedDPKMeans`` is the scikit-learn estimator (:mod:`fedkmeans.estimator`),
imported on first use so that ``import fedkmeans`` stays light; the Flower strategies
are :mod:`fedkmeans.strategies`, the client side a ClientApp mounts
:func:`fedkmeans.client.mount`.
"""

__all__ = ["FedDPKMeans"]


def __getattr__(name: str):
    if name == "FedDPKMeans":
        from fedkmeans.estimator import FedDPKMeans

        return FedDPKMeans
    raise AttributeError(f"module 'fedkmeans' has no attribute {name!r}")
