"""Curious-server attack suite: observe an honest protocol, attack what was seen.

Each module names its threat model (docs/attacks.md) and success metric. The
observers and the attacks on what they saw are pure NumPy (no Flower import):

* :mod:`~fedkmeans.attacks.reconstruction`: client reconstruction from one reply;
* :mod:`~fedkmeans.attacks.differencing`: a point (or client) from two releases;
* :mod:`~fedkmeans.attacks.membership`: likelihood-ratio and cost-based membership;
* :mod:`~fedkmeans.attacks.label_inference`: an outsider recovering the partition;
* :mod:`~fedkmeans.attacks.game`: the neighbouring-worlds game that runs them;
* :mod:`~fedkmeans.attacks.curious`: the curious server (observer + report);
* :mod:`~fedkmeans.attacks.scoring`: cosine, relative error, ROC AUC, TPR at low FPR;
* :mod:`~fedkmeans.attacks.bounds`: Clopper-Pearson and the epsilon lower bound.

Two modules drive the real server code instead (and so import it):

* :mod:`~fedkmeans.attacks.release_audit`: worst-case neighbours through the server's
  release path (clip, sum, calibration, mechanism);
* :mod:`~fedkmeans.attacks.resimulation`: the analyst who replays a run from its
  published ``release.json`` and compares centers bit for bit.

The command line of the audits (canary game and release path) is :mod:`fedkmeans.experiment.audit`.

Importing this package registers the built-in attacks (``attack = none | curious``;
:data:`fedkmeans.experiment.registries.ATTACKS`, :class:`~fedkmeans.experiment.registries.Attack`).
"""

from fedkmeans.attacks.curious import AttackSettings, CuriousObserver, build_curious_server
from fedkmeans.experiment.registries import Attack, register_attack

#: ``attack = none``: the honest server alone.
NONE = register_attack(Attack("none", lambda config: [], "the honest server alone"))
#: ``attack = curious``: the honest protocol, run by a server that also records every
#: reply and aggregate and runs the attacks (:mod:`fedkmeans.attacks.curious`).
CURIOUS = register_attack(Attack(
    "curious", lambda config: [build_curious_server(config)],
    "the honest protocol run by a curious server that records every reply and attacks"))

__all__ = ["CURIOUS", "NONE", "AttackSettings", "CuriousObserver", "build_curious_server"]
