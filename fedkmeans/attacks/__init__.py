"""Curious-server attack suite: observe an honest protocol, attack what was seen.

Pure NumPy (no Flower import). Each module names its threat model (DESIGN.md §5) and
success metric:

* :mod:`~fedkmeans.attacks.reconstruction`: client reconstruction from one reply;
* :mod:`~fedkmeans.attacks.differencing`: a point (or client) from two releases;
* :mod:`~fedkmeans.attacks.membership`: likelihood-ratio and cost-based membership;
* :mod:`~fedkmeans.attacks.label_inference`: an outsider recovering the partition;
* :mod:`~fedkmeans.attacks.game`: the neighbouring-worlds game that runs them;
* :mod:`~fedkmeans.attacks.curious`: the curious server (observer + report);
* :mod:`~fedkmeans.attacks.scoring`: cosine, relative error, ROC AUC, TPR at low FPR.

The privacy audit (canary game, Clopper-Pearson lower bound on epsilon) is
:mod:`fedkmeans.audit`.
"""

from fedkmeans.attacks.curious import AttackSettings, CuriousServer, build_curious_server

__all__ = ["AttackSettings", "CuriousServer", "build_curious_server"]
