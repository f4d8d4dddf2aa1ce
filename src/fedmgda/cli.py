"""Command-line entry point: ``fedmgda train --config RUN.yaml --out DIR``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from fedmgda.config import ConfigError, RunConfig


def parse_override(text: str) -> tuple[str, object]:
    """``key=value`` with a YAML value, e.g. ``rounds=5`` or ``hparams={eta: 1.5}``."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ConfigError(f"--set expects key=value, got {text!r}")
    return key, yaml.safe_load(value)


def train(args: argparse.Namespace) -> int:
    from fedmgda.simulator import run

    try:
        raw = yaml.safe_load(Path(args.config).read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"cannot read run config {args.config}: {err}") from err
    if not isinstance(raw, dict):
        raise ConfigError(f"{args.config}: a run config must be a mapping")
    for text in args.set or []:
        key, value = parse_override(text)
        raw[key] = value
    if args.device:
        raw["device"] = args.device
    cfg = RunConfig.from_dict(raw)
    result = run(cfg, args.out)
    summary = result.summary
    final = summary["final"] or {}
    if summary["status"] == "diverged":
        print(f"diverged at round {summary['diverged_round']} (recorded in {args.out}/summary.json)")
    else:
        print(f"done: {summary['rounds_completed']} rounds in {summary['runtime_s']:.1f} s on {summary['device']}; "
              f"mean user accuracy {100 * final['mean_acc']:.2f} %")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fedmgda", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("train", help="train one run and write metrics.csv, per_user.csv, summary.json")
    p.add_argument("--config", required=True, help="run config (YAML): see fedmgda.config.RunConfig")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key (repeatable)")
    p.add_argument("--device", help="cpu, cuda, cuda:N or auto (overrides the config)")
    p.set_defaults(handler=train)
    from fedmgda.workflow_cli import add_commands  # the workflow's download, partition, table, ...

    add_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except ConfigError as err:
        print(f"fedmgda: invalid configuration: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # data errors etc.: one clear line, not a traceback
        from fedmgda.data import DataError

        if isinstance(err, DataError):
            print(f"fedmgda: data error: {err}", file=sys.stderr)
            return 3
        raise
