"""The first code an engine worker runs: its own session, then a watch on the parent it was given,
and only then the imports of the worker proper (bench/run/worker_child.py).

Why first: a `bench run` killed outright (SIGKILL) in its first second used to leave its worker
loading the engine and running the whole load with no parent, holding the GPU. The worker
started watching its parent after its imports (pydantic, the run's models: a second or more on a
busy host), by which time the parent was already gone and its `getppid()` was PID 1, so the watch
waited on the wrong process forever. Here the parent's pid comes as an argument, and the watch
starts before anything but the standard library is imported: a parent gone before the watch
starts is seen at its first look. This module imports nothing else, nor does any package above it.
"""

from __future__ import annotations

import os
import signal
import threading
import time

PARENT_CHECK_S = 0.2
"""How often the worker looks at its parent pid."""


def boot(parent_pid: int, *child_args: object) -> None:
    """Entry point of the spawned worker: session, parent watch, then `_child_main(*child_args)`."""
    os.setsid()  # own session and process group: the parent can kill the whole tree at once
    die_with_parent(parent_pid)
    from bench.run.worker_child import _child_main  # the heavy imports, after the watch

    _child_main(*child_args)


def die_with_parent(parent_pid: int) -> None:
    """Kill this worker's process group once `parent_pid` is no longer its parent.

    The worker runs in its own session so that a stop can kill its whole tree; the other side of
    that is that it would outlive a supervisor killed outright (SIGKILL, a force-cancelled Ray
    task). Re-parenting shows as a parent pid other than the one the parent gave.
    """

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_CHECK_S)
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()
