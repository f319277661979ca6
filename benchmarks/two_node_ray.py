"""A ``flwr run`` simulation on two Ray nodes on this machine, and where its clients ran.

    python benchmarks/two_node_ray.py                      # 200 clients, 20 SuperNodes, eps = 1
    python benchmarks/two_node_ray.py --clients 1000 --supernodes 50

Starts a private two-node Ray cluster, both nodes with ``subprocess.Popen`` so this
script owns their PIDs: a head (``ray start --head --block``, 1 CPU, custom resource
``head_node``, its own short ``--temp-dir`` and ports) and a worker node (``ray start
--address=127.0.0.1:<port> --block``, 1 CPU, ``worker_node``). Then it runs the
project's ``flower`` engine attached to that cluster exactly as README.md documents
(``RAY_ADDRESS=127.0.0.1:<port> python -m fedkmeans.experiment federation.engine=flower
...``), with ``federation.client-cpus=1``: Flower sizes its actor pool from the CPUs of
every node (one actor per node here). The configuration is that of
``benchmarks/scale.py`` (mixture, 50 points per client, d = 100, client level) with
eps = 1.

Where the virtual clients ran, from three independent sources; none of them changes
the ClientApp code path:

* the GCS actor table (``ray._private.state.actors()``): the node of every
  ``ClientAppActor``;
* the GCS task events: the node of every ``ClientAppActor.run`` task. One task is one
  message, i.e. the clients of one SuperNode (in one batch) in one round;
* the operating system, sampled every 0.5 s during the run: every ``ray::ClientAppActor``
  process and which ``ray start`` process (head or worker) it descends from.

``ray.util.state.list_actors``/``list_tasks`` would give the same, but they query the
dashboard, whose dependencies (``ray[default]``: aiohttp, ...) are not installed here:
``ray start --head --include-dashboard=true`` fails with "Cannot include dashboard with
missing packages". The GCS tables above are what the dashboard reads.

Stopping: SIGTERM to the two ``ray start --block`` processes (they stop their daemons),
then SIGTERM and SIGKILL to every process that descended from them, carries the temp
dir in its command line, or ``FKRAY_TEMP_DIR=<temp dir>`` in its environment (set for
both ``ray start``; their children inherit it). ``ray stop`` is never used: it takes no
temp dir and stops every Ray process on the machine. SIGINT, SIGTERM and SIGHUP go
through the same cleanup; after a SIGKILL of this script, its processes are the ones
with ``FKRAY_TEMP_DIR`` in their environment.

Results: ``docs/results/two_node_ray.md`` and ``two_node_ray.csv`` (one row per Ray
node), with the arithmetic for a 10^7-client run from this run and
``docs/results/scale.csv`` (or ``scale-before-streaming.csv`` while that is the only one).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from results_table import markdown_table, write_csv

from fedkmeans.data import load_server
from fedkmeans.experiment.cli import flatten, run
from fedkmeans.experiment.config import parse_config
from fedkmeans.experiment.engines import FLOWER
from fedkmeans.experiment.engines.flower import (
    free_port,
    process_alive,
    processes_with_env,
    stop_all,
)

OUT = Path(__file__).resolve().parents[1] / "docs" / "results"
#: Environment markers given to both ``ray start`` processes (inherited by their daemons
#: and workers): which cluster a process belongs to, and which node.
TEMP_MARKER = "FKRAY_TEMP_DIR"
ROLE_MARKER = "FKRAY_NODE"
ROLES = ("head", "worker")


class ClusterError(RuntimeError):
    """The private Ray cluster did not come up."""


# --------------------------------------------------------------------------- processes

def _parents() -> dict[int, int]:
    """``pid -> ppid`` of every process (Linux /proc)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    return parents


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").strip()
    except OSError:
        return b""


def _env_value(pid: int, name: str) -> str | None:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    prefix = f"{name}=".encode()
    for item in environ.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix):].decode(errors="replace")
    return None


def _descendants(roots: set[int], parents: dict[int, int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found, stack = set(), list(roots)
    while stack:
        pid = stack.pop()
        if pid not in found:
            found.add(pid)
            stack.extend(children.get(pid, []))
    return found


class TwoNodeCluster:
    """A head and a worker node on 127.0.0.1, started and stopped by PID."""

    def __init__(self) -> None:
        # short: Ray's unix socket paths live under it (at most 107 bytes)
        self.temp_dir = Path(tempfile.mkdtemp(prefix="fkray-", dir="/tmp"))
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}
        self._seen: set[int] = set()

    # start ------------------------------------------------------------------
    def _env(self, role: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env.update({TEMP_MARKER: str(self.temp_dir), ROLE_MARKER: role,
                    "RAY_USAGE_STATS_ENABLED": "0"})
        return env

    def _start(self, role: str, args: list[str]) -> None:
        log = self.temp_dir / f"ray-start-{role}.log"
        self.logs[role] = log
        command = [
            "ray", "start", *args, "--num-cpus=1", f"--resources={json.dumps({f'{role}_node': 1})}",
            "--node-ip-address=127.0.0.1", "--disable-usage-stats", "--block",
            f"--node-manager-port={free_port()}", f"--object-manager-port={free_port()}",
            f"--dashboard-agent-listen-port={free_port()}",
            f"--dashboard-agent-grpc-port={free_port()}",
            f"--metrics-export-port={free_port()}", f"--runtime-env-agent-port={free_port()}",
        ]
        print(f"[two-node] {' '.join(command)}", file=sys.stderr, flush=True)
        with log.open("wb") as out:
            self.procs[role] = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL, env=self._env(role))
        self._wait_started(role)

    def _wait_started(self, role: str, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.logs[role].read_text(errors="replace")
            if "Ray runtime started" in text:
                return
            if self.procs[role].poll() is not None:
                break
            time.sleep(0.5)
        raise ClusterError(f"ray start ({role}) did not start; its log:\n"
                           f"{self.logs[role].read_text(errors='replace')[-3000:]}")

    def start(self) -> None:
        self._start("head", ["--head", f"--port={self.port}", f"--temp-dir={self.temp_dir}",
                             "--include-dashboard=false",
                             f"--ray-client-server-port={free_port()}"])
        self._start("worker", [f"--address={self.address}"])

    # processes --------------------------------------------------------------
    def role_of(self, pid: int, parents: dict[int, int]) -> str | None:
        """``head``/``worker``: the ``ray start`` process ``pid`` descends from, else the
        node marker in its environment (after its ``ray start`` exited), else None."""
        roots = {p.pid: role for role, p in self.procs.items()}
        seen, current = set(), pid
        while current > 1 and current not in seen:
            if current in roots:
                return roots[current]
            seen.add(current)
            current = parents.get(current, 0)
        if _env_value(pid, TEMP_MARKER) == str(self.temp_dir):
            return _env_value(pid, ROLE_MARKER)
        return None

    def pids(self) -> list[int]:
        """Every live process of this cluster (not this process)."""
        parents = _parents()
        found = _descendants({p.pid for p in self.procs.values()}, parents)
        found |= set(processes_with_env(TEMP_MARKER, str(self.temp_dir)))
        fragment = str(self.temp_dir).encode()
        found |= {pid for pid in parents if fragment in _cmdline(pid)}
        found |= {pid for pid in self._seen if pid in parents}
        self._seen |= found
        return sorted(pid for pid in found if pid != os.getpid() and process_alive(pid))

    # stop -------------------------------------------------------------------
    def stop(self) -> list[int]:
        """Stop every process of the cluster by PID; return any still alive."""
        self.pids()  # remember the daemons while their ``ray start`` parents still live
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        left = stop_all(self.pids)
        return left

    def remove(self) -> None:
        shutil.rmtree(self.temp_dir, ignore_errors=True)


@contextmanager
def _signals_exit():
    """SIGTERM/SIGHUP end the script through its ``finally`` blocks (cluster stopped)."""
    def handler(signum, frame):
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


# --------------------------------------------------------------------------- evidence

class ActorSampler(threading.Thread):
    """Every 0.5 s: the ``ray::ClientAppActor`` processes and the node each runs on."""

    def __init__(self, cluster: TwoNodeCluster) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.actors: dict[int, str | None] = {}  # pid -> head/worker, by ancestry
        self.markers: dict[int, str | None] = {}  # pid -> FKRAY_NODE in its environment
        self.busy: Counter = Counter()  # samples with the actor inside ClientAppActor.run
        self.samples = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.sample()
            self._stop_event.wait(0.5)

    def sample(self) -> None:
        parents = _parents()
        self.samples += 1
        for pid in parents:
            cmd = _cmdline(pid)
            if not cmd.startswith(b"ray::ClientAppActor"):
                continue
            role = self.actors.get(pid) or self.cluster.role_of(pid, parents)
            self.actors[pid] = role
            self.markers.setdefault(pid, _env_value(pid, ROLE_MARKER))
            if cmd.startswith(b"ray::ClientAppActor.run"):
                self.busy[role] += 1

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def gcs_evidence() -> dict:
    """Nodes, ClientApp actors and their ``run`` tasks from the cluster's GCS."""
    import ray
    from ray._private import state as ray_state
    from ray.core.generated import gcs_pb2

    nodes = {}
    for node in ray.nodes():
        resources = node.get("Resources", {})
        role = next((r for r in ROLES if f"{r}_node" in resources), "?")
        nodes[node["NodeID"]] = {
            "role": role, "alive": node["Alive"], "cpus": resources.get("CPU", 0),
            "hostname": node.get("NodeManagerHostname", ""),
            "raylet": f"{node['NodeManagerAddress']}:{node['NodeManagerPort']}",
        }
    actors = [a for a in ray_state.actors().values() if "ClientAppActor" in a["ActorClassName"]]
    actor_node = {a["ActorID"]: a["Address"]["NodeID"] for a in actors}
    tasks: dict[tuple, str] = {}
    error = ""
    try:
        accessor = ray_state.state._connect_and_get_accessor()
        for raw in accessor.get_task_events():
            event = gcs_pb2.TaskEvents.FromString(raw)
            info = event.task_info
            name = info.func_or_class_name or info.name
            if "ClientAppActor" not in name or name.rsplit(".", 1)[-1] != "run":
                continue
            node = (event.state_updates.node_id.hex() or info.node_id.hex()
                    or actor_node.get(info.actor_id.hex(), ""))
            key = (event.task_id, event.attempt_number)
            tasks[key] = node or tasks.get(key, "")
    except Exception as exc:  # noqa: BLE001 - private API: report, do not fail the run
        error = f"{type(exc).__name__}: {exc}"
    return {"nodes": nodes, "actors": actors, "task_nodes": list(tasks.values()),
            "task_error": error}


def connect(address: str, timeout: float = 60.0) -> None:
    """``ray.init`` on the cluster and wait until both nodes are alive."""
    import ray

    ray.init(address=address, logging_level="WARNING", log_to_driver=False)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = {r for n in ray.nodes() if n["Alive"] for r in ROLES
                 if f"{r}_node" in n.get("Resources", {})}
        if alive == set(ROLES):
            return
        time.sleep(0.5)
    raise ClusterError(f"the cluster at {address} did not show both nodes alive")


# --------------------------------------------------------------------------- the run

#: The configuration of benchmarks/scale.py (mixture, 50 points per client, d = 100,
#: client level, its clip bounds), so per-client figures compare with scale.csv.
POINTS, DIM = 50, 100
SCALE_CONFIG = [
    "privacy.level=client", "privacy.split='0.35,0.1,0.45,0.1'",
    "privacy.min-server-weight=200", f"data.points-per-client={POINTS}", f"data.dim={DIM}",
    f"privacy.max-points-per-client={POINTS}", f"privacy.clip-covariance={30 * POINTS}",
    f"privacy.clip-sums={2.2 * POINTS:g}",
]


def overrides(args: argparse.Namespace, output_dir: Path) -> list[str]:
    return SCALE_CONFIG + [
        f"privacy.epsilon={args.epsilon}", f"data.num-clients={args.clients}",
        "federation.engine=flower", f"federation.num-nodes={args.supernodes}",
        "federation.client-cpus=1", f"output-dir={output_dir}",
    ]


def run_attached(address: str, run_overrides: list[str]) -> tuple[dict, float]:
    """``fedkmeans.experiment.run`` with ``RAY_ADDRESS`` set, as README.md documents."""
    previous = os.environ.get("RAY_ADDRESS")
    os.environ["RAY_ADDRESS"] = address
    try:
        start = time.perf_counter()
        result = run(run_overrides)
        return result, time.perf_counter() - start
    finally:
        if previous is None:
            os.environ.pop("RAY_ADDRESS", None)
        else:
            os.environ["RAY_ADDRESS"] = previous


def fold_rate(rows: int = 830, width: int = 5050, repeats: int = 20) -> float:
    """Bytes per second one process folds: reply bytes -> finite check -> running sum.

    The least a streaming server does per init-1 reply (no triangle unfolding, no
    deserialisation framework): a lower bound of its serial time per byte.
    """
    payload = np.random.default_rng(0).standard_normal((rows, width)).tobytes()
    total = np.zeros(width)
    start = time.perf_counter()
    for _ in range(repeats):
        block = np.frombuffer(payload, dtype=np.float64).reshape(rows, width)
        if np.isfinite(block).all():
            total += block.sum(axis=0)
    return repeats * len(payload) / (time.perf_counter() - start)


# --------------------------------------------------------------------------- report

def _scale_rows() -> tuple[str, list[dict]]:
    """Rows of scale.csv (after streaming) or scale-before-streaming.csv with 50 points per
    client and d = 100, and the file's name."""
    for name in ("scale.csv", "scale-before-streaming.csv"):
        path = OUT / name
        if path.exists():
            with path.open() as f:
                rows = [r for r in csv.DictReader(f)
                        if int(r.get("points_per_client") or POINTS) == POINTS
                        and int(r.get("dim") or DIM) == DIM]
            if rows:
                return f"docs/results/{name}", rows
    return "", []


def extrapolation(flat_cfg, run_info: dict, fold_bps: float) -> list[str]:
    """The 10^7-client arithmetic, as Markdown lines."""
    cfg = parse_config(flat_cfg)
    n = 10 ** 7
    d, k = cfg.data.dim, cfg.k
    m = load_server(cfg)[0].shape[0]
    tri = d * (d + 1) // 2
    b1, b2, b3 = 8 * tri, 8 * m, 8 * (k * d + k)
    ids = 8  # the client id every reply echoes per row (int64)
    r1, r2, r3 = n * (b1 + ids), n * (b2 + ids), n * (b3 + ids)
    limits = cfg.protocol.federation
    message_mb, inflight_mb = limits.message_mb, limits.inflight_mb
    window = max(1, int(inflight_mb // message_mb))  # full-size messages in flight
    per_msg = int(message_mb * 2 ** 20 // b1)
    clients_per_node = 1000
    supernodes = n // clients_per_node
    msgs_init1 = math.ceil(clients_per_node / per_msg)
    msgs_per_node = 1 + msgs_init1 + 1 + 1 + 1  # register, init-1..3, evaluate
    messages = supernodes * msgs_per_node

    source, rows = _scale_rows()

    def largest(engine: str) -> dict | None:
        mine = [r for r in rows if r["engine"] == engine]
        return max(mine, key=lambda r: int(r["clients"])) if mine else None

    big, big_flower = largest("inprocess"), largest("flower")
    tiny = next((r for r in rows if r["engine"] == FLOWER.name and int(r["clients"]) ==
                 int(r["nodes"]) == 100), None)  # one client per message
    lines = ["## What 10^7 clients would need on a real cluster", ""]
    lines += [
        f"Same configuration: d = {d}, k = {k}, |Q| = {m} server points, 50 points per "
        "client, T = 0 (register, FedDP-Init 1-3, evaluation). Sizes are float64.", "",
        "**Reply size per client.**", "",
        f"- FedDP-Init step 1: the upper triangle of a d x d matrix, d(d+1)/2 = "
        f"{d}·{d + 1}/2 = {tri:,} floats x 8 B = **{b1:,} B** (+ {ids} B client id);",
        f"- step 2: a histogram over |Q| = {m} server points, {m} x 8 = {b2:,} B;",
        f"- step 3: k x d sums + k counts = ({k}·{d} + {k}) x 8 = {b3:,} B.", "",
        "**Bytes per round at N = 10^7** (all into one SuperLink and one ServerApp):", "",
        f"- step 1: 10^7 x {b1 + ids:,} B = {r1 / 1e9:,.0f} GB; at 10 Gbit/s "
        f"(1.25 GB/s, assumed, not measured) that is {r1 / 1.25e9:,.0f} s of ingress alone;",
        f"- step 2: 10^7 x {b2 + ids:,} B = {r2 / 1e9:,.1f} GB; step 3: 10^7 x "
        f"{b3 + ids:,} B = {r3 / 1e9:,.1f} GB;",
        f"- all rounds: {(r1 + r2 + r3) / 1e9:,.0f} GB, of which step 1 is "
        f"{100 * r1 / (r1 + r2 + r3):.0f}%.", "",
        "**Messages.** The server asks each SuperNode for its clients in messages of at most "
        f"`federation.message-mb` = {message_mb:g} MiB of reply: {message_mb:g} x 2^20 / "
        f"{b1:,} = {per_msg} clients per step-1 message. With {clients_per_node:,} clients "
        f"per SuperNode, N / {clients_per_node:,} = {supernodes:,} SuperNodes, each answering "
        f"{msgs_per_node} messages (register 1, step 1 ceil({clients_per_node}/{per_msg}) = "
        f"{msgs_init1}, steps 2-3 and evaluation 1 each): {supernodes:,} x {msgs_per_node} "
        f"= {messages:,} messages in the run.", "",
    ]
    rate_run = run_info["messages_after_register"] / max(run_info["after_startup_s"], 1e-9)
    lines += ["**SuperLink message throughput (measured, 2 cores, simulation).**", ""]
    lines.append(
        f"- this run: {run_info['messages_after_register']} messages after registration "
        f"(GCS task events) in {run_info['after_startup_s']:.2f} s of rounds = "
        f"{rate_run:,.0f} messages/s, with {run_info['clients_per_supernode']} clients' "
        "work inside each message, the server's own work between rounds, and 2 actors on "
        "2 Ray nodes;")
    msg_time = 0.0
    if tiny:
        after = float(tiny["after_startup_s"])
        rate_tiny = 4 * 100 / after
        lines.append(
            f"- {source}, flower, 100 clients on 100 SuperNodes (1 client per "
            f"message, so almost no ClientApp work): 4 rounds x 100 messages / {after} s = "
            f"{rate_tiny:,.0f} messages/s.")
        msg_time = messages / rate_tiny
        lines.append(
            f"- At that rate the {messages:,} messages above cost {messages:,} / "
            f"{rate_tiny:,.0f} = {messages / rate_tiny:,.0f} s of message handling if it "
            "does not overlap with anything (an upper bound; with 100 clients per SuperNode "
            f"it would be 10x the messages, {10 * messages / rate_tiny:,.0f} s).")
    lines.append("")
    lines += ["**Time per client (measured).**", ""]
    per_client_cpu = None
    if big:
        wall, count = float(big["wall_s"]), int(big["clients"])
        per_client_cpu = 2 * wall / count
        lines.append(
            f"- {source}, {count:,} clients in process on 2 cores: {wall} s wall (data "
            f"generation, every round, server and clients) / {count:,} = "
            f"{1000 * wall / count:.2f} ms per client; charging both cores the whole time: "
            f"2 x {1000 * wall / count:.2f} = **{1000 * per_client_cpu:.2f} CPU-ms per "
            "client** (an upper bound of the client side: it includes the server's share"
            + ("; measured before the streaming change: the script reads scale.csv first "
               "once `benchmarks/scale.py` has rewritten it);" if "before" in source else ");"))
    if big_flower:
        after_f, count_f = float(big_flower["after_startup_s"]), int(big_flower["clients"])
        lines.append(
            f"- {source}, {count_f:,} clients on `flower` with {big_flower['nodes']} "
            f"SuperNodes: {after_f} s of rounds after registration / {count_f:,} = "
            f"{1000 * after_f / count_f:.2f} ms per client (2 cores);")
    after, clients = run_info["after_startup_s"], run_info["clients"]
    lines.append(
        f"- this run, {clients} clients: {after:.2f} s of rounds after registration / "
        f"{clients} = {1000 * after / clients:.1f} ms per client, dominated by per-message "
        "overhead at this size, not by the clients' work.")
    lines.append(
        f"- serial part, the server's fold (measured here by `fold_rate()`: bytes -> finite "
        f"check -> running sum in one process): {fold_bps / 1e9:.1f} GB/s, so step 1's "
        f"{r1 / 1e9:,.0f} GB take at least {r1 / fold_bps:,.0f} s in the one ServerApp "
        "however many Ray nodes there are.")
    lines.append("")
    if per_client_cpu:
        total_cpu = n * per_client_cpu
        floor = max(r1 / 1.25e9, r1 / fold_bps)
        lines += ["**Ray nodes and CPUs for a target wall time.**", "",
                  f"Client-side work: 10^7 x {1000 * per_client_cpu:.2f} ms = "
                  f"{total_cpu:,.0f} CPU-s = {total_cpu / 3600:,.1f} CPU-hours. Serial floor "
                  f"of step 1 (ingress at 10 Gbit/s or the fold, whichever is slower): "
                  f"{floor:,.0f} s.", ""]
        data_gb = n * POINTS * d * 8 / 1e9
        cpu_node, ram_node = 8, 64  # an assumed Ray node: 8 CPUs, 64 GB
        ram_nodes = math.ceil(data_gb / ram_node)
        lines += [
            f"Memory on the Ray nodes (simulation: the actors hold the clients' data): "
            f"{POINTS} x {d} x 8 B = {POINTS * d * 8:,} B per client, 10^7 x "
            f"{POINTS * d * 8:,} B = {data_gb:,.0f} GB across the cluster, i.e. at least "
            f"ceil({data_gb:,.0f} / {ram_node}) = {ram_nodes} nodes of {ram_node} GB before "
            "any overhead. The ClientApp keeps every SuperNode it has served in `_NODES` "
            "for the whole run and Flower's actor pool does not pin SuperNodes to actors, so "
            "an actor can end up holding more than its share: keep a margin.", "",
            f"With Ray nodes of {cpu_node} CPUs and {ram_node} GB (an assumption), nodes = "
            f"max(ceil(CPUs / {cpu_node}), {ram_nodes} for memory):", "",
        ]
        table = []
        for target in (3600, 1800, 900, 600):
            cpus = math.ceil(total_cpu / target)
            nodes_needed = max(math.ceil(cpus / cpu_node), ram_nodes)
            table.append({
                "target for the client work": f"{target // 60} min",
                "CPUs = CPU-s / target": f"{total_cpu:,.0f} / {target} = {cpus}",
                "Ray nodes": f"max({math.ceil(cpus / cpu_node)}, {ram_nodes}) = "
                             f"{nodes_needed}",
                "inflight-mb >= CPUs x message-mb": f"{cpus * message_mb:g}",
                "replies in flight": f"{cpus} x {message_mb:g} MiB = "
                                     f"{cpus * message_mb / 1024:.1f} GiB",
            })
        lines += markdown_table(table)
        all_cpus = ram_nodes * cpu_node
        lines += [
            "",
            f"Memory, not CPU, sets the node count down to a ~10 min target: the {ram_nodes} "
            f"nodes that hold the data have {all_cpus} CPUs, which do the client work in "
            f"{total_cpu:,.0f} / {all_cpus} = {total_cpu / all_cpus:,.0f} s if "
            f"`federation.inflight-mb` >= {all_cpus} x {message_mb:g} (it caps the messages, "
            f"so the actors, at work at once; the default {inflight_mb:g} MiB keeps {window} "
            f"full-size messages, so {window} CPUs, busy). With the "
            f"serial floor of step 1 ({floor:,.0f} s) and the message handling "
            f"({msg_time:,.0f} s) overlapping that work fully or not at all, the run takes "
            f"between {max(total_cpu / all_cpus, floor, msg_time) / 60:.0f} and "
            f"{(total_cpu / all_cpus + floor + msg_time) / 60:.0f} min plus Ray and Flower "
            "start-up. Below that, more Ray nodes stop "
            "helping; the remedy is a faster link or fewer bytes per client at step 1 (a "
            "node-side pre-sum would send one triangle per message, but would give up the "
            "server's per-client validation and re-clipping).",
            "",
        ]
    running = 8 * (tri + m + k * d + k)
    lines += [
        "**Server memory is independent of N** (the design assumption of the streaming "
        "path, `fedkmeans/server/aggregation.py`: every reply is validated, each "
        "client's row clipped and added to running sums as it arrives, then dropped). The "
        "state is the running sums, "
        f"({tri:,} + {m} + {k}·{d} + {k}) x 8 B = {running:,} B, plus at most "
        f"`inflight-mb` of replies (default {inflight_mb:g} MiB; to keep 64 actors busy "
        f"with {message_mb:g} MiB messages, {64 * message_mb / 1024:g} GiB), "
        f"whatever N is. Without the fold the server would hold 10^7 x {b1:,} B = "
        f"{n * b1 / 1e9:,.0f} GB of step-1 rows.",
        "",
    ]
    return lines


def report(args, result: dict, wall: float, evidence: dict, sampler: ActorSampler,
           fold_bps: float, command: str, run_overrides: list[str],
           load: tuple[float, float]) -> None:
    nodes = evidence["nodes"]
    per_supernode = args.clients // args.supernodes
    actor_count = Counter(nodes.get(a["Address"]["NodeID"], {}).get("role", "?")
                          for a in evidence["actors"])
    task_count = Counter(nodes.get(t, {}).get("role", "?") for t in evidence["task_nodes"])
    pids = {role: sorted(str(a["Pid"]) for a in evidence["actors"]
                         if nodes.get(a["Address"]["NodeID"], {}).get("role") == role)
            for role in ROLES}
    os_count = Counter(sampler.actors.values())
    timings = result.get("timings", {})
    rounds = ("register", "init-1", "init-2", "init-3", "evaluate")
    after = sum(timings.get(r, 0.0) for r in rounds[1:])
    metrics = result.get("metrics", {})
    epsilon = result["privacy"]["epsilon"]
    rows = []
    for node_id, node in sorted(nodes.items(), key=lambda kv: kv[1]["role"]):
        role = node["role"]
        rows.append({
            "ray_node": role, "node_id": node_id[:12], "hostname": node["hostname"],
            "raylet": node["raylet"], "cpus": node["cpus"],
            "client_app_actors": actor_count.get(role, 0),
            "actor_pids": " ".join(pids.get(role, [])),
            "actor_env_marker": " ".join(str(sampler.markers.get(int(pid)))
                                         for pid in pids.get(role, [])),
            "run_tasks": task_count.get(role, 0),
            "client_visits": task_count.get(role, 0) * per_supernode,
            "actor_processes_seen": os_count.get(role, 0),
            "busy_samples": sampler.busy.get(role, 0),
            "clients": args.clients, "supernodes": args.supernodes,
            "wall_s": round(wall, 2), "epsilon": round(epsilon, 4),
            "cost": round(metrics.get("cost", float("nan")), 3),
        })
    both = all(r["client_app_actors"] > 0 and r["run_tasks"] > 0 for r in rows) and len(rows) == 2
    run_info = {
        "clients": args.clients, "clients_per_supernode": per_supernode,
        "after_startup_s": after,
        "messages_after_register": sum(task_count.values()) - args.supernodes,
    }
    write_csv(OUT / "two_node_ray.csv", rows)
    shown = " ".join(f'"{o}"' if "'" in o or "," in o else o for o in run_overrides[:-1])
    lines = [
        "# A `flwr run` simulation on two Ray nodes (localhost)", "",
        f"Measured by `{command}` on this machine (2 cores, 24 GiB): a private Ray head "
        "(`ray start --head --num-cpus=1 --resources='{\"head_node\": 1}' --block`, own "
        "`--temp-dir` and ports) and a worker node (`ray start --address=127.0.0.1:<port> "
        "--num-cpus=1 --resources='{\"worker_node\": 1}' --block`), then the project run "
        "attached to them as README.md documents:", "",
        "```",
        f"RAY_ADDRESS=127.0.0.1:<port> python -m fedkmeans.experiment {shown} "
        "output-dir=<dir>",
        "```", "",
        f"{args.clients} clients (mixture, 50 points each, d = 100, client level) on "
        f"{args.supernodes} SuperNodes ({per_supernode} clients each), eps = {args.epsilon}, "
        "`federation.client-cpus=1`, so Flower's actor pool has one `ClientAppActor` per "
        "1-CPU node.", "",
        "## Where the clients ran", "",
        *markdown_table(rows), "",
        "- *client_app_actors*, *actor_pids*: GCS actor table (`ray._private.state.actors()`)"
        ", the node id of each `ClientAppActor`, mapped to head/worker by the custom "
        "resource of `ray.nodes()`;",
        "- *actor_env_marker*: `FKRAY_NODE` read from `/proc/<actor pid>/environ` during "
        "the run: each `ray start` was given `FKRAY_NODE=head` or `worker`, and its raylet "
        "passes it on to the actor processes it starts;",
        "- *run_tasks*: GCS task events, the node of every `ClientAppActor.run` task; one task "
        f"is one message = one SuperNode's {per_supernode} clients in one round, so "
        f"*client_visits* = run_tasks x {per_supernode};",
        f"- *actor_processes_seen*, *busy_samples*: the operating system, {sampler.samples} "
        "samples every 0.5 s during the run: `ray::ClientAppActor` processes by the `ray "
        "start` process they descend from, and samples in which one was inside "
        "`ClientAppActor.run`.",
        "",
        f"**Both nodes hosted clients: {'yes' if both else 'NO'}.**"
        + ("" if not evidence["task_error"] else
           f" (task events unavailable: {evidence['task_error']})"),
        "",
        "## The run", "",
        *markdown_table([{
            "wall s (flwr run, attach included)": round(wall, 2),
            "ServerApp s": round(timings.get("total", 0.0), 2),
            **{f"{r} s": round(timings.get(r, 0.0), 2)
               for r in ("calibration", *rounds, "optimal_cost")},
            "epsilon spent": round(epsilon, 4),
            "cost": round(metrics.get("cost", float("nan")), 3),
            "cost / optimal": round(metrics.get("cost_ratio", float("nan")), 4),
            "server fold GB/s": round(fold_bps / 1e9, 2),
        }]), "",
        f"*ServerApp s* is the server's run from its first line to result.json; the rest of "
        "the wall time is `flwr run` starting the SuperLink and SuperExec and attaching to "
        "Ray. *optimal_cost* is the evaluation's reference k-means (not the algorithm; 0 "
        "when cached by an earlier run). "
        f"1-minute load average when the script started / after the run: {load[0]:.2f} / "
        f"{load[1]:.2f} on 2 cores (the run itself adds ~1-2; other work on the machine "
        "slows the figures).", "",
        "`ray.util.state.list_actors`/`list_tasks` were not used: they query the Ray "
        "dashboard, whose dependencies (`ray[default]`: aiohttp, ...) are not installed "
        "here (`ray start --head --include-dashboard=true` fails with \"Cannot include "
        "dashboard with missing packages\"); the GCS tables above are what the dashboard "
        "reads. Both Ray nodes were "
        "stopped by PID (`ray stop` has no temp-dir scope and would stop every Ray process "
        "on the machine).", "",
    ]
    lines += extrapolation(flatten(result["config"]), run_info, fold_bps)
    (OUT / "two_node_ray.md").write_text("\n".join(lines))
    print("\n".join(markdown_table(rows)))
    print(f"wall {wall:.2f} s, epsilon {epsilon:.4f}, both nodes hosted clients: {both}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--supernodes", type=int, default=20)
    parser.add_argument("--epsilon", type=float, default=1.0)
    args = parser.parse_args()
    command = " ".join(["python benchmarks/two_node_ray.py", *sys.argv[1:]])
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
    load_before = os.getloadavg()[0]  # before this script adds any work
    fold_bps = fold_rate()
    cluster = TwoNodeCluster()
    output = Path(tempfile.mkdtemp(prefix="fedkmeans-two-node-"))
    sampler = ActorSampler(cluster)
    with _signals_exit():
        try:
            cluster.start()
            connect(cluster.address)
            run_overrides = overrides(args, output / "run")
            sampler.start()
            try:
                result, wall = run_attached(cluster.address, run_overrides)
            finally:
                sampler.stop()
            load_after = os.getloadavg()[0]
            time.sleep(3)  # workers report task events to the GCS every second
            evidence = gcs_evidence()
        finally:
            try:
                import ray

                ray.shutdown()
            finally:
                left = cluster.stop()
                if left:
                    print(f"[two-node] still running after stop: {left}", file=sys.stderr)
                cluster.remove()
    report(args, result, wall, evidence, sampler, fold_bps, command, run_overrides,
           (load_before, load_after))
    shutil.rmtree(output, ignore_errors=True)


if __name__ == "__main__":
    main()
