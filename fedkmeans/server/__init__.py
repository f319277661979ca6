"""The server's side of a round, shared by every algorithm.

The client pool, the folding of replies, the release context, the noise-relative
thresholds, the observers' window and secure aggregation.
"""
