"""Packed training jobs through Snakemake (config/test.yaml with `pack` set): one job trains a
pack and writes every member's files, a run outside any pack keeps its own job, a killed pack
job resumes every member from its checkpoint, and the results equal the runs trained alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from .conftest import copy_workflow, unactivated_env

# over config/test.yaml (a second --configfile is merged over the first): seed 1 of FedAvg and
# FedMGDA+ share the local training -> one pack; FedProx (mu 0.01) trains alone (rule train)
OVERLAY = {
    "seeds": [1],
    "rounds": 12,
    "run_overrides": {"checkpoint_every": 2},
    "resources": {"default": {"gpu": 0, "mem_mb": 1000, "runtime": 5, "threads": 1, "pack": 4}},
    "experiment_overrides": {"tiny": {"grid": [
        {"algorithm": "fedavg"},
        {"algorithm": "fedmgda_plus", "hparams": {"eta": 1.0, "decay": "1/10"}},
        {"algorithm": "fedprox", "hparams": {"mu": 0.01}},
    ]}},
}
SETTING = "results/test/runs/digits-shards_b10_lr0.05_p0.2_T12_pu2"
FILES = ("run.yaml", "metrics.csv", "per_user.csv", "summary.json", "train.log")


def snakemake(wd: Path, *args: str, **kw) -> subprocess.Popen:
    # the target goes before --configfile (which takes several values)
    return subprocess.Popen([sys.executable, "-m", "snakemake", "--cores", "2", *args,
                             "--configfile",
                             "config/test.yaml", "pack.yaml"], cwd=wd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True, **kw)


@pytest.mark.slow
def test_a_killed_pack_job_resumes_every_run_to_the_results_of_runs_trained_alone(tmp_path):
    wd = copy_workflow(tmp_path / "wf")
    (wd / "pack.yaml").write_text(yaml.safe_dump(OVERLAY))
    # no environment activated: the pack script and its trainer run with this interpreter
    env, decoys_called = unactivated_env(tmp_path)

    dry = snakemake(wd, "runs", "-n", "--quiet", "rules", env=env)
    out = dry.communicate(timeout=120)[0]
    assert dry.returncode == 0, out[-3000:]
    assert ("train_pack_tiny_digits_k1_b10_lr0_05_m0_5_devicecpu_pack1" in out
            and "\ntrain " in out), out

    members = [f"{SETTING}/fedavg/default/clean/seed1",
               f"{SETTING}/fedmgda_plus/decay0.1_eta1/clean/seed1"]
    alone = f"{SETTING}/fedprox/mu0.01/clean/seed1"
    runs = [wd / m for m in members] + [wd / alone]

    first = snakemake(wd, "runs", env=env)
    deadline = time.time() + 300
    while (time.time() < deadline and first.poll() is None
           and not all((r / "checkpoint.pt").exists() for r in runs[:2])):
        time.sleep(0.05)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=60)
    assert all((r / "checkpoint.pt").exists() for r in runs[:2]), first.stdout.read()[-3000:]
    assert not any((r / "summary.json").exists()
                   for r in runs[:2]), "the pack finished before it could be killed"

    assert snakemake(wd, "--unlock", env=env).wait(timeout=120) == 0
    second = snakemake(wd, "runs", "--rerun-incomplete", env=env)
    log = second.communicate(timeout=600)[0]
    assert second.returncode == 0, log[-5000:]
    assert not decoys_called.exists(), decoys_called.read_text()
    configs = [(r / "run.yaml").read_text() for r in runs[:2]]  # written with the outputs
    for r in runs:
        for f in FILES:
            assert (r / f).is_file(), (r, f)
        assert not (r / "checkpoint.pt").exists()
    for r in runs[:2]:  # the pack's log, in each member's folder
        text = (r / "train.log").read_text()
        assert ("pack of 2 runs" in text
                and f"{r.relative_to(wd)}: resuming from its checkpoint" in text)
    assert (wd / "logs/test/packs/tiny/digits_k1_b10_lr0.05_m0.5_devicecpu/pack1.log").is_file()
    assert "pack of" not in (runs[2] / "train.log").read_text()

    # the same runs trained alone, each in its own process
    alone_procs = []
    for i, text in enumerate(configs):
        (tmp_path / f"ref{i}.yaml").write_text(text)
        alone_procs.append(subprocess.Popen([sys.executable, "-m", "fedmgda", "train", "--config",
                                             str(tmp_path / f"ref{i}.yaml"),
                                             "--out", str(tmp_path / f"ref{i}")], cwd=wd,
                                            stdout=subprocess.PIPE,
                                            stderr=subprocess.STDOUT, text=True))
    for i, proc in enumerate(alone_procs):
        assert proc.wait(timeout=600) == 0, proc.stdout.read()
        for name in ("metrics.csv", "per_user.csv"):
            pd.testing.assert_frame_equal(pd.read_csv(runs[i] / name),
                                          pd.read_csv(tmp_path / f"ref{i}" / name),
                                          atol=1e-5)

    # more seeds, and another pack size: only the new runs are trained, the finished ones are kept
    # (a pack job would otherwise retrain its finished members)
    one_per_run = {"default": {**OVERLAY["resources"]["default"], "pack": 1}}
    for overlay, jobs in (({**OVERLAY, "seeds": [1, 2]}, 2),  # seed 2's pack and its FedProx run
                          ({**OVERLAY, "seeds": [1, 2], "resources": one_per_run}, 3)):
        (wd / "pack.yaml").write_text(yaml.safe_dump(overlay))
        dry = snakemake(wd, "runs", "-n", env=env)
        out = dry.communicate(timeout=120)[0]
        assert dry.returncode == 0, out[-3000:]
        made = [line for line in out.splitlines() if line.strip().startswith("output:")
                and "/runs/" in line]
        assert len(made) == jobs and all("/seed2/" in line and "/seed1/" not in line
                                         for line in made), out[-3000:]
    # a finished run whose config changed is trained again (a comment alone changes nothing)
    edited = runs[0] / "run.yaml"
    text = edited.read_text()
    changed = "\n".join("local_lr: 0.123" if line.startswith("local_lr:") else line
                        for line in text.splitlines()) + "\n"
    assert changed != text
    edited.write_text(changed)
    out = snakemake(wd, "runs", "-n", env=env).communicate(timeout=120)[0]
    assert any(f"{members[0]}/summary.json" in line for line in out.splitlines()
               if line.strip().startswith("output:")), out[-3000:]
