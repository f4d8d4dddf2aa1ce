"""Recovery never deletes finished work: Snakemake killed, interrupted or run twice while a
pack's trainer writes its runs, then recovered as docs/workflow.md and docs/running.md say,
ends with every run byte-identical to the same runs trained without interruption, and no file a
job did not write itself is removed. Real Snakemake processes on config/test.yaml: one pack of two
runs (FedAvg and FedMGDA+, seed 1), trained by one trainer process.

An orphaned trainer is held with SIGSTOP while the recovering Snakemake starts, so that it is
still running whatever the speed of the machine, and let go once the new job waits for it."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from .conftest import REPO, copy_workflow

# over config/test.yaml: the two runs of seed 1 in one pack, with no checkpoints of their own (a
# checkpoint in these tests is the one a signal makes)
ROUNDS = 12
OVERLAY = {
    "seeds": [1],
    "rounds": ROUNDS,
    "resources": {"default": {"gpu": 0, "mem_mb": 1000, "runtime": 5, "threads": 1, "pack": 2}},
}
SETTING = f"results/test/runs/digits-shards_b10_lr0.05_p0.2_T{ROUNDS}_pu2"
MEMBERS = (f"{SETTING}/fedavg/default/clean/seed1",
           f"{SETTING}/fedmgda_plus/decay0.1_eta1/clean/seed1")
PACK_LOG = "logs/test/packs/tiny/digits_k1_b10_lr0.05_m0.5_devicecpu/pack1.log"
RESULT_FILES = ("run.yaml", "metrics.csv", "per_user.csv", "per_user_final.csv")
TIMEOUT = 600


def snakemake_argv(*flags: str, target: str = "runs") -> list[str]:
    # the target goes before --configfile (which takes several values)
    return [sys.executable, "-m", "snakemake", target, "--cores", "1", *flags,
            "--configfile", "config/test.yaml", "recovery.yaml"]


def start(wd: Path, *flags: str, target: str = "runs") -> subprocess.Popen:
    """Snakemake in a process group of its own (as a shell starts it), its output in a file."""
    path = wd / f"snakemake-{time.monotonic_ns()}.log"
    with open(path, "w") as log:
        process = subprocess.Popen(snakemake_argv(*flags, target=target), cwd=wd, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    process.log_path = path
    return process


def run(wd: Path, *flags: str, target: str = "runs") -> subprocess.CompletedProcess:
    return subprocess.run(snakemake_argv(*flags, target=target), cwd=wd, capture_output=True,
                          text=True, timeout=TIMEOUT)


def workflow(tmp: Path) -> Path:
    wd = copy_workflow(tmp)
    (wd / "recovery.yaml").write_text(yaml.safe_dump(OVERLAY))
    return wd


def wait_for(condition, what: str, process: subprocess.Popen | None = None) -> None:
    deadline = time.time() + TIMEOUT
    while not condition():
        assert time.time() < deadline, f"timed out waiting for {what}"
        assert process is None or process.poll() is None, f"ended before {what}"
        time.sleep(0.05)


def text(path: Path) -> str:
    return path.read_text() if path.is_file() else ""


def trainer_pid(wd: Path) -> int:
    """The process id in the first member's train.lock (the pack's trainer)."""
    return int((wd / MEMBERS[0] / "train.lock").read_text().strip())


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def summary_without_timing(folder: Path) -> dict:
    summary = json.loads((folder / "summary.json").read_text())
    summary.pop("runtime_s")
    # where it ran, not what it computed: a resumed job may get other cores
    summary["environment"].pop("threads")
    return summary


def assert_as_uninterrupted(wd: Path, reference: Path, members=MEMBERS) -> None:
    for member in members:
        run_dir, ref = wd / member, reference / member
        for name in RESULT_FILES:
            assert (run_dir / name).read_bytes() == (ref / name).read_bytes(), (member, name)
        assert summary_without_timing(run_dir) == summary_without_timing(ref), member
        assert not (run_dir / "checkpoint.pt").exists() and not (run_dir / "train.lock").exists()


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The pack trained by one Snakemake run, uninterrupted."""
    wd = workflow(tmp_path_factory.mktemp("uninterrupted"))
    done = run(wd)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return wd


def kill_snakemake_alone_mid_pack(wd: Path) -> int:
    """Snakemake started, SIGKILL-ed alone once its pack trains; the orphaned trainer's pid, the
    trainer held (SIGSTOP): SIGCONT lets it go on."""
    first = start(wd)
    try:
        wait_for(lambda: "[progress] round 1/" in text(wd / PACK_LOG), "the pack's first round",
                 first)
        pid = trainer_pid(wd)
        first.kill()  # Snakemake alone: its trainer goes on
        os.kill(pid, signal.SIGSTOP)
        first.wait(timeout=60)
    except BaseException:
        kill_group(first)
        raise
    return pid


@pytest.mark.slow
def test_unlock_and_rerun_incomplete_while_the_orphaned_trainer_runs(tmp_path, reference):
    """The rerun's pack job waits for the orphan instead of deleting or replacing its files, then
    finds the runs it finished and leaves them as they are."""
    wd = workflow(tmp_path / "wf")
    orphan = kill_snakemake_alone_mid_pack(wd)
    try:
        assert run(wd, "--unlock").returncode == 0
        rerun = start(wd, "--rerun-incomplete")
        wait_for(lambda: "is being written by another trainer" in text(wd / PACK_LOG),
                 "the rerun's trainer to wait", rerun)
        assert rerun.poll() is None
    finally:
        os.kill(orphan, signal.SIGCONT)
    assert rerun.wait(timeout=TIMEOUT) == 0, text(rerun.log_path)[-3000:]
    wait_for(lambda: not alive(orphan), "the orphan to end")  # it let go of its lock, then ends
    log = text(wd / PACK_LOG)
    for member in MEMBERS:
        assert f"{member}: already trained with this config" in log, log
    assert_as_uninterrupted(wd, reference)


@pytest.mark.slow
def test_unlock_and_rerun_incomplete_after_the_orphaned_trainer_ended(tmp_path, reference):
    wd = workflow(tmp_path / "wf")
    orphan = kill_snakemake_alone_mid_pack(wd)
    os.kill(orphan, signal.SIGCONT)
    wait_for(lambda: not alive(orphan), "the orphaned trainer to end")
    assert run(wd, "--unlock").returncode == 0
    done = run(wd, "--rerun-incomplete")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert_as_uninterrupted(wd, reference)


@pytest.mark.slow
def test_a_second_snakemake_with_nolock_beside_a_running_one(tmp_path, reference):
    """Both plan the same pack; the second one's job waits for the first one's trainer and then
    leaves its finished runs as they are: both succeed, nothing of the first is deleted."""
    wd = workflow(tmp_path / "wf")
    first = start(wd)
    second = None
    try:
        wait_for(lambda: "[progress] round 1/" in text(wd / PACK_LOG), "the pack's first round",
                 first)
        trainer = trainer_pid(wd)
        os.kill(trainer, signal.SIGSTOP)  # still training when the second job starts
        try:
            second = start(wd, "--nolock")
            wait_for(lambda: "is being written by another trainer" in text(wd / PACK_LOG),
                     "the second trainer to wait", second)
        finally:
            os.kill(trainer, signal.SIGCONT)
        assert first.wait(timeout=TIMEOUT) == 0, text(first.log_path)[-3000:]
        assert second.wait(timeout=TIMEOUT) == 0, text(second.log_path)[-3000:]
    finally:
        for process in (first, second):
            if process is not None:
                kill_group(process)
    assert_as_uninterrupted(wd, reference)


@pytest.mark.slow
def test_sigint_reaches_the_trainer_which_checkpoints_and_a_rerun_resumes(tmp_path, reference):
    """Ctrl-C (SIGINT to Snakemake's process group): the trainer stops both runs at the end of
    their round with a checkpoint; Snakemake exits with an error; the rerun resumes them."""
    wd = workflow(tmp_path / "wf")
    first = start(wd)
    try:
        wait_for(lambda: "[progress] round 1/" in text(wd / PACK_LOG), "the pack's first round",
                 first)
        trainer = trainer_pid(wd)
        os.kill(trainer, signal.SIGSTOP)  # held, so that the signal comes before its last round
        os.killpg(first.pid, signal.SIGINT)
        os.kill(trainer, signal.SIGCONT)
        assert first.wait(timeout=TIMEOUT) != 0
        wait_for(lambda: not alive(trainer), "the trainer to stop")
    finally:
        kill_group(first)
    log = text(wd / PACK_LOG)
    assert "SIGINT received: every run stops at the end of its round" in log, log
    for member in MEMBERS:
        folder = wd / member
        assert f"{member}: stopped by SIGINT after round " in log, log
        assert (folder / "checkpoint.pt").is_file() and not (folder / "summary.json").exists()
    done = run(wd, "--rerun-incomplete")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for member in MEMBERS:
        assert f"{member}: resuming from its checkpoint" in text(wd / member / "train.log")
    assert_as_uninterrupted(wd, reference)


def recipe() -> list[str]:
    """The commands of the recipe's code block in docs/workflow.md."""
    block = (REPO / "docs/workflow.md").read_text().split("When Snakemake itself was killed",
                                                         1)[1]
    block = block.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.strip() for line in block.splitlines() if line.strip()]


def trainers_in(wd: Path, listing: str) -> list[int]:
    """The process ids `pgrep -af "fedmgda train"` lists that train in ``wd`` (other trainers on
    this machine are not this test's)."""
    pids = []
    for line in listing.splitlines():
        pid = int(line.split()[0])
        try:
            if Path(f"/proc/{pid}/cwd").resolve() == wd.resolve():
                pids.append(pid)
        except OSError:  # ended meanwhile
            pass
    return pids


@pytest.mark.slow
def test_the_recovery_recipe_as_written_ends_with_the_outputs_of_an_uninterrupted_run(
        tmp_path, reference):
    """docs/workflow.md's recipe, run as written: stop the trainers `pgrep` lists (SIGTERM: each
    run checkpoints at the end of its round), `--unlock`, `--rerun-incomplete`."""
    commands = recipe()
    assert [c.split()[:2] for c in commands] == [["pgrep", "-af"], ["snakemake", "…"],
                                                 ["snakemake", "…"]], commands
    wd = workflow(tmp_path / "wf")
    kill_snakemake_alone_mid_pack(wd)
    for command in commands:
        if command.startswith("pgrep"):
            listing = subprocess.run(shlex.split(command), capture_output=True,
                                     text=True).stdout
            orphans = trainers_in(wd, listing)
            assert orphans, f"no trainer of the killed Snakemake still runs: {listing}"
            for pid in orphans:  # "stop each trainer pgrep lists (kill <pid>)"
                os.kill(pid, signal.SIGTERM)
                os.kill(pid, signal.SIGCONT)
            wait_for(lambda stopped=orphans: not any(alive(pid) for pid in stopped),
                     "the trainers to stop")
        else:
            done = run(wd, *command.removeprefix("snakemake …").split())
            assert done.returncode == 0, (command, done.stdout[-3000:], done.stderr[-3000:])
    for member in MEMBERS:
        log = text(wd / member / "train.log")
        assert f"{member}: stopped by SIGTERM after round " in log, log
        assert f"{member}: resuming from its checkpoint" in log, log
    assert_as_uninterrupted(wd, reference)


def waiting_trainer(process: subprocess.Popen, other: int) -> int:
    """The process id of the trainer of ``process``'s job (in its process group, not ``other``)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == other:
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            pid = int(entry.name)
            if b"fedmgda" in argv and b"train" in argv and os.getpgid(pid) == process.pid:
                return pid
        except OSError:  # ended meanwhile
            pass
    raise AssertionError("the job's trainer is not running")


def start_other_trainer(wd: Path, reference: Path, members) -> subprocess.Popen:
    """``fedmgda train`` by hand on ``members`` (the runs' configs of ``reference``) and a longer
    run, held (SIGSTOP) after its first round, the runs unfinished: SIGCONT lets it go on."""
    partition = yaml.safe_load(text(reference / members[0] / "run.yaml"))["partition_file"]
    made = run(wd, target=partition)
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    configs = [text(reference / m / "run.yaml") for m in members]
    longer = {**yaml.safe_load(configs[0]), "rounds": 10_000}
    (wd / "other").mkdir()
    for i, config in enumerate([*configs, yaml.safe_dump(longer)]):
        (wd / "other" / f"run{i}.yaml").write_text(config)
    argv = [sys.executable, "-m", "fedmgda", "train", "--config",
            *[f"other/run{i}.yaml" for i in range(len(members) + 1)],
            "--out", *members, "other/longer"]
    env = dict(os.environ, PYTHONPATH=f"src{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    with open(wd / "other" / "train.log", "w") as log:
        other = subprocess.Popen(argv, cwd=wd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                 start_new_session=True)
    try:
        wait_for(lambda: "[progress] round 1/" in text(wd / "other" / "train.log"),
                 "the other trainer's first round", other)
        os.kill(other.pid, signal.SIGSTOP)
    except BaseException:
        kill_group(other)
        raise
    return other


def stop_other_trainer(wd: Path, other: subprocess.Popen) -> None:
    """The other trainer stops its longer run with a checkpoint and lets go of the folders."""
    os.kill(other.pid, signal.SIGTERM)
    os.kill(other.pid, signal.SIGCONT)
    assert other.wait(timeout=TIMEOUT) == 128 + signal.SIGTERM, text(wd / "other/train.log")


@pytest.mark.slow
@pytest.mark.parametrize(("pack", "stop"), [(1, "SIGTERM to the job's trainer"),
                                            (2, "SIGTERM to Snakemake's process group"),
                                            (2, "SIGINT to Snakemake's process group")])
def test_a_job_stopped_while_it_waits_keeps_the_runs_the_other_trainer_finished(
        tmp_path, reference, pack, stop):
    """Another trainer (``fedmgda train`` by hand, or an orphan) trains the runs of a job together
    with a longer run: it finishes them, then holds their folders on. The job's trainer waits for
    it; stopped then, it finds them finished and leaves them as they are: the job succeeds, and
    Snakemake's cleanup of a failed job does not remove the summary.json the job did not have."""
    wd = workflow(tmp_path / "wf")
    (wd / "recovery.yaml").write_text(yaml.safe_dump(
        {**OVERLAY, "resources": {"default": {**OVERLAY["resources"]["default"], "pack": pack}}}))
    members = MEMBERS[:pack]
    other = start_other_trainer(wd, reference, members)  # the job finds the runs unfinished
    job = None
    try:
        target = f"{members[0]}/summary.json" if pack == 1 else "runs"
        job = start(wd, target=target)
        job_log = wd / (f"{members[0]}/train.log" if pack == 1 else PACK_LOG)
        wait_for(lambda: "is being written by another trainer" in text(job_log),
                 "the job's trainer to wait", job)
        trainer = waiting_trainer(job, other.pid)
        os.kill(other.pid, signal.SIGCONT)
        wait_for(lambda: all((wd / m / "summary.json").is_file() for m in members),
                 "the other trainer to finish the job's runs", other)
        os.kill(other.pid, signal.SIGSTOP)  # finished them, and holds their folders on
        assert all(f"{other.pid}" in text(wd / m / "train.lock") for m in members)
        if stop == "SIGTERM to the job's trainer":
            os.kill(trainer, signal.SIGTERM)
        else:
            os.killpg(job.pid, signal.SIGTERM if stop.startswith("SIGTERM") else signal.SIGINT)
        rc = job.wait(timeout=TIMEOUT)
        log = text(job.log_path)
        assert "Removing output files" not in log, log[-3000:]
        if pack == 1:
            assert rc == 0, log[-3000:]  # the job succeeded
        for m in members:
            assert f"{m}: already trained with this config (summary.json); left as it is" in text(
                job_log), text(job_log)
        stop_other_trainer(wd, other)
    finally:
        for process in (other, job):
            if process is not None:
                kill_group(process)
    assert_as_uninterrupted(wd, reference, members)


@pytest.mark.slow
def test_a_pack_job_stopped_after_the_other_trainer_finished_part_of_it_loses_no_run(
        tmp_path, reference):
    """Another trainer finishes one run of a pack (with a longer run) and holds its folder
    on; the pack's trainer, waiting for it, is stopped with Snakemake's process group: the job
    fails, as its other run is not trained, and Snakemake's cleanup removes the summary.json it
    did not have. The rerun remakes that summary.json from its copy without training the run
    again, trains the other, and ends as an uninterrupted run."""
    wd = workflow(tmp_path / "wf")
    other = start_other_trainer(wd, reference, MEMBERS[:1])  # the job finds that run unfinished
    job = None
    first = wd / MEMBERS[0]
    try:
        job = start(wd)
        wait_for(lambda: "is being written by another trainer" in text(wd / PACK_LOG),
                 "the pack's trainer to wait", job)
        os.kill(other.pid, signal.SIGCONT)
        wait_for(lambda: (first / "summary.json").is_file(),
                 "the other trainer to finish that run", other)
        os.kill(other.pid, signal.SIGSTOP)  # finished it, and holds its folder on
        written = {name: (first / name).stat().st_mtime_ns for name in RESULT_FILES}
        os.killpg(job.pid, signal.SIGTERM)
        assert job.wait(timeout=TIMEOUT) != 0  # its other run is not trained
        # the loss guarded against: Snakemake removes the summary.json the job did not have
        assert "Removing output files" in text(job.log_path), text(job.log_path)[-3000:]
        assert not (first / "summary.json").exists()
        stop_other_trainer(wd, other)
    finally:
        for process in (other, job):
            if process is not None:
                kill_group(process)
    assert (first / "summary.copy.json").is_file()
    done = run(wd)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    restored = f"{MEMBERS[0]}: finished before; summary.json restored from summary.copy.json"
    assert restored in text(wd / PACK_LOG), text(wd / PACK_LOG)
    assert {name: (first / name).stat().st_mtime_ns for name in RESULT_FILES} == written
    assert_as_uninterrupted(wd, reference)
