"""Deployment with real processes: SuperLink + 3 SuperNodes on localhost, TLS + node auth.

One module-scoped deployment (prepared with the CLI, started with `fedkmeans.experiment.deploy.up`)
serves the end-to-end run and the refused-key test; the insecure test starts its own.
Everything is stopped by PID and the tests assert that no process carrying the
deployment's marker is left. Each deployment round costs several seconds (nodes poll
every 3 s and start a fresh ClientApp process per message), so the run is kept to
FedDP-KMeans with T = 0 on a tiny mixture (5 rounds).
"""

import json
import math
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from fedkmeans.data.npz import load_npz
from fedkmeans.experiment import deploy
from fedkmeans.experiment.cli import run_flat
from fedkmeans.experiment.deploy import pki
from fedkmeans.experiment.engines.flower import free_port, processes_with_env

MIXTURE = {
    "seed": 0,
    "data.dim": 8,
    "data.components": 4,
    "data.num-clients": 12,
    "data.points-per-client": 40,
    "data.server-points-per-component": 10,
    "data.server-uniform-points": 10,
}
RUN = {
    "k": 4,
    "seed": 0,
    "privacy.epsilon": 1.0,
    "privacy.data-radius": 4.0,
    "privacy.max-points-per-client": 40,
    # bit-equal centers against the in-process engine need the explicit opt-in
    "privacy.reproducible-noise": True,
}


def _leftovers(root: Path) -> list[int]:
    return processes_with_env(deploy.MARKER, str(deploy.Layout(root).root))


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    root = tmp_path_factory.mktemp("deployment")
    mixture = [f"{k}={v}" for k, v in MIXTURE.items()]
    assert deploy.main(["prepare", str(root), "--nodes", "3", "--mixture", *mixture]) == 0
    cache = tmp_path_factory.getbasetemp() / "fedkmeans-cache"
    try:
        started = time.monotonic()
        state = deploy.up(root, timeout=240, extra_env={"FEDKMEANS_CACHE_DIR": str(cache)})
        state["up_seconds"] = time.monotonic() - started
        yield root, state
    finally:
        deploy.down(root)
        assert _leftovers(root) == []
        assert not deploy.Layout(root).state.exists()


# -- no processes ---------------------------------------------------------------------------
def test_split_assigns_every_client_to_exactly_one_node(tmp_path):
    x = np.arange(40, dtype=float).reshape(20, 2)
    client = np.repeat(np.arange(10, 20), 2)
    arrays = {"x": x, "client": client, "server_x": np.ones((3, 2)), "y": None,
              "server_y": None}
    nodes, server = deploy.split_dataset(arrays, 3, tmp_path, server_data="public")
    hosted = [load_npz(p).client_ids().tolist() for p in nodes]
    assert hosted == [[10, 13, 16, 19], [11, 14, 17], [12, 15, 18]]  # i-th id -> node i mod 3
    assert sorted(sum(hosted, [])) == list(range(10, 20))
    assert load_npz(server).x.shape == (3, 2)  # public: only the server points
    with pytest.raises(ValueError, match="num_nodes must be in"):
        deploy.split_dataset(arrays, 11, tmp_path)


def test_certificates_chain_to_the_offline_ca_and_cover_the_local_names(tmp_path):
    sans = deploy.make_certificates(tmp_path / "certs", ["link.example", "10.0.0.7"])
    assert sans == ["DNS:localhost", "IP:127.0.0.1", "IP:::1", "DNS:link.example",
                    "IP:10.0.0.7"]
    certs = tmp_path / "certs"
    assert sorted(p.name for p in certs.iterdir()) == ["ca.crt", "ca.key", "server.key",
                                                      "server.pem"]
    for name in ("ca.key", "server.key"):
        assert certs.joinpath(name).stat().st_mode & 0o077 == 0  # owner only
        assert b"ENCRYPTED" not in certs.joinpath(name).read_bytes()
    ca = x509.load_pem_x509_certificate(certs.joinpath("ca.crt").read_bytes())
    server = x509.load_pem_x509_certificate(certs.joinpath("server.pem").read_bytes())
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert not server.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    server.verify_directly_issued_by(ca)  # raises unless the CA's key signed it
    san = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost", "link.example"]
    assert [str(a) for a in san.get_values_for_type(x509.IPAddress)] == [
        "127.0.0.1", "::1", "10.0.0.7"]
    key = serialization.load_pem_private_key(certs.joinpath("server.key").read_bytes(), None)
    assert key.public_key() == server.public_key()
    for host in ("localhost", "127.0.0.1", "::1", "link.example"):
        pki.verify_server_certificate(certs.joinpath("ca.crt").read_bytes(),
                                      certs.joinpath("server.pem").read_bytes(), host)
    with pytest.raises(deploy.DeploymentError, match="does not verify for other.example"):
        pki.verify_server_certificate(certs.joinpath("ca.crt").read_bytes(),
                                      certs.joinpath("server.pem").read_bytes(), "other.example")
    # another CA did not sign it
    deploy.make_certificates(tmp_path / "other")
    with pytest.raises(deploy.DeploymentError, match="does not verify"):
        pki.verify_server_certificate((tmp_path / "other" / "ca.crt").read_bytes(),
                                      certs.joinpath("server.pem").read_bytes())
    with pytest.raises(ValueError, match="invalid host name"):
        deploy.make_certificates(tmp_path / "bad", ["a,b"])


def test_node_keys_are_unencrypted_openssh_ecdsa_p384_pairs(tmp_path):
    # Flower 1.41 and 1.42 load them with cryptography's OpenSSH loaders, without a password.
    paths = deploy.make_node_keys(tmp_path / "keys", 2)
    assert [p.name for p in paths] == ["node-0", "node-1"]
    publics = []
    for i, path in enumerate(paths):
        assert path.read_bytes().startswith(b"-----BEGIN OPENSSH PRIVATE KEY-----")
        assert path.stat().st_mode & 0o077 == 0
        private = serialization.load_ssh_private_key(path.read_bytes(), password=None)
        assert isinstance(private, ec.EllipticCurvePrivateKey)
        assert private.curve.name == "secp384r1"
        line = path.with_name(path.name + ".pub").read_text()
        assert line.startswith("ecdsa-sha2-nistp384 ") and line.endswith(f" fedkmeans-node-{i}\n")
        public = serialization.load_ssh_public_key(line.encode())
        assert public == private.public_key()
        publics.append(public)
    assert publics[0] != publics[1]


def test_commands_and_bad_inputs_are_named(tmp_path):
    with pytest.raises(ValueError, match="must not contain quotes"):
        deploy.node_config(0, 1, "/tmp/it's.npz")
    with pytest.raises(deploy.DeploymentError, match="inside the app directory"):
        deploy.prepare(deploy.PROJECT_DIR / "deploy-here", 2)
    with pytest.raises(deploy.DeploymentError, match="run `prepare` first"):
        deploy.up(tmp_path / "nothing")
    assert deploy.parse_overrides(["privacy.epsilon=inf", "algorithm=kfed", "k=4"]) == {
        "privacy.epsilon": math.inf, "algorithm": "kfed", "k": 4}
    manifest = deploy.prepare(tmp_path / "d", 2, mixture=MIXTURE, hosts=["link.example"])
    assert manifest["sans"] == ["DNS:localhost", "IP:127.0.0.1", "IP:::1", "DNS:link.example"]
    text = deploy.commands(tmp_path / "d", superlink="link.example:9093")
    assert "--enable-supernode-auth" in text and "--disable-runtime-dependency-installation" in text
    assert text.count("flwr supernode register") == 2
    assert "--auth-supernode-private-key" in text and "data.name=\"npz\"" in text
    insecure = deploy.commands(tmp_path / "d", insecure=True)
    assert "--insecure" in insecure and "--enable-supernode-auth" not in insecure
    assert "register" not in insecure and "insecure = true" in insecure


# -- real processes -------------------------------------------------------------------------
@pytest.mark.flower
def test_tls_auth_deployment_runs_feddp_kmeans_like_the_inprocess_engine(deployment, tmp_path):
    root, state = deployment
    layout = deploy.Layout(root)
    assert not state["insecure"] and len(state["node_ids"]) == 3
    assert len(state["online"]) == 3
    print(f"up: {state['up_seconds']:.1f} s")

    result = deploy.run(root, RUN, output_dir=tmp_path / "deployed", timeout=900)
    print(f"run: {result['wall_seconds']:.1f} s; timings {result['timings']}")
    centers = np.array(result["centers"])
    assert centers.shape == (4, 8) and np.isfinite(centers).all()
    privacy, metrics = result["privacy"], result["metrics"]
    assert privacy["epsilon"] <= privacy["target_epsilon"] == 1.0
    assert result["federation"]["num_nodes"] == 3
    assert result["federation"]["num_clients"] == 12
    assert result["federation"]["rejected_replies"] == []
    assert metrics["cost"] <= 1.5 * metrics["optimal_cost"]  # loose: 480 points at eps = 1
    assert result["config"]["data.name"] == "npz"
    online = [n for n in deploy.list_nodes(layout) if n["status"] == "online"]
    assert sorted(n["node-id"] for n in online) == sorted(state["node_ids"].values())

    # Same seed => the same centers, bit for bit, from the in-process engine on the full
    # file, and for another assignment of clients to nodes (replies are summed in
    # client-id order, so the sharding does not matter).
    manifest = json.loads(layout.manifest.read_text())
    for nodes in (3, 2):
        inprocess = run_flat({
            **RUN, "data.name": "npz", "data.path": manifest["server_file"],
            "federation.num-nodes": nodes, "output-dir": str(tmp_path / f"inprocess-{nodes}"),
        })
        np.testing.assert_array_equal(np.array(inprocess["centers"]), centers)
        assert inprocess["privacy"]["releases"] == privacy["releases"]

    # No client data in any process log of the deployment.
    logs = "".join(p.read_text(errors="replace") for p in layout.logs.glob("*.log"))
    values = np.concatenate([load_npz(f).x.ravel()[:20] for f in manifest["node_files"]])
    for value in values:
        text = f"{value:.10f}"
        text = text[: text.index(".") + 7]
        assert text not in logs, f"a data value ({text}) appears in the logs"


@pytest.mark.flower
def test_unregistered_node_key_is_refused(deployment, tmp_path):
    root, state = deployment
    layout = deploy.Layout(root)
    (rogue,) = deploy.make_node_keys(tmp_path / "rogue", 1)
    command = deploy.supernode_command(
        layout, 0, 3, superlink=state["superlink"], port=free_port(), key=rogue
    )
    log = tmp_path / "rogue.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command, env=deploy.deployment_env(layout, tmp_path / "home"),
            stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        code = proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text(errors="replace")
    assert code != 0
    assert "Failed to activate SuperNode" in text and "2004" in text
    online = [n for n in deploy.list_nodes(layout) if n["status"] == "online"]
    assert len(online) == 3  # the three registered nodes, not the rogue one


@pytest.mark.flower
def test_insecure_mode_only_when_asked(tmp_path):
    root = tmp_path / "insecure"
    deploy.prepare(root, 2, mixture=MIXTURE, secure=False)
    with pytest.raises(deploy.DeploymentError, match="without certificates"):
        deploy.up(root)  # TLS is the default; no certificates => refuse, start nothing
    assert _leftovers(root) == []
    try:
        state = deploy.up(root, insecure=True, timeout=180)
        assert state["insecure"] and len(state["online"]) == 2
        superlink = state["processes"][0]["command"]
        assert "--insecure" in superlink and "--enable-supernode-auth" not in superlink
        config = (deploy.Layout(root).cli_home / "config.toml").read_text()
        assert "insecure = true" in config
    finally:
        deploy.down(root)
    assert _leftovers(root) == []


@pytest.mark.flower
def test_killed_supernode_costs_utility_not_privacy(tmp_path):
    """Issue 4: SIGKILL one of 3 SuperNodes after FedDP-Init step 1 of a real deployment.

    The server waits `round-timeout` for the dead node (or takes the SuperLink's error
    reply for it), logs it, finishes every later round with the 8 of 12 clients that
    answer (min-replies 0.5), and the noise (calibrated to one unit, not to the number
    of replies) and the ledger are those of a complete run.
    """
    import os
    import signal
    import threading

    root = tmp_path / "killed"
    mixture = [f"{k}={v}" for k, v in MIXTURE.items()]
    assert deploy.main(["prepare", str(root), "--nodes", "3", "--mixture", *mixture]) == 0
    out = tmp_path / "out"
    overrides = {**RUN, "privacy.lloyds-steps": 1, "federation.min-replies": 0.5,
                 "federation.round-timeout": 45}
    try:
        state = deploy.up(root, timeout=240)
        victim = next(p for p in state["processes"] if p["role"] == "supernode-2")
        outcome: dict = {}
        runner = threading.Thread(target=lambda: outcome.update(
            result=deploy.run(root, overrides, output_dir=out, timeout=600)))
        runner.start()
        deadline = time.monotonic() + 300
        while not (out / "checkpoint" / "init-1.npz").exists():
            assert time.monotonic() < deadline and runner.is_alive(), "init-1 never finished"
            time.sleep(0.5)
        os.killpg(victim["pid"], signal.SIGKILL)  # the SuperNode and its ClientApp processes
        runner.join(timeout=650)
        assert "result" in outcome, "the run did not finish after a SuperNode died"
        result = outcome["result"]
    finally:
        deploy.down(root)
    assert _leftovers(root) == []

    # Every later round is logged as lost for the dead node (by its node id, also when
    # the SuperLink answers "Node Unavailable" for it) and finished with the others.
    rejected = result["federation"]["rejected_replies"]
    victim_id = int(state["node_ids"]["2"])
    assert {r["node"] for r in rejected} == {victim_id}, rejected
    assert {r["round"] for r in rejected} >= {"init-3", "lloyds-1", "evaluate"}, rejected
    assert "init-1" not in {r["round"] for r in rejected}
    assert result["metrics"]["num_points"] == 8 * 40  # evaluation: the 8 clients left
    privacy = result["privacy"]
    assert privacy["epsilon"] <= privacy["target_epsilon"] == 1.0
    # The same releases (stage, sensitivity, noise scale) as a run where all answer.
    full = run_flat({**overrides, "data.name": "npz",
                     "data.path": json.loads(deploy.Layout(root).manifest.read_text())[
                         "server_file"], "federation.num-nodes": 3,
                     "output-dir": str(tmp_path / "full")})
    assert privacy["releases"] == full["privacy"]["releases"]
    assert np.isfinite(np.array(result["centers"])).all()
