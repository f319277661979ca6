"""A toy attack in one file: an observer that counts what the server sees.

``attack=round-counter`` adds a ``round_counter`` section to the result: the rounds
whose broadcast, replies and releases the server saw, from the declared hooks of
:class:`fedkmeans.server.observer.RunObserver`. Importing this file registers it.
"""

from fedkmeans.experiment.registries import Attack, register_attack
from fedkmeans.server.observer import RunObserver


class RoundCounter(RunObserver):
    """Counts broadcasts, replies and releases, and the rows it was shown."""

    result_key = "round_counter"
    wants_client_rows = True

    def __init__(self):
        self.started = False
        self.broadcasts, self.replies, self.releases, self.rows = [], [], [], 0

    def on_start(self, config):
        self.started = True

    def on_broadcast(self, round_name, arrays, clients):
        self.broadcasts.append(round_name)

    def on_client_rows(self, round_name, client_ids, rows):
        self.rows += len(client_ids)

    def on_replies(self, round_name, replies):
        self.replies.append(round_name)

    def on_release(self, stage, before, after):
        self.releases.append(stage)

    def report(self, *, centers, result):
        return {"started": self.started, "broadcasts": self.broadcasts,
                "replies": self.replies, "releases": self.releases, "rows": self.rows}

    def summary_lines(self, report):
        return [f"{len(report['replies'])} rounds, {report['rows']} client rows seen"]


ROUND_COUNTER = register_attack(Attack(
    "round-counter", lambda config: [RoundCounter()],
    "counts the rounds and rows the server sees"))
