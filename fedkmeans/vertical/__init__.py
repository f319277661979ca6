"""Vertical federated k-means with local DP on the distance reports, and its attack.

H parties hold the same n samples (ids aligned beforehand) and disjoint slices of the
d features; the server holds no features. Each iteration every party reports, for
every sample, the squared distances from its slice to its slice of the k centers
(an ``(n, k)`` matrix); the server sums the H reports, assigns each sample to the
nearest center and sends the labels back; each party updates its slice of the centers.

Modules (all pure NumPy/SciPy except the two Flower apps):

- :mod:`~fedkmeans.vertical.config` -- validated run configuration;
- :mod:`~fedkmeans.vertical.data` -- real offline data sets, one feature slice per party;
- :mod:`~fedkmeans.vertical.protocol` -- distances, assignment, center updates, Lloyd;
- :mod:`~fedkmeans.vertical.defence` -- fusion, discretisation, Gap-RR and k-ary GRR;
- :mod:`~fedkmeans.vertical.accounting` -- exact per-value privacy loss (O(Q) memory)
  and per-sample composition (basic, advanced, and the optimum by dp-accounting's PLD);
- :mod:`~fedkmeans.vertical.attack` -- least-squares trilateration, unfolding,
  Procrustes alignment, reconstruction error;
- :mod:`~fedkmeans.vertical.metrics` -- F-measure (and ARI via :mod:`fedkmeans.metrics`);
- :mod:`~fedkmeans.vertical.server_app`, :mod:`~fedkmeans.vertical.client_app` -- the
  Flower app (``apps/vertical``); :mod:`~fedkmeans.vertical.experiment` runs it.
"""
