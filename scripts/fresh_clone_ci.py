"""``.ci/run`` in a fresh clone of a commit, as CI runs it, and its times into
benchmarks/measurements/test_runs.csv, which docs/running.md renders (``make docs``).

    python scripts/fresh_clone_ci.py [--rev HEAD] [--conditions TEXT]   # make fresh-clone-ci

The clone lies in a temporary folder with the shared folder linked beside it as ``shared`` (CI's
layout: the repository's ``../shared``); ``.ci/run`` sets up its own ``.venv`` from the lock, so the
total includes the setup. Its log streams to stdout. A run that passes adds one row: the commit,
the date, each pytest session's counts and time (``make test`` runs two: every test but the SLURM
ones, then those), the total, the machine (cores and CPU model), and the conditions: the load
average when it started, then ``--conditions`` (what else shared the machine). A run that fails
adds nothing, keeps its log and says where; the clone is deleted either way. Only committed files
are cloned: uncommitted changes are reported and left out.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "benchmarks" / "measurements" / "test_runs.csv"
COLUMNS = ["commit", "date", "passed", "skipped", "pytest", "slurm_passed", "slurm", "ci_total", "machine",
           "conditions"]
# pytest's closing line, in -q mode or between '=' rules: "1 failed, 970 passed, 20 skipped in 686.54s (0:11:26)"
OUTCOMES = {"passed", "failed", "skipped", "error", "errors", "xfailed", "xpassed", "deselected"}
SUMMARY_RE = re.compile(r"^=*\s*(?P<counts>(?:\d+ \w+(?:, )?)+|no tests ran) in (?P<seconds>[\d.]+)s\b.*$", re.M)


def pytest_sessions(log: str) -> list[dict[str, float]]:
    """Each pytest session's closing line in ``log``, in order: its counts by outcome ("passed",
    "skipped", "failed", ...) and its ``seconds``."""
    sessions = []
    for m in SUMMARY_RE.finditer(log):
        counts = {word: float(n) for n, word in re.findall(r"(\d+) (\w+)", m["counts"])}
        if counts.keys() & OUTCOMES or m["counts"] == "no tests ran":  # not some other "N things in Xs"
            sessions.append(counts | {"seconds": float(m["seconds"])})
    return sessions


def duration(seconds: float) -> str:
    """``seconds`` as the measurement files write a wall time: '36 s', '11 min 29 s', '1 h 2 min 3 s'."""
    s = round(seconds)
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    parts = ([f"{h} h"] if h else []) + ([f"{m} min"] if h or m else []) + [f"{s} s"]
    return " ".join(parts)


def machine() -> str:
    from fedmgda.provenance import cpu_model

    return f"{len(os.sched_getaffinity(0))} cores, {cpu_model()}"


def record_row(commit: str, sessions: list[dict[str, float]], total: float, conditions: str) -> dict[str, str]:
    """The test_runs.csv row of a passed run: ``sessions`` as :func:`pytest_sessions` reads them."""
    def count(session: dict, outcome: str) -> str:
        return str(int(session.get(outcome, 0)))

    main, slurm = sessions[0], sessions[1] if len(sessions) > 1 else None
    return {"commit": commit, "date": datetime.date.today().isoformat(),
            "passed": count(main, "passed"), "skipped": count(main, "skipped"),
            "pytest": duration(main["seconds"]),
            "slurm_passed": count(slurm, "passed") if slurm else "",
            "slurm": duration(slurm["seconds"]) if slurm else "",
            "ci_total": duration(total), "machine": machine(), "conditions": conditions}


def append_row(path: Path, row: dict[str, str]) -> None:
    with open(path, newline="", encoding="utf-8") as fh:
        header = next(csv.reader(fh))
    if header != COLUMNS:
        raise SystemExit(f"{path}: columns {header}, expected {COLUMNS}")
    with open(path, "a", newline="", encoding="utf-8") as fh:
        csv.DictWriter(fh, COLUMNS, lineterminator="\n").writerow(row)


def run_ci(repo: Path, rev: str, shared: Path) -> tuple[int, str, float]:
    """(exit status, log, seconds) of ``.ci/run`` in a fresh clone of ``repo`` at ``rev``."""
    work = Path(tempfile.mkdtemp(prefix="fresh-clone-ci-"))
    try:
        subprocess.run(["git", "clone", "-q", str(repo), str(work / "repo")], check=True)
        subprocess.run(["git", "-C", str(work / "repo"), "checkout", "-q", rev], check=True)
        if shared.is_dir():
            (work / "shared").symlink_to(shared.resolve())
        start, lines = time.monotonic(), []
        with subprocess.Popen(["bash", ".ci/run"], cwd=work / "repo", stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) as proc:
            for line in proc.stdout:
                sys.stdout.write(line)
                lines.append(line)
        seconds = time.monotonic() - start
        return proc.returncode, "".join(lines), seconds
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", default="HEAD", help="the commit to clone (default HEAD)")
    parser.add_argument("--repo", type=Path, default=ROOT, help=argparse.SUPPRESS)
    parser.add_argument("--shared", type=Path, help="the shared folder CI has beside the clone "
                        "(default: the repository's ../shared)")
    parser.add_argument("--record", type=Path, default=RECORD, help="the csv a passed run is added to")
    parser.add_argument("--conditions", default="", help="what else ran on the machine meanwhile")
    args = parser.parse_args(argv)
    git = ["git", "-C", str(args.repo)]
    commit = subprocess.run(git + ["rev-parse", "--short=7", args.rev], check=True, capture_output=True,
                            text=True).stdout.strip()
    if subprocess.run(git + ["status", "--porcelain", "--untracked-files=no"], capture_output=True,
                      text=True).stdout.strip():
        print(f"[fresh-clone-ci] uncommitted changes are not in the clone of {commit}", file=sys.stderr)
    load = os.getloadavg()[0]
    rc, log, seconds = run_ci(args.repo, commit, args.shared or args.repo.resolve().parent / "shared")
    sessions = pytest_sessions(log)
    if rc != 0 or not sessions:
        log_path = Path(tempfile.gettempdir()) / f"fresh-clone-ci-{commit}.log"
        log_path.write_text(log)
        print(f"[fresh-clone-ci] .ci/run of {commit} exited {rc} after {duration(seconds)}; nothing recorded; "
              f"its log: {log_path}", file=sys.stderr)
        return rc or 1
    conditions = "; ".join(filter(None, [f"load average {load:.1f} at the start", args.conditions]))
    row = record_row(commit, sessions, seconds, conditions)
    append_row(args.record, row)
    print(f"[fresh-clone-ci] {commit}: {row['passed']} + {row['slurm_passed'] or 0} tests passed, "
          f"{row['ci_total']} in all; added to {args.record} (make docs renders it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
