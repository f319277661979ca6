"""A Flower user's app: FedDP-KMeans on their own data (docs/library.md)."""
