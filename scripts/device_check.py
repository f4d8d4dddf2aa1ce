"""One-shot GPU check of the package on a machine with one CUDA GPU (issue 32): five parts, each
a subprocess under its own time limit, each part's output written to --out as it comes and
printed as well.

    python scripts/device_check.py --out DIR            # on the GPU machine (make device-check OUT=DIR)
    python scripts/device_check.py --dry --out DIR      # the same parts on the CPU, tiny (< 1 min)
    python scripts/device_check.py --parts fairness --resume DIR/fairness_runs.tar.gz   # go on

Parts, in order (files under --out, at most 8, all at its top level):

0. ``env``: GPU, driver, torch / CUDA / cuDNN versions, which modules import (``env.txt``).
1. ``same_results``: this machine's environment stamp (``fedmgda.provenance``, per device) and the
   tests every machine must pass alike (issue 41): golden partition hashes and the recorded lockstep
   with the authors' code, on the real F-MNIST files of --raw-dir (``same_results.txt``).
2. ``pytest_cuda``: the tests that exercise CUDA (``-k "cuda or dropout"`` in the test files that
   test for a CUDA device: batched/sequential updates, CUDA graphs with the F-MNIST CNN's dropout,
   CNN reproducibility, local terms, a whole run); a CUDA test that skips on a CUDA machine fails
   the part (``pytest_cuda.txt``).
3. ``bench_rounds``: first ``benchmarks/bench_lstm.py`` with ``LSTM_ARGS`` (the Shakespeare LSTM's
   vmap-ed training step of 31 clients, its written-out backward beside autograd's, beside the
   wavefront candidate and beside its lower bound, then at 1 and 248 clients, within ``LSTM_LIMIT``), then ``benchmarks/bench_rounds.py`` with ``BENCH_ARGS`` over the paper's settings:
   the batched path, 1, 4, 8 and 16 runs packed, Shakespeare's unequal clients also in one size
   group, each setting also with cuDNN's nondeterministic algorithms allowed, with TF32, without
   the participant-loss passes and with ``conv: im2col`` (rows of their own, ``also``, which the
   plan uses for the runs with that field),
   the projected wall time of the whole paper DAG back to back and, after it, the plan's makespan
   (packs, each run on its faster device, the GPU queue beside the CPU cores: docs/performance.md,
   "Projection as the plan's makespan"), then each setting's round beside its lower bound (its
   steps as one model's large-batch steps replayed as a CUDA graph, and its participant losses)
   and the device's float32 matrix-product rate with the paper's counted work at it (the work
   floor), and last one profiled round per setting (where its time goes: kernels, copies, launches, host
   syncs); on a time-out the back-to-back projection is made from the settings measured so far
   (``bench_rounds.txt``). The measured round times also come as rows of
   src/fedmgda/reference/round_times.csv (``round_times_rows.csv``, source ``bench_rounds.txt``:
   replace it by the committed file's path, then append them), written after each setting, so a
   time-out keeps the rows of the settings measured. The benchmark gets ``--time-limit`` (the part's
   limit less ``BENCH_MARGIN``): it starts no setting after 60 % of it, no bound after 80 %, no
   profile after 95 %, and says what it skipped.
4. ``fairness``: the F-MNIST fairness core (``fmnist_core`` of config/fmnist.yaml: FedAvg,
   FedMGDA+, FedAvg-n, FedMGDA on real F-MNIST shards) at the paper's 2 000 rounds, seeds in the
   paper's order (1, 5000, 6000, 9000), packed on the GPU, as many seeds per pack as the measured
   F-MNIST round time lets finish and part 3's best measured pack size allows, packs until the
   time is up. The runs come from the experiment
   registry and are trained by the workflow's own jobs (``fedmgda partition``, then the pack
   rules' ``fedmgda.packs.train_pack``: ``fedmgda train --config run.yaml ... --out DIR ...``), so
   each run folder is what the workflow writes under results/fmnist/runs/ (run.yaml, metrics.csv,
   per_user.csv, per_user_final.csv, summary.json, train.log). A run stopped by the deadline keeps
   its checkpoint.pt (every 50 rounds) and gets a metrics_partial.csv; ``--resume TAR`` continues it. ``fairness.txt`` says
   which runs finished and where the others stopped; ``fairness_runs.tar.gz`` holds the run
   folders (members ``runs/<run key>/...``: ``tar xzf fairness_runs.tar.gz -C results/fmnist``).

Each part is one function, ``part_<name>(check)``: it runs the part's subprocess(es) and sets its
status and note. ``summary.md`` (rewritten after every part) lists every part with its status (ok,
partial, failed, timeout, skipped), wall time, limit and a one-line note. The real mode refuses to start
without a CUDA device; ``--dry`` runs the same parts on the CPU with tiny sizes (1 seed, 2 rounds,
one setting of the benchmark (Adult, 1% of its samples); the real F-MNIST files if --raw-dir has them,
else the offline digits data in their place). --raw-dir, --work and --config are relative to the
repository root, --out and --resume to the current folder.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("env", "same_results", "pytest_cuda", "bench_rounds", "fairness")
STATUSES = ("ok", "partial", "failed", "timeout", "skipped")  # partial: the deadline stopped runs (resumable)
PAPER_SEEDS = (1, 5000, 6000, 9000)  # Tables 8-11, Figures 3-4 (docs/protocol.md §6.1)
FMNIST_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
# what each part imports beyond the standard library (the GPU image lacks cvxopt: carry its wheel)
NEEDS = {"same_results": ("torch", "numpy", "pandas", "yaml", "cvxopt", "pytest"),
         "pytest_cuda": ("torch", "numpy", "pandas", "yaml", "cvxopt", "pytest"),
         "bench_rounds": ("torch", "numpy", "pandas", "yaml", "cvxopt"),
         "fairness": ("torch", "numpy", "pandas", "yaml", "cvxopt")}
OPTIONAL = ("matplotlib", "seaborn", "sklearn", "h5py", "scipy", "snakemake", "jsonschema", "tabulate", "papermill")
BENCH_LINE = re.compile(r"^(?P<name>\S+)\s+(?P<clients>\d+)\s+(all|\S+ \(x1/f\))\s+(?P<seq>[\d.]+|-)\s+(?P<bat>[\d.]+)\s+"
                        r"([\d.]+x|-)\s+[\d.]+\s+(?P<eval>[\d.]+)\s*$")  # sequential '-': not timed (--no-sequential)
PACK_LINE = re.compile(r"^\s+(?P<k>\d+) runs packed: (?P<s>[\d.]+) s per round")
# part 3's round times as rows of src/fedmgda/reference/round_times.csv (their source: bench_rounds.txt)
ROUND_TIME_ROWS = "round_times_rows.csv"
# each part's time limit in seconds, on the GPU and in the dry mode (fairness: what is left of the budget)
LIMITS = {"env": (60.0, 30.0), "same_results": (120.0, 120.0), "pytest_cuda": (150.0, 60.0), "bench_rounds": (350.0, 180.0)}
BENCH_MARGIN = 15.0  # seconds of part 3's limit kept from bench_rounds' --time-limit (its start, its last stage's overrun)
# on the GPU, the settings in the order a time-out should spare them: Shakespeare's first (never
# timed with its real sizes; killed as the seventh on 2026-11-27), those timed before last
BENCH_ORDER = "shakespeare_b10 femnist_b20 femnist_full fmnist_b10_p0.1 cifar10_b10_p0.1 cifar10_b10_p0.2 cifar10_b400_p0.1 adult_b10"
# part 3 first times the Shakespeare LSTM's training step, written-out backward beside autograd
# (benchmarks/bench_lstm.py; never timed on a GPU before 2026-11-27's change), within LSTM_LIMIT
# and beside the wavefront candidate, at 31 clients, then 1 and 248 (a pack of 8 runs): launch- or compute-bound
LSTM_ARGS = ("--device cuda --clients 31 1 248 --repeat 5", "--device cpu --clients 1 --batch 2 --repeat 1")
LSTM_LIMIT = (50.0, 90.0)  # the dry mode's: a loaded 2-core CI machine (one thread: see part_bench_rounds)
BENCH_ARGS = (f"--device cuda --rounds 2 --pack 4 8 16 --no-sequential --max-padding inf --also deterministic=false tf32=true track_improvement=false conv=im2col --fraction-of shakespeare_b10=0.01 --bound --profile --only {BENCH_ORDER}",  # dry:
              "--device cpu --rounds 1 --pack 2 3 --no-sequential --also deterministic=false --only adult_b10 --fraction 0.01 --bound --profile")


# --------------------------------------------------------------------------- running a part
@dataclass
class Part:
    name: str
    status: str = "skipped"
    wall: float = 0.0
    limit: float = 0.0
    files: list[str] = field(default_factory=list)
    note: str = ""


def run_logged(argv: list[str], limit: float, log: Path, env: dict[str, str] | None = None) -> tuple[int | None, float, str]:
    """Run ``argv`` in its own process group, every output line written to ``log`` (flushed) and
    to stdout; after ``limit`` seconds the whole group gets SIGTERM, then SIGKILL. Returns (exit
    code, None on a time-out; seconds; the output)."""
    start = time.monotonic()
    lines: list[str] = []
    with open(log, "a") as fh:
        fh.write("$ " + " ".join(argv) + "\n")
        fh.flush()
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace", start_new_session=True)

        def copy() -> None:
            for line in proc.stdout:
                lines.append(line)
                fh.write(line)
                fh.flush()
                sys.stdout.write(line)
                sys.stdout.flush()

        reader = threading.Thread(target=copy, daemon=True)
        reader.start()
        try:
            rc: int | None = proc.wait(timeout=max(1.0, limit))
        except subprocess.TimeoutExpired:
            rc = None
            for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
                try:
                    os.killpg(proc.pid, sig)
                    proc.wait(timeout=wait)
                    break
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    continue
        reader.join(timeout=10)
        wall = time.monotonic() - start
        fh.write(f"[device_check] {'timed out after' if rc is None else f'exit {rc} after'} {wall:.1f} s (limit {limit:.0f} s)\n")
    return rc, wall, "".join(lines)


def child_env() -> dict[str, str]:
    """The parts' environment: the package from src/ (it need not be installed), unbuffered."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if p)
    return env


def child(name: str, *extra: str) -> list[str]:
    """This script as a part's subprocess (``--child NAME``)."""
    return [sys.executable, str(Path(__file__).resolve()), "--child", name, *extra]


def exit_status(rc: int | None) -> str:
    """A part's status from its subprocess's exit code (None: stopped at its time limit)."""
    return "timeout" if rc is None else "ok" if rc == 0 else "failed"


@dataclass
class Check:
    """One check's settings, shared by its parts: what runs, where it writes, the time budget."""

    args: argparse.Namespace
    parts: list[str]
    out: Path  # the outputs that come back (summary.md and each part's files)
    work: Path  # where part 4 trains (partitions/, runs/, logs/, plan.json)
    resume: Path | None
    dry: bool
    budget: float
    rounds: int
    seeds: list[int]
    summary: Summary
    env: dict[str, str]
    start: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.deadline_wall = time.time() + self.budget

    def remaining(self) -> float:
        return self.budget - (time.monotonic() - self.start)

    def begin(self, name: str, limit: float | None = None) -> tuple[Part, Path]:
        """A part's entry in the summary, with its time limit (default: ``LIMITS``, at most what is
        left of the budget), and its log ``<out>/<name>.txt``, emptied."""
        part = self.summary.parts[name]
        part.limit = limit if limit is not None else min(LIMITS[name][self.dry], self.remaining())
        print(f"\n===== part {PARTS.index(name)}: {name} (limit {part.limit:.0f} s; {time.monotonic() - self.start:.0f} s "
              f"used of {self.budget:.0f}) =====", flush=True)
        log = self.out / f"{name}.txt"
        log.unlink(missing_ok=True)
        part.files = [log.name]
        return part, log


# --------------------------------------------------------------------------- part 0: environment
def child_env_part() -> int:
    import importlib
    import importlib.util
    import platform

    print(f"date (UTC): {datetime.now(timezone.utc):%Y-%m-%d %H:%M}")
    print(f"python {platform.python_version()} ({sys.executable}); {platform.platform()}; {os.cpu_count()} CPUs")
    if shutil.which("nvidia-smi"):
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,mig.mode.current",
                                  "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
            print(f"nvidia-smi: {smi.stdout.strip() or smi.stderr.strip()}")
        except (OSError, subprocess.SubprocessError) as err:
            print(f"nvidia-smi: {err}")
    versions = {}
    for module in sorted({m for ms in NEEDS.values() for m in ms}):  # imported: they must work
        try:
            versions[module] = getattr(importlib.import_module(module), "__version__", "present")
        except Exception as err:  # noqa: BLE001 - any import failure is what we report
            versions[module] = f"MISSING ({type(err).__name__}: {err})"
    for module in OPTIONAL:  # only looked for (importing them takes seconds): no part needs them
        versions[module] = "present (not needed)" if importlib.util.find_spec(module) else "absent (not needed)"
    for module, version in versions.items():
        print(f"  {module:12} {version}")
    missing = {part: [m for m in mods if versions[m].startswith("MISSING")] for part, mods in NEEDS.items()}
    for part, mods in missing.items():
        if mods:
            print(f"MISSING for part {part}: {', '.join(mods)}")
    import torch

    print(f"torch {torch.__version__}; CUDA {torch.version.cuda}; cuDNN {torch.backends.cudnn.version()}; "
          f"CUDA available: {torch.cuda.is_available()}")
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        x = torch.ones(1024, device="cuda")
        torch.cuda.synchronize()
        print(f"GPU: {p.name}, {p.total_memory / 2**30:.1f} GiB, compute capability {p.major}.{p.minor}, "
              f"{p.multi_processor_count} SMs; {torch.cuda.device_count()} device(s); a kernel ran: {float(x.sum()) == 1024}")
    import fedmgda

    print(f"fedmgda {fedmgda.__version__} from {Path(fedmgda.__file__).parent}")
    return 1 if any(missing.values()) else 0


def env_note(text: str) -> str:
    gpu = re.search(r"^GPU: ([^,]+)", text, re.M)
    torch_line = re.search(r"^torch (\S+); CUDA (\S+);", text, re.M)
    missing = re.findall(r"^MISSING for part (\S+): (.*)$", text, re.M)
    bits = [gpu.group(1) if gpu else "no GPU"]
    if torch_line:
        bits.append(f"torch {torch_line.group(1)}, CUDA {torch_line.group(2)}")
    bits += [f"missing for {part}: {mods}" for part, mods in missing]
    return "; ".join(bits)


def part_env(check: Check) -> None:
    part, log = check.begin("env")
    rc, part.wall, text = run_logged(child("env"), part.limit, log, check.env)
    part.status, part.note = exit_status(rc), env_note(text)


# --------------------------------------------------------------------------- part 1: same results
# the tests that must pass on any machine (issue 41): golden partition hashes and the recorded
# lockstep with the authors' code, fed the inputs it carries
SAME_RESULTS_TESTS = ("tests/data/test_machine_independent.py", "tests/data/test_authors_lockstep.py")


def child_same_results(raw_dir: str) -> int:
    """This machine's environment stamp (fedmgda.provenance) per device, then the same-results tests
    on the real F-MNIST and UCI Adult files of ``raw_dir`` (those tests skip where the files are
    absent; ``make device-carry`` packs both to travel)."""
    import torch

    from fedmgda.provenance import environment_stamp

    for device in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
        print(f"environment stamp ({device}): {json.dumps(environment_stamp(device), sort_keys=True)}", flush=True)
    env = dict(os.environ, FEDMGDA_FMNIST_DIR=str((ROOT / raw_dir / "fmnist").resolve()))
    if (ROOT / raw_dir / "adult" / "adult.data").exists():
        env["FEDMGDA_ADULT_DIR"] = str((ROOT / raw_dir / "adult").resolve())
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *SAME_RESULTS_TESTS],
                          cwd=ROOT, env=env).returncode


def same_results_note(text: str) -> str:
    stamp = re.search(r"^environment stamp \(cpu\): (.*)$", text, re.M)
    tally = re.findall(r"^=*\s*(\d+ (?:passed|failed).*?) in [\d.]+s", text, re.M)
    cpu = json.loads(stamp.group(1)) if stamp else {}
    return "; ".join(filter(None, [tally[-1] if tally else "no pytest tally",
                                   cpu and f"{cpu.get('cpu')} ({cpu.get('isa')}), numpy {cpu.get('numpy')}, torch {cpu.get('torch')}"]))


def part_same_results(check: Check) -> None:
    part, log = check.begin("same_results")
    rc, part.wall, text = run_logged(child("same_results", "--raw-dir", check.args.raw_dir), part.limit, log, check.env)
    part.status, part.note = exit_status(rc), same_results_note(text)


# --------------------------------------------------------------------------- part 2: CUDA tests
def cuda_test_files() -> list[str]:
    """Test files (tests/*.py) that test for a CUDA device: where the CUDA tests are (this
    script's own test aside)."""
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py")
                  if "torch.cuda.is_available()" in p.read_text() and p.name != "test_device_check.py")


def pytest_report(junit: Path, dry: bool) -> tuple[str, str]:
    """(status, note) from pytest's JUnit XML: no selected test failed, and, on a CUDA machine,
    the tests with 'cuda' in their names ran (none skipped); in the dry mode they were collected."""
    import xml.etree.ElementTree as ET

    if not junit.exists():
        return "failed", "no pytest report (collection failed?)"
    cases = ET.parse(junit).getroot().iter("testcase")
    passed, failed, skipped = [], [], []
    for case in cases:
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        kinds = {child.tag for child in case}
        (failed if kinds & {"failure", "error"} else skipped if "skipped" in kinds else passed).append(name)
    cuda_ran = [n for n in passed + failed if "cuda" in n]
    cuda_skipped = [n for n in skipped if "cuda" in n]
    note = f"{len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped; {len(cuda_ran)} CUDA tests ran"
    if failed:
        return "failed", note + "; failed: " + ", ".join(n.split("::")[-1] for n in failed[:5])
    if dry:  # on the CPU the CUDA tests skip: they must at least be there
        return ("ok", note + f" (dry: {len(cuda_skipped)} CUDA tests collected, skipped on the CPU)") if cuda_skipped else \
               ("failed", note + "; no CUDA test collected")
    if cuda_skipped or not cuda_ran:
        return "failed", note + f"; {len(cuda_skipped)} CUDA tests skipped on a CUDA machine"
    return "ok", note


def pytest_outcome(rc: int | None, junit: Path, dry: bool) -> tuple[str, str]:
    """(status, note) of the CUDA tests: :func:`pytest_report`, failed where pytest's exit says so."""
    if rc is None:
        return "timeout", "see pytest_cuda.txt for the tests run before the time-out"
    status, note = pytest_report(junit, dry)
    if rc != 0 and status == "ok":
        return "failed", f"pytest exit {rc}; " + note
    return status, note


def part_pytest_cuda(check: Check) -> None:
    part, log = check.begin("pytest_cuda")
    junit = check.work / "pytest_cuda.xml"
    junit.parent.mkdir(parents=True, exist_ok=True)
    junit.unlink(missing_ok=True)
    k = check.args.pytest_k or ("cuda" if check.dry else "cuda or dropout")
    argv = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "--durations=10",
            f"--junitxml={junit}", "-k", k, *cuda_test_files()]
    rc, part.wall, _ = run_logged(argv, part.limit, log, check.env)
    part.status, part.note = pytest_outcome(rc, junit, check.dry)


# --------------------------------------------------------------------------- part 3: benchmark
def bench_measurements(text: str) -> dict[str, dict[str, float]]:
    """Per setting of bench_rounds' table: batched s/round, eval s, and ``pack``: {K: s/round}."""
    measured: dict[str, dict[str, float]] = {}
    last = None
    for line in text.splitlines():
        if m := BENCH_LINE.match(line):
            last = m["name"]
            measured[last] = {"batched": float(m["bat"]), "eval": float(m["eval"]), "pack": {}}
        elif (m := PACK_LINE.match(line)) and last:
            measured[last]["pack"][int(m["k"])] = float(m["s"])
    return measured


def projection_note(text: str) -> str:
    """The summary's words for bench_rounds' projections: back to back, and the plan's makespan
    (its ``all`` row: the jobs on the GPU beside the CPU cores) when it printed one."""
    projection = re.search(r"projected wall time of the paper DAG \((\d+) training runs.*?: ([\d.]+) h", text)
    if not projection:
        return "; no projection"
    note = f"; paper DAG ({projection.group(1)} runs) projected {projection.group(2)} h back to back"
    plan = re.search(r"^plan: .*? on (\d+) GPU\(s\) and (\d+) CPU cores.*?^all\s+(\d+)\s+\d+\s+[\d.]+\s+([\d.]+)", text, re.M | re.S)
    if plan:
        note += f", {plan.group(4)} h as planned on {plan.group(1)} GPU(s) and {plan.group(2)} cores ({plan.group(3)} runs)"
    return note


def child_project(measured_json: str) -> int:
    """The paper DAG's projection (bench_rounds.project_paper) from settings measured so far."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_rounds", ROOT / "benchmarks" / "bench_rounds.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules["bench_rounds"] = bench  # its dataclasses look their module up
    spec.loader.exec_module(bench)
    measured = {k: (v["batched"], v["eval"]) for k, v in json.loads(measured_json).items()}
    seconds, runs, approximated = bench.project_paper(measured)
    print(f"projected wall time of the paper DAG ({runs} training runs, batched path, one device, runs back to back; "
          f"from the {len(measured)} settings measured before the time-out): {sum(seconds.values()) / 3600:.1f} h")
    print("  by dataset: " + ", ".join(f"{name} {s / 3600:.1f} h" for name, s in sorted(seconds.items(), key=lambda kv: -kv[1])))
    for line in approximated:
        print(f"  approximated: {line}")
    return 0


def bench_note(measured: dict[str, dict[str, float]], text: str) -> str:
    """The summary's note of part 3: settings measured, projections, F-MNIST's round times."""
    note = f"{len(measured)} settings measured" + projection_note(text)
    if bounds := re.search(r"^within ([\d.]+)x of the bound: (\d+) of (\d+) settings", text, re.M):
        note += f"; {bounds.group(2)} of {bounds.group(3)} within {bounds.group(1)}x of their lower bound"
    if floor := re.search(r"^the paper DAG's counted work \((\d+) PFLOP.*? at that rate: ([\d.]+) h", text, re.M):
        note += f"; the paper's counted work ({floor.group(1)} PFLOP) takes {floor.group(2)} h at the measured float32 product rate"
    fm = measured.get("fmnist_b10_p0.1")
    if fm:
        packed = "".join(f", {k} packed {s:.3f}" for k, s in fm["pack"].items())
        note += f"; F-MNIST s/round: 1 run {fm['batched']:.3f}{packed}"
    return note


def lstm_note(text: str) -> str:
    """The summary's words for bench_lstm's lines: the step's milliseconds, the speed-ups, the
    ratio to the step's lower bound, and the wavefront's speed-up at the other widths."""
    steps = dict(re.findall(r"^(autograd|written-out|wavefront|bound)\s+([\d.]+)\s", text, re.M))
    speedup = re.search(r"^speed-up of the written-out backward: ([\d.]+)x", text, re.M)
    ratio = re.search(r"^written-out step / bound: ([\d.]+)x", text, re.M)
    if not speedup or not ratio or len(steps) < 3:
        return "; LSTM step not timed"
    note = (f"; LSTM step: written-out backward {steps['written-out']} ms, autograd {steps['autograd']} ms "
            f"({speedup.group(1)}x), bound {steps['bound']} ms ({ratio.group(1)}x)")
    if "wavefront" in steps:
        note += f", wavefront {steps['wavefront']} ms"
    widths = re.findall(r"^(\d+) clients: .*; wavefront speed-up ([\d.]+)x", text, re.M)
    if widths:
        note += "; wavefront speed-up at " + ", ".join(f"{n} clients {x}x" for n, x in widths)
    return note


def part_bench_rounds(check: Check) -> None:
    part, log = check.begin("bench_rounds")
    lstm_argv = [sys.executable, "benchmarks/bench_lstm.py", *LSTM_ARGS[check.dry].split()]
    # dry: one thread, as a test beside other tests; two threads on two busy cores made a 14 s step
    # take over 60 s (a fresh clone's CI, 2026-11-27)
    lstm_env = dict(check.env, OMP_NUM_THREADS="1") if check.dry else check.env
    _, lstm_wall, lstm_text = run_logged(lstm_argv, min(LSTM_LIMIT[check.dry], part.limit / 2), log, lstm_env)
    limit = part.limit - lstm_wall
    bench_args = check.args.bench_args or BENCH_ARGS[check.dry]
    rows = check.out / ROUND_TIME_ROWS
    rows.unlink(missing_ok=True)
    argv = [sys.executable, "benchmarks/bench_rounds.py", *bench_args.split(), "--csv", str(rows), "--source", "bench_rounds.txt"]
    if "--time-limit" not in bench_args:  # its stages while time is left, rather than killed in one
        argv += ["--time-limit", f"{max(1.0, limit - BENCH_MARGIN):.0f}"]
    rc, wall, text = run_logged(argv, limit, log, check.env)
    part.wall = lstm_wall + wall
    part.status = exit_status(rc)
    if rows.exists():
        part.files.append(rows.name)
    measured = bench_measurements(text)
    if "projected wall time" not in text and measured:  # a time-out: project from what was measured
        _, _, more = run_logged(child("project", "--measured", json.dumps(measured)), 60, log, check.env)
        text += more
    part.note = bench_note(measured, text) + lstm_note(lstm_text)


# --------------------------------------------------------------------------- part 4: fairness
def fmnist_files_present(raw_dir: str) -> bool:
    folder = Path(raw_dir) if Path(raw_dir).is_absolute() else ROOT / raw_dir
    return all((folder / "fmnist" / name).is_file() for name in FMNIST_FILES)


def fairness_registry(args: argparse.Namespace):
    """The experiment's runs from the registry (config, rounds, seeds, device, raw folder set as
    ``snakemake --config`` would), as ``{seed: [run key, ...]}`` in the paper's seed order and the
    grid's algorithm order, with the registry and a note on the data used."""
    from fedmgda.experiments import expand, load_config, validate_runs

    config = load_config(str(ROOT / args.config))
    names = experiment_names(args.experiment)
    unknown = [name for name in names if name not in config["experiments"]]
    if unknown:
        raise SystemExit(f"device_check: {args.config} has no experiment {', '.join(unknown)}")
    config["experiments"] = {name: config["experiments"][name] for name in names}  # their runs are the same
    config.update(rounds=args.rounds, seeds=args.seeds, only=names, device=args.device,
                  raw_dir=args.raw_dir, allow_download=False)
    if fmnist_files_present(args.raw_dir):
        note = f"real F-MNIST files in {args.raw_dir}/fmnist"
        if args.dry:  # a tiny version of the same runs: 2 clients a round (their keys say p0.02)
            config["run_overrides"] = {**(config.get("run_overrides") or {}), "participation": 0.02}
            note += "; dry mode: 2 clients a round (participation 0.02)"
    elif args.dry:  # the offline digits data in their place
        for name in names:
            config["settings"][config["experiments"][name]["setting"]]["dataset"] = "digits"
        note = f"no F-MNIST files in {args.raw_dir}/fmnist: the offline digits data in their place (dry mode)"
    else:
        raise SystemExit(f"device_check: the F-MNIST files are not in {args.raw_dir}/fmnist ({', '.join(FMNIST_FILES)}); "
                         f"carry .carry (make device-carry) or pass --raw-dir")
    registry = expand(config)
    validate_runs(registry)
    by_seed = {seed: list(dict.fromkeys(row.runs[i] for name in names for row in registry.rows[name]))  # shared runs once
               for i, seed in enumerate(args.seeds)}
    return registry, by_seed, note


def experiment_names(text: str) -> list[str]:
    """--experiment: one experiment of the registry, or several separated by commas."""
    return [name.strip() for name in text.split(",") if name.strip()]


def pack_groups(keys: list[str], registry) -> list[list[str]]:
    """The keys split into the groups that may share a process (``fedmgda.packs.pack_group``:
    FedProx's proximal term, another batch size or model train apart), in order of first key."""
    from fedmgda.packs import pack_group

    groups: dict[str, list[str]] = {}
    for key in keys:
        groups.setdefault(pack_group(registry.runs[key].config), []).append(key)
    return list(groups.values())


def round_estimate(bench_text: str, runs: int, rounds: int) -> float | None:
    """Seconds for ``runs`` F-MNIST runs packed over ``rounds`` rounds, from part 3's F-MNIST
    rows (1 run and K runs packed, linear in between and beyond; evaluation every 10 rounds; 1.5x
    for what the benchmark leaves out: per-user statistics, metrics, checkpoints); None without them."""
    row = bench_measurements(bench_text).get("fmnist_b10_p0.1")
    if not row:
        return None
    one = row["batched"]
    slope = 0.0
    if row["pack"]:
        k, packed = max(row["pack"].items())
        slope = max(0.0, (packed - one) / (k - 1))
    per_round = one + slope * (runs - 1) + runs * row["eval"] / 10
    return 1.5 * rounds * per_round + 30.0


def repo_path(path: Path) -> str:
    """A path relative to the repository root where it lies inside (run.yaml's partition file, as
    the workflow writes it; a checkpoint then resumes in another copy of the tree)."""
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def train_group(keys: list[str], registry, work: Path, deadline: float, pack_no: int) -> tuple[int | None, float]:
    """One pack through the workflow's own pack job (``fedmgda.packs.train_pack``: run.yaml per run
    as the train rules write it, ``fedmgda.packs.run_yaml_text``; ``python -m fedmgda train --config
    ... --out ...`` on the pack's threads; its log to each run's train.log, appended to, so that a
    resumed run keeps its earlier log), stopped at ``deadline``; the pack's log printed as it comes.
    Returns (exit code, None when the deadline stopped it; seconds)."""
    from fedmgda.packs import pack_resources, run_yaml_text, train_pack

    members = []
    for key in keys:
        out = work / "runs" / key
        (out / "metrics_partial.csv").unlink(missing_ok=True)  # a resumed run writes its own again
        members.append({"config": run_yaml_text(registry.runs[key], repo_path(work / "partitions")),
                        "run_yaml": repo_path(out / "run.yaml"), "out": repo_path(out), "log": repo_path(out / "train.log")})
    log = work / "logs" / f"{datetime.now(timezone.utc):%Y%m%d-%H%M%S}_pack{pack_no}.log"
    threads = pack_resources([registry.runs[k] for k in keys])["threads"]
    start, rc = time.monotonic(), 0
    try:
        with following(log):
            train_pack(f"{shlex.quote(sys.executable)} -m fedmgda train --progress-every 20", members, log, threads,
                       timeout=deadline - time.time(), append_logs=True)
    except subprocess.TimeoutExpired:
        rc = None
    except subprocess.CalledProcessError as err:
        rc = err.returncode
    return rc, time.monotonic() - start


@contextlib.contextmanager
def following(path: Path):
    """What is written to ``path`` printed as it comes (every second), until the block ends."""
    done = threading.Event()

    def follow() -> None:
        position = 0
        while True:
            last = done.is_set()
            if path.exists():
                with open(path, "rb") as fh:
                    fh.seek(position)
                    chunk = fh.read()
                    position = fh.tell()
                sys.stdout.write(chunk.decode(errors="replace"))
                sys.stdout.flush()
            if last:
                return
            done.wait(1.0)

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    try:
        yield
    finally:
        done.set()
        reader.join(timeout=10)


def plan_fairness(args: argparse.Namespace, work: Path):
    """The runs of part 4 (:func:`fairness_registry`), written to ``<work>/plan.json``:
    (registry, {seed: [run key, ...]})."""
    registry, by_seed, note = fairness_registry(args)
    plan = [{"seed": seed, "run": key} for seed, keys in by_seed.items() for key in keys]
    (work / "logs").mkdir(parents=True, exist_ok=True)
    (work / "plan.json").write_text(json.dumps({"experiment": args.experiment, "rounds": args.rounds, "note": note,
                                                "runs": plan}, indent=1))
    print(f"{args.experiment}: {len(plan)} runs ({len(by_seed[args.seeds[0]])} algorithms x seeds {args.seeds}), "
          f"{args.rounds} rounds, device {args.device}; {note}", flush=True)
    return registry, by_seed


def measured_pack_runs(bench_text: str) -> int | None:
    """The F-MNIST pack size part 3 measured best (``fedmgda.devices.best_pack_size`` over its
    1-run and packed rows); None without packed rows."""
    from fedmgda.devices import best_pack_size

    row = bench_measurements(bench_text).get("fmnist_b10_p0.1")
    if not row or not row["pack"]:
        return None
    return best_pack_size({1: row["batched"], **row["pack"]})


def seeds_per_pack(runs_per_seed: int, todo: int, rate: float | None, bench_text: str, rounds: int, left: float) -> int:
    """The most seeds (of ``todo``) whose runs, packed, should finish in the ``left`` seconds (from
    the last pack's measured seconds per run-round, ``rate``, else from part 3's benchmark) and
    are no more runs than part 3's best measured pack size (``measured_pack_runs``). 0 when not
    even one seed should finish (no pack is started that the deadline would stop: issue 42); 1
    when nothing was measured to estimate from."""
    most = measured_pack_runs(bench_text)
    estimated = False
    for n in range(todo, 0, -1):
        runs = runs_per_seed * n
        if most is not None and runs > most and n > 1:
            continue
        estimate = (rate * runs * rounds + 30) if rate else round_estimate(bench_text, runs, rounds)
        estimated |= estimate is not None
        if estimate is not None and estimate <= left:
            return n
    return 0 if estimated else 1


def make_partitions(keys: list[str], registry, work: Path) -> None:
    """The workflow's partition job for each run's partition not yet saved: ``fedmgda partition
    ... --out <work>/partitions/<partition>.npz`` (``fedmgda.workflow_cli``)."""
    from fedmgda.workflow_cli import main as workflow

    for key in keys:
        spec = registry.runs[key]
        if spec.partition is not None and not (work / "partitions" / f"{spec.partition}.npz").exists():
            info = registry.partitions[spec.partition]
            workflow(["partition", "--dataset", info["dataset"], "--partition", info["partition"] or "",
                      "--seed", str(info["seed"]), "--options", json.dumps(info["options"]), "--raw-dir", info["raw_dir"],
                      "--out", str(work / "partitions" / f"{spec.partition}.npz")])


def train_seeds(seeds: list[int], keys: list[str], registry, work: Path, deadline: float, pack_no: int) -> tuple[int | None, float, int]:
    """The runs ``keys`` of ``seeds``, one pack per group that may share a process
    (:func:`pack_groups`): (0, a failed pack's exit code, or None when the deadline stopped a
    pack; seconds; the next pack's number)."""
    total = 0.0
    for group in pack_groups(keys, registry):
        print(f"[fairness] pack {pack_no}: seeds {seeds}, {len(group)} runs, {deadline - time.time():.0f} s left", flush=True)
        rc, wall = train_group(group, registry, work, deadline, pack_no)
        total += wall
        if rc is None:
            print(f"[fairness] pack {pack_no} stopped at the deadline after {wall:.0f} s (checkpoints every 50 rounds)", flush=True)
            return None, total, pack_no
        if rc != 0:
            print(f"[fairness] pack {pack_no} failed (exit {rc})", flush=True)
            return rc, total, pack_no
        pack_no += 1
    return 0, total, pack_no


def child_fairness(args: argparse.Namespace) -> int:
    """Part 4 (a subprocess): partitions, then packs of seeds until ``args.deadline``."""
    work = Path(args.work)
    registry, by_seed = plan_fairness(args, work)
    bench_text = Path(args.bench_log).read_text() if args.bench_log and Path(args.bench_log).exists() else ""
    todo = [seed for seed in args.seeds if not all((work / "runs" / k / "summary.json").exists() for k in by_seed[seed])]
    done_before = [seed for seed in args.seeds if seed not in todo]
    if done_before:
        print(f"seeds finished before (resumed folders): {done_before}", flush=True)
    pack_no, rate = 1, None  # rate: measured seconds per run-round of the last pack
    while todo:
        left = args.deadline - time.time()
        if left < 45:
            print(f"[fairness] {left:.0f} s left: seeds {todo} not started", flush=True)
            break
        size = seeds_per_pack(len(by_seed[todo[0]]), len(todo), rate, bench_text, args.rounds, left)
        if size == 0:
            print(f"[fairness] {left:.0f} s left, too few for one seed's {len(by_seed[todo[0]])} runs of {args.rounds} rounds: "
                  f"seeds {todo} not started", flush=True)
            break
        seeds, todo = todo[:size], todo[size:]
        keys = [k for seed in seeds for k in by_seed[seed] if not (work / "runs" / k / "summary.json").exists()]
        make_partitions(keys, registry, work)
        rc, total, pack_no = train_seeds(seeds, keys, registry, work, args.deadline, pack_no)
        if rc is None:
            return 0
        if rc != 0:
            return rc
        rate = total / (len(keys) * args.rounds)
    return 0


def scan_runs(work: Path) -> tuple[list[dict], str]:
    """Every planned run's state from its folder: finished (summary.json), stopped at a checkpoint
    (its rows written to metrics_partial.csv), started without a checkpoint, or not started."""
    plan_file = work / "plan.json"
    if not plan_file.exists():
        return [], ""
    plan = json.loads(plan_file.read_text())
    states = []
    for item in plan["runs"]:
        folder = work / "runs" / item["run"]
        _, algorithm, hparams, *_ = item["run"].split("/")
        state = {"run": item["run"], "seed": item["seed"], "algorithm": algorithm + ("" if hparams == "default" else f" {hparams}")}
        if (folder / "summary.json").exists():  # finished: status ok, diverged or failed
            summary = json.loads((folder / "summary.json").read_text())
            protocol = summary.get("protocol") or {}
            state.update(state=f"finished, {summary.get('status')}", rounds=summary.get("rounds_completed"),
                         runtime_s=summary.get("runtime_s"), mean_acc=protocol.get("mean_acc"),
                         std_acc=protocol.get("std_acc"), worst5_acc=protocol.get("worst5_acc"))
        elif (folder / "checkpoint.pt").exists():
            import pandas as pd
            import torch

            from fedmgda.checkpoints import read

            payload = read(folder / "checkpoint.pt", torch.device("cpu"))  # the simulator's own safe reader
            pd.DataFrame(payload["rows"]).to_csv(folder / "metrics_partial.csv", index=False)
            state.update(state="stopped", rounds=payload["next_round"], runtime_s=payload["elapsed"])
        elif (folder / "run.yaml").exists():
            state.update(state="started, no checkpoint yet", rounds=0)
        else:
            state.update(state="not started", rounds=0)
        states.append(state)
    return states, plan.get("note", "")


def fairness_table(states: list[dict], rounds: int) -> str:
    def pct(x):  # the statistics are fractions
        return "-" if x is None else f"{100 * x:.2f}"

    lines = [f"| seed | algorithm | state | rounds of {rounds} | run time s | mean acc % | std | worst 5% |",
             "|---|---|---|---|---|---|---|---|"]
    for s in states:
        runtime = "-" if s.get("runtime_s") is None else f"{s['runtime_s']:.0f}"
        lines.append(f"| {s['seed']} | {s['algorithm']} | {s['state']} | {s['rounds']} | {runtime} | "
                     f"{pct(s.get('mean_acc'))} | {pct(s.get('std_acc'))} | {pct(s.get('worst5_acc'))} |")
    return "\n".join(lines)


def pack_runs(work: Path, tar_path: Path) -> int:
    """runs/ and logs/ of the work folder as one tar.gz (members runs/<key>/..., logs/...)."""
    with tarfile.open(tar_path, "w:gz") as tar:
        for sub in ("runs", "logs"):
            if (work / sub).exists():
                tar.add(work / sub, arcname=sub)
        if (work / "plan.json").exists():
            tar.add(work / "plan.json", arcname="plan.json")
    return tar_path.stat().st_size


def fairness_argv(check: Check, limit: float) -> list[str]:
    """Part 4's subprocess: the experiment's runs on the work folder until a deadline (the
    budget's end, or this part's limit, less time to pack the runs)."""
    args = check.args
    deadline = min(check.deadline_wall - 25, time.time() + limit - 10)
    return child("fairness", "--work", str(check.work), "--raw-dir", args.raw_dir, "--rounds", str(check.rounds),
                 "--seeds", *map(str, check.seeds), "--config", args.config, "--experiment", args.experiment,
                 "--device", "cpu" if check.dry else "cuda", "--deadline", str(deadline),
                 "--bench-log", str(check.out / "bench_rounds.txt"), *(["--dry"] if check.dry else []))


def fairness_note(states: list[dict], size: int) -> str:
    """The summary's note of part 4: runs finished (and the seeds with all their runs), where the
    others stopped, the size of the runs' tar."""
    finished = [s for s in states if s["state"].startswith("finished")]
    stopped = [f"seed {s['seed']} {s['algorithm']} at round {s['rounds']}" for s in states if s not in finished]
    seeds_done = sorted({s["seed"] for s in finished} - {s["seed"] for s in states if s not in finished})
    note = (f"{len(finished)} of {len(states)} runs finished (seeds {seeds_done or 'none'})"
            + (f"; not finished: {'; '.join(stopped[:6])}{' ...' if len(stopped) > 6 else ''}" if stopped else "")
            + (f"; tar {size / 2**20:.1f} MiB" if size else ""))
    return note + (" (over 16 MiB: will not come back from the device)" if size > 16 * 2**20 else "")


def fairness_status(rc: int | None, states: list[dict]) -> str:
    """ok: every planned run finished; partial: the deadline stopped some (they resume)."""
    if rc is None or rc != 0:
        return exit_status(rc)
    return "ok" if states and all(s["state"].startswith("finished") for s in states) else "partial"


def part_fairness(check: Check) -> None:
    part, log = check.begin("fairness", limit=max(0.0, check.remaining() - 15))
    if check.resume:
        with tarfile.open(check.resume) as tar:
            tar.extractall(check.work, filter="data")
        print(f"unpacked {check.resume} into {check.work}: finished runs are kept, stopped ones resume", flush=True)
    if part.limit < 60:
        part.files, part.status, part.note = [], "skipped", f"{part.limit:.0f} s left: not started"
        return
    rc, part.wall, _ = run_logged(fairness_argv(check, part.limit), part.limit, log, check.env)
    states, note = scan_runs(check.work)
    table = fairness_table(states, check.rounds)
    with open(log, "a") as fh:
        fh.write(f"\n{note}\n{table}\n")
    print(f"\n{table}")
    tar = check.out / "fairness_runs.tar.gz"
    size = pack_runs(check.work, tar) if (check.work / "runs").exists() else 0
    part.files += [tar.name] if size else []
    part.status, part.note = fairness_status(rc, states), fairness_note(states, size)


PART_RUNNERS = {"env": part_env, "same_results": part_same_results, "pytest_cuda": part_pytest_cuda,
                "bench_rounds": part_bench_rounds, "fairness": part_fairness}


# --------------------------------------------------------------------------- the driver
class Summary:
    """summary.md under --out, rewritten after every part."""

    def __init__(self, out: Path, mode: str):
        self.path, self.mode, self.parts = out / "summary.md", mode, {name: Part(name) for name in PARTS}
        self.header = ""

    def write(self) -> None:
        lines = [f"# Device check ({self.mode})", "", self.header, "",
                 "| part | status | wall s | limit s | files | note |", "|---|---|---|---|---|---|"]
        for i, p in enumerate(self.parts.values()):
            lines.append(f"| {i} {p.name} | {p.status} | {p.wall:.0f} | {p.limit:.0f} | {', '.join(p.files)} | {p.note} |")
        self.path.write_text("\n".join(lines) + "\n")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.environ.get("OUT") or "results/device-check",
                        help="output folder (default: $OUT when set, else results/device-check)")
    parser.add_argument("--dry", action="store_true", help="the same parts on the CPU, tiny (a check that the script works)")
    parser.add_argument("--budget", type=float, help="seconds for all parts (default 450; dry: 240)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {','.join(PARTS)}")
    parser.add_argument("--raw-dir", default="resources/raw", help="raw data folder holding fmnist/ (the four F-MNIST .gz files)")
    parser.add_argument("--work", default="results/device-check/work",
                        help="where part 4 trains (partitions/, runs/, logs/; checkpoints for a later --resume)")
    parser.add_argument("--resume", help="a fairness_runs.tar.gz of an earlier check: unpacked into --work first "
                        "(keep --work inside the repository, as its default is: the checkpoints name their partition file by it)")
    parser.add_argument("--report", metavar="TAR", nargs="+", help="no GPU needed: the experiments' tables, figures and claims "
                        "from the finished runs of one or more fairness_runs.tar.gz (with --rounds and --seeds as the checks ran "
                        "them, all seeds of all tars), written to --out")
    parser.add_argument("--seeds", type=int, nargs="+", help="part 4's seeds (default: the experiment's, then the paper's 1 5000 6000 9000)")
    parser.add_argument("--rounds", type=int, help="part 4's rounds (default 2000; dry: 2)")
    parser.add_argument("--config", default="config/fmnist.yaml")
    parser.add_argument("--experiment", default="fmnist_core", help="part 4's experiment of --config, or several separated by commas "
                        "(their shared runs trained once; runs that cannot share a process, such as FedProx's, in packs of their own)")
    parser.add_argument("--pytest-k", help='pytest -k expression (default "cuda or dropout"; dry: "cuda", which all skip)')
    parser.add_argument("--bench-args", help=f"bench_rounds.py's arguments (default: {BENCH_ARGS[0]})")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--device", help=argparse.SUPPRESS)
    parser.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--bench-log", help=argparse.SUPPRESS)
    parser.add_argument("--measured", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def report_runs(args: argparse.Namespace) -> int:
    """``--report TAR [TAR ...]``: the experiments' tables, figures and claims (``fedmgda.tables``,
    ``fedmgda.figures``, ``fedmgda.claims``: the workflow's table, figure and claims rules) on the
    runs of one or more checks' ``fairness_runs.tar.gz``, unpacked into --out/runs; the registry is
    config/fmnist.yaml with ``rounds``, ``seeds`` and ``only`` set as ``snakemake --config`` would
    set them. Writes <table>.md/.csv, <figure>.pdf/.png and claims.md/.csv to --out."""
    from fedmgda.claims import parse_claims, write_claims
    from fedmgda.experiments import expand, item_spec, load_config
    from fedmgda.figures import make_figure
    from fedmgda.tables import write_table

    if not args.rounds or not args.seeds:
        print("device_check: --report needs --rounds and --seeds (those the check ran)", file=sys.stderr)
        return 2
    out = Path(args.out).resolve()
    for path in args.report:  # several checks' runs (other seeds of the same experiments) together
        with tarfile.open(path) as tar:
            tar.extractall(out, filter="data")
    config = load_config(str(ROOT / args.config))
    names = experiment_names(args.experiment)
    config.update(rounds=args.rounds, seeds=args.seeds, device="cuda")
    every = expand({**config, "only": None})  # the tables and figures that show only these experiments' runs
    shown = [item for item, spec in {**every.tables, **every.figures}.items() if set(spec.experiments) <= set(names)]
    config["only"] = names + shown
    registry = expand(config)
    for name, spec in registry.tables.items():
        write_table(item_spec(registry, spec), out / "runs", out / f"{name}.csv", out / f"{name}.md")
        print((out / f"{name}.md").read_text())
    for name, spec in registry.figures.items():
        make_figure(item_spec(registry, spec), out / "runs", out / f"{name}.pdf", out / f"{name}.png")
        print(f"{name}: {out / name}.png")
    claims = parse_claims(config, registry)
    if claims:
        write_claims(claims, out / "runs", out / "claims.csv", out / "claims.md", f"{registry.profile}, {args.experiment} on the GPU")
        print((out / "claims.md").read_text())
    return 0


def default_seeds(config: str, experiment: str) -> list[int]:
    import yaml

    seeds = (yaml.safe_load((ROOT / config).read_text())["experiments"][experiment_names(experiment)[0]].get("seeds") or [1])
    return [int(s) for s in seeds] + [s for s in PAPER_SEEDS if s not in seeds]


CHILDREN = {"env": lambda args: child_env_part(), "same_results": lambda args: child_same_results(args.raw_dir),
            "project": lambda args: child_project(args.measured), "fairness": lambda args: child_fairness(args)}


def refusal(args: argparse.Namespace, parts: list[str], work: Path, resume: Path | None) -> str | None:
    """Why the check cannot start here, in one line; None when it can."""
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        return f"unknown part(s) {', '.join(unknown)}; known: {', '.join(PARTS)}"
    if not args.dry:
        try:
            import torch
        except ImportError as err:
            return f"cannot import torch ({err})"
        if not torch.cuda.is_available():
            return "no CUDA device here (torch.cuda.is_available() is False); use --dry for the CPU check"
    if resume and not work.is_relative_to(ROOT):
        return (f"--resume needs --work inside the repository (default results/device-check/work), not {work}: "
                "the checkpoints name their partition file by its path there")
    return None


def prepare(args: argparse.Namespace, argv: list[str] | None) -> Check | None:
    """The check the options ask for, its summary.md begun; None (the reason on stderr) where it
    cannot start. --out and --resume are read from the current folder, then the repository root
    becomes it (--raw-dir, --work and --config are relative to the root)."""
    out = Path(args.out).resolve()
    resume = Path(args.resume).resolve() if args.resume else None
    os.chdir(ROOT)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    work = Path(args.work).resolve()
    problem = refusal(args, parts, work, resume)
    if problem:
        print(f"device_check: {problem}", file=sys.stderr)
        return None
    dry = args.dry
    out.mkdir(parents=True, exist_ok=True)
    check = Check(args, parts, out, work, resume, dry, budget=args.budget or (240.0 if dry else 450.0),
                  rounds=args.rounds or (2 if dry else 2000),
                  seeds=args.seeds or ([1] if dry else default_seeds(args.config, args.experiment)),
                  summary=Summary(out, "dry: CPU, tiny sizes" if dry else "CUDA"), env=child_env())
    command = " ".join(["python", "scripts/device_check.py", *(argv if argv is not None else sys.argv[1:])])
    check.summary.header = (f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; budget {check.budget:.0f} s; commit "
                            f"{git_commit()}; `{command}`")
    check.summary.write()
    return check


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return CHILDREN[args.child](args)
    if args.report:
        return report_runs(args)
    check = prepare(args, argv)
    if check is None:
        return 2
    for name in PARTS:  # in their order, whatever the order of --parts
        if name in check.parts:
            PART_RUNNERS[name](check)
            check.summary.write()
    print("\n" + check.summary.path.read_text())
    print(f"device_check: {time.monotonic() - check.start:.0f} s; outputs in {check.out}")
    ran = [p for p in check.summary.parts.values() if p.name in check.parts]
    return 0 if all(p.status in ("ok", "partial", "skipped") for p in ran) else 1


def git_commit() -> str:
    """HEAD (short), and whether tracked files differ from it (a copied working tree may carry a
    stale .git): ``fedmgda.provenance.source_commit``, which imports no torch."""
    from fedmgda.provenance import source_commit

    where = source_commit()
    if where["commit"] is None:
        return "unknown"
    return where["commit"][:7] + (" + changes to tracked files" if where["dirty"] else "")

if __name__ == "__main__":
    sys.exit(main())
