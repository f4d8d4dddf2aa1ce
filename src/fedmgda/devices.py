"""Which device trains a run when its config says ``device: auto``, and what its job asks for.

The choice comes from measured round times, ``reference/round_times.csv`` (one row per benchmark
setting, device and pack size, each naming the committed measurement file it was copied from;
``benchmarks/bench_rounds.py`` prints them). With no CUDA device the answer is always ``cpu``, as
before. With one, a dataset goes to the device on which its measured time per run-round (in the
best measured pack, evaluation included) is lower: Adult's logistic regression trains on a CPU
core, the CNNs and the LSTM on the GPU. A dataset the table does not measure on both devices goes
to the GPU when its model is a CNN or an LSTM and to a CPU core otherwise (linear models, MLPs).

The device is not part of a run's identity (``fedmgda.config.NON_IDENTITY_FIELDS``): the
choice changes no run key, run.yaml or number. Nothing here imports torch, so the Snakefile
parses fast.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

# the models that go to the GPU when a dataset is not measured
GPU_MODEL_PREFIXES = ("cnn_", "lstm_")


@dataclass(frozen=True)
class RoundTime:
    """One row of reference/round_times.csv: ``s_per_round`` seconds per round of ``runs`` runs
    trained packed (training, participant losses, aggregation; ``eval_s`` the evaluation of every
    user, once per run, when it was timed apart, else 0). ``also``: empty for the benchmark's own
    run config, else the run-config field it was timed with changed (``bench_rounds.py --also``,
    e.g. ``track_improvement=false``): :func:`round_time_variants`, never a device's or a pack's
    choice."""

    setting: str
    dataset: str
    model: str
    device: str
    machine: str
    threads: int
    runs: int
    s_per_round: float
    eval_s: float
    source: str
    also: str = ""

    def per_run_round(self) -> float:
        return self.s_per_round / self.runs + self.eval_s


@cache
def _committed() -> tuple[RoundTime, ...]:
    text = resources.files("fedmgda").joinpath("reference/round_times.csv").read_text()
    return tuple(parse_round_times(text))


def round_times() -> tuple[RoundTime, ...]:
    """The committed table of measured round times (reference/round_times.csv), each setting
    timed with the benchmark's own run config."""
    return split_variants(_committed())[0]


def round_time_variants() -> tuple[RoundTime, ...]:
    """The committed rows of settings timed with one run-config field changed (``also``)."""
    return split_variants(_committed())[1]


def split_variants(rows) -> tuple[tuple[RoundTime, ...], tuple[RoundTime, ...]]:
    """``rows`` as (those timed with the benchmark's own run config, the ``also`` variants): only
    the first choose a device or a pack size."""
    return tuple(r for r in rows if not r.also), tuple(r for r in rows if r.also)


def parse_round_times(text: str) -> list[RoundTime]:
    rows = []
    for row in csv.DictReader(text.splitlines()):
        rows.append(RoundTime(row["setting"], row["dataset"], row["model"], row["device"],
                              row["machine"], int(row["threads"]),
                              int(row["runs"]), float(row["s_per_round"]), float(row["eval_s"]),
                              row["source"], row.get("also") or ""))
    return rows


def default_model(dataset: str) -> str | None:
    from fedmgda.catalog import DATASETS

    info = DATASETS.get(dataset)
    return getattr(info, "model", None) if info is not None else None


def choose_device(dataset: str, model: str | None = None, cuda_available: bool = False,
                  table: tuple[RoundTime, ...] | list[RoundTime] | None = None) -> str:
    """``"cpu"`` or ``"cuda"`` for a run of ``dataset`` (with ``model``, default the dataset's)
    whose config says ``device: auto``. Without CUDA: ``"cpu"``. With it: the device with the lower
    measured time per run-round for the dataset (and model) in ``table`` (default
    :func:`round_times`; its ``also`` rows are left out); a dataset not measured on both devices:
    ``"cuda"`` for a CNN or LSTM model, ``"cpu"`` for the others."""
    if not cuda_available:
        return "cpu"
    rows = round_times() if table is None else split_variants(table)[0]
    model = model or default_model(dataset)
    mine = [r for r in rows if r.dataset == dataset and (model is None or r.model == model)]
    best = {device: min((r.per_run_round() for r in mine if r.device == device), default=None)
            for device in ("cpu", "cuda")}
    if best["cpu"] is not None and best["cuda"] is not None:
        return "cuda" if best["cuda"] < best["cpu"] else "cpu"
    return "cuda" if model is not None and model.startswith(GPU_MODEL_PREFIXES) else "cpu"


def best_pack_size(seconds: Mapping[int, float], tolerance: float = 0.05) -> int:
    """The pack size to use from measured {runs packed: seconds per round of them all}: the smallest
    size whose time per run-round is within ``tolerance`` of the best measured (a smaller pack risks
    less on a failure and a deadline for the same throughput). 1 when nothing is measured."""
    per_run = {k: s / k for k, s in seconds.items()}
    if not per_run:
        return 1
    best = min(per_run.values())
    return min(k for k, t in per_run.items() if t <= best * (1 + tolerance))


def measured_pack(dataset: str, device: str, model: str | None = None,
                  table: tuple[RoundTime, ...] | list[RoundTime] | None = None,
                  tolerance: float = 0.05) -> int:
    """``resources.<dataset>.pack: auto``: :func:`best_pack_size` over the pack sizes measured for
    ``dataset`` (and ``model``) on ``device`` in ``table`` (default :func:`round_times`; its
    ``also`` rows left out), each size's time per run-round the mean over the dataset's settings
    of its ratio to the setting's single run (so a slow setting does not outweigh a fast one).
    Sizes measured beside a single run only; 1 where no pack is measured."""
    rows = round_times() if table is None else split_variants(table)[0]
    model = model or default_model(dataset)
    mine = [r for r in rows if r.dataset == dataset and r.device == device
            and (model is None or r.model == model)]
    single = {r.setting: r.s_per_round for r in mine if r.runs == 1}
    ratios: dict[int, list[float]] = {}
    for r in mine:
        if r.setting in single:
            ratios.setdefault(r.runs, []).append(r.s_per_round / single[r.setting])
    return best_pack_size({k: sum(v) / len(v) for k, v in ratios.items()}, tolerance)


def run_device(config: Mapping[str, Any], cuda_available: bool) -> str:
    """The device a run config trains on: its ``device``, or :func:`choose_device` for ``auto``."""
    device = str(config.get("device") or "auto")
    if device != "auto":
        return device
    return choose_device(config["dataset"], config.get("model"), cuda_available)


def job_gpu(config: Mapping[str, Any], resources_: Mapping[str, Any]) -> int:
    """The ``gpu`` resource of a run's training job: ``resources.<dataset>.gpu``, except for a
    ``device: auto`` run that :func:`choose_device` sends to a CPU core on a machine with a GPU
    (Adult's, the linear models'): 0, so its job never waits for (or, on Slurm, asks for) a GPU.
    A run with an explicit device keeps the resources its config gives (e.g. the Slurm tests' CPU
    runs that ask for a GPU on purpose)."""
    gpu = int(resources_.get("gpu", 0))
    if (str(config.get("device") or "auto") == "auto"
        and run_device(config, cuda_available=True) == "cpu"):
        return 0
    return gpu
