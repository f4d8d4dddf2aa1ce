"""The workflow's helper commands (the Snakemake rules call these):

    fedmgda download   --dataset NAME --raw-dir DIR [--no-download] --done FILE
    fedmgda partition  --dataset NAME --partition P --seed S --options JSON --raw-dir DIR --out FILE
    fedmgda table      --spec JSON|FILE --runs-dir DIR --csv OUT.csv --md OUT.md
    fedmgda figure     --spec JSON|FILE --runs-dir DIR --pdf OUT.pdf --png OUT.png
    fedmgda runs-index --runs-dir DIR --registry JSON|FILE --out OUT.csv
    fedmgda claims     --spec JSON|FILE --runs-dir DIR --csv OUT.csv --md OUT.md [--profile P]
    fedmgda seal       DIR [DIR ...]

``fedmgda.cli`` adds them next to ``train`` through :func:`add_commands`; ``python -m
fedmgda.workflow_cli ...`` runs them without the main CLI. Both print a bad config, run folder or
data file as one line and an exit status, not a traceback (:func:`run_handler`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fedmgda.errors import ConfigError, RunFolderError


def _json_text(text: str) -> str:
    """JSON text given as itself, a JSON file, or ``-`` for standard input (the rules pipe specs in:
    a spec can be longer than the operating system allows one command-line argument to be)."""
    if text == "-":
        return sys.stdin.read()
    p = Path(text)
    if not text.lstrip().startswith(("{", "[")) and p.is_file():
        return p.read_text()
    return text


def _load_spec(text: str, cls):
    """A table / figure spec, or the list of claims, that the rule wrote (fedmgda.specs)."""
    from fedmgda.specs import spec_from_json

    return spec_from_json(_json_text(text), cls)


def cmd_download(args: argparse.Namespace) -> int:
    from fedmgda.data import DATASET_SPECS, ensure_raw_files

    if args.dataset not in DATASET_SPECS:
        print(f"unknown dataset {args.dataset!r}; known: {', '.join(DATASET_SPECS)}",
              file=sys.stderr)
        return 2
    ensure_raw_files(args.dataset, args.raw_dir, allow_download=not args.no_download)
    if args.done:
        Path(args.done).parent.mkdir(parents=True, exist_ok=True)
        Path(args.done).write_text(f"{args.dataset}: raw files present in {args.raw_dir}\n")
    print(f"{args.dataset}: raw files ready under {args.raw_dir}")
    return 0


def cmd_partition(args: argparse.Namespace) -> int:
    from fedmgda.data import make_partition, save_partition

    options = json.loads(args.options) if args.options else {}
    part = make_partition(args.dataset, args.raw_dir, args.partition or None, args.seed, options)
    save_partition(part, args.out)
    print(f"{args.dataset}/{part.scheme} seed {part.seed}: {len(part.train)} users -> {args.out}")
    return 0


def cmd_table(args: argparse.Namespace) -> int:
    from fedmgda.specs import TableSpec
    from fedmgda.tables import write_table

    spec = _load_spec(args.spec, TableSpec)
    df = write_table(spec, args.runs_dir, args.csv, args.md)
    print(f"{spec.name}: {len(df)} rows -> {args.csv}, {args.md}")
    return 0


def cmd_figure(args: argparse.Namespace) -> int:
    from fedmgda.figures import make_figure
    from fedmgda.specs import FigureSpec

    spec = _load_spec(args.spec, FigureSpec)
    make_figure(spec, args.runs_dir, args.pdf, args.png)
    print(f"{spec.name}: {len(spec.rows)} rows -> {args.pdf}, {args.png}")
    return 0


def cmd_runs_index(args: argparse.Namespace) -> int:
    """One line per run: experiments, status, rounds, runtime, device and pack (the report's run
    times, ``fedmgda.report.run_pack``: empty for a run trained alone) and environment stamp (JSON;
    empty for a run trained before stamping, ``fedmgda.provenance``). The registry JSON gives per
    run its experiments, dataset, algorithm, seed and (optional) ``config_hash``."""
    import pandas as pd

    from fedmgda.report import run_pack
    from fedmgda.results import open_run

    registry = json.loads(_json_text(args.registry))
    records = []
    for key, info in registry.items():  # each folder verified against its config hash, when given
        summary = open_run(Path(args.runs_dir) / key, info.get("config_hash")).summary
        records.append({"run": key, "experiments": " ".join(info["experiments"]),
                        "dataset": info["dataset"], "algorithm": info["algorithm"],
                        "seed": info["seed"], "status": summary.get("status"),
                        "rounds_completed": summary.get("rounds_completed"),
                        "runtime_s": summary.get("runtime_s"), "device": summary.get("device"),
                        "pack": run_pack(Path(args.runs_dir) / key),
                        "environment": json.dumps(summary["environment"])
                        if summary.get("environment") else ""})
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame.from_records(records).to_csv(args.out, index=False)
    print(f"{len(records)} runs -> {args.out}")
    return 0


def cmd_seal(args: argparse.Namespace) -> int:
    """Give run folders written before the manifest theirs (``fedmgda.results.seal_verified``):
    each is verified first; the first that fails stops with one line naming it."""
    from fedmgda.results import seal_verified

    for folder in args.folders:
        sealed = seal_verified(folder)
        print(f"{folder}: {'sealed' if sealed else 'has its manifest already'}")
    return 0


def cmd_claims(args: argparse.Namespace) -> int:
    from fedmgda.claims import write_claims
    from fedmgda.specs import ClaimSpec

    claims = _load_spec(args.spec, ClaimSpec)
    df = write_claims(claims, args.runs_dir, args.csv, args.md, args.profile)
    counts = ", ".join(f"{v} {k}" for k, v in df["verdict"].value_counts().items())
    print(f"{len(df)} claims ({counts}) -> {args.csv}, {args.md}")
    return 0


def add_commands(commands) -> None:
    """Register the workflow commands on an ``argparse`` subparsers object."""
    p = commands.add_parser("download", help="check (and fetch) a dataset's raw files")
    p.add_argument("--dataset", required=True)
    p.add_argument("--raw-dir", default="resources/raw")
    p.add_argument("--no-download", action="store_true", help="only check; never fetch")
    p.add_argument("--done", help="marker file written on success")
    p.set_defaults(handler=cmd_download)

    p = commands.add_parser("partition", help="build and save one seeded partition (.npz)")
    p.add_argument("--dataset", required=True)
    p.add_argument("--partition", default="")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--options", default="{}", help="dataset options as JSON")
    p.add_argument("--raw-dir", default="resources/raw")
    p.add_argument("--out", required=True)
    p.set_defaults(handler=cmd_partition)

    p = commands.add_parser("table", help="one paper table from run folders (CSV + markdown)")
    p.add_argument("--spec", required=True,
                   help="table spec (fedmgda.specs.TableSpec) as JSON text, a JSON file or - "
                   "(stdin)")
    p.add_argument("--runs-dir", required=True)
    p.add_argument("--csv", required=True)
    p.add_argument("--md", required=True)
    p.set_defaults(handler=cmd_table)

    p = commands.add_parser("figure", help="one figure panel from run folders (PDF + PNG)")
    p.add_argument("--spec", required=True,
                   help="figure spec (fedmgda.specs.FigureSpec) as JSON text, a JSON file or - "
                   "(stdin)")
    p.add_argument("--runs-dir", required=True)
    p.add_argument("--pdf", required=True)
    p.add_argument("--png", required=True)
    p.set_defaults(handler=cmd_figure)

    p = commands.add_parser("runs-index", help="collect every run's status and run time")
    p.add_argument("--runs-dir", required=True)
    p.add_argument("--registry", required=True, help="JSON {run: {experiments, dataset, ...}}")
    p.add_argument("--out", required=True)
    p.set_defaults(handler=cmd_runs_index)

    p = commands.add_parser("seal", help="verify run folders written before the manifest and give "
                                         "them theirs")
    p.add_argument("folders", nargs="+", metavar="DIR",
                   help="a run folder (summary.json and its result files)")
    p.set_defaults(handler=cmd_seal)

    p = commands.add_parser("claims",
                            help="the paper's claims checked on the runs (CSV + markdown)")
    p.add_argument("--spec", required=True,
                   help="resolved claims (fedmgda.specs.ClaimSpec list) as JSON text, a file or - "
                   "(stdin)")
    p.add_argument("--runs-dir", required=True)
    p.add_argument("--csv", required=True)
    p.add_argument("--md", required=True)
    p.add_argument("--profile", default="")
    p.set_defaults(handler=cmd_claims)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fedmgda.workflow_cli", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_commands(parser.add_subparsers(dest="command", required=True))
    return run_handler(parser.parse_args(argv))


def run_handler(args: argparse.Namespace) -> int:
    """Run a command's handler; a bad config, run folder or data file is one line on stderr and an
    exit status (2: config or run folder, 3: data), not a traceback."""
    try:
        return args.handler(args)
    except ConfigError as err:
        print(f"fedmgda: invalid configuration: {one_line(err)}", file=sys.stderr)
        return 2
    except RunFolderError as err:  # a checkpoint, a lock or a write: the message says what to do
        print(f"fedmgda: {one_line(err)}", file=sys.stderr)
        return 2
    except Exception as err:  # data errors etc.: one clear line, not a traceback
        from fedmgda.data import DataError

        if isinstance(err, DataError):
            print(f"fedmgda: data error: {one_line(err)}", file=sys.stderr)
            return 3
        raise


def one_line(err: Exception) -> str:
    """An error's message on one line (a message quoting another program's output may hold
    several)."""
    return "; ".join(line.strip() for line in str(err).splitlines() if line.strip())


if __name__ == "__main__":
    sys.exit(main())
