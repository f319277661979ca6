"""Parent-death watchdog: stop a Flower run's processes when the experiment dies.

``flwr run`` starts a SuperLink and a SuperExec in their own sessions (``setsid``), and
Ray starts its own daemons, so neither a process group nor ``PR_SET_PDEATHSIG`` reaches
all of them. Every one of them, however, carries the run's private ``FLWR_HOME`` in its
environment. The Flower engine therefore starts this watchdog in a new session, with
a pipe on its standard input whose only writer is the experiment process:

* the experiment finishes normally -> it writes ``done`` and closes the pipe; the
  watchdog exits without touching anything;
* the experiment dies in any way, SIGKILL included -> the kernel closes the pipe, the
  watchdog reads end-of-file, stops every process with that ``FLWR_HOME`` by PID
  (SIGTERM, then SIGKILL) and removes the run's temporary directory.

Command line (used by :func:`fedkmeans.experiment.engines.flower.run_flower` only)::

    python -m fedkmeans.experiment.engines.watchdog FLWR_HOME TEMP_DIR
"""

from __future__ import annotations

import shutil
import sys

from fedkmeans.experiment.engines.flower import processes_with_env, stop_all

DONE = "done"


def main(argv: list[str]) -> int:
    """Wait for the parent's word or its death; clean up after a death."""
    if len(argv) != 2:
        print("usage: python -m fedkmeans.experiment.engines.watchdog FLWR_HOME TEMP_DIR",
              file=sys.stderr)
        return 2
    home, temp_dir = argv
    word = sys.stdin.readline().strip()
    if word == DONE:
        return 0
    left = stop_all(lambda: processes_with_env("FLWR_HOME", home))
    shutil.rmtree(temp_dir, ignore_errors=True)
    if left:
        print(f"fedkmeans watchdog: processes still running: {left}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
