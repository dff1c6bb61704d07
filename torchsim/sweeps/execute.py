"""Where a sweep's kernel simulations run: in this process, on a local process pool, or as Ray tasks.

Called by torchsim.sweeps.space.run_sweep with the distinct (call, profile) jobs; returns, in job order, each job's
launches (a KernelSim per kernel launch: Flash-Decoding's split kernel and its combine are two), so the rows
(and the Parquet bytes) are the same whichever executor ran them. Ray is the optional extra `torchsim[ray]`;
a cluster address that does not answer is an error within seconds, never a hang.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator, Sequence
from typing import Any

from torchsim.prediction.kernel_sim import DEFAULT_MAX_SIM_EVENTS, KernelSim, simulate_launches
from torchsim.prediction.workers import worker_pool

EXECUTORS = ("local", "ray")
CONNECT_TIMEOUT_S = 5.0


class ExecutorError(RuntimeError):
    """The executor could not run the sweep (Ray missing, cluster unreachable); the message says what to do."""


class UnknownExecutorError(ExecutorError, ValueError):
    """An executor name that is neither `local` nor `ray`: bad input (a ValueError), not a failure to run."""


def default_jobs() -> int:
    return max(1, os.cpu_count() or 1)


Launches = tuple[KernelSim, ...]


def simulate_job(job: tuple[Any, Any], max_events: int = DEFAULT_MAX_SIM_EVENTS) -> Launches:
    """One distinct kernel call's launches, simulated (module level: picklable for pools and Ray)."""
    call, hw = job
    return simulate_launches(call, hw, max_events=max_events)


def _simulate_chunk(jobs: list[tuple[Any, Any]], max_events: int) -> list[Launches]:
    return [simulate_job(j, max_events) for j in jobs]


def run_jobs(jobs: Sequence[tuple[Any, Any]], *, executor: str = "local", workers: int = 1,
             ray_address: str | None = None, progress: bool = False,
             max_events: int = DEFAULT_MAX_SIM_EVENTS) -> list[Launches]:
    """The launches of each of `jobs`, in order. `local` forks `workers` processes (none for one worker or one job)."""
    if executor not in EXECUTORS:
        raise UnknownExecutorError(f"unknown executor {executor!r}; valid: {', '.join(EXECUTORS)}")
    if executor == "ray":
        return _run_ray(jobs, workers, ray_address, progress, max_events)
    if ray_address:
        raise ExecutorError("--ray-address needs --executor ray")
    bar = _bar(len(jobs), progress)
    out: list[Launches] = []
    try:
        if workers <= 1 or len(jobs) <= 1:
            for j in jobs:
                out.append(simulate_job(j, max_events))
                bar.update(1)
            return out
        chunks = list(_chunks(jobs, workers))
        with worker_pool(workers) as pool:  # workers stop with the command (Ctrl-C, SIGTERM, an error)
            for chunk in pool.map(_simulate_chunk, chunks, [max_events] * len(chunks)):
                out.extend(chunk)
                bar.update(len(chunk))
        return out
    finally:
        bar.close()


def _chunks(jobs: Sequence[Any], workers: int) -> Iterator[list[Any]]:
    """Small contiguous chunks (about 8 per worker): few round trips, balanced finish."""
    size = max(1, len(jobs) // (8 * workers))
    for i in range(0, len(jobs), size):
        yield list(jobs[i:i + size])


def check_ray_address(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Fail fast when `host:port` (or `ray://host:port`) does not accept a TCP connection."""
    target = address.split("://", 1)[-1]
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ExecutorError(f"--ray-address {address!r}: expected HOST:PORT or ray://HOST:PORT (or 'auto')")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise ExecutorError(f"Ray cluster at {address!r} does not answer ({exc.strerror or exc}, waited up to "
                            f"{timeout_s:.0f} s); start one with `ray start --head` or leave out --ray-address "
                            "to run on a local Ray instance") from None


def _run_ray(jobs: Sequence[tuple[Any, Any]], workers: int, address: str | None, progress: bool,
             max_events: int) -> list[Launches]:
    try:
        import ray
    except ImportError:
        raise ExecutorError("--executor ray needs Ray: pip install 'torchsim[ray]' (or pip install ray)") from None
    if address and address != "auto":
        check_ray_address(address)
    started = not ray.is_initialized()
    if started:
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR"}
        if address:
            kwargs["address"] = address
        else:
            kwargs["num_cpus"] = workers
        try:
            ray.init(**kwargs)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ExecutorError(f"could not connect to Ray ({address or 'local'}): {exc}") from None
    try:
        task = ray.remote(_simulate_chunk)
        refs = [task.remote(chunk, max_events) for chunk in _chunks(jobs, workers)]
        bar = _bar(len(jobs), progress)
        done: dict[Any, list[Launches]] = {}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for r in ready:
                done[r] = ray.get(r)
                bar.update(len(done[r]))
        bar.close()
        return [s for r in refs for s in done[r]]  # job order, whatever order tasks finished in
    finally:
        if started:
            ray.shutdown()


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _bar(total: int, enabled: bool) -> Any:
    if not enabled or not total:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, desc="sweep", unit="kernel sim")
