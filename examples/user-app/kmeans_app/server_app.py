"""A Flower user's ServerApp: FedDP-KMeans on the nodes' points and its own server data."""
import json
from pathlib import Path

import numpy as np
from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedkmeans.attacks.strategy import CuriousServer
from fedkmeans.strategies import FedDPKMeansStrategy

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run FedDP-KMeans (observed by a curious server if asked); write what it released."""
    config = context.run_config
    out = Path(str(config["out"]) or Path.home() / "fedkmeans-user-app")
    # the server's own data: a small public sample near the three clusters
    rng = np.random.default_rng(0)
    modes = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]])
    server_data = modes[rng.integers(0, 3, 60)] + rng.normal(scale=1.5, size=(60, 2))
    strategy = FedDPKMeansStrategy(n_clusters=3, epsilon=float(config["epsilon"]),
                           server_data=server_data, num_nodes=int(config["num-nodes"]))
    if config["curious"]:
        strategy = CuriousServer(strategy, report_path=out / "curious.json")
    result = strategy.start(grid=grid)
    out.mkdir(parents=True, exist_ok=True)
    (out / "release.json").write_text(json.dumps(result.release, indent=2))
    spent = strategy.privacy_spent()
    print(f"centers:\n{result.arrays['centers'].numpy()}\nepsilon spent: {spent.epsilon:.3f}")
