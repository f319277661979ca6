"""Hydra configs: ``config.yaml`` and the groups, some of them generated.

Stored in Hydra's ``ConfigStore`` when this package is imported:

* ``base``: every key with its default (:func:`fedkmeans.experiment.config.hand_defaults`, the
  paper's hand settings; ``tuning=auto``, the default, sets the ``auto`` ones), the
  first entry of ``config.yaml``'s defaults list, so a key is declared once, in
  :mod:`fedkmeans.config`;
* the ``dataset`` group: one option per preset of every registered data set
  (:meth:`fedkmeans.data.catalog.Dataset.options`), also for a data set registered
  later, so a data set's module is the only place that names its options.
"""

from __future__ import annotations

from hydra.core.config_store import ConfigStore

from fedkmeans.config import nested_config
from fedkmeans.data import catalog
from fedkmeans.experiment.config import hand_defaults

#: The groups whose options are generated here (no directory of their own).
GENERATED_GROUPS = ("dataset",)


def _store_dataset(spec: catalog.Dataset) -> None:
    for option, keys in spec.options().items():
        ConfigStore.instance().store(group="dataset", name=option, node=nested_config(keys),
                                     package="_global_")


ConfigStore.instance().store(name="base", node=nested_config(hand_defaults()))
catalog.subscribe(_store_dataset)
