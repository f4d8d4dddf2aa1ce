"""A cluster job's start: a job of training, partition or download jobs reads its own runs from the
plan the main process wrote (fedmgda.jobplan) instead of the whole registry, and makes the files
the main process's own jobs make; a job the plan does not describe reads the registry."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from fedmgda.experiments import coerce_overrides, expand
from fedmgda.jobplan import job_scope, plan_path, target_jobs, write_registry_plan
from fedmgda.packs import pack_rule_name
from fedmgda.schema import with_defaults

from .conftest import REPO, copy_workflow

RUN_FILES = ("run.yaml", "metrics.csv", "per_user.csv", "per_user_final.csv")


def tiny_config(pack: int) -> dict:
    """config/test.yaml (four runs) with ``pack`` runs a job, as the Snakefile completes it."""
    config = yaml.safe_load((REPO / "config" / "test.yaml").read_text())
    config["resources"]["default"]["pack"] = pack
    coerce_overrides(config)
    config.update(with_defaults(config))
    return config


def main_plan(config: dict, workdir: Path) -> tuple:
    """The plan the main process writes before it submits jobs (workflow/rules/common.smk,
    onstart), in ``workdir``: (registry, packs)."""
    registry = expand(config)
    return registry, write_registry_plan(workdir / plan_path(config), registry)


def test_the_plan_gives_each_job_its_own_registry_entries(tmp_path):
    registry, packs = main_plan(tiny_config(pack=2), tmp_path)
    path = next((tmp_path / ".snakemake" / "fedmgda-plans").glob("*.sqlite"))
    assert oct(path.stat().st_mode & 0o777) == oct(0o666 & ~_umask())
    key = sorted(registry.runs)[0]
    part = registry.runs[key].partition
    scope = job_scope(path, [("train", {"run": key})])
    assert scope.runs == {key: registry.runs[key]}
    assert scope.partitions == {part: registry.partitions[part]} and scope.packs == {}
    assert len(packs) == 2
    for pack, members in packs.items():
        scope = job_scope(path, [(pack_rule_name(pack), {})])
        assert scope.packs == {pack: members}
        assert scope.runs == {k: registry.runs[k] for k in members}
    scope = job_scope(path, [("partition", {"part": part}), ("download", {"dataset": "x"})])
    assert scope.runs == {} and scope.partitions == {part: registry.partitions[part]}
    # any other job, or one the plan lacks: None, the job reads the whole registry
    for targets in ([("table_tiny", {})], [("train", {"run": "no/such/run"})],
                    [("train_pack_unknown", {})], [("train", {"run": key}), ("report_html", {})],
                    []):
        assert job_scope(path, targets) is None, targets
    assert job_scope(tmp_path / "missing.sqlite", [("train", {"run": key})]) is None
    (tmp_path / "broken.sqlite").write_text("not a database")
    assert job_scope(tmp_path / "broken.sqlite", [("train", {"run": key})]) is None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_job_reads_its_targets_from_the_command_line_as_snakemake_does():
    argv = ["snakemake", "--target-jobs", "train:run=a/b/c/d/seed1", "train_pack_x:",
            "--mode", "remote", "--cores", "1"]
    assert target_jobs(argv) == [("train", {"run": "a/b/c/d/seed1"}), ("train_pack_x", {})]
    assert target_jobs(["snakemake", "--target-jobs=partition:part=d/seed2"]) == [
        ("partition", {"part": "d/seed2"})]
    assert target_jobs(["snakemake", "--cores", "1"]) == []


def snakemake(wd: Path, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", *args], cwd=wd,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return proc.stdout + proc.stderr


def as_cluster_job(wd: Path, target: str) -> str:
    """Snakemake started as a cluster job starts it (snakemake.spawn_jobs: --mode remote, the
    target job, --force, the main process's config file)."""
    return snakemake(wd, "--mode", "remote", "--target-jobs", target, "--force", "--nolock",
                     "--configfiles", "config/jobplan.yaml")


def test_cluster_jobs_read_from_the_plan_make_the_files_of_the_main_process(tmp_path):
    config = tiny_config(pack=2)
    main, job = copy_workflow(tmp_path / "main"), copy_workflow(tmp_path / "job")
    for wd in (main, job):
        (wd / "config" / "jobplan.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    registry, packs = main_plan(config, job)
    pack, members = sorted(packs.items())[0]
    summaries = [f"results/test/runs/{k}/summary.json" for k in members]
    snakemake(main, *summaries, "--configfile", "config/jobplan.yaml")

    notices = []
    for part in sorted({registry.runs[k].partition for k in members}):
        notices.append(as_cluster_job(job, f"partition:part={part}"))
    notices.append(as_cluster_job(job, f"{pack_rule_name(pack)}:"))
    assert all(" from the jobs' plan .snakemake/fedmgda-plans/" in n for n in notices)
    assert f"this job reads {len(members)} runs and " in notices[-1]
    for key in members:
        for name in RUN_FILES:
            made = (job / "results/test/runs" / key / name).read_bytes()
            assert made == (main / "results/test/runs" / key / name).read_bytes(), (key, name)

    # a job of a run outside any pack (`pack: 1`), and without a plan: the whole registry
    single = tiny_config(pack=1)
    (job / "config" / "jobplan.yaml").write_text(yaml.safe_dump(single, sort_keys=False))
    key = sorted(set(registry.runs) - set(members))[0]
    without_plan = as_cluster_job(job, f"train:run={key}")
    assert "jobs' plan" not in without_plan
    main_plan(single, job)
    (job / "results/test/runs" / key).rename(job / "first")
    with_plan = as_cluster_job(job, f"train:run={key}")
    assert "this job reads 1 run and 1 partition from the jobs' plan" in with_plan
    for name in RUN_FILES:
        assert (job / "results/test/runs" / key / name).read_bytes() == (
            job / "first" / name).read_bytes(), name
