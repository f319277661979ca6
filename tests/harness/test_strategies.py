"""The strategies and the mounted client side, in-process, against the experiment path.

A user's ClientApp here loads its node's clients itself (the mixture's points, per
partition, as a user's loader would) and mounts the client side; its run config is
empty. With reproducible noise the strategy's centers and ledger are the experiment's,
bit for bit, on the same data.
"""

from __future__ import annotations

import json
import traceback

import numpy as np
import pytest
from conftest import PAPER, SMALL, flower_log_lines, read_keys, run_server_inprocess
from flwr.app import ArrayRecord, ConfigRecord, Context, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import PrivacySpent

from fedkmeans import data as data_access
from fedkmeans.artefacts import release_view
from fedkmeans.client import OwnPoints, mount
from fedkmeans.config import ConfigError
from fedkmeans.config_node import node_config, node_settings
from fedkmeans.experiment.config import parse_config
from fedkmeans.experiment.engines.inprocess import InProcessGrid
from fedkmeans.local_grid import new_run_id
from fedkmeans.strategies import STRATEGIES, FedDPKMeansStrategy, KMeansStrategy

NODES = 3


def _user_app(config) -> ClientApp:
    """A user's ClientApp: its own loader (here the mixture's clients of its partition)."""
    app = ClientApp()

    def points(context):
        pid = int(context.node_config["partition-id"])
        ids = data_access.node_client_ids(config, pid, NODES)
        return {int(c): data_access.load_client(config, int(c))[0] for c in ids}

    mount(app, points)
    return app


def _grid(app) -> InProcessGrid:
    run_id = new_run_id()
    nodes = [{"partition-id": i, "num-partitions": NODES} for i in range(NODES)]
    return InProcessGrid(app, {}, nodes, run_id)  # the user's run config: nothing of ours


def _settings(flat: dict) -> dict:
    """The flat config's privacy and federation keys as a strategy's keyword arguments."""
    skip = {"privacy.epsilon", "privacy.delta", "privacy.level", "federation.engine"}
    read = read_keys(flat)  # the keys of SMALL this run reads, as the experiment does
    return {key.split(".", 1)[1].replace("-", "_"): read[key] for key in flat
            if key.startswith(("privacy.", "federation.")) and key not in skip}


CASES = {
    "feddp-datapoint": {"algorithm": "feddp-kmeans"},
    "feddp-client": {"algorithm": "feddp-kmeans", "privacy.level": "client",
                     "privacy.lloyds-steps": 2},
    "server-lloyds": {"algorithm": "server-lloyds", "privacy.lloyds-steps": 2},
    # tuning=auto: the estimate round asks the nodes unclipped, then the resolved radius
    "feddp-auto": {"algorithm": "feddp-kmeans", **dict.fromkeys(
        [k for k in PAPER if k != "privacy.lloyds-steps"] + ["privacy.data-radius",
                                                             "privacy.max-points-per-client"],
        "auto")},
}


@pytest.mark.parametrize("case", CASES)
def test_the_strategy_gives_the_experiment_s_centers_and_ledger_bit_for_bit(case, tmp_path):
    flat = {**SMALL, **CASES[case], "privacy.reproducible-noise": True, "seed": 5,
            "output-dir": str(tmp_path / "out")}
    expected = run_server_inprocess(flat, num_nodes=NODES)
    config = parse_config(flat)
    server_x = data_access.load_server(config)[0]
    strategy = STRATEGIES[config.algorithm](
        n_clusters=config.k, epsilon=config.privacy.epsilon, delta=config.privacy.delta,
        level=config.privacy.level, server_data=server_x, seed=5, **_settings(flat))
    result = strategy.start(grid=_grid(_user_app(config)))

    centers = result.arrays["centers"].numpy()
    assert centers.tobytes() == np.asarray(expected["centers"]).tobytes()
    assert result.privacy["releases"] == expected["privacy"]["releases"]
    assert result.privacy["epsilon"] == expected["privacy"]["epsilon"] <= 1.0
    spent = strategy.privacy_spent()
    assert isinstance(spent, PrivacySpent)
    assert spent.epsilon == expected["privacy"]["epsilon"]
    assert spent.num_releases == len(expected["privacy"]["releases"]) > 0
    last = max(result.evaluate_metrics_serverapp)
    metrics = result.evaluate_metrics_serverapp[last]
    assert metrics["epsilon"] == spent.epsilon and metrics["num-releases"] == spent.num_releases
    assert metrics["noise-scale"] == [r["noise_scale"] for r in expected["privacy"]["releases"]]
    # the release is built by release.json's allow-list: the same but for data.* keys
    published = release_view(expected, seed_is_secret=True)
    assert {key: value for key, value in result.release.items() if key != "config"} == {
        key: value for key, value in published.items() if key != "config"}
    assert "seed" not in result.release and "seed" not in result.release["config"]


def test_the_non_private_evaluation_round_matches_the_experiment_s(tmp_path):
    flat = {**SMALL, "privacy.reproducible-noise": True, "output-dir": str(tmp_path / "o")}
    expected = run_server_inprocess(flat, num_nodes=NODES)
    config = parse_config(flat)
    strategy = FedDPKMeansStrategy(n_clusters=4, server_data=data_access.load_server(config)[0],
                           **_settings(flat))
    result = strategy.start(grid=_grid(_user_app(config)), evaluate_clients=True)
    evaluation = next(iter(result.evaluate_metrics_clientapp.values()))
    assert evaluation["num-points"] == expected["metrics"]["num_points"] == 12 * 40
    assert evaluation["cost"] == pytest.approx(expected["metrics"]["cost"], rel=1e-12)


def test_bad_settings_are_one_config_error_naming_the_key():
    q = np.zeros((20, 3))
    with pytest.raises(ConfigError, match="^epsilon must be"):
        FedDPKMeansStrategy(n_clusters=2, epsilon=-1.0, server_data=q)
    with pytest.raises(ConfigError, match=r"unknown strategy setting\(s\) \['lloyd_steps'\]"):
        FedDPKMeansStrategy(n_clusters=2, server_data=q, lloyd_steps=3)
    with pytest.raises(ConfigError, match="^n_clusters must be at most the number of server "
                                          r"points \(20 in server_data\)"):
        FedDPKMeansStrategy(n_clusters=21, server_data=q)
    with pytest.raises(ConfigError, match="^count_noise must be 'auto' or 'gaussian' when "
                                          "aggregation = 'secagg'"):
        FedDPKMeansStrategy(n_clusters=2, server_data=q, level="client", aggregation="secagg",
                    count_noise="laplace")
    with pytest.raises(ConfigError, match="^preprocessing must be one of 'center', "
                                          "'standardize', 'none'"):
        FedDPKMeansStrategy(n_clusters=2, server_data=q, preprocessing="minmax")
    with pytest.raises(ConfigError, match=r"unknown strategy setting\(s\) \['center'\]"):
        FedDPKMeansStrategy(n_clusters=2, server_data=q, center=False)  # preprocessing= says it
    with pytest.raises(ValueError, match="server_data"):
        FedDPKMeansStrategy(n_clusters=2, server_data=np.zeros(5))
    secret = np.array([["1.0", "s3cr3t-Paris"], ["2.0", "3.0"]], dtype=object)
    with pytest.raises(ValueError, match="^server_data must be numbers") as err:
        FedDPKMeansStrategy(n_clusters=2, server_data=secret)
    assert "s3cr3t" not in "".join(traceback.format_exception(err.value))
    with pytest.raises(TypeError, match="abstract"):
        KMeansStrategy(server_data=q)


def test_the_hooks_that_are_not_the_protocol_s_say_so():
    strategy = FedDPKMeansStrategy(n_clusters=2, server_data=np.zeros((20, 3)))
    with pytest.raises(NotImplementedError, match="not Flower training rounds"):
        strategy.configure_train(1, ArrayRecord(), ConfigRecord(), None)
    with pytest.raises(NotImplementedError, match="start"):
        strategy.aggregate_train(1, [])
    with pytest.raises(RuntimeError, match="after start"):
        strategy.configure_evaluate(1, ArrayRecord(), ConfigRecord(), None)
    assert strategy.aggregate_evaluate(1, []) is None
    assert strategy.privacy_spent() == PrivacySpent(0.0, 1e-6, 0, strategy.privacy_spent()
                                                    .accounting_method)
    spent = FedDPKMeansStrategy(n_clusters=2, epsilon=float("inf"),
                        server_data=np.zeros((20, 3))).privacy_spent()
    assert spent.epsilon == float("inf") and spent.num_releases == 0  # as documented
    with pytest.raises(ValueError, match="num_rounds must be left unset"):
        strategy.start(None, num_rounds=3)
    with pytest.raises(ValueError, match="timeout must be a finite number of seconds > 0"):
        strategy.start(None, timeout=-1.0)


def test_the_estimator_and_the_strategies_share_their_defaults():
    import inspect

    from fedkmeans.estimator import FedDPKMeans as Estimator

    strategy = inspect.signature(KMeansStrategy.__init__).parameters
    estimator = inspect.signature(Estimator.__init__).parameters
    for name in ("n_clusters", "epsilon", "delta", "level"):
        assert strategy[name].default == estimator[name].default, name
    assert estimator["n_clusters"].default == 8  # scikit-learn's KMeans default
    config = FedDPKMeansStrategy(server_data=np.zeros((20, 3))).config
    for name in ("lloyds_steps", "data_radius", "max_points_per_client", "split"):
        assert getattr(config.privacy, name) == estimator[name].default, name


@pytest.mark.parametrize("key", ["engine", "num_cpus", "client_cpus", "node_cache_mb",
                                 "output_dir", "optimal_restarts", "optimal_cost", "attack"])
def test_a_harness_key_is_refused_in_one_line_not_ignored(key):
    with pytest.raises(ConfigError, match=f"^{key} is not a strategy setting: .*"
                                          "python -m fedkmeans.experiment") as err:
        FedDPKMeansStrategy(n_clusters=2, server_data=np.zeros((20, 3)), **{key: 1})
    assert "\n" not in str(err.value)


def test_a_strategy_s_config_is_the_protocol_s_alone():
    """The strategy builds a ProtocolConfig (issue #51): no data set, engine or attack."""
    from fedkmeans.config import ProtocolConfig, protocol_keys

    config = FedDPKMeansStrategy(n_clusters=2, server_data=np.zeros((20, 3))).config
    assert type(config) is ProtocolConfig
    assert list(config.to_flat()) == protocol_keys()
    assert not any(key.startswith(("data.name", "federation.engine", "attack", "output"))
                   for key in config.to_flat())


def test_start_s_timeout_is_each_round_s_timeout(monkeypatch):
    seen = {}

    def fake_run(grid, config, server_x, **kwargs):
        seen["timeout"] = config.federation.round_timeout
        raise RuntimeError("stop")

    monkeypatch.setattr("fedkmeans.strategies.base.run_protocol", fake_run)
    strategy = FedDPKMeansStrategy(n_clusters=2, server_data=np.zeros((20, 3)))
    with pytest.raises(RuntimeError, match="stop"):
        strategy.start(None, timeout=12.5)
    assert seen["timeout"] == 12.5
    with pytest.raises(RuntimeError, match="stop"):
        strategy.start(None)
    assert seen["timeout"] == strategy.config.federation.round_timeout == 600.0


def test_a_node_reads_its_settings_from_the_request_and_sends_no_secret_seed():
    private = parse_config({"privacy.reproducible-noise": True, "seed": 9})
    sent = node_settings(private)
    assert "seed" not in sent  # it keys the server's noise here
    assert set(sent) == {"algorithm"} | {k for k in private.to_flat() if k.startswith("privacy.")}
    assert node_config(sent).privacy == private.privacy
    kfed = parse_config({"algorithm": "kfed", "seed": 9})
    assert node_config(node_settings(kfed)).seed == 9  # k-FED's local k-means
    with pytest.raises(ConfigError, match="'privacy.level' must be sent by the server"):
        node_config({})
    with pytest.raises(ConfigError, match="'privacy.data-radius'"):
        node_config({**sent, "privacy.data-radius": -1.0})


def test_the_experiment_refuses_the_mounted_data_set_before_any_node_starts(tmp_path):
    from fedkmeans.experiment.cli import preflight

    with pytest.raises(ConfigError, match="'data.name' must name a data set the experiment "
                                          "can load; 'mounted'"):
        preflight({**{k: v for k, v in SMALL.items() if not k.startswith("data.")},
                   "data.name": "mounted", "output-dir": str(tmp_path / "x")})


def test_mount_refuses_points_that_are_not_a_federation_s():
    context = Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})
    with pytest.raises(ValueError, match="differ in dimension"):
        OwnPoints(lambda c: {1: np.zeros((3, 2)), 2: np.zeros((3, 4))}).register(context)
    with pytest.raises(ValueError, match="points of client 7"):
        OwnPoints(lambda c: {7: np.full((3, 2), np.nan)}).register(context)
    with pytest.raises(TypeError, match="callable"):
        mount(ClientApp(), points={1: np.zeros((3, 2))})
    ids, dim = OwnPoints(lambda c: {9: np.ones((3, 2)), 4: np.ones((1, 2))}).register(context)
    assert ids.tolist() == [4, 9] and dim == 2


def test_the_curious_wrapper_observes_without_changing_the_run_or_its_release(tmp_path):
    from fedkmeans.attacks.strategy import CuriousServer

    flat = {**SMALL, "privacy.reproducible-noise": True}
    config = parse_config(flat)
    server_x = data_access.load_server(config)[0]
    honest = FedDPKMeansStrategy(n_clusters=4, server_data=server_x, **_settings(flat))
    expected = honest.start(grid=_grid(_user_app(config)))
    curious = CuriousServer(FedDPKMeansStrategy(n_clusters=4, server_data=server_x,
                                        **_settings(flat)), report_path=tmp_path / "r.json")
    result = curious.start(grid=_grid(_user_app(config)))

    assert result.arrays["centers"].numpy().tobytes() == \
        expected.arrays["centers"].numpy().tobytes()
    assert result.release == expected.release and "attack" not in result.release
    assert curious.privacy_spent() == honest.privacy_spent()
    report = curious.report
    assert report["clients_observed"] == 12  # every client's rows, one round at a time
    assert report["observed_rounds"] == ["init-1", "init-2", "init-3"]
    assert report["ground_truth"].startswith("unavailable")  # the nodes' own data
    assert json.loads((tmp_path / "r.json").read_text()) == report
    assert (tmp_path / "r.json").stat().st_mode & 0o777 == 0o600  # exact counts: not public
    with pytest.raises(TypeError, match="wraps a fedkmeans strategy"):
        CuriousServer(object())


def test_under_secagg_the_mounted_nodes_give_the_experiment_s_bits(monkeypatch, tmp_path):
    """The SecAgg+ ``train`` handler of the mount gives the bundled ClientApp's bits.

    The shares are seeded here alone (as tests/harness/test_secagg.py does), so both paths'
    noise can be compared bit for bit.
    """
    from fedkmeans.node import NodeData
    from fedkmeans.seeding import generator

    contribution = NodeData.secagg_contribution

    def seeded_shares(self, *args, **kwargs):
        share_rng = lambda stage, c: generator(5, "noise-share", stage, c)  # noqa: E731
        return contribution(self, *args, share_rng=share_rng, **kwargs)

    monkeypatch.setattr(NodeData, "secagg_contribution", seeded_shares)
    flat = {**SMALL, "privacy.aggregation": "secagg", "privacy.count-noise": "gaussian",
            "privacy.reproducible-noise": True, "seed": 5, "output-dir": str(tmp_path / "o")}
    expected = run_server_inprocess(flat, num_nodes=NODES)
    config = parse_config(flat)
    strategy = FedDPKMeansStrategy(n_clusters=4, server_data=data_access.load_server(config)[0],
                           seed=5, **_settings(flat))
    result = strategy.start(grid=_grid(_user_app(config)))
    assert result.privacy["aggregation"] == "secagg"
    assert "secagg" not in result.privacy  # participation: a diagnostic, not released
    assert result.outcome.privacy_record()["secagg"]["rounds"]
    assert result.privacy["releases"] == expected["privacy"]["releases"]
    assert result.arrays["centers"].numpy().tobytes() == \
        np.asarray(expected["centers"]).tobytes()


def test_the_client_level_ledger_is_flower_s_privacy_accountant(tmp_path):
    from flwr.serverapp import GaussianPrivacyEvent
    from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping, FedAvg


    flat = {**SMALL, "privacy.level": "client", "privacy.public-num-clients": 12}
    config = parse_config(flat)
    strategy = FedDPKMeansStrategy(n_clusters=4, server_data=data_access.load_server(config)[0],
                           level="client", **_settings(flat))
    with pytest.raises(RuntimeError, match="after start"):
        strategy.flower_accountant()
    strategy.start(grid=_grid(_user_app(config)))
    ledger = strategy.flower_accountant()
    run = strategy.privacy_spent()
    assert ledger.get_privacy_spent() == run  # the same ledger, the same epsilon
    assert ledger.config.population_size == 12 and ledger.num_releases == run.num_releases
    # a later Flower DP training on the same clients composes with the run
    DifferentialPrivacyServerSideFixedClipping(FedAvg(), noise_multiplier=2.0,
                                               clipping_norm=1.0, num_sampled_clients=12,
                                               accountant=ledger)
    event = GaussianPrivacyEvent(noise_multiplier=2.0, sample_size=12, population_size=12)
    assert ledger.would_exceed(event, max_epsilon=run.epsilon)
    state = ledger.state_dict()
    ledger.compose(event, count=2)
    assert ledger.num_releases == run.num_releases + 2
    assert ledger.get_epsilon(1e-6) > run.epsilon
    ledger.load_state_dict(state)
    assert ledger.get_privacy_spent() == run


def test_a_flower_event_alone_costs_the_analytic_gaussian_s_epsilon():
    """Hand check: one unsampled Gaussian event of z = 1 at delta = 1e-5 is the exact
    (Balle & Wang) Gaussian curve's epsilon, to the PLD's pessimistic discretisation."""
    from flwr.serverapp import GaussianPrivacyEvent

    from fedkmeans.privacy.accountant import PrivacyLedger
    from fedkmeans.privacy.analytic_gaussian import gaussian_epsilon
    from fedkmeans.strategies.accounting import flower_ledger

    config = parse_config({"privacy.level": "client", "privacy.public-num-clients": 10,
                           "privacy.delta": 1e-5})
    ledger = flower_ledger(config, PrivacyLedger())
    ledger.compose(GaussianPrivacyEvent(noise_multiplier=1.0, sample_size=10,
                                        population_size=10))
    exact = gaussian_epsilon(1.0, 1e-5)
    assert 4.0 < exact < 5.0  # z = 1: epsilon about 4.4 at delta = 1e-5
    assert exact <= ledger.get_epsilon(1e-5) <= exact + 1e-3
    assert ledger.get_delta(exact + 1e-3) <= 1e-5
    with pytest.raises(ValueError, match="population_size 11"):
        ledger.compose(GaussianPrivacyEvent(noise_multiplier=1.0, sample_size=10,
                                            population_size=11))
    with pytest.raises(ValueError, match="one data point's"):
        flower_ledger(parse_config({}), PrivacyLedger())
    with pytest.raises(ValueError, match="privacy.public-num-clients"):
        flower_ledger(parse_config({"privacy.level": "client"}), PrivacyLedger())


def test_a_user_s_own_app_shows_the_progress_and_summary_lines(tmp_path):
    """Through Flower's logger, as ``flwr run --stream`` streams it; the estimator is quiet."""
    flat = {**SMALL, "privacy.reproducible-noise": True}
    config = parse_config(flat)
    with flower_log_lines() as lines:
        FedDPKMeansStrategy(n_clusters=4, server_data=data_access.load_server(config)[0],
                            **_settings(flat)).start(grid=_grid(_user_app(config)))
    progress = [line for line in lines if line.startswith("[progress] round ")]
    assert progress and progress[-1].endswith(f"({len(progress)}/{len(progress)})")
    summary = [line for line in lines if line.startswith("[summary] feddp-kmeans: returned ")]
    assert len(summary) == 1 and "epsilon" in summary[0] and "wrote" not in summary[0]
    assert any(line == "registered the nodes (d=8; how many: diagnostics.json)" for line in lines)
