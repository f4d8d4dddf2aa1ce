"""Where a result was made: the environment stamp of a run, and its one-line descriptions.

``environment_stamp`` is a plain dict (summary.json's ``environment``, and every checkpoint's):

- ``fedmgda``: the package version; ``commit``: the git commit of the package source and
  ``dirty``: whether tracked files differ from it (both None when the package is not a git
  checkout, e.g. installed from a wheel);
- ``python``, ``torch``, ``numpy``, ``cvxopt``: versions (``cvxopt`` None when not installed);
- ``device``: where the run trained (``cpu``, ``cuda:0``); ``cuda`` and ``gpu``: torch's CUDA
  version and the GPU's name on a CUDA device, else None;
- ``cpu``: the CPU model; ``isa``: the instruction-set level numpy dispatches to
  (``x86-64-v4`` ... ``x86-64-v1``; elsewhere the SIMD extensions found, e.g. ``ASIMD+SVE``);
  ``torch_isa``: torch's CPU capability (``AVX512``, ``AVX2``, ``DEFAULT``);
- ``threads``: ``torch.get_num_threads()``;
- ``partition_hash``: the sha256 of the run's partition (``Partition.content_hash``), None for a
  dataset given in memory.

The host name is left out on purpose: a stamp describes the software and the hardware, not whose
machine it was. Nothing here imports torch until a stamp is made, so tables can read stamps.
"""

from __future__ import annotations

import functools
import importlib.metadata
import platform
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

PACKAGE_DIR = Path(__file__).resolve().parent
# fields that may change a run's numbers: a checkpoint resumed under other values of these says so
NUMERIC_FIELDS = ("python", "torch", "numpy", "cvxopt", "device", "cpu", "isa")


def environment_stamp(device: Any, partition_hash: str | None = None) -> dict[str, Any]:
    """The stamp of a run training on ``device`` (a ``torch.device`` or its name)."""
    import numpy as np
    import torch

    device = torch.device(device)
    on_cuda = device.type == "cuda"
    return {
        # the source that runs, not what pip installed
        "fedmgda": sys.modules[__package__].__version__,
        **source_commit(),
        "python": platform.python_version(),
        "torch": str(torch.__version__),  # a str subclass that checkpoints (data only) refuse
        "numpy": np.__version__,
        "cvxopt": _installed_version("cvxopt"),
        "device": str(device),
        "cuda": torch.version.cuda if on_cuda else None,
        "gpu": torch.cuda.get_device_name(device) if on_cuda else None,
        "cpu": cpu_model(),
        "isa": numpy_isa_level(),
        "torch_isa": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "partition_hash": partition_hash,
    }


@functools.cache
def source_commit() -> dict[str, Any]:
    """``{"commit", "dirty"}`` of the git checkout holding this package's source (once per
    process); both None when the package does not sit in a checkout's ``src/fedmgda``."""
    unknown = {"commit": None, "dirty": None}
    top = _git(PACKAGE_DIR, "rev-parse", "--show-toplevel")
    # a wheel installed in a virtual environment inside some checkout must not take its commit
    if top is None or (Path(top) / "src" / "fedmgda").resolve() != PACKAGE_DIR:
        return unknown
    commit = _git(PACKAGE_DIR, "rev-parse", "HEAD")
    changes = _git(PACKAGE_DIR, "status", "--porcelain", "--untracked-files=no")
    if commit is None or changes is None:
        return unknown
    return {"commit": commit, "dirty": bool(changes)}


def _git(where: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True,
                              timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.cache
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def numpy_isa_level() -> str:
    """The highest x86-64 level whose features numpy finds on this CPU, or (other CPUs) the
    SIMD extensions it finds, joined by '+'."""
    import numpy as np

    core = getattr(np, "_core", None) or np.core
    found = {name for name, on in core._multiarray_umath.__cpu_features__.items() if on}
    if platform.machine().lower() in ("x86_64", "amd64", "i686", "x86"):
        # numpy >= 2.3 names the levels; older ones only their features
        levels = {"x86-64-v4": {"X86_V4"}, "x86-64-v3": {"X86_V3"}, "x86-64-v2": {"X86_V2"}}
        legacy = {"x86-64-v4": {"AVX512_SKX"}, "x86-64-v3": {"AVX2", "FMA3"},
                  "x86-64-v2": {"SSE42", "POPCNT"}}
        for level in levels:
            if levels[level] <= found or legacy[level] <= found:
                return level
        return "x86-64-v1"
    return "+".join(sorted(found)) or platform.machine() or "unknown"


# --------------------------------------------------------------------------- descriptions
def describe(stamp: dict[str, Any]) -> str:
    """One line: "fedmgda 0.1.0 (abc1234), Python 3.11.7, torch 2.14.1, numpy 2.4.6, cvxopt 1.3.3
    on cpu, AMD EPYC (x86-64-v4), 2 torch threads" (the partition is not part of it)."""
    commit = stamp.get("commit")
    source = f" ({commit[:7]}{', modified' if stamp.get('dirty') else ''})" if commit else ""
    device = stamp.get("device")
    if stamp.get("gpu"):
        device = f"{device} ({stamp['gpu']}, CUDA {stamp.get('cuda')})"
    return (f"fedmgda {stamp.get('fedmgda')}{source}, Python {stamp.get('python')}, torch "
            f"{stamp.get('torch')}, "
            f"numpy {stamp.get('numpy')}, cvxopt {stamp.get('cvxopt')} on {device}, "
            f"{stamp.get('cpu')} "
            f"({stamp.get('isa')}), {stamp.get('threads')} torch "
            f"thread{'' if stamp.get('threads') == 1 else 's'}")


def footer(stamps: list[dict[str, Any] | None]) -> str:
    """What a table or the report says of where its runs were made (one stamp per run, None for a
    run trained before stamping): each distinct environment with its number of runs, the
    partitions, and how many runs carry no stamp."""
    stamped = [s for s in stamps if s]
    lines = []
    environments = Counter(describe(s) for s in stamped)
    if len(environments) == 1:
        lines.append(f"Made with {next(iter(environments))}.")
    elif environments:
        lines.append(f"Made in {len(environments)} environments:\n"
                     + "\n".join(f"- {text} ({runs(n)})" for text, n in environments.most_common()))
    partitions = sorted({s["partition_hash"] for s in stamped if s.get("partition_hash")})
    if partitions:
        shown = ", ".join(h[:12] for h in partitions[:6]) + (", ..." if len(partitions) > 6 else "")
        lines.append(f"Partitions (sha256): {len(partitions)} distinct: {shown}.")
    if len(stamped) < len(stamps):
        n = len(stamps) - len(stamped)
        lines.append(f"{runs(n)} {'carries' if n == 1 else 'carry'} no environment stamp (trained "
                     "before stamping).")
    return "\n\n".join(lines)


def runs(n: int) -> str:
    return f"{n} run" if n == 1 else f"{n} runs"


def environment_changes(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """The fields of ``NUMERIC_FIELDS`` that differ, as "numpy 2.4.6 -> 2.2.6"."""
    return [f"{name} {before.get(name)} -> {now.get(name)}" for name in NUMERIC_FIELDS
            if before.get(name) != now.get(name)]


def resume_note(before: dict[str, Any] | None, now: dict[str, Any]) -> str | None:
    """The one line a resumed run prints about the checkpoint's environment; None when it is this
    one."""
    if not before:
        return ("resuming a checkpoint made under an unknown environment (written before "
                "checkpoints were stamped)")
    changes = environment_changes(before, now)
    return ("resuming a checkpoint made under another environment: " + ", ".join(changes)
            if changes else None)
