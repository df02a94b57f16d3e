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
from pathlib import Path

PR_SET_PDEATHSIG = 1  # linux/prctl.h
CGROUP = Path("/sys/fs/cgroup")  # where the process's own cgroup is mounted in a container
CONTROL_BYTES = 64  # a cgroup CPU control file is a line of two numbers
POLL_S = 1.0  # how often the fallback looks for its parent


def available_cores(cgroup: Path = CGROUP) -> int:
    """The cores this process may run on: its CPU affinity where the system has one (taskset's
    or a cpuset's limit), else the machine's count, and no more than its cgroup's CPU quota
    (a container's `--cpus`, a Kubernetes CPU limit), which the affinity does not show."""
    affinity = getattr(os, "sched_getaffinity", None)
    cores = max(len(affinity(0)), 1) if affinity is not None else os.cpu_count() or 1
    quota = cgroup_cpu_limit(cgroup)
    return cores if quota is None else max(1, min(cores, quota))


def cgroup_cpu_limit(root: Path = CGROUP) -> int | None:
    """⌈quota / period⌉ cores of the CPU limit under the cgroup root `root`: cgroup v2's
    `cpu.max` ("QUOTA PERIOD", or "max PERIOD" for none), else cgroup v1's
    `cpu/cpu.cfs_quota_us` over `cpu/cpu.cfs_period_us` (−1 for none); None where no limit is
    set or the files are absent or unreadable."""
    v2 = _small_text(root / "cpu.max")
    if v2 is not None:
        fields = v2.split()
        return _cores(fields[0], fields[1]) if len(fields) == 2 else None
    quota = _small_text(root / "cpu" / "cpu.cfs_quota_us")
    period = _small_text(root / "cpu" / "cpu.cfs_period_us")
    if quota is None or period is None:
        return None
    return _cores(quota.strip(), period.strip())


def _small_text(path: Path) -> str | None:
    """The first bytes of a cgroup control file, None where it cannot be read."""
    try:
        with path.open("rb") as handle:
            return handle.read(CONTROL_BYTES).decode("ascii", "replace")
    except OSError:
        return None


def _cores(quota: str, period: str) -> int | None:
    """⌈quota / period⌉, None unless both are positive integers (v2's "max", v1's −1)."""
    if not (quota.isdigit() and period.isdigit()) or int(period) == 0 or int(quota) == 0:
        return None
    return -(-int(quota) // int(period))


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
