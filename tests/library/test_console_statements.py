"""The console's statements say only what is so (issue 50): a bound that says something,
a round count it knows, a fallback said once per run."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from fedkmeans.clustering.server_steps import usable_weights
from fedkmeans.config import parse_protocol
from fedkmeans.statements import INFORMATIVE_BOUND, clipping_summary


class _Estimates:
    """The estimate round's release, read: a fixed 95 % upper bound on the clipped share."""

    def __init__(self, bound):
        self.bound = bound

    def outside_upper_bound(self, radius):
        return self.bound


@pytest.mark.parametrize("bound, said", [
    (0.02, "at most 2.0% of the points (95% private upper bound)"),
    (INFORMATIVE_BOUND, "at most 50.0% of the points"),
    (0.51, "cannot be bounded usefully at this epsilon"),
    (1.0, "cannot be bounded usefully at this epsilon"),  # mine.csv's 100 % (issue 50)
    (None, "cannot be bounded usefully at this epsilon"),
])
def test_the_clipping_share_is_stated_only_when_its_bound_says_something(bound, said):
    config = parse_protocol({"privacy.data-radius": 3.0})
    line = clipping_summary(config, config, _Estimates(bound))
    assert said in line
    assert ("%" in line) == (bound is not None and bound <= INFORMATIVE_BOUND)


@pytest.mark.parametrize("warnings", [True, False])
def test_step_2_s_fallback_is_said_once_per_run_through_the_run_s_warn(warnings):
    """Once per run; never by a context that logs no warnings (the tuning's simulations)."""
    from fedkmeans.server import rounds

    records = []
    handler = logging.Handler()
    handler.emit = records.append
    rounds.LOG.addHandler(handler)
    warned = set()
    try:
        runner = rounds.RoundRunner(warnings=warnings, warned=warned)
        warn = runner.warn_once("step-2 fallback")
        for _ in range(3):
            w = usable_weights(np.array([-1.0, 0.0, 2.0]), 0.0, 2, warn=warn)
            assert (w == 1.0).all()  # the fallback itself still happens every time
    finally:
        rounds.LOG.removeHandler(handler)
    said = [r for r in records if "positive noisy weight" in r.getMessage()]
    assert len(said) == int(warnings)
    assert warned == ({"step-2 fallback"} if warnings else set())
