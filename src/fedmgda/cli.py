"""Command-line entry point: ``fedmgda train --config RUN.yaml --out DIR`` (several configs and
folders: the runs are trained packed)."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from pathlib import Path

import yaml

from fedmgda.config import RunConfig
from fedmgda.errors import ConfigError
from fedmgda.runfolder import FRESH_ENV, FRESH_OPTION, WAIT_ENV, WAIT_OPTION


def parse_override(text: str) -> tuple[str, object]:
    """``key=value`` with a YAML value, e.g. ``rounds=5`` or ``hparams={eta: 1.5}``."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ConfigError(f"--set expects key=value, got {text!r}")
    return key, yaml.safe_load(value)


def read_run_config(path: str, overrides: list[str], device: str | None) -> RunConfig:
    return read_run_config_text(path, overrides, device)[0]


def read_run_config_text(path: str, overrides: list[str],
                         device: str | None) -> tuple[RunConfig, str, dict]:
    """The run config of ``path`` (``-``: standard input), the text its folder's run.yaml gets
    (the file's own; with ``--set``, the mapping they changed) and that mapping."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
        raw = yaml.safe_load(text)
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"cannot read run config {path}: {err}") from err
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a run config must be a mapping")
    for item in overrides:
        key, value = parse_override(item)
        raw[key] = value
    if overrides:
        text = yaml.safe_dump(raw, sort_keys=True, allow_unicode=True)
    if device:
        raw["device"] = device
    return RunConfig.from_dict(raw), text, raw


class StopSignals:
    """While entered, SIGINT and SIGTERM ask the runs to stop (``Simulation.steps``: each
    checkpoints at the end of its round and leaves) instead of ending the process at once;
    ``signal`` is the first one received (None: none). A signal repeated (a whole process group
    signalled and a wrapper forwarding it too) changes nothing; SIGKILL still ends it at once."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signal: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        for sig in self.SIGNALS:
            self._previous[sig] = signal.signal(sig, self._received)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _received(self, signum: int, frame) -> None:
        if self.signal is None:
            self.signal = signum
            print(f"fedmgda: {signal.Signals(signum).name} received: every run stops at the end "
                  "of its round, with a checkpoint", flush=True)

    def requested(self) -> bool:
        return self.signal is not None


def already_trained(out: str, raw: dict, restore: bool = True) -> str | None:
    """What to say of ``out`` when it holds a finished run of this config (None: it does not): it
    holds no checkpoint (which is resumed from), and a summary.json with its manifest or, where
    that is gone and ``restore`` (the folder is held), the summary's copy it is restored from
    (``fedmgda.results.restore_summary``); the folder passes every reader's check
    (``fedmgda.results.open_run``)."""
    from fedmgda.checkpoints import CHECKPOINT
    from fedmgda.config import config_hash
    from fedmgda.errors import RunFolderError
    from fedmgda.results import MANIFEST, SUMMARY, SUMMARY_COPY, open_run, restore_summary

    if (Path(out) / CHECKPOINT).exists():
        return None
    expected = config_hash(raw)
    if restore and restore_summary(out, expected):
        return (f"{out}: finished before; summary.json restored from {SUMMARY_COPY} (the folder "
                "checked against its manifest); left as it is")
    if not (Path(out) / SUMMARY).is_file():
        return None
    try:
        if MANIFEST not in open_run(out, expected).summary:
            return None
    except RunFolderError:
        return None
    return f"{out}: already trained with this config (summary.json); left as it is"


def finished_elsewhere(args: argparse.Namespace) -> bool:
    """Whether every folder of ``args.out`` holds a finished run of its config (each said); the
    folders are another trainer's: nothing is written into them."""
    raws = [read_run_config_text(path, args.set or [], args.device)[2] for path in args.config]
    said = [already_trained(out, raw, restore=False) for out, raw in zip(args.out, raws)]
    if None in said:
        return False
    print("\n".join(said))
    return True


def check_train_arguments(args: argparse.Namespace) -> None:
    """One folder of its own per run config, standard input named at most once."""
    if len(args.config) != len(args.out):
        raise ConfigError(f"--config names {len(args.config)} run(s) but --out {len(args.out)} "
                          "folder(s)")
    twice = sorted({out for out in args.out if args.out.count(out) > 1})
    if twice:
        raise ConfigError(f"--out names {', '.join(twice)} more than once; each run needs a folder "
                          "of its own")
    if args.config.count("-") > 1:
        raise ConfigError("--config names standard input (-) more than once")


def train(args: argparse.Namespace) -> int:
    from fedmgda.errors import TrainingStopped
    from fedmgda.runfolder import FolderHeld, holding
    from fedmgda.scheduler import run_packed
    from fedmgda.simulator import Simulation

    check_train_arguments(args)
    stop = StopSignals()
    wait_while = (lambda: not stop.requested()) if args.wait_for_lock else None
    # one trainer per run folder, before any config or data is read (fedmgda.runfolder)
    with stop, contextlib.ExitStack() as held:
        try:
            held.enter_context(holding(args.out, wait_while=wait_while))
        except FolderHeld:
            # stopped while waiting: runs the other trainer finished meanwhile are left as they
            # are, and if that is all of them this ends well (a Snakemake job then succeeds, so
            # its cleanup of a failed job removes none of their files)
            if not (stop.requested() and finished_elsewhere(args)):
                raise
            return 0
        todo = []
        for path, out in zip(args.config, args.out):
            cfg, text, raw = read_run_config_text(path, args.set or [], args.device)
            said = already_trained(out, raw)
            if said:  # its files are left as they are
                print(said)
                continue
            todo.append((cfg, text, out))
        sims = []
        for cfg, text, _ in todo:
            sims.append(Simulation(cfg))
            sims[-1].config_text = text
        try:
            results = [] if not sims else run_packed(
                sims, [out for _, _, out in todo], progress_every=args.progress_every,
                fresh_if_unreadable=args.fresh_if_unreadable, should_stop=stop.requested)
        except TrainingStopped as stopped:
            name = signal.Signals(stop.signal).name
            for out, done in stopped.runs:
                print(f"{out}: stopped by {name} after round {done}; rerun the same command to "
                      "resume from its checkpoint")
            return 128 + stop.signal
    for (_, _, out), result in zip(todo, results):
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
                   help="run config (YAML; -: standard input): see fedmgda.config.RunConfig; "
                   "several: trained packed, in lockstep; each folder gets it as run.yaml")
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
    p.add_argument(WAIT_OPTION, action="store_true",
                   default=os.environ.get(WAIT_ENV, "").strip() not in ("", "0"),
                   help="a run folder another trainer writes is waited for (then a run it "
                        "finished is left as it is, one it left is resumed) instead of refused "
                        f"(default: set by {WAIT_ENV}=1, as the workflow's training jobs run it)")
    p.set_defaults(handler=train)
    from fedmgda.workflow_cli import add_commands  # the workflow's download, partition, table, ...

    add_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """``fedmgda ...``; a bad config, run folder or data file is one line and an exit status."""
    from fedmgda.workflow_cli import run_handler

    return run_handler(build_parser().parse_args(argv))
