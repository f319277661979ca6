"""The server's side of a round, shared by every algorithm: the client pool, the
folding of replies, the release context and secure aggregation."""
