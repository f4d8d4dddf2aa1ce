"""The training jobs' `gpu` resource in a dry run (`snakemake --cores 16 --resources gpu=1 -n`):
with `device: auto` and `gpu: 1` for every dataset, a job whose runs train on a CPU core on a
GPU machine (fedmgda.devices.choose_device: a linear model or MLP) declares gpu=0, so it runs
beside the GPU jobs; a CNN's job declares gpu=1. Packs (train_pack_*) and single runs (train)."""

from __future__ import annotations

import re
import subprocess
import sys

import yaml

from .conftest import copy_workflow

OVERLAY = {
    "device": "auto",
    "seeds": [1],
    "rounds": 3,
    "resources": {"default": {"gpu": 1, "mem_mb": 1000, "runtime": 5, "threads": 1, "pack": 4}},
    "settings": {"digits_cnn": {"dataset": "digits", "partition": "shards", "batch_size": 10,
                                "local_lr": 0.05,
                                "participation": 0.2, "rounds": 4, "model": "cnn_fmnist"}},
    "experiments": {
        # mlp_digits: a CPU core
        "tiny": {"setting": "digits_b10", "grid": "tiny", "seeds": [1, 2]},
        "cnn": {"setting": "digits_cnn", "grid": "tiny", "seeds": [1]},  # a CNN: the GPU
        "solo": {"setting": "digits_cnn",
                 "grid": [{"algorithm": "fedprox", "hparams": {"mu": 0.01}}], "seeds": [1]},
    },
}


def dry_run_resources(wd, overlay: dict) -> dict[str, list[str]]:
    (wd / "gpu.yaml").write_text(yaml.safe_dump(overlay))
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "16", "--resources",
                           "gpu=1", "-n", "runs",
                           "--configfile", "config/test.yaml", "gpu.yaml"], cwd=wd,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    found: dict[str, list[str]] = {}
    for block in re.split(r"\n(?=\[[^\]]+\]\nrule )", proc.stdout):
        rule = re.search(r"^rule (\S+):", block, re.M)
        res = re.search(r"^\s+resources: (.*)$", block, re.M)
        output = re.search(r"^\s+output: (.*)$", block, re.M)
        if rule and res and rule.group(1).startswith("train"):
            found.setdefault(rule.group(1), []).append(res.group(1) + " | "
                                                       + (output.group(1) if output else ""))
    return found


def gpu_of(resources: str) -> int:
    return int(re.search(r"\bgpu=(\d+)", resources).group(1))


def test_cpu_jobs_ask_no_gpu_and_cnn_jobs_one(tmp_path):
    found = dry_run_resources(copy_workflow(tmp_path / "wf"), OVERLAY)
    packs = {rule: [gpu_of(r) for r in res] for rule, res in found.items()
             if rule.startswith("train_pack_")}
    assert packs == {"train_pack_tiny_digits_k1_b10_lr0_05_m0_5_pack1": [0],
                     "train_pack_cnn_digits_modelcnn_fmnist_k1_b10_lr0_05_m0_5_pack1": [1]}, found
    single = found["train"]  # FedProx trains alone: rule train, per run
    assert (len(single) == 1 and gpu_of(single[0]) == 1 and "modelcnn_fmnist" in single[0]
            and "fedprox" in single[0]), single


def test_explicit_device_keeps_the_configured_gpu(tmp_path):
    found = dry_run_resources(copy_workflow(tmp_path / "wf"), {**OVERLAY, "device": "cpu"})
    assert {gpu_of(r) for res in found.values() for r in res} == {1}, found
