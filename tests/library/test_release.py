"""The server's release path: clip, sum, noise of exactly the calibrated scale, record."""

import numpy as np
import pytest
from conftest import PAPER

from fedkmeans.config import parse_protocol
from fedkmeans.privacy.accountant import Release
from fedkmeans.server.context import ServerContext
from fedkmeans.server.replies import Replies


def _context(releases, **overrides):
    config = parse_protocol({**PAPER, "privacy.level": "client", **overrides})
    return ServerContext.of(config, None, np.zeros((1, 1)), {r.stage: r for r in releases})


def test_gaussian_noise_drawn_has_the_calibrated_scale_and_is_symmetric():
    sigma = 37.5
    release = Release("init-1/covariance", "gaussian", 6050.0, sigma, 1.0, "init-1")
    ctx = _context([release])
    d = 300  # 45,150 independent upper-triangle draws
    rows = np.zeros((3, d, d))
    noisy = ctx.release(Replies(np.arange(3), {"covariance": rows}), "covariance",
                        "init-1/covariance", symmetric=True)
    np.testing.assert_array_equal(noisy, noisy.T)
    upper = noisy[np.triu_indices(d)]
    assert np.std(upper) == pytest.approx(sigma, rel=0.02)
    assert abs(np.mean(upper)) < 4 * sigma / np.sqrt(upper.size)
    assert ctx.accountant.releases == (release,)


def test_laplace_noise_drawn_has_the_calibrated_scale():
    b = 12.0
    release = Release("init-2/histogram", "laplace", 50.0, b, 1.0, "init-2")
    ctx = _context([release])
    noisy = ctx.release(Replies(np.arange(2), {"histogram": np.zeros((2, 100_000))}),
                        "histogram", "init-2/histogram")
    assert np.std(noisy) == pytest.approx(np.sqrt(2) * b, rel=0.02)
    assert np.mean(np.abs(noisy)) == pytest.approx(b, rel=0.02)


def test_server_clips_each_client_before_summing():
    release = Release("init-3/sums", "gaussian", 110.0, 0.0, 1.0, "init-3")
    ctx = _context([release], **{"privacy.clip-sums": 110.0})
    rows = np.zeros((2, 2, 3))
    rows[0, 0, 0] = 1e9      # a client that did not clip
    rows[1, 1, 2] = 10.0     # an honest client inside the bound
    total = ctx.release(Replies(np.arange(2), {"sums": rows}), "sums", "init-3/sums")
    np.testing.assert_allclose(total, [[110.0, 0, 0], [0, 0, 10.0]])
    assert rows[0, 0, 0] == 1e9  # the replies were not modified


def test_noise_is_secret_by_default_and_seeded_only_on_request():
    release = Release("init-3/sums", "gaussian", 550.0, 5.0, 1.0, "init-3")  # PAPER's clip
    replies = Replies(np.arange(1), {"sums": np.zeros((1, 4, 4))})
    # default: the same config and seed give different noise (nothing published fixes it)
    a = _context([release]).release(replies, "sums", "init-3/sums")
    b = _context([release]).release(replies, "sums", "init-3/sums")
    assert not np.any(a == b)
    # the explicit opt-in: same stage and seed, same noise; another seed, other noise
    seeded = {"privacy.reproducible-noise": True}
    a = _context([release], **seeded).release(replies, "sums", "init-3/sums")
    b = _context([release], **seeded).release(replies, "sums", "init-3/sums")
    c = _context([release], seed=1, **seeded).release(replies, "sums", "init-3/sums")
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


@pytest.mark.parametrize("n_malicious", [1, 3])
def test_malicious_clients_move_the_release_by_at_most_k_times_the_bound(n_malicious):
    """Huge, negative or NaN-free garbage from k clients shifts the noisy sum by <= k * C."""
    bound = 110.0
    release = Release("lloyds-1/sums", "gaussian", bound, 3.0, 1.0, "lloyds-1")
    counts_release = Release("lloyds-1/counts", "laplace", 50.0, 2.0, 1.0, "lloyds-1")
    rng = np.random.default_rng(0)
    honest_rows = rng.normal(size=(10, 4, 6))
    attacked_rows = honest_rows.copy()
    attacked_rows[:n_malicious] = 1e12 * rng.normal(size=(1, 4, 6))  # colluding: one direction
    results = []
    for rows in (honest_rows, attacked_rows):
        ctx = _context([release, counts_release], **{"privacy.clip-sums": bound,
                                                     "privacy.reproducible-noise": True})
        results.append(ctx.release(Replies(np.arange(10), {"sums": rows}), "sums",
                                   "lloyds-1/sums"))
    shift = np.linalg.norm(results[1] - results[0])
    # the honest rows of the malicious clients had norm ~5, so the bound is (k * (C + 5))
    honest_norms = np.linalg.norm(honest_rows[:n_malicious].reshape(n_malicious, -1), axis=1)
    assert shift <= n_malicious * bound + honest_norms.sum() + 1e-9
    assert shift >= n_malicious * bound - honest_norms.sum() - 1e-9  # the bound is attained

    seeded = {"privacy.clip-counts": 50.0, "privacy.reproducible-noise": True}
    ctx = _context([release, counts_release], **seeded)
    negative = np.zeros((2, 4))
    negative[0] = [-1e9, 5.0, 0.0, 0.0]  # a histogram/count cannot be negative
    total = ctx.release(Replies(np.arange(2), {"counts": negative}), "counts",
                        "lloyds-1/counts")
    clean = _context([release, counts_release], **seeded).release(
        Replies(np.arange(2), {"counts": np.array([[0, 5.0, 0, 0], [0, 0, 0, 0]])}),
        "counts", "lloyds-1/counts")
    np.testing.assert_allclose(total, clean)


def test_release_leaves_names_every_leaf_by_its_dotted_path():
    from fedkmeans.artefacts import release_leaves

    assert release_leaves({"check": {"clip": 2.0}, "centers": [[1.0, 3.0]], "k": 1}) == {
        "check.clip": 2.0, "centers#len": 1, "centers[0]#len": 2, "centers[0][0]": 1.0,
        "centers[0][1]": 3.0, "k": 1}


# -- the release-time check (issue 51): the ledger records the bound the server clips with --
class _Seen:
    def __init__(self):
        self.stages = []

    def on_release(self, stage, before, after):
        self.stages.append(stage)


@pytest.mark.parametrize("aggregated", [False, True])
def test_a_release_refuses_a_ledger_derived_from_other_bounds(aggregated):
    """Planned at clip-sums 550 (client level: sensitivity 550), released by a context
    whose config clips the sums to 110: nothing is noised, recorded or shown."""
    from fedkmeans.server.releaser import SensitivityMismatchError

    release = Release("init-3/sums", "gaussian", 550.0, 5.0, 1.0, "init-3")
    seen = _Seen()
    config = parse_protocol({**PAPER, "privacy.level": "client", "privacy.clip-sums": 110.0})
    ctx = ServerContext.of(config, None, np.zeros((1, 1)), {release.stage: release},
                           observers=[seen])
    replies = (Replies(np.arange(1), {"sums": np.zeros((1, 4, 4))}, aggregated=True,
                       noise_scales={"sums": 5.0}) if aggregated
               else Replies(np.arange(2), {"sums": np.zeros((2, 4, 4))}))
    with pytest.raises(SensitivityMismatchError, match=(
            r"^release init-3/sums: the ledger would record sensitivity 550\.0, but the bound "
            r"the server clips sums with gives gaussian sensitivity 110\.0; refusing")):
        ctx.release(replies, "sums", "init-3/sums")
    assert ctx.accountant.releases == () and seen.stages == []
    # the same release, by a context whose clip gives its sensitivity: released
    clipped = ServerContext.of(parse_protocol({**PAPER, "privacy.level": "client"}), None,
                               np.zeros((1, 1)), {release.stage: release})
    clipped.release(replies, "sums", "init-3/sums")
    assert clipped.accountant.releases == (release,)


def test_the_context_after_the_plan_is_a_new_one_and_the_first_is_unchanged():
    """``planned`` builds a second context (the resolved config, the releases added)
    sharing the runner, ledger and record; neither can be re-pointed."""
    import dataclasses

    declared = parse_protocol({**PAPER, "privacy.level": "client"})
    resolved = parse_protocol({**PAPER, "privacy.level": "client", "privacy.clip-sums": 110.0})
    estimate = Release("estimate/estimates", "gaussian", 2.0, 1.0, 1.0, "estimate")
    sums = Release("init-3/sums", "gaussian", 110.0, 5.0, 1.0, "init-3")
    first = ServerContext.of(declared, None, np.zeros((1, 1)), {estimate.stage: estimate})
    second = first.planned(resolved, [sums])
    assert second is not first
    assert first.config is declared and dict(first.releases) == {estimate.stage: estimate}
    assert second.config is resolved
    assert dict(second.releases) == {estimate.stage: estimate, sums.stage: sums}
    assert second.releaser.bounds["sums"].server_bound == 110.0
    assert first.releaser.bounds["sums"].server_bound == 550.0
    assert second.runner is first.runner and second.record is first.record
    assert second.accountant is first.accountant
    with pytest.raises(dataclasses.FrozenInstanceError):
        second.config = declared
    with pytest.raises(TypeError):
        second.releases["init-3/sums"] = estimate
    second.release(Replies(np.arange(1), {"sums": np.zeros((1, 4, 4))}), "sums", "init-3/sums")
    assert first.accountant.releases == (sums,)  # one ledger


def test_the_pool_after_the_plan_sends_the_new_settings_and_the_first_keeps_its_own():
    """The nodes' settings and SecAgg's config and releases change in a new pool view;
    the registered nodes and the logs are the same objects."""
    from fedkmeans.server.pool import ClientPool
    from fedkmeans.server.secagg import SecAggAggregator

    declared = parse_protocol({**PAPER, "privacy.level": "client"})
    resolved = parse_protocol({**PAPER, "privacy.level": "client", "privacy.clip-sums": 110.0})
    pool = ClientPool(None, declared.federation, node_clients={7: np.arange(3)}, dim=2,
                      settings={"clip": "declared"})
    first = ServerContext.of(declared, pool, np.zeros((1, 2)), {})
    pool.secagg = SecAggAggregator(declared, first.releases)
    sums = Release("init-3/sums", "gaussian", 110.0, 5.0, 1.0, "init-3")
    second = first.planned(resolved, [sums], settings={"clip": "resolved"})
    assert pool.settings == {"clip": "declared"} and pool.secagg.config is declared
    assert second.pool.settings == {"clip": "resolved"}
    assert second.pool.secagg.config is resolved and second.pool.secagg.releases["init-3/sums"] \
        is sums
    assert second.pool.node_clients is pool.node_clients
    assert second.pool.rejected is pool.rejected and second.pool.answered is pool.answered
    assert second.pool.secagg.rounds is pool.secagg.rounds
