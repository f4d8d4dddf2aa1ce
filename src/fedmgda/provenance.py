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
  dataset given in memory;
- ``qp``: the min-norm QP the package solves (``QP``: ``exact``).

Which QP a run used (:func:`min_norm_qp`): its stamp's ``qp``; for a stamp without it, whether its
commit contains ``EXACT_QP_COMMIT``; a run without a stamp predates it.

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
# The commit that made the min-norm QP exact (fedmgda.algorithms.qp: cvxopt's answer finished on
# its active set, docs/protocol.md §4.3). Runs trained at it or after it use the exact QP; runs
# trained before it used cvxopt's answer as it stopped (weights about 1e-8 off). Environment
# stamps came earlier, so a run without a stamp was trained before it.
EXACT_QP_COMMIT = "b3469b2f5da5f9435a82cd1284bb7d4b90e36657"
QP = "exact"  # what fedmgda.algorithms.qp solves now: the stamp's ``qp`` (change it with the QP)


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
        "qp": QP,
    }


@functools.cache
def source_commit() -> dict[str, Any]:
    """``{"commit", "dirty"}`` of the git checkout holding this package's source (once per
    process); both None when the package does not sit in a checkout's ``src/fedmgda``."""
    unknown = {"commit": None, "dirty": None}
    if not _in_checkout():
        return unknown
    commit = _git(PACKAGE_DIR, "rev-parse", "HEAD")
    changes = _git(PACKAGE_DIR, "status", "--porcelain", "--untracked-files=no")
    if commit is None or changes is None:
        return unknown
    return {"commit": commit, "dirty": bool(changes)}


def _in_checkout() -> bool:
    """Whether this package's source is the ``src/fedmgda`` of a git checkout."""
    top = _git(PACKAGE_DIR, "rev-parse", "--show-toplevel")
    # a wheel installed in a virtual environment inside some checkout must not take its commit
    return top is not None and (Path(top) / "src" / "fedmgda").resolve() == PACKAGE_DIR


def _run_git(where: Path, *args: str) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True,
                              timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None


def _git(where: Path, *args: str) -> str | None:
    done = _run_git(where, *args)
    return done.stdout.strip() if done is not None and done.returncode == 0 else None


# --------------------------------------------------------------------------- the min-norm QP
QP_TEXT = {
    "exact": f"exact (cvxopt's answer finished on its active set: trained at {EXACT_QP_COMMIT[:7]} "
             "or later)",
    "pre-exact": f"cvxopt's answer as it stopped (trained before {EXACT_QP_COMMIT[:7]}, which made "
                 "it exact)",
    "unknown": "unknown (the stamp names neither the QP nor a commit this checkout holds)",
}


def min_norm_qp(stamp: dict[str, Any] | None) -> str:
    """Which min-norm QP a run trained with: ``exact``, ``pre-exact`` or ``unknown``. Its stamp's
    ``qp`` when it has one; else whether its commit contains ``EXACT_QP_COMMIT`` (``git
    merge-base --is-ancestor`` in this package's checkout; a modified checkout is taken at its
    commit); ``unknown`` without a commit, git, or that commit here. A run without a stamp was
    trained before stamping, which came before the exact QP."""
    if not stamp:
        return "pre-exact"
    if stamp.get("qp"):
        return str(stamp["qp"])
    commit = stamp.get("commit")
    return _qp_at_commit(commit) if commit else "unknown"


@functools.cache
def _qp_at_commit(commit: str) -> str:
    if not _in_checkout():
        return "unknown"
    done = _run_git(PACKAGE_DIR, "merge-base", "--is-ancestor", EXACT_QP_COMMIT, commit)
    # 0: it contains the exact QP; 1: it does not; other (128): a commit this checkout lacks
    answer = None if done is None else {0: "exact", 1: "pre-exact"}.get(done.returncode)
    return answer or "unknown"


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


def footer(stamps: list[dict[str, Any] | None],
           qp_stamps: list[dict[str, Any] | None] | None = None) -> str:
    """What a table or the report says of where its runs were made (one stamp per run, None for a
    run trained before stamping): each distinct environment with its number of runs, the
    partitions, and how many runs carry no stamp; then, given the stamps of the runs whose rule
    solves the min-norm QP (``qp_stamps``, none: no line), which QP they used
    (:func:`qp_line`)."""
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
    if qp_stamps:
        lines.append(qp_line(qp_stamps))
    return "\n\n".join(lines)


def qp_line(qp_stamps: list[dict[str, Any] | None]) -> str:
    """"The min-norm QP of its 12 runs that solve one: exact (...)." or, where the runs differ,
    each kind with its number of runs (exact, pre-exact, unknown)."""
    kinds = Counter(min_norm_qp(s) for s in qp_stamps)
    head = f"The min-norm QP of its {runs(len(qp_stamps))} that solve one:"
    if len(kinds) == 1:
        return f"{head} {QP_TEXT.get(next(iter(kinds)), next(iter(kinds)))}."
    order = [*QP_TEXT, *sorted(set(kinds) - set(QP_TEXT))]  # exact, pre-exact, unknown
    return f"{head} " + "; ".join(f"{runs(kinds[kind])} {QP_TEXT.get(kind, kind)}"
                                  for kind in order if kind in kinds) + "."


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
