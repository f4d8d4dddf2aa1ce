"""The SLURM profile, run for real on a one-node Slurm cluster started on this machine.

`tests/slurm/cluster.sh start` installs slurm-wlm + munge through apt (where missing) and starts
slurmctld + slurmd; the tests then run Snakemake with `--profile profiles/slurm` and check that
every non-local job went through `sbatch`, finished as COMPLETED in Slurm with the resources the
workflow asked for, and produced its outputs; that `scancel` of a running training job stops its
trainer with a checkpoint, from which the job's retry resumes; and that Ctrl-C to the main
Snakemake cancels the job the same way, and the same command run again resumes it. The
module's teardown runs `cluster.sh stop`, also after a failed test, and fails where the machine
is not back as it was before `start` (test_cluster_cleanup.py tests that cycle on its own).

Skips (with the reason) only when the machine cannot host the cluster: no apt-get to install
Slurm, not root, apt mirror unreachable, an existing non-test /etc/slurm/slurm.conf. Those are
detected by cluster.sh, which exits 77 for them; any other failure fails the test.

Run:  pytest -m slurm tests/slurm -rP      (-rP prints the Snakemake log of the passing runs)
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
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


def snakemake_command(*args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "snakemake",
        "--profile",
        str(SLURM_PROFILE),
        *TEST_CLUSTER_ARGS,
        *args,
    ]


def snakemake_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    # No environment activated: jobs inherit the submit host's PATH (sbatch --export=ALL), but
    # the workflow's commands run the interpreter that runs Snakemake (docs/workflow.md, "Which
    # Python runs the jobs"), which each Slurm job starts Snakemake with.
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    return env


def run_snakemake(workdir: Path, *args: str) -> tuple[str, list[tuple[str, str]]]:
    """Run Snakemake through the SLURM profile in `workdir`; return its log and the
    (snakemake jobid, slurm jobid) pairs it submitted. Fails the test on a non-zero exit."""
    cmd = snakemake_command(*args)
    env = snakemake_env()
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


def copy_workflow(workdir: Path) -> Path:
    """A copy of the real workflow in `workdir` (its results stay there)."""
    workdir.mkdir()
    for part in WORKFLOW_PARTS:
        src = REPO / part
        if src.is_dir():
            shutil.copytree(
                src, workdir / part, ignore=shutil.ignore_patterns(".snakemake", "__pycache__")
            )
        elif src.exists():
            shutil.copy2(src, workdir / part)
    return workdir


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
    workdir = copy_workflow(tmp_path / "workflow")
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


# Over config/test.yaml: seed 1's two runs (FedAvg, FedMGDA+) in one pack, so that one Slurm job
# and one trainer train both, for enough rounds that the trainer, held after its first round,
# is still training when its job is cancelled.
SCANCEL_ROUNDS = 100
SCANCEL_OVERLAY = (
    f"seeds: [1]\nrounds: {SCANCEL_ROUNDS}\n"
    "resources:\n  default: {gpu: 0, mem_mb: 1000, runtime: 5, threads: 1, pack: 2}\n"
)
SCANCEL_ARGS = ("--configfile", "config/test.yaml", "scancel.yaml", "--", "runs")
PACK_SUBMITTED = re.compile(
    r"has been submitted with SLURM jobid (\d+) \(log: ([^)]*/rule_train_pack_\w+/\d+\.log)\)"
)
# what an uninterrupted run and a resumed one must have byte for byte (tests/workflow/
# test_recovery.py compares the same), besides summary.json without its timing
RESULT_FILES = ("run.yaml", "metrics.csv", "per_user.csv", "per_user_final.csv")
WAIT_S = 300


def text(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def sigterm_pending(pid: int) -> bool:
    """Whether SIGTERM waits, undelivered, for the process (held by SIGSTOP)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    masks = re.findall(r"^(?:SigPnd|ShdPnd):\s*([0-9a-f]+)$", status, flags=re.MULTILINE)
    return any(int(mask, 16) >> (signal.SIGTERM - 1) & 1 for mask in masks)


def start_snakemake(workdir: Path, *args: str) -> subprocess.Popen:
    """Snakemake through the SLURM profile in the background, its output in a file."""
    path = workdir / f"snakemake-{time.monotonic_ns()}.log"
    with open(path, "w") as log:
        process = subprocess.Popen(
            snakemake_command(*args),
            cwd=workdir,
            env=snakemake_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    process.log_path = path
    return process


def end_snakemake(process: subprocess.Popen) -> None:
    """Kill a Snakemake still running (a failed test) and cancel the Slurm jobs it submitted."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
    jobids = [slurm for _, slurm in SUBMITTED.findall(text(process.log_path))]
    if jobids:
        subprocess.run(["scancel", *jobids], capture_output=True, timeout=60)


def wait_for(condition, what: str, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if process is not None and process.poll() is not None:
            pytest.fail(
                f"Snakemake ended (exit {process.returncode}) before {what}:\n"
                f"{text(process.log_path)[-5000:]}",
                pytrace=False,
            )
        if time.monotonic() > deadline:
            pytest.fail(f"waited {WAIT_S} s for {what}\n{slurm_diagnostics()}", pytrace=False)
        time.sleep(0.05)


def file_contents(root: Path, leave_out: list[Path]) -> dict[str, bytes]:
    """Every file under `root` outside the folders `leave_out`, by path."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not any(folder in p.parents for folder in leave_out)
    }


def scancel(first: subprocess.Popen, jobid: str) -> None:
    cancel = subprocess.run(["scancel", jobid], capture_output=True, text=True, timeout=60)
    assert cancel.returncode == 0, cancel.stderr


def stop_the_pack_job(workdir: Path, first: subprocess.Popen, stop) -> tuple[list[Path], int, dict]:
    """Once the pack's trainer has trained a round: hold it (SIGSTOP, so that the cancel comes
    before its last round whatever the speed of the machine), call `stop` with the Snakemake
    and the Slurm job's id (it must have the job cancelled), let the trainer go once the
    cancel's SIGTERM has reached it, and wait for it to end. Returns the run folders, the round
    they stopped after and the other files of results/ as they were before."""
    logs = workdir / "logs"
    wait_for(
        lambda: any("[progress] round 1/" in text(p) for p in logs.glob("test/packs/**/*.log")),
        "the pack's first round",
        first,
    )
    locks = sorted((workdir / "results").glob("test/runs/**/train.lock"))
    assert len(locks) == 2, locks
    members = [lock.parent for lock in locks]
    trainer = int(locks[0].read_text().strip())
    pack_log = next(p for p in logs.glob("test/packs/**/*.log") if "[progress]" in text(p))
    os.kill(trainer, signal.SIGSTOP)
    try:
        before = file_contents(workdir / "results", members)
        jobid = PACK_SUBMITTED.search(text(first.log_path)).group(1)
        assert slurm_job(jobid)["JobState"] == "RUNNING", slurm_job(jobid)
        stop(first, jobid)
        # Slurm sends SIGCONT and SIGTERM to every process of the job
        wait_for(
            lambda: sigterm_pending(trainer) or "SIGTERM received" in text(pack_log),
            f"scancel's SIGTERM to reach the trainer (process {trainer})",
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(trainer, signal.SIGCONT)
    wait_for(lambda: not alive(trainer), "the cancelled job's trainer to end")
    stopped = {
        m: re.compile(rf"^{re.escape(str(m.relative_to(workdir)))}: stopped by SIGTERM after round "
                      r"(\d+);", flags=re.MULTILINE)
        for m in members
    }
    wait_for(
        lambda: all(stopped[m].search(text(m / "train.log")) for m in members),
        "each run's train.log to say that it stopped",
    )
    rounds = {int(stopped[m].search(text(m / "train.log")).group(1)) for m in members}
    assert len(rounds) == 1 and 1 <= min(rounds) < SCANCEL_ROUNDS, rounds
    for member in members:
        assert (member / "checkpoint.pt").is_file(), sorted(member.iterdir())
        assert not (member / "summary.json").exists(), sorted(member.iterdir())
    assert any(name.startswith("test/partitions/") for name in before), before.keys()
    assert file_contents(workdir / "results", members) == before, "a finished file changed"
    return members, rounds.pop(), before


def interrupt_the_pack(tmp_path: Path, capsys, title: str, stop) -> tuple[Path, tuple, int, str]:
    """A copy of the real workflow with the overlay, started through the profile, its pack job
    stopped by `stop` (stop_the_pack_job), and that Snakemake waited for. Returns the copy,
    what stop_the_pack_job returns, the Snakemake's exit status and its log."""
    workdir = copy_workflow(tmp_path / "workflow")
    (workdir / "scancel.yaml").write_text(SCANCEL_OVERLAY)
    first = start_snakemake(workdir, *SCANCEL_ARGS)
    try:
        stopped = stop_the_pack_job(workdir, first, stop)
        rc = first.wait(timeout=SNAKEMAKE_TIMEOUT_S)
    finally:
        end_snakemake(first)
    log = text(first.log_path)
    print(log)
    show_submissions(capsys, title, log, SUBMITTED.findall(log))
    return workdir, stopped, rc, log


def ctrl_c(first: subprocess.Popen, jobid: str) -> None:
    """What a terminal's Ctrl-C does: SIGINT to the foreground process group, here the main
    Snakemake (started with start_new_session: its group's id is its pid) and its children; the
    Slurm job's processes, started by slurmd, are not in it."""
    os.killpg(first.pid, signal.SIGINT)


def train_uninterrupted(workdir: Path, members: list[Path], reference: Path) -> None:
    """The runs trained by hand in one `fedmgda train` (as the pack's job does), uninterrupted,
    into the same relative folders under `reference`, with their partition files."""
    shutil.copytree(workdir / "results/test/partitions", reference / "results/test/partitions")
    configs = []
    for i, member in enumerate(members):
        configs.append(str(reference / f"run{i}.yaml"))
        shutil.copy2(member / "run.yaml", configs[-1])
    outs = [str(m.relative_to(workdir)) for m in members]
    argv = [sys.executable, "-m", "fedmgda", "train", "--config", *configs, "--out", *outs]
    # one thread, as the job's (threads: 1): more would only compete for the cores
    env = dict(os.environ, PYTHONPATH=str(workdir / "src"), OMP_NUM_THREADS="1",
               MKL_NUM_THREADS="1")
    done = subprocess.run(argv, cwd=reference, env=env, capture_output=True, text=True,
                          timeout=SNAKEMAKE_TIMEOUT_S)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def summary_without_timing(folder: Path) -> dict:
    summary = json.loads((folder / "summary.json").read_text())
    summary.pop("runtime_s")
    summary["environment"].pop("threads")  # where it ran, not what it computed
    return summary


def assert_resumed(workdir: Path, members: list[Path], stopped_at: int) -> None:
    """Each run's train.log says that it resumed from the checkpoint of round `stopped_at`."""
    for member in members:
        out = member.relative_to(workdir)
        assert f"{out}: resuming from its checkpoint (round {stopped_at} of {SCANCEL_ROUNDS} " \
            "done)" in text(member / "train.log"), text(member / "train.log")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """train_uninterrupted once per set of runs (folders and run.yaml): the tests that stop the
    pack train the same runs. Returns the folder that holds them."""
    trained: dict[tuple, Path] = {}

    def reference(workdir: Path, members: list[Path]) -> Path:
        key = tuple((str(m.relative_to(workdir)), (m / "run.yaml").read_bytes()) for m in members)
        if key not in trained:
            folder = tmp_path_factory.mktemp("reference")
            train_uninterrupted(workdir, members, folder)
            trained[key] = folder
        return trained[key]

    return reference


def assert_resumed_as_uninterrupted(
    workdir: Path, members: list[Path], before: dict[str, bytes], reference: Path
) -> None:
    """The resumed runs equal the same runs trained uninterrupted under `reference`, byte for
    byte, hold no checkpoint or lock any more, and results/'s other files are as `before`."""
    results = file_contents(workdir / "results", [])
    for member in members:
        ref = reference / member.relative_to(workdir)
        for name in RESULT_FILES:
            assert (member / name).read_bytes() == (ref / name).read_bytes(), (member, name)
        assert summary_without_timing(member) == summary_without_timing(ref), member
        assert not (member / "checkpoint.pt").exists() and not (member / "train.lock").exists()
    assert all(results.get(name) == content for name, content in before.items())


def test_scancel_stops_a_training_job_with_a_checkpoint_and_its_retry_resumes_it(
    slurm_cluster, tmp_path, capsys, uninterrupted
):
    """docs/running.md, "Stopping": `scancel` of a running training job signals every process of
    the job with SIGTERM; its trainer stops both runs at the end of their round, with a
    checkpoint, and exits 143. The profile's `retries` resubmit the cancelled job, whose trainer
    resumes both from their checkpoints: the results are those of an uninterrupted training,
    byte for byte, and the same command run again finds nothing to do."""
    workdir, (members, stopped_at, before), rc, log = interrupt_the_pack(
        tmp_path, capsys, "scancel of the pack job", scancel
    )
    assert rc == 0, f"{log[-5000:]}\n{slurm_logs(workdir)}"
    pack_jobs = PACK_SUBMITTED.findall(log)
    assert len(pack_jobs) == 2, log  # the cancelled one, and its retry
    (cancelled, cancelled_log), (resumed, _) = pack_jobs
    assert "Trying to restart job" in log, log
    # the job's trainer exited 143 (128 + SIGTERM), which its Snakemake reported
    assert "returned non-zero exit status 143" in text(Path(cancelled_log)), slurm_logs(workdir)
    assert slurm_job(cancelled)["JobState"] == "CANCELLED", slurm_job(cancelled)
    assert slurm_job(resumed)["JobState"] == "COMPLETED", slurm_job(resumed)
    assert_resumed(workdir, members, stopped_at)
    results = file_contents(workdir / "results", [])

    again, submitted = run_snakemake(workdir, *SCANCEL_ARGS)
    assert not submitted and "Nothing to be done" in again, again
    assert file_contents(workdir / "results", []) == results
    assert_resumed_as_uninterrupted(workdir, members, before, uninterrupted(workdir, members))


def test_ctrl_c_to_snakemake_cancels_the_training_job_and_the_same_command_resumes_it(
    slurm_cluster, tmp_path, capsys, uninterrupted
):
    """docs/running.md, "Stopping on SLURM": Ctrl-C to the main Snakemake (SIGINT to its
    process group, as a terminal sends it; the Slurm job's processes are not in it) makes it
    `scancel` its jobs and exit non-zero; the pack's trainer stops both runs at the end of their
    round with a checkpoint (the cancel's SIGTERM); the same command run again resumes them to
    the results of an uninterrupted training, byte for byte."""
    workdir, (members, stopped_at, before), rc, log = interrupt_the_pack(
        tmp_path, capsys, "Ctrl-C to Snakemake", ctrl_c
    )
    assert rc != 0, log[-5000:]
    assert "Terminating processes on user request" in log, log[-5000:]
    pack_jobs = PACK_SUBMITTED.findall(log)
    assert len(pack_jobs) == 1, log  # cancelled, not retried
    (cancelled, cancelled_log), = pack_jobs
    assert slurm_job(cancelled)["JobState"] == "CANCELLED", slurm_job(cancelled)
    # what reached the trainer was the cancel's SIGTERM, not the SIGINT: it exited 143
    assert "returned non-zero exit status 143" in text(Path(cancelled_log)), slurm_logs(workdir)

    again, _ = run_snakemake(workdir, *SCANCEL_ARGS)
    resumed = PACK_SUBMITTED.findall(again)
    assert len(resumed) == 1, again
    assert slurm_job(resumed[0][0])["JobState"] == "COMPLETED", slurm_job(resumed[0][0])
    assert_resumed(workdir, members, stopped_at)
    assert_resumed_as_uninterrupted(workdir, members, before, uninterrupted(workdir, members))
