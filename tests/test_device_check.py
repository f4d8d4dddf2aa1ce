"""scripts/device_check.py (make device-check): its dry mode runs every part on the CPU, so the
one-shot GPU check cannot rot between the rare sessions that have a GPU."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "device_check.py"
PARTS = ("env", "same_results", "pytest_cuda", "bench_rounds", "fairness")


@pytest.mark.slow
def test_the_dry_mode_runs_every_part(tmp_path):
    """Every part listed in summary.md with a status, all ok; the fairness runs packed as the
    workflow's run folders. An empty --raw-dir: the offline digits data stand in for F-MNIST (the
    same wherever the test runs, and quick)."""
    out, raw = tmp_path / "out", tmp_path / "raw"
    raw.mkdir()
    proc = subprocess.run([sys.executable, str(SCRIPT), "--dry", "--out", str(out), "--work", str(tmp_path / "work"),
                           "--raw-dir", str(raw)], cwd=REPO, capture_output=True, text=True, timeout=600)
    summary = (out / "summary.md").read_text()
    status = {}
    for part in PARTS:
        row = re.search(rf"^\| \d {part} \| (\w+) \|", summary, re.M)
        assert row, f"summary.md lacks part {part}:\n{summary}"
        status[part] = row.group(1)
    assert status == dict.fromkeys(PARTS, "ok"), f"{summary}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0
    stamp = re.search(r"^environment stamp \(cpu\): (.*)$", (out / "same_results.txt").read_text(), re.M)
    assert stamp and json.loads(stamp.group(1))["device"] == "cpu"  # this machine's stamp, for the other machine's comparison
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and all(re.fullmatch(r"[\w.-]+", f) for f in files), files  # what the device gives back
    with tarfile.open(out / "fairness_runs.tar.gz") as tar:
        names = tar.getnames()
    plan = json.loads((tmp_path / "work" / "plan.json").read_text())
    assert len(plan["runs"]) == 4  # fmnist_core's four algorithms, one seed
    for run in plan["runs"]:
        for name in ("run.yaml", "metrics.csv", "per_user.csv", "per_user_final.csv", "summary.json", "train.log"):
            assert f"runs/{run['run']}/{name}" in names


def test_the_real_mode_refuses_a_machine_without_a_gpu(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "out")], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "no CUDA device" in proc.stderr
    assert not (tmp_path / "out").exists()


def load_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("device_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["device_check"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_several_experiments_share_their_runs_and_train_apart_what_cannot_pack(tmp_path):
    """--experiment a,b: the runs both show are planned once, in the grids' order; FedProx and
    MGDA-Prox (a proximal term) get packs of their own, every other run of a seed one pack."""
    import argparse

    check = load_script()
    assert check.experiment_names(" fmnist_table8, fmnist_fig6 ,") == ["fmnist_table8", "fmnist_fig6"]
    raw = tmp_path / "raw"
    raw.mkdir()
    args = argparse.Namespace(config="config/fmnist.yaml", experiment="fmnist_table8,fmnist_fig6", rounds=2, seeds=[1, 5000],
                              device="cpu", raw_dir=str(raw), dry=True)
    registry, by_seed, _ = check.fairness_registry(args)
    keys = by_seed[1]
    assert len(keys) == len(set(keys)) == 7 + 4  # Figure 6's epsilon = 1 is Table 8's FedMGDA, planned once
    assert not set(keys) & set(by_seed[5000])
    groups = check.pack_groups(keys, registry)
    alone = sorted(key.split("/")[1] for group in groups if len(group) == 1 for key in group)
    assert alone == ["fedprox", "mgda_prox"] and len(groups) == 3 and sum(map(len, groups)) == len(keys)
    with pytest.raises(SystemExit, match="has no experiment nope"):
        check.fairness_registry(argparse.Namespace(**{**vars(args), "experiment": "fmnist_core,nope"}))


def test_projection_note_gives_back_to_back_and_the_plan():
    module = load_script()
    text = ("projected wall time of the paper DAG (1599 training runs, batched path, one device, runs back to back): 133.2 h\n"
            "plan: the paper DAG's training jobs on 1 GPU(s) and 16 CPU cores (snakemake --cores 16 --resources gpu=1), ...\n"
            "dataset       runs  jobs  device  back to back h  plan alone h  ends in plan h\n"
            "adult          630    11     cpu            18.8          0.04            0.04\n"
            "all           1519   163                   133.2         92.18           92.18\n")
    assert module.projection_note(text) == ("; paper DAG (1599 runs) projected 133.2 h back to back, "
                                            "92.18 h as planned on 1 GPU(s) and 16 cores (1519 runs)")
    assert module.projection_note(text.split("plan:")[0]) == "; paper DAG (1599 runs) projected 133.2 h back to back"
    assert module.projection_note("") == "; no projection"
