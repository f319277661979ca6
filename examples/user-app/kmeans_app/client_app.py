"""A Flower user's ClientApp: its own points, FedDP-KMeans' client side mounted on it."""
import numpy as np
from flwr.app import Context
from flwr.clientapp import ClientApp

from fedkmeans.client import mount

app = ClientApp()
MODES = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]])


def points(context: Context) -> dict[int, np.ndarray]:
    """This node's four clients (ids unique across nodes), 200 points each."""
    node = int(context.node_config["partition-id"])
    clients = {}
    for client in range(4 * node, 4 * node + 4):
        rng = np.random.default_rng(client)
        clients[client] = MODES[rng.integers(0, 3, 200)] + rng.normal(size=(200, 2))
    return clients


mount(app, points)
