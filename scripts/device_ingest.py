"""A device check's output into the repository, the steps the GPU sessions took by hand
(docs/performance.md, "Device check").

    python scripts/device_ingest.py OUT NAME        # make device-ingest FROM=OUT NAME=h200_device-check_2026-11-28

1. OUT's files (what ``make device-check OUT=...`` wrote: summary.md, bench_rounds.txt,
   round_times_rows.csv, ...) are copied to benchmarks/measurements/NAME/; an existing NAME is
   refused, so no committed measurement is overwritten, and so is a dry run's output.
2. Its ``round_times_rows.csv`` is merged into src/fedmgda/reference/round_times.csv, each row's
   source the committed ``NAME/bench_rounds.txt``. A setting measured anew on a device replaces
   that setting's committed rows on that device (the same ``also``): the plan never mixes two
   checks' pack sizes of one setting. The other rows stay.
3. The files rendered from round times are made again by their commands: the plans on one and two
   GPUs (benchmarks/measurements/plan_cores16_gpus{1,2}.txt) and the work floor (paper_flops.txt).
4. NAME/README.md, where absent, lists the files and repeats the summary's table: the session
   adds what it read in them. Then ``make docs`` renders the pages from the new files.
"""

from __future__ import annotations

import argparse
import csv
import io
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEASUREMENTS = "benchmarks/measurements"
ROUND_TIMES = "src/fedmgda/reference/round_times.csv"
ROWS = "round_times_rows.csv"  # scripts/device_check.py's ROUND_TIME_ROWS
# each file rendered from the round times, and the command that prints it
REMADE = {f"{MEASUREMENTS}/plan_cores16_gpus{gpus}.txt": f"benchmarks/bench_rounds.py --plan --cores 16 --gpus {gpus}" for gpus in (1, 2)}
REMADE[f"{MEASUREMENTS}/paper_flops.txt"] = "benchmarks/bench_rounds.py --flops"


def merge_rows(committed: str, measured: str, source: str) -> tuple[str, int, int]:
    """round_times.csv's text with the ``measured`` rows (a device check's CSV) in, their source
    ``source``: (the new text, rows replaced, rows added). A (setting, device, also) measured
    replaces all committed rows of it; the column order is the committed file's."""
    # rows as text (not fedmgda.devices.RoundTime): the rows kept stay as committed, digit for digit
    reader = csv.DictReader(io.StringIO(committed))
    old, fields = list(reader), list(reader.fieldnames or [])
    new = list(csv.DictReader(io.StringIO(measured)))
    if not new:
        raise ValueError(f"{ROWS} holds no rows: nothing was measured")
    missing = set(fields) - set(new[0]) - {"also"}
    if missing:
        raise ValueError(f"{ROWS} lacks the columns {sorted(missing)} of {ROUND_TIMES}")

    def group(row: dict) -> tuple[str, str, str]:
        return row["setting"], row["device"], row.get("also") or ""

    measured_groups = {group(row) for row in new}
    kept = [row for row in old if group(row) not in measured_groups]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    writer.writerows(kept)
    writer.writerows({**row, "also": row.get("also") or "", "source": source} for row in new)
    return out.getvalue(), len(old) - len(kept), len(new)


def copy_outputs(out: Path, target: Path) -> list[str]:
    """OUT's files (its top level, as the device check writes them) into ``target``, a new folder."""
    if target.exists():
        raise FileExistsError(f"{target} exists: choose another NAME (a committed measurement is never overwritten)")
    files = sorted(p for p in out.iterdir() if p.is_file())
    if not any(p.name == "summary.md" for p in files):
        raise FileNotFoundError(f"{out} has no summary.md: not a device check's output folder")
    if (out / "summary.md").read_text().startswith("# Device check (dry"):
        raise ValueError(f"{out} is a dry run's output (CPU, tiny sizes): not a measurement to commit")
    target.mkdir(parents=True)
    for path in files:
        shutil.copy2(path, target / path.name)
    return [p.name for p in files]


def remake(root: Path, run=subprocess.run) -> list[str]:
    """Each file of ``REMADE`` made again by its command, run in ``root`` (``$ python <command>``
    then the output, as the tests compare them). Returns the files changed."""
    changed = []
    for name, command in REMADE.items():
        proc = run([sys.executable, *command.split()], cwd=root, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"{command} failed:\n{proc.stderr[-2000:]}")
        text = f"$ python {command}\n{proc.stdout}"
        path = root / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            changed.append(name)
    return changed


def readme(target: Path, files: list[str]) -> None:
    """``target``/README.md unless present: the files and the summary's table of parts."""
    path = target / "README.md"
    if path.exists():
        return
    summary = (target / "summary.md").read_text()
    table = "\n".join(line for line in summary.splitlines() if line.startswith("|"))
    listed = "\n".join(f"- `{name}`" for name in files)
    path.write_text(f"# {target.name}\n\nThe device check's output (`scripts/device_ingest.py` copied it here; its round times "
                    f"are rows of {ROUND_TIMES} with this folder's bench_rounds.txt as their source). How to run and read "
                    f"it: docs/performance.md, \"Device check\".\n\n{table}\n\nFiles:\n\n{listed}\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the device check's output folder")
    parser.add_argument("name", help=f"the folder under {MEASUREMENTS}/, e.g. h200_device-check_2026-11-28")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this one)")
    parser.add_argument("--no-remake", action="store_true", help="leave the plan and work-floor files as they are")
    args = parser.parse_args(argv)
    target = args.root / MEASUREMENTS / args.name
    rows = args.out / ROWS
    measured = rows.read_text() if rows.is_file() else None
    files = copy_outputs(args.out, target)
    print(f"device_ingest: {len(files)} files into {target.relative_to(args.root)}")
    if measured is None:
        print(f"device_ingest: no {ROWS} (part 3 measured nothing): round times unchanged")
    else:
        table = args.root / ROUND_TIMES
        text, replaced, added = merge_rows(table.read_text(), measured, f"{MEASUREMENTS}/{args.name}/bench_rounds.txt")
        table.write_text(text)
        print(f"device_ingest: {ROUND_TIMES}: rows added {added}, replaced {replaced}")
        if not args.no_remake:
            for name in remake(args.root):
                print(f"device_ingest: {name} made again")
    readme(target, files)
    print("device_ingest: now read the files, add what they show to the README, and run make docs")


if __name__ == "__main__":
    main()
