"""End-to-end protocol through the real ServerApp and ClientApp (in-process engine)."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import counting_app, read_keys

from fedkmeans import data as data_access
from fedkmeans.client_app import app as client_app
from fedkmeans.clustering import (
    centers_from_sums,
    cluster_sums_counts,
    kmeans_plus_plus,
    outer_product_sum,
    projected_histogram,
    top_eigenvectors,
    weighted_kmeans,
)
from fedkmeans.clustering.client_stats import symmetric_from_upper, upper_triangle
from fedkmeans.experiment.cli import run_flat
from fedkmeans.experiment.config import parse_config
from fedkmeans.experiment.engines.inprocess import run_inprocess
from fedkmeans.metrics import kmeans_cost
from fedkmeans.seeding import integer_seed
from fedkmeans.server.pool import FederationError
from fedkmeans.server_app import app as server_app
from fedkmeans.wire import pack, unpack


def centers(result):
    return np.asarray(result["centers"])


def test_same_seed_same_centers_other_seed_other_centers(small_config, tmp_path):
    small_config = {**small_config, "privacy.reproducible-noise": True}
    a = run_flat(small_config)
    b = run_flat({**small_config, "output-dir": str(tmp_path / "b")})
    c = run_flat({**small_config, "seed": 1, "output-dir": str(tmp_path / "c")})
    np.testing.assert_array_equal(centers(a), centers(b))
    assert not np.allclose(centers(a), centers(c))


def test_centers_do_not_depend_on_how_clients_are_sharded_over_nodes(small_config, tmp_path):
    small_config = {**small_config, "privacy.reproducible-noise": True}
    results = [
        run_flat({**small_config, "federation.num-nodes": n, "output-dir": f"{tmp_path}/{n}"})
        for n in (1, 5, 12)
    ]
    for other in results[1:]:
        np.testing.assert_array_equal(centers(results[0]), centers(other))


def _pooled(flat):
    config = parse_config(flat)
    x, _ = data_access.load_pooled(config)
    q, _ = data_access.load_server(config)
    return config, x, q


def test_infinite_epsilon_reproduces_non_private_feddp_init_on_pooled_data(small_config):
    flat = {**small_config, "privacy.epsilon": "inf"}
    result = run_flat(flat)
    config, x, q = _pooled(flat)
    # The non-private FedDP-Init, written directly on the pooled data:
    basis = top_eigenvectors(outer_product_sum(x), config.k)
    projected_server = q @ basis.T
    weights = projected_histogram(x, basis, projected_server)
    xi = weighted_kmeans(projected_server, weights, config.k,
                         seed=integer_seed(config.seed, "init-2", "weighted-kmeans"))
    sums, counts = cluster_sums_counts(x, xi, basis)
    expected, _ = centers_from_sums(sums, counts, xi @ basis, min_count=1.0)
    np.testing.assert_allclose(centers(result), expected, rtol=1e-10, atol=1e-10)
    assert result["privacy"]["epsilon"] == "inf"
    assert all(r["noise_scale"] == 0 for r in result["privacy"]["releases"]) or \
        result["privacy"]["non_private_releases"]


def test_nonprivate_lloyds_equals_centralized_lloyd_iterations(small_config):
    flat = {**small_config, "algorithm": "lloyds-nonprivate", "privacy.lloyds-steps": 3}
    result = run_flat(flat)
    config, x, q = _pooled(flat)
    c = kmeans_plus_plus(q, config.k, seed=integer_seed(config.seed, "init", "kmeans++"))
    for _ in range(3):
        sums, counts = cluster_sums_counts(x, c)
        c, _ = centers_from_sums(sums, counts, c, min_count=1.0)
    np.testing.assert_allclose(centers(result), c, rtol=1e-10, atol=1e-10)
    assert result["privacy"]["epsilon"] == "inf"


@pytest.mark.parametrize("level", ["datapoint", "client"])
@pytest.mark.parametrize("steps", [0, 2])
@pytest.mark.parametrize("algorithm", ["feddp-kmeans", "server-lloyds"])
def test_spent_epsilon_meets_target_without_exceeding_it(small_config, level, steps, algorithm):
    if algorithm == "server-lloyds" and steps == 0:
        steps = 1
    flat = {**small_config, "privacy.level": level, "privacy.lloyds-steps": steps,
            "algorithm": algorithm, "privacy.epsilon": 0.7}
    result = run_flat(flat)
    spent = result["privacy"]["epsilon"]
    assert 0.99 * 0.7 <= spent <= 0.7
    n_groups = (3 if algorithm == "feddp-kmeans" else 0) + steps
    assert len({r["group"] for r in result["privacy"]["releases"]}) == n_groups
    assert np.all(np.isfinite(centers(result)))


def test_client_sampling_is_recorded_and_accounted(small_config):
    flat = {**small_config, "privacy.level": "client", "privacy.sampling-rate": 0.5,
            "privacy.reproducible-noise": True,
            "privacy.count-noise": "gaussian", "privacy.lloyds-steps": 1,
            "privacy.epsilon": 2.0}
    result = run_flat(flat)
    releases = result["privacy"]["releases"]
    assert {r["sampling_rate"] for r in releases} == {0.5}
    assert 0.99 * 2.0 <= result["privacy"]["epsilon"] <= 2.0
    again = run_flat({**flat, "output-dir": flat["output-dir"] + "-again"})
    np.testing.assert_array_equal(centers(result), centers(again))


def test_kfed_is_one_shot_and_non_private(small_config):
    result = run_flat({**small_config, "algorithm": "kfed"})
    assert centers(result).shape == (4, 8)
    assert result["privacy"]["epsilon"] == "inf"
    assert result["privacy"]["non_private_releases"] == ["kfed/local-centers"]


def test_result_file_has_the_documented_fields_and_consistent_cost(small_config):
    result = run_flat(small_config)
    for key in ("algorithm", "seed", "k", "centers", "privacy", "metrics", "timings"):
        assert key in result
    for key in ("level", "epsilon", "delta", "target_epsilon", "releases"):
        assert key in result["privacy"]
    release = result["privacy"]["releases"][0]
    assert set(release) >= {"stage", "mechanism", "sensitivity", "noise_scale", "sampling_rate"}
    # data-point level step 1 has sensitivity Delta^2, not Delta
    # (docs/facts.md, "Reference bug 1")
    assert release["stage"] == "init-1/covariance" and release["sensitivity"] == 16.0
    metrics = result["metrics"]
    config, x, _ = _pooled(small_config)
    assert metrics["cost"] == pytest.approx(kmeans_cost(x, centers(result)), rel=1e-9)
    assert metrics["optimal_cost"] <= metrics["cost"] * 1.0001
    assert 0 <= metrics["accuracy"] <= 1 and "non-private" in metrics["note"]


def _corrupting(stage, corrupt):
    """A ClientApp stand-in that corrupts node 2's reply to one stage."""

    def app(msg, context):
        reply = client_app(msg, context)
        if msg.metadata.message_type == f"query.{stage}" and context.node_id == 2:
            arrays, config = unpack(reply.content)
            reply.__dict__["_content"] = pack(corrupt(arrays), config)
        return reply

    return app


def test_bad_replies_are_rejected_and_the_run_goes_on(small_config, tmp_path):
    flat = {**small_config, "federation.min-replies": 0.5}

    def nan_row(arrays):  # step 1 travels as upper triangles (client_stats.upper_triangle)
        arrays["covariance.triu"] = arrays["covariance.triu"].copy()
        arrays["covariance.triu"][0, 0] = np.nan
        return arrays

    def short_triangle(arrays):
        arrays["covariance.triu"] = arrays["covariance.triu"][:, :-1]
        return arrays

    def wrong_shape(arrays):
        arrays["sums"] = arrays["sums"][:, :2]
        return arrays

    for stage, corrupt in (
        ("covariance", nan_row), ("covariance", short_triangle), ("centers", wrong_shape)
    ):
        out = tmp_path / corrupt.__name__
        run_inprocess(server_app, _corrupting(stage, corrupt),
                      read_keys({**flat, "output-dir": str(out)}), 3)
        result = json.loads((out / "result.json").read_text())
        rejected = result["federation"]["rejected_replies"]
        assert len(rejected) == 1 and rejected[0]["node"] == 2
        assert np.all(np.isfinite(centers(result)))


def test_symmetric_matrices_travel_as_exact_upper_triangles():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 7, 5))
    stack = np.einsum("mni,mnj->mij", x, x)
    triangles = upper_triangle(stack)
    assert triangles.shape == (3, 15)
    back = symmetric_from_upper(triangles, 5)
    np.testing.assert_array_equal(np.triu(back), np.triu(stack))
    np.testing.assert_array_equal(back, np.swapaxes(back, 1, 2))
    with pytest.raises(ValueError, match=r"triangles must have shape \(m, 15\)"):
        symmetric_from_upper(triangles[:, :-1], 5)


def test_too_few_valid_replies_stops_with_a_clear_error(small_config):
    def drop_everything(arrays):
        arrays["histogram"] = arrays["histogram"][:, :1]
        return arrays

    with pytest.raises(Exception, match="min-replies"):
        run_inprocess(server_app, _corrupting("histogram", drop_everything),
                      read_keys({**small_config, "federation.min-replies": 1.0}), 3)


def test_server_reclips_a_client_that_skips_clipping(small_config, tmp_path):
    """A client sending a huge sum moves the result by at most the clipping bound."""
    flat = {**small_config, "privacy.level": "client", "privacy.epsilon": "inf"}
    # little noise, clipping active; the same noise in both runs, so the shift is the attack's
    flat_private = {**flat, "privacy.epsilon": 20.0, "privacy.reproducible-noise": True}

    def huge(arrays):
        arrays["sums"] = arrays["sums"] * 1e6
        return arrays

    honest = run_flat(flat_private)
    out = tmp_path / "attacked"
    attacked_config = {**flat_private, "output-dir": str(out)}
    run_inprocess(server_app, _corrupting("centers", huge), read_keys(attacked_config), 3)
    attacked = json.loads((out / "result.json").read_text())
    shift = np.linalg.norm(centers(attacked) - centers(honest))
    assert math.isfinite(shift) and shift < 50.0


def test_killed_run_resumes_from_checkpoint_without_spending_budget_twice(small_config, tmp_path):
    flat = {**small_config, "privacy.lloyds-steps": 2, "privacy.reproducible-noise": True}
    uninterrupted = run_flat({**flat, "output-dir": str(tmp_path / "whole")})

    crashing, _ = counting_app(failing_stage="lloyds")
    with pytest.raises(Exception, match="min-replies"):
        run_inprocess(server_app, crashing, read_keys(flat), 3)
    state = json.loads((tmp_path / "out" / "checkpoint" / "state.json").read_text())
    assert state["rounds"] == ["init-1", "init-2", "init-3"]
    assert len(state["ledger"]["releases"]) == 4

    resuming, calls = counting_app()
    run_inprocess(server_app, resuming, read_keys(flat), 3)
    resumed = json.loads((tmp_path / "out" / "result.json").read_text())
    assert "covariance" not in calls and "histogram" not in calls and "centers" not in calls
    assert calls["lloyds"] == 2 * 3  # two steps, three nodes
    np.testing.assert_array_equal(centers(resumed), centers(uninterrupted))
    assert resumed["privacy"]["releases"] == uninterrupted["privacy"]["releases"]
    assert resumed["privacy"]["epsilon"] == uninterrupted["privacy"]["epsilon"]


def test_a_checkpoint_of_another_configuration_is_refused(small_config):
    run_flat(small_config)
    out = Path(small_config["output-dir"])
    # the finished run's result guards the directory first
    with pytest.raises(ValueError, match="holds the result of another configuration"):
        run_flat({**small_config, "privacy.epsilon": 0.5})
    # without the result (a run cut off after its checkpoint), the checkpoint refuses
    for name in ("result.json", "release.json", "diagnostics.json"):
        (out / name).unlink()
    with pytest.raises(ValueError, match="different configuration"):
        run_flat({**small_config, "privacy.epsilon": 0.5})


def test_a_lost_node_costs_utility_not_privacy(small_config, tmp_path):
    """Node 2 fails in every Lloyds round: the round uses the other nodes' replies.

    The noise is calibrated to the sensitivity (one unit), not to the number of
    replies, so the spent epsilon and the noise scales are exactly those of a full run;
    only the sums have fewer clients in them.
    """
    flat = {**small_config, "privacy.lloyds-steps": 2, "federation.min-replies": 0.5}
    full = run_flat({**flat, "output-dir": str(tmp_path / "full")})

    def losing_node_2(msg, context):
        if msg.metadata.message_type == "query.lloyds" and context.node_id == 2:
            raise RuntimeError("SuperNode lost")
        return client_app(msg, context)

    out = tmp_path / "lost"
    run_inprocess(server_app, losing_node_2, read_keys({**flat, "output-dir": str(out)}), 3)
    lost = json.loads((out / "result.json").read_text())
    assert lost["privacy"]["releases"] == full["privacy"]["releases"]
    assert lost["privacy"]["epsilon"] == full["privacy"]["epsilon"]
    assert [r["round"] for r in lost["federation"]["rejected_replies"]] == ["lloyds-1", "lloyds-2"]
    assert not np.array_equal(centers(lost), centers(full))
    assert np.all(np.isfinite(centers(lost)))


def test_nodes_with_different_dimensions_stop_before_any_statistic(small_config):
    """Issue 4: mismatched dimensions between nodes = one clear error, no data queried."""
    asked = []

    def app(msg, context):
        asked.append(msg.metadata.message_type)
        reply = client_app(msg, context)
        if msg.metadata.message_type == "query.register" and context.node_id == 2:
            arrays, config = unpack(reply.content)
            reply.__dict__["_content"] = pack(arrays, {**config, "dim": config["dim"] + 1})
        return reply

    with pytest.raises(FederationError, match=r"nodes disagree on the feature dimension: "
                       r"node 1: d=8, node 2: d=9, node 3: d=8"):
        run_inprocess(server_app, app, read_keys(small_config), 3)
    assert set(asked) == {"query.register"}
