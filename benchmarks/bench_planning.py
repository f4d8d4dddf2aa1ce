"""Time the workflow's planning (a dry run) on a synthetic grid of N runs.

    python benchmarks/bench_planning.py                        # N = 2 000 and 20 000, all modes
    python benchmarks/bench_planning.py --runs 2000 --modes single

The grid is config/test.yaml's experiment ``tiny`` (the digits setting, its two grid entries)
with N / 2 seeds, hence N runs; its table, figures and claims stay. ``packed``: the runs trained
12 per job (``resources.default.pack: 12``, as config/quick.yaml); ``single``: ``pack: 1``, one
train job per run. Each case runs ``snakemake -n --quiet rules`` in a scratch copy of the
workflow (no results/ of the checkout is read or written) and prints its wall and CPU seconds,
the load average before it, the jobs planned, and per mode the growth ratio of the largest N to
the smallest (10 for N = 2 000 and 20 000 if planning is linear in the runs).

``job``: the start of one cluster job of that grid (``pack: 1``), as Snakemake starts it on a node
(``--mode remote --target-jobs train:run=<a run>``, here as a dry run): with the plan the main
process writes before it submits jobs (fedmgda.jobplan; written here by the benchmark the same
way) and without it (the whole registry read). With the plan the growth should be about 1.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
MODES = {"packed": 12, "single": 1}


def grid_config(runs: int, pack: int) -> dict:
    """config/test.yaml with experiment ``tiny`` on ``runs`` runs (two grid entries x runs / 2
    seeds) and ``pack`` as every dataset's pack size."""
    with open(ROOT / "config" / "test.yaml") as fh:
        config = yaml.safe_load(fh)
    n_entries = len(config["grids"][config["experiments"]["tiny"]["grid"]])
    if runs % n_entries:
        raise SystemExit(f"--runs: {runs} is not a multiple of the grid's {n_entries} entries")
    config["profile"] = "planning"
    config["experiments"]["tiny"]["seeds"] = list(range(1, runs // n_entries + 1))
    config["resources"]["default"]["pack"] = pack
    return config


def scratch_workflow(wd: Path) -> Path:
    """The Snakefile, workflow/, config/ and notebooks/ copied into ``wd``, src/ linked."""
    shutil.copy(ROOT / "Snakefile", wd / "Snakefile")
    for folder in ("workflow", "config", "notebooks"):
        shutil.copytree(ROOT / folder, wd / folder)
    (wd / "src").symlink_to(ROOT / "src")
    return wd


def time_dry_run(runs: int, mode: str, timeout: float) -> tuple[float, float, str]:
    """(wall s, CPU s, the number of jobs planned) of planning ``runs`` runs in ``mode``."""
    with tempfile.TemporaryDirectory(prefix="bench_planning_") as tmp:
        wd = scratch_workflow(Path(tmp))
        configfile = wd / "config" / "planning.yaml"
        configfile.write_text(yaml.safe_dump(grid_config(runs, MODES[mode]), sort_keys=False))
        argv = [sys.executable, "-m", "snakemake", "-n", "--quiet", "rules", "--cores", "1",
                "--configfile", str(configfile)]
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run(argv, cwd=wd, capture_output=True, text=True, env=env,
                              timeout=timeout)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise SystemExit(f"dry run of {runs} runs ({mode}) failed: {tail[0]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    totals = [line.split()[-1] for line in proc.stdout.splitlines() if line.startswith("total ")]
    return wall, cpu, f"{totals[-1]} jobs" if totals else "no job count printed"


def snakefile_config(configfile: Path) -> dict:
    """The config as the Snakefile completes it (workflow/Snakefile), hence its plan's name."""
    from fedmgda.experiments import coerce_overrides
    from fedmgda.schema import with_defaults

    config = yaml.safe_load(configfile.read_text())
    coerce_overrides(config)
    config.update(with_defaults(config))
    return config


def time_cluster_job(runs: int, timeout: float) -> tuple[float, float]:
    """(CPU s with the plan, CPU s without) of one train job's start in a grid of ``runs`` runs."""
    from fedmgda.experiments import expand
    from fedmgda.jobplan import plan_path, write_registry_plan

    cpu = []
    with tempfile.TemporaryDirectory(prefix="bench_planning_") as tmp:
        wd = scratch_workflow(Path(tmp))
        configfile = wd / "config" / "planning.yaml"
        configfile.write_text(yaml.safe_dump(grid_config(runs, MODES["single"]), sort_keys=False))
        config = snakefile_config(configfile)
        registry = expand(config)
        plan = wd / plan_path(config)
        write_registry_plan(plan, registry)
        argv = [sys.executable, "-m", "snakemake", "-n", "--quiet", "rules", "--cores", "1",
                "--mode", "remote", "--target-jobs", f"train:run={min(registry.runs)}",
                "--force", "--nolock", "--configfiles", str(configfile)]
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
        for with_plan in (True, False):
            if not with_plan:
                plan.unlink()
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            proc = subprocess.run(argv, cwd=wd, capture_output=True, text=True, env=env,
                                  timeout=timeout)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if proc.returncode != 0 or ("jobs' plan" in proc.stderr) != with_plan:
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
                raise SystemExit(f"cluster job of {runs} runs (plan: {with_plan}): {tail[0]}")
            cpu.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return cpu[0], cpu[1]


def report_cluster_jobs(sizes: list[int], timeout: float) -> None:
    print(f"{'job':<7} {'runs':>7} {'plan CPU s':>11} {'no plan CPU s':>14}")
    by_size = {}
    for runs in sizes:
        by_size[runs] = time_cluster_job(runs, timeout)
        print(f"{'job':<7} {runs:>7} {by_size[runs][0]:>11.2f} {by_size[runs][1]:>14.2f}",
              flush=True)
    if len(sizes) > 1:
        small, large = sizes[0], sizes[-1]
        print(f"job: CPU growth {large} / {small} runs: with the plan "
              f"{by_size[large][0] / by_size[small][0]:.2f}, without "
              f"{by_size[large][1] / by_size[small][1]:.1f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[2000, 20000])
    parser.add_argument("--modes", nargs="+", choices=[*MODES, "job"],
                        default=["packed", "single", "job"])
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per dry run")
    args = parser.parse_args(argv)
    sizes = sorted(args.runs)
    print(f"cores {os.cpu_count()}, python {sys.version.split()[0]}")
    print(f"{'mode':<7} {'runs':>7} {'wall s':>8} {'CPU s':>8} {'ms/run':>7} {'load (1 min)':>12}")
    for mode in args.modes:
        if mode == "job":
            report_cluster_jobs(sizes, args.timeout)
            continue
        cpu_by_size = {}
        for runs in sizes:
            load = os.getloadavg()[0]
            wall, cpu, jobs = time_dry_run(runs, mode, args.timeout)
            cpu_by_size[runs] = cpu
            print(f"{mode:<7} {runs:>7} {wall:>8.1f} {cpu:>8.1f} {1000 * cpu / runs:>7.2f} "
                  f"{load:>12.2f}   ({jobs})", flush=True)
        if len(sizes) > 1:
            small, large = sizes[0], sizes[-1]
            print(f"{mode}: CPU growth {large} / {small} runs: "
                  f"{cpu_by_size[large] / cpu_by_size[small]:.1f} (linear: {large / small:.1f})")


if __name__ == "__main__":
    main()
