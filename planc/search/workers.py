"""The worker processes of `planc search -j N`: they die with the search and hold none of its
output.

A worker that outlived its parent (the search killed by SIGTERM or SIGKILL) would sit idle,
holding the stdout and stderr it inherited, so that a caller reading the search's output to its
end would wait forever. So every worker, before its first task:

- points its standard streams (file descriptors 0, 1 and 2) at /dev/null: the parent reads its
  results through the pool's own pipes, never through the worker's output;
- asks the kernel to kill it when its parent exits (Linux `prctl(PR_SET_PDEATHSIG, SIGKILL)`,
  prctl(2)); where that is not available, a thread polls `os.getppid()` once a second and exits
  when the parent is gone;
- exits at once if the parent is already gone (it died before the request took effect).

The workers are forked on Linux, so their parent is the search itself (a fork server, Python
3.14's default, would be the parent instead, and the death signal would follow it).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import multiprocessing
import os
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.context import BaseContext

PR_SET_PDEATHSIG = 1  # linux/prctl.h
POLL_S = 1.0  # how often the fallback looks for its parent


def available_cores() -> int:
    """The cores this process may run on: its CPU affinity where the system has one (a
    container's or taskset's limit), else the machine's count."""
    affinity = getattr(os, "sched_getaffinity", None)
    if affinity is not None:
        return max(len(affinity(0)), 1)
    return os.cpu_count() or 1


def capped(jobs: int) -> tuple[int, str]:
    """`jobs` capped at the cores available, and the note saying so (empty when not capped)."""
    cores = available_cores()
    if jobs <= cores:
        return jobs, ""
    core_word = "core is" if cores == 1 else "cores are"
    return cores, f"planc: note: --jobs {jobs} capped at {cores}: {cores} {core_word} available\n"


def _context() -> BaseContext | None:
    return multiprocessing.get_context("fork") if sys.platform == "linux" else None


def pool(jobs: int) -> ProcessPoolExecutor:
    """A pool of `jobs` workers that die with this process and do not hold its output."""
    return ProcessPoolExecutor(
        max_workers=jobs, mp_context=_context(), initializer=bind, initargs=(os.getpid(),)
    )


def bind(parent: int) -> None:
    """The worker initializer: release the standard streams, die with `parent`."""
    _release_streams()
    if not _death_signal():
        threading.Thread(target=_watch, args=(parent,), daemon=True).start()
    if os.getppid() != parent:
        os._exit(1)


def _release_streams() -> None:
    """Standard input, output and error on /dev/null (the descriptors, so that nothing in the
    worker, Python or C, writes to or holds the parent's)."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if null > 2:
        os.close(null)


def _death_signal() -> bool:
    """Ask Linux to send SIGKILL when the parent exits; False where that cannot be asked."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(POLL_S)
    os._exit(1)
