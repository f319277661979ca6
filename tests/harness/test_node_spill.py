"""Nodes built as one block and spilled to files give the same bits as before."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedkmeans.data import load_client
from fedkmeans.data.mixture import mixture_block, mixture_client
from fedkmeans.experiment.cli import run_flat
from fedkmeans.experiment.config import parse_config
from fedkmeans.node import NodeData
from fedkmeans.privacy.clipping import row_norms


@pytest.mark.parametrize("partition", ["iid", "dirichlet"])
def test_mixture_block_is_the_clients_concatenated_bit_for_bit(partition):
    ids = [7, 0, 3, 12]
    x, y = mixture_block(5, ids, k=4, dim=6, n_points=9, variance=0.7, partition=partition,
                         dirichlet_alpha=0.3)
    parts = [mixture_client(5, c, k=4, dim=6, n_points=9, variance=0.7,
                            partition=partition, dirichlet_alpha=0.3) for c in ids]
    np.testing.assert_array_equal(x, np.concatenate([p[0] for p in parts]))
    np.testing.assert_array_equal(y, np.concatenate([p[1] for p in parts]))


CONFIG = {"data.num-clients": 30, "data.points-per-client": 15, "data.dim": 5, "k": 3,
          "data.components": 3, "privacy.data-radius": 3.5}


def test_a_node_s_block_clips_like_one_client_at_a_time():
    config = parse_config(CONFIG)
    node = NodeData.load(config, 1, 3)
    assert 0 < len(node.clipped_clients) < node.client_ids.size
    for c in node.client_ids.tolist():
        x, y = load_client(config, c)
        norms = row_norms(x)  # the package's one norm of a point
        clipped = x * np.minimum(1.0, 3.5 / norms)[:, None]
        if c in node.clipped_clients:
            np.testing.assert_array_equal(node.raw_norms[c], norms)
            np.testing.assert_allclose(node.points[c], clipped, rtol=1e-15)
        else:
            np.testing.assert_array_equal(node.points[c], x)
        np.testing.assert_array_equal(node.labels[c], y)


def _answers(node: NodeData) -> dict:
    rng = np.random.default_rng(0)
    centers, basis = rng.normal(size=(3, 5)), np.linalg.qr(rng.normal(size=(5, 3)))[0].T
    clients = node.client_ids.tolist()
    with node.resident():
        arithmetic = node.arithmetic
        return {**arithmetic.covariance_triangles(clients),
                **arithmetic.sums_counts(clients, centers),
                **arithmetic.histogram(clients[1:4], basis, rng.normal(size=(7, 3))),
                **arithmetic.evaluate(centers)}


def test_a_spilled_node_and_one_opened_from_its_files_answer_the_same(tmp_path):
    config = parse_config(CONFIG)
    node = NodeData.load(config, 2, 3)
    before = _answers(node)
    path = node.spill(tmp_path, "n2")
    assert node.memory.spilled and node.nbytes == 0 and not node.points
    opened = NodeData.open_spilled(config, path)
    assert opened.clipped_clients == node.clipped_clients
    for answers in (_answers(node), _answers(opened)):
        assert answers.keys() == before.keys()
        for key, value in before.items():
            np.testing.assert_array_equal(answers[key], value)
    assert not node.points and not opened.points  # mapped only inside resident()


def test_a_run_whose_nodes_spill_gives_the_same_bits(tmp_path):
    flat = {"data.num-clients": 200, "data.points-per-client": 10, "data.dim": 6,
            "data.components": 3, "k": 3, "federation.num-nodes": 8,
            "privacy.reproducible-noise": True, "privacy.lloyds-steps": 1}
    held = run_flat({**flat, "output-dir": str(tmp_path / "held")})
    spilled = run_flat({**flat, "federation.node-cache-mb": 1e-4,
                        "output-dir": str(tmp_path / "spilled")})
    assert held["centers"] == spilled["centers"]
    assert held["privacy"]["releases"] == spilled["privacy"]["releases"]
    assert held["metrics"]["cost"] == spilled["metrics"]["cost"]


def test_registration_refuses_a_client_two_nodes_announce_with_flower_sized_node_ids():
    from fedkmeans.server.pool import FederationError, _refuse_duplicates

    big = 2**63 + 5  # Flower's node ids are unsigned 64-bit
    _refuse_duplicates({big: np.arange(0, 10, 2), 7: np.arange(1, 10, 2)})
    with pytest.raises(FederationError, match=f"client id 4 .*{big}.* and 3"):
        _refuse_duplicates({big: np.arange(0, 10, 2), 3: np.array([4])})


@pytest.mark.parametrize("spill", [False, True])
def test_a_node_first_asked_unclipped_then_clipped_equals_one_loaded_clipped(spill, tmp_path):
    """The estimate round asks with radius auto; the next rounds with the resolved one."""
    unclipped = parse_config({**CONFIG, "privacy.data-radius": "auto"})
    node = NodeData.load(unclipped, 1, 3)
    assert node.radius is None and not node.clipped_clients
    if spill:
        node.spill(tmp_path, "raw")
    clipped = node.retarget(parse_config(CONFIG), 1)
    fresh = NodeData.load(parse_config(CONFIG), 1, 3)
    assert clipped.radius == fresh.radius == 3.5
    with clipped.resident():  # a spilled file of unclipped points is clipped when mapped
        assert clipped.clipped_clients == fresh.clipped_clients
        for c in fresh.client_ids.tolist():
            np.testing.assert_array_equal(clipped.raw_norms.get(c, 0),
                                          fresh.raw_norms.get(c, 0))
            np.testing.assert_array_equal(clipped.points[c], fresh.points[c])
    a, b = _answers(clipped), _answers(fresh)
    for key, value in b.items():
        np.testing.assert_array_equal(a[key], value)
    if spill:  # the file still holds the points as built
        raw = NodeData.load(unclipped, 1, 3)
        np.testing.assert_array_equal(np.load(tmp_path / "raw" / "points.npy"),
                                      np.concatenate([raw.points[c] for c in
                                                      raw.client_ids.tolist()]))
    else:
        assert clipped.retarget(parse_config({**CONFIG, "privacy.data-radius": 5.0})) is None


def test_the_optimal_cost_computes_scikit_learn_s_tolerance_in_blocks(monkeypatch):
    """The override must hook scikit-learn's method (a rename once unhooked it)."""
    from sklearn.cluster import KMeans

    from fedkmeans import metrics
    from fedkmeans.clustering import optimal

    calls = []
    real = optimal._variance_mean
    monkeypatch.setattr(optimal, "_variance_mean", lambda x: calls.append(1) or real(x))
    monkeypatch.setattr(np, "var", lambda *a, **k: pytest.fail("np.var holds a copy"))
    x = np.random.default_rng(0).normal(size=(400, 3))
    cost, centers = optimal.optimal_cost(x.copy(), 3, seed=1, n_init=2, overwrite_x=True)
    monkeypatch.undo()
    assert calls
    model = KMeans(3, n_init=2, random_state=optimal._sklearn_random_state(1)).fit(x)
    np.testing.assert_allclose(centers, model.cluster_centers_, rtol=1e-9)
    assert abs(cost - metrics.kmeans_cost(x, model.cluster_centers_)) <= 1e-9 * cost


def test_the_pinned_scikit_learn_sets_what_the_tolerance_override_replaces():
    """The pin of pyproject.toml holds, and on the installed scikit-learn the private
    method the optimal cost overrides still sets the tolerance, and only with ``np.var``
    (what the override replaces), and everything else fit reads from it as before."""
    from importlib.metadata import version

    import sklearn
    import tomllib
    from packaging.specifiers import SpecifierSet
    from sklearn.cluster import KMeans

    from fedkmeans.clustering import optimal

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml")
                              .read_text())
    pins = [d for d in pyproject["project"]["dependencies"] if d.startswith("scikit-learn")]
    assert pins == [f"scikit-learn{optimal.SKLEARN_PINNED}"]
    assert version("scikit-learn") in SpecifierSet(optimal.SKLEARN_PINNED)
    assert sklearn.__version__ == version("scikit-learn")
    x = np.random.default_rng(3).normal(size=(300, 4)) * [1.0, 2.0, 3.0, 4.0]
    stock, lean = KMeans(4, n_init=3, tol=1e-3), optimal._lean_kmeans(KMeans)(
        4, n_init=3, tol=1e-3)
    stock._check_params_vs_input(x)
    lean._check_params_vs_input(x)
    assert stock._tol == pytest.approx(np.mean(np.var(x, axis=0)) * 1e-3, rel=1e-12)
    assert lean._tol == pytest.approx(stock._tol, rel=1e-12)
    private = {k: v for k, v in vars(stock).items() if k.startswith("_") and k != "_tol"}
    assert private and private == {k: v for k, v in vars(lean).items()
                                   if k.startswith("_") and k != "_tol"}
    assert lean.tol == 1e-3  # the public parameter is left as it was


def test_the_optimal_cost_s_seeding_in_blocks_is_scikit_learn_s():
    """The same k-means++ seeds as scikit-learn's public ``kmeans_plusplus``, in row
    blocks, and the same fit as ``init="k-means++"`` through the ``init`` callable."""
    from sklearn.cluster import KMeans, kmeans_plusplus

    from fedkmeans.clustering import optimal

    rng = np.random.default_rng(4)
    x = rng.normal(size=(40_000, 20)) + rng.integers(0, 6, size=(40_000, 1))
    norms, weights = np.einsum("ij,ij->i", x, x), np.ones(x.shape[0])
    expected, _ = kmeans_plusplus(x, 10, x_squared_norms=norms, sample_weight=weights,
                                  random_state=np.random.RandomState(7))
    seeds = optimal._kmeans_plusplus_in_blocks(x, 10, norms, weights,
                                               np.random.RandomState(7))
    assert x.shape[0] > optimal._LEAN_BLOCK_ENTRIES // x.shape[1]  # several blocks
    np.testing.assert_array_equal(seeds, expected)
    small = x[:3000]
    by_name = KMeans(10, n_init=2, random_state=5).fit(small)
    by_callable = KMeans(10, init=optimal._greedy_kmeans_plusplus, n_init=2,
                         random_state=5).fit(small)
    np.testing.assert_array_equal(by_callable.cluster_centers_, by_name.cluster_centers_)
    assert by_callable.n_iter_ == by_name.n_iter_


@pytest.mark.parametrize("spill", [False, True])
def test_a_node_registered_as_built_is_mapped_and_clipped_without_building_again(
        spill, tmp_path, monkeypatch):
    """Registration builds the points as loaded; the first round maps and clips them.

    In memory, or spilled as built (read back from its file): the same bits as a node
    loaded with the transform and the radius, and ``NodeData.load`` is never called again.
    """
    from fedkmeans.data.transform import PublicTransform

    transform = PublicTransform(shift=np.full(5, 0.5), scale=np.linspace(0.5, 1.5, 5))
    registered = NodeData.load(parse_config(CONFIG), 1, 3, clip=False)
    if spill:
        registered.spill(tmp_path, "built")
    loads = []
    load = NodeData.load
    monkeypatch.setattr(NodeData, "load", classmethod(
        lambda cls, *a, **k: loads.append(a) or load.__func__(cls, *a, **k)))
    node = registered.retarget(parse_config(CONFIG), 1, transform=transform)
    assert loads == [] and node is not None and node.memory.spilled is False
    monkeypatch.undo()
    fresh = NodeData.load(parse_config(CONFIG), 1, 3, transform=transform)
    assert node.clipped_clients == fresh.clipped_clients and node.clipped_clients
    for c in fresh.client_ids.tolist():
        np.testing.assert_array_equal(node.points[c], fresh.points[c])
    a, b = _answers(node), _answers(fresh)
    for key, value in b.items():
        np.testing.assert_array_equal(a[key], value)


def test_an_actor_finds_the_node_another_registered_and_does_not_build_it(tmp_path,
                                                                          monkeypatch):
    """The flower engine's shared directory: the as-built shard of registration is read."""
    from flwr.app import Context, RecordDict

    from fedkmeans import client_app
    from fedkmeans.data.transform import PublicTransform

    monkeypatch.setenv(client_app.SHARD_DIR_ENV, str(tmp_path))
    transform = PublicTransform(shift=np.full(5, 0.5), scale=None)
    flat = {**CONFIG, "privacy.data-radius": "auto"}
    context = Context(run_id=1, node_id=1, state=RecordDict(), run_config=flat,
                      node_config={"partition-id": 1, "num-partitions": 3})
    try:
        client_app.forget_nodes()
        registered = client_app.node_data(context, clip=False)  # registration
        ids = registered.client_ids.tolist()
        client_app.forget_nodes()  # another actor: nothing of the node in memory
        loads = []
        load = NodeData.load
        monkeypatch.setattr(NodeData, "load", classmethod(
            lambda cls, *a, **k: loads.append(a) or load.__func__(cls, *a, **k)))
        node = client_app.node_data(context, {**transform.to_settings(),
                                              "privacy.data-radius": 3.5})
        assert loads == []
        monkeypatch.undo()
        fresh = NodeData.load(parse_config(CONFIG), 1, 3, transform=transform)
        with node.resident():
            for c in ids:
                np.testing.assert_array_equal(node.points[c], fresh.points[c])
    finally:
        client_app.forget_nodes()


def test_each_node_builds_its_points_once_at_registration_with_the_transform(monkeypatch,
                                                                             tmp_path):
    """The register request carries the run's settings: the nodes build, mapped, then."""
    from fedkmeans.server.pool import ClientPool

    loads, after_register = [], []
    load, register = NodeData.load, ClientPool.register
    monkeypatch.setattr(NodeData, "load", classmethod(
        lambda cls, *a, **k: loads.append(k.get("transform")) or load.__func__(cls, *a, **k)))

    def counted(self, *a, **k):
        register(self, *a, **k)
        after_register.append(len(loads))

    monkeypatch.setattr(ClientPool, "register", counted)
    run_flat({**CONFIG, "privacy.data-radius": "auto", "privacy.epsilon": 3.0,
              "federation.num-nodes": 3, "optimal-cost": "skip",
              "output-dir": str(tmp_path / "run")})
    assert after_register == [3] and len(loads) == 3  # built at registration, once
    assert all(t is not None and not t.is_identity for t in loads)  # mapped by Q's mean
