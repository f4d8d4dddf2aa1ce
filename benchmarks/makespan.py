"""The makespan of a set of training jobs on one machine, as a resource-aware scheduler runs them.

``benchmarks/bench_rounds.py --plan`` projects the paper's DAG with it: every pack or single run
is a :class:`Job` of known length on the device :func:`fedmgda.devices.choose_device` gives it, and
:func:`schedule` places the jobs on ``gpus`` GPUs and ``cores`` CPU cores the way
``snakemake --cores C --resources gpu=G`` does: a job starts as soon as its resources are free
(a GPU job holds one GPU and its ``threads`` cores, a CPU job its ``threads`` cores), and the
waiting jobs are tried longest first (list scheduling; Snakemake knows no job lengths, so its own
order may differ, and a long job started last can end later). Pure Python, no torch.

:func:`pack_round_seconds` is the time model of a pack: the seconds per round of ``k`` runs
trained packed, from the measured rows (src/fedmgda/reference/round_times.csv) of 1 and of n runs.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Job:
    name: str
    dataset: str
    device: str  # "cpu" or "cuda"
    seconds: float
    threads: int = 1


@dataclass
class Schedule:
    makespan: float
    start: dict[str, float] = field(default_factory=dict)  # job name -> start time (s)
    end: dict[str, float] = field(default_factory=dict)

    def finish(self, jobs: Iterable[Job]) -> float:
        """When the last of ``jobs`` ends in this schedule (e.g. one dataset's, run beside the
        others)."""
        return max((self.end[j.name] for j in jobs), default=0.0)


def schedule(jobs: Sequence[Job], cores: int, gpus: int = 1) -> Schedule:
    """List-schedule ``jobs`` on ``cores`` CPU cores and ``gpus`` GPUs, longest first: whenever
    resources free up, every waiting job that fits starts, in that order. A ``cuda`` job needs a GPU
    and ``threads`` cores; a ``cpu`` job ``threads`` cores."""
    if len({j.name for j in jobs}) != len(jobs):
        raise ValueError("job names must be unique")
    for j in jobs:
        if j.threads > cores or (j.device != "cpu" and gpus < 1):
            raise ValueError(f"job {j.name} needs {j.threads} "
                             f"cores{' and a GPU' if j.device != 'cpu' else ''}; "
                             f"the machine has {cores} cores and {gpus} GPUs")
    waiting = sorted(jobs, key=lambda j: (-j.seconds, j.name))
    free_cores, free_gpus, now = cores, gpus, 0.0
    running: list[tuple[float, str, int, int]] = []  # (end, name, cores, gpus)
    out = Schedule(0.0)
    while waiting or running:
        still = []
        for j in waiting:
            gpu = 0 if j.device == "cpu" else 1
            if j.threads <= free_cores and gpu <= free_gpus:
                free_cores -= j.threads
                free_gpus -= gpu
                out.start[j.name], out.end[j.name] = now, now + j.seconds
                heapq.heappush(running, (now + j.seconds, j.name, j.threads, gpu))
            else:
                still.append(j)
        waiting = still
        if not running:
            break
        now = running[0][0]
        while running and running[0][0] <= now:
            _, _, c, g = heapq.heappop(running)
            free_cores += c
            free_gpus += g
    out.makespan = max(out.end.values(), default=0.0)
    return out


def makespan_by_dataset(jobs: Sequence[Job], cores: int, gpus: int = 1) -> dict[str, float]:
    """The makespan of each dataset's jobs alone on the machine, and ``"all"``: of every job
    together."""
    result = {d: schedule([j for j in jobs if j.dataset == d], cores, gpus).makespan
              for d in sorted({j.dataset for j in jobs})}
    result["all"] = schedule(jobs, cores, gpus).makespan
    return result


def pack_round_seconds(measured: dict[int, float], k: int) -> float:
    """Seconds per round of ``k`` runs packed, from ``measured`` {runs packed: seconds per round}:
    linear through the two measured pack sizes nearest ``k`` (extrapolated past the largest with the
    slope of the last two: the marginal cost of one more run), or ``k / n`` times a single measured
    size ``n``."""
    if k < 1 or not measured:
        raise ValueError("need k >= 1 and at least one measured pack size")
    if k in measured:
        return measured[k]
    sizes = sorted(measured)
    if len(sizes) == 1:
        n = sizes[0]
        return measured[n] * k / n
    below = [n for n in sizes if n < k]
    lo = below[-1] if below else sizes[0]
    hi_candidates = [n for n in sizes if n > lo]
    hi = hi_candidates[0] if k < sizes[-1] else sizes[-1]
    if hi == lo:  # k past the largest size: the last two
        lo, hi = sizes[-2], sizes[-1]
    return measured[lo] + (k - lo) * (measured[hi] - measured[lo]) / (hi - lo)
