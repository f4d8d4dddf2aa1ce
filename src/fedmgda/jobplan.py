"""The plan a cluster job reads instead of the whole registry.

On a cluster every job starts Snakemake again, which reads the Snakefile: expanding the registry,
serialising every run config and defining a rule per pack would cost each job time that grows with
the grid. So the main Snakemake process, before it submits a job to a non-local executor
(``onstart``), writes what the training, partition and download jobs need into one SQLite file:
each run's spec, each partition's description and each pack rule's runs. A job whose targets are
only such jobs (``--target-jobs``) reads its own rows from it (:func:`job_scope`), so its start
costs the same whatever the grid's size; any other job, or a job that finds no plan, reads the
whole registry as before.

The file is named by the digest of the config (:func:`config_digest`: a job gets the main
process's config files and ``--config``), written to a temporary file and renamed, and rewritten by
every run that submits jobs: its pack rules are those of that run's plan (a pack leaves out the
runs trained before the run). Nothing here imports torch.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fedmgda.experiments import Registry, RunSpec
from fedmgda.packs import assign_packs, pack_rule_name
from fedmgda.runfolder import temporary_file

# beside Snakemake's own metadata, in the working directory every job shares
PLAN_DIR = ".snakemake/fedmgda-plans"
# the rules a plan describes; the others' jobs read the registry
TRAIN_RULE, PARTITION_RULE, DOWNLOAD_RULE = "train", "partition", "download"


def config_digest(config: Mapping[str, Any]) -> str:
    """The sha256 of the config as canonical JSON: the same config files and ``--config`` give the
    same digest in the main process and in every job."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def plan_path(config: Mapping[str, Any], plan_dir: str | Path = PLAN_DIR) -> Path:
    return Path(plan_dir) / f"{config_digest(config)}.sqlite"


def write_plan(path: str | Path, runs: Mapping[str, RunSpec],
               partitions: Mapping[str, Mapping[str, Any]],
               packs: Mapping[str, list[str]]) -> None:
    """The plan of ``runs`` ({key: spec}), ``partitions`` ({key: description}) and ``packs``
    ({pack name: its run keys}; :func:`fedmgda.packs.assign_packs`), written to a temporary file
    beside ``path`` and renamed onto it, so a job reads the old plan or the new one, not a part."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_file(path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        with sqlite3.connect(tmp) as db:
            db.execute("CREATE TABLE runs (key TEXT PRIMARY KEY, spec TEXT NOT NULL)")
            db.execute("CREATE TABLE partitions (key TEXT PRIMARY KEY, info TEXT NOT NULL)")
            db.execute("CREATE TABLE packs (rule TEXT PRIMARY KEY, pack TEXT NOT NULL, "
                       "runs TEXT NOT NULL)")
            db.executemany("INSERT INTO runs VALUES (?, ?)",
                           ((k, json.dumps(asdict(s))) for k, s in runs.items()))
            db.executemany("INSERT INTO partitions VALUES (?, ?)",
                           ((k, json.dumps(dict(v))) for k, v in partitions.items()))
            db.executemany("INSERT INTO packs VALUES (?, ?, ?)",
                           ((pack_rule_name(pack), pack, json.dumps(list(keys)))
                            for pack, keys in packs.items()))
        db.close()
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_registry_plan(path: str | Path, registry: Registry,
                        packs: Mapping[str, list[str]] | None = None) -> dict[str, list[str]]:
    """The plan of ``registry``'s runs and partitions with ``packs`` (by default
    ``assign_packs(registry.runs)``: no run trained yet), written to ``path`` (:func:`write_plan`);
    returns the packs."""
    packs = assign_packs(registry.runs) if packs is None else dict(packs)
    write_plan(path, registry.runs, registry.partitions, packs)
    return packs


def target_jobs(argv: list[str]) -> list[tuple[str, dict[str, str]]]:
    """The jobs ``--target-jobs`` names on Snakemake's command line ``argv`` ((rule, wildcards),
    parsed as Snakemake parses them), the way a cluster job is started; empty without it. (The
    Snakefile is read before Snakemake's settings reach the workflow, so its command line is
    where a job learns its targets while the Snakefile is read.)"""
    from snakemake.target_jobs import parse_target_jobs_cli_args

    values: list[str] = []
    for i, arg in enumerate(argv):
        if arg == "--target-jobs":
            values += list(_option_values(argv[i + 1:]))
        elif arg.startswith("--target-jobs="):
            values.append(arg.split("=", 1)[1])
    try:
        return [(t.rulename, dict(t.wildcards_dict)) for t in parse_target_jobs_cli_args(values)]
    except Exception:  # a form Snakemake would refuse: no scope, the whole registry
        return []


def _option_values(args: list[str]) -> Iterable[str]:
    for arg in args:
        if arg.startswith("-"):
            return
        yield arg


@dataclass
class JobScope:
    """What the targeted jobs need: their runs, partitions and packs (pack name -> run keys)."""

    runs: dict[str, RunSpec]
    partitions: dict[str, dict[str, Any]]
    packs: dict[str, list[str]]


def job_scope(path: str | Path,
              targets: Iterable[tuple[str, Mapping[str, str]]]) -> JobScope | None:
    """The scope of the jobs ``targets`` ((rule name, wildcards) of ``--target-jobs``) read from
    the plan at ``path``; None when a target is a job of another rule, the plan is missing or
    unreadable, or it lacks a target (then the job reads the whole registry)."""
    targets = list(targets)
    if not targets or not Path(path).is_file():
        return None
    runs: dict[str, RunSpec] = {}
    partitions: dict[str, dict[str, Any]] = {}
    packs: dict[str, list[str]] = {}
    try:
        db = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro&immutable=1", uri=True)
    except sqlite3.Error:
        return None
    try:
        def one(table: str, column: str, key_column: str, key: str) -> Any:
            row = db.execute(f"SELECT {column} FROM {table} WHERE {key_column} = ?",
                             (key,)).fetchone()
            return None if row is None else json.loads(row[0])

        def pack(rule: str) -> tuple[str, list[str]] | None:
            row = db.execute("SELECT pack, runs FROM packs WHERE rule = ?", (rule,)).fetchone()
            return None if row is None else (row[0], json.loads(row[1]))

        def add_run(key: str) -> bool:
            spec = one("runs", "spec", "key", key)
            if spec is None:
                return False
            runs[key] = RunSpec(**spec)
            if runs[key].partition is not None:
                part = runs[key].partition
                info = one("partitions", "info", "key", part)
                if info is None:
                    return False
                partitions[part] = info
            return True

        for rule, wildcards in targets:
            if rule == TRAIN_RULE and set(wildcards) == {"run"}:
                if not add_run(wildcards["run"]):
                    return None
            elif rule == PARTITION_RULE and set(wildcards) == {"part"}:
                info = one("partitions", "info", "key", wildcards["part"])
                if info is None:
                    return None
                partitions[wildcards["part"]] = info
            elif rule == DOWNLOAD_RULE:
                continue
            else:
                found = None if wildcards else pack(rule)
                if found is None or not all(add_run(k) for k in found[1]):
                    return None
                packs[found[0]] = found[1]
    except (sqlite3.Error, json.JSONDecodeError, TypeError):
        return None
    finally:
        db.close()
    return JobScope(runs, partitions, packs)
