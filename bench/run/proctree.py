"""Every process an engine worker started, found and killed, even those that left its group.

Killing a worker's process group is not enough: an engine may start helpers in a session of
their own (vLLM's engine core and tensor-parallel workers, compile workers), and when the worker
dies first (kill -9, out-of-memory kill) they are re-parented away from it and keep their GPUs —
the orphan pattern of vllm-project/vllm#55510. So `kill()` ends the group and every process
found by any of three marks: a descendant remembered while the worker lived (`snapshot()`,
called every fraction of a second; psutil checks a pid was not reused), a member of the
worker's session, and a process whose environment carries the worker's `TREE_MARKER` value
(set in the worker before any engine starts and inherited by everything it starts, so a helper
started and orphaned between two snapshots is found too).
"""

from __future__ import annotations

import contextlib
import os
import signal

import psutil

KILL_WAIT_S = 10.0
TREE_MARKER = "BENCH_WORKER_TREE"
"""Environment variable a worker sets to its tree's token; inherited by what it starts."""


class ProcessTree:
    """The processes of one worker: its root pid, the session it leads, all it started."""

    def __init__(self, root_pid: int, token: str | None = None) -> None:
        self.root_pid = root_pid
        self.token = token
        # Descendants only: the root is the caller's own child, reaped by its owner
        # (multiprocessing's join); waiting on it here would steal that exit status.
        self.known: dict[int, psutil.Process] = {}

    def snapshot(self) -> None:
        """Remember the root's current descendants (cheap: one /proc walk)."""
        try:
            children = psutil.Process(self.root_pid).children(recursive=True)
        except psutil.Error:
            return
        for child in children:
            self.known.setdefault(child.pid, child)

    def session_members(self) -> list[psutil.Process]:
        """Live processes in the root's session (the worker calls setsid, so sid == root pid)."""
        members = []
        for process in psutil.process_iter():
            with contextlib.suppress(psutil.Error, OSError):
                if process.pid not in (os.getpid(), self.root_pid) and (
                    os.getsid(process.pid) == self.root_pid
                ):
                    members.append(process)
        return members

    def marked(self) -> list[psutil.Process]:
        """Live processes whose environment carries this tree's token (none without a token)."""
        if not self.token:
            return []
        found = []
        for process in psutil.process_iter():
            with contextlib.suppress(psutil.Error, OSError):
                if process.pid in (os.getpid(), self.root_pid):
                    continue
                if process.environ().get(TREE_MARKER) == self.token:
                    found.append(process)
        return found

    def alive(self) -> list[psutil.Process]:
        """Every remembered, session or marked process still running (not a reused pid)."""
        found: dict[int, psutil.Process] = {}
        for process in [*self.known.values(), *self.session_members(), *self.marked()]:
            with contextlib.suppress(psutil.Error):
                if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                    found.setdefault(process.pid, process)
        return list(found.values())

    def pids(self) -> set[int]:
        return {process.pid for process in self.alive()}

    def kill(self, wait_s: float = KILL_WAIT_S) -> list[int]:
        """SIGKILL the root's group and every descendant of the tree; the descendants still
        running after `wait_s` (empty when all are gone). The root itself is its owner's to
        kill and reap (a pid is not reused while its process group exists, so killpg is safe
        after the root is gone; a plain kill of a reaped root's pid would not be)."""
        self.snapshot()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.root_pid, signal.SIGKILL)
        targets = self.alive()
        for process in targets:
            with contextlib.suppress(psutil.Error):
                process.kill()
        _, still = psutil.wait_procs(targets, timeout=wait_s)
        return sorted(process.pid for process in still if _running(process))


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
