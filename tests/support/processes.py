"""Stopping a running command at a state it reaches, not at a time: for tests that kill it there.

A poll-then-kill races the process: between the poll that sees the awaited file and the kill,
a starved test process may let it run on, even to its end. :func:`freeze_when` lets the
processes run only in short windows and freezes them (SIGSTOP) between windows; it looks for
the state only while they are frozen and returns with them still frozen. What the caller then
checks (still mid-work, no final output yet) stays true until it kills or continues them.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path


def _states(pid: int) -> list[str]:
    """The state letter of each of the process's threads ([] once it is gone or reaped)."""
    states = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except (FileNotFoundError, ProcessLookupError):
        return []
    for task in tasks:
        try:
            states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
        except (OSError, IndexError):  # a thread that just ended
            continue
    return states


def _running(pid: int) -> bool:
    states = _states(pid)
    return bool(states) and not set(states) <= {"Z", "X"}


def _stop(pids: Sequence[int], timeout: float = 120.0) -> None:
    """SIGSTOP the processes and wait until every thread of each is stopped (or the process is gone)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            pass
    end = time.monotonic() + timeout
    while not all(set(_states(pid)) <= {"T", "t", "Z", "X"} for pid in pids):
        assert time.monotonic() < end, f"processes {list(pids)} did not stop within {timeout} s"
        time.sleep(0.0005)


def resume(pids: Sequence[int]) -> None:
    """SIGCONT the processes (those that are gone are skipped)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def freeze_when(pids: Sequence[int], ready: Callable[[], bool], what: str, timeout: float = 600.0,
                window: float = 0.005) -> None:
    """Let ``pids`` run in windows of about ``window`` seconds, frozen in between, until ``ready()``
    holds at a frozen moment; return with them frozen (the caller kills them, or ``resume``s).

    Fails, naming ``what`` was awaited, if a process ends first or ``timeout`` seconds pass (then
    the processes are killed). Between two looks a process runs for one window only, so it cannot
    pass the awaited state and then finish its work unseen, however starved the test process is.
    """
    end = time.monotonic() + timeout
    pids = list(pids)
    while True:
        _stop(pids)
        gone = [pid for pid in pids if not _running(pid)]
        if ready():
            assert not gone, f"process(es) {gone} ended before {what}"
            return
        if gone or time.monotonic() > end:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            raise AssertionError(f"process(es) {gone} ended before {what}" if gone
                                 else f"timed out after {timeout} s waiting for {what}")
        resume(pids)
        time.sleep(window)
