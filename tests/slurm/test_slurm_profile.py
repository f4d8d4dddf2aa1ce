"""The SLURM profile, run for real on a one-node Slurm cluster started on this machine.

`tests/slurm/cluster.sh start` installs slurm-wlm + munge through apt (where missing) and starts
slurmctld + slurmd; the tests then run Snakemake with `--profile profiles/slurm` and check that
every non-local job went through `sbatch`, finished as COMPLETED in Slurm with the resources the
workflow asked for, and produced its outputs. The module's teardown runs `cluster.sh stop`, also
after a failed test, and fails where the machine is not back as it was before `start`
(test_cluster_cleanup.py tests that cycle on its own).

Skips (with the reason) only when the machine cannot host the cluster: no apt-get to install
Slurm, not root, apt mirror unreachable, an existing non-test /etc/slurm/slurm.conf. Those are
detected by cluster.sh, which exits 77 for them; any other failure fails the test.

Run:  pytest -m slurm tests/slurm -rP      (-rP prints the Snakemake log of the passing runs)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cluster_state import (
    CLUSTER_SCRIPT,
    finish_earlier_cleanup,
    installed_by_start,
    machine_state,
    restoration_problems,
    run_cluster,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "slurm" / "fixture"
SLURM_PROFILE = REPO / "profiles" / "slurm"
ENVIRONMENT_SKIP = 77  # cluster.sh's exit status for "this machine cannot host a cluster"
SNAKEMAKE_TIMEOUT_S = 540

# The workflow files a copy of the real workflow needs (results stay in the copy).
WORKFLOW_PARTS = ("Snakefile", "workflow", "config", "notebooks", "profiles", "src")

# Settings only this test cluster needs, given on the command line so the profile stays
# portable: no slurmdbd here, so `sacct` knows no jobs and the plugin must poll `squeue`
# (slurm.conf keeps finished jobs visible for MinJobAge=3600 s); and a short first poll,
# because our jobs take seconds, not hours.
TEST_CLUSTER_ARGS = (
    "--slurm-status-command",
    "squeue",
    "--slurm-init-seconds-before-status-checks",
    "3",
)

SUBMITTED = re.compile(r"Job (\d+) has been submitted with SLURM jobid (\d+)")


@pytest.fixture(scope="module")
def slurm_cluster():
    if sys.platform != "linux":
        pytest.skip("the Slurm test cluster needs Linux")
    if shutil.which("sbatch") is None and shutil.which("apt-get") is None:
        pytest.skip("apt-get unavailable: cannot install slurm-wlm and munge for the Slurm test")
    error = finish_earlier_cleanup()
    if error:
        pytest.fail(error, pytrace=False)
    before = machine_state()
    start_log = ""
    try:
        start = run_cluster("start", timeout=900)
        start_log = start.stderr
        if start.returncode == ENVIRONMENT_SKIP:
            reason = [line for line in start.stderr.splitlines() if "ENVIRONMENT:" in line]
            pytest.skip(
                f"cannot host a Slurm test cluster here: {' '.join(reason) or start.stderr}"
            )
        if start.returncode != 0:
            pytest.fail(
                f"tests/slurm/cluster.sh start failed (exit {start.returncode}):\n"
                f"{start.stdout}\n{start.stderr}",
                pytrace=False,
            )
        print(start.stderr)
        yield {"gpus": cluster_has_gpus()}
    finally:
        # whatever happened above (a failed or skipped start, a failed test, an interrupt)
        stop = run_cluster("stop", timeout=600)
    assert stop.returncode == 0, f"cluster.sh stop failed:\n{stop.stderr}"
    problems = restoration_problems(before, machine_state(), installed_by_start(start_log))
    assert not problems, "cluster.sh stop left the machine changed:\n" + "\n".join(problems)


def cluster_has_gpus() -> bool:
    """Whether the node has (fake) GPUs: cluster.sh leaves them out where mknod is refused."""
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%G"], capture_output=True, text=True)
    return "gpu" in out.stdout


def run_snakemake(workdir: Path, *args: str) -> tuple[str, list[tuple[str, str]]]:
    """Run Snakemake through the SLURM profile in `workdir`; return its log and the
    (snakemake jobid, slurm jobid) pairs it submitted. Fails the test on a non-zero exit."""
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--profile",
        str(SLURM_PROFILE),
        *TEST_CLUSTER_ARGS,
        *args,
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    # No environment activated: jobs inherit the submit host's PATH (sbatch --export=ALL), but
    # the workflow's commands run the interpreter that runs Snakemake (docs/workflow.md, "Which
    # Python runs the jobs"), which each Slurm job starts Snakemake with.
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    try:
        proc = subprocess.run(
            cmd,
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=SNAKEMAKE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        log = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else exc.stdout
        pytest.fail(
            f"snakemake did not finish in {SNAKEMAKE_TIMEOUT_S} s: {' '.join(cmd)}\n"
            f"{log}\n{slurm_diagnostics()}",
            pytrace=False,
        )
    log = proc.stdout + proc.stderr
    print(f"$ {' '.join(cmd)}  (in {workdir})\n{log}")
    if proc.returncode != 0:
        pytest.fail(
            f"snakemake --profile profiles/slurm failed (exit {proc.returncode}):\n"
            f"{log}\n{slurm_logs(workdir)}\n{slurm_diagnostics()}",
            pytrace=False,
        )
    return log, SUBMITTED.findall(log)


def slurm_logs(workdir: Path) -> str:
    logs = sorted((workdir / ".snakemake" / "slurm_logs").rglob("*.log"))
    return "\n".join(f"---- {p}\n{p.read_text(errors='replace')[-3000:]}" for p in logs)


def slurm_diagnostics() -> str:
    out = subprocess.run(
        ["bash", str(CLUSTER_SCRIPT), "status"], capture_output=True, text=True, timeout=60
    )
    return out.stdout + out.stderr


def slurm_job(jobid: str) -> dict[str, str]:
    """`scontrol show job` as a dict (finished jobs stay visible for MinJobAge)."""
    out = subprocess.run(
        ["scontrol", "-o", "show", "job", jobid], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, f"scontrol show job {jobid}: {out.stderr}"
    return dict(field.split("=", 1) for field in out.stdout.split() if "=" in field)


def show_submissions(capsys, title: str, log: str, submitted: list[tuple[str, str]]) -> None:
    """Print, past pytest's capture (so a plain `pytest -q` in CI shows it), what went through
    sbatch and how Slurm saw each job finish."""
    lines = [f"---- {title}: {len(submitted)} jobs submitted with sbatch"]
    lines += [
        line
        for line in log.splitlines()
        if SUBMITTED.search(line) or line.startswith("Finished jobid:") or "steps (100%)" in line
    ]
    for _, slurm_jobid in submitted:
        info = slurm_job(slurm_jobid)
        keys = ("JobId", "JobState", "ExitCode", "TimeLimit", "TRES", "TresPerJob")
        lines.append("  scontrol: " + " ".join(f"{k}={info.get(k, '-')}" for k in keys))
    with capsys.disabled():
        print("\n" + "\n".join(lines))


def assert_all_finished_in_slurm(log: str, submitted: list[tuple[str, str]]) -> None:
    assert submitted, "no job was submitted with sbatch:\n" + log
    # Snakemake prints `rule X:` for a cluster job and `localrule X:` for a local one:
    # every cluster job must have gone through sbatch, exactly once (no retries needed).
    remote_jobs = re.findall(r"^rule \w+:", log, flags=re.MULTILINE)
    assert len(remote_jobs) == len(submitted), (remote_jobs, submitted)
    for smk_jobid, slurm_jobid in submitted:
        assert re.search(rf"Finished jobid: {smk_jobid}\b", log), (
            f"Snakemake job {smk_jobid} (Slurm job {slurm_jobid}) never finished"
        )
        info = slurm_job(slurm_jobid)
        assert info.get("JobState") == "COMPLETED", f"Slurm job {slurm_jobid}: {info}"
        assert info.get("ExitCode") == "0:0", f"Slurm job {slurm_jobid}: {info}"
    assert "(100%) done" in log


def test_fixture_workflow_runs_through_slurm_with_gpu_memory_and_time_requests(
    slurm_cluster, tmp_path, capsys
):
    workdir = tmp_path / "fixture"
    shutil.copytree(FIXTURE, workdir)
    gpus = slurm_cluster["gpus"]
    if not gpus:
        config = workdir / "config.yaml"
        config.write_text(config.read_text().replace("gpu: 1", "gpu: 0"))

    log, submitted = run_snakemake(workdir)
    show_submissions(capsys, "fixture workflow", log, submitted)

    # download and all are localrules; two train jobs and the table go through sbatch.
    assert len(submitted) == 3, log
    assert_all_finished_in_slurm(log, submitted)
    assert "SLURM_JOB_ID=\n" in (workdir / "resources/raw/data.txt").read_text(), (
        "the download rule should run on the submit host, not in a Slurm job"
    )
    slurm_ids = {slurm for _, slurm in submitted}
    for seed in (1, 2):
        summary = (workdir / f"results/runs/seed{seed}/summary.json").read_text()
        job_id = re.search(r'"slurm_job_id": "(\d*)"', summary).group(1)
        assert job_id in slurm_ids, summary
        info = slurm_job(job_id)
        if gpus:
            # gpu=1 became `--gpus=1`: Slurm handed one (fake) GPU to the job.
            assert re.search(r'"cuda_visible_devices": "\d"', summary), summary
            assert "gpu:1" in info.get("TresPerJob", ""), info
        assert info["TimeLimit"] == "00:05:00", info  # runtime: 5 (minutes)
        assert "mem=200M" in info["TRES"], info  # mem_mb: 200
    table = (workdir / "results/table.csv").read_text()
    assert re.search(r"SLURM_JOB_ID=\d+", table), table


def test_real_workflow_test_config_runs_through_slurm_profile(slurm_cluster, tmp_path, capsys):
    workdir = tmp_path / "workflow"
    workdir.mkdir()
    for part in WORKFLOW_PARTS:
        src = REPO / part
        if src.is_dir():
            shutil.copytree(
                src, workdir / part, ignore=shutil.ignore_patterns(".snakemake", "__pycache__")
            )
        elif src.exists():
            shutil.copy2(src, workdir / part)
    # config/test.yaml as is, except that its runs ask for one GPU: the train rule's `gpu`
    # resource must reach sbatch as --gpus=1 (the cluster has fake GPUs; the runs still use
    # `device: cpu`). A second --configfile is merged over the first.
    gpus = int(slurm_cluster["gpus"])
    gpu_overlay = tmp_path / "gpu.yaml"
    gpu_overlay.write_text(
        f"resources:\n  default: {{gpu: {gpus}, mem_mb: 1000, runtime: 5, threads: 1}}\n"
    )

    # The runs, the tables and the figures; the report (papermill) is the workflow tests' job
    # and would add two more jobs' worth of minutes here.
    log, submitted = run_snakemake(
        workdir,
        "--configfile",
        "config/test.yaml",
        str(gpu_overlay),
        "--slurm-keep-successful-logs",  # read below: what each job read at its start
        "--",
        "tables",
        "figures",
    )
    show_submissions(capsys, "real workflow, config/test.yaml", log, submitted)

    assert_all_finished_in_slurm(log, submitted)
    results = workdir / "results" / "test"
    metrics = sorted(results.glob("runs/**/metrics.csv"))
    summaries = sorted(results.glob("runs/**/summary.json"))
    assert metrics, f"no runs/**/metrics.csv under {results}"
    assert len(metrics) == len(summaries), (metrics, summaries)
    for path in metrics:
        assert len(path.read_text().splitlines()) > 1, f"{path} has no rows"
    tables = sorted(results.glob("tables/*.csv"))
    assert tables, f"no tables/*.csv under {results}"
    assert sorted(results.glob("figures/*.png")), f"no figures/*.png under {results}"

    # Each training and partition job read its own runs from the plan the main process wrote
    # before submitting (fedmgda.jobplan), not the whole registry.
    assert sorted((workdir / ".snakemake" / "fedmgda-plans").glob("*.sqlite")), log
    for rule in ("train", "partition"):
        job_logs = sorted((workdir / ".snakemake" / "slurm_logs" / f"rule_{rule}").rglob("*.log"))
        assert job_logs, f"no Slurm log of a {rule} job:\n{slurm_logs(workdir)}"
        for path in job_logs:
            assert " from the jobs' plan .snakemake/fedmgda-plans/" in path.read_text(), path

    # One Slurm job per run, each with the GPU, memory and time limit the config asked for.
    rule_of = dict(re.findall(r"Finished jobid: (\d+) \(Rule: (\w+)\)", log))
    train_slurm_ids = [slurm for smk, slurm in submitted if rule_of.get(smk) == "train"]
    assert len(train_slurm_ids) == len(summaries), (train_slurm_ids, summaries)
    for slurm_id in train_slurm_ids:
        info = slurm_job(slurm_id)
        assert ("gpu:1" in info.get("TresPerJob", "")) == bool(gpus), info
        assert info["TimeLimit"] == "00:05:00", info
        assert "mem=1000M" in info["TRES"], info
