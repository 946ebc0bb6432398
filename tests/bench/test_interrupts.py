"""A repeated stop signal that lands after the run has stopped (bench/run/interrupts.py).

Each case is a real Python process with the program entry's handlers installed, signalling
itself: the race the run-lifecycle test hits by chance (Ctrl-C twice, 0.2 s apart, on a loaded
machine) is made to happen every time.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PROLOGUE = """
import os, signal, sys, threading
from bench.run.interrupts import RunInterrupts, hold_repeated_signals, stopped_by_signal
hold_repeated_signals()
"""


def run_script(body: str) -> subprocess.CompletedProcess[str]:
    script = PROLOGUE + textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("late", ["SIGINT", "SIGTERM"])
def test_a_signal_after_the_run_stopped_does_not_cut_the_report_short(late):
    done = run_script(f"""
        stop = threading.Event()
        with RunInterrupts(stop) as interrupts:
            os.kill(os.getpid(), signal.SIGINT)  # the first Ctrl-C: the run stops politely
            stop.wait(5)
        # the run's handlers are gone; the repeat lands while the report is being written
        os.kill(os.getpid(), signal.{late})
        print("report", interrupts.name, stopped_by_signal() == signal.SIGINT, flush=True)
        sys.exit(130)
    """)
    assert done.returncode == 130, done.stderr
    assert done.stdout.strip() == "report SIGINT True"
    assert "Traceback" not in done.stderr


def test_a_second_signal_during_the_run_asks_to_kill_now():
    done = run_script("""
        stop = threading.Event()
        with RunInterrupts(stop) as interrupts:
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGINT)
            interrupts.kill_now.wait(5)
        print(interrupts.name, stop.is_set(), interrupts.kill_now.is_set())
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["SIGTERM", "True", "True"]


def test_without_a_stopped_run_the_signals_act_as_their_defaults():
    interrupted = run_script("""
        try:
            os.kill(os.getpid(), signal.SIGINT)
            signal.pause()
        except KeyboardInterrupt:
            print("KeyboardInterrupt")
    """)
    assert interrupted.stdout.strip() == "KeyboardInterrupt"
    terminated = run_script("""
        os.kill(os.getpid(), signal.SIGTERM)
        signal.pause()
        print("survived")
    """)
    assert terminated.returncode == -signal.SIGTERM
    assert "survived" not in terminated.stdout
