"""Secure aggregation with distributed noise (privacy.aggregation = secagg).

* the noise-share arithmetic (seeded draws, statistical checks of the variance) and
  the dropout guarantee, without Flower;
* the encoding through Flower's own SecAgg+ quantizer: exact on the grid;
* real SecAgg+ runs (Flower's SecAggPlusWorkflow + secaggplus_mod) inside the
  in-process engine: observers see only noisy sums, the release equals the offline
  noisy sum up to the measured quantization error, a node dropping after masking is
  recovered, too few survivors stop the round before unmasking;
* one real ``flwr run`` simulation (marked ``flower``): epsilon <= target, the same
  centers as the in-process SecAgg+ run, the Lloyd step within the noise of the
  exact one, and the curious server observed no client.
"""

import json
import math

import numpy as np
import pytest
from conftest import PAPER, read_keys, run_server_inprocess
from flwr.common.secure_aggregation.quantization import dequantize, quantize
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Stage

from fedkmeans import client_app
from fedkmeans import data as data_access
from fedkmeans.algorithms import release_plan
from fedkmeans.attacks.differencing import combine_runs, leading_direction
from fedkmeans.checkpoint import Checkpoint
from fedkmeans.clustering import cluster_sums_counts
from fedkmeans.config import ConfigError
from fedkmeans.console import DIAGNOSTICS_ENV
from fedkmeans.experiment.cli import run_flat
from fedkmeans.experiment.config import parse_config
from fedkmeans.node import NodeData
from fedkmeans.privacy.clipping import clip_rows_l2
from fedkmeans.privacy.distributed import (
    decode_sum,
    effective_sigma,
    encode,
    grid_step,
    min_survivors,
    node_contribution,
    quantization_range,
    share_std,
    smooth_lattice,
)
from fedkmeans.privacy.mechanisms import GaussianMechanism
from fedkmeans.seeding import generator
from fedkmeans.server.observer import RunObserver
from fedkmeans.server.pool import FederationError
from fedkmeans.stages import statistic_bounds

SECAGG = {"privacy.aggregation": "secagg", "privacy.count-noise": "gaussian"}


# -- noise shares and dropouts (no Flower) -------------------------------------------
def _summed_shares(n_clients, sigma, n_min, entries, *, survivors=None, symmetric=False):
    """Sum of the noise shares of the surviving clients (zero statistics)."""
    s = share_std(sigma, n_min)
    shape = (entries, entries) if symmetric else (entries,)
    clients = list(range(n_clients if survivors is None else survivors))
    total = np.zeros(shape)
    for node in (clients[i:i + 4] for i in range(0, len(clients), 4)):  # 4 per node
        rngs = [generator(7, "noise-share", "test/sums", c) for c in node]
        total += node_contribution(
            np.zeros((len(node), *shape)), 1.0, "l2", s, rngs, symmetric=symmetric
        )
    return total


def _variance_ok(values, expected, tol=0.04):
    """Sample variance within tol (~4 standard errors at these sizes) of ``expected``."""
    return abs(values.var() / expected - 1.0) < tol and abs(values.mean()) < 5 * math.sqrt(
        expected / values.size
    )


def test_the_sum_of_the_shares_has_the_calibrated_variance():
    sigma = 3.0
    total = _summed_shares(12, sigma, 12, 40_000)  # sd of the variance estimate: 0.7%
    assert _variance_ok(total, sigma**2)
    # each client's share alone is N(0, sigma^2 / n): far too little noise on its own
    alone = _summed_shares(1, sigma, 12, 40_000)
    assert _variance_ok(alone, sigma**2 / 12)
    # symmetric shares (step 1) sum to symmetric noise with the same variance
    matrix = _summed_shares(12, sigma, 12, 250, symmetric=True)
    np.testing.assert_array_equal(matrix, matrix.T)
    assert _variance_ok(matrix[np.triu_indices(250)], sigma**2)


def test_clients_clip_before_adding_their_share_and_never_mutate_their_data():
    stats = np.array([[30.0, 40.0], [0.3, 0.4]])  # norms 50 and 0.5
    before = stats.copy()
    rngs = [generator(0, "noise-share", "x", c) for c in range(2)]
    total = node_contribution(stats, 5.0, "l2", 0.0, rngs)
    np.testing.assert_allclose(total, [3.0 + 0.3, 4.0 + 0.4])
    np.testing.assert_array_equal(stats, before)


def test_dropout_guarantee_survivors_carry_at_least_the_calibrated_variance():
    sigma, n = 2.0, 12
    n_min = min_survivors(n, 0.75)
    assert n_min == 9 and min_survivors(10, 0.7) == 7 and min_survivors(5, 1.0) == 5
    for survivors in (9, 12):
        total = _summed_shares(n, sigma, n_min, 40_000, survivors=survivors)
        expected = effective_sigma(sigma, n_min, survivors) ** 2
        assert expected >= sigma**2
        assert expected == pytest.approx(sigma**2 * survivors / n_min)
        assert _variance_ok(total, expected)
    with pytest.raises(ValueError, match="n_min=9"):
        effective_sigma(sigma, n_min, 8)


# -- encoding for SecAgg+ --------------------------------------------------------------
def test_quantization_range_never_overflows_the_modulus():
    assert quantization_range(2) == 2**30 and quantization_range(3) == 2**30
    assert quantization_range(4) == 2**29 and quantization_range(100) == 2**25
    for n in (2, 3, 5, 17, 100, 1000, 5000):
        q = quantization_range(n)
        assert n * q < 2**32 and q & (q - 1) == 0


def test_flowers_quantizer_is_exact_on_our_grid_and_the_sum_is_recovered():
    rng = generator(0, "test", "encode")
    nodes, q = 5, quantization_range(5)
    step = grid_step(bound=100.0, noise_std=3.0, max_clients=4, q_range=q)
    values = rng.uniform(-400.0, 400.0, size=(nodes, 1000))
    levels = []
    for v in values:
        encoded = encode(v, step, q)
        assert np.abs(encoded).max() <= 1.0
        level = quantize([encoded], 1.0, q)[0]  # Flower's stochastic rounding: a no-op
        np.testing.assert_array_equal(level, np.rint(v / step) + q // 2)
        levels.append(level.astype(np.int64))
    # what SecAggPlusWorkflow computes after unmasking: de-quantize, offset, / N
    mean = (dequantize([np.sum(levels, axis=0)], 1.0, q)[0] - (nodes - 1)) / nodes
    total = decode_sum(mean, nodes, step, q)
    np.testing.assert_array_equal(total, np.rint(values / step).sum(axis=0) * step)
    assert np.abs(total - values.sum(axis=0)).max() <= nodes * step / 2


# -- configuration -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "flat, key",
    [
        ({"privacy.aggregation": "mpc"}, "privacy.aggregation"),
        ({"privacy.aggregation": "secagg", "privacy.level": "client",
          "privacy.count-noise": "laplace"}, "privacy.count-noise"),
        ({**SECAGG, "privacy.sampling-rate": 0.5}, "privacy.sampling-rate"),
        ({**SECAGG, "privacy.epsilon": "inf"}, "privacy.aggregation"),
        ({**SECAGG, "algorithm": "kfed"}, "privacy.aggregation"),
    ],
)
def test_secagg_config_errors_name_the_key(flat, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        parse_config(flat)


def test_secagg_plan_is_all_gaussian():
    config = parse_config({**PAPER, **SECAGG, "privacy.lloyds-steps": 1})
    plan = release_plan(config.algorithm, config.privacy)
    assert {p.mechanism for p in plan} == {"gaussian"}
    # data-point level: the server's radial l1 clip makes one point move a histogram
    # by up to sqrt(2) in l2 (fedkmeans.privacy.budget)
    assert {p.stage: p.sensitivity for p in plan}["init-2/histogram"] == math.sqrt(2.0)


# -- real SecAgg+ inside the in-process engine ----------------------------------------
class Recorder(RunObserver):
    """An observer that keeps everything the server's observers are shown."""

    def __init__(self):
        self.replies, self.releases, self.broadcasts = {}, {}, {}

    def on_broadcast(self, round_name, arrays, clients):
        self.broadcasts[round_name] = clients

    def on_replies(self, round_name, replies):
        self.replies[round_name] = replies

    def on_release(self, stage, before, after):
        self.releases[stage] = (before, after)


def _flaky(partition, stage=Stage.COLLECT_MASKED_VECTORS):
    """The ClientApp, except that one node dies at a SecAgg+ stage of every round."""

    def app(msg, context):
        configs = msg.content.config_records.get(RECORD_KEY_CONFIGS)
        if (
            context.node_config["partition-id"] == partition
            and msg.metadata.message_type == "train"
            and configs is not None
            and configs.get("stage") == stage
        ):
            raise RuntimeError("node lost")
        return client_app.app(msg, context)

    return app


def test_secagg_run_shows_observers_only_noisy_sums_and_matches_the_offline_sum(
    small_config, monkeypatch,
):
    # reproducible server noise: the smoothing draw of every decoded sum is recomputed
    flat = {**small_config, **SECAGG, "privacy.reproducible-noise": True}
    # The ClientApp always draws its shares from the CSPRNG (no configuration can fix
    # them); to check the arithmetic bit for bit, this test alone swaps in seeded shares.
    seed = parse_config(flat).seed
    contribution = NodeData.secagg_contribution

    def seeded_shares(self, *args, **kwargs):
        share_rng = lambda stage, c: generator(seed, "noise-share", stage, c)  # noqa: E731
        return contribution(self, *args, share_rng=share_rng, **kwargs)

    monkeypatch.setattr(NodeData, "secagg_contribution", seeded_shares)
    recorder = Recorder()
    result = run_server_inprocess(flat, [recorder])
    privacy = result["privacy"]
    assert privacy["aggregation"] == "secagg"
    assert privacy["epsilon"] <= privacy["target_epsilon"] == 1.0
    # no per-client row ever reached an observer: one noisy row per statistic
    assert set(recorder.replies) == {"init-1", "init-2", "init-3"}
    for replies in recorder.replies.values():
        assert replies.aggregated and replies.client_ids.size == 0
        assert all(v.shape[0] == 1 for v in replies.stats.values())
        np.testing.assert_array_equal(replies.contributors, np.arange(12))
    assert all(before is None for before, _ in recorder.releases.values())
    # the ledger holds the calibrated sigma (here all 12 survived, n_min = 12: = sigma_eff)
    rounds = {r["round"]: r for r in privacy["secagg"]["rounds"]}
    for release in privacy["releases"]:
        round_name, stat = release["stage"].split("/")
        info = rounds[round_name]["statistics"][stat]
        assert release["mechanism"] == "gaussian"
        assert release["noise_scale"] == info["sigma_effective"] == info["sigma"]
    # offline: every client's clipped statistic + its seeded share, summed in float
    config = parse_config(flat)
    everyone = _as_the_nodes_hold(config)
    clients = everyone.client_ids.tolist()
    info = rounds["init-1"]["statistics"]["covariance"]
    bound = statistic_bounds(config.privacy)["covariance"]
    offline = node_contribution(
        everyone.arithmetic.covariance(clients)["covariance"], bound.server_bound, bound.norm,
        info["share_std"],
        [generator(config.seed, "noise-share", "init-1/covariance", c) for c in clients],
        symmetric=True,
    )
    # the server's smoothing draw (sigma / 64) on the decoded sum, from the same path
    offline = offline + smooth_lattice(
        np.zeros_like(offline), info["sigma"], info["grid_step"],
        generator(config.seed, "secagg-smoothing", "init-1/covariance"), symmetric=True)
    assert info["smoothing_std"] == info["sigma"] / 64
    released = recorder.releases["init-1/covariance"][1]
    error = np.abs(released - offline).max()
    # the smoothing draw's own lattice (GaussianMechanism.granularity) adds half a cell
    cell = GaussianMechanism(info["sigma"], info["smoothing_std"]).granularity
    assert error <= info["max_quantization_error"] + cell + 1e-9
    assert info["max_quantization_error"] < 1e-6 * info["sigma"]
    np.testing.assert_array_equal(released, released.T)


def test_a_node_dropping_after_masking_is_recovered_with_enough_survivors(small_config):
    # 3 nodes x 4 clients; node 2 dies in every round after the key exchange. Client
    # level: at data-point level min-replies < 1 is refused (the next test)
    flat = {**small_config, **SECAGG, "federation.min-replies": 0.6,  # n_min = 8
            "privacy.level": "client"}
    recorder = Recorder()
    result = run_server_inprocess(flat, [recorder], app=_flaky(2))
    rounds = result["privacy"]["secagg"]["rounds"]
    assert [r["nodes_aggregated"] for r in rounds] == [2, 2, 2]
    assert all(r["clients_aggregated"] == r["min_clients"] == 8 for r in rounds)
    assert len(result["federation"]["rejected_replies"]) == 3
    for r in rounds:
        for info in r["statistics"].values():
            assert info["sigma_effective"] == pytest.approx(info["sigma"])  # 8 of n_min 8
    assert result["privacy"]["epsilon"] <= 1.0
    for replies in recorder.replies.values():
        assert replies.contributors.size == 8 and replies.client_ids.size == 0
    # nobody drops: 12 survivors of n_min 8 carry 12/8 of the variance (a diagnostic); the
    # ledger records the sigma guaranteed at n_min, so nothing published depends on how
    # many survived
    full = run_server_inprocess({**flat, "output-dir": flat["output-dir"] + "-full"})
    for r in full["privacy"]["secagg"]["rounds"]:
        for info in r["statistics"].values():
            assert info["sigma_effective"] == pytest.approx(info["sigma"] * math.sqrt(12 / 8))
    assert full["privacy"]["releases"] == result["privacy"]["releases"]
    assert full["privacy"]["epsilon"] == result["privacy"]["epsilon"]


def test_dropouts_at_data_point_level_are_refused_in_one_line_naming_the_key(small_config):
    """n / ceil(0.8 n) of the calibrated variance depends on the private client count."""
    with pytest.raises(ConfigError, match="federation.min-replies") as refused:
        parse_config({**small_config, **SECAGG, "federation.min-replies": 0.8})
    assert "\n" not in str(refused.value) and "'datapoint'" in str(refused.value)
    parse_config({**small_config, **SECAGG, "federation.min-replies": 0.8,
                  "privacy.level": "client"})  # zero-out one client: participation is public
    parse_config({**small_config, "federation.min-replies": 0.8})  # central: no shares


def test_too_few_survivors_stop_the_round_before_unmasking(small_config, monkeypatch):
    recorder = Recorder()
    monkeypatch.delenv(DIAGNOSTICS_ENV, raising=False)
    with pytest.raises(FederationError, match="host too few asked clients: ") as stopped:
        run_server_inprocess({**small_config, **SECAGG}, [recorder], app=_flaky(1))
    assert "n_min" not in str(stopped.value)  # a count of clients: not without the opt-in
    assert recorder.replies == {} and recorder.releases == {}  # nothing was unmasked
    monkeypatch.setenv(DIAGNOSTICS_ENV, "1")
    with pytest.raises(FederationError, match="n_min=12"):
        run_server_inprocess({**small_config, **SECAGG,
                              "output-dir": small_config["output-dir"] + "-2"}, app=_flaky(1))


def test_secagg_needs_two_nodes(small_config):
    with pytest.raises(FederationError, match="at least 2 nodes"):
        run_server_inprocess({**small_config, **SECAGG, "federation.num-nodes": 1}, num_nodes=1)


# -- a real Flower simulation ----------------------------------------------------------
@pytest.mark.flower
def test_secagg_in_the_flower_simulation(small_config, tmp_path):
    flat = {
        **small_config, **SECAGG, "privacy.lloyds-steps": 1, "attack": "curious",
        "federation.num-nodes": 3,
    }
    flower = run_flat({**flat, "federation.engine": "flower",
                       "output-dir": str(tmp_path / "flower")})
    privacy = flower["privacy"]
    assert privacy["aggregation"] == "secagg"
    assert privacy["epsilon"] <= privacy["target_epsilon"] == 1.0
    assert [r["round"] for r in privacy["secagg"]["rounds"]] == [
        "init-1", "init-2", "init-3", "lloyds-1"
    ]
    assert all(r["nodes_aggregated"] == 3 for r in privacy["secagg"]["rounds"])
    # the curious server (an observer in the ServerApp) never saw a client's reply
    assert flower["attack"]["clients_observed"] == 0
    # the same SecAgg+ arithmetic as in-process: the same ledger; the noise shares are
    # secret and fresh in every run, so the centers are not bit-equal
    local = run_flat({**flat, "attack": "none", "output-dir": str(tmp_path / "local")})
    assert not np.array_equal(np.array(flower["centers"]), np.array(local["centers"]))
    assert local["privacy"]["releases"] == privacy["releases"]
    # within the noise: the final Lloyd step vs the exact one from the same centers
    config = parse_config(read_keys(flat))  # the run's config: SMALL's unread keys settled
    start = Checkpoint.open(tmp_path / "flower" / "checkpoint", config).rounds["init-3"]
    sums, counts = 0.0, 0.0
    transform = config.public_transform(data_access.load_server(config)[0])  # data.center
    for cid in range(config.data.num_clients):
        x = clip_rows_l2(transform.apply(data_access.load_client(config, cid)[0]),
                         config.privacy.data_radius)
        s, n = cluster_sums_counts(x, start["centers"])  # the rounds' (centred) space
        sums, counts = sums + s, counts + n
    exact = sums / counts[:, None]
    ledger = {r["stage"]: r["noise_scale"] for r in privacy["releases"]}
    sd = np.sqrt(ledger["lloyds-1/sums"] ** 2 + exact**2 * ledger["lloyds-1/counts"] ** 2)
    z = (np.array(flower["centers"]) - transform.invert(exact)) / (sd / counts[:, None])
    # the delta method holds where the count dwarfs its noise (>= 4 sigma; 480 points
    # in 4 clusters guarantee one such cluster); a small cluster's ratio is heavy-tailed
    big = counts >= 4 * ledger["lloyds-1/counts"]
    assert big.any() and np.abs(z[big]).max() < 5.0, (np.abs(z).max(axis=1), counts)
    json.dumps(flower)  # the whole result is plain JSON


@pytest.mark.flower
def test_curious_server_attacks_are_at_chance_under_secagg_in_the_flower_simulation(tmp_path):
    """Issue 5 acceptance: paper mixture, data-point level, eps_total = 1, real SecAgg+.

    The same curious server reads every reply without SecAgg (in-process, same
    config): there the attacks win; under SecAgg+ it only has the noisy sums.
    """
    flat = {
        **SECAGG, "attack": "curious", "privacy.lloyds-steps": 1, "privacy.epsilon": 1.0,
        "federation.num-nodes": 4,
    }
    secure = run_flat({**flat, "federation.engine": "flower",
                       "output-dir": str(tmp_path / "secagg")})
    attack = secure["attack"]
    assert secure["privacy"]["epsilon"] <= 1.0
    assert attack["secure_aggregation"] is True and attack["clients_observed"] == 0
    assert attack["client_reconstruction"]["individual_replies_observed"] == 0
    server_mia = attack["membership_lr"]["curious_server"]
    server_diff = attack["differencing"]["curious_server"]
    assert server_mia["n_in"] == server_mia["n_out"] == 4000
    assert server_mia["auc"] <= 0.6, server_mia
    assert server_diff["abs_cosine_mean"] <= 0.1, server_diff

    central = run_flat({**flat, "privacy.aggregation": "central",
                        "output-dir": str(tmp_path / "central")})["attack"]
    assert central["secure_aggregation"] is False
    assert central["client_reconstruction"]["cosine_min"] >= 1 - 1e-9
    assert central["membership_lr"]["curious_server"]["auc"] >= 0.99
    assert central["differencing"]["curious_server"]["cosine_min"] >= 0.99


# -- two runs on the same node data: the shares never repeat ----------------------------
def _step1_release(flat, tmp_path, epsilon, num_nodes):
    recorder = Recorder()
    result = run_server_inprocess({**flat, "privacy.epsilon": epsilon,
                   "output-dir": str(tmp_path / f"eps-{epsilon}")}, [recorder],
                  num_nodes=num_nodes)
    sigma = next(r["noise_scale"] for r in result["privacy"]["releases"]
                 if r["stage"] == "init-1/covariance")
    return recorder.releases["init-1/covariance"][1], sigma


def _as_the_nodes_hold(config):
    """Every client in one node, mapped by the run's public transform (data.center)."""
    transform = config.public_transform(data_access.load_server(config)[0])
    return NodeData.load(config, 0, 1, transform=transform)


@pytest.mark.parametrize("shares", ["secret", "fixed"])
def test_two_runs_at_different_epsilon_cannot_cancel_the_noise_shares(
    shares, tmp_path, monkeypatch
):
    """The attack of fixed shares: (s2 Y1 - s1 Y2) / (s2 - s1) is the exact sum."""
    flat = {"data.dim": 60, "data.components": 6, "k": 6, "data.num-clients": 6,
            "data.points-per-client": 30, "data.server-points-per-component": 10,
            "data.server-uniform-points": 10, "privacy.max-points-per-client": 30,
            "federation.num-nodes": 3, **SECAGG,
            # the curious server knows its own draws (the smoothing of decoded sums):
            # reproducible, the same in both runs, so only the shares can hide the sum
            "privacy.reproducible-noise": True}
    if shares == "fixed":  # the control: what a fixed noise-seed did
        contribution = NodeData.secagg_contribution

        def fixed(self, *args, **kwargs):
            rng = lambda stage, c: generator(99, "noise-share", stage, c)  # noqa: E731
            return contribution(self, *args, share_rng=rng, **kwargs)

        monkeypatch.setattr(NodeData, "secagg_contribution", fixed)
    (y1, s1), (y2, s2) = (_step1_release(flat, tmp_path, eps, 3) for eps in (1.0, 2.0))
    estimate = combine_runs(y1, s1, y2, s2)
    node = _as_the_nodes_hold(parse_config(flat))
    exact = node.arithmetic.covariance(node.client_ids.tolist())["covariance"].sum(axis=0)
    p = node.points[0][0]  # the target point; the server knows every other one
    guess = leading_direction(estimate - exact + np.outer(p, p))
    cosine = abs(guess @ p) / np.linalg.norm(p)
    if shares == "fixed":
        assert cosine >= 0.99
    else:  # chance in d = 60: |cos| ~ 0.10 (sd 0.13); 0.4 is 3 sd
        assert cosine <= 0.4, cosine


# -- the defaults (tuning=auto: estimate round, final private choice) under SecAgg -------
def test_laplace_counts_under_secagg_are_refused_in_one_line_before_any_release(tmp_path):
    """Laplace counts cannot be split into noise shares: refused up front (the default,
    ``auto``, is Gaussian under SecAgg)."""
    from fedkmeans.config import ConfigError
    from fedkmeans.experiment import run

    with pytest.raises(ConfigError, match="privacy.count-noise") as refused:
        run(["privacy.aggregation=secagg", "privacy=client", "privacy.count-noise=laplace",
             f"output-dir={tmp_path / 'out'}"])
    assert "\n" not in str(refused.value) and not (tmp_path / "out").exists()


@pytest.mark.parametrize("engine", [
    "inprocess", pytest.param("flower", marks=[pytest.mark.flower, pytest.mark.slow])])
@pytest.mark.slow
def test_the_defaults_complete_under_secagg(small_config, tmp_path, engine):
    """Every stage of a default run (estimate round, FedDP-Init, the final choice) sums
    under SecAgg+: the run completes within the target on both engines."""
    from fedkmeans.experiment import run

    small = [f"{key}={value}" for key, value in small_config.items()
             if key not in ("output-dir", "privacy.data-radius", "privacy.max-points-per-client",
                            *PAPER)]
    result = run([*small, "privacy.aggregation=secagg",
                  f"federation.engine={engine}", f"output-dir={tmp_path / engine}"])
    stages = [r["stage"] for r in result["privacy"]["releases"]]
    assert stages[0] == "estimate/estimates"
    assert stages[-1] == "check/cost_difference" and "check/cost_sign" not in stages
    rounds = {r["round"] for r in result["privacy"]["secagg"]["rounds"]}
    assert {"estimate", "init-1", "check"} <= rounds
    assert 0 < result["privacy"]["epsilon"] <= result["privacy"]["target_epsilon"]
    assert "zero-out one client" not in result["privacy"]["accountant"]  # data-point level


# -- no client count in the published values (issue 49) ----------------------------------
def _residue(values, step):
    ratio = np.ravel(values) / step
    return float(np.mean(np.abs(ratio - np.rint(ratio))))


def test_the_published_value_hides_the_grid_of_n_and_of_n_minus_one():
    """One node per client, 31 against 30: the decoded sum is an integer times h(n)
    (the share scale sigma / sqrt(n) and the quantization range of n nodes set h). Its
    residue modulo h(n) is 0 and modulo h(n - 1) is about 0.25 (uniform): the exact
    count. The published value (the sigma / 64 smoothing draw added) has the uniform
    residue's mean, 0.25, for both steps (2,000 entries: standard error 0.0032)."""
    sigma, reach, rng = 40.0, 6000.0, np.random.default_rng(49)
    steps = {n: grid_step(reach, share_std(sigma, n), 1, quantization_range(n))
             for n in (30, 31)}
    assert steps[30] != steps[31] and max(steps.values()) <= sigma / 128
    for n, other in ((31, 30), (30, 31)):
        h = steps[n]
        decoded = np.rint(rng.normal(0.0, sigma, 2000) / h) * h  # what decode_sum gives
        assert _residue(decoded, h) < 1e-9 and abs(_residue(decoded, steps[other]) - 0.25) < 0.02
        published = smooth_lattice(decoded, sigma, h, rng)
        for step in (h, steps[other]):
            assert abs(_residue(published, step) - 0.25) < 0.02
    # the relative density error of the residue at these steps (h <= g / 2): below 1e-30
    from fedkmeans.privacy.distributed import check_lattice, lattice_residue_error
    assert lattice_residue_error(max(steps.values()), sigma / 64) < 1e-30
    with pytest.raises(ValueError, match="federation.num-nodes"):
        check_lattice(sigma / 100, sigma)  # a step above half the draw is refused
