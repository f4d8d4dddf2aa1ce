"""docs/workflow.md's recovery recipe, run as written: Snakemake killed alone (without its process
group) while a trainer runs leaves that trainer running and its own lock; the recipe's commands
(stop the trainers `pgrep` lists, `--unlock`, `--rerun-incomplete`) end with outputs
byte-identical to those of the same run trained without interruption."""

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

# over config/test.yaml: runs long enough to be killed between two checkpoints, of which one is
# built
OVERLAY = {"seeds": [1], "rounds": 100, "run_overrides": {"checkpoint_every": 2}}
RUN = "results/test/runs/digits-shards_b10_lr0.05_p0.2_T100_pu2/fedavg/default/clean/seed1"
SNAKEMAKE = [sys.executable, "-m", "snakemake", f"{RUN}/summary.json", "--cores", "1",
             "--configfile", "config/test.yaml",
             "recovery.yaml"]


def recipe() -> list[str]:
    """The commands of the recipe's code block in docs/workflow.md."""
    text = (REPO / "docs/workflow.md").read_text()
    block = text.split("When Snakemake itself was killed",
                       1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
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


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


@pytest.mark.slow
def test_the_recovery_recipe_as_written_ends_with_the_outputs_of_an_uninterrupted_run(tmp_path):
    commands = recipe()
    assert [c.split()[:2] for c in commands] == [["pgrep", "-af"], ["snakemake", "…"],
                                                 ["snakemake", "…"]], commands
    wd = copy_workflow(tmp_path / "wf")
    (wd / "recovery.yaml").write_text(yaml.safe_dump(OVERLAY))
    run = wd / RUN

    first = subprocess.Popen(SNAKEMAKE, cwd=wd, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 300
        while (time.time() < deadline and first.poll() is None
               and not (run / "checkpoint.pt").exists()):
            time.sleep(0.05)
        assert (run / "checkpoint.pt").exists(), "no checkpoint was written"
        first.kill()  # Snakemake alone: its trainer goes on
        first.wait(timeout=60)

        # the same run without interruption, meanwhile (in a folder of its own, out of the recipe's
        # way)
        (tmp_path / "run.yaml").write_bytes((run / "run.yaml").read_bytes())
        reference = subprocess.Popen([sys.executable, "-m", "fedmgda", "train", "--config",
                                      "run.yaml", "--out", "uninterrupted"],
                                     cwd=tmp_path, stdout=subprocess.DEVNULL)
        orphans = []
        for command in commands:
            if command.startswith("pgrep"):
                listing = subprocess.run(shlex.split(command), capture_output=True,
                                         text=True).stdout
                orphans = trainers_in(wd, listing)
                assert orphans, f"no trainer of the killed Snakemake still runs: {listing}"
                for pid in orphans:  # "stop each trainer pgrep lists (kill <pid>)"
                    os.kill(pid, signal.SIGTERM)
                while any(alive(pid) for pid in orphans):
                    time.sleep(0.05)
                assert not (run / "summary.json").exists()  # stopped between two checkpoints
            else:
                flag = command.removeprefix("snakemake …").split()
                done = subprocess.run(SNAKEMAKE + flag, cwd=wd, capture_output=True, text=True,
                                      timeout=600)
                assert done.returncode == 0, (command, done.stdout[-3000:], done.stderr[-3000:])
        assert reference.wait(timeout=600) == 0
    finally:  # whatever of the first Snakemake's process group is left (a failed test)
        try:
            os.killpg(first.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    log = (run / "train.log").read_text()
    # (pgrep also lists the job's shell, whose command line holds the trainer's)
    assert any(f"took over the lock left by process {pid}, " in log
               for pid in orphans), (orphans, log)
    assert "resuming from its checkpoint (round " in log, log
    for name in ("metrics.csv", "per_user.csv", "per_user_final.csv"):
        assert (run / name).read_bytes() == (tmp_path / "uninterrupted" / name).read_bytes(), name
    resumed, uninterrupted = (json.loads((folder / "summary.json").read_text())
                              for folder in (run, tmp_path / "uninterrupted"))
    assert {k: v for k, v in resumed.items() if k not in ("runtime_s", "environment")} == {
        k: v for k, v in uninterrupted.items() if k not in ("runtime_s", "environment")}
    differ = {k: (resumed["environment"][k], uninterrupted["environment"][k])
              for k in resumed["environment"]
              if resumed["environment"][k] != uninterrupted["environment"][k]}
    # where it ran, not what it computed: the recipe's job may get other cores
    assert set(differ) <= {"threads"}, differ
    assert sorted(p.name for p in run.iterdir()) == ["metrics.csv", "per_user.csv",
                                                     "per_user_final.csv", "run.yaml",
                                                     "summary.json", "train.log"]
