"""The deployment's command line (``python -m fedkmeans.experiment.deploy``).

Subcommands: prepare, up, run, down, demo, status, commands.

Part of :mod:`fedkmeans.experiment.deploy` (its docstring describes the workflow).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from fedkmeans.experiment.deploy.layout import SERVER_DATA_MODES, DeploymentError
from fedkmeans.experiment.deploy.prepare import prepare
from fedkmeans.experiment.deploy.processes import down, status, up
from fedkmeans.experiment.deploy.runs import commands, parse_overrides, run


# -- command line -------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m fedkmeans.experiment.deploy",
        description="Deploy fedkmeans on a real SuperLink and SuperNodes (TLS + node auth).",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("directory", type=Path, help="deployment directory")
        return p

    for name, text in (("prepare", "split the data, create CA, certificate and node keys"),
                       ("demo", "prepare, up, run and down in one go")):
        p = add(name, text)
        p.add_argument("--nodes", type=int, default=3, help="number of SuperNodes (3)")
        p.add_argument("--from-npz", type=Path, help="split this .npz instead of the mixture")
        p.add_argument("--mixture", nargs="*", default=[], metavar="KEY=VALUE",
                       help="mixture keys, e.g. seed=1 data.dim=8 data.num-clients=12")
        p.add_argument("--server-data", choices=SERVER_DATA_MODES, default="full",
                       help="server.npz: the full data (non-private evaluation) or public only")
        p.add_argument("--san", action="append", default=[], metavar="HOST",
                       help="extra name/address of the SuperLink for its certificate")
        p.add_argument("--insecure", action="store_true",
                       help="no TLS, no node authentication (prepare: no certificates)")
    for p in (sub.choices["demo"],):
        p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                       help="run config overrides")
    p = add("up", "start the SuperLink and SuperNodes, wait until they are online")
    p.add_argument("--insecure", action="store_true", help="no TLS, no node authentication")
    p.add_argument("--host", default="127.0.0.1",
                   help="SuperLink listen address (0.0.0.0 for other machines)")
    p.add_argument("--port", type=int, default=0, help="SuperLink port (default: a free one)")
    p.add_argument("--nodes", help="comma-separated node indices to start here (default all; "
                   "'' for none)")
    p.add_argument("--superlink", help="host:port of a SuperLink on another machine (implies "
                   "--no-superlink)")
    p.add_argument("--no-superlink", action="store_true",
                   help="do not start the SuperLink here")
    p.add_argument("--timeout", type=float, default=120.0)
    p = add("run", "run the app on the deployment; check result.json")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="run config overrides, e.g. privacy.epsilon=0.5 k=4")
    p.add_argument("--output-dir", type=Path, help="absolute output directory")
    p.add_argument("--timeout", type=float, default=1800.0)
    add("down", "stop every process of the deployment by PID")
    add("status", "show the processes and the SuperLink's nodes")
    p = add("commands", "print the command lines for starting by hand on several machines")
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=9093)
    p.add_argument("--superlink", default="SUPERLINK_HOST:9093")
    p.add_argument("--insecure", action="store_true")
    return parser


def _prepare_from_args(args: argparse.Namespace) -> dict:
    return prepare(
        args.directory, args.nodes, source=args.from_npz,
        mixture=parse_overrides(args.mixture), server_data=args.server_data,
        hosts=args.san, secure=not args.insecure,
    )


def _summary(result: Mapping) -> str:
    privacy, metrics = result["privacy"], result["metrics"]
    return (
        f"{result['algorithm']}: cost {metrics['cost']:.6g} (optimal {metrics['optimal_cost']}), "
        f"epsilon {privacy['epsilon']} (target {privacy['target_epsilon']}), "
        f"{result['federation']['num_nodes']} nodes registered, "
        f"{result['federation'].get('nodes_answering_every_round', '?')} answered every round, "
        f"{result['wall_seconds']:.1f} s\n"
        f"{result['result_path']}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point (``python -m fedkmeans.experiment.deploy -h``)."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    args = _parser().parse_args(argv)
    try:
        if args.command == "prepare":
            print(json.dumps(_prepare_from_args(args), indent=1))
        elif args.command == "up":
            nodes = None
            if args.nodes is not None:
                nodes = [int(v) for v in args.nodes.split(",") if v.strip()]
            state = up(
                args.directory, insecure=args.insecure, host=args.host, port=args.port or None,
                nodes=nodes, superlink=args.superlink,
                start_superlink=not (args.no_superlink or args.superlink),
                timeout=args.timeout,
            )
            print(json.dumps({k: v for k, v in state.items() if k != "processes"}, indent=1))
        elif args.command == "run":
            result = run(args.directory, parse_overrides(args.set), output_dir=args.output_dir,
                         timeout=args.timeout, echo=True)
            print(_summary(result))
        elif args.command == "down":
            print(f"stopped {len(down(args.directory))} processes")
        elif args.command == "status":
            print(json.dumps(status(args.directory), indent=1))
        elif args.command == "commands":
            print(commands(args.directory, host=args.host, port=args.port,
                           superlink=args.superlink, insecure=args.insecure))
        elif args.command == "demo":
            _prepare_from_args(args)
            try:
                up(args.directory, insecure=args.insecure)
                print(_summary(run(args.directory, parse_overrides(args.set), echo=True)))
            finally:
                down(args.directory)
    except (DeploymentError, ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0

