"""Worker processes for kernel simulation that never outlive the command that started them.

`worker_pool(n)` is a forked ProcessPoolExecutor whose workers (a) ask Linux to send them SIGTERM when their
parent dies (prctl PR_SET_PDEATHSIG), so a parent killed with SIGKILL leaves no orphan, and (b) are terminated
at once, queued work cancelled, when the block is left by an exception (Ctrl-C, SIGTERM turned into an
exception by the CLI, an error in a job): nothing waits for running simulations to finish.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager

_PR_SET_PDEATHSIG = 1
MAX_PROCESSES = 4  # simulation processes one command starts at most


def cpus() -> int:
    """The CPUs this process may run on (its affinity where the OS says), at most MAX_PROCESSES."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        n = os.cpu_count() or 1
    return max(1, min(MAX_PROCESSES, n))


def _die_with_parent(parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which stops the workers
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the parent's terminate on exit still applies
        pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


@contextmanager
def worker_pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """A pool of `workers` forked processes (the engine holds no threads; workers inherit imported modules)."""
    ctx = multiprocessing.get_context("fork")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_die_with_parent,
                               initargs=(os.getpid(),))
    try:
        yield pool
    except BaseException:
        stop(pool)
        raise
    pool.shutdown(wait=True)


def stop(pool: ProcessPoolExecutor) -> None:
    """Cancel queued work and terminate the workers now."""
    processes = list((getattr(pool, "_processes", None) or {}).values())  # no public handle on the workers
    pool.shutdown(wait=False, cancel_futures=True)
    for p in processes:
        if p.is_alive():
            p.terminate()
    for p in processes:
        p.join(timeout=1.0)
        if p.is_alive():
            p.kill()
            p.join(timeout=1.0)
