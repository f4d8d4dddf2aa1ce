"""Planning a registry (the dry run): the train rule without a constraint naming its runs plans the
same jobs as with the alternation of every run key it makes (config/test.yaml, config/quick.yaml
packed and with `pack: 1`); run.yaml texts are those of yaml.safe_dump on every registry of
config/; a registry above the planning limit is refused in one line, a large one announced."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fedmgda.experiments import coerce_overrides, expand
from fedmgda.packs import run_yaml_text
from fedmgda.schema import with_defaults

from .conftest import REPO, copy_workflow

TRAIN_RULE = "rule train:\n    input:\n"
KEYS_CONSTRAINT = ("rule train:\n    wildcard_constraints:\n"
                   '        run="|".join(re.escape(k) for k in SINGLE_RUNS) or "(?!)",\n'
                   "    input:\n")


def dry_run(wd: Path, *configfiles: str) -> str:
    """The dry run's output; an argument after the config files that starts with -- is an option."""
    options = [a for a in configfiles if a.startswith("--")]
    configfiles = tuple(a for a in configfiles if not a.startswith("--"))
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--forceall", "--cores", "1",
                           *options, "--configfile", *configfiles], cwd=wd, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return proc.stdout


def job_list(dry_run_output: str) -> list[tuple[str, str, str]]:
    """(rule, output, wildcards) of every job a dry run lists, sorted."""
    jobs: list[list[str]] = []
    for line in dry_run_output.splitlines():
        rule = re.match(r"^(?:local)?(?:rule|checkpoint) (\S+):$", line)
        if rule:
            jobs.append([rule.group(1), "", ""])
            continue
        field = re.match(r"^    (output|wildcards): (.*)$", line)
        if field and jobs:
            jobs[-1][1 if field.group(1) == "output" else 2] = field.group(2)
    return sorted(tuple(job) for job in jobs)


@pytest.mark.parametrize("configfiles, overlay", [
    (["config/test.yaml"], None),
    (["config/quick.yaml"], None),
    (["config/quick.yaml", "pack1.yaml"], {"resources": {"default": {"pack": 1}}}),
], ids=["test", "quick", "quick-pack1"])
def test_the_train_rule_plans_the_jobs_of_a_constraint_on_its_runs(tmp_path, configfiles,
                                                                    overlay):
    new, old = copy_workflow(tmp_path / "new"), copy_workflow(tmp_path / "old")
    train_smk = old / "workflow" / "rules" / "train.smk"
    text = train_smk.read_text()
    assert TRAIN_RULE in text
    train_smk.write_text(text.replace(TRAIN_RULE, KEYS_CONSTRAINT))
    for wd in (new, old):
        if overlay:
            (wd / "pack1.yaml").write_text(yaml.safe_dump(overlay))
    jobs = job_list(dry_run(new, *configfiles))
    assert jobs == job_list(dry_run(old, *configfiles))
    trains = [job for job in jobs if job[0] == "train"]
    if "quick" in configfiles[0]:
        assert bool(trains) == (overlay is not None)  # pack 12: every quick run is in a pack
    else:
        assert len(trains) == 4


PRODUCERS = ("    SUMMARY_PRODUCERS.update(dict.fromkeys(_keys, "
             "workflow.get_rule(pack_rule_name(_pack))))\n",
             'SUMMARY_PRODUCERS.update(dict.fromkeys(SINGLE_RUNS, workflow.get_rule("train")))\n')
SPEEDUPS = "cache_function_params()\nformat_shell_command_once()\ntune_gc()\n"
DROPPED = "    drop_rule_function(globals(), workflow.get_rule(pack_rule_name(_pack)))\n"


@pytest.mark.parametrize("overlay", [None, {"resources": {"default": {"pack": 1}}}],
                         ids=["quick", "quick-pack1"])
def test_the_planning_levers_plan_the_same_jobs(tmp_path, overlay):
    """Runs named with their rule as producer, the train rule's shared resources as
    values, the cached function parameters, the shell command formatted once per listing, the
    tuned collector and the pack rules' functions dropped from the Snakefile's globals: the jobs,
    shell commands and resources of the dry run are those of the workflow without them."""
    new, old = copy_workflow(tmp_path / "new"), copy_workflow(tmp_path / "old")
    levers = [("workflow/rules/train.smk", lever) for lever in (*PRODUCERS, DROPPED)]
    for path, lever in [*levers, ("workflow/Snakefile", SPEEDUPS)]:
        text = (old / path).read_text()
        assert lever in text
        (old / path).write_text(text.replace(lever, "\n" if "SUMMARY" in lever else ""))
    configfiles = ["config/quick.yaml"]
    if overlay:
        for wd in (new, old):
            (wd / "pack1.yaml").write_text(yaml.safe_dump(overlay))
        configfiles.append("pack1.yaml")
    outputs = [dry_run(wd, *configfiles, "--printshellcmds") for wd in (new, old)]
    assert job_list(outputs[0]) == job_list(outputs[1])
    # every line of the job listings, shell commands (with each run's config) and resources
    # included, but the ones naming the folder, the time or the job ids and the reasons (sets)
    details = [sorted(line for line in out.replace(str(wd), "WD").splitlines()
                      if not line.startswith(("[", "    jobid:", "    reason:", "  Date:",
                                              "  Workflow ID:")))
               for wd, out in zip((new, old), outputs)]
    assert details[0] == details[1]
    assert any(line.startswith("Shell command:") for line in details[0])
    assert any(line.startswith("    resources:") for line in details[0])


def registries() -> list[Path]:
    return sorted(p for p in (REPO / "config").glob("*.yaml"))


@pytest.mark.parametrize("path", registries(), ids=lambda p: p.name)
def test_run_yaml_text_is_that_of_safe_dump(path):
    with open(path) as fh:
        config = yaml.safe_load(fh)
    coerce_overrides(config)
    config.update(with_defaults(config))
    runs = expand(config).runs
    assert runs
    for key, spec in runs.items():
        cfg = dict(spec.config)
        if spec.partition is not None:
            cfg["partition_file"] = f"parts/{spec.partition}.npz"
        assert run_yaml_text(spec, "parts") == yaml.safe_dump(cfg, sort_keys=True,
                                                              allow_unicode=True), key


def test_above_the_planning_limit_the_workflow_refuses_in_one_line(tmp_path):
    wd = copy_workflow(tmp_path / "wf")
    common = wd / "workflow" / "rules" / "common.smk"
    text = common.read_text()
    assert "MAX_PLANNED_RUNS = 50_000\n" in text and "PLANNING_NOTICE_RUNS = 2_000\n" in text
    common.write_text(text.replace("MAX_PLANNED_RUNS = 50_000\n", "MAX_PLANNED_RUNS = 3\n"))
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1",
                           "--configfile", "config/test.yaml"], cwd=wd, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode != 0
    output = proc.stdout + proc.stderr
    refusal = [line for line in output.splitlines() if "more than the 3" in line]
    assert refusal == ["the registry asks for 4 runs, more than the 3 one Snakemake call plans: "
                       "split the grid, e.g. `--config only=[<experiment>]` per experiment or "
                       "`--config seeds=[...]` in batches of seeds"], output[-2000:]

    common.write_text(text.replace("PLANNING_NOTICE_RUNS = 2_000\n", "PLANNING_NOTICE_RUNS = 4\n"))
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--quiet", "rules",
                           "--cores", "1", "--configfile", "config/test.yaml"], cwd=wd,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "planning 4 runs ..." in proc.stderr.splitlines()
