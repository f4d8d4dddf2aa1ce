"""Command-line entry point: ``fedmgda train --config RUN.yaml --out DIR`` (several configs and
folders: the runs are trained packed)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import yaml

from fedmgda.config import RunConfig
from fedmgda.errors import ConfigError
from fedmgda.runfolder import FRESH_ENV, FRESH_OPTION


def parse_override(text: str) -> tuple[str, object]:
    """``key=value`` with a YAML value, e.g. ``rounds=5`` or ``hparams={eta: 1.5}``."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ConfigError(f"--set expects key=value, got {text!r}")
    return key, yaml.safe_load(value)


def read_run_config(path: str, overrides: list[str], device: str | None) -> RunConfig:
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"cannot read run config {path}: {err}") from err
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a run config must be a mapping")
    for text in overrides:
        key, value = parse_override(text)
        raw[key] = value
    if device:
        raw["device"] = device
    return RunConfig.from_dict(raw)


def train(args: argparse.Namespace) -> int:
    from fedmgda.runfolder import holding
    from fedmgda.scheduler import run_packed
    from fedmgda.simulator import Simulation

    if len(args.config) != len(args.out):
        raise ConfigError(f"--config names {len(args.config)} run(s) but --out {len(args.out)} "
                          "folder(s)")
    twice = sorted({out for out in args.out if args.out.count(out) > 1})
    if twice:
        raise ConfigError(f"--out names {', '.join(twice)} more than once; each run needs a folder "
                          "of its own")
    configs = [read_run_config(path, args.set or [], args.device) for path in args.config]
    # one trainer per run folder, before any data is loaded (fedmgda.runfolder)
    with holding(args.out):
        results = run_packed([Simulation(cfg) for cfg in configs], args.out,
                             progress_every=args.progress_every,
                             # one run, or several packed
                             fresh_if_unreadable=args.fresh_if_unreadable)
    for out, result in zip(args.out, results):
        summary = result.summary
        final = summary["final"] or {}
        if summary["status"] == "failed":
            print(f"{out}: failed at round {summary['failed_round']}: {summary['error']} (recorded "
                  f"in {out}/summary.json)")
        elif summary["status"] == "diverged":
            print(f"{out}: diverged at round {summary['diverged_round']} "
                  f"({summary['diverged_because']}; "
                  f"recorded in {out}/summary.json)")
        else:
            dropped = int(result.metrics["dropped"].sum())
            note = (f"; {dropped} participant reports left out as not finite (metrics.csv)"
                    if dropped else "")
            print(f"{out}: done, {summary['rounds_completed']} rounds in "
                  f"{summary['runtime_s']:.1f} s on {summary['device']}; "
                  f"mean user accuracy {100 * final['mean_acc']:.2f} %{note}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fedmgda", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("train",
                            help="train a run and write metrics.csv, per_user.csv, summary.json; "
                            "several runs are packed")
    p.add_argument("--config", required=True, nargs="+",
                   help="run config (YAML): see fedmgda.config.RunConfig; several: trained packed, "
                   "in lockstep")
    p.add_argument("--out", required=True, nargs="+", help="output folder, one per config")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config key (repeatable)")
    p.add_argument("--device", help="cpu, cuda, cuda:N or auto (overrides the config)")
    p.add_argument("--progress-every", type=float, default=30.0, metavar="SECONDS",
                   help="print a progress line (round, s/round, ETA, mean user accuracy) at most "
                   "this often, and after the first and last rounds (default 30; 0: every round)")
    p.add_argument(FRESH_OPTION, action="store_true",
                   default=os.environ.get(FRESH_ENV, "").strip() not in ("", "0"),
                   help="a checkpoint a run cannot resume from (unreadable, of another config) is "
                        "renamed <file>.unreadable and the run restarts from round 0, said in its "
                        "log; without it, such a file stops the run (default: set by "
                   f"{FRESH_ENV}=1, e.g. for the training jobs of a Snakemake run)")
    p.set_defaults(handler=train)
    from fedmgda.workflow_cli import add_commands  # the workflow's download, partition, table, ...

    add_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """``fedmgda ...``; a bad config, run folder or data file is one line and an exit status."""
    from fedmgda.workflow_cli import run_handler

    return run_handler(build_parser().parse_args(argv))
